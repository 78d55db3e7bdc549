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
use toolbox_core::{SessionId, Workspace, TOOLBOX_DIR};

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
            if entry.kind != toolbox_core::EntryKind::Dir {
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
