//! Running one request in a kernel: the `execute_request`, the loop over iopub, shell and
//! heartbeat that gathers what belongs to it, interrupting it when its time is up, and
//! telling how it ended (finished, interrupted, never started, unstoppable, or the kernel
//! died).

use std::time::Duration;

use anyhow::{anyhow, Result};
use serde_json::{json, Map, Value};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;
use toolbox_host::ToolContext;

use super::kernel::{Kernel, Slot};
use super::process::{self, Process};
use super::spec::InterruptMode;
use super::wire::{self, ConnectionInfo, Received, Session};

/// How long an interrupted kernel gets to stop before the call gives up on it.
pub(super) const INTERRUPT_GRACE: Duration = Duration::from_secs(5);
/// A call that runs this long starts sending heartbeat pings.
const HEARTBEAT_AFTER: Duration = Duration::from_secs(1);
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// A kernel silent on every channel, heartbeat included, for this long is dead.
pub(super) const HEARTBEAT_DEAD: Duration = Duration::from_secs(5);
/// Bound on handing one message to the network.
pub(super) const SEND_WITHIN: Duration = Duration::from_secs(5);
/// Captured output beyond this many characters per stream is dropped (as the driver does).
const MAX_STREAM_CHARS: usize = 8 * 1024 * 1024;

/// A call in progress: if the caller drops it midway (the executor's own time limit, a
/// cancellation), code the call started is interrupted out of band.
pub(super) struct InFlight {
    pub(super) slot: OwnedMutexGuard<Slot>,
    pub(super) armed: bool,
    pub(super) started: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.slot.last_used = Some(std::time::Instant::now());
        if !(self.armed && self.started) {
            return;
        }
        if let Some(kernel) = self.slot.kernel.as_ref() {
            interrupt_out_of_band(kernel);
        }
    }
}

/// Interrupts without the kernel's sockets (usable from `Drop`).
fn interrupt_out_of_band(kernel: &Kernel) {
    if let (Some(process), InterruptMode::Signal) = (&kernel.process, kernel.interrupt) {
        process.sigint();
        return;
    }
    let info = kernel.info.clone();
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            let _ = send_control(&info, "interrupt_request", json!({})).await;
        });
    }
}

/// Sends one control message over a fresh connection (bounded), for when the call that
/// owned the kernel's sockets is gone.
pub(super) async fn send_control(
    info: &ConnectionInfo,
    msg_type: &str,
    content: Value,
) -> Result<()> {
    use zeromq::Socket;
    let within = Duration::from_millis(1500);
    let mut options = zeromq::SocketOptions::default();
    options.connect_timeout(within);
    let mut control = zeromq::DealerSocket::with_options(options);
    tokio::time::timeout(
        within,
        control.connect(&format!("tcp://{}", info.socket_addr(info.control_port))),
    )
    .await
    .map_err(|_| anyhow!("connecting timed out"))?
    .map_err(|e| anyhow!("{e}"))?;
    let session = Session::new(&info.key)?;
    let (_, frames) = session.message(msg_type, &content, &json!({}))?;
    wire::send_within(&mut control, frames, within).await
}

/// One execute_request.
pub(super) struct Exec<'a> {
    pub(super) code: &'a str,
    pub(super) silent: bool,
    pub(super) metadata: Value,
    pub(super) user_expressions: Value,
}

pub(super) struct Timing {
    pub(super) deadline: Instant,
    pub(super) timeout: Duration,
    /// Whether a request still queued behind other work may be interrupted (everything in a
    /// started kernel is toolbox's; an attached kernel runs other people's code too).
    pub(super) may_interrupt_queued: bool,
}

/// What one request produced.
#[derive(Default)]
pub(super) struct Collected {
    pub(super) idle: bool,
    pub(super) reply: Option<Value>,
    pub(super) execution_count: Option<u64>,
    pub(super) stdout: Stream,
    pub(super) stderr: Stream,
    pub(super) result: Option<Map<String, Value>>,
    pub(super) displays: Vec<Map<String, Value>>,
    pub(super) error: Option<Value>,
}

impl Collected {
    pub(super) fn reply_ok(&self) -> bool {
        self.reply
            .as_ref()
            .is_some_and(|r| r["status"].as_str() == Some("ok"))
    }
}

#[derive(Default)]
pub(super) struct Stream {
    text: String,
    dropped: usize,
}

