//! Files a front end hands to a session: `PUT /api/sessions/{sid}/input/{path}` streams a
//! body into the session's `input/` folder, and `GET /api/sessions/{sid}/input` lists what
//! it holds. The model then finds them under `input/…`, as the data agent's front end puts
//! them.
//!
//! The path is parsed once ([`InputPath`]): plain names only, no `.`, `..` or empty parts.
//! Every folder on the way is opened (or made) by name inside the one before, never through
//! a link, and the file is written to a temporary file in its folder and renamed over the
//! name only when the whole body arrived within the limit: a failed or cut upload leaves
//! nothing behind, and a link planted at the name is refused, not written through.

use std::ffi::OsStr;
use std::io::Write;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde_json::{json, Value};
use toolbox_core::SessionId;
use toolbox_host::{Dir, EntryKind, SessionFolder};

use crate::{ApiError, AppState};

/// The most a path inside `input/` may be, in bytes, and in parts.
const MAX_PATH_BYTES: usize = 1024;
const MAX_PATH_PARTS: usize = 16;
/// The most entries a listing walks before it stops (and says so).
const MAX_LISTED: usize = 10_000;

/// A path inside a session's `input/` folder, as a client gave it, parsed: 1 to 16 plain
/// names (each 1 to 255 bytes, not `.` or `..`, without NUL), joined by `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputPath {
    parts: Vec<String>,
}

impl InputPath {
    /// Parses `raw` (already percent-decoded), naming what is wrong.
    pub fn parse(raw: &str) -> Result<InputPath, String> {
        if raw.is_empty() {
            return Err(
                "the path after input/ is empty; name the file, e.g. input/cases.csv".into(),
            );
        }
        if raw.len() > MAX_PATH_BYTES {
            return Err(format!(
                "the path is {} bytes; at most {MAX_PATH_BYTES}",
                raw.len()
            ));
        }
        if raw.contains('\0') {
            return Err("the path holds a NUL byte".into());
        }
        let parts: Vec<String> = raw.split('/').map(str::to_string).collect();
        if parts.len() > MAX_PATH_PARTS {
            return Err(format!(
                "the path has {} parts; at most {MAX_PATH_PARTS}",
                parts.len()
            ));
        }
        for part in &parts {
            match part.as_str() {
                "" => {
                    return Err(format!(
                        "{raw:?} has an empty part (a leading, doubled or trailing /)"
                    ))
                }
                "." | ".." => {
                    return Err(format!(
                        "{raw:?} has a {part:?} part; name the file plainly, inside input/"
                    ))
                }
                p if p.len() > 255 => {
                    return Err(format!("a part of {raw:?} is longer than 255 bytes"))
                }
                _ => {}
            }
        }
        Ok(InputPath { parts })
    }

    /// The file's own name.
    fn name(&self) -> &OsStr {
        OsStr::new(self.parts.last().expect("a parsed path has a part"))
    }

    /// As the model names it: `input/a/b.csv`.
    fn logical(&self) -> String {
        format!("input/{}", self.parts.join("/"))
    }
}

/// Whether `path` is an upload's (`/api/sessions/{sid}/input/{path}`): its body is
/// streamed by [`put`], not read whole before the handler.
pub(crate) fn is_upload_path(path: &str) -> bool {
    path.strip_prefix("/api/sessions/")
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(sid, rest)| !sid.is_empty() && rest.starts_with("input/"))
}

/// What one body chunk does in the writer.
enum Chunk {
    Bytes(axum::body::Bytes),
    /// The body ended: keep the file.
    End,
}

