//! `toolbox call`'s progress line: a tool's counted progress
//! ([`ToolEvent::Progress`](toolbox::host::ToolEvent::Progress) with `done`) as one line on
//! stderr, redrawn in place, cleared before anything else is written there and when the call
//! ends. Only when stderr is a terminal: a pipe or a file gets no line at all.
//!
//! stderr is the pump's pipe by the time a call runs (`toolbox::stderr_pump`), so whether it
//! is a terminal, and a copy of that terminal to ask its width, are taken in `main` first
//! ([`remember_stderr`]). The line goes through fd 2 like everything else, so it keeps its
//! place among the other writes.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::{Mutex, OnceLock};

/// A private copy of the terminal stderr was when toolbox started; `None` when it was none.
static TERMINAL: OnceLock<Option<OwnedFd>> = OnceLock::new();

/// Erases the line the cursor is on and goes to its start.
const ERASE: &str = "\r\x1b[2K";

/// Records whether stderr is a terminal (`is_terminal`, asked before the pump replaced it),
/// and keeps a copy of it to ask its width. Call once, before the pump is installed.
pub(crate) fn remember_stderr(is_terminal: bool) {
    let copy = is_terminal.then(|| toolbox::host::tty::copy_of(std::io::stderr()).ok());
    let _ = TERMINAL.set(copy.flatten());
}

/// The terminal's width in columns, now (80 when it cannot say).
fn columns(terminal: &OwnedFd) -> usize {
    toolbox::host::tty::columns(terminal).unwrap_or(80)
}

/// The progress line of one call.
pub(crate) struct ProgressLine {
    /// The terminal, when stderr is one; `None`: never draw.
    terminal: Option<&'static OwnedFd>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// A line is on the screen.
    shown: bool,
    /// The call ended: a report that comes late is not drawn.
    ended: bool,
}

impl ProgressLine {
    /// A line drawn only when stderr was a terminal at start (see [`remember_stderr`]).
    pub(crate) fn new() -> ProgressLine {
        ProgressLine {
            terminal: TERMINAL.get().and_then(Option::as_ref),
            state: Mutex::default(),
        }
    }

    /// Draws `tool: message` over the line drawn before, cut to the terminal's width. Nothing
    /// when stderr is no terminal. The text is shown terminal-safe, as tool output is.
    pub(crate) fn show(&self, tool: &str, message: &str) {
        let Some(terminal) = self.terminal else {
            return;
        };
        // One line: terminal_safe keeps newlines and tabs, which would break it.
        let one_line = format!("{tool}: {message}").replace(['\n', '\t'], " ");
        let mut text = toolbox::core::preview::terminal_safe(&one_line);
        // One column short of the width: a line that fills it wraps on some terminals.
        let room = columns(terminal).saturating_sub(1).max(1);
        if let Some((cut, _)) = text.char_indices().nth(room) {
            text.truncate(cut);
        }
        let mut state = self.lock();
        if state.ended {
            return;
        }
        let _ = std::io::stderr()
            .lock()
            .write_all(format!("{ERASE}{text}").as_bytes());
        state.shown = true;
    }

    /// Erases the line, if one is shown, so that what comes next starts on a clean line.
    pub(crate) fn clear(&self) {
        let mut state = self.lock();
        if state.shown {
            let _ = std::io::stderr().lock().write_all(ERASE.as_bytes());
            state.shown = false;
        }
    }

    /// The call ended: erases the line, and draws none from now on.
    /// What comes next (the envelope, on stdout) waits until the erasing reached stderr.
    pub(crate) fn end(&self) {
        let mut state = self.lock();
        state.ended = true;
        if state.shown {
            let _ = std::io::stderr().lock().write_all(ERASE.as_bytes());
            state.shown = false;
            drop(state);
            toolbox::stderr_pump::flush_installed(
                std::time::Duration::from_millis(100),
                std::time::Duration::from_millis(500),
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
