//! The running servers: one per (workspace root, server name), shared by every session on
//! that workspace, started on first use and stopped after `[lsp] idle_shutdown_s`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Once};
use std::time::Duration;

use anyhow::Result;
use toolbox_host::CancellationToken;

use crate::config::{LspConfig, ServerSpec};
use crate::server::Server;

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Server>>>>;

static POOL: LazyLock<Mutex<HashMap<(PathBuf, String), Slot>>> = LazyLock::new(Mutex::default);

fn slot(root: &Path, name: &str) -> Slot {
    start_reaper();
    POOL.lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((root.to_path_buf(), name.to_string()))
        .or_default()
        .clone()
}

/// A server got for one call: whether it was started for it, and what to tell the model.
pub struct Got {
    /// The server.
    pub server: Arc<Server>,
    /// Started by this call (indexing may still run).
    pub fresh: bool,
    /// Why the previous server of this slot had stopped, when this call replaced it.
    pub replaced: Option<String>,
}

/// The running server `spec` for `root`, started (and initialized) if there is none or the
/// last one died.
pub async fn get(
    root: &Path,
    spec: &ServerSpec,
    cfg: &LspConfig,
    limits: toolbox_host::limits::Limits,
    cancel: &CancellationToken,
    trace_env: &[(&'static str, String)],
) -> Result<Got> {
    let slot = slot(root, &spec.name);
    let mut guard = slot.lock().await;
    if let Some(s) = guard.as_ref() {
        if !s.is_dead() && s.spec == *spec {
            s.touch();
            return Ok(Got {
                server: s.clone(),
                fresh: false,
                replaced: None,
            });
        }
    }
    let mut replaced = None;
    if let Some(old) = guard.take() {
        replaced = old.dead_reason();
        old.kill();
    }
    let server = Arc::new(Server::spawn(
        spec,
        root,
        limits,
        cfg.allow_network,
        cfg.sandbox,
        cfg.idle_shutdown_s,
        trace_env,
    )?);
    let init = server
        .initialize(
            spec.initialization_options.clone(),
            Duration::from_secs(cfg.init_timeout_s),
            cancel,
        )
        .await;
    if let Err(e) = init {
        server.kill();
        return Err(e);
    }
    *guard = Some(server.clone());
    Ok(Got {
        server,
        fresh: true,
        replaced,
    })
}

/// Forgets `server` if it is still the one in its slot (after it crashed), killing it.
pub async fn discard(server: &Arc<Server>) {
    let slot = slot(&server.root, &server.spec.name);
    let mut guard = slot.lock().await;
    if guard.as_ref().is_some_and(|s| Arc::ptr_eq(s, server)) {
        guard.take();
    }
    server.kill();
}

/// The live servers for `root`, without starting any.
pub fn running(root: &Path) -> Vec<Arc<Server>> {
    let slots: Vec<Slot> = POOL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|((r, _), _)| r == root)
        .map(|(_, s)| s.clone())
        .collect();
    slots
        .iter()
        .filter_map(|s| s.try_lock().ok().and_then(|g| g.clone()))
        .filter(|s| !s.is_dead())
        .collect()
}

/// Stops servers idle longer than their `idle_shutdown_s`, checked every second by a thread
/// of its own.
fn start_reaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("lsp-idle".into())
            .spawn(|| loop {
                std::thread::sleep(Duration::from_secs(1));
                let slots: Vec<Slot> = POOL
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .cloned()
                    .collect();
                for slot in slots {
                    let Ok(mut guard) = slot.try_lock() else {
                        continue;
                    };
                    // A dead server stays until its next use, which says it had stopped.
                    let stop = guard
                        .as_ref()
                        .is_some_and(|s| s.idle_for() >= Duration::from_secs(s.idle_shutdown_s));
                    if stop {
                        if let Some(s) = guard.take() {
                            tracing::debug!(target: "toolbox", server = %s.spec.name, "stopping an idle language server");
                            s.stop();
                        }
                    }
                }
            });
    });
}