impl Stream {
    fn add(&mut self, text: &str) {
        let room = MAX_STREAM_CHARS.saturating_sub(self.text.len());
        if text.len() <= room {
            self.text.push_str(text);
            return;
        }
        let mut cut = room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&text[..cut]);
        self.dropped += text[cut..].chars().count();
    }

    pub(super) fn finish(self) -> String {
        if self.dropped == 0 {
            self.text
        } else {
            format!(
                "{}\n[... {} more characters dropped ...]\n",
                self.text, self.dropped
            )
        }
    }
}

/// How a request ended.
pub(super) enum Ending {
    Finished,
    /// Interrupted (on timeout or cancellation, the reason given) and stopped in time.
    Interrupted(String),
    /// The limit passed while the request still waited behind other work in an attached
    /// kernel.
    NotStarted(String),
    /// Interrupted, but still running after the grace period.
    Unstoppable(String),
    /// The kernel went away.
    Died(String),
}

enum Event {
    Iopub(Result<zeromq::ZmqMessage>),
    Shell(Result<zeromq::ZmqMessage>),
    Beat(Result<zeromq::ZmqMessage>),
    Tick,
    Limit,
    Cancel,
    Exit(std::io::Result<std::process::ExitStatus>),
}

pub(super) async fn exit_of(
    process: &mut Option<Process>,
) -> std::io::Result<std::process::ExitStatus> {
    match process {
        Some(p) => p.child.wait().await,
        None => std::future::pending().await,
    }
}

async fn cancelled(ctx: Option<&ToolContext>) {
    match ctx {
        Some(ctx) => ctx.cancel.cancelled().await,
        None => std::future::pending().await,
    }
}

/// Sends one execute_request and gathers what belongs to it until the kernel is idle and
/// has replied, or the request is stopped. `started` turns true once the kernel began
/// running it.
pub(super) async fn run_request(
    kernel: &mut Kernel,
    exec: &Exec<'_>,
    timing: Timing,
    ctx: Option<&ToolContext>,
    started: &mut bool,
) -> Result<(Collected, Ending)> {
    let content = json!({
        "code": exec.code,
        "silent": exec.silent,
        "store_history": !exec.silent,
        "user_expressions": exec.user_expressions,
        "allow_stdin": false,
        // An error in toolbox's cell must not abort cells other clients queued.
        "stop_on_error": false,
    });
    let (msg_id, frames) = kernel
        .session
        .message("execute_request", &content, &exec.metadata)?;
    let mut c = Collected::default();
    if let Err(e) = wire::send_within(&mut kernel.channels.shell, frames, SEND_WITHIN).await {
        return Ok((c, Ending::Died(format!("it could not be reached: {e}"))));
    }
    let begun = Instant::now();
    let mut last_alive = begun;
    let mut next_beat = begun + HEARTBEAT_AFTER;
    let mut limit = timing.deadline;
    let mut stopping: Option<String> = None;
    let (mut iopub_ok, mut shell_ok, mut hb_ok) = (true, true, true);
    loop {
        if c.idle && c.reply.is_some() {
            let ending = match stopping {
                None => Ending::Finished,
                Some(why) => Ending::Interrupted(why),
            };
            return Ok((c, ending));
        }
        let Kernel {
            channels, process, ..
        } = &mut *kernel;
        let event = tokio::select! {
            m = channels.iopub.recv(), if iopub_ok => Event::Iopub(m),
            m = wire::recv(&mut channels.shell), if shell_ok => Event::Shell(m),
            m = wire::recv(&mut channels.hb), if hb_ok => Event::Beat(m),
            status = exit_of(process) => Event::Exit(status),
            _ = tokio::time::sleep_until(limit) => Event::Limit,
            _ = cancelled(ctx), if stopping.is_none() => Event::Cancel,
            _ = tokio::time::sleep_until(next_beat) => Event::Tick,
        };
        match event {
            Event::Iopub(Ok(frames)) => {
                last_alive = Instant::now();
                match wire::decode(&kernel.session.signer, frames) {
                    Received::Message(m) if m.parent_id() == msg_id => {
                        take_iopub(&mut c, m, started);
                    }
                    Received::BadSignature => kernel.bad_signatures += 1,
                    Received::Garbled(why) => {
                        tracing::debug!(target: "toolbox", why, "an iopub message was not readable")
                    }
                    Received::Message(_) => {}
                }
            }
            Event::Shell(Ok(frames)) => {
                last_alive = Instant::now();
                match wire::decode(&kernel.session.signer, frames) {
                    Received::Message(m)
                        if m.parent_id() == msg_id && m.msg_type() == "execute_reply" =>
                    {
                        if let Some(n) = m.content["execution_count"].as_u64() {
                            c.execution_count.get_or_insert(n);
                        }
                        let from = m.header["session"].as_str().unwrap_or("");
                        if !from.is_empty() && from != kernel.kernel_session {
                            kernel.restarted_as = Some(from.to_string());
                        }
                        c.reply = Some(m.content);
                    }
                    Received::BadSignature => kernel.bad_signatures += 1,
                    _ => {}
                }
            }
            Event::Beat(Ok(_)) => last_alive = Instant::now(),
            // A broken channel is not polled again (it would fail at once, forever); the
            // heartbeat or the process decides whether the kernel is gone.
            Event::Iopub(Err(e)) => {
                tracing::debug!(target: "toolbox", error = %e, "iopub channel failed");
                iopub_ok = false;
            }
            Event::Shell(Err(e)) => {
                tracing::debug!(target: "toolbox", error = %e, "shell channel failed");
                shell_ok = false;
            }
            Event::Beat(Err(e)) => {
                tracing::debug!(target: "toolbox", error = %e, "heartbeat channel failed");
                hb_ok = false;
            }
            Event::Exit(status) => {
                let how = match status {
                    Ok(status) => process::describe_status(status),
                    Err(e) => format!("ended ({e})"),
                };
                return Ok((c, Ending::Died(format!("its process {how}"))));
            }
            Event::Tick => {
                let silent_for = last_alive.elapsed();
                if silent_for > HEARTBEAT_DEAD {
                    return Ok((
                        c,
                        Ending::Died(format!(
                            "it stopped answering, heartbeat included, for {} s",
                            silent_for.as_secs()
                        )),
                    ));
                }
                kernel.hb_seq += 1;
                let ping = wire::ping_frame(kernel.hb_seq);
                let _ =
                    wire::send_within(&mut kernel.channels.hb, ping, Duration::from_millis(500))
                        .await;
                next_beat = Instant::now() + HEARTBEAT_EVERY;
            }
            Event::Limit | Event::Cancel => {
                if let Some(why) = stopping.take() {
                    return Ok((c, Ending::Unstoppable(why)));
                }
                let why = if matches!(event, Event::Cancel) {
                    "was cancelled".to_string()
                } else {
                    format!("timed out after {} ms", timing.timeout.as_millis())
                };
                if !*started && !timing.may_interrupt_queued {
                    return Ok((c, Ending::NotStarted(why)));
                }
                interrupt(kernel).await;
                stopping = Some(why);
                limit = Instant::now() + INTERRUPT_GRACE;
            }
        }
    }
}

