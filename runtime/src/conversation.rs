//! A session's conversation: `.toolbox/sessions/<sid>/messages.jsonl`, one message a line.
//!
//! Each message is appended with one write of a whole line as soon as it exists (the user's
//! message when the turn starts, the model's answer when its stream ends, the tool results
//! when the calls end), so the next turn, even in a new process, continues from it.
//!
//! Reading is forgiving, because the file outlives crashes: a line torn by a crash (or any
//! line that is not a message) is skipped with a warning, and a tool call left without its
//! result by a crash gets a result saying it was interrupted, since every model API refuses
//! a call without an answer. The folders are opened without following links and the file
//! with `O_NOFOLLOW`, refusing other hard links, as the trajectory is.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use toolbox_core::SessionId;
use toolbox_host::{Workspace, TOOLBOX_DIR};

use crate::llm::Message;

/// The folder under `.toolbox/` holding one folder per session.
pub const SESSIONS_DIR: &str = "sessions";
/// The conversation file in a session's folder.
pub const MESSAGES_FILE: &str = "messages.jsonl";
/// A conversation file larger than this is refused rather than read into memory.
pub const MAX_CONVERSATION_BYTES: u64 = 256 * 1024 * 1024;

/// The envelope a call left unanswered by a crash gets.
const INTERRUPTED: &str = r#"{"status":"error","result":"this call was interrupted: toolbox stopped before it finished, so it may or may not have run"}"#;

/// A conversation as read back.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The messages, oldest first, repaired as described in the module docs.
    pub messages: Vec<Message>,
    /// What was skipped or repaired, for people (the turn emits them as warnings).
    pub warnings: Vec<String>,
}

/// The sessions that have a conversation or a trajectory, sorted; folders whose names are no
/// valid session id (or that are links) are left out.
pub fn list_sessions(workspace: &Workspace) -> Vec<SessionId> {
    let mut found = std::collections::BTreeSet::new();
    for kind in [SESSIONS_DIR, "trajectories"] {
        let Ok(dir) = workspace.existing_toolbox_subdir(&[OsStr::new(kind)]) else {
            continue;
        };
        for entry in dir.entries().unwrap_or_default() {
            if entry.kind != toolbox_host::EntryKind::Dir {
                continue;
            }
            if let Some(sid) = entry.name.to_str().and_then(|n| SessionId::parse(n).ok()) {
                found.insert(sid.to_string());
            }
        }
    }
    found
        .into_iter()
        .filter_map(|s| SessionId::parse(&s).ok())
        .collect()
}

/// The most sessions [`session_summaries`] describes: the most recently active ones.
pub const MAX_SUMMARIES: usize = 1000;
/// How much of the start of a conversation file a summary reads to find the first message.
pub const SUMMARY_READ_BYTES: u64 = 4096;
/// How many characters of the first message a summary keeps (an ellipsis marks a cut).
pub const SUMMARY_CHARS: usize = 120;

/// What a list of sessions shows of one session, found without reading its whole
/// conversation: for a session picker (`GET /api/sessions`, a `sessions` command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    /// The session.
    pub id: SessionId,
    /// The start of the first user message, on one line (whitespace runs become one space),
    /// at most [`SUMMARY_CHARS`] characters; `None` when the conversation is empty, missing
    /// or does not start with a user message within its first [`SUMMARY_READ_BYTES`].
    pub first_message: Option<String>,
    /// When the conversation or the trajectory was last written (the later of the two
    /// files' modification times, to the second); `None` when neither exists.
    pub last_activity: Option<std::time::SystemTime>,
}

impl SessionSummary {
    /// [`last_activity`](Self::last_activity) as RFC 3339 in UTC, e.g. `2025-05-01T09:30:00Z`.
    pub fn last_activity_rfc3339(&self) -> Option<String> {
        self.last_activity.map(rfc3339_seconds)
    }
}

/// [`session_summaries`]' answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionSummaries {
    /// At most [`MAX_SUMMARIES`] sessions, most recently active first (then by id).
    pub sessions: Vec<SessionSummary>,
    /// How many more sessions exist than are listed (the least recently active ones).
    pub omitted: usize,
}

