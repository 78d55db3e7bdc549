//! The JSON API under `/api` and the SSE event stream. Handlers parse what the client sent
//! (session ids through [`SessionId`], bodies as JSON with errors naming the problem) and
//! call the runtime; they compute nothing of their own.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use futures_util::Stream;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use toolbox_core::SessionId;
use toolbox_executor::{ApprovalDecision, PermissionMode, Permissions, SchemaFormat};
use toolbox_runtime::{conversation, ApprovalAnswer, SessionEvent, TurnError, TurnRequest};

use crate::{ApiError, AppState, MAX_BODY_BYTES};

type AppResult<T> = Result<T, ApiError>;
type Shared = State<Arc<AppState>>;

/// The routes under `/api`.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(health))
        .route("/tools", get(tools))
        .route("/agents", get(agents))
        .route("/sessions", get(sessions))
        .route("/sessions/events", get(sessions_feed))
        .route("/sessions/{sid}/turns", post(start_turn))
        .route("/sessions/{sid}/cancel", post(cancel))
        .route("/sessions/{sid}/park", post(park))
        .route("/sessions/{sid}/events", get(events))
        .route("/sessions/{sid}/messages", get(messages))
        .route("/sessions/{sid}/trajectory", get(trajectory))
        .route("/sessions/{sid}/tools/{name}", post(run_tool))
        .route("/sessions/{sid}/input", get(crate::upload::list))
        // The upload streams its body to disk under its own limit (--max-upload-mb).
        .route(
            "/sessions/{sid}/input/{*path}",
            put(crate::upload::put).layer(DefaultBodyLimit::disable()),
        )
        .route("/tool-approval/{sid}/{call_id}", post(approval))
        .fallback(|| async { ApiError::not_found("no such API endpoint; see docs/server.md") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(json_errors))
}

/// Every error under `/api` is JSON `{"error": ...}`. axum answers some requests itself, in
/// plain text or with no body at all: a query string that does not parse, a body over the
/// limit read as raw bytes, a method the path does not take. This rewrites those with the
/// same status (and headers such as `Allow`), and leaves JSON errors alone.
async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            format!("method not allowed here; this path takes: {allowed}")
        }
        _ if !text.is_empty() => text,
        _ => status
            .canonical_reason()
            .unwrap_or("the request failed")
            .to_string(),
    };
    let mut out = ApiError::new(status, message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// A JSON body, with errors that say what is wrong as `{"error": ...}`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state).await.map_err(|e| {
            let status = e.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    status,
                    format!("the body is larger than {MAX_BODY_BYTES} bytes"),
                )
            } else {
                ApiError::new(status, format!("cannot read the body: {}", e.body_text()))
            }
        })?;
        parse_json(&bytes).map(JsonBody)
    }
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> AppResult<T> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the body is empty: expected a JSON object",
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(format!("the body is not valid JSON for this request: {e}"))
    })
}

/// The session of a request: a valid id, and in host mode the host's own (any other is 404).
pub(crate) fn session(state: &AppState, raw: &str) -> AppResult<SessionId> {
    let sid = SessionId::parse(raw).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if let Some(host) = &state.options.host {
        if sid != *host.session() {
            return Err(ApiError::not_found(format!(
                "no session {sid} here: this host serves session {} only",
                host.session()
            )));
        }
    }
    Ok(sid)
}

fn turn_error(e: TurnError) -> ApiError {
    let status = match &e {
        TurnError::Busy(_) => StatusCode::CONFLICT,
        TurnError::NoModel(_) => StatusCode::SERVICE_UNAVAILABLE,
        TurnError::UnknownAgent(_) => StatusCode::NOT_FOUND,
        TurnError::InvalidSession(_) | TurnError::BadRequest(_) => StatusCode::BAD_REQUEST,
    };
    let message = match e {
        TurnError::NoModel(why) => format!("no model is configured, so turns cannot run: {why}"),
        other => other.to_string(),
    };
    ApiError::new(status, message)
}

