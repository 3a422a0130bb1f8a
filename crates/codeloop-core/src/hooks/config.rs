//! The `[hooks]` settings (DESIGN.md §5d) in Claude Code's shape, as written in TOML or in Claude's
//! `settings.json`, and their compiled form: each event's matcher groups with their source, in config
//! order. Reading files and trust are [`crate::config`]'s; running handlers is [`super::run`]'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::HookEvent;

/// `[hooks]`: `import_claude` and one array of matcher groups per event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HooksSettings {
    /// Also load the hooks of `~/.claude/settings.json` and a trusted project's `.claude/settings*.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import_claude: Option<bool>,
    #[serde(flatten)]
    pub events: BTreeMap<String, Vec<MatcherGroup>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MatcherGroup {
    /// An unanchored, case-sensitive regular expression; `""`, `"*"` or absent match everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    #[serde(default)]
    pub hooks: Vec<HandlerSettings>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HandlerKind {
    #[default]
    Command,
    Http,
}

/// What a handler's crash or time-out does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// A warning, and the action proceeds.
    #[default]
    Proceed,
    /// A crash or time-out blocks (on events that can block).
    Block,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HandlerSettings {
    #[serde(default, rename = "type")]
    pub kind: HandlerKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Seconds; default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<OnError>,
}

/// Where a hook was written (the `source` of `hook.ran`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::VariantArray,
)]
#[strum(serialize_all = "kebab-case")]
pub enum HookSource {
    #[serde(rename = "user")]
    User,
    #[serde(rename = "project")]
    Project,
    #[serde(rename = "claude-user")]
    ClaudeUser,
    #[serde(rename = "claude-project")]
    ClaudeProject,
}

impl HookSource {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One file's hooks, as loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct HookLayer {
    pub source: HookSource,
    pub path: PathBuf,
    pub settings: HooksSettings,
}

/// Default handler time-out (Claude Code's).
pub const DEFAULT_TIMEOUT_SECS: f64 = 600.0;

/// One handler ready to run.
#[derive(Debug, Clone)]
pub struct Handler {
    pub source: HookSource,
    pub kind: HandlerKind,
    /// The command (`sh -c`), or the URL.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub timeout: std::time::Duration,
    pub on_error: OnError,
}

#[derive(Debug, Clone)]
pub(super) struct Group {
    /// `None`: every subject.
    pub matcher: Option<regex::Regex>,
    pub handlers: Vec<Handler>,
}

/// Every loaded hook, per event, in config order. Cheap to ask whether an event has any.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    pub(super) groups: [Vec<Group>; HookEvent::COUNT],
    /// Problems found while compiling (a bad regex, an unknown event): warnings for the user.
    pub warnings: Vec<String>,
}

impl Hooks {
    pub fn compile(layers: &[HookLayer]) -> Hooks {
        let mut hooks = Hooks::default();
        for layer in layers {
            for (event_name, groups) in &layer.settings.events {
                let Some(event) = HookEvent::parse(event_name) else {
                    hooks.warnings.push(format!(
                        "{}: unknown hook event `{event_name}` (ignored); the events are {}",
                        layer.path.display(),
                        HookEvent::ALL.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ")
                    ));
                    continue;
                };
                for group in groups {
                    if let Some(compiled) = hooks.compile_group(layer, event_name, group) {
                        hooks.groups[event as usize].push(compiled);
                    }
                }
            }
        }
        hooks
    }

