//! What the monitor knows about programs, read from `programs.toml` in the
//! policy folder (pure): where system programs live (program identity),
//! which programs are shells, which run another command (wrappers), which
//! read, write or delete the files they are given, and which take
//! subcommands. The security team extends it like the policies; a folder
//! without it gets [`Programs::default`].

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

/// The file's name in the policy folder.
pub(crate) const PROGRAMS_FILE: &str = "programs.toml";

/// What happens to a file a program is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Effect {
    /// `fs.read`.
    Read,
    /// `fs.write`.
    Write,
    /// `fs.delete`.
    Delete,
}

impl Effect {
    /// The Cedar action id.
    pub(crate) fn action(self) -> &'static str {
        match self {
            Effect::Read => "fs.read",
            Effect::Write => "fs.write",
            Effect::Delete => "fs.delete",
        }
    }
}

/// Which of a program's operands (the arguments that are not options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Operands {
    /// Every operand.
    All,
    /// The last one.
    Last,
    /// Every one but the last.
    AllButLast,
}

impl Operands {
    /// Whether operand `index` of `count` is meant.
    pub(crate) fn covers(self, index: usize, count: usize) -> bool {
        match self {
            Operands::All => true,
            Operands::Last => index + 1 == count,
            Operands::AllButLast => index + 1 < count,
        }
    }
}

/// The options of a program that take a value (`-u root`, `-uroot`,
/// `--user=root`).
pub(crate) type Options = BTreeSet<String>;

/// A program that runs another command: `sudo`, `env`, `timeout`, `xargs`…
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Wrapper {
    /// Its own options that take a value.
    #[serde(default)]
    pub(crate) options_with_value: Options,
    /// `NAME=value` words before the command (as `env` takes).
    #[serde(default)]
    pub(crate) assignments: bool,
    /// Operands of its own before the command (`timeout 5 cmd`: 1).
    #[serde(default)]
    pub(crate) operands: usize,
    /// The command it runs when none is given (`xargs`: `echo`).
    #[serde(default)]
    pub(crate) default: Vec<String>,
    /// It adds arguments the monitor cannot see (`xargs`): the command's
    /// file operands are then unknown.
    #[serde(default)]
    pub(crate) adds_arguments: bool,
    /// Options whose value is the folder the command runs in (`env -C`).
    #[serde(default)]
    pub(crate) chdir_options: Options,
    /// Options whose value stands in the command for what the wrapper
    /// reads (`xargs -I {}`): such an argument is unknown.
    #[serde(default)]
    pub(crate) replace_options: Options,
    /// Options whose value is a command line the wrapper splits itself
    /// (`env -S 'python3 -c …'`): what it runs cannot be seen, so the
    /// command is opaque.
    #[serde(default)]
    pub(crate) opaque_options: Options,
}

/// A program that runs code it is given (`python3`, `node`, `perl`, `awk`).
/// Code on its command line (`python3 -c CODE`) or read from standard
/// input (`echo CODE | python3`, `python3 -`) is a script the monitor
/// cannot read, so such a command is opaque and policies send it to a
/// person. A script file (`python3 build.py`) is the program's own `exec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Interpreter {
    /// Options whose value is code (`-c`, `-e`, `--eval`): given as
    /// `-c CODE`, `-cCODE`, `--eval=CODE`, or inside a cluster of short
    /// options (`perl -ne CODE`, `python3 -Sc CODE`).
    #[serde(default)]
    pub(crate) code_options: Options,
    /// Its other options that take a value (skipped, not taken for the
    /// script).
    #[serde(default)]
    pub(crate) options_with_value: Options,
    /// Options after which the rest of the command line is the module's
    /// it runs, not the interpreter's (`python3 -m MODULE ARGS`).
    #[serde(default)]
    pub(crate) ends_options: Options,
    /// First operands that mean code that is no script file: `-`
    /// (standard input), a subcommand such as `deno eval`.
    #[serde(default)]
    pub(crate) code_operands: BTreeSet<String>,
    /// With no script operand the program comes from standard input.
    #[serde(default)]
    pub(crate) stdin_without_script: bool,
    /// The first operand is the program's text (`awk PROGRAM FILE…`),
    /// unless one of `program_files` names a file for it (`awk -f`).
    #[serde(default)]
    pub(crate) program_operand: bool,
    /// Options whose value is a file holding the program (`awk -f FILE`).
    #[serde(default)]
    pub(crate) program_files: Options,
    /// Words whose presence in the program's text (`program_operand`)
    /// lets it run commands or write files (`system`, `|`, `>`): the
    /// command is opaque only then, so that `awk '{print $1}' f` is not.
    /// Empty: any program text is opaque.
    #[serde(default)]
    pub(crate) program_runs_with: BTreeSet<String>,
}