/// Summaries of the workspace's sessions (those [`list_sessions`] finds): at most
/// [`MAX_SUMMARIES`], the most recently active first, with [`SessionSummaries::omitted`]
/// saying how many were left out.
///
/// Bounded work: every session's two files are only looked at (their modification times),
/// and at most [`SUMMARY_READ_BYTES`] of each listed conversation are read, however large
/// the file. Everything is opened through the [`Workspace`] without following links.
pub fn session_summaries(workspace: &Workspace) -> SessionSummaries {
    let conversations = workspace
        .existing_toolbox_subdir(&[OsStr::new(SESSIONS_DIR)])
        .ok();
    let trajectories = workspace
        .existing_toolbox_subdir(&[OsStr::new(toolbox_executor::trajectory::DIR_NAME)])
        .ok();
    let mut found: Vec<(SessionId, Option<std::time::SystemTime>)> = list_sessions(workspace)
        .into_iter()
        .map(|sid| {
            let activity = last_activity(conversations.as_ref(), trajectories.as_ref(), &sid);
            (sid, activity)
        })
        .collect();
    // Most recent first; sessions with no file at all last; ties by id.
    found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.as_str().cmp(b.0.as_str())));
    let omitted = found.len().saturating_sub(MAX_SUMMARIES);
    found.truncate(MAX_SUMMARIES);
    let sessions = found
        .into_iter()
        .map(|(id, last_activity)| SessionSummary {
            first_message: conversations
                .as_ref()
                .and_then(|dir| first_user_message(dir, &id)),
            id,
            last_activity,
        })
        .collect();
    SessionSummaries { sessions, omitted }
}

/// The summary of one session, read as [`session_summaries`] reads each (a session never
/// written has neither a first message nor a last activity).
pub fn session_summary(workspace: &Workspace, session: &SessionId) -> SessionSummary {
    let conversations = workspace
        .existing_toolbox_subdir(&[OsStr::new(SESSIONS_DIR)])
        .ok();
    let trajectories = workspace
        .existing_toolbox_subdir(&[OsStr::new(toolbox_executor::trajectory::DIR_NAME)])
        .ok();
    SessionSummary {
        id: session.clone(),
        first_message: conversations
            .as_ref()
            .and_then(|dir| first_user_message(dir, session)),
        last_activity: last_activity(conversations.as_ref(), trajectories.as_ref(), session),
    }
}

/// The later modification time of the session's conversation and trajectory files.
fn last_activity(
    conversations: Option<&toolbox_host::Dir>,
    trajectories: Option<&toolbox_host::Dir>,
    session: &SessionId,
) -> Option<std::time::SystemTime> {
    let mtime = |dir: Option<&toolbox_host::Dir>, file: &str| {
        let folder = dir?.open_dir(OsStr::new(session.as_str())).ok()?;
        let (_, seconds) = folder.size_and_mtime(OsStr::new(file)).ok()?;
        let seconds = u64::try_from(seconds).ok()?;
        Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds))
    };
    let a = mtime(conversations, MESSAGES_FILE);
    let b = mtime(trajectories, toolbox_executor::trajectory::FILE_NAME);
    a.max(b)
}

/// The first user message within the first [`SUMMARY_READ_BYTES`] of the session's
/// conversation, shortened.
fn first_user_message(conversations: &toolbox_host::Dir, session: &SessionId) -> Option<String> {
    let folder = conversations.open_dir(OsStr::new(session.as_str())).ok()?;
    let file = folder.open_file(OsStr::new(MESSAGES_FILE)).ok()?;
    let mut head = Vec::new();
    file.take(SUMMARY_READ_BYTES).read_to_end(&mut head).ok()?;
    first_user_text(&head).map(|text| one_line(&text))
}

/// The text of the first user message in `head`, the start of a conversation file. A
/// message whose line does not end within `head` is cut: what of its text is there is used.
fn first_user_text(head: &[u8]) -> Option<String> {
    let mut lines = head.split(|&b| b == b'\n').peekable();
    while let Some(line) = lines.next() {
        let complete = lines.peek().is_some();
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if complete {
            match serde_json::from_slice::<Message>(line) {
                Ok(Message::User { content }) => return Some(content),
                _ => continue,
            }
        }
        return cut_user_text(line);
    }
    None
}

