//! Commands that run other commands: wrappers (`env`, `sudo`, `xargs`, `find -exec`…), shells given a
//! script (`bash -c '…'`, `eval`, `trap`) and variables that change what a command runs (`GIT_*`,
//! `PAGER`, `LD_PRELOAD`…). Pure functions over normalised words; the analysis checks what they return
//! as commands of their own, besides the wrapper itself.

use super::words::{Form, Word};

/// What a command runs besides itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Inner {
    /// Another command, with the variable assignments it gets (`env GIT_DIR=x git status`).
    Command { env: Vec<Word>, words: Vec<Word> },
    /// A script string (`bash -c`, `eval`, `trap`).
    Script(Word),
    /// A shell that reads its script from standard input (`bash`, `sh -s`).
    Stdin,
}

/// Shells whose `-c STRING` is a script.
const SHELLS: &[&str] = &["ash", "bash", "dash", "fish", "ksh", "mksh", "rbash", "sh", "zsh"];

/// What `words` (a command with its name normalised) runs besides itself.
pub(crate) fn inner(words: &[Word]) -> Vec<Inner> {
    let Some(name) = words.first() else { return Vec::new() };
    let name = name.value.as_str();
    let command_at = |start: Option<usize>| match start {
        Some(i) if i < words.len() => vec![Inner::Command { env: Vec::new(), words: words[i..].to_vec() }],
        _ => Vec::new(),
    };
    match name {
        "builtin" | "nohup" | "coproc" | "busybox" | "chronic" | "unbuffer" => command_at(Some(1)),
        // `command -v NAME` only says what NAME is.
        "command" => {
            let start = operands(words, "", &[]);
            let options = &words[1..start.unwrap_or(words.len()).min(words.len())];
            // `command -v NAME` only says what NAME is.
            let describes =
                options.iter().any(|w| w.value.contains(['v', 'V']) && !w.value.starts_with("--"));
            if describes { Vec::new() } else { command_at(start) }
        }
        "exec" => command_at(operands(words, "a", &[])),
        "time" => command_at(operands(words, "", &[])),
        "nice" => command_at(operands(words, "n", &["--adjustment"])),
        "ionice" => command_at(operands(words, "cnpt", &["--class", "--classdata", "--pid"])),
        "setsid" | "caffeinate" => command_at(operands(words, "", &[])),
        "stdbuf" => command_at(operands(words, "ioe", &["--input", "--output", "--error"])),
        "timeout" => command_at(operands(words, "sk", &["--signal", "--kill-after"]).map(|i| i + 1)),
        "sudo" => command_at(operands(
            words,
            "CDghpRrtTUu",
            &["--chdir", "--close-from", "--group", "--host", "--prompt", "--role", "--type", "--user"],
        )),
        "doas" => command_at(operands(words, "Cu", &[])),
        "xargs" => xargs(words),
        "env" => env(words),
        "find" => find(words),
        "eval" => match words.get(1..) {
            Some(rest) if !rest.is_empty() => vec![Inner::Script(Word::joined(rest))],
            _ => Vec::new(),
        },
        "trap" => match (words.get(1), words.len()) {
            (Some(action), 3..) if !action.value.starts_with('-') => vec![Inner::Script(action.clone())],
            _ => Vec::new(),
        },
        "watch" => match operands(words, "dgnqx", &["--differences", "--interval"]) {
            Some(i) if i < words.len() => vec![Inner::Script(Word::joined(&words[i..]))],
            _ => Vec::new(),
        },
        _ if SHELLS.contains(&name) => shell(words),
        _ => Vec::new(),
    }
}

/// Index of the first operand after the options of `words[0]`. `with_arg` lists the short options that
/// take an argument (attached or next word), `long_with_arg` the long ones (`--user root`,
/// `--user=root`). A word whose value is unknown ends the options: it may be the command.
fn operands(words: &[Word], with_arg: &str, long_with_arg: &[&str]) -> Option<usize> {
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let w = word.value.as_str();
        if word.form == Form::Dynamic {
            return Some(i);
        }
        if w == "--" {
            return Some(i + 1);
        }
        if let Some(long) = w.strip_prefix("--") {
            let takes_arg = !long.contains('=') && long_with_arg.contains(&w);
            i += if takes_arg { 2 } else { 1 };
            continue;
        }
        if let Some(short) = w.strip_prefix('-').filter(|s| !s.is_empty()) {
            // The first option letter that takes an argument ends the cluster: the rest of the word is
            // the argument, or the next word is.
            let arg_at = short.char_indices().find(|(_, c)| with_arg.contains(*c));
            i += match arg_at {
                Some((idx, c)) if idx + c.len_utf8() == short.len() => 2,
                _ => 1,
            };
            continue;
        }
        return Some(i);
    }
    None
}

