//! A tool call's questions for the monitor, from what it touches; reads
//! the filesystem as the agent sees it (the hook runs on the agent's
//! machine): whether a search root is one file or a folder.

use warden_sdk::ActionRequest;
use warden_sdk::proto::authorize_request::Resource;

use crate::touch::{self, Access, Touch};
use crate::{HookError, ToolCall};

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
                Touch::File { access, path } => asks.push(file(*access, path).cwd(&self.cwd), None),
                Touch::Search { root, names } => {
                    let root = touch::join(&self.cwd, root);
                    if is_file(&root) {
                        asks.push(file(Access::Read, &root).cwd(&self.cwd), None);
                    } else {
                        for name in names {
                            asks.pattern(&touch::join(&root, name), &self.cwd);
                        }
                    }
                }
                Touch::Pattern(pattern) => asks.pattern(&touch::join(&self.cwd, pattern), &self.cwd),
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

    /// A read of every file `pattern` matches, its braces written out.
    fn pattern(&mut self, pattern: &str, cwd: &str) {
        for pattern in touch::expand_braces(pattern) {
            let about = format!("files matching {pattern}");
            self.push(ActionRequest::read_pattern(pattern).cwd(cwd), Some(about));
        }
    }
}