async fn health(State(state): Shared) -> Json<Value> {
    let executor = state.runtime.executor();
    let providers: BTreeSet<&str> = executor
        .registry()
        .tools()
        .iter()
        .map(|t| t.provider_name())
        .collect();
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "providers": providers,
        "mode": executor.permissions().mode,
        "workspace": executor.workspace().root(),
        "host": state.options.host.as_ref().map(|h| json!({
            "session": h.session().as_str(),
            "epoch": h.epoch(),
            "last_sync": h.last_sync(),
        })),
    }))
}

#[derive(Deserialize)]
struct ToolsQuery {
    toolsets: Option<String>,
    format: Option<String>,
    mode: Option<String>,
    strict: Option<bool>,
}

async fn tools(State(state): Shared, Query(query): Query<ToolsQuery>) -> AppResult<Json<Value>> {
    let format: SchemaFormat = match query.format.as_deref() {
        None | Some("") => SchemaFormat::OpenAi,
        Some(f) => f
            .parse()
            .map_err(|e: anyhow::Error| ApiError::bad_request(format!("format: {e}")))?,
    };
    let executor = state.runtime.executor();
    let mode: PermissionMode = match query.mode.as_deref() {
        None | Some("") => executor.permissions().mode,
        Some(m) => m
            .parse()
            .map_err(|e: anyhow::Error| ApiError::bad_request(format!("mode: {e}")))?,
    };
    let sets: Option<Vec<&str>> = query.toolsets.as_deref().map(|s| {
        s.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    });
    let rendering = format.strict(query.strict.unwrap_or(format.strict_by_default()));
    let schemas = executor
        .resolve_agent_tool_schemas(sets.as_deref(), Permissions::from(mode), rendering)
        .map_err(|e| ApiError::bad_request(format!("toolsets: {e:#}")))?;
    Ok(Json(Value::Array(schemas)))
}

async fn agents(State(state): Shared) -> Json<Value> {
    let executor = state.runtime.executor();
    let config = Value::Object(executor.config().providers.clone());
    Json(toolbox_host::discover_agents(executor.workspace(), &config).summary())
}

/// One row of the session list: what `GET /api/sessions` and the session feed say of a
/// session.
#[derive(Debug, Clone, PartialEq)]
struct SessionRow {
    running: bool,
    pending_approvals: usize,
    first_message: Option<String>,
    last_activity: Option<String>,
}

impl SessionRow {
    fn json(&self, id: &str) -> Value {
        json!({
            "id": id,
            "running": self.running,
            "pending_approvals": self.pending_approvals,
            "first_message": self.first_message,
            "last_activity": self.last_activity,
        })
    }
}

/// What the session list shows now: every session on disk (at most
/// [`conversation::MAX_SUMMARIES`], with how many were left out) and every session with a
/// turn running or a call waiting for an approval. Reads files: run it off the async
/// threads.
fn session_rows(state: &AppState) -> (std::collections::BTreeMap<String, SessionRow>, usize) {
    let running: BTreeSet<String> = state.runtime.running_sessions().into_iter().collect();
    let pending = state.runtime.executor().pending_approval_counts();
    let summaries = conversation::session_summaries(state.runtime.executor().workspace());
    let mut rows = std::collections::BTreeMap::new();
    for summary in summaries.sessions {
        let id = summary.id.to_string();
        rows.insert(
            id.clone(),
            SessionRow {
                running: running.contains(&id),
                pending_approvals: pending.get(&id).copied().unwrap_or(0),
                last_activity: summary.last_activity_rfc3339(),
                first_message: summary.first_message,
            },
        );
    }
    for id in running.iter().chain(pending.keys()) {
        if !rows.contains_key(id) {
            rows.insert(id.clone(), live_row(state, id, None));
        }
    }
    (rows, summaries.omitted)
}

