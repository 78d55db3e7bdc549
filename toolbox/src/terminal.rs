//! Asking a person on the terminal: one question at a time, about the call shown.
//!
//! The question goes to `/dev/tty`, not to stdout or stderr (those may be piped), after a
//! reset of the terminal's attributes (a model's text cannot leave it invisible), and shows
//! the call's [`Preview`](toolbox::core::Preview): the diff, the real path, the command and
//! its folder. Keys typed before the question appeared are thrown away (`tcflush`), so a
//! `y` meant for something else cannot answer it. Callers ask one question at a time and
//! render nothing else while one is open.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use toolbox::host::{ApprovalRequest, QuestionKind};
use toolbox::ApprovalDecision;

/// How a question ended.
pub(crate) enum Asked {
    /// The person answered.
    Answer(ApprovalDecision),
    /// `--approve yes` answered for nobody: the call runs, and no person is named on it.
    Automatic(ApprovalDecision),
    /// The person answered a review: approve or deny (reject), with an optional comment.
    Review(ApprovalDecision, Option<String>),
    /// The person declined to review (Enter, `d`, or Ctrl-D at the question): neither
    /// approved nor rejected, so the review ends unanswered (not reviewed), and what it asked
    /// about stays pending. Carries why, for the model.
    Declined(String),
    /// Nobody can be asked: there is no terminal. Carries the refusal the call gets.
    NoTerminal(String),
    /// The call stopped waiting before an answer came (it timed out or was cancelled).
    Gone,
}

/// How often a question checks whether its call still waits.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// Whether a terminal can be asked at all (for refusing `--approve ask` at start-up).
pub(crate) fn available() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .is_ok_and(|tty| tty.is_terminal())
}

/// What a review gets from a front end started with `--approve yes|no` (`command`): those
/// answer tool approvals, never a review, which only a person answers.
pub(crate) fn review_needs_a_person(command: &str) -> String {
    format!(
        "a review needs a person's answer, and toolbox {command} was started with --approve \
         yes or no, which answers tool approvals only; to be asked, run it on a terminal with \
         --approve ask (the default), or answer over HTTP (toolbox serve)"
    )
}

/// Delivers what was asked to the executor: a tool approval, a review answered by the person
/// (`by` the terminal), or a refusal without asking.
pub(crate) fn deliver(executor: &toolbox::ToolExecutor, session: &str, call: &str, asked: Asked) {
    match asked {
        // The person at the terminal: their answer is recorded as theirs (`approved_by`).
        Asked::Answer(decision) => {
            executor.respond_as_person(session, call, decision, None, "terminal");
        }
        Asked::Automatic(decision) => {
            executor.respond_approval(session, call, decision);
        }
        Asked::Review(decision, feedback) => {
            executor.respond_as_person(session, call, decision, feedback, "terminal");
        }
        // Not a rejection: the review ends the way one nobody answered does.
        Asked::Declined(reason) => {
            executor.deny_approval(session, call, reason);
        }
        Asked::NoTerminal(reason) => {
            eprintln!("toolbox: {reason}");
            executor.deny_approval(session, call, reason);
        }
        Asked::Gone => {}
    }
}

/// Why a review the person declined has no answer, for the model.
const DECLINED: &str =
    "the person at the terminal declined to review it (neither approved nor rejected)";

/// What a question gets when there is no terminal: a call's refusal, or for a review, why no
/// one answered.
fn no_one_to_ask(request: &ApprovalRequest) -> String {
    if request.kind == QuestionKind::Review {
        "a review needs a person's answer, and there is no terminal to ask on (no /dev/tty)".into()
    } else {
        no_terminal_refusal(request.shown_tool())
    }
}

/// The refusal a call gets when nobody can be asked, naming what would allow it.
pub(crate) fn no_terminal_refusal(tool: &str) -> String {
    format!(
        "tool {tool} needs approval (permission mode auto) and there is no terminal to ask on, \
         so the call was refused; to allow such calls, use --approve yes or --mode full"
    )
}

