//! Tests of the bash analysis: every form of hiding a command it must see through.
use super::*;

/// The `bash` patterns of a script, in order.
fn patterns(script: &str) -> Vec<String> {
    analyse(script).into_iter().filter(|c| c.check == Check::Bash).map(|c| c.pattern).collect()
}

fn check(table: &[(&str, &[&str])]) {
    for (script, expected) in table {
        assert_eq!(patterns(script), *expected, "script: {script:?}");
    }
}

#[test]
fn lists_pipelines_and_compound_statements() {
    check(&[
        ("git status", &["git status"]),
        (
            "git status && npm test || echo no; ls | wc -l & sleep 1",
            &["git status", "npm test", "echo no", "ls", "wc -l", "sleep 1"],
        ),
        ("a\nb\n\nc # comment", &["a", "b", "c"]),
        ("(rm a) ; { rm b; }", &["rm a", "rm b"]),
        ("f() { rm x; }; function g { rm y; }", &["rm x", "rm y"]),
        (
            "if test -f x; then cat x; elif rm a; then :; else rm b; fi",
            &["test -f x", "cat x", "rm a", ":", "rm b"],
        ),
        ("for f in a b; do rm $f; done", &["rm $f"]),
        ("for ((i=0; i<$(rm n); i++)); do :; done", &["rm n", ":"]),
        (
            "while read l; do rm l; done < list; until false; do rm u; done",
            &["read l", "rm l", "false", "rm u"],
        ),
        ("case $x in a) rm y;; *) rm z;; esac", &["rm y", "rm z"]),
        ("! rm x", &["rm x"]),
        ("[[ -f $(rm t) ]] && [ -f x ]", &["rm t"]),
    ]);
}