/// `PUT /api/sessions/{sid}/input/{*path}`.
pub(crate) async fn put(
    State(state): State<Arc<AppState>>,
    Path((sid, path)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let sid = crate::api::session(&state, &sid)?;
    let path = InputPath::parse(&path).map_err(|e| ApiError::bad_request(format!("path: {e}")))?;
    let limit = state.options.max_upload_bytes;
    let too_large = |got: String| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the file is {got}; an upload may be at most {limit} bytes (toolbox serve \
                 --max-upload-mb); nothing was written"
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > limit) {
        return Err(too_large(format!("{n} bytes")));
    }
    let ws = state
        .runtime
        .executor()
        .workspace()
        .with_session_id(sid.clone());
    let folders: Vec<String> = path.parts[..path.parts.len() - 1].to_vec();
    let ws_for_dir = ws.clone();
    let dir = tokio::task::spawn_blocking(move || {
        let parts: Vec<&OsStr> = folders.iter().map(OsStr::new).collect();
        ws_for_dir.session_subdir(SessionFolder::Input, &parts, true)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the upload's folder: {e}")))?
    .map_err(|e| {
        ApiError::new(
            StatusCode::CONFLICT,
            format!("path: {}: {e}", path.logical()),
        )
    })?;
    let existed = dir.symlink_metadata(path.name()).is_ok();
    // The writer runs on a blocking thread; the body arrives here, a bounded queue between.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Chunk>(8);
    let name = path.name().to_os_string();
    let writer = tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
        let mut written = 0u64;
        dir.replace_with(&name, |file| {
            loop {
                match rx.blocking_recv() {
                    Some(Chunk::Bytes(bytes)) => {
                        file.write_all(&bytes)?;
                        written += bytes.len() as u64;
                    }
                    Some(Chunk::End) => return file.sync_all(),
                    // The sender went away without saying the body ended: cut short.
                    None => {
                        return Err(std::io::Error::other("the upload was cut short"));
                    }
                }
            }
        })?;
        Ok(written)
    });
    let mut stream = body.into_data_stream();
    let mut received = 0u64;
    let mut failure: Option<ApiError> = None;
    let wait = crate::front_door::BODY_READ_TIMEOUT;
    loop {
        let chunk = match tokio::time::timeout(wait, stream.next()).await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(_) => {
                failure = Some(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "no part of the body arrived for {} s; nothing was written",
                        wait.as_secs()
                    ),
                ));
                break;
            }
        };
        match chunk {
            Ok(bytes) => {
                received += bytes.len() as u64;
                if received > limit {
                    failure = Some(too_large(format!("more than {limit} bytes")));
                    break;
                }
                if tx.send(Chunk::Bytes(bytes)).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                failure = Some(ApiError::bad_request(format!(
                    "the body could not be read: {e}"
                )));
                break;
            }
        }
    }
    if failure.is_none() {
        let _ = tx.send(Chunk::End).await;
    }
    drop(tx);
    let written = writer
        .await
        .map_err(|e| ApiError::internal(format!("the upload's writer: {e}")))?;
    if let Some(failure) = failure {
        return Err(failure);
    }
    let bytes = written.map_err(|e| {
        ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "{} could not be written: {e}; nothing was written",
                path.logical()
            ),
        )
    })?;
    // Where it really is, from the workspace root: `.toolbox/sessions/<sid>/input/…`.
    let real = ws.session_dir("input").join(path.parts.join("/"));
    let root = state.runtime.executor().workspace();
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let body = json!({
        "path": path.logical(),
        "real_path": root.display(&real),
        "bytes": bytes,
        "replaced": existed,
    });
    Ok((status, Json(body)).into_response())
}

/// `GET /api/sessions/{sid}/input`: every file in the session's `input/`, sorted, with its
/// size; links are listed as links, never followed.
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    Path(sid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let sid: SessionId = crate::api::session(&state, &sid)?;
    let root = state.runtime.executor().workspace();
    let ws = root.with_session_id(sid);
    let real = root.display(&ws.session_dir("input"));
    let listed = tokio::task::spawn_blocking(move || {
        match ws.session_subdir(SessionFolder::Input, &[], false) {
            Ok(dir) => {
                let mut files = vec![];
                let mut truncated = false;
                walk(&dir, "input", 0, &mut files, &mut truncated);
                (files, truncated)
            }
            Err(_) => (vec![], false),
        }
    })
    .await
    .map_err(|e| ApiError::internal(format!("listing input/: {e}")))?;
    let (files, truncated) = listed;
    Ok(Json(json!({
        "folder": "input",
        "real_path": real,
        "files": files,
        "truncated": truncated,
    })))
}

fn walk(dir: &Dir, at: &str, depth: usize, out: &mut Vec<Value>, truncated: &mut bool) {
    let Ok(entries) = dir.entries() else {
        return;
    };
    for entry in entries {
        if out.len() >= MAX_LISTED {
            *truncated = true;
            return;
        }
        let name = entry.name.to_string_lossy().into_owned();
        let path = format!("{at}/{name}");
        match entry.kind {
            EntryKind::File => {
                let bytes = dir.size_and_mtime(&entry.name).map(|(n, _)| n).unwrap_or(0);
                out.push(json!({"path": path, "bytes": bytes}));
            }
            EntryKind::Dir if depth + 1 < MAX_PATH_PARTS => {
                if let Ok(child) = dir.open_dir(&entry.name) {
                    walk(&child, &path, depth + 1, out, truncated);
                }
            }
            EntryKind::Symlink => out.push(json!({"path": path, "link": true})),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::InputPath;

    #[test]
    fn an_input_path_is_plain_names_only() {
        let ok = InputPath::parse("cases/q1.csv").unwrap();
        assert_eq!(ok.logical(), "input/cases/q1.csv");
        assert_eq!(ok.parts, ["cases", "q1.csv"]);
        for bad in [
            "", "/abs", "a//b", "a/", "../x", "a/../b", "./a", "a/.", "a\0b",
        ] {
            let e = InputPath::parse(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad:?}");
        }
        assert!(InputPath::parse("x/".repeat(16).trim_end_matches('/')).is_ok());
        assert!(InputPath::parse("x/".repeat(17).trim_end_matches('/')).is_err());
        assert!(InputPath::parse(&"y".repeat(256)).is_err());
    }
}
