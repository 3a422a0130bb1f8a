//! The terminal's modes: raw input, the alternate screen, mouse wheel and bracketed paste on entry;
//! everything put back on exit, on a panic (a hook restores before the message prints) and on the
//! signals the runtime turns into a normal exit.

use std::io::{Stdout, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

use codeloop_types::LockExt;
use crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture,
};
use crossterm::terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

/// Whether the terminal is in the UI's modes now (so restoring twice is harmless).
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();
/// The terminal's stderr while it is redirected to a log file.
static SAVED_STDERR: Mutex<Option<OwnedFd>> = Mutex::new(None);

pub type Term = Terminal<CrosstermBackend<Stdout>>;

/// The terminal in the UI's modes; dropping it restores the terminal.
pub struct Guard {
    pub terminal: Term,
}

impl Guard {
    /// Takes over the terminal. With `log`, stderr (ours and that of every child that inherits it, such
    /// as MCP servers) goes to that file until the terminal is restored, so nothing writes over the UI.
    pub fn enter(log: Option<&Path>) -> anyhow::Result<Guard> {
        install_panic_hook();
        if let Some(log) = log {
            redirect_stderr(log);
        }
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        let mut stdout = std::io::stdout();
        if let Err(e) =
            crossterm::execute!(stdout, EnterAlternateScreen, EnableMouseCapture, EnableBracketedPaste)
        {
            restore();
            return Err(e.into());
        }
        match Terminal::new(CrosstermBackend::new(stdout)) {
            Ok(terminal) => Ok(Guard { terminal }),
            Err(e) => {
                restore();
                Err(e.into())
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

/// Puts the terminal back as it was (idempotent).
pub fn restore() {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return;
    }
    let mut stdout = std::io::stdout();
    let _ = crossterm::execute!(
        stdout,
        DisableBracketedPaste,
        DisableMouseCapture,
        LeaveAlternateScreen,
        crossterm::cursor::Show
    );
    let _ = disable_raw_mode();
    let _ = stdout.flush();
    let saved = SAVED_STDERR.locked().take();
    if let Some(saved) = saved {
        let _ = rustix::stdio::dup2_stderr(&saved);
    }
}

/// Points fd 2 at `log` (appending), keeping the terminal's stderr to put back. Best effort: without
/// the file, stderr stays on the terminal.
fn redirect_stderr(log: &Path) {
    if let Some(dir) = log.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let Ok(file) = std::fs::OpenOptions::new().create(true).append(true).open(log) else { return };
    let Ok(saved) = rustix::io::dup(std::io::stderr().as_fd()) else { return };
    if rustix::stdio::dup2_stderr(file.as_fd()).is_ok() {
        *SAVED_STDERR.locked() = Some(saved);
    }
}

fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