impl Interpreter {
    /// Whether `args` (without argv[0], each with whether the monitor
    /// cannot see it) make it run code the monitor cannot read: a code
    /// option anywhere before `--` or an `ends_options` option (an
    /// argument of the script that looks like one is taken as one: a
    /// person then decides, which is the safe mistake), a code operand,
    /// or no script at all when it then reads standard input. A word the
    /// monitor cannot see before the script could be code too. An option's
    /// value is never a word that starts with `-`, so that an option
    /// missing from `options_with_value` cannot hide the code option after
    /// it.
    pub(crate) fn runs_unseen_code(&self, args: &[(&str, bool)]) -> bool {
        let takes_value =
            |option: &str| self.options_with_value.contains(option) || self.program_files.contains(option);
        let mut script: Option<&str> = None;
        let mut program_file = false;
        let mut module = false;
        let mut at = 0;
        'words: while let Some(&(text, dynamic)) = args.get(at) {
            at += 1;
            if dynamic {
                if script.is_none() {
                    return true;
                }
                continue;
            }
            if text == "--" {
                if script.is_none() {
                    match args.get(at) {
                        Some(&(_, true)) => return true,
                        Some(&(operand, false)) => script = Some(operand),
                        None => {}
                    }
                }
                break;
            }
            if !text.starts_with('-') || text == "-" {
                script.get_or_insert(text);
                continue;
            }
            let (option, attached) = match text.split_once('=').filter(|_| text.starts_with("--")) {
                Some((option, _)) => (option, true),
                None => (text, false),
            };
            let letters: Vec<(usize, char)> = if text.starts_with("--")
                || takes_value(option)
                || self.code_options.contains(option)
                || self.ends_options.contains(option)
            {
                Vec::new()
            } else {
                text.char_indices().skip(1).collect()
            };
            // The whole word as one option, or each letter of a cluster
            // (`-Sc`, `-ne`, `-cCODE`, `-mmodule`), the value after a
            // letter that takes one.
            let mut options: Vec<(String, bool)> = vec![(option.to_owned(), attached)];
            for (index, letter) in letters {
                let rest = index + letter.len_utf8() < text.len();
                options.push((format!("-{letter}"), rest));
            }
            for (option, attached) in options {
                if self.code_options.contains(&option) {
                    return true;
                }
                if self.ends_options.contains(&option) {
                    module = true;
                    break 'words;
                }
                if takes_value(&option) {
                    program_file |= self.program_files.contains(&option);
                    if !attached && args.get(at).is_some_and(|&(next, _)| !next.starts_with('-')) {
                        at += 1;
                    }
                    break;
                }
            }
        }
        match script {
            Some(operand) => self.code_operand(operand, program_file),
            None => !module && !program_file && (self.stdin_without_script || self.program_operand),
        }
    }

    /// Whether the first operand makes it run unseen code: one of
    /// `code_operands` (`-`, standard input; `deno eval`), or the program's
    /// text when that is an operand.
    fn code_operand(&self, operand: &str, program_file: bool) -> bool {
        if self.code_operands.contains(operand) {
            return true;
        }
        if self.program_operand && !program_file {
            return self.program_runs_with.is_empty()
                || self.program_runs_with.iter().any(|word| operand.contains(word.as_str()));
        }
        false
    }
}