#[test]
fn substitutions_in_any_quoting_are_commands() {
    check(&[
        (r#"git status "$(touch x)""#, &["touch x", r#"git status "$(touch x)""#]),
        ("git status \"a`touch x`b\"", &["touch x", "git status \"a`touch x`b\""]),
        ("echo `touch x`", &["touch x", "echo `touch x`"]),
        ("echo ${v:-$(touch x)}", &["touch x", "echo ${v:-$(touch x)}"]),
        ("echo \"${v:-$(touch x)}\"", &["touch x", "echo \"${v:-$(touch x)}\""]),
        ("echo ${v:-`touch x`}", &["touch x", "echo ${v:-`touch x`}"]),
        ("echo \"${v:-`touch x`}\"", &["touch x", "echo \"${v:-`touch x`}\""]),
        ("(( $(touch x) )); echo $[ `touch y` ]", &["touch x", "touch y", "echo $[ `touch y` ]"]),
        ("let \"x=$(touch x)\"", &["touch x", "let \"x=$(touch x)\""]),
        ("case $(touch x) in *) rm y;; esac", &["touch x", "rm y"]),
        ("select v in $(touch x); do :; done", &["touch x", ":"]),
        ("read -r v <<< \"$(touch x)\"", &["touch x", "read -r v"]),
        ("echo $(( $(touch x) + 1 ))", &["touch x", "echo $(( $(touch x) + 1 ))"]),
        ("echo \"$(( `touch x` ))\"", &["touch x", "echo \"$(( `touch x` ))\""]),
        ("echo ${a[$(touch x)]}", &["touch x", "echo ${a[$(touch x)]}"]),
        ("echo $(echo $(touch deep))", &["touch deep", "echo $(touch deep)", "echo $(echo $(touch deep))"]),
        ("cat > \"$(touch x)\" < `touch y`", &["touch x", "touch y", "cat"]),
        ("diff <(rm a) >(rm b)", &["rm a", "rm b", "diff <(rm a) >(rm b)"]),
        ("X=$(touch x)", &["touch x"]),
        ("a=(1 $(touch x))", &["touch x"]),
        ("local v=$(touch x); export W=`touch y`", &["touch x", "touch y"]),
    ]);
}

#[test]
fn heredoc_bodies_expand_unless_the_delimiter_is_quoted() {
    check(&[
        ("cat <<EOF\n$(touch x) `touch y`\nEOF", &["touch x", "touch y", "cat"]),
        ("cat <<EOF\n`touch x`\nEOF", &["touch x", "cat"]),
        ("cat <<EOF\na `touch x` $HOME `touch y`\nEOF", &["touch x", "touch y", "cat"]),
        ("cat <<EOF\n$(echo `touch x`)\nEOF", &["touch x", "echo `touch x`", "cat"]),
        ("cat <<-EOF\n\t${v:-$(touch x)}\n\tEOF", &["touch x", "cat"]),
        ("cat <<'EOF'\n$(touch x) `touch y`\nEOF", &["cat"]),
        ("cat <<\"EOF\"\n$(touch x)\nEOF", &["cat"]),
        ("cat <<\\EOF\n$(touch x)\nEOF", &["cat"]),
        ("cat <<EOF > out.txt\nhello\nEOF\nrm x", &["cat", "rm x"]),
        ("cat <<EOF && rm x\nbody\nEOF", &["rm x", "cat"]),
    ]);
}

#[test]
fn script_strings_are_parsed() {
    check(&[
        ("bash -c 'rm x'", &["bash -c rm x", "rm x"]),
        ("sh -ec \"rm x; rm y\" arg0", &["sh -ec rm x; rm y arg0", "rm x", "rm y"]),
        ("zsh -c 'rm x'; dash -c 'rm y'", &["zsh -c rm x", "rm x", "dash -c rm y", "rm y"]),
        ("eval 'rm x' y", &["eval rm x y", "rm x y"]),
        ("eval \"$CMD\"", &["eval \"$CMD\"", "eval \"$CMD\""]),
        ("bash -c \"$X\"", &["bash -c \"$X\"", "bash -c \"$X\""]),
        ("bash -c 'bash -c \"rm x\"'", &["bash -c bash -c \"rm x\"", "bash -c rm x", "rm x"]),
        ("trap 'rm x' EXIT", &["trap rm x EXIT", "rm x"]),
        ("bash <<EOF\nrm x\nEOF", &["bash", "rm x"]),
        ("sh <<< 'rm x'", &["sh", "rm x"]),
        ("bash script.sh", &["bash script.sh"]),
    ]);
}

#[test]
fn nesting_is_bounded() {
    // Each `eval` level is one more nested script: past the limit the rest is unparsed.
    let script = format!("{}rm x", "eval ".repeat(12));
    let found = patterns(&script);
    assert!(!found.contains(&"rm x".to_string()), "read past the depth limit: {found:?}");
    assert!(found.iter().any(|p| p.starts_with(UNPARSED) && p.ends_with("rm x")), "{found:?}");
    let shallow = patterns("eval eval 'rm x'");
    assert!(shallow.contains(&"rm x".to_string()), "{shallow:?}");

    let deep = format!("{}rm x{}", "$(".repeat(300), ")".repeat(300));
    let found = patterns(&deep);
    assert_eq!(found.last(), Some(&format!("{UNPARSED}{deep}")), "too deep a tree is unreadable");
}

#[test]
fn command_words_are_normalised() {
    check(&[
        (r"\rm x", &["rm x"]),
        ("'rm' x", &["rm x"]),
        (r#"r""m x"#, &["rm x"]),
        (r#""rm" "-rf" 'a b'"#, &["rm -rf a b"]),
        (r"$'r\x6d' x", &["rm x"]),
        ("/bin/rm x", &["rm x"]),
        ("/usr/bin/rm -rf /", &["rm -rf /"]),
        ("./rm x", &["./rm x"]),
        ("r\\\nm x", &["rm x"]),
        ("git   status   --short", &["git status --short"]),
        ("ls *.txt", &["ls *.txt"]),
        ("cargo test 2>&1 > out.txt", &["cargo test"]),
    ]);
}

#[test]
fn wrappers_are_checked_with_the_command_they_run() {
    check(&[
        ("command rm x", &["command rm x", "rm x"]),
        ("env rm x", &["env rm x", "rm x"]),
        (
            "env -i PATH=/x GIT_DIR=y FOO=1 git status",
            &["env -i PATH=/x GIT_DIR=y FOO=1 git status", "PATH=/x GIT_DIR=y git status"],
        ),
        ("exec rm x", &["exec rm x", "rm x"]),
        ("builtin cd x", &["builtin cd x"]),
        ("nohup rm x &", &["nohup rm x", "rm x"]),
        ("nice -n 10 rm x", &["nice -n 10 rm x", "rm x"]),
        ("timeout -k 5 10s rm x", &["timeout -k 5 10s rm x", "rm x"]),
        ("stdbuf -oL rm x", &["stdbuf -oL rm x", "rm x"]),
        ("sudo -u root rm x", &["sudo -u root rm x", "rm x"]),
        ("doas rm x", &["doas rm x", "rm x"]),
        ("time rm x", &["time rm x", "rm x"]),
        ("ls | xargs rm", &["ls", "xargs rm", "rm"]),
        ("xargs -0 -I{} rm {}", &["xargs -0 -I{} rm {}", "rm {}"]),
        ("find . -name '*.o' -delete", &["find . -name *.o -delete", "rm ."]),
        (r"find src -exec rm {} \;", &["find src -exec rm {} ;", "rm {}"]),
        (
            "find . -execdir sh -c 'rm x' \\; -ok rm y +",
            &["find . -execdir sh -c rm x ; -ok rm y +", "sh -c rm x", "rm x", "rm y"],
        ),
        ("sudo env /bin/rm x", &["sudo env /bin/rm x", "env /bin/rm x", "rm x"]),
        ("xargs sh -c 'rm x'", &["xargs sh -c rm x", "sh -c rm x", "rm x"]),
        ("command $CMD", &["command $CMD", "$CMD"]),
        ("command -v rm", &["command -v rm"]),
        ("sudo FOO=1 PAGER=x rm x", &["sudo FOO=1 PAGER=x rm x", "PAGER=x rm x"]),
        ("env 'GIT_DIR=x' git status", &["env GIT_DIR=x git status", "GIT_DIR=x git status"]),
    ]);
}

#[test]
fn env_prefixes_that_change_what_runs_stay_in_the_pattern() {
    check(&[
        (
            "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='touch x' git status",
            &["GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0=touch x git status"],
        ),
        ("PAGER='sh -c id' git log", &["PAGER=sh -c id git log"]),
        ("LD_PRELOAD=./evil.so ls", &["LD_PRELOAD=./evil.so ls"]),
        ("RUST_LOG=debug cargo test", &["cargo test"]),
        ("CI=1 FOO=$(touch x) npm test", &["touch x", "npm test"]),
        ("GIT_DIR=$(pwd)/x git status", &["pwd", "GIT_DIR=$(pwd)/x git status"]),
        ("PATH=/tmp/evil:$PATH; git status", &["PATH=/tmp/evil:$PATH", "git status"]),
        ("export GIT_SSH_COMMAND='touch x'", &["export GIT_SSH_COMMAND=touch x"]),
        ("export FOO=1", &[]),
    ]);
    let always: Vec<String> =
        analyse("GIT_PAGER=cat git log --oneline").into_iter().map(|c| c.always).collect();
    assert_eq!(always, vec!["GIT_PAGER=cat git log *"]);
}

#[test]
fn unreadable_commands_keep_their_source_text() {
    check(&[
        ("$CMD x", &["$CMD x"]),
        ("\"$(echo rm)\" x", &["echo rm", "\"$(echo rm)\" x"]),
        ("${X}rm x", &["${X}rm x"]),
        ("r{m,} x", &["r{m,} x"]),
        ("/bin/r? x", &["/bin/r? x"]),
        (
            "echo 'unterminated",
            &["echo", "echo unterminated", "echo 'unterminated", "(unparsed) echo 'unterminated"],
        ),
        ("rm x; (((", &["rm x", "rm x; (((", "(unparsed) rm x; ((("]),
        (
            "cat <<EOF; \\rm q\n$(touch r)\nEOF",
            &[
                "touch r",
                "cat",
                "EOF",
                "rm q",
                "cat <<EOF; \\rm q\n$(touch r)\nEOF",
                "(unparsed) cat <<EOF; \\rm q\n$(touch r)\nEOF",
            ],
        ),
    ]);
    let unreadable = analyse("$CMD x");
    assert_eq!(unreadable[0].always, "$CMD x", "an always answer covers only that exact text");
}

#[test]
fn cd_moves_later_commands_but_is_not_asked() {
    let commands = analyse("cd sub && cat a; (cd /x; cat b); cat c; cd; cat d");
    let seen: Vec<(String, Check, Vec<String>)> =
        commands.into_iter().map(|c| (c.pattern, c.check, c.dirs)).collect();
    let dirs = |d: &[&str]| d.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        seen,
        vec![
            ("cd sub".to_string(), Check::PathsOnly, dirs(&[])),
            ("cat a".to_string(), Check::Bash, dirs(&["sub"])),
            ("cd /x".to_string(), Check::PathsOnly, dirs(&["sub"])),
            ("cat b".to_string(), Check::Bash, dirs(&["/x"])),
            ("cat c".to_string(), Check::Bash, dirs(&["sub"])),
            ("cd".to_string(), Check::PathsOnly, dirs(&["sub"])),
            ("cat d".to_string(), Check::Bash, dirs(&["~"])),
        ]
    );
    check(&[("cd $X && ls", &["cd $X", "ls"]), ("cd - && ls", &["cd -", "ls"]), ("popd", &[])]);
}

#[test]
fn redirections_are_files_not_pattern_words() {
    let commands = analyse("cargo test 2>&1 > out.txt; { ls; } >> log.txt; echo x >&2");
    let redirects: Vec<(String, Vec<String>)> = commands
        .iter()
        .map(|c| (c.pattern.clone(), c.redirects.iter().map(|w| w.value.clone()).collect()))
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        redirects,
        vec![
            ("cargo test".to_string(), s(&["out.txt"])),
            ("ls".to_string(), s(&[])),
            (String::new(), s(&["log.txt"])),
            ("echo x".to_string(), s(&[])),
        ]
    );
}

#[test]
fn malformed_scripts_do_not_panic() {
    let samples = [
        "echo 'unterminated",
        "echo \"open",
        "echo $(unclosed",
        "echo `tick",
        "trailing\\",
        "cat <<",
        "cat <<EOF",
        "a >",
        "2>&",
        "é ü > ö && ß",
        "$(",
        "`",
        ")(",
        "&&||;;|&",
        "echo ${x",
        "<<<",
        "'",
        "\\\n",
        "cat <<EOF\n`unclosed\nEOF",
    ];
    for script in samples {
        let found = analyse(script);
        assert!(found.iter().all(|c| c.check == Check::PathsOnly || !c.pattern.is_empty()), "{script}");
    }
    let chars: Vec<char> = "a'b\"c$(d)e`f`g\\h>i<j&k|l;m\n#n(o)p{q}r é".chars().collect();
    for start in 0..chars.len() {
        for end in start..=chars.len() {
            let _ = analyse(&chars[start..end].iter().collect::<String>());
        }
    }
}