/// A row built from what is in memory (running, waiting), with the summary of `old` when
/// given, else read from disk for this one session (a few KiB at most).
fn live_row(state: &AppState, id: &str, old: Option<&SessionRow>) -> SessionRow {
    let executor = state.runtime.executor();
    let (first_message, last_activity) = match old {
        Some(old) => (old.first_message.clone(), old.last_activity.clone()),
        None => match SessionId::parse(id) {
            Ok(sid) => {
                let summary = conversation::session_summary(executor.workspace(), &sid);
                (
                    summary.first_message.clone(),
                    summary.last_activity_rfc3339(),
                )
            }
            Err(_) => (None, None),
        },
    };
    SessionRow {
        running: state.runtime.is_running(id),
        pending_approvals: executor.pending_approvals(id).len(),
        first_message,
        last_activity,
    }
}

async fn read_rows(
    state: &Arc<AppState>,
) -> AppResult<(std::collections::BTreeMap<String, SessionRow>, usize)> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || session_rows(&state))
        .await
        .map_err(|e| ApiError::internal(format!("cannot list the sessions: {e}")))
}

fn rows_json(rows: &std::collections::BTreeMap<String, SessionRow>, omitted: usize) -> Value {
    let list: Vec<Value> = rows.iter().map(|(id, row)| row.json(id)).collect();
    json!({ "sessions": list, "omitted": omitted })
}

async fn sessions(State(state): Shared) -> AppResult<Json<Value>> {
    let (rows, omitted) = read_rows(&state).await?;
    Ok(Json(rows_json(&rows, omitted)))
}

/// Woken when this server delivered an approval answer: the session feeds look again at
/// once (an answer has no event of its own; the call's events follow when it has run).
static APPROVAL_ANSWERED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// How often the session feed looks at what runs and waits even when no event came (an
/// approval answered elsewhere, a wait that timed out): in memory only, no files read.
const FEED_TICK: Duration = Duration::from_secs(1);

/// `GET /api/sessions/events`: the session list, live. First a `snapshot` (the body of
/// `GET /api/sessions` plus `"type": "snapshot"`), then a `session` event with the whole new
/// row whenever a session's row changes: a turn started or finished, a call asked for an
/// approval or got its answer, in any session. Events are numbered per connection; a
/// reconnection starts again with a snapshot, whatever `Last-Event-ID` it sends. Ends when
/// the server shuts down.
async fn sessions_feed(
    State(state): Shared,
) -> AppResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    // Subscribed before the snapshot is taken, so no change falls between the two.
    let live = state.runtime.events().subscribe_all();
    let (rows, omitted) = read_rows(&state).await?;
    let mut first = rows_json(&rows, omitted);
    first["type"] = json!("snapshot");
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + FEED_TICK, FEED_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let feed = SessionFeed {
        _listening: state.askers.everywhere(),
        state: state.clone(),
        rows,
        live,
        queue: std::collections::VecDeque::from([first]),
        tick,
        sent: 0,
    };
    let stream = futures_util::stream::unfold(feed, |mut feed| async move {
        let data = feed.next().await?;
        feed.sent += 1;
        let event = Event::default()
            .id(feed.sent.to_string())
            .data(data.to_string());
        Some((Ok(event), feed))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

struct SessionFeed {
    /// Counts this stream as one that shows questions, while it is open.
    _listening: crate::askers::Listening,
    state: Arc<AppState>,
    rows: std::collections::BTreeMap<String, SessionRow>,
    live: tokio::sync::broadcast::Receiver<Arc<SessionEvent>>,
    queue: std::collections::VecDeque<Value>,
    tick: tokio::time::Interval,
    /// Events sent on this connection: each one's `id:`.
    sent: u64,
}

impl SessionFeed {
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(next) = self.queue.pop_front() {
                return Some(next);
            }
            let mut touched: BTreeSet<String> = BTreeSet::new();
            // The session an event came from, and the user's message when a turn started.
            let mut evented: Option<(String, Option<String>)> = None;
            tokio::select! {
                _ = self.state.shutdown.cancelled() => return None,
                received = self.live.recv() => match received {
                    Ok(event) => {
                        use toolbox_runtime::RuntimeEvent as E;
                        let message = match &event.event {
                            E::TurnStarted { message, .. } => Some(message.clone()),
                            E::TurnFinished { .. }
                            | E::ToolApprovalRequest { .. }
                            | E::ReviewRequest { .. }
                            | E::ReviewAnswered { .. }
                            | E::ToolCallFinished { .. } => None,
                            _ => continue,
                        };
                        touched.insert(event.session_id.to_string());
                        evented = Some((event.session_id.to_string(), message));
                    }
                    Err(RecvError::Lagged(_)) => {
                        // Fell behind: start over from a fresh snapshot.
                        let Ok((rows, omitted)) = read_rows(&self.state).await else {
                            return None;
                        };
                        self.rows = rows;
                        let mut snapshot = rows_json(&self.rows, omitted);
                        snapshot["type"] = json!("snapshot");
                        return Some(snapshot);
                    }
                    Err(RecvError::Closed) => return None,
                },
                _ = APPROVAL_ANSWERED.notified() => {}
                _ = self.tick.tick() => {}
            }
            // Every session that runs or waits now, or did at the last look.
            touched.extend(self.state.runtime.running_sessions());
            touched.extend(
                self.state
                    .runtime
                    .executor()
                    .pending_approval_counts()
                    .into_keys(),
            );
            touched.extend(
                self.rows
                    .iter()
                    .filter(|(_, row)| row.running || row.pending_approvals > 0)
                    .map(|(id, _)| id.clone()),
            );
            for id in touched {
                let old = self.rows.get(&id).cloned();
                let mut row = match &old {
                    Some(old) => live_row(&self.state, &id, Some(old)),
                    None => {
                        // A session new to the list: its summary from disk, off this thread.
                        let (state, key) = (self.state.clone(), id.clone());
                        match tokio::task::spawn_blocking(move || live_row(&state, &key, None))
                            .await
                        {
                            Ok(row) => row,
                            Err(_) => continue,
                        }
                    }
                };
                if let Some((session, message)) = &evented {
                    if *session == id {
                        row.last_activity =
                            Some(conversation::rfc3339_seconds(std::time::SystemTime::now()));
                        if row.first_message.is_none() {
                            row.first_message = message.as_deref().map(conversation::one_line);
                        }
                    }
                }
                if old.as_ref() != Some(&row) {
                    self.queue
                        .push_back(json!({"type": "session", "session": row.json(&id)}));
                    self.rows.insert(id, row);
                }
            }
        }
    }
}

