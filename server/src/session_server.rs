//! Session server mode: `toolbox serve --session SID --epoch N --state-store URL` serves
//! one session and keeps its state in a state store (toolbox-sync), so the session can
//! resume on another machine. See docs/scale-out.md.
//!
//! - Before serving: [`SessionServer::start`] claims the epoch and restores the newest
//!   state into the (empty) workspace; [`SessionServer::announce`] then emits
//!   `session_resumed` and ends the turn the lost session server was running as
//!   `interrupted`.
//! - While serving: a sync after each call and each turn, and every `sync_every` (10 s)
//!   whatever runs, each one incremental; a sync that finds a newer epoch stops the session
//!   server (turns end `superseded`).
//! - On park (`POST /api/sessions/{sid}/park`) or SIGTERM: running turns are cancelled,
//!   then [`SessionServer::finish`] syncs one last time.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use tokio_util::sync::CancellationToken;
use toolbox_core::SessionId;
use toolbox_runtime::{Runtime, RuntimeEvent, StopReason};
use toolbox_sync::{
    Epoch, RestoreReport, SessionStore, StateStore, StoreRules, SyncError, SyncReport, LOST_ON_MOVE,
};

/// The session's events in session server mode, in `.toolbox/sessions/<sid>/`: synced with
/// the rest, so the next session server can replay them to a client that reconnects with an
/// id of an older epoch. One line per event: `{"epoch": E, "event": {…}}`.
pub const EVENTS_FILE: &str = "events.jsonl";

/// How many events of earlier epochs a session server keeps for replay (the newest).
const KEPT_EVENTS: usize = 10_000;

/// The most of the events file a session server reads when it starts.
const MAX_EVENTS_FILE: u64 = 64 * 1024 * 1024;

/// An event of an earlier session server of the session.
#[derive(Debug, Clone)]
struct StoredEvent {
    epoch: u64,
    seq: u64,
    data: String,
}

/// How a session server was placed: given by whoever started it.
#[derive(Debug, Clone)]
pub struct SessionServerOptions {
    /// The one session it serves.
    pub session: SessionId,
    /// Its epoch: higher than any session server of this session before it, or the next one
    /// free.
    pub epoch: Epoch,
    /// The state store's URL (`file:///…` or `s3://bucket/prefix`).
    pub store_url: String,
    /// How often it syncs whatever happens (a long call, a quiet session).
    pub sync_every: Duration,
}

/// A session server's hold on its session's state.
pub struct SessionServer {
    session: SessionId,
    epoch: u64,
    root: PathBuf,
    store: tokio::sync::Mutex<SessionStore>,
    /// Cancelled when the session server must stop serving: parked, or superseded.
    stop: CancellationToken,
    /// The newer epoch that took the session over (0: none).
    superseded: AtomicU64,
    /// The turn running now, written into each manifest.
    open_turn: Mutex<Option<String>>,
    wake: tokio::sync::Notify,
    every: Duration,
    /// The last sync's report, or its error.
    last: Mutex<Option<Result<SyncReport, String>>>,
    /// The events of earlier epochs, from the restored events file, oldest first.
    history: Vec<StoredEvent>,
    /// The seq of the last event of this session server written to the events file.
    written: AtomicU64,
}

