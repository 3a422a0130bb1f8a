//! The terminal's modes: raw input, the alternate screen, mouse wheel and bracketed paste on entry;
//! everything put back on exit, on a panic (a hook restores before the message prints) and on the
//! signals the runtime turns into a normal exit.

use std::io::{Stdout, Write};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture,
};
use crossterm::terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

/// Whether the terminal is in the UI's modes now (so restoring twice is harmless).
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

pub type Term = Terminal<CrosstermBackend<Stdout>>;

/// The terminal in the UI's modes; dropping it restores the terminal.
pub struct Guard {
    pub terminal: Term,
}

impl Guard {
    pub fn enter() -> anyhow::Result<Guard> {
        install_panic_hook();
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