async fn start_turn(
    State(state): Shared,
    Path(sid): Path<String>,
    JsonBody(request): JsonBody<TurnRequest>,
) -> AppResult<impl IntoResponse> {
    let sid = session(&state, &sid)?;
    if state.shutdown.is_cancelled() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down and takes no new turns",
        ));
    }
    let turn_id = state
        .runtime
        .start_turn(sid.as_str(), request)
        .map_err(turn_error)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"turn_id": turn_id, "session_id": sid.as_str()})),
    ))
}

async fn cancel(State(state): Shared, Path(sid): Path<String>) -> AppResult<Json<Value>> {
    let sid = session(&state, &sid)?;
    Ok(Json(
        json!({"cancelled": state.runtime.cancel(sid.as_str())}),
    ))
}

/// `POST /api/sessions/{sid}/park` (host mode): stop serving, cancel the running turn, sync
/// one last time and exit 0. The session then resumes on any host, like a lost one.
async fn park(State(state): Shared, Path(sid): Path<String>) -> AppResult<impl IntoResponse> {
    let sid = session(&state, &sid)?;
    let Some(host) = &state.options.host else {
        return Err(ApiError::not_found(
            "park is for host mode: toolbox serve --session SID --epoch N --state-store URL",
        ));
    };
    host.park();
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"parking": true, "session_id": sid.as_str(), "epoch": host.epoch()})),
    ))
}

#[derive(Deserialize)]
struct ApprovalBody {
    /// `approve`, `approve_for_session`, `deny`; for a review `approve` or `reject`.
    decision: ApprovalDecision,
    /// What the person wrote: a review's feedback (the model gets it word for word), or why
    /// a call was denied.
    #[serde(default)]
    feedback: Option<String>,
}