impl std::fmt::Debug for SessionServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionServer")
            .field("session", &self.session)
            .field("epoch", &self.epoch)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SessionServer {
    /// Opens the store, claims the epoch and restores the newest state of the session into
    /// `root` (which must be empty when there is state to restore). Fails, serving nothing,
    /// when the epoch is taken or stale or the stored state is damaged.
    pub async fn start(
        options: &SessionServerOptions,
        root: &Path,
        rules: StoreRules,
    ) -> Result<(Arc<SessionServer>, RestoreReport), SyncError> {
        let store = StateStore::open(&options.store_url)?;
        let mut claimed =
            SessionStore::claim_epoch(store, options.session.clone(), options.epoch, rules).await?;
        let restored = claimed.restore_into(root).await?;
        let history = load_history(root, &options.session);
        let server = Arc::new(SessionServer {
            session: options.session.clone(),
            epoch: claimed.epoch(),
            root: root.to_path_buf(),
            store: tokio::sync::Mutex::new(claimed),
            stop: CancellationToken::new(),
            superseded: AtomicU64::new(0),
            open_turn: Mutex::new(None),
            wake: tokio::sync::Notify::new(),
            every: options.sync_every,
            last: Mutex::new(None),
            history,
            written: AtomicU64::new(0),
        });
        Ok((server, restored))
    }

    /// The session it serves.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// Its epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Cancelled when the session server must stop serving (parked or superseded).
    pub fn stopping(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// The newer epoch that took the session over, if one did.
    pub fn superseded(&self) -> Option<u64> {
        match self.superseded.load(Ordering::SeqCst) {
            0 => None,
            n => Some(n),
        }
    }

    /// Parks the session: serving stops (running turns are cancelled), then
    /// [`finish`](Self::finish) syncs.
    pub fn park(&self) {
        self.stop.cancel();
    }

    /// The events of earlier epochs after `(epoch, seq)`, as SSE ids (`epoch:seq`) and
    /// data: what a client that reconnects with an id of an older epoch missed there.
    pub fn history_after(&self, epoch: u64, seq: u64) -> Vec<(String, String)> {
        self.history
            .iter()
            .filter(|e| (e.epoch, e.seq) > (epoch, seq))
            .map(|e| (format!("{}:{}", e.epoch, e.seq), e.data.clone()))
            .collect()
    }

    /// Asks for a sync soon (after a call).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// After a restore, on the runtime's event stream: `session_resumed`, and the turn the
    /// lost session server was running ended as `interrupted` (nothing of it is run again).
    pub fn announce(&self, runtime: &Runtime, restored: &RestoreReport) {
        if restored.from_epoch == 0 {
            return;
        }
        let hub = runtime.events();
        hub.emit(
            &self.session,
            RuntimeEvent::SessionResumed {
                epoch: self.epoch,
                restored_bytes: restored.bytes,
                lost: LOST_ON_MOVE.iter().map(|s| s.to_string()).collect(),
            },
        );
        if let Some(turn_id) = &restored.open_turn {
            hub.emit(
                &self.session,
                RuntimeEvent::TurnFinished {
                    turn_id: turn_id.clone(),
                    stop_reason: StopReason::Interrupted,
                    steps: 0,
                    usage: Default::default(),
                    notice: Some(format!(
                        "the session server running this turn (epoch {}) was lost; the session \
                         resumed from its last sync, and nothing of the turn was run again",
                        restored.from_epoch
                    )),
                },
            );
        }
    }

    /// Whether a newer epoch has claimed the session, asking the store now (one listing of
    /// its epochs): a call answered `done` by a session server that is already superseded
    /// would have its effects lost, since it can never sync. A newer epoch stops the
    /// session server as a sync that meets it does. A store that cannot be asked is not
    /// taken for a newer epoch.
    pub async fn newer_epoch(&self, runtime: &Runtime) -> Option<u64> {
        if let Some(newer) = self.superseded() {
            return Some(newer);
        }
        let checked = self.store.lock().await.check_fence().await;
        match checked {
            Err(SyncError::Superseded { newer, .. }) => {
                self.supersede(runtime, newer);
                Some(newer)
            }
            Err(e) => {
                tracing::warn!(target: "toolbox", error = %e, "the epoch fence could not be checked");
                None
            }
            Ok(()) => None,
        }
    }

    fn supersede(&self, runtime: &Runtime, newer: u64) {
        if self.superseded.swap(newer, Ordering::SeqCst) != 0 {
            return;
        }
        eprintln!(
            "toolbox serve: epoch {newer} has claimed session {}: this session server (epoch \
             {}) stops",
            self.session, self.epoch
        );
        runtime.supersede(newer);
        self.stop.cancel();
        *lock(&self.last) = Some(Err(format!("superseded by epoch {newer}")));
    }

    /// One sync now. A newer epoch stops the session server: its turns end `superseded`.
    pub async fn sync_now(&self, runtime: &Runtime) -> Result<SyncReport, SyncError> {
        if self.superseded().is_some() {
            return Err(
                anyhow::anyhow!("this session server is superseded and syncs no more").into(),
            );
        }
        let open_turn = lock(&self.open_turn).clone();
        let result = self.store.lock().await.sync(&self.root, open_turn).await;
        match &result {
            Ok(report) => {
                tracing::debug!(target: "toolbox", ?report, "synced");
                *lock(&self.last) = Some(Ok(report.clone()));
            }
            Err(SyncError::Superseded { newer, .. }) => self.supersede(runtime, *newer),
            Err(e) => {
                tracing::warn!(target: "toolbox", error = %e, "sync failed");
                eprintln!("toolbox serve: sync failed: {e}");
                *lock(&self.last) = Some(Err(e.to_string()));
            }
        }
        result
    }

    /// What the last sync did, for `GET /api/health`.
    pub fn last_sync(&self) -> serde_json::Value {
        match &*lock(&self.last) {
            None => serde_json::Value::Null,
            Some(Ok(r)) => serde_json::json!({
                "files": r.files,
                "total_bytes": r.total_bytes,
                "uploaded_blobs": r.uploaded_blobs,
                "uploaded_bytes": r.uploaded_bytes,
                "moved_head": r.moved_head,
                "elapsed_ms": r.elapsed_ms,
            }),
            Some(Err(e)) => serde_json::json!({"error": e}),
        }
    }

    /// Appends each of the session's events to the events file, as they come.
    fn spawn_writer(self: &Arc<Self>, runtime: Runtime) {
        let me = self.clone();
        tokio::spawn(async move {
            let sid = OsStr::new(me.session.as_str()).to_os_string();
            let file = runtime
                .executor()
                .workspace()
                .toolbox_subdir(&[OsStr::new("sessions"), &sid])
                .and_then(|dir| dir.open_append_lines(OsStr::new(EVENTS_FILE)));
            let mut file = match file {
                Ok((mut file, torn)) => {
                    if torn {
                        let _ = file.write_all(b"\n");
                    }
                    file
                }
                Err(e) => {
                    eprintln!("toolbox serve: cannot open the session's {EVENTS_FILE}: {e}");
                    return;
                }
            };
            let subscription = runtime.events().subscribe(&me.session, None);
            let mut pending: std::collections::VecDeque<_> = subscription.missed.into();
            let mut live = subscription.live;
            let mut last = 0;
            loop {
                while let Some(event) = pending.pop_front() {
                    if event.seq <= last {
                        continue;
                    }
                    last = event.seq;
                    let line = serde_json::json!({"epoch": me.epoch, "event": &*event});
                    let mut text = line.to_string();
                    text.push('\n');
                    // One write per line: a crash leaves at most a torn last line.
                    if let Err(e) = file.write_all(text.as_bytes()) {
                        eprintln!("toolbox serve: cannot write {EVENTS_FILE}: {e}");
                        return;
                    }
                    me.written.store(last, Ordering::SeqCst);
                }
                match live.recv().await {
                    Ok(event) => pending.push_back(event),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        pending = runtime.events().since(&me.session, last).into();
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }

    /// Waits (at most a second) until every event emitted so far is in the events file.
    async fn events_written(&self, runtime: &Runtime) {
        for _ in 0..100 {
            let newest = runtime
                .events()
                .since(&self.session, self.written.load(Ordering::SeqCst));
            if newest.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Syncs after every call and turn, and every `sync_every`, until the session server
    /// stops.
    pub fn spawn(self: &Arc<Self>, runtime: Runtime) -> tokio::task::JoinHandle<()> {
        self.spawn_writer(runtime.clone());
        let me = self.clone();
        let mut events = runtime.events().subscribe_all();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(me.every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = me.stop.cancelled() => return,
                    _ = tick.tick() => {}
                    _ = me.wake.notified() => {}
                    received = events.recv() => match received {
                        Ok(event) if event.session_id == me.session.as_str() => match &event.event {
                            RuntimeEvent::TurnStarted { turn_id, .. } => {
                                *lock(&me.open_turn) = Some(turn_id.clone());
                            }
                            RuntimeEvent::TurnFinished { .. } => *lock(&me.open_turn) = None,
                            RuntimeEvent::ToolCallFinished { .. } => {}
                            _ => continue,
                        },
                        Ok(_) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                }
                if me.stop.is_cancelled() {
                    return;
                }
                if let Err(SyncError::Superseded { .. }) = me.sync_now(&runtime).await {
                    return;
                }
            }
        })
    }

    /// After serving stopped (park, SIGTERM): the last sync, with no turn open. Not for a
    /// superseded session server, whose writes could never become HEAD.
    pub async fn finish(&self, runtime: &Runtime) -> Result<Option<SyncReport>, SyncError> {
        if self.superseded().is_some() {
            return Ok(None);
        }
        *lock(&self.open_turn) = None;
        self.events_written(runtime).await;
        self.sync_now(runtime).await.map(Some)
    }
}

/// The events of earlier session servers from the restored events file (the newest
/// [`KEPT_EVENTS`]), read through descriptors without following links; a torn or foreign
/// line is skipped.
fn load_history(root: &Path, session: &SessionId) -> Vec<StoredEvent> {
    use std::io::Read;
    let rel = Path::new(".toolbox/sessions").join(session.as_str());
    let Ok(file) = toolbox_host::Dir::open_path(root)
        .and_then(|dir| dir.open_dir_beneath(&rel))
        .and_then(|dir| dir.open_file(OsStr::new(EVENTS_FILE)))
    else {
        return Vec::new();
    };
    let mut text = String::new();
    if file
        .take(MAX_EVENTS_FILE)
        .read_to_string(&mut text)
        .is_err()
    {
        return Vec::new();
    }
    let mut events: std::collections::VecDeque<StoredEvent> = std::collections::VecDeque::new();
    for line in text.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(epoch), Some(seq)) = (value["epoch"].as_u64(), value["event"]["seq"].as_u64())
        else {
            continue;
        };
        if events.len() == KEPT_EVENTS {
            events.pop_front();
        }
        events.push_back(StoredEvent {
            epoch,
            seq,
            data: value["event"].to_string(),
        });
    }
    events.into()
}
