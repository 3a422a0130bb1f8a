//! A call owns its whole process tree on every path (DESIGN.md §5f): the PID namespace's init, and the
//! child subreaper of mode off. Leftovers are ended and counted; SIGTERM ends the tree gracefully (a
//! `setsid` child included) and kills what stays; the owner's end closing ends it at once.

use std::os::unix::process::CommandExt as _;
use std::time::{Duration, Instant};

use super::*;
use pretty_assertions::assert_eq;

/// Waits up to `limit` for `done`.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// A word unique to this fixture, for the command lines of the processes a test starts.
fn token(fx: &Fixture) -> String {
    format!("codeloop-tree-{}", fx.outside.path().file_name().unwrap().to_string_lossy())
}

/// Processes (seen from here, whatever namespace they are in) whose command line holds `token`; zombies
/// are gone for this purpose.
fn running(token: &str) -> usize {
    let Ok(entries) = fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter(|e| {
            let zombie = fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with(['Z', 'X'])))
                .unwrap_or(true);
            let cmdline = fs::read(e.path().join("cmdline")).unwrap_or_default();
            !zombie && String::from_utf8_lossy(&cmdline).contains(token)
        })
        .count()
}

fn started(token: &str, count: usize) {
    assert!(
        eventually(Duration::from_secs(10), || running(token) >= count),
        "the script did not start {count} processes marked {token} ({} are)",
        running(token)
    );
}

fn off(fx: &Fixture) -> SandboxPolicy {
    let mut policy = fx.policy.clone();
    policy.mode = SandboxMode::Off;
    policy
}

#[test]
fn mode_off_owns_its_tree_leftovers_are_ended_and_counted() {
    let fx = Fixture::new();
    let t = token(&fx);
    // A background child, a setsid'd one, a nohup'd one and a double fork: none outlive the call.
    let script = format!(
        "sh -c 'sleep 30; :' {t} & setsid sh -c 'sleep 31; :' {t} & nohup sh -c 'sleep 32; :' {t} >/dev/null 2>&1 & \
         (sh -c 'sleep 33; :' {t} &); while [ $(grep -l {t} /proc/[0-9]*/cmdline 2>/dev/null | wc -l) -lt 4 ]; do :; done; \
         echo main-done"
    );
    let begun = Instant::now();
    let (out, report) = bash_reported(&fx, &off(&fx), &script);
    assert!(begun.elapsed() < Duration::from_secs(20), "the call waited for its leftovers");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "main-done\n", "{}", text(&out));
    let report = report.expect("the helper reports how the tree ended");
    // Four shells and the sleep of each (under load, shells may not have started their sleep yet).
    assert!((4..=8).contains(&report.leftovers), "{report:?}");
    assert_eq!(report.process_limit, ProcessLimit::Unbounded);
    assert_eq!(running(&t), 0, "nothing outlived the call");
    let (_, report) = bash_reported(&fx, &off(&fx), "true");
    assert_eq!(report.map(|r| r.leftovers), Some(0));
}

/// Starts `script` under the helper in its own process group with a [`CallChannel`]; returns the child
/// and the channel.
fn spawn(fx: &Fixture, policy: &SandboxPolicy, script: &str) -> (std::process::Child, CallChannel) {
    let mut channel = CallChannel::new().unwrap();
    let args = [OsString::from("-c"), OsString::from(script)];
    let child = wrap_command(Path::new(HELPER), policy, OsStr::new("bash"), &args)
        .current_dir(fx.root())
        .stdin(channel.stdin())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    (child, channel)
}

/// A main shell that says goodbye on SIGTERM, a `setsid` child that does too, and one that ignores it;
/// each marked with the fixture's token.
fn stubborn_tree(fx: &Fixture) -> (String, PathBuf) {
    let (t, said) = (token(fx), fx.outside("said"));
    let script = format!(
        "trap 'echo main >> {s}; exit 3' TERM; \
         setsid bash -c 'trap \"echo setsid >> {s}; exit 0\" TERM; echo up >> {s}.up; while :; do sleep 0.05; done' {t} & \
         bash -c 'trap \"\" TERM; echo up >> {s}.up; while :; do sleep 0.05; done' {t} & \
         while :; do sleep 0.05; done",
        s = said.display()
    );
    (script, said)
}

fn sigterm_ends_the_tree_gracefully(test: &str, policy: &SandboxPolicy, fx: &Fixture) {
    let (script, said) = stubborn_tree(fx);
    let (mut child, _channel) = spawn(fx, policy, &script);
    let t = token(fx);
    started(&t, 2);
    // Counted once running, but their TERM traps must be set too before the signal means anything.
    let up = PathBuf::from(format!("{}.up", said.display()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while fs::read_to_string(&up).map_or(0, |up| up.lines().count()) < 2 {
        assert!(Instant::now() < deadline, "{test}: the two shells never set their traps");
        std::thread::sleep(Duration::from_millis(10));
    }
    let begun = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let took = begun.elapsed();
    let said = fs::read_to_string(&said).unwrap_or_default();
    assert!(said.contains("main") && said.contains("setsid"), "{test}: TERM reached the tree: {said:?}");
    assert!(took >= Duration::from_millis(1900), "{test}: the stubborn one had its grace: {took:?}");
    assert!(took < Duration::from_secs(6), "{test}: then it was killed: {took:?}");
    assert_eq!(running(&t), 0, "{test}: nothing outlived the kill");
    assert!(!status.success(), "{test}: {status:?}");
}

#[test]
fn sigterm_ends_the_whole_tree_then_kills_what_stays_in_mode_off() {
    let fx = Fixture::new();
    sigterm_ends_the_tree_gracefully("mode off", &off(&fx), &fx);
}

#[test]
fn sigterm_ends_the_whole_tree_then_kills_what_stays_in_a_namespace() {
    if !namespaces_here("sigterm_ends_the_whole_tree_then_kills_what_stays_in_a_namespace") {
        return;
    }
    let fx = Fixture::new();
    let mut policy = fx.policy.clone();
    policy.writable_roots.push(fx.outside.path().to_owned());
    sigterm_ends_the_tree_gracefully("namespace", &policy, &fx);
}

fn owner_end_ends_the_tree(test: &str, policy: &SandboxPolicy, fx: &Fixture) {
    let t = token(fx);
    let script = format!("setsid sh -c 'sleep 60; :' {t} & (sh -c 'sleep 61; :' {t} &); sleep 62");
    let (mut child, channel) = spawn(fx, policy, &script);
    started(&t, 2);
    drop(channel);
    let status = child.wait().unwrap();
    assert!(!status.success(), "{test}: {status:?}");
    assert!(eventually(Duration::from_secs(5), || running(&t) == 0), "{test}: the tree outlived its owner");
}

#[test]
fn the_owners_end_ends_the_tree_in_mode_off() {
    let fx = Fixture::new();
    owner_end_ends_the_tree("mode off", &off(&fx), &fx);
}

#[test]
fn the_owners_end_ends_the_tree_in_a_namespace() {
    if !namespaces_here("the_owners_end_ends_the_tree_in_a_namespace") {
        return;
    }
    let fx = Fixture::new();
    let mut policy = fx.policy.clone();
    policy.writable_roots.push(fx.outside.path().to_owned());
    owner_end_ends_the_tree("namespace", &policy, &fx);
}