/// `xargs [options] [command [initial-arguments]]`; with no command it runs `echo`.
fn xargs(words: &[Word]) -> Vec<Inner> {
    let long = [
        "--arg-file",
        "--delimiter",
        "--max-args",
        "--max-chars",
        "--max-lines",
        "--max-procs",
        "--process-slot-var",
    ];
    match operands(words, "adEILnPs", &long) {
        Some(i) if i < words.len() => vec![Inner::Command { env: Vec::new(), words: words[i..].to_vec() }],
        _ => vec![Inner::Command { env: Vec::new(), words: vec![Word::synthetic("echo")] }],
    }
}

/// `env [-i] [-u NAME] [-C DIR] [-S STRING] [NAME=VALUE]… [command]`.
fn env(words: &[Word]) -> Vec<Inner> {
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let w = word.value.as_str();
        if word.form == Form::Dynamic || !w.starts_with('-') || w == "-" {
            break;
        }
        if w == "--" {
            i += 1;
            break;
        }
        if matches!(w, "-S" | "--split-string") {
            return words.get(i + 1).map(|s| vec![Inner::Script(s.clone())]).unwrap_or_default();
        }
        if let Some(split) = w.strip_prefix("--split-string=").or_else(|| w.strip_prefix("-S")) {
            let value = Word { value: split.to_string(), ..word.clone() };
            return vec![Inner::Script(value)];
        }
        let takes_arg = matches!(w, "-u" | "-C" | "-P" | "--unset" | "--chdir");
        i += if takes_arg { 2 } else { 1 };
    }
    let mut env = Vec::new();
    while let Some(word) = words.get(i).filter(|w| assignment_name(&w.value).is_some()) {
        env.push(word.clone());
        i += 1;
    }
    if i >= words.len() {
        return Vec::new();
    }
    vec![Inner::Command { env, words: words[i..].to_vec() }]
}

/// `find`'s `-exec`/`-execdir`/`-ok`/`-okdir` commands and, for `-delete`, the `rm` it stands for.
fn find(words: &[Word]) -> Vec<Inner> {
    let starts: Vec<Word> = words[1..]
        .iter()
        .take_while(|w| !w.value.starts_with('-') && !matches!(w.value.as_str(), "(" | "!" | ")" | ","))
        .cloned()
        .collect();
    let mut out = Vec::new();
    let mut i = 1;
    while let Some(word) = words.get(i) {
        i += 1;
        match word.value.as_str() {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let end = words[i..]
                    .iter()
                    .position(|w| matches!(w.value.as_str(), ";" | "+"))
                    .map_or(words.len(), |p| i + p);
                if end > i {
                    out.push(Inner::Command { env: Vec::new(), words: words[i..end].to_vec() });
                }
                i = end + 1;
            }
            "-delete" => {
                let mut rm = vec![Word::synthetic("rm")];
                if starts.is_empty() {
                    rm.push(Word::synthetic("."));
                }
                rm.extend(starts.iter().cloned());
                out.push(Inner::Command { env: Vec::new(), words: rm });
            }
            _ => {}
        }
    }
    out
}

/// `bash [options] -c STRING …`, `bash [options]` (script on stdin) or `bash FILE` (runs a file: nothing
/// more to see).
fn shell(words: &[Word]) -> Vec<Inner> {
    let mut command_string = false;
    let mut stdin = false;
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let w = word.value.as_str();
        if word.form == Form::Dynamic {
            break;
        }
        if w == "--" || w == "-" {
            i += 1;
            break;
        }
        if w.starts_with("--") {
            i += if matches!(w, "--rcfile" | "--init-file") { 2 } else { 1 };
            continue;
        }
        match w.strip_prefix('-').or_else(|| w.strip_prefix('+')) {
            Some(opts) if !opts.is_empty() => {
                command_string |= w.starts_with('-') && opts.contains('c');
                stdin |= w.starts_with('-') && opts.contains('s');
                // `-o OPTION`, `-O OPTION`: the next word is the option's name.
                i += if opts.ends_with(['o', 'O']) { 2 } else { 1 };
            }
            _ => break,
        }
    }
    match words.get(i) {
        Some(script) if command_string => vec![Inner::Script(script.clone())],
        None if !command_string => vec![Inner::Stdin],
        _ if stdin => vec![Inner::Stdin],
        _ => Vec::new(),
    }
}

/// The variable name of a `NAME=VALUE` word.
pub(crate) fn assignment_name(word: &str) -> Option<&str> {
    let (name, _) = word.split_once('=')?;
    let name = name.strip_suffix('+').unwrap_or(name);
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(name)
}

