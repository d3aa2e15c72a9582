//! Commands understood, not pattern-matched (pure): an `exec` request becomes
//! the parts it is made of. A shell's `-c` script is parsed (brush-parser)
//! into its simple commands, each a part, and its redirections, which are
//! file parts; a wrapper (`sudo`, `env`, `xargs`, `find -exec`…) is a part
//! and so is what it runs; a known program's file arguments are file parts;
//! what cannot be seen into (`eval`, a variable in command position, syntax
//! that does not parse) is one opaque part. The table of programs is data
//! ([`Programs`], `programs.toml`).

use std::collections::HashSet;

use brush_parser::ast;
use brush_parser::word::{TildeExpr, WordPiece, WordPieceWithSource};

use crate::normalize::{InvalidInput, ResourceInput, clean_path, quote_argv};
use crate::programs::{Effect, Programs};

use self::text::*;

mod arguments;
#[cfg(test)]
mod tests;
mod text;

/// How deep shells, substitutions and wrappers may nest before what is
/// inside is opaque.
const MAX_DEPTH: usize = 8;

/// Scripts longer than this are not parsed (opaque).
const MAX_SCRIPT_BYTES: usize = 64 * 1024;

/// Brackets nested deeper than this are not handed to the parser (opaque),
/// so that its recursion stays bounded.
const MAX_NESTING: usize = 64;

/// Expansions (`${…}`, `$(…)`, `$[…]`, backquotes) nested deeper than this
/// are not handed to the parser (opaque): its word grammar backtracks, and
/// each level of `${a[${a[…]}]}` costs about twenty times the one inside
/// (five levels took seconds), time in which a thread serves nobody else.
const MAX_EXPANSION_NESTING: usize = 4;

/// One part of a command: an `exec` of a simple command, or a file it
/// reads, writes or deletes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Part {
    /// `exec`, `fs.read`, `fs.write` or `fs.delete`.
    pub action: String,
    /// What it acts on, as a harness would send it.
    pub resource: ResourceInput,
    /// An `exec` the monitor cannot see into (`Command.opaque`).
    #[serde(default)]
    pub opaque: bool,
}

impl Part {
    /// A file part whose path is a pattern (a glob, `find`'s `{}`), kept as
    /// written (`File.pattern`).
    pub(crate) fn pattern(&self) -> bool {
        matches!(self.resource, ResourceInput::File { pattern: true, .. })
    }

    /// The part in one line, for tests and corpora: `exec cat a`,
    /// `fs.read /w/a`, with ` opaque` or ` pattern` after it when set.
    pub(crate) fn summary(&self) -> String {
        let target = match &self.resource {
            ResourceInput::Command { argv, .. } => quote_argv(argv),
            ResourceInput::File { path, .. } => path.clone(),
            other => format!("{other:?}"),
        };
        let flag = match (self.opaque, self.pattern()) {
            (true, _) => " opaque",
            (_, true) => " pattern",
            _ => "",
        };
        format!("{} {target}{flag}", self.action)
    }

    /// The part as people read it: `cat /x (exec)`, `/x (fs.read)`.
    pub(crate) fn shown(&self) -> String {
        let what = match &self.resource {
            ResourceInput::Command { argv, .. } => quote_argv(argv),
            ResourceInput::File { path, cwd, .. } if !path.starts_with('/') && !cwd.is_empty() => {
                format!("{cwd}/{path}")
            }
            ResourceInput::File { path, .. } => path.clone(),
            ResourceInput::Http { method, url } => format!("{method} {url}"),
            ResourceInput::Secret { name } => name.clone(),
            ResourceInput::Tool { server, name, .. } => format!("{server}/{name}"),
        };
        let opaque = if self.opaque { ", opaque" } else { "" };
        format!("`{}` ({}{opaque})", crate::redact::text(&what), self.action)
    }
}

/// The parts of the command `argv`, run in `cwd` (empty: unknown) for
/// `user`. Err: more parts than `programs.max_parts` (invalid input, not a
/// truncation).
pub fn parts(argv: &[String], cwd: &str, user: &str, programs: &Programs) -> Result<Vec<Part>, InvalidInput> {
    let mut expander = Expander { programs, user, parts: Vec::new(), functions: HashSet::new(), source: Vec::new() };
    let words: Vec<Word> = argv.iter().map(|a| Word::literal(a)).collect();
    let mut cwd = Cwd::of(cwd);
    expander.command(&words, &mut cwd, 0, false, false);
    if expander.parts.len() > programs.max_parts {
        return Err(InvalidInput::new(
            "resource.command.argv",
            format!("has {} parts (at most {} are decided)", expander.parts.len(), programs.max_parts),
        ));
    }
    Ok(expander.parts)
}