/// The longest feedback text an answer may carry.
const MAX_FEEDBACK_CHARS: usize = 16_000;

async fn approval(
    State(state): Shared,
    Path((sid, call_id)): Path<(String, String)>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    JsonBody(body): JsonBody<ApprovalBody>,
) -> AppResult<Json<Value>> {
    let sid = session(&state, &sid)?;
    if body
        .feedback
        .as_ref()
        .is_some_and(|f| f.chars().count() > MAX_FEEDBACK_CHARS)
    {
        return Err(ApiError::bad_request(format!(
            "feedback is longer than {MAX_FEEDBACK_CHARS} characters"
        )));
    }
    // An answer over this API is a person's (the console, a program acting for one); who
    // gave it is recorded with the call: the address it came from, and whether it carried
    // the token (model-run code cannot connect at all: the front door refuses it).
    let by = format!(
        "http{}{}",
        peer.map(|p| format!(" from {}", (p.0).0))
            .unwrap_or_default(),
        if state.options.token.is_some() {
            " with the token"
        } else {
            " (loopback, no token)"
        }
    );
    match state
        .runtime
        .respond_as_person(sid.as_str(), &call_id, body.decision, body.feedback, &by)
    {
        ApprovalAnswer::Delivered => {
            APPROVAL_ANSWERED.notify_waiters();
            Ok(Json(json!({"ok": true})))
        }
        ApprovalAnswer::AlreadyAnswered => Err(ApiError::conflict(format!(
            "call {call_id} of session {sid} was already answered, or stopped waiting (it timed \
             out or was cancelled)"
        ))),
        ApprovalAnswer::Unknown => Err(ApiError::not_found(format!(
            "no call {call_id} of session {sid} asked for approval"
        ))),
    }
}

async fn messages(State(state): Shared, Path(sid): Path<String>) -> AppResult<Json<Value>> {
    let sid = session(&state, &sid)?;
    let loaded = conversation::load(state.runtime.executor().workspace(), &sid)
        .map_err(|e| ApiError::internal(format!("{e:#}")))?;
    Ok(Json(
        json!({"messages": loaded.messages, "warnings": loaded.warnings}),
    ))
}

#[derive(Deserialize)]
struct Page {
    offset: Option<usize>,
    limit: Option<usize>,
}

/// The most calls one trajectory page holds.
pub const MAX_PAGE: usize = 1000;

async fn trajectory(
    State(state): Shared,
    Path(sid): Path<String>,
    Query(page): Query<Page>,
) -> AppResult<Json<Value>> {
    let sid = session(&state, &sid)?;
    let limit = page.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit must be 1..={MAX_PAGE} (got {limit})"
        )));
    }
    let offset = page.offset.unwrap_or(0);
    let calls = toolbox_executor::trajectory::read_session_trajectory(
        state.runtime.executor().workspace(),
        &sid,
    )
    .map_err(|e| ApiError::internal(format!("{e:#}")))?;
    let total = calls.len();
    let slice: Vec<_> = calls.into_iter().skip(offset).take(limit).collect();
    Ok(Json(json!({
        "calls": slice,
        "total": total,
        "offset": offset,
        "limit": limit,
    })))
}

#[derive(Deserialize)]
struct RunToolQuery {
    call_id: Option<String>,
    mode: Option<String>,
}

static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// 503 for a call on a host whose session `newer` took over; `ran` when the call ran here
/// first (its effects are lost with this host).
fn superseded(sid: &toolbox_core::SessionId, newer: u64, ran: bool) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        if ran {
            format!(
                "this host no longer serves session {sid}: epoch {newer} took it over while the \
                 call ran, so what it did here will not be kept; run it again on the session's \
                 new host"
            )
        } else {
            format!("this host no longer serves session {sid}: epoch {newer} took it over")
        },
    )
}