/// Asks about `request` on the terminal until the person answers or `still_waiting` says
/// the call gave up (checked every [`CHECK_EVERY`]).
pub(crate) fn ask(request: &ApprovalRequest, still_waiting: impl Fn() -> bool) -> Asked {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty");
    let mut tty = match tty {
        Ok(tty) if tty.is_terminal() => tty,
        _ => return Asked::NoTerminal(no_one_to_ask(request)),
    };
    // What went to stderr before (the call's own line) shows first.
    toolbox::stderr_pump::flush_installed(Duration::from_millis(100), Duration::from_millis(500));
    let colour = std::env::var_os("NO_COLOR").is_none();
    // Keys typed before the question was on the screen are not its answer.
    toolbox::host::tty::discard_typed_ahead(&tty);
    let question = question_text(request, colour);
    let _ = tty.write_all(question.as_bytes());
    let _ = tty.flush();
    let review = request.kind == QuestionKind::Review;
    loop {
        let answer = match read_line(&mut tty, &still_waiting) {
            Line::Read(line) => line.trim().to_ascii_lowercase(),
            Line::StoppedWaiting => {
                let _ = tty.write_all(b"\n(no answer needed any more: the call stopped waiting)\n");
                return Asked::Gone;
            }
            // Ctrl-D at a review: no answer given (and the cursor is still on the prompt).
            Line::EndOfInput if review => {
                let _ = tty.write_all(b"\n");
                "d".into()
            }
            // The terminal went away (hang-up): nobody can answer.
            Line::HungUp | Line::EndOfInput => return Asked::NoTerminal(no_one_to_ask(request)),
        };
        if !still_waiting() {
            let _ = tty.write_all(b"(too late: the call stopped waiting)\n");
            return Asked::Gone;
        }
        let decision = match answer.as_str() {
            "y" | "yes" => ApprovalDecision::Approve,
            "s" | "session" if !review => ApprovalDecision::ApproveForSession,
            "n" | "no" | "r" | "reject" if review => ApprovalDecision::Deny,
            "" | "d" | "decline" | "skip" if review => {
                let _ = writeln!(tty, "→ declined: not reviewed, it stays pending");
                return Asked::Declined(DECLINED.into());
            }
            "n" | "no" | "" => ApprovalDecision::Deny,
            _ if review => {
                let _ = tty.write_all(
                    b"Please answer y (approve), n (reject) or d / Enter (decline, not reviewed): ",
                );
                continue;
            }
            _ => {
                let _ =
                    tty.write_all(b"Please answer y (yes), s (yes for this session) or n (no): ");
                continue;
            }
        };
        if review {
            let _ = tty.write_all(b"Comment for the model (optional, Enter for none): ");
            let _ = tty.flush();
            let comment = match read_line(&mut tty, &still_waiting) {
                Line::Read(line) => line,
                // Ctrl-D: no comment.
                Line::EndOfInput => String::new(),
                Line::StoppedWaiting | Line::HungUp => return Asked::Gone,
            };
            let said = if decision == ApprovalDecision::Approve {
                "approved"
            } else {
                "rejected"
            };
            let _ = writeln!(tty, "→ {said}");
            let comment = comment.trim().to_string();
            return Asked::Review(decision, (!comment.is_empty()).then_some(comment));
        }
        let said = match decision {
            ApprovalDecision::Approve => "approved",
            ApprovalDecision::ApproveForSession => "approved for the rest of this session",
            ApprovalDecision::Deny => "denied",
        };
        let _ = writeln!(tty, "→ {said}");
        return Asked::Answer(decision);
    }
}

/// What one [`read_line`] got.
enum Line {
    /// A line (without its newline; cut at 64 KiB). Whatever was typed after it is dropped.
    Read(String),
    /// The call stopped waiting first.
    StoppedWaiting,
    /// The person ended the input (Ctrl-D on an empty line); the terminal is still there.
    EndOfInput,
    /// The terminal went away.
    HungUp,
}

/// Reads one line from the terminal, checking every [`CHECK_EVERY`] that the call still
/// waits for it.
fn read_line(tty: &mut std::fs::File, still_waiting: &impl Fn() -> bool) -> Line {
    use toolbox::host::tty::{self, Readiness};
    let mut line = Vec::new();
    loop {
        let hung_up = match tty::wait_readable(&*tty, Some(CHECK_EVERY)) {
            Err(_) => return Line::HungUp,
            Ok(Readiness::TimedOut) => {
                if !still_waiting() {
                    return Line::StoppedWaiting;
                }
                continue;
            }
            Ok(Readiness::Readable { hung_up }) => hung_up,
        };
        let mut buf = [0u8; 256];
        let n = match tty::read(&*tty, &mut buf) {
            Ok(n) => n,
            Err(_) => return Line::HungUp,
        };
        if n == 0 {
            // Nothing to read, yet no hang-up: Ctrl-D was typed.
            if !hung_up {
                if line.is_empty() {
                    return Line::EndOfInput;
                }
                return Line::Read(String::from_utf8_lossy(&line).into_owned());
            }
            return Line::HungUp;
        }
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            return Line::Read(String::from_utf8_lossy(&line[..end]).into_owned());
        }
        if line.len() > 64 * 1024 {
            return Line::Read(String::from_utf8_lossy(&line).into_owned());
        }
    }
}

/// The whole question, written in one go: a reset, what the call will do, then the choice.
fn question_text(request: &ApprovalRequest, colour: bool) -> String {
    let (bold, reset) = if colour {
        ("\x1b[1m", "\x1b[0m")
    } else {
        ("", "")
    };
    if request.kind == QuestionKind::Review {
        return format!(
            "\x1b[0m\x1b[?25h\n{bold}toolbox asks you to review:{reset}\n{}\n\
             [y]es, approve / [n]o, reject / [D]ecline, not reviewed now: ",
            request.preview.to_text(colour),
        );
    }
    // Named as the call named it (`write_file`), as the model and the MCP form say it.
    let tool = toolbox::core::preview::terminal_safe(request.shown_tool());
    format!(
        // ESC[0m: attributes off (a hidden or coloured text before cannot carry over);
        // ESC[?25h: the cursor shown.
        "\x1b[0m\x1b[?25h\n{bold}toolbox asks: allow {tool} (risk {})?{reset}\n{}\n\
         [y]es / [s]ession (allow {tool} for the rest of this session) / [N]o: ",
        request.risk,
        request.preview.to_text(colour),
    )
}
