//! Host mode: `toolbox serve --session SID --epoch N --state-store URL` serves one session
//! and keeps its state in a state store (toolbox-sync), so the session can resume on
//! another machine. See docs/scale-out.md.
//!
//! - Before serving: [`Host::start`] claims the epoch and restores the newest state into the
//!   (empty) workspace; [`Host::announce`] then emits `session_resumed` and ends the turn
//!   the lost host was running as `interrupted`.
//! - While serving: a sync after each call and each turn, and every `sync_every` (10 s)
//!   whatever runs, each one incremental; a sync that finds a newer epoch stops the host
//!   (turns end `superseded`).
//! - On park (`POST /api/sessions/{sid}/park`) or SIGTERM: running turns are cancelled,
//!   then [`Host::finish`] syncs one last time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use tokio_util::sync::CancellationToken;
use toolbox_core::SessionId;
use toolbox_runtime::{Runtime, RuntimeEvent, StopReason};
use toolbox_sync::{
    RestoreReport, SessionStore, StateStore, StoreRules, SyncError, SyncReport, LOST_ON_MOVE,
};

/// How a host was placed: given by whoever started it.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The one session it serves.
    pub session: SessionId,
    /// Its epoch: higher than any host of this session before it.
    pub epoch: u64,
    /// The state store's URL (`file:///…` or `s3://bucket/prefix`).
    pub store_url: String,
    /// How often it syncs whatever happens (a long call, a quiet session).
    pub sync_every: Duration,
}

/// A host's hold on its session's state.
pub struct Host {
    session: SessionId,
    epoch: u64,
    root: PathBuf,
    store: tokio::sync::Mutex<SessionStore>,
    /// Cancelled when the host must stop serving: parked, or superseded.
    stop: CancellationToken,
    /// The newer epoch that took the session over (0: none).
    superseded: AtomicU64,
    /// The turn running now, written into each manifest.
    open_turn: Mutex<Option<String>>,
    wake: tokio::sync::Notify,
    every: Duration,
    /// The last sync's report, or its error.
    last: Mutex<Option<Result<SyncReport, String>>>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("session", &self.session)
            .field("epoch", &self.epoch)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Host {
    /// Opens the store, claims the epoch and restores the newest state of the session into
    /// `root` (which must be empty when there is state to restore). Fails, serving nothing,
    /// when the epoch is taken or stale or the stored state is damaged.
    pub async fn start(
        options: &HostOptions,
        root: &Path,
        rules: StoreRules,
    ) -> Result<(Arc<Host>, RestoreReport), SyncError> {
        let store = StateStore::open(&options.store_url)?;
        let mut claimed =
            SessionStore::claim(store, options.session.clone(), options.epoch, rules).await?;
        let restored = claimed.restore_into(root).await?;
        let host = Arc::new(Host {
            session: options.session.clone(),
            epoch: options.epoch,
            root: root.to_path_buf(),
            store: tokio::sync::Mutex::new(claimed),
            stop: CancellationToken::new(),
            superseded: AtomicU64::new(0),
            open_turn: Mutex::new(None),
            wake: tokio::sync::Notify::new(),
            every: options.sync_every,
            last: Mutex::new(None),
        });
        Ok((host, restored))
    }

    /// The session this host serves.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// Its epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Cancelled when the host must stop serving (parked or superseded).
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

    /// Asks for a sync soon (after a call).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// After a restore, on the runtime's event stream: `session_resumed`, and the turn the
    /// lost host was running ended as `interrupted` (nothing of it is run again).
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
                        "the host running this turn (epoch {}) was lost; the session resumed \
                         from its last sync, and nothing of the turn was run again",
                        restored.from_epoch
                    )),
                },
            );
        }
    }

    /// One sync now. A newer epoch stops the host: its turns end `superseded`.
    pub async fn sync_now(&self, runtime: &Runtime) -> Result<SyncReport, SyncError> {
        if self.superseded().is_some() {
            return Err(anyhow::anyhow!("this host is superseded and syncs no more").into());
        }
        let open_turn = lock(&self.open_turn).clone();
        let result = self.store.lock().await.sync(&self.root, open_turn).await;
        match &result {
            Ok(report) => {
                tracing::debug!(target: "toolbox", ?report, "synced");
                *lock(&self.last) = Some(Ok(report.clone()));
            }
            Err(SyncError::Superseded { newer, .. }) => {
                let newer = *newer;
                eprintln!(
                    "toolbox serve: epoch {newer} has claimed session {}: this host (epoch {}) \
                     stops",
                    self.session, self.epoch
                );
                self.superseded.store(newer, Ordering::SeqCst);
                runtime.supersede(newer);
                self.stop.cancel();
                *lock(&self.last) = Some(Err(format!("superseded by epoch {newer}")));
            }
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

    /// Syncs after every call and turn, and every `sync_every`, until the host stops.
    pub fn spawn(self: &Arc<Self>, runtime: Runtime) -> tokio::task::JoinHandle<()> {
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
    /// superseded host, whose writes could never become HEAD.
    pub async fn finish(&self, runtime: &Runtime) -> Result<Option<SyncReport>, SyncError> {
        if self.superseded().is_some() {
            return Ok(None);
        }
        *lock(&self.open_turn) = None;
        self.sync_now(runtime).await.map(Some)
    }
}