/// Where a command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cwd {
    /// An absolute folder, or empty when the harness sent none.
    Known(String),
    /// One of these, depending on what ran before (`cd x; cat y`: `cd`
    /// may have failed).
    Either(Vec<String>),
    /// After a `cd` the monitor cannot follow.
    Unknown,
}

/// How many folders a command may be in before the monitor stops
/// following them.
const MAX_CWDS: usize = 4;

impl Cwd {
    fn of(cwd: &str) -> Self {
        Cwd::Known(cwd.to_owned())
    }

    fn candidates(&self) -> Option<Vec<&str>> {
        match self {
            Cwd::Known(cwd) => Some(vec![cwd.as_str()]),
            Cwd::Either(cwds) => Some(cwds.iter().map(String::as_str).collect()),
            Cwd::Unknown => None,
        }
    }

    /// `path` made absolute in every folder the command may be in; empty
    /// when that cannot be known.
    fn resolve_all(&self, path: &str) -> Vec<String> {
        if path.starts_with('/') {
            return vec![clean_path(path)];
        }
        match self.candidates() {
            Some(cwds) if cwds.iter().all(|c| c.starts_with('/')) => {
                let mut out: Vec<String> = cwds.iter().map(|c| clean_path(&format!("{c}/{path}"))).collect();
                out.dedup();
                out
            }
            _ => vec![],
        }
    }

    /// `path` made absolute, when exactly one folder is possible.
    fn resolve(&self, path: &str) -> Option<String> {
        match self.resolve_all(path).as_slice() {
            [one] => Some(one.clone()),
            _ => None,
        }
    }

    fn from_all(mut all: Vec<String>) -> Self {
        all.sort();
        all.dedup();
        match all.len() {
            0 => Cwd::Unknown,
            1 => Cwd::Known(all.pop().unwrap_or_default()),
            n if n <= MAX_CWDS => Cwd::Either(all),
            _ => Cwd::Unknown,
        }
    }

    fn as_str(&self) -> &str {
        match self {
            Cwd::Known(cwd) => cwd,
            Cwd::Either(_) | Cwd::Unknown => "",
        }
    }
}

/// A word after the monitor's reading: its text where it is fixed, or as
/// written where it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    text: String,
    /// Its value depends on the shell's state (a variable, a substitution,
    /// a brace expansion): the text is as written.
    dynamic: bool,
    /// It holds an unquoted glob (`*`, `?`, `[`): a pattern of file names.
    glob: bool,
}

impl Word {
    fn literal(text: &str) -> Self {
        Word { text: text.to_owned(), dynamic: false, glob: false }
    }
}

struct Expander<'a> {
    programs: &'a Programs,
    user: &'a str,
    parts: Vec<Part>,
    /// Functions the script defines (their bodies are walked where they
    /// are defined; calling one runs nothing else).
    functions: HashSet<String>,
    /// The text of the script being walked (source positions index it).
    source: Vec<char>,
}

/// Shell builtins with no effect outside the shell (their redirections are
/// still parts).
const QUIET_BUILTINS: &[&str] = &[
    ":",
    "true",
    "false",
    "export",
    "local",
    "declare",
    "typeset",
    "readonly",
    "set",
    "unset",
    "shift",
    "exit",
    "return",
    "break",
    "continue",
    "wait",
    "read",
    "echo",
    "printf",
    "test",
    "[",
    "umask",
    "getopts",
    "let",
    "type",
    "hash",
    "jobs",
    "times",
    "alias",
    "unalias",
    "bind",
    "help",
    "history",
    "logout",
    "mapfile",
    "readarray",
    "suspend",
    "disown",
    "dirs",
];

/// Builtins that run text as code, or change how the rest is read.
const OPAQUE_BUILTINS: &[&str] = &["eval", "source", ".", "trap", "shopt", "enable", "fc", "coproc"];