    fn compile_group(&mut self, layer: &HookLayer, event: &str, group: &MatcherGroup) -> Option<Group> {
        let matcher = match group.matcher.as_deref() {
            None | Some("") | Some("*") => None,
            Some(pattern) => match regex::Regex::new(pattern) {
                Ok(regex) => Some(regex),
                Err(e) => {
                    self.warnings.push(format!(
                        "{}: hooks.{event} matcher `{pattern}` is not a valid regular expression ({e}); ignored",
                        layer.path.display()
                    ));
                    return None;
                }
            },
        };
        let mut handlers = Vec::new();
        for handler in &group.hooks {
            let target = match handler.kind {
                HandlerKind::Command => handler.command.clone(),
                HandlerKind::Http => handler.url.clone(),
            };
            let Some(target) = target.filter(|t| !t.trim().is_empty()) else {
                let key = if handler.kind == HandlerKind::Http { "url" } else { "command" };
                self.warnings.push(format!(
                    "{}: a hooks.{event} handler has no `{key}`; ignored",
                    layer.path.display()
                ));
                continue;
            };
            let secs = handler.timeout.filter(|t| t.is_finite() && *t > 0.0).unwrap_or(DEFAULT_TIMEOUT_SECS);
            handlers.push(Handler {
                source: layer.source,
                kind: handler.kind,
                target,
                headers: handler.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                timeout: std::time::Duration::from_secs_f64(secs),
                on_error: handler.on_error.unwrap_or_default(),
            });
        }
        Some(Group { matcher, handlers })
    }

    /// Whether any hook is configured for `event` (the hot path's only cost when none is).
    pub fn any(&self, event: HookEvent) -> bool {
        self.groups[event as usize].iter().any(|g| !g.handlers.is_empty())
    }

    pub fn is_empty(&self) -> bool {
        HookEvent::ALL.iter().all(|e| !self.any(*e))
    }

    /// Whether a handler of `event` matches one of `subjects` (allocates nothing).
    pub fn matches(&self, event: HookEvent, subjects: &[&str]) -> bool {
        self.groups[event as usize].iter().any(|group| {
            !group.handlers.is_empty()
                && match &group.matcher {
                    None => true,
                    Some(regex) => subjects.is_empty() || subjects.iter().any(|s| regex.is_match(s)),
                }
        })
    }

    /// The handlers for `event` whose matcher matches one of `subjects` (none given: every group), in
    /// config order, identical ones (same kind and command or URL) once.
    pub fn matching(&self, event: HookEvent, subjects: &[&str]) -> Vec<Handler> {
        let mut out: Vec<Handler> = Vec::new();
        for group in &self.groups[event as usize] {
            let matches = match &group.matcher {
                None => true,
                Some(regex) => subjects.is_empty() || subjects.iter().any(|s| regex.is_match(s)),
            };
            if !matches {
                continue;
            }
            for handler in &group.handlers {
                if !out.iter().any(|h| h.kind == handler.kind && h.target == handler.target) {
                    out.push(handler.clone());
                }
            }
        }
        out
    }

    /// Every hook with its event and matcher, for `codeloop hooks list`.
    pub fn list(&self) -> Vec<(HookEvent, Option<String>, Handler)> {
        let mut out = Vec::new();
        for event in HookEvent::ALL {
            for group in &self.groups[event as usize] {
                for handler in &group.handlers {
                    out.push((event, group.matcher.as_ref().map(|r| r.as_str().to_owned()), handler.clone()));
                }
            }
        }
        out
    }
}

/// Reads the `hooks` of a Claude Code `settings.json`; a missing file is no hooks.
pub fn read_claude_settings(path: &std::path::Path) -> Result<Option<HooksSettings>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    #[derive(Deserialize)]
    struct ClaudeSettings {
        #[serde(default)]
        hooks: Option<BTreeMap<String, Vec<MatcherGroup>>>,
    }
    let settings: ClaudeSettings =
        serde_json::from_str(&text).map_err(|e| format!("invalid JSON in {}: {e}", path.display()))?;
    Ok(settings.hooks.map(|events| HooksSettings { import_claude: None, events }))
}

#[cfg(test)]
mod hooksource_text {
    use super::HookSource;
    use strum::VariantArray as _;

    #[test]
    fn the_text_is_the_serialized_name() {
        for value in HookSource::VARIANTS {
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
    }
}