/// The files a program reads, writes or deletes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileArgs {
    /// Its options that take a value.
    #[serde(default)]
    pub(crate) options_with_value: Options,
    /// Operands read.
    pub(crate) reads: Option<Operands>,
    /// Operands written.
    pub(crate) writes: Option<Operands>,
    /// Operands deleted.
    pub(crate) deletes: Option<Operands>,
    /// Leading operands that are not files (`grep PATTERN FILE…`: 1).
    #[serde(default)]
    pub(crate) skip: usize,
    /// Options that take the place of the skipped operands (`grep -e
    /// PATTERN`): with one of them given, no operand is skipped.
    #[serde(default)]
    pub(crate) skip_unless: BTreeSet<String>,
    /// Options whose value is a file (`sort -o FILE`: write).
    #[serde(default)]
    pub(crate) option_files: BTreeMap<String, Effect>,
    /// `NAME=FILE` operands (`dd if=… of=…`).
    #[serde(default)]
    pub(crate) assignment_files: BTreeMap<String, Effect>,
    /// Options that make the read operands written too (`sed -i`).
    #[serde(default)]
    pub(crate) in_place: BTreeSet<String>,
    /// Options that make it read folders recursively (`grep -r`, `cp -a`):
    /// a read operand is then also a read of everything below it
    /// (`DIR/**/*`, a pattern), as `find` is, so that rules about hidden
    /// and credential files apply. Also inside a cluster (`-rn`).
    #[serde(default)]
    pub(crate) recursive: BTreeSet<String>,
    /// Options whose given value makes it recursive (`grep -d recurse`).
    #[serde(default)]
    pub(crate) recursive_when: BTreeMap<String, String>,
    /// It always reads folders recursively (`rg`, `tar c`).
    #[serde(default)]
    pub(crate) always_recursive: bool,
    /// What a recursive read with no file operand reads (`grep -r x`,
    /// `rg x`: `.`).
    #[serde(default)]
    pub(crate) recursive_default: Option<String>,
}

/// A program whose first operand is a subcommand (`git push`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Subcommands {
    /// The options before the subcommand that take a value.
    #[serde(default)]
    pub(crate) options_with_value: Options,
    /// The subcommands the monitor knows; any other (an alias, a plugin)
    /// may do anything, so it is opaque.
    #[serde(default)]
    pub(crate) known: BTreeSet<String>,
    /// Per subcommand, its long options: an unambiguous prefix (`--forc`,
    /// which the program accepts) is shown to policies as the whole option.
    #[serde(default)]
    pub(crate) long_options: BTreeMap<String, BTreeSet<String>>,
    /// Per subcommand, the letters of its short options that take no
    /// value: a cluster of them (`-vuf`) is shown one by one (`-v -u -f`).
    #[serde(default)]
    pub(crate) short_flags: BTreeMap<String, String>,
    /// Per subcommand, its options that take a value (so that the value is
    /// not counted as an operand).
    #[serde(default)]
    pub(crate) options_with_value_of: BTreeMap<String, BTreeSet<String>>,
    /// Per subcommand, the operands it assumes when they are left out
    /// (`git push` with no refspec pushes `HEAD`): shown as if written.
    #[serde(default)]
    pub(crate) default_operands: BTreeMap<String, Vec<String>>,
    /// Per subcommand, options that choose what it acts on themselves
    /// (`git push --all`): with one of them, no operand is assumed.
    #[serde(default)]
    pub(crate) no_defaults_with: BTreeMap<String, BTreeSet<String>>,
    /// Subcommands whose arguments must be seen: a variable or a
    /// substitution among them makes the part opaque.
    #[serde(default)]
    pub(crate) exact: BTreeSet<String>,
}

/// The table, as `programs.toml` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Programs {
    /// Directories of system programs: a program run by a path in one of
    /// them is `Program::"<name>"`; by any other path, `Program::"<path>"`.
    #[serde(default = "default_system_dirs")]
    pub(crate) system_dirs: BTreeSet<String>,
    /// Shells whose `-c` script is read (`sh -c`, `bash -lc`…).
    #[serde(default = "default_shells")]
    pub(crate) shells: BTreeSet<String>,
    /// The folder `~` stands for, `{user}` the request's user (`~bob`: bob's).
    /// Without it, `~` cannot be seen into.
    #[serde(default)]
    pub(crate) home: Option<String>,
    /// The most parts one request may have (more is invalid input).
    #[serde(default = "default_max_parts")]
    pub max_parts: usize,
    /// Variables that change what a command runs (`PATH`, `LD_PRELOAD`,
    /// `GIT_*`): a command that sets one, or a script that exports one, is
    /// opaque. A trailing `*` names every variable with that prefix.
    #[serde(default)]
    pub(crate) opaque_variables: BTreeSet<String>,
    /// Programs that run another command.
    #[serde(default)]
    pub(crate) wrappers: BTreeMap<String, Wrapper>,
    /// Programs' file arguments.
    #[serde(default)]
    pub(crate) files: BTreeMap<String, FileArgs>,
    /// Programs with subcommands.
    #[serde(default)]
    pub(crate) subcommands: BTreeMap<String, Subcommands>,
    /// Programs that run code they are given.
    #[serde(default)]
    pub(crate) interpreters: BTreeMap<String, Interpreter>,
}

