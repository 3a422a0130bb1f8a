//! Slash commands (DESIGN.md §5): what each does to the UI and which engine operation it asks for.

use codeloop_types::{ModelRef, SessionId};

use super::{Action, App, RunState, Scroll};
use crate::convo::Notice;

impl App {
    pub(super) fn command(&mut self, line: &str) -> Vec<Action> {
        let (name, arg) = match line.split_once(char::is_whitespace) {
            Some((name, arg)) => (name, arg.trim()),
            None => (line, ""),
        };
        let id = self.session_id().cloned();
        let idle = |app: &mut App, what: &str| {
            if app.busy() {
                app.convo.notice(Notice::warning(format!(
                    "a run is active: press Esc to interrupt it, then {what}"
                )));
                false
            } else {
                true
            }
        };
        match (name, id) {
            ("new", _) => self.switch_to(None),
            ("sessions", _) if !arg.is_empty() => self.switch_to(Some(SessionId::from(arg))),
            ("sessions", _) => vec![Action::ListSessions],
            ("undo", Some(id)) => {
                if !idle(self, "/undo") {
                    return Vec::new();
                }
                match self.convo.last_visible_user() {
                    Some(message) => vec![Action::Revert(id, message)],
                    None => {
                        self.convo.notice(Notice::warning("nothing to undo"));
                        Vec::new()
                    }
                }
            }
            ("redo", Some(id)) => {
                if !idle(self, "/redo") {
                    return Vec::new();
                }
                if self.convo.reverted_from().is_none() {
                    self.convo.notice(Notice::warning("nothing to redo"));
                    return Vec::new();
                }
                vec![Action::Unrevert(id)]
            }
            ("compact", Some(id)) => {
                if !idle(self, "/compact") {
                    return Vec::new();
                }
                self.state = RunState::Busy;
                self.convo.notice(Notice::info("compacting: summarising the conversation…"));
                let focus = Some(arg.trim().to_owned()).filter(|f| !f.is_empty());
                vec![Action::Compact(id, focus)]
            }
            ("model", _) if arg.is_empty() => {
                let current = self.current_model().map_or("(config default)".to_owned(), ToString::to_string);
                self.convo
                    .notice(Notice::info(format!("model: {current} (change it with /model provider/model)")));
                Vec::new()
            }
            ("model", _) => match arg.parse::<ModelRef>() {
                Ok(model) => vec![Action::CheckModel(model)],
                Err(e) => {
                    self.convo.notice(Notice::error(e.to_string()));
                    Vec::new()
                }
            },
            ("agent", _) if arg.is_empty() => {
                let current = self.current_agent().unwrap_or("build").to_owned();
                self.convo.notice(Notice::info(format!("agent: {current} (change it with /agent NAME)")));
                Vec::new()
            }
            ("agent", _) => vec![Action::CheckAgent(arg.to_owned())],
            ("effort", _) if arg.is_empty() => {
                let current = self.effort.map_or("default (the agent's or model's)", |e| e.as_str());
                self.convo.notice(Notice::info(format!(
                    "effort: {current} (change it with /effort none|low|medium|high|max|default)"
                )));
                Vec::new()
            }
            ("effort", _) if arg == "default" => {
                self.effort = None;
                self.convo.notice(Notice::info("effort: the agent's or model's, from the next prompt"));
                Vec::new()
            }
            ("effort", _) => match arg.parse::<codeloop_types::Effort>() {
                Ok(effort) => {
                    self.effort = Some(effort);
                    self.convo.notice(Notice::info(format!(
                        "effort: {effort} from the next prompt (a level the model does not take is not sent)"
                    )));
                    Vec::new()
                }
                Err(e) => {
                    self.convo.notice(Notice::error(e.to_string()));
                    Vec::new()
                }
            },
            ("export", Some(id)) => vec![Action::Export(id)],
            ("jobs", Some(id)) => self.jobs_command(id, arg),
            ("help", _) => {
                self.convo.notice(Notice::info(self.help()));
                Vec::new()
            }
            ("quit" | "exit" | "q", _) => {
                self.quit = true;
                vec![Action::Quit]
            }
            ("undo" | "redo" | "compact" | "export" | "jobs", None) => {
                self.convo.notice(Notice::error("no session is open yet"));
                Vec::new()
            }
            (other, Some(id)) if self.commands.iter().any(|c| c.name == other) => {
                self.scrolls.push(Scroll::End);
                self.created_empty = false;
                if self.busy() {
                    self.queued += 1;
                    self.convo.notice(Notice::info(format!("queued (run when the run ends): /{other}")));
                } else {
                    self.state = RunState::Busy;
                }
                vec![Action::RunCommand(id, other.to_owned(), arg.to_owned(), self.effort)]
            }
            (other, _) => {
                self.convo
                    .notice(Notice::error(format!("unknown command /{other}: /help lists the commands")));
                Vec::new()
            }
        }
    }

