//! Permission rules (reference §9): wildcard matching and "last matching rule wins" evaluation.

use codeloop_types::{PermissionAction, PermissionRule};

/// `*` matches any run of characters (including `/`), `?` one character, everything else literally.
/// A pattern ending in `" *"` also matches the bare prefix, so `git status *` matches `git status`.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let text = text.replace('\\', "/");
    let pattern = pattern.replace('\\', "/");
    if let Some(prefix) = pattern.strip_suffix(" *")
        && text == prefix
    {
        return true;
    }
    glob(pattern.as_bytes(), text.as_bytes())
}

/// Iterative wildcard matching with single-star backtracking: linear in practice, no recursion. Only the
/// pattern has wildcards: a `*` or `?` in the text is an ordinary character (`rm *` matches `rm *.txt`).
/// `?` matches one character, not one byte.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == b'?' {
            p += 1;
            t += utf8_len(text[t]);
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Bytes in the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte).
fn utf8_len(lead: u8) -> usize {
    match lead {
        0xF0..=0xF7 => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

/// The action for one `permission` + `pattern` across layered rulesets: the last matching rule wins; no
/// match means ask.
pub fn evaluate<'a>(
    permission: &str,
    pattern: &str,
    layers: impl IntoIterator<Item = &'a [PermissionRule]>,
) -> (PermissionAction, Option<&'a PermissionRule>) {
    last_match(permission, pattern, layers, |_| true)
}

/// Like [`evaluate`], but an `allow` counts only from a rule that names both the permission and the
/// subject: a permission without wildcards and a pattern that does not start with `*` (for
/// `sandbox_escalate`, naming the permission is enough). Protected paths and sandbox escapes are granted
/// this way only (DESIGN.md §5a), so `"*" = "allow"` or `edit = "allow"` never covers them; a deny or ask
/// of any shape still counts.
pub fn evaluate_explicit<'a>(
    permission: &str,
    pattern: &str,
    layers: impl IntoIterator<Item = &'a [PermissionRule]>,
) -> (PermissionAction, Option<&'a PermissionRule>) {
    last_match(permission, pattern, layers, |rule| {
        let names_it = !rule.permission.contains('*')
            && (!rule.pattern.starts_with('*') || rule.permission == "sandbox_escalate");
        names_it || rule.action != PermissionAction::Allow
    })
}

/// The last rule that `counts` and matches, and its action (ask when none does).
fn last_match<'a>(
    permission: &str,
    pattern: &str,
    layers: impl IntoIterator<Item = &'a [PermissionRule]>,
    counts: impl Fn(&PermissionRule) -> bool,
) -> (PermissionAction, Option<&'a PermissionRule>) {
    let mut found: Option<&PermissionRule> = None;
    for layer in layers {
        for rule in layer {
            if counts(rule)
                && wildcard_match(&rule.permission, permission)
                && wildcard_match(&rule.pattern, pattern)
            {
                found = Some(rule);
            }
        }
    }
    (found.map(|r| r.action).unwrap_or(PermissionAction::Ask), found)
}

/// True when neither the run's rules (`defaults`, then `layers`) nor a project's narrowing rules switch
/// `permission` off: the model is offered its tools.
pub fn offered(
    permission: &str,
    defaults: &[PermissionRule],
    layers: &[PermissionRule],
    narrowing: &[PermissionRule],
) -> bool {
    !disabled(permission, [defaults, layers]) && !disabled(permission, [narrowing])
}

/// True when the last rule matching `permission` for every pattern (`*`) denies it: the tool is then not
/// offered to the model at all.
pub fn disabled<'a>(permission: &str, layers: impl IntoIterator<Item = &'a [PermissionRule]>) -> bool {
    let mut last: Option<&PermissionRule> = None;
    for layer in layers {
        for rule in layer {
            if wildcard_match(&rule.permission, permission) {
                last = Some(rule);
            }
        }
    }
    matches!(last, Some(r) if r.pattern == "*" && r.action == PermissionAction::Deny)
}