/// Interrupts the kernel the way its kernelspec asks (attached kernels: by message).
async fn interrupt(kernel: &mut Kernel) {
    if let (Some(process), InterruptMode::Signal) = (&kernel.process, kernel.interrupt) {
        process.sigint();
        return;
    }
    let sent = match kernel
        .session
        .message("interrupt_request", &json!({}), &json!({}))
    {
        Ok((_, frames)) => {
            wire::send_within(&mut kernel.channels.control, frames, SEND_WITHIN).await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        tracing::debug!(target: "toolbox", error = %e, "interrupt_request could not be sent");
    }
}

/// One iopub message of our request.
fn take_iopub(c: &mut Collected, m: wire::Message, started: &mut bool) {
    let content = m.content;
    match m.header["msg_type"].as_str().unwrap_or("") {
        "status" => match content["execution_state"].as_str() {
            Some("busy") => *started = true,
            Some("idle") => c.idle = true,
            _ => {}
        },
        "execute_input" => {
            *started = true;
            if let Some(n) = content["execution_count"].as_u64() {
                c.execution_count = Some(n);
            }
        }
        "stream" => {
            let text = content["text"].as_str().unwrap_or("");
            match content["name"].as_str() {
                Some("stderr") => c.stderr.add(text),
                _ => c.stdout.add(text),
            }
        }
        "display_data" | "update_display_data" => {
            if let Value::Object(data) = &content["data"] {
                c.displays.push(data.clone());
            }
        }
        "execute_result" => {
            if let Some(n) = content["execution_count"].as_u64() {
                c.execution_count = Some(n);
            }
            if let Value::Object(data) = content["data"].clone() {
                c.result = Some(data);
            }
        }
        "error" => c.error = Some(content),
        "clear_output" => {
            c.stdout = Stream::default();
            c.stderr = Stream::default();
            c.displays.clear();
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_capped_on_character_boundaries() {
        let mut s = Stream::default();
        s.add("héllo");
        assert_eq!(s.finish(), "héllo");
        let mut s = Stream::default();
        s.add(&"é".repeat(MAX_STREAM_CHARS));
        let text = s.finish();
        assert!(text.ends_with(&format!(
            "\n[... {} more characters dropped ...]\n",
            MAX_STREAM_CHARS / 2
        )));
    }
}
