//! Slash commands (DESIGN.md §5): what each does to the UI and which engine operation it asks for.

use codeloop_types::{ModelRef, SessionId};

use super::{Action, App, RunState};
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
            ("export", Some(id)) => vec![Action::Export(id)],
            ("jobs", Some(id)) => self.jobs_command(id, arg),
            ("help", _) => {
                self.convo.notice(Notice::info(HELP));
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
            (other, _) => {
                self.convo
                    .notice(Notice::error(format!("unknown command /{other}: /help lists the commands")));
                Vec::new()
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

pub const HELP: &str = "Commands:
  /new               start a new session
  /sessions [ID]     list this directory's sessions (Enter switches), or switch to ID
  /undo              revert the last turn: its messages and the files it changed
  /redo              bring back what /undo took away
  /compact           summarise the conversation now
  /model P/M         use another model, e.g. /model openai/gpt-4.1
  /agent NAME        use another agent (build, plan, …)
  /export            write the session as JSON to a file
  /jobs [read|kill ID]  list the background jobs, show one's newest output, or end it
  /help              this list
  /quit              leave (Ctrl+C twice does too)
Keys:
  Enter sends · Alt+Enter new line · Enter while a run is busy queues · Esc interrupts the run
  Up/Down: history (input empty) · PgUp/PgDn, mouse wheel: scroll · Ctrl+T: show reasoning
  Ctrl+C clears the input; twice quits
Permission prompts: y once · a always · n reject · m reject with a message";
