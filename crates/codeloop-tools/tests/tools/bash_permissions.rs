//! bash permission analysis through the real `BashTool::execute`: a host that evaluates rules the way
//! the engine does (last matching rule wins; any denied pattern denies; all allowed runs; anything
//! else is an ask, which this headless host refuses) and records what reached it. Each attack that
//! ran unasked on the old scanner is shown not to run, with the pattern that stopped it.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use codeloop_tools::{CallInfo, PermissionAsk, PermissionError, ToolFailure, ToolHost, ToolOutput};
use codeloop_types::Todo;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common::Env;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Allow,
    Ask,
    Deny,
}

/// Evaluates `(permission, pattern, action)` rules after the engine's defaults.
struct RulesHost {
    rules: Vec<(String, String, Action)>,
    asks: Mutex<Vec<(PermissionAsk, Action)>>,
}

impl RulesHost {
    fn new(rules: &[(&str, &str, Action)]) -> Arc<Self> {
        let defaults = [
            ("*", "*", Action::Allow),
            ("external_directory", "*", Action::Ask),
            ("read", "*.env", Action::Ask),
            ("read", "*.env.*", Action::Ask),
            ("read", "*.env.example", Action::Allow),
        ];
        let rules = defaults
            .iter()
            .chain(rules)
            .map(|(perm, pattern, action)| (perm.to_string(), pattern.to_string(), *action))
            .collect();
        Arc::new(Self { rules, asks: Mutex::new(Vec::new()) })
    }

    fn decide(&self, permission: &str, pattern: &str) -> Action {
        self.rules
            .iter()
            .rev()
            .find(|(perm, rule, _)| wildcard(perm, permission) && wildcard(rule, pattern))
            .map_or(Action::Ask, |(_, _, action)| *action)
    }

    fn asks_for(&self, permission: &str) -> Vec<(PermissionAsk, Action)> {
        self.asks.lock().unwrap().iter().filter(|(a, _)| a.permission == permission).cloned().collect()
    }
}

/// The reference matcher: `*` any run, `?` one char, a `*` in the subject is a plain character, and
/// `"x *"` also matches a bare `x`.
fn wildcard(rule: &str, subject: &str) -> bool {
    fn go(rule: &[char], subject: &[char]) -> bool {
        match rule.split_first() {
            None => subject.is_empty(),
            Some(('*', rest)) => (0..=subject.len()).any(|skip| go(rest, &subject[skip..])),
            Some(('?', rest)) => !subject.is_empty() && go(rest, &subject[1..]),
            Some((c, rest)) => subject.first() == Some(c) && go(rest, &subject[1..]),
        }
    }
    let rule_chars: Vec<char> = rule.chars().collect();
    let subject_chars: Vec<char> = subject.chars().collect();
    go(&rule_chars, &subject_chars) || rule.strip_suffix(" *").is_some_and(|bare| bare == subject)
}

#[async_trait]
impl ToolHost for RulesHost {
    async fn ask(&self, _call: &CallInfo, ask: PermissionAsk) -> Result<(), PermissionError> {
        let actions: Vec<Action> = ask.patterns.iter().map(|p| self.decide(&ask.permission, p)).collect();
        let action = if actions.contains(&Action::Deny) {
            Action::Deny
        } else if actions.iter().all(|a| *a == Action::Allow) {
            Action::Allow
        } else {
            Action::Ask
        };
        self.asks.lock().unwrap().push((ask, action));
        match action {
            Action::Allow => Ok(()),
            Action::Deny => Err(PermissionError::Denied { message: "denied by rule".into() }),
            Action::Ask => Err(PermissionError::Blocked { message: "asked in a headless run".into() }),
        }
    }

    fn progress(&self, _call: &CallInfo, _title: Option<String>, _metadata: Option<Value>) {}

    async fn set_todos(&self, _call: &CallInfo, _todos: Vec<Todo>) -> Result<(), String> {
        Ok(())
    }
}

async fn run(env: &Env, host: &Arc<RulesHost>, command: &str) -> Result<ToolOutput, ToolFailure> {
    let mut ctx = env.ctx();
    ctx.host = host.clone();
    env.registry.execute("bash", json!({ "command": command }), &ctx).await
}

fn is_blocked(result: &Result<ToolOutput, ToolFailure>) -> bool {
    matches!(result, Err(ToolFailure::Permission(PermissionError::Blocked { .. })))
}

fn is_denied(result: &Result<ToolOutput, ToolFailure>) -> bool {
    matches!(result, Err(ToolFailure::Permission(PermissionError::Denied { .. })))
}

