//! A tool call's questions for the monitor, from what it touches; reads
//! the filesystem as the agent sees it (the hook runs on the agent's
//! machine): whether a search root is one file or a folder, and where the
//! links along a path lead. A file, or the folder a pattern starts in, is
//! asked about as written and, when its links lead elsewhere, where they
//! lead; every answer must be an allow.

use std::path::Path;

use warden_sdk::ActionRequest;
use warden_sdk::proto::authorize_request::Resource;

use crate::touch::{self, Access, Touch};
use crate::{HookError, ToolCall, links};

/// The most questions one tool call is asked as; past it the call is
/// refused, saying so.
pub const MAX_ASKS: usize = 64;

/// One question for the monitor.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The request, with the call's folder and justification.
    pub request: ActionRequest,
    /// What the agent is told the question was about when the tool's name
    /// alone does not say (`files matching /w/**/.env`).
    pub about: Option<String>,
}

impl ToolCall {
    /// Every question the call is asked as, in order, each once. Every one
    /// must be allowed for the tool to run.
    pub fn asks(&self) -> Result<Vec<Ask>, HookError> {
        let mut asks = Asks::default();
        for touched in &self.touches {
            match touched {
                // Complete as the parser made it (a command's own folder).
                Touch::Request(request) => asks.push(request.clone(), None),
                Touch::File { access, path } => asks.file(*access, path, &self.cwd)?,
                Touch::Search { root, names } => {
                    let root = touch::join(&self.cwd, root);
                    if is_file(&root) {
                        asks.file(Access::Read, &root, &self.cwd)?;
                    } else {
                        for name in names {
                            asks.pattern(&touch::join(&root, name), &self.cwd)?;
                        }
                    }
                }
                Touch::Pattern(pattern) => asks.pattern(&touch::join(&self.cwd, pattern), &self.cwd)?,
                Touch::Url(url) => asks.push(ActionRequest::http("GET", url), Some(url.clone())),
            }
        }
        if asks.0.len() > MAX_ASKS {
            return Err(HookError::Refused(format!(
                "`{}` reads {} files or patterns, more than the {MAX_ASKS} Warden's hook asks about",
                self.tool,
                asks.0.len()
            )));
        }
        Ok(asks
            .0
            .into_iter()
            .map(|(_, ask)| Ask { request: ask.request.justification(&self.justification), about: ask.about })
            .collect())
    }
}

fn file(access: Access, path: &str) -> ActionRequest {
    match access {
        Access::Read => ActionRequest::read_file(path),
        Access::Write => ActionRequest::write_file(path),
        Access::Delete => ActionRequest::delete_file(path),
    }
}

/// Whether `path` names something that is not a folder. What cannot be
/// told (missing, unreadable) counts as a folder: its search reads
/// everything below it.
fn is_file(path: &str) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_dir())
}

/// The questions so far, each kept once (by action and resource).
#[derive(Default)]
struct Asks(Vec<((String, Option<Resource>), Ask)>);

impl Asks {
    fn push(&mut self, request: ActionRequest, about: Option<String>) {
        let proto = request.clone().into_proto_request();
        let key = (proto.action, proto.resource);
        if !self.0.iter().any(|(seen, _)| *seen == key) {
            self.0.push((key, Ask { request, about }));
        }
    }

    /// `path` as written and, when its links lead elsewhere, where they
    /// lead.
    fn file(&mut self, access: Access, path: &str, cwd: &str) -> Result<(), HookError> {
        self.push(file(access, path).cwd(cwd), None);
        if let Some(target) = leads_to(&touch::join(cwd, path))? {
            let about = format!("{path} leads to {target}");
            self.push(file(access, &target).cwd(cwd), Some(about));
        }
        Ok(())
    }

    /// A read of every file `pattern` matches, its braces written out; and
    /// of the same names where the links of the folder it starts in lead.
    fn pattern(&mut self, pattern: &str, cwd: &str) -> Result<(), HookError> {
        for pattern in touch::expand_braces(pattern) {
            let about = format!("files matching {pattern}");
            self.push(ActionRequest::read_pattern(&pattern).cwd(cwd), Some(about));
            let (folder, names) = split_fixed(&pattern);
            if let Some(target) = leads_to(folder)? {
                let resolved = if names.is_empty() { target } else { touch::join(&target, names) };
                let about = format!("files matching {pattern}, {folder} leading to {resolved}");
                self.push(ActionRequest::read_pattern(resolved).cwd(cwd), Some(about));
            }
        }
        Ok(())
    }
}

/// Where the absolute `path` leads, when that is not the path as written
/// (cleaned). A relative path (no folder to put it in) is left to the
/// monitor, which refuses it.
fn leads_to(path: &str) -> Result<Option<String>, HookError> {
    let path = Path::new(path);
    if !path.is_absolute() {
        return Ok(None);
    }
    let target = links::resolve(path).map_err(|e| HookError::Refused(e.to_string()))?;
    if target == links::clean(path) {
        return Ok(None);
    }
    match target.to_str() {
        Some(target) => Ok(Some(target.to_owned())),
        None => Err(HookError::Refused(format!("`{}` leads to a path that is not UTF-8", path.display()))),
    }
}

/// A pattern's folder before its first wildcard, and the rest
/// (`/w/src/**/*.rs` is `/w/src` and `**/*.rs`); without a wildcard, all
/// of it and nothing.
fn split_fixed(pattern: &str) -> (&str, &str) {
    let Some(wildcard) = pattern.find(['*', '?', '[', '{']) else { return (pattern, "") };
    match pattern.get(..wildcard).and_then(|fixed| fixed.rfind('/')) {
        Some(0) => ("/", pattern.get(1..).unwrap_or_default()),
        Some(at) => (pattern.get(..at).unwrap_or(pattern), pattern.get(at + 1..).unwrap_or_default()),
        None => ("", pattern),
    }
}