#[cfg(test)]
mod tests {
    use super::*;
    use PermissionAction::*;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*", "anything/at/all"));
        assert!(wildcard_match("*.env", "config/.env"));
        assert!(!wildcard_match("*.env", "config/.env.example"));
        assert!(wildcard_match("*.env.*", "a/.env.local"));
        assert!(wildcard_match("git status *", "git status"));
        assert!(wildcard_match("git status *", "git status --short"));
        assert!(!wildcard_match("git status *", "git statusx"));
        assert!(wildcard_match("file?.txt", "file1.txt"));
        assert!(wildcard_match("/tmp/*", "/tmp/a/b"));
        assert!(!wildcard_match("/tmp/*", "/var/tmp/a"));
        assert!(wildcard_match("file?.txt", "fileé.txt"));
    }

    #[test]
    fn a_star_in_the_subject_is_an_ordinary_character() {
        // The glob tool's pattern is the subject: the blanket allow must cover it.
        assert!(wildcard_match("*", "*.txt"));
        assert!(wildcard_match("*", "**/*"));
        assert!(wildcard_match("rm *", "rm *.txt"));
        assert!(wildcard_match("rm *", "rm -rf *"));
        assert!(wildcard_match("*.env", "*.env"));
        assert!(!wildcard_match("*.env", "*.txt"));
        assert!(!wildcard_match("rm *", "rmdir *"));
        assert!(wildcard_match("git *", "git add *.rs"));
        let rules = vec![PermissionRule::new("*", "*", Allow), PermissionRule::new("bash", "rm *", Deny)];
        assert_eq!(evaluate("bash", "rm *.txt", [rules.as_slice()]).0, Deny);
        assert_eq!(evaluate("glob", "*.txt", [rules.as_slice()]).0, Allow);
    }

    #[test]
    fn last_matching_rule_wins() {
        let defaults = vec![
            PermissionRule::new("*", "*", Allow),
            PermissionRule::new("read", "*.env", Ask),
            PermissionRule::new("read", "*.env.example", Allow),
        ];
        let config =
            vec![PermissionRule::new("bash", "*", Deny), PermissionRule::new("bash", "git *", Allow)];
        let layers = || [defaults.as_slice(), config.as_slice()];
        assert_eq!(evaluate("read", "src/main.rs", layers()).0, Allow);
        assert_eq!(evaluate("read", ".env", layers()).0, Ask);
        assert_eq!(evaluate("read", ".env.example", layers()).0, Allow);
        assert_eq!(evaluate("bash", "rm -rf /", layers()).0, Deny);
        assert_eq!(evaluate("bash", "git log", layers()).0, Allow);
        assert_eq!(evaluate("bash", "ls", [&[][..]]).0, Ask);
    }

    #[test]
    fn explicit_grants_need_a_rule_that_names_the_subject() {
        let rules = vec![
            PermissionRule::new("*", "*", Allow),
            PermissionRule::new("edit", "*", Allow),
            PermissionRule::new("edit", ".codeloop/skills/*", Allow),
            PermissionRule::new("sandbox_escalate", "*", Allow),
        ];
        assert_eq!(evaluate_explicit("edit", "codeloop.toml", [rules.as_slice()]).0, Ask);
        assert_eq!(evaluate_explicit("edit", ".codeloop/skills/a.md", [rules.as_slice()]).0, Allow);
        assert_eq!(evaluate_explicit("sandbox_escalate", "make", [rules.as_slice()]).0, Allow);
        let deny = vec![PermissionRule::new("edit", ".git/*", Allow), PermissionRule::new("*", "*", Deny)];
        assert_eq!(evaluate_explicit("edit", ".git/config", [deny.as_slice()]).0, Deny);
    }

    #[test]
    fn disabled_only_for_a_blanket_deny() {
        let rules = vec![PermissionRule::new("*", "*", Allow), PermissionRule::new("edit", "*", Deny)];
        assert!(disabled("edit", [rules.as_slice()]));
        assert!(!disabled("bash", [rules.as_slice()]));
        let partial =
            vec![PermissionRule::new("edit", "*", Deny), PermissionRule::new("edit", "docs/*", Allow)];
        assert!(!disabled("edit", [partial.as_slice()]));
    }
}