#[tokio::test]
async fn substitutions_and_env_prefixes_are_asked_under_an_allowed_git_status() {
    let env = Env::new();
    let host = RulesHost::new(&[("bash", "*", Action::Ask), ("bash", "git status *", Action::Allow)]);
    let config = "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='touch x' git status";
    let attacks = [
        (r#"git status "$(touch x)""#, "touch x"),
        ("git status \"`touch x`\"", "touch x"),
        ("git status ${v:-$(touch x)}", "touch x"),
        ("git status ${v:-`touch x`}", "touch x"),
        ("git status <<EOF\n$(touch x)\nEOF", "touch x"),
        ("git status <<EOF\n`touch x`\nEOF", "touch x"),
        ("git status $(( $(touch x) ))", "touch x"),
        ("git status ${a[$(touch x)]}", "touch x"),
        ("git status > \"$(touch x)\"", "touch x"),
        ("git status <(touch x)", "touch x"),
        ("X=$(touch x) git status", "touch x"),
        ("git status; bash -c 'touch x'", "touch x"),
        (config, "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0=touch x git status"),
        ("PAGER='touch x' git status", "PAGER=touch x git status"),
        ("git status $(( $(touch x) ", "(unparsed) git status $(( $(touch x)"),
    ];
    for (script, stopped_by) in attacks {
        let result = run(&env, &host, script).await;
        assert!(is_blocked(&result), "{script:?} was not asked: {result:?}");
        assert!(!env.path("x").exists(), "{script:?} ran");
        let (ask, _) = host.asks_for("bash").pop().unwrap();
        assert!(ask.patterns.contains(&stopped_by.to_string()), "{script:?}: {:?}", ask.patterns);
        assert_eq!(host.decide("bash", stopped_by), Action::Ask, "{stopped_by:?}");
    }

    // Control: the rule still lets plain git status (and a harmless env prefix) run unasked.
    for script in ["git status", "git status --short", "RUST_LOG=debug git status"] {
        let result = run(&env, &host, script).await;
        assert!(result.is_ok(), "{script:?}: {result:?}");
    }
    let allowed: Vec<Vec<String>> =
        host.asks_for("bash").into_iter().rev().take(3).map(|(ask, _)| ask.patterns).rev().collect();
    assert_eq!(allowed, vec![vec!["git status"], vec!["git status --short"], vec!["git status"]]);
}

#[tokio::test]
async fn deny_rules_see_through_quotes_paths_and_wrappers() {
    let env = Env::new();
    let host = RulesHost::new(&[("bash", "rm *", Action::Deny)]);
    let attacks = [
        r"\rm victim",
        "'rm' victim",
        r#"r""m victim"#,
        r"$'\x72m' victim",
        "/bin/rm victim",
        "/usr/bin/rm victim",
        "r\\\nm victim",
        "command rm victim",
        "env rm victim",
        "env -i FOO=1 rm victim",
        "exec rm victim",
        "nice -n 5 rm victim",
        "timeout 5 rm victim",
        "nohup rm victim",
        "sudo -u root rm victim",
        "echo victim | xargs rm",
        "find . -name victim -delete",
        r"find . -name victim -exec rm {} \;",
        "bash -c 'rm victim'",
        "sh -c \"rm victim\"",
        "eval 'rm victim'",
        "bash <<'EOF'\nrm victim\nEOF",
        "f() { rm victim; }; f",
        "true && (cd . && rm victim)",
        "cat <<EOF; rm victim\nbody\nEOF",
    ];
    for script in attacks {
        env.write("victim", "keep me");
        let result = run(&env, &host, script).await;
        assert!(is_denied(&result), "{script:?} was not denied: {result:?}");
        assert!(env.path("victim").exists(), "{script:?} deleted the file");
        let (ask, action) = host.asks_for("bash").pop().unwrap();
        assert_eq!(action, Action::Deny);
        assert!(
            ask.patterns.iter().any(|p| p == "rm" || p.starts_with("rm ")),
            "{script:?}: {:?}",
            ask.patterns
        );
    }
    let result = run(&env, &host, "ls victim").await;
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test]
async fn what_cannot_be_read_asks_with_its_source_text() {
    let env = Env::new();
    let host = RulesHost::new(&[("bash", "*", Action::Ask), ("bash", "echo *", Action::Allow)]);
    let cases = [
        ("CMD=touch; $CMD x", "$CMD x"),
        ("\"$(echo touch)\" x", "\"$(echo touch)\" x"),
        ("bash -c \"$(echo touch x)\"", "bash -c \"$(echo touch x)\""),
        ("eval \"$X\"", "eval \"$X\""),
        ("echo 'unterminated", "(unparsed) echo 'unterminated"),
        ("git status $(( $(touch x) ", "(unparsed) git status $(( $(touch x)"),
    ];
    for (script, pattern) in cases {
        let result = run(&env, &host, script).await;
        assert!(is_blocked(&result), "{script:?} was not asked: {result:?}");
        let (ask, _) = host.asks_for("bash").pop().unwrap();
        assert!(ask.patterns.contains(&pattern.to_string()), "{script:?}: {:?}", ask.patterns);
        assert!(ask.always.contains(&pattern.to_string()), "always must be exact: {:?}", ask.always);
    }
    assert!(!env.path("x").exists());
}

#[tokio::test]
async fn secret_files_ask_read_in_every_position() {
    let env = Env::new();
    env.write(".env", "KEY=secret");
    env.write(".env.example", "KEY=");
    env.write("sub/config.env", "KEY=secret");
    std::os::unix::fs::symlink(env.path(".env"), env.path("notes.txt")).unwrap();
    let host = RulesHost::new(&[]);
    let cases = [
        ("cat .env", ".env"),
        ("grep KEY .env", ".env"),
        ("head -n1 < .env", ".env"),
        ("cd sub && cat config.env", "sub/config.env"),
        ("cat ./sub/../.env", ".env"),
        ("cat *.env", "*.env"),
        ("cat notes.txt", ".env"),
        ("echo \"$(< .env)\"", ".env"),
    ];
    for (script, pattern) in cases {
        let result = run(&env, &host, script).await;
        assert!(is_blocked(&result), "{script:?} was not asked: {result:?}");
        let (ask, _) = host.asks_for("read").pop().unwrap();
        assert!(ask.patterns.contains(&pattern.to_string()), "{script:?}: {:?}", ask.patterns);
    }
    let out = run(&env, &host, "cat .env.example 2>/dev/null").await.unwrap();
    assert_eq!(out.output, "KEY=");
    assert_eq!(host.asks_for("read").last().unwrap().0.patterns, vec![".env.example"]);
}

#[tokio::test]
async fn paths_leaving_the_project_ask_external_directory() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
    let real_outside = outside.path().canonicalize().unwrap();
    std::os::unix::fs::symlink(outside.path(), env.path("link")).unwrap();
    let host = RulesHost::new(&[]);
    let outside_pattern = format!("{}/*", real_outside.display());
    let cases = [
        "cat link/secret.txt".to_string(),
        "cd link && cat secret.txt".to_string(),
        "cd link; ls".to_string(),
        format!("cat {}/secret.txt", outside.path().display()),
        format!("echo hi > {}/new.txt", outside.path().display()),
        format!("grep -r s {}", outside.path().display()),
        format!("sort --output={}/out.txt secret.txt", outside.path().display()),
    ];
    for script in &cases {
        let result = run(&env, &host, script).await;
        assert!(is_blocked(&result), "{script:?} was not asked: {result:?}");
        let (ask, _) = host.asks_for("external_directory").pop().unwrap();
        assert!(ask.patterns.contains(&outside_pattern), "{script:?}: {:?}", ask.patterns);
    }
    assert!(!outside.path().join("new.txt").exists());
    let mut ctx = env.ctx();
    ctx.host = host.clone();
    let in_link = env.registry.execute("bash", json!({"command": "ls", "workdir": "link"}), &ctx).await;
    assert!(is_blocked(&in_link), "a workdir linked outside: {in_link:?}");
    let (ask, _) = host.asks_for("external_directory").pop().unwrap();
    assert_eq!(ask.patterns, vec![outside_pattern.clone()]);
    assert!(run(&env, &host, "cat missing.txt; ls .").await.is_ok());
}

#[tokio::test]
async fn always_patterns_follow_the_normalised_arity_prefix() {
    let env = Env::new();
    let host = RulesHost::new(&[("bash", "*", Action::Ask)]);
    let result =
        run(&env, &host, "'git' status --short && /usr/bin/npm run dev -- -p 3 | GIT_PAGER=cat git log")
            .await;
    assert!(is_blocked(&result));
    let (ask, _) = host.asks_for("bash").pop().unwrap();
    assert_eq!(ask.patterns, vec!["git status --short", "npm run dev -- -p 3", "GIT_PAGER=cat git log"]);
    assert_eq!(ask.always, vec!["git status *", "npm run dev *", "GIT_PAGER=cat git log *"]);
}

#[test]
fn the_test_matcher_follows_the_reference() {
    assert!(wildcard("rm *", "rm"));
    assert!(wildcard("rm *", "rm -rf x"));
    assert!(wildcard("rm *", "rm *.txt"));
    assert!(!wildcard("rm *", "rmdir x"));
    assert!(wildcard("*.env", ".env"));
    assert!(!wildcard("git status *", "GIT_DIR=x git status"));
}