/// The text of a user message line cut short: `{"role":"user","content":"…` as the writer
/// puts it, the JSON string decoded as far as it goes.
fn cut_user_text(line: &[u8]) -> Option<String> {
    const START: &[u8] = br#"{"role":"user","content":""#;
    let rest = line.strip_prefix(START)?;
    let valid = match std::str::from_utf8(rest) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&rest[..e.valid_up_to()]).ok()?,
    };
    // Drop what may be half an escape (at most `\uXXXX`) until the rest decodes.
    let mut text = valid.to_string();
    for _ in 0..7 {
        if let Ok(decoded) = serde_json::from_str::<String>(&format!("\"{text}\"")) {
            return Some(decoded);
        }
        text.pop();
    }
    None
}

/// `time` as RFC 3339 in UTC to the second, as summaries write it: `2025-05-01T09:30:00Z`.
pub fn rfc3339_seconds(time: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}

/// A message shortened as a summary shows it: on one line (whitespace runs become one
/// space), at most [`SUMMARY_CHARS`] characters, an ellipsis marking a cut.
pub fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(SUMMARY_CHARS) {
        None => line,
        Some((cut, _)) => format!("{}…", line[..cut].trim_end()),
    }
}

/// The path of a session's conversation, as shown to people.
pub fn shown_path(session: &SessionId) -> String {
    format!("{TOOLBOX_DIR}/{SESSIONS_DIR}/{session}/{MESSAGES_FILE}")
}

/// Reads `session`'s conversation; a session never written is empty.
pub fn load(workspace: &Workspace, session: &SessionId) -> Result<Loaded> {
    let shown = shown_path(session);
    let dir =
        match workspace.toolbox_subdir(&[OsStr::new(SESSIONS_DIR), OsStr::new(session.as_str())]) {
            Ok(dir) => dir,
            Err(e) => return Err(e).with_context(|| format!("cannot open the folder of {shown}")),
        };
    let file = match dir.open_file(OsStr::new(MESSAGES_FILE)) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(e) => return Err(e).with_context(|| format!("cannot open {shown}")),
    };
    let mut bytes = Vec::new();
    file.take(MAX_CONVERSATION_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {shown}"))?;
    if bytes.len() as u64 > MAX_CONVERSATION_BYTES {
        bail!(
            "{shown} is larger than {MAX_CONVERSATION_BYTES} bytes; start a new session (or move \
             the file away)"
        );
    }
    Ok(parse(&bytes, &shown))
}

/// Parses the lines of a conversation file, skipping what does not parse.
pub fn parse(bytes: &[u8], shown: &str) -> Loaded {
    let mut loaded = Loaded::default();
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let last = lines.len().saturating_sub(1);
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Message>(line) {
            Ok(message) => loaded.messages.push(message),
            Err(e) => {
                let what = if i == last || e.is_eof() {
                    "a message cut short, as a crash leaves it"
                } else {
                    "not a message"
                };
                loaded
                    .warnings
                    .push(format!("{shown} line {}: skipped {what} ({e})", i + 1));
            }
        }
    }
    repair_unanswered_calls(&mut loaded);
    loaded
}

/// Gives every tool call without a result one saying it was interrupted, right after the
/// results it does have.
fn repair_unanswered_calls(loaded: &mut Loaded) {
    let mut out = Vec::with_capacity(loaded.messages.len());
    let mut messages = std::mem::take(&mut loaded.messages).into_iter().peekable();
    while let Some(message) = messages.next() {
        let calls = match &message {
            Message::Assistant { tool_calls, .. } => tool_calls.clone(),
            _ => Vec::new(),
        };
        out.push(message);
        if calls.is_empty() {
            continue;
        }
        let mut answered = std::collections::HashSet::new();
        while let Some(Message::Tool { tool_call_id, .. }) = messages.peek() {
            answered.insert(tool_call_id.clone());
            out.extend(messages.next());
        }
        for call in calls {
            if !answered.contains(&call.id) {
                loaded.warnings.push(format!(
                    "tool call {} ({}) has no result (toolbox stopped during it); the model is \
                     told it was interrupted",
                    call.id, call.name
                ));
                out.push(Message::Tool {
                    tool_call_id: call.id,
                    name: call.name,
                    content: INTERRUPTED.into(),
                });
            }
        }
    }
    loaded.messages = out;
}