async fn run_tool(
    State(state): Shared,
    Path((sid, name)): Path<(String, String)>,
    Query(query): Query<RunToolQuery>,
    body: Bytes,
) -> AppResult<Json<Value>> {
    let sid = session(&state, &sid)?;
    if let Some(host) = &state.options.host {
        // A host another has taken over runs nothing more: asked of the store, not only of
        // what the last sync saw.
        if let Some(newer) = host.newer_epoch(&state.runtime).await {
            return Err(superseded(&sid, newer, false));
        }
        if host.stopping().is_cancelled() {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("session {sid} is being parked on this host"),
            ));
        }
    }
    let arguments: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_json(&body)?
    };
    if !arguments.is_object() {
        return Err(ApiError::bad_request(
            "the body must be the tool's arguments as a JSON object",
        ));
    }
    let ceiling = state.runtime.executor().permissions();
    let permissions = match query.mode.as_deref() {
        None | Some("") => ceiling,
        Some(m) => Permissions::from(
            m.parse::<PermissionMode>()
                .map_err(|e| ApiError::bad_request(format!("mode: {e}")))?,
        ),
    };
    let call_id = match query.call_id {
        Some(id) if !id.trim().is_empty() => {
            if id.len() > 128
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(ApiError::bad_request(
                    "call_id: 1 to 128 letters, digits, '-' or '_'",
                ));
            }
            id
        }
        _ => format!(
            "http-{}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
            NEXT_CALL.fetch_add(1, Ordering::Relaxed)
        ),
    };
    // A client that goes away drops this future, which drops the call and stops its work.
    let cancel = state.calls.child_token();
    let info = state
        .runtime
        .run_tool(
            sid.as_str(),
            &call_id,
            &name,
            arguments,
            permissions,
            cancel,
            Some(std::sync::Arc::new({
                let (askers, sid) = (state.askers.clone(), sid.clone());
                move || askers.check(&sid)
            })),
        )
        .await
        .map_err(turn_error)?;
    if let Some(host) = &state.options.host {
        // Taken over while the call ran: what it did here will never be synced, so the
        // caller must not read `done` (the router then asks the session's new host).
        if let Some(newer) = host.newer_epoch(&state.runtime).await {
            return Err(superseded(&sid, newer, true));
        }
        host.wake();
    }
    let mut out = json!({
        "status": info.status.as_str(),
        "result": info.result,
        "call_id": info.id,
        "tool": info.tool,
        "elapsed_ms": info.elapsed_ms,
    });
    if let Some(path) = info.spool_path {
        out["spool_path"] = Value::String(path);
    }
    if let Some(kind) = info.error_kind {
        out["error_kind"] = json!(kind);
    }
    if let Some(called_as) = info.called_as {
        out["called_as"] = Value::String(called_as);
    }
    // For programs; `result` stays the text the model would read.
    if let Some(structured) = info.structured {
        out["structured"] = structured;
    }
    Ok(Json(out))
}

#[derive(Deserialize)]
struct EventsQuery {
    after: Option<u64>,
}

