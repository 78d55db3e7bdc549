//! One call's streamed output over `/mcp`: a queue capped at
//! [`MAX_QUEUED_OUTPUT_BYTES`] that the executor's sink fills, and a task that sends it to
//! the client as [`crate::output`] routes it, so a client slow to read never stalls the call.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
// MCP logging is deprecated by SEP-2577 (rmcp marks it so); both transports offer it until
// clients stop asking for it.
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::RoleServer;
use rmcp::Peer;
use serde_json::Value;
use tokio::sync::mpsc;
use toolbox_host::CancellationToken;

use crate::output::{dropped_note, next_progress, QueuedBytes, Route, MAX_QUEUED_OUTPUT_BYTES};

/// One thing to send: a chunk of output, or a tool's counted progress (`done`, and its
/// `total` when known) with its message.
pub(super) struct Chunk {
    pub(super) text: String,
    pub(super) done: Option<u64>,
    pub(super) total: Option<u64>,
}

/// The sending half of one call's output: a queue capped in bytes.
pub(super) struct OutputQueue {
    tx: mpsc::UnboundedSender<Chunk>,
    queued: Arc<QueuedBytes>,
    dropped: Arc<AtomicUsize>,
}

impl OutputQueue {
    /// A queue for a call whose output goes by `route`, and the task forwarding it to `peer`
    /// until `done`, then what is still queued, then a note on what was dropped.
    pub(super) fn start(
        peer: Peer<RoleServer>,
        route: Route<ProgressToken>,
        tool: String,
        done: CancellationToken,
    ) -> (OutputQueue, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(QueuedBytes::default());
        let dropped = Arc::new(AtomicUsize::new(0));
        let forwarder = tokio::spawn(forward_output(
            peer,
            route,
            tool,
            rx,
            queued.clone(),
            dropped.clone(),
            done,
        ));
        let queue = OutputQueue {
            tx,
            queued,
            dropped,
        };
        (queue, forwarder)
    }

    pub(super) fn push(&self, chunk: Chunk) {
        if chunk.text.is_empty() && chunk.done.is_none() {
            return;
        }
        let len = chunk.text.len();
        let fits = self.queued.try_add(len, MAX_QUEUED_OUTPUT_BYTES);
        if !fits || self.tx.send(chunk).is_err() {
            if fits {
                self.queued.sub(len);
            }
            self.dropped.fetch_add(len, Ordering::Relaxed);
        }
    }
}

/// One tool output chunk as an `info` log message.
#[allow(deprecated)]
async fn send_log(
    peer: &Peer<RoleServer>,
    tool: String,
    text: String,
) -> Result<(), rmcp::ServiceError> {
    let params = LoggingMessageNotificationParam::new(LoggingLevel::Info, Value::String(text))
        .with_logger(tool);
    peer.notify_logging_message(params).await
}

/// Sends a call's queued output to the client until `done`, then what is still queued, then
/// a note on what was dropped. Runs as a task of its own, so a client slow to read never
/// stalls the call.
async fn forward_output(
    peer: Peer<RoleServer>,
    route: Route<ProgressToken>,
    tool: String,
    mut rx: mpsc::UnboundedReceiver<Chunk>,
    queued: Arc<QueuedBytes>,
    dropped: Arc<AtomicUsize>,
    done: CancellationToken,
) {
    let mut progress = 0u64;
    let send = |text: String, progress: u64, total: Option<u64>| {
        let peer = peer.clone();
        let route = route.clone();
        let tool = tool.clone();
        async move {
            let sent = match route {
                Route::Progress(token) => {
                    let mut params =
                        ProgressNotificationParam::new(token, progress as f64).with_message(text);
                    if let Some(total) = total {
                        params = params.with_total(total as f64);
                    }
                    peer.notify_progress(params).await
                }
                Route::Log => send_log(&peer, tool, text).await,
            };
            if let Err(e) = sent {
                tracing::debug!("mcp: output notification not sent: {e}");
            }
        }
    };
    loop {
        let chunk = tokio::select! {
            biased;
            chunk = rx.recv() => match chunk {
                Some(chunk) => chunk,
                None => break,
            },
            _ = done.cancelled() => break,
        };
        queued.sub(chunk.text.len());
        let total;
        (progress, total) = next_progress(progress, chunk.done, chunk.total);
        send(chunk.text, progress, total).await;
    }
    while let Ok(chunk) = rx.try_recv() {
        let total;
        (progress, total) = next_progress(progress, chunk.done, chunk.total);
        send(chunk.text, progress, total).await;
    }
    let dropped = dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        progress += 1;
        send(dropped_note(dropped as u64), progress, None).await;
    }
}