    /// [`HELP`] and the directory's commands with their descriptions.
    fn help(&self) -> String {
        let mut help = HELP.to_owned();
        let extra: Vec<String> = self
            .commands
            .iter()
            .filter(|c| !BUILT_IN.contains(&c.name.as_str()))
            .map(|c| {
                let usage = match &c.hint {
                    Some(hint) => format!("/{} {hint}", c.name),
                    None => format!("/{}", c.name),
                };
                format!("  {usage:<18} {}", c.description.as_deref().unwrap_or(""))
            })
            .collect();
        if !extra.is_empty() {
            help.push_str("\nThis project's and your commands:\n");
            help.push_str(&extra.join("\n"));
        }
        help
    }

    /// The commands whose names start with `prefix`, built-ins first.
    pub fn matching_commands(&self, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = BUILT_IN.iter().map(|n| (*n).to_owned()).collect();
        names
            .extend(self.commands.iter().map(|c| c.name.clone()).filter(|n| !BUILT_IN.contains(&n.as_str())));
        names.retain(|n| n.starts_with(prefix));
        names
    }

    /// Tab on `/pre`: completes the command's name (to the longest common prefix when several match,
    /// which are listed).
    pub(super) fn complete(&mut self) {
        let text = self.editor.text();
        let typed = text.trim_start_matches('/');
        if typed.contains(char::is_whitespace) {
            return;
        }
        let matches = self.matching_commands(typed);
        match matches.as_slice() {
            [] => {}
            [only] => {
                self.editor.clear();
                self.editor.insert_str(&format!("/{only} "));
            }
            several => {
                let common = several.iter().skip(1).fold(several[0].clone(), |common, name| {
                    common.chars().zip(name.chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).collect()
                });
                self.editor.clear();
                self.editor.insert_str(&format!("/{common}"));
                let listed: Vec<String> = several.iter().map(|n| format!("/{n}")).collect();
                self.convo.notice(Notice::info(listed.join("  ")));
            }
        }
    }

    /// Leaves the current session for another (or a new one); an empty session this UI created is
    /// deleted so switching leaves no litter.
    pub(super) fn switch_to(&mut self, target: Option<SessionId>) -> Vec<Action> {
        if target.is_some() && target.as_ref() == self.session_id() {
            return Vec::new();
        }
        vec![Action::Open(target)]
    }
}

/// The TUI's own commands (and the engine's built-ins it lists), for completion.
const BUILT_IN: &[&str] = &[
    "new", "sessions", "undo", "redo", "compact", "init", "model", "agent", "effort", "export", "help",
    "quit",
];

pub const HELP: &str = "Commands:
  /new               start a new session
  /sessions [ID]     list this directory's sessions (Enter switches), or switch to ID
  /undo              revert the last turn: its messages and the files it changed
  /redo              bring back what /undo took away
  /compact [focus]   summarise the conversation now
  /init              have the model write or improve AGENTS.md
  /model P/M         use another model, e.g. /model openai/gpt-4.1
  /agent NAME        use another agent (build, plan, …)
  /effort LEVEL      how hard the model thinks: none, low, medium, high, max (or default)
  /export            write the session as JSON to a file
  /jobs [read|kill ID]  list the background jobs, show one's newest output, or end it
  /help              this list
  /quit              leave (Ctrl+C twice does too)
Keys:
  Enter sends · Alt+Enter new line · Enter while a run is busy queues · Esc interrupts the run
  Tab after /: complete a command's name
  Up/Down: history (input empty) · PgUp/PgDn, mouse wheel: scroll · Ctrl+T: show reasoning
  Ctrl+C clears the input; twice quits
Permission prompts: y once · a always · n reject · m reject with a message";