/// The SSE stream of a session: what was missed after `Last-Event-ID` (or `?after=`), then
/// every new event as it happens. Each event's `id:` is its `seq`; its data is the event's
/// JSON. When the server shuts down, the stream ends once the session's cancelled turn has
/// sent its `turn_finished` (at most the shutdown grace); a client that reconnects with the
/// last id it saw loses nothing (the runtime keeps the last 10 000 events of a session).
async fn events(
    State(state): Shared,
    Path(sid): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> AppResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let sid = session(&state, &sid)?;
    let epoch = state.options.host.as_ref().map(|h| h.epoch());
    let mut earlier = std::collections::VecDeque::new();
    let after = match headers.get("last-event-id") {
        Some(value) => {
            let (from_epoch, seq) =
                value
                    .to_str()
                    .ok()
                    .and_then(parse_event_id)
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "Last-Event-ID must be the id of an event: a number, or epoch:number",
                        )
                    })?;
            match (from_epoch, epoch) {
                // An id from another host of the session: what that host's epoch still had
                // after it (kept in the session's events file), then this host's whole
                // history, which starts with its `session_resumed`.
                (Some(from), Some(mine)) if from != mine => {
                    if from < mine {
                        if let Some(host) = &state.options.host {
                            earlier = host.history_after(from, seq).into();
                        }
                    }
                    None
                }
                _ => Some(seq),
            }
        }
        None => query.after,
    };
    let subscription = state.runtime.events().subscribe(&sid, after);
    let stream = EventStream {
        _listening: state.askers.session(&sid),
        state: state.clone(),
        epoch,
        earlier,
        session: sid,
        pending: subscription.missed.into(),
        live: subscription.live,
        last: after.unwrap_or(0),
        drain_until: None,
    };
    let stream = futures_util::stream::unfold(stream, |mut s| async move {
        let event = s.next().await?;
        Some((Ok(event), s))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// An SSE event id: `seq`, or `epoch:seq` (host mode).
fn parse_event_id(text: &str) -> Option<(Option<u64>, u64)> {
    let text = text.trim();
    match text.split_once(':') {
        Some((epoch, seq)) => Some((Some(epoch.parse().ok()?), seq.parse().ok()?)),
        None => Some((None, text.parse().ok()?)),
    }
}

struct EventStream {
    /// Counts this stream as one that shows the session's questions, while it is open.
    _listening: crate::askers::Listening,
    state: Arc<AppState>,
    /// Host mode: the host's epoch, the first half of every event's `id:` (`epoch:seq`).
    epoch: Option<u64>,
    /// Host mode: events of earlier hosts of the session (id, data), sent first.
    earlier: std::collections::VecDeque<(String, String)>,
    session: SessionId,
    pending: std::collections::VecDeque<Arc<SessionEvent>>,
    live: tokio::sync::broadcast::Receiver<Arc<SessionEvent>>,
    last: u64,
    /// Set when the server began shutting down: the stream ends once the session's
    /// (cancelled) turn has finished and its last events are sent, or at this instant.
    drain_until: Option<tokio::time::Instant>,
}

impl EventStream {
    async fn next(&mut self) -> Option<Event> {
        if let Some((id, data)) = self.earlier.pop_front() {
            return Some(Event::default().id(id).data(data));
        }
        loop {
            if let Some(event) = self.pending.pop_front() {
                if event.seq <= self.last {
                    continue;
                }
                self.last = event.seq;
                let data = serde_json::to_string(&*event).unwrap_or_else(|_| "{}".into());
                let id = match self.epoch {
                    Some(epoch) => format!("{epoch}:{}", event.seq),
                    None => event.seq.to_string(),
                };
                return Some(Event::default().id(id).data(data));
            }
            let received = match self.drain_until {
                None => tokio::select! {
                    _ = self.state.shutdown.cancelled() => {
                        let grace = self.state.options.shutdown_grace;
                        self.drain_until = Some(tokio::time::Instant::now() + grace);
                        continue;
                    }
                    received = self.live.recv() => received,
                },
                Some(deadline) => {
                    // A turn emits its last event before it stops counting as running, so
                    // once it is not running, everything it sent is already queued here.
                    let idle = !self.state.runtime.is_running(self.session.as_str());
                    match self.live.try_recv() {
                        Ok(event) => Ok(event),
                        Err(TryRecvError::Lagged(n)) => Err(RecvError::Lagged(n)),
                        Err(TryRecvError::Closed) => return None,
                        Err(TryRecvError::Empty) if idle => return None,
                        Err(TryRecvError::Empty) => {
                            if tokio::time::Instant::now() >= deadline {
                                return None;
                            }
                            let wait = tokio::time::sleep_until(
                                deadline
                                    .min(tokio::time::Instant::now() + Duration::from_millis(50)),
                            );
                            tokio::select! {
                                _ = wait => continue,
                                received = self.live.recv() => received,
                            }
                        }
                    }
                }
            };
            match received {
                Ok(event) => self.pending.push_back(event),
                // Fell behind: catch up from what the runtime kept.
                Err(RecvError::Lagged(_)) => {
                    self.pending = self
                        .state
                        .runtime
                        .events()
                        .since(&self.session, self.last)
                        .into();
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }
}