fn default_system_dirs() -> BTreeSet<String> {
    ["/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"].map(String::from).into()
}

fn default_shells() -> BTreeSet<String> {
    ["sh", "bash", "dash", "zsh"].map(String::from).into()
}

fn default_max_parts() -> usize {
    64
}

impl Default for Programs {
    /// A policy folder without `programs.toml`: the usual system program
    /// directories and shells, no wrappers or file arguments.
    fn default() -> Self {
        Self {
            system_dirs: default_system_dirs(),
            shells: default_shells(),
            home: None,
            max_parts: default_max_parts(),
            opaque_variables: BTreeSet::new(),
            wrappers: BTreeMap::new(),
            files: BTreeMap::new(),
            subcommands: BTreeMap::new(),
            interpreters: BTreeMap::new(),
        }
    }
}

impl Programs {
    /// Reads `programs.toml`; the message names the key that is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let programs: Programs = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(dir) = programs.system_dirs.iter().find(|d| !d.starts_with('/')) {
            return Err(format!("system_dirs: `{dir}` is not an absolute path"));
        }
        if programs.max_parts == 0 {
            return Err("max_parts: must be at least 1".into());
        }
        Ok(programs)
    }

    /// The program's identity for policies: `name` when it was run by name
    /// or from a system program directory, else the absolute `path` it was
    /// run by (`./ls` in a workspace is not `ls`).
    pub(crate) fn identity(&self, name: &str, path: &str) -> String {
        if path.is_empty() {
            return name.to_owned();
        }
        let dir = match path.rfind('/') {
            Some(0) => "/",
            Some(i) => path.get(..i).unwrap_or(path),
            None => "",
        };
        if self.system_dirs.contains(dir) { name.to_owned() } else { path.to_owned() }
    }

    /// Whether setting `name` changes what commands run (`opaque_variables`).
    pub(crate) fn opaque_variable(&self, name: &str) -> bool {
        self.opaque_variables.iter().any(|v| match v.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => v == name,
        })
    }

    /// The home folder of `user`, when configured.
    pub(crate) fn home_of(&self, user: &str) -> Option<String> {
        self.home.as_ref().map(|h| h.replace("{user}", user))
    }
}

/// The option and its value when `arg` holds both: `--user=root`, or
/// `-uroot` for a short option of `with_value`.
pub(crate) fn attached<'a>(with_value: &Options, arg: &'a str) -> Option<(&'a str, &'a str)> {
    if let Some((name, value)) = arg.split_once('=')
        && name.starts_with("--")
    {
        return Some((name, value));
    }
    if arg.len() > 2 && arg.starts_with('-') && !arg.starts_with("--") && arg.is_char_boundary(2) {
        let (name, value) = arg.split_at(2);
        if with_value.contains(name) {
            return Some((name, value));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_follows_the_system_directories() {
        let programs = Programs::default();
        assert_eq!(programs.identity("git", ""), "git");
        assert_eq!(programs.identity("git", "/usr/bin/git"), "git");
        assert_eq!(programs.identity("ls", "/home/alice/project/ls"), "/home/alice/project/ls");
        assert_eq!(programs.identity("ls", "/usr/bin/x/ls"), "/usr/bin/x/ls");
    }

    #[test]
    fn the_table_names_what_is_wrong() {
        assert!(Programs::parse("system_dirs = [\"bin\"]").unwrap_err().contains("system_dirs"));
        assert!(Programs::parse("[files.cat]\nreads = \"some\"").unwrap_err().contains("reads"));
        assert!(Programs::parse("[wrappers.sudo]\nnope = 1").unwrap_err().contains("nope"));
        let parsed = Programs::parse("home = \"/home/{user}\"\n[files.cat]\nreads = \"all\"").unwrap();
        assert_eq!(parsed.home_of("bob").as_deref(), Some("/home/bob"));
        assert_eq!(parsed.files.get("cat").and_then(|f| f.reads), Some(Operands::All));
    }
}