/// Variables whose value changes what a command runs or loads (a pager, an editor, a git config entry,
/// a preloaded library, the search path…). An assignment to one stays part of the permission pattern.
pub(crate) fn changes_what_runs(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "BASHOPTS",
        "BASH_ENV",
        "BROWSER",
        "CARGO_HOME",
        "CC",
        "CDPATH",
        "CXX",
        "EDITOR",
        "ENV",
        "FPATH",
        "GCONV_PATH",
        "GLOBIGNORE",
        "HOME",
        "IFS",
        "JAVA_TOOL_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "LESSCLOSE",
        "LESSOPEN",
        "MAKEFLAGS",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PAGER",
        "PATH",
        "PERL5DB",
        "PERL5LIB",
        "PERL5OPT",
        "PERLLIB",
        "PROMPT_COMMAND",
        "PS4",
        "PYTHONHOME",
        "PYTHONINSPECT",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONWARNINGS",
        "RUBYLIB",
        "RUBYOPT",
        "RUSTC",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "RUSTDOC",
        "SHELL",
        "SHELLOPTS",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "TERMINFO",
        "VISUAL",
        "XDG_CONFIG_DIRS",
        "XDG_CONFIG_HOME",
        "ZDOTDIR",
        "_JAVA_OPTIONS",
    ];
    const PREFIXES: &[&str] = &[
        "BASH_FUNC_",
        "CARGO_BUILD_",
        "CARGO_TARGET_",
        "DYLD_",
        "GIT_",
        "LD_",
        "NPM_CONFIG_",
        "npm_config_",
    ];
    EXACT.contains(&name)
        || PREFIXES.iter().any(|p| name.starts_with(p))
        || name.ends_with("_PAGER")
        || name.ends_with("_EDITOR")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<Word> {
        s.split_whitespace().map(Word::synthetic).collect()
    }

    fn inner_commands(s: &str) -> Vec<String> {
        inner(&words(s))
            .into_iter()
            .map(|i| match i {
                Inner::Command { env, words } => {
                    env.iter().chain(&words).map(|w| w.value.clone()).collect::<Vec<_>>().join(" ")
                }
                Inner::Script(w) => format!("script: {}", w.value),
                Inner::Stdin => "stdin".to_string(),
            })
            .collect()
    }

    #[test]
    fn wrappers_yield_the_command_they_run() {
        let table = [
            ("env -i FOO=1 rm x", vec!["FOO=1 rm x"]),
            ("env -u HOME -- rm x", vec!["rm x"]),
            ("env FOO=1", vec![]),
            ("command -p rm x", vec!["rm x"]),
            ("command -v rm", vec![]),
            ("command rm -v x", vec!["rm -v x"]),
            ("exec -a name rm x", vec!["rm x"]),
            ("nice -n 5 rm x", vec!["rm x"]),
            ("nice -10 rm x", vec!["rm x"]),
            ("timeout -s KILL 5 rm x", vec!["rm x"]),
            ("timeout --kill-after=1 5s rm x", vec!["rm x"]),
            ("stdbuf -oL -e 0 rm x", vec!["rm x"]),
            ("sudo -u root -E rm x", vec!["rm x"]),
            ("sudo --user root rm x", vec!["rm x"]),
            ("doas -u root rm x", vec!["rm x"]),
            ("time -p rm x", vec!["rm x"]),
            ("nohup rm x", vec!["rm x"]),
            ("xargs -0 -n 1 rm -f", vec!["rm -f"]),
            ("xargs -I {} rm {}", vec!["rm {}"]),
            ("xargs", vec!["echo"]),
            ("find . -name *.o -delete", vec!["rm ."]),
            ("find src build -delete", vec!["rm src build"]),
            ("find . -exec rm {} ; -execdir chmod +x {} +", vec!["rm {}", "chmod +x {}"]),
            ("bash -c rm", vec!["script: rm"]),
            ("sh -ec rm", vec!["script: rm"]),
            ("bash -o pipefail -c rm", vec!["script: rm"]),
            ("bash", vec!["stdin"]),
            ("bash -s arg", vec!["stdin"]),
            ("bash script.sh", vec![]),
            ("eval rm x", vec!["script: rm x"]),
            ("trap rm EXIT", vec!["script: rm"]),
            ("trap - EXIT", vec![]),
            ("ls -la", vec![]),
        ];
        for (script, expected) in table {
            assert_eq!(inner_commands(script), expected, "{script}");
        }
    }

    #[test]
    fn variables_that_change_what_runs() {
        for name in ["GIT_CONFIG_COUNT", "PAGER", "GIT_PAGER", "LD_PRELOAD", "PATH", "BASH_ENV", "HOME"] {
            assert!(changes_what_runs(name), "{name}");
        }
        for name in ["RUST_LOG", "CI", "NODE_ENV", "RUST_BACKTRACE", "LANG"] {
            assert!(!changes_what_runs(name), "{name}");
        }
    }
}
