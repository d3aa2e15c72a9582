//! Property tests of reading commands (`command::parts`): no input makes it
//! panic, and every simple command a generated script holds, wherever it
//! sits (pipelines, lists, subshells, substitutions, branches, loops), is
//! one of the parts the monitor decides.

use proptest::prelude::*;
use warden_monitor::command::parts;
use warden_monitor::normalize::ResourceInput;
use warden_monitor::programs::Programs;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

fn bundled() -> Programs {
    Programs::parse(include_str!("../../../policies/programs.toml")).unwrap()
}

/// Shell-ish text: the characters that matter to a shell, much more often
/// than chance would give them.
fn shellish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => prop::sample::select(vec![
            " ", "|", "||", "&&", ";", "&", "(", ")", "{", "}", "$(", "`", "'", "\"", "\\", "$", "${", "<", ">",
            ">>", "<<", "<<'EOF'\n", "\nEOF\n", "2>&1", "<(", "*", "?", "[", "]", "~", "#", "\n", "if ", "then ",
            "fi", "for x in ", "do ", "done", "case ", "esac", "))", "((", "[[", "]]", "!", "=", "-c", "eval ",
            "bash -c ", "cat ", "rm -rf ", "find . -exec ", "{} +", "xargs ", "sudo ", "git push ",
        ])
        .prop_map(str::to_owned),
        2 => "[a-z./_-]{1,6}",
        1 => any::<char>().prop_map(|c| c.to_string()),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

/// A program name and its arguments, none of which a shell treats specially.
fn simple_command() -> impl Strategy<Value = (String, Vec<String>)> {
    (
        prop::sample::select(vec!["ls", "grep", "mytool", "cargo", "npm", "rustc", "tsc", "make", "wc"]),
        prop::collection::vec("[a-z0-9_.-]{1,6}", 0..3),
    )
        .prop_map(|(program, args)| {
            // A leading dash would make some arguments options of a wrapper.
            let args = args.into_iter().map(|a| format!("a{a}")).collect();
            (program.to_owned(), args)
        })
}

#[derive(Debug, Clone)]
enum Script {
    Command(String, Vec<String>),
    Pipe(Box<Script>, Box<Script>),
    And(Box<Script>, Box<Script>),
    Or(Box<Script>, Box<Script>),
    Then(Box<Script>, Box<Script>),
    Subshell(Box<Script>),
    Group(Box<Script>),
    Substitution(Box<Script>),
    If(Box<Script>, Box<Script>),
    While(Box<Script>, Box<Script>),
    For(Box<Script>),
    Nested(Box<Script>),
}

fn script() -> impl Strategy<Value = Script> {
    let leaf = simple_command().prop_map(|(p, a)| Script::Command(p, a));
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Script::Pipe(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Script::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Script::Or(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Script::Then(Box::new(a), Box::new(b))),
            inner.clone().prop_map(|a| Script::Subshell(Box::new(a))),
            inner.clone().prop_map(|a| Script::Group(Box::new(a))),
            inner.clone().prop_map(|a| Script::Substitution(Box::new(a))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Script::If(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Script::While(Box::new(a), Box::new(b))),
            inner.clone().prop_map(|a| Script::For(Box::new(a))),
            inner.prop_map(|a| Script::Nested(Box::new(a))),
        ]
    })
}

impl Script {
    fn render(&self) -> String {
        match self {
            Script::Command(program, args) => {
                std::iter::once(program.clone()).chain(args.clone()).collect::<Vec<_>>().join(" ")
            }
            Script::Pipe(a, b) => format!("{} | {}", a.render(), b.render()),
            Script::And(a, b) => format!("{} && {}", a.render(), b.render()),
            Script::Or(a, b) => format!("{} || {}", a.render(), b.render()),
            Script::Then(a, b) => format!("{}; {}", a.render(), b.render()),
            Script::Subshell(a) => format!("( {} )", a.render()),
            Script::Group(a) => format!("{{ {}; }}", a.render()),
            // The space keeps `$( (…) )` from reading as arithmetic `$((…))`.
            Script::Substitution(a) => format!("echo \"$( {} )\"", a.render()),
            Script::If(a, b) => format!("if {}; then {}; fi", a.render(), b.render()),
            Script::While(a, b) => format!("while {}; do {}; done", a.render(), b.render()),
            Script::For(a) => format!("for f in x y; do {}; done", a.render()),
            // A script inside a script, quoted as a shell would need it.
            Script::Nested(a) => format!("bash -c '{}'", a.render().replace('\'', "'\\''")),
        }
    }

    fn commands(&self, out: &mut Vec<Vec<String>>) {
        match self {
            Script::Command(program, args) => out.push(std::iter::once(program.clone()).chain(args.clone()).collect()),
            Script::Pipe(a, b)
            | Script::And(a, b)
            | Script::Or(a, b)
            | Script::Then(a, b)
            | Script::If(a, b)
            | Script::While(a, b) => {
                a.commands(out);
                b.commands(out);
            }
            Script::Subshell(a) | Script::Group(a) | Script::Substitution(a) | Script::For(a) | Script::Nested(a) => {
                a.commands(out)
            }
        }
    }
}

proptest! {
    #![proptest_config(config(3000))]

    /// Whatever the script, reading it ends with parts or a clear error.
    #[test]
    fn reading_any_script_never_panics(text in shellish(), shell in prop::sample::select(vec!["bash", "sh", "zsh"])) {
        let programs = bundled();
        let argv = vec![shell.to_owned(), "-c".to_owned(), text];
        match parts(&argv, "/home/alice/project", "alice", &programs) {
            Ok(found) => {
                prop_assert!(found.len() <= programs.max_parts);
                for part in &found {
                    match &part.resource {
                        ResourceInput::Command { argv, .. } => {
                            prop_assert_eq!(part.action.as_str(), "exec");
                            prop_assert!(!argv.is_empty());
                        }
                        ResourceInput::File { path, .. } => {
                            prop_assert!(["fs.read", "fs.write", "fs.delete"].contains(&part.action.as_str()));
                            prop_assert!(path.starts_with('/'), "a file part is absolute: {:?}", part);
                        }
                        other => prop_assert!(false, "unexpected part {:?}", other),
                    }
                }
            }
            Err(error) => prop_assert_eq!(error.field.as_str(), "resource.command.argv"),
        }
    }
}

proptest! {
    #![proptest_config(config(1500))]

    /// Every simple command of the script is an `exec` part with its argv,
    /// and nothing of it is left opaque.
    #[test]
    fn every_simple_command_is_a_part(script in script()) {
        let programs = bundled();
        let text = script.render();
        let argv = vec!["bash".to_owned(), "-c".to_owned(), text.clone()];
        let found = parts(&argv, "/home/alice/project", "alice", &programs).unwrap();
        let execs: Vec<&Vec<String>> = found
            .iter()
            .filter(|p| p.action == "exec")
            .filter_map(|p| match &p.resource { ResourceInput::Command { argv, .. } => Some(argv), _ => None })
            .collect();
        prop_assert!(found.iter().all(|p| !p.opaque), "opaque part in {}: {:?}", text, found);
        let mut expected = Vec::new();
        script.commands(&mut expected);
        for command in &expected {
            prop_assert!(execs.contains(&command), "`{}` of {} is not a part: {:?}", command.join(" "), text, execs);
        }
    }
}