/// Appends messages to one session's conversation file, kept open.
pub struct ConversationWriter {
    file: Mutex<File>,
    shown: String,
}

impl ConversationWriter {
    /// Opens (creating) the conversation file of `session`. A last line torn by a crash is
    /// ended first, so the next message starts on a line of its own.
    pub fn open(workspace: &Workspace, session: &SessionId) -> Result<Self> {
        let shown = shown_path(session);
        let dir = workspace
            .toolbox_subdir(&[OsStr::new(SESSIONS_DIR), OsStr::new(session.as_str())])
            .with_context(|| format!("cannot open the folder of {shown}"))?;
        let (mut file, torn) = dir
            .open_append_lines(OsStr::new(MESSAGES_FILE))
            .with_context(|| format!("cannot open {shown}"))?;
        if torn {
            file.write_all(b"\n")
                .with_context(|| format!("cannot write {shown}"))?;
        }
        Ok(ConversationWriter {
            file: Mutex::new(file),
            shown,
        })
    }

    /// Appends `messages`, each as one line written at once.
    pub fn append(&self, messages: &[Message]) -> Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        for message in messages {
            let mut line = serde_json::to_vec(message)?;
            line.push(b'\n');
            file.write_all(&line)
                .with_context(|| format!("cannot write {}", self.shown))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;

    fn user(text: &str) -> Message {
        Message::User {
            content: text.into(),
        }
    }

    #[test]
    fn messages_round_trip_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let sid = SessionId::parse("s1").unwrap();
        let writer = ConversationWriter::open(&ws, &sid).unwrap();
        let messages = vec![
            user("hi"),
            Message::Assistant {
                content: "".into(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "shell".into(),
                    arguments: "{\"command\":\"ls\"}".into(),
                }],
            },
            Message::Tool {
                tool_call_id: "c1".into(),
                name: "shell".into(),
                content: "{}".into(),
            },
        ];
        writer.append(&messages).unwrap();
        let loaded = load(&ws, &sid).unwrap();
        assert_eq!(loaded.messages, messages);
        assert!(loaded.warnings.is_empty());
    }

    #[test]
    fn a_torn_last_line_is_skipped_with_a_warning_and_ended_before_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let sid = SessionId::parse("s1").unwrap();
        ConversationWriter::open(&ws, &sid)
            .unwrap()
            .append(&[user("one")])
            .unwrap();
        let path = dir.path().join(".toolbox/sessions/s1/messages.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(br#"{"role":"user","content":"tw"#).unwrap();
        let loaded = load(&ws, &sid).unwrap();
        assert_eq!(loaded.messages, vec![user("one")]);
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        assert!(
            loaded.warnings[0].contains("line 2"),
            "{:?}",
            loaded.warnings
        );
        ConversationWriter::open(&ws, &sid)
            .unwrap()
            .append(&[user("two")])
            .unwrap();
        let loaded = load(&ws, &sid).unwrap();
        assert_eq!(loaded.messages, vec![user("one"), user("two")]);
    }

    #[test]
    fn a_call_without_a_result_gets_an_interrupted_one() {
        let text = concat!(
            r#"{"role":"user","content":"go"}"#,
            "\n",
            r#"{"role":"assistant","content":"","tool_calls":[{"id":"a","name":"x","arguments":"{}"},{"id":"b","name":"y","arguments":"{}"}]}"#,
            "\n",
            r#"{"role":"tool","tool_call_id":"a","name":"x","content":"ok"}"#,
            "\n"
        );
        let loaded = parse(text.as_bytes(), "f");
        assert_eq!(loaded.messages.len(), 4);
        match &loaded.messages[3] {
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => {
                assert_eq!(tool_call_id, "b");
                assert!(content.contains("interrupted"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(loaded.warnings.len(), 1);
    }

    #[test]
    fn summaries_show_the_first_user_message_and_the_last_activity() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let one = SessionId::parse("one").unwrap();
        ConversationWriter::open(&ws, &one)
            .unwrap()
            .append(&[
                user("  Please   write\nhello.md  "),
                Message::Assistant {
                    content: "ok".into(),
                    tool_calls: vec![],
                },
                user("second"),
            ])
            .unwrap();
        // A session with only a trajectory, and one whose first message is huge.
        std::fs::create_dir_all(dir.path().join(".toolbox/trajectories/only-calls")).unwrap();
        std::fs::write(
            dir.path()
                .join(".toolbox/trajectories/only-calls/tool_calls.jsonl"),
            "{}\n",
        )
        .unwrap();
        let big = SessionId::parse("big").unwrap();
        let long = format!("é\\\"{}", "x".repeat(10_000));
        ConversationWriter::open(&ws, &big)
            .unwrap()
            .append(&[user(&long)])
            .unwrap();
        let all = session_summaries(&ws);
        assert_eq!(all.omitted, 0);
        let by_id = |id: &str| all.sessions.iter().find(|s| s.id.as_str() == id).unwrap();
        assert_eq!(
            by_id("one").first_message.as_deref(),
            Some("Please write hello.md")
        );
        assert!(by_id("one").last_activity.is_some());
        let rfc = by_id("one").last_activity_rfc3339().unwrap();
        assert!(rfc.ends_with('Z') && rfc.contains('T'), "{rfc}");
        assert_eq!(by_id("only-calls").first_message, None);
        assert!(by_id("only-calls").last_activity.is_some());
        let cut = by_id("big").first_message.clone().unwrap();
        assert!(cut.starts_with("é\\\"xxx") && cut.ends_with('…'), "{cut}");
        assert_eq!(cut.chars().count(), SUMMARY_CHARS + 1);
        assert_eq!(session_summary(&ws, &one), by_id("one").clone());
        let never = SessionId::parse("never").unwrap();
        assert_eq!(session_summary(&ws, &never).first_message, None);
        assert_eq!(session_summary(&ws, &never).last_activity, None);
    }

    #[test]
    fn a_cut_first_line_gives_what_of_its_text_is_there() {
        let line = br#"{"role":"user","content":"caf\u00e9 and \n more \u00"#;
        assert_eq!(
            first_user_text(line).as_deref(),
            Some("caf\u{e9} and \n more ")
        );
        // A first line that is no user message is passed over; a cut one of another kind
        // gives nothing.
        let text =
            b"{\"role\":\"assistant\",\"content\":\"x\"}\n{\"role\":\"user\",\"content\":\"hi\"}\n";
        assert_eq!(first_user_text(text).as_deref(), Some("hi"));
        assert_eq!(first_user_text(br#"{"role":"tool","tool_call_id":"#), None);
        assert_eq!(first_user_text(b""), None);
    }

    #[test]
    fn summaries_are_capped_at_the_most_recent_sessions() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_SUMMARIES + 3 {
            std::fs::create_dir_all(dir.path().join(format!(".toolbox/sessions/s{i:04}"))).unwrap();
        }
        let ws = Workspace::new(dir.path()).unwrap();
        let recent = SessionId::parse("s0000").unwrap();
        ConversationWriter::open(&ws, &recent)
            .unwrap()
            .append(&[user("latest")])
            .unwrap();
        let all = session_summaries(&ws);
        assert_eq!(all.sessions.len(), MAX_SUMMARIES);
        assert_eq!(all.omitted, 3);
        assert_eq!(all.sessions[0].id, recent);
        assert_eq!(all.sessions[0].first_message.as_deref(), Some("latest"));
    }

    #[test]
    fn a_planted_link_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        std::fs::write(&target, "keep").unwrap();
        std::fs::create_dir_all(dir.path().join(".toolbox/sessions/s1")).unwrap();
        std::os::unix::fs::symlink(
            &target,
            dir.path().join(".toolbox/sessions/s1/messages.jsonl"),
        )
        .unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let sid = SessionId::parse("s1").unwrap();
        assert!(ConversationWriter::open(&ws, &sid).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