impl Expander<'_> {
    fn push(&mut self, part: Part) {
        // Past the bound the request is refused anyway; stop collecting.
        if self.parts.len() <= self.programs.max_parts {
            self.parts.push(part);
        }
    }

    fn exec(&mut self, words: &[Word], cwd: &Cwd, opaque: bool) -> usize {
        let argv: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
        self.push(Part {
            action: "exec".into(),
            resource: ResourceInput::Command { argv, cwd: cwd.as_str().to_owned() },
            opaque,
        });
        self.parts.len().saturating_sub(1)
    }

    fn mark_opaque(&mut self, index: usize) {
        if let Some(part) = self.parts.get_mut(index) {
            part.opaque = true;
        }
    }

    fn file(&mut self, effect: Effect, word: &Word, cwd: &Cwd, exec_part: Option<usize>) {
        if word.text == "-" || is_device(&word.text) {
            return;
        }
        let paths = if word.dynamic { vec![] } else { cwd.resolve_all(&word.text) };
        if paths.is_empty() {
            // A file the monitor cannot name: the command is opaque.
            {
                match exec_part {
                    Some(index) => self.mark_opaque(index),
                    None => {
                        let argv = vec![format!("{} {}", effect_word(effect), word.text)];
                        self.push(Part {
                            action: "exec".into(),
                            resource: ResourceInput::Command { argv, cwd: cwd.as_str().to_owned() },
                            opaque: true,
                        });
                    }
                }
                return;
            }
        }
        for path in paths {
            self.push(Part {
                action: effect.action().into(),
                resource: ResourceInput::File { path, cwd: String::new(), pattern: word.glob },
                opaque: false,
            });
        }
    }

    /// One simple command, as words. `from_shell`: it came from a script
    /// (builtins mean something); `extra_args`: a wrapper adds arguments
    /// the monitor cannot see (`xargs`).
    fn command(&mut self, words: &[Word], cwd: &mut Cwd, depth: usize, from_shell: bool, extra_args: bool) {
        let Some(first) = words.first() else { return };
        if depth > MAX_DEPTH || first.dynamic || first.glob || first.text.is_empty() {
            self.exec(words, cwd, true);
            return;
        }
        let name = first.text.rsplit('/').next().unwrap_or_default().to_owned();
        let path = if first.text.contains('/') { cwd.resolve(&first.text) } else { Some(String::new()) };
        let Some(path) = path else {
            // `./tool` where the folder is not known.
            self.exec(words, cwd, true);
            return;
        };
        // Only a program known by name has the table's meaning.
        let known = self.programs.identity(&name, &path) == name;
        let args = words.get(1..).unwrap_or_default();
        if from_shell && path.is_empty() {
            if self.functions.contains(&name) {
                // Its body was read where it was defined; it may `cd`.
                *cwd = Cwd::Unknown;
                return;
            }
            match name.as_str() {
                "cd" | "pushd" | "popd" => {
                    *cwd = match args.iter().find(|w| !w.text.starts_with('-')) {
                        Some(dir) if !dir.dynamic && !dir.glob => Cwd::from_all(cwd.resolve_all(&dir.text)),
                        _ => Cwd::Unknown,
                    };
                    return;
                }
                "exec" | "builtin" => {
                    let rest = skip_options(args, &["-a"].map(String::from).into());
                    self.command(rest, cwd, depth + 1, true, extra_args);
                    return;
                }
                "command" => {
                    if args.first().is_some_and(|w| w.text == "-v" || w.text == "-V") {
                        return;
                    }
                    let rest = skip_options(args, &Default::default());
                    self.command(rest, cwd, depth + 1, true, extra_args);
                    return;
                }
                "export" | "declare" | "typeset" | "local" | "readonly" => {
                    // `export PATH=…` changes what later commands run.
                    if let Some(variable) = args
                        .iter()
                        .filter_map(|w| w.text.split_once('=').map(|(n, _)| n.to_owned()))
                        .find(|n| self.programs.opaque_variable(n))
                    {
                        let at = self.parts.len();
                        self.opaque_from(at, &variable, words, cwd);
                    }
                    return;
                }
                quiet if QUIET_BUILTINS.contains(&quiet) => return,
                opaque if OPAQUE_BUILTINS.contains(&opaque) => {
                    self.exec(words, cwd, true);
                    return;
                }
                _ => {}
            }
        }
        if known && self.programs.shells.contains(&name) {
            self.shell(words, cwd, depth);
            return;
        }
        let index = self.exec(words, cwd, false);
        if !known {
            return;
        }
        if extra_args && (self.programs.files.contains_key(&name) || self.programs.interpreters.contains_key(&name)) {
            self.mark_opaque(index);
        }
        if let Some(interpreter) = self.programs.interpreters.get(&name) {
            let seen: Vec<(&str, bool)> = args.iter().map(|w| (w.text.as_str(), w.dynamic)).collect();
            if interpreter.runs_unseen_code(&seen) {
                self.mark_opaque(index);
            }
        }
        if let Some(wrapper) = self.programs.wrappers.get(&name) {
            if option_values(args, &wrapper.options_with_value)
                .iter()
                .any(|(option, _)| wrapper.opaque_options.contains(*option))
            {
                self.mark_opaque(index);
            }
            let mut rest = skip_options(args, &wrapper.options_with_value);
            if wrapper.assignments {
                let skip = rest.iter().take_while(|w| is_assignment(&w.text)).count();
                let assigned = rest.get(..skip).unwrap_or_default();
                if assigned
                    .iter()
                    .any(|w| w.text.split_once('=').is_some_and(|(n, _)| self.programs.opaque_variable(n)))
                {
                    self.mark_opaque(index);
                }
                rest = rest.get(skip..).unwrap_or_default();
            }
            rest = rest.get(wrapper.operands.min(rest.len())..).unwrap_or_default();
            let default: Vec<Word> = wrapper.default.iter().map(|a| Word::literal(a)).collect();
            let run = if rest.is_empty() { default.as_slice() } else { rest };
            let values = option_values(args, &wrapper.options_with_value);
            // `env -C DIR`, `sudo -D DIR`: the command runs there.
            let mut inner = match values.iter().rev().find(|(option, _)| wrapper.chdir_options.contains(*option)) {
                Some((_, dir)) if !dir.dynamic && !dir.glob => Cwd::from_all(cwd.resolve_all(&dir.text)),
                Some(_) => Cwd::Unknown,
                None => cwd.clone(),
            };
            // `xargs -I {} cat {}`: what stands in for the input is unknown.
            let replaced: Vec<&str> = values
                .iter()
                .filter(|(option, _)| wrapper.replace_options.contains(*option))
                .map(|(_, value)| value.text.as_str())
                .filter(|value| !value.is_empty())
                .collect();
            let run: Vec<Word> = run
                .iter()
                .map(|w| {
                    if replaced.iter().any(|r| w.text.contains(r)) {
                        Word { dynamic: true, ..w.clone() }
                    } else {
                        w.clone()
                    }
                })
                .collect();
            self.command(&run, &mut inner, depth + 1, false, extra_args || wrapper.adds_arguments);
        }
        if name == "find" {
            self.find(args, cwd, depth, index);
        }
        if let Some(sub) = self.programs.subcommands.get(&name) {
            self.subcommand(sub, args, index);
        }
        if let Some(files) = self.programs.files.get(&name).cloned() {
            self.file_args(&files, args, cwd, index);
        }
    }

    /// `bash -c SCRIPT`, `sh -ec SCRIPT`…: the script's commands; the shell
    /// itself is transparent when its script was understood.
    fn shell(&mut self, words: &[Word], cwd: &mut Cwd, depth: usize) {
        let args = words.get(1..).unwrap_or_default();
        let mut script = None;
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            let text = arg.text.as_str();
            if text == "-o" || text == "+o" {
                iter.next();
                continue;
            }
            let is_flags =
                (text.starts_with('-') || text.starts_with('+')) && text.len() > 1 && !text.starts_with("--");
            if is_flags && text.contains('c') {
                script = iter.next();
                // `bash -c -- SCRIPT`: `--` ends the options.
                if script.is_some_and(|w| w.text == "--") {
                    script = iter.next();
                }
                break;
            }
            if is_flags || text.starts_with("--") {
                continue;
            }
            // `bash script.sh`: a file the monitor does not read.
            break;
        }
        match script {
            Some(script) if !script.dynamic => {
                let mut inner = cwd.clone();
                if !self.script(&script.text, &mut inner, depth + 1) {
                    self.exec(words, cwd, true);
                }
            }
            _ => {
                self.exec(words, cwd, true);
            }
        }
    }

    /// Walks a script's commands; `false` when it cannot be read.
    fn script(&mut self, text: &str, cwd: &mut Cwd, depth: usize) -> bool {
        if depth > MAX_DEPTH
            || text.len() > MAX_SCRIPT_BYTES
            || nesting(text) > MAX_NESTING
            || expansion_nesting(text) > MAX_EXPANSION_NESTING
            || unusual_controls(text)
        {
            return false;
        }
        // Two newlines end the script's last line, whatever it ends with (a
        // backslash takes one): brush-parser 0.4 loops without end,
        // allocating until the process dies, when the input ends on the line
        // of a here-document whose tag is empty (`cat <<'' `, `cat <<\r `).
        // To bash they change nothing.
        let text = format!("{text}\n\n");
        let options = parser_options();
        let parsed = std::panic::catch_unwind(|| {
            let mut parser = brush_parser::Parser::new(std::io::Cursor::new(text.as_str()), &options);
            parser.parse_program()
        });
        match parsed {
            Ok(Ok(program)) => {
                let outer = std::mem::replace(&mut self.source, text.chars().collect());
                for list in &program.complete_commands {
                    self.list(list, cwd, depth);
                }
                self.source = outer;
                true
            }
            _ => false,
        }
    }

    /// A list: after `a && b`, `b` runs where `a` left it on success; after
    /// `a || b`, where `a` left it on failure; after `a; b`, either. Only
    /// `cd` leaves two: its folder on success, the one before on failure.
    fn list(&mut self, list: &ast::CompoundList, cwd: &mut Cwd, depth: usize) {
        for item in &list.0 {
            let and_or = &item.0;
            let (mut ok, mut failed) = self.pipeline_outcome(&and_or.first, cwd.clone(), depth);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) => {
                        let (o, f) = self.pipeline_outcome(p, ok.clone(), depth);
                        failed = merge(&failed, &f);
                        ok = o;
                    }
                    ast::AndOr::Or(p) => {
                        let (o, f) = self.pipeline_outcome(p, failed.clone(), depth);
                        ok = merge(&ok, &o);
                        failed = f;
                    }
                }
            }
            *cwd = merge(&ok, &failed);
        }
    }

    /// Where a pipeline leaves the folder when it succeeds and when it fails.
    fn pipeline_outcome(&mut self, pipeline: &ast::Pipeline, mut cwd: Cwd, depth: usize) -> (Cwd, Cwd) {
        let before = cwd.clone();
        self.pipeline(pipeline, &mut cwd, depth);
        let is_cd = match pipeline.seq.as_slice() {
            [ast::Command::Simple(simple)] => {
                simple.word_or_name.as_ref().is_some_and(|w| matches!(w.value.as_str(), "cd" | "pushd" | "popd"))
            }
            _ => false,
        };
        if is_cd && !pipeline.bang { (cwd, before) } else { (cwd.clone(), cwd) }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline, cwd: &mut Cwd, depth: usize) {
        if pipeline.seq.len() == 1 {
            if let Some(command) = pipeline.seq.first() {
                self.ast_command(command, cwd, depth);
            }
            return;
        }
        // Each command of a pipeline runs in a subshell of its own.
        for command in &pipeline.seq {
            let mut inner = cwd.clone();
            self.ast_command(command, &mut inner, depth);
        }
    }

    fn ast_command(&mut self, command: &ast::Command, cwd: &mut Cwd, depth: usize) {
        match command {
            ast::Command::Simple(simple) => self.simple(simple, cwd, depth),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound, cwd, depth);
                if let Some(redirects) = redirects {
                    for redirect in &redirects.0 {
                        self.redirect(redirect, cwd, depth);
                    }
                }
            }
            ast::Command::Function(function) => {
                self.functions.insert(function.fname.value.clone());
                // It runs wherever it is called from: relative paths in it
                // cannot be named.
                let mut inner = Cwd::Unknown;
                self.compound(&function.body.0, &mut inner, depth);
                if let Some(redirects) = &function.body.1 {
                    for redirect in &redirects.0 {
                        self.redirect(redirect, &mut inner, depth);
                    }
                }
            }
            ast::Command::ExtendedTest(test, redirects) => {
                let text = test.to_string();
                if text.contains("$(") || text.contains('`') || text.contains("<(") || text.contains(">(") {
                    self.exec(&[Word::literal("[["), Word::literal(&text)], cwd, true);
                }
                if let Some(redirects) = redirects {
                    for redirect in &redirects.0 {
                        self.redirect(redirect, cwd, depth);
                    }
                }
            }
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand, cwd: &mut Cwd, depth: usize) {
        match compound {
            ast::CompoundCommand::Arithmetic(arithmetic) => {
                // The parser reads `( ( ls ) )` as `((ls))`; bash runs ls in
                // two subshells there. Only `((` written together is
                // arithmetic; otherwise what is inside is a script.
                let at = arithmetic.loc.start.index;
                let written: String = self.source.iter().skip(at).take(2).collect();
                if written == "((" {
                    self.arithmetic(&arithmetic.expr.value, cwd);
                } else {
                    let mut inner = cwd.clone();
                    if !self.script(&arithmetic.expr.value, &mut inner, depth + 1) {
                        self.exec(&[Word::literal("("), Word::literal(&arithmetic.expr.value)], cwd, true);
                    }
                }
            }
            ast::CompoundCommand::ArithmeticForClause(clause) => {
                for expr in [&clause.initializer, &clause.condition, &clause.updater].into_iter().flatten() {
                    self.arithmetic(&expr.value, cwd);
                }
                let mut inner = cwd.clone();
                self.list(&clause.body.list, &mut inner, depth);
                *cwd = merge(cwd, &inner);
            }
            ast::CompoundCommand::BraceGroup(group) => self.list(&group.list, cwd, depth),
            ast::CompoundCommand::Subshell(subshell) => {
                let mut inner = cwd.clone();
                self.list(&subshell.list, &mut inner, depth);
            }
            ast::CompoundCommand::ForClause(clause) => {
                for value in clause.values.iter().flatten() {
                    self.word(value, cwd, depth);
                }
                let mut inner = cwd.clone();
                self.list(&clause.body.list, &mut inner, depth);
                *cwd = merge(cwd, &inner);
            }
            ast::CompoundCommand::CaseClause(clause) => {
                self.word(&clause.value, cwd, depth);
                let mut after = cwd.clone();
                for case in &clause.cases {
                    for pattern in &case.patterns {
                        self.word(pattern, cwd, depth);
                    }
                    if let Some(list) = &case.cmd {
                        let mut inner = cwd.clone();
                        self.list(list, &mut inner, depth);
                        after = merge(&after, &inner);
                    }
                }
                *cwd = after;
            }
            ast::CompoundCommand::IfClause(clause) => {
                self.list(&clause.condition, cwd, depth);
                let mut then = cwd.clone();
                self.list(&clause.then, &mut then, depth);
                let mut after = merge(cwd, &then);
                for other in clause.elses.iter().flatten() {
                    let mut inner = cwd.clone();
                    if let Some(condition) = &other.condition {
                        self.list(condition, &mut inner, depth);
                    }
                    self.list(&other.body, &mut inner, depth);
                    after = merge(&after, &inner);
                }
                *cwd = after;
            }
            ast::CompoundCommand::WhileClause(clause) | ast::CompoundCommand::UntilClause(clause) => {
                let mut inner = cwd.clone();
                self.list(&clause.0, &mut inner, depth);
                self.list(&clause.1.list, &mut inner, depth);
                *cwd = merge(cwd, &inner);
            }
            ast::CompoundCommand::Coprocess(coprocess) => {
                let mut inner = cwd.clone();
                self.ast_command(&coprocess.body, &mut inner, depth);
            }
        }
    }

    /// An arithmetic expression runs only what it substitutes; one that
    /// could be read as commands instead (`;`) is not seen into either.
    fn arithmetic(&mut self, expr: &str, cwd: &Cwd) {
        if expr.contains("$(") || expr.contains('`') || expr.contains(';') {
            self.exec(&[Word::literal("(("), Word::literal(expr)], cwd, true);
        }
    }

    fn simple(&mut self, simple: &ast::SimpleCommand, cwd: &mut Cwd, depth: usize) {
        let mut words = Vec::new();
        let mut redirects = Vec::new();
        for item in simple.prefix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, &mut words, &mut redirects, cwd, depth);
        }
        if let Some(name) = &simple.word_or_name {
            let word = self.word(name, cwd, depth);
            words.push(word);
        }
        for item in simple.suffix.iter().flat_map(|s| s.0.iter()) {
            self.item(item, &mut words, &mut redirects, cwd, depth);
        }
        for redirect in redirects {
            self.redirect(redirect, &mut cwd.clone(), depth);
        }
        // `PATH=.:$PATH ls`, `GIT_CONFIG_COUNT=1 … git log`: a variable that
        // changes what a command runs makes it opaque.
        let assigned: Vec<String> = simple
            .prefix
            .iter()
            .flat_map(|p| p.0.iter())
            .filter_map(|item| match item {
                ast::CommandPrefixOrSuffixItem::AssignmentWord(assignment, _) => match &assignment.name {
                    ast::AssignmentName::VariableName(name) | ast::AssignmentName::ArrayElementName(name, _) => {
                        Some(name.clone())
                    }
                },
                _ => None,
            })
            .collect();
        let before = self.parts.len();
        self.command(&words, cwd, depth, true, false);
        if let Some(variable) = assigned.iter().find(|name| self.programs.opaque_variable(name)) {
            self.opaque_from(before, variable, &words, cwd);
        }
    }

    /// Marks what a command added from `before` on as opaque, because of
    /// `variable`; a command that added nothing (an assignment alone, a
    /// builtin) becomes an opaque part of its own.
    fn opaque_from(&mut self, before: usize, variable: &str, words: &[Word], cwd: &Cwd) {
        match self.parts.get_mut(before) {
            Some(part) if part.action == "exec" => part.opaque = true,
            _ => {
                let mut shown = vec![Word::literal(&format!("{variable}=…"))];
                shown.extend(words.iter().cloned());
                self.exec(&shown, cwd, true);
            }
        }
    }

    /// One word, assignment, redirection or process substitution of a
    /// simple command.
    fn item<'i>(
        &mut self,
        item: &'i ast::CommandPrefixOrSuffixItem,
        words: &mut Vec<Word>,
        redirects: &mut Vec<&'i ast::IoRedirect>,
        cwd: &Cwd,
        depth: usize,
    ) {
        match item {
            ast::CommandPrefixOrSuffixItem::IoRedirect(redirect) => redirects.push(redirect),
            ast::CommandPrefixOrSuffixItem::Word(word) => {
                let word = self.word(word, cwd, depth);
                words.push(word);
            }
            ast::CommandPrefixOrSuffixItem::AssignmentWord(assignment, word) => {
                match &assignment.value {
                    ast::AssignmentValue::Scalar(value) => {
                        self.word(value, cwd, depth);
                    }
                    ast::AssignmentValue::Array(values) => {
                        for (key, value) in values {
                            if let Some(key) = key {
                                self.word(key, cwd, depth);
                            }
                            self.word(value, cwd, depth);
                        }
                    }
                }
                // After the command name, `NAME=value` is an argument.
                if !words.is_empty() {
                    let word = self.word(word, cwd, depth);
                    words.push(word);
                }
            }
            ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, subshell) => {
                let mut inner = cwd.clone();
                self.list(&subshell.list, &mut inner, depth);
                words.push(Word { text: "/dev/fd/63".into(), dynamic: true, glob: false });
            }
        }
    }

    fn redirect(&mut self, redirect: &ast::IoRedirect, cwd: &mut Cwd, depth: usize) {
        match redirect {
            ast::IoRedirect::File(_, kind, target) => match target {
                ast::IoFileRedirectTarget::Filename(word) => {
                    let word = self.word(word, cwd, depth);
                    let effects: &[Effect] = match kind {
                        ast::IoFileRedirectKind::Read => &[Effect::Read],
                        ast::IoFileRedirectKind::ReadAndWrite => &[Effect::Read, Effect::Write],
                        ast::IoFileRedirectKind::Write
                        | ast::IoFileRedirectKind::Append
                        | ast::IoFileRedirectKind::Clobber => &[Effect::Write],
                        ast::IoFileRedirectKind::DuplicateInput | ast::IoFileRedirectKind::DuplicateOutput => &[],
                    };
                    for effect in effects {
                        self.file(*effect, &word, cwd, None);
                    }
                }
                ast::IoFileRedirectTarget::Duplicate(word) => {
                    let word = self.word(word, cwd, depth);
                    // `>&2`, `>&-` duplicate descriptors; `>&file` writes a file.
                    let fd = word.text.trim_end_matches('-');
                    if !fd.chars().all(|c| c.is_ascii_digit()) {
                        let effect = match kind {
                            ast::IoFileRedirectKind::DuplicateInput => Effect::Read,
                            _ => Effect::Write,
                        };
                        self.file(effect, &word, cwd, None);
                    }
                }
                ast::IoFileRedirectTarget::Fd(_) => {}
                ast::IoFileRedirectTarget::ProcessSubstitution(_, subshell) => {
                    let mut inner = cwd.clone();
                    self.list(&subshell.list, &mut inner, depth);
                }
            },
            ast::IoRedirect::HereDocument(_, doc) => {
                // Here-documents are data; an unquoted one still runs its
                // substitutions.
                if doc.requires_expansion
                    && let Ok(pieces) = brush_parser::word::parse_heredoc(&doc.doc.value, &parser_options())
                {
                    self.pieces(&pieces, cwd, depth, false);
                }
            }
            ast::IoRedirect::HereString(_, word) => {
                self.word(word, cwd, depth);
            }
            ast::IoRedirect::OutputAndError(word, _) => {
                let word = self.word(word, cwd, depth);
                self.file(Effect::Write, &word, cwd, None);
            }
        }
    }

    /// A word's value as far as it is fixed; its command substitutions are
    /// walked (they run).
    fn word(&mut self, word: &ast::Word, cwd: &Cwd, depth: usize) -> Word {
        let text = &word.value;
        let unquoted_braces = has_brace_expansion(text);
        let substitutes = ["$(", "`", "<(", ">("].iter().any(|m| text.contains(m));
        match brush_parser::word::parse(text, &parser_options()) {
            Ok(pieces) => {
                let mut out = self.pieces(&pieces, cwd, depth, false);
                out.dynamic |= unquoted_braces;
                if out.dynamic {
                    out.text = text.clone();
                }
                // A substitution inside a parameter expansion
                // (`${X:-$(rm -rf ~)}`) runs, and the word pieces do not
                // show it: what cannot be seen into is opaque.
                if substitutes && text.contains("${") {
                    self.exec(&[Word::literal("${"), Word::literal(text)], cwd, true);
                }
                out
            }
            Err(_) => {
                if substitutes {
                    self.exec(&[Word::literal(text)], cwd, true);
                }
                Word { text: text.clone(), dynamic: true, glob: false }
            }
        }
    }

    fn pieces(&mut self, pieces: &[WordPieceWithSource], cwd: &Cwd, depth: usize, quoted: bool) -> Word {
        let mut out = Word { text: String::new(), dynamic: false, glob: false };
        for piece in pieces {
            match &piece.piece {
                WordPiece::Text(text) => {
                    if !quoted && is_glob(text) {
                        out.glob = true;
                    }
                    out.text.push_str(text);
                }
                WordPiece::SingleQuotedText(text) => out.text.push_str(text),
                // `$'\x6dain'` is `main` to bash: decoded, or not seen into.
                WordPiece::AnsiCQuotedText(text) => match decode_ansi_c(text) {
                    Some(decoded) => out.text.push_str(&decoded),
                    None => {
                        out.dynamic = true;
                        out.text.push_str(text);
                    }
                },
                WordPiece::EscapeSequence(text) => out.text.push_str(text.strip_prefix('\\').unwrap_or(text)),
                WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    let inner = self.pieces(inner, cwd, depth, true);
                    out.text.push_str(&inner.text);
                    out.dynamic |= inner.dynamic;
                }
                WordPiece::TildeExpansion(tilde) => {
                    let home = match tilde {
                        TildeExpr::Home => self.programs.home_of(self.user),
                        TildeExpr::UserHome(user) => self.programs.home_of(user),
                        _ => None,
                    };
                    match home {
                        Some(home) => out.text.push_str(&home),
                        None => {
                            out.dynamic = true;
                            out.text.push('~');
                        }
                    }
                }
                WordPiece::ParameterExpansion(_) => out.dynamic = true,
                WordPiece::ArithmeticExpression(expr) => {
                    out.dynamic = true;
                    self.arithmetic(&expr.value, cwd);
                }
                WordPiece::CommandSubstitution(script) | WordPiece::BackquotedCommandSubstitution(script) => {
                    out.dynamic = true;
                    let mut inner = cwd.clone();
                    if !self.script(script, &mut inner, depth + 1) {
                        self.exec(&[Word::literal("$("), Word::literal(script)], cwd, true);
                    }
                }
            }
        }
        out
    }
}
