//! The Jupyter messaging protocol (version 5) over ZeroMQ, as far as toolbox needs it.
//!
//! - **Connection files.** The JSON a kernel is started with (or wrote for itself): its IP,
//!   five TCP ports, the HMAC key and the signature scheme. Only `tcp` and `hmac-sha256` are
//!   supported; anything else is refused with the field's name.
//! - **Messages.** A message is the multipart `[identities…, "<IDS|MSG>", signature, header,
//!   parent_header, metadata, content, buffers…]`. The signature is the hex HMAC-SHA256 of
//!   the four JSON frames under the connection's key. Every received message is verified
//!   (constant time, `ring::hmac::verify`); one with a wrong signature is dropped and counted,
//!   never read.
//! - **Channels.** shell (DEALER: execute_request, kernel_info_request), control (DEALER:
//!   interrupt_request, shutdown_request), iopub (SUB to everything: status, streams,
//!   display data, results, errors) and heartbeat (DEALER: the kernel echoes what it gets).
//!   stdin is never connected: toolbox sends `allow_stdin: false`.

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use ring::hmac;
use serde_json::{json, Value};
use zeromq::{
    DealerSocket, Socket, SocketEvent, SocketOptions, SocketRecv, SocketSend, SubSocket, ZmqMessage,
};

/// The frame that separates routing identities from the message.
const DELIMITER: &[u8] = b"<IDS|MSG>";
/// The protocol version toolbox speaks.
const PROTOCOL_VERSION: &str = "5.3";

/// Where a kernel listens, and the key its messages are signed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionInfo {
    pub ip: String,
    pub shell_port: u16,
    pub iopub_port: u16,
    pub stdin_port: u16,
    pub control_port: u16,
    pub hb_port: u16,
    pub key: String,
    pub signature_scheme: String,
}

impl ConnectionInfo {
    /// Reads a connection file; errors name the file and what is wrong with it.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the connection file {}", path.display()))?;
        Self::parse(&text)
            .with_context(|| format!("{} is not a usable Jupyter connection file", path.display()))
    }

    /// Parses the JSON of a connection file.
    pub fn parse(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text).map_err(|e| anyhow!("it is not JSON: {e}"))?;
        if !v.is_object() {
            bail!("it is not a JSON object");
        }
        let transport = v["transport"].as_str().unwrap_or("tcp");
        if transport != "tcp" {
            bail!("transport {transport:?} is not supported (only \"tcp\")");
        }
        let port = |name: &str| -> Result<u16> {
            v[name]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0)
                .ok_or_else(|| anyhow!("`{name}` is missing or not a port number"))
        };
        let scheme = v["signature_scheme"].as_str().unwrap_or("hmac-sha256");
        if scheme != "hmac-sha256" {
            bail!("signature_scheme {scheme:?} is not supported (only \"hmac-sha256\")");
        }
        let ip = match v["ip"].as_str().unwrap_or("127.0.0.1") {
            // A kernel listening everywhere is reached on the loopback address.
            "" | "*" | "0.0.0.0" => "127.0.0.1".to_string(),
            ip => ip.to_string(),
        };
        Ok(ConnectionInfo {
            ip,
            shell_port: port("shell_port")?,
            iopub_port: port("iopub_port")?,
            stdin_port: port("stdin_port")?,
            control_port: port("control_port")?,
            hb_port: port("hb_port")?,
            key: v["key"]
                .as_str()
                .ok_or_else(|| anyhow!("`key` is missing"))?
                .to_string(),
            signature_scheme: scheme.to_string(),
        })
    }

    /// The JSON toolbox writes for a kernel it starts.
    pub fn to_json(&self, kernel_name: &str) -> Value {
        json!({
            "ip": self.ip,
            "transport": "tcp",
            "shell_port": self.shell_port,
            "iopub_port": self.iopub_port,
            "stdin_port": self.stdin_port,
            "control_port": self.control_port,
            "hb_port": self.hb_port,
            "key": self.key,
            "signature_scheme": self.signature_scheme,
            "kernel_name": kernel_name,
        })
    }

    fn endpoint(&self, port: u16) -> String {
        if self.ip.contains(':') {
            format!("tcp://[{}]:{port}", self.ip)
        } else {
            format!("tcp://{}:{port}", self.ip)
        }
    }

    /// `127.0.0.1:port`, for plain TCP probes.
    pub fn socket_addr(&self, port: u16) -> String {
        if self.ip.contains(':') {
            format!("[{}]:{port}", self.ip)
        } else {
            format!("{}:{port}", self.ip)
        }
    }
}

/// Signs and verifies messages with the connection's key (no key: no signatures).
pub struct Signer {
    key: Option<hmac::Key>,
}

impl Signer {
    pub fn new(key: &str) -> Signer {
        Signer {
            key: (!key.is_empty()).then(|| hmac::Key::new(hmac::HMAC_SHA256, key.as_bytes())),
        }
    }

    fn sign(&self, parts: &[&[u8]]) -> String {
        let Some(key) = &self.key else {
            return String::new();
        };
        let mut context = hmac::Context::with_key(key);
        for part in parts {
            context.update(part);
        }
        hex(context.sign().as_ref())
    }

    /// Whether `signature` (hex) is the HMAC of `parts`; compared in constant time.
    fn verify(&self, parts: &[&[u8]], signature: &[u8]) -> bool {
        let Some(key) = &self.key else {
            return true;
        };
        let Some(tag) = unhex(signature) else {
            return false;
        };
        let data: Vec<u8> = parts.concat();
        hmac::verify(key, &data, &tag).is_ok()
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

pub fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// `n` random bytes as hex, from the operating system's generator.
pub fn random_hex(n: usize) -> Result<String> {
    use ring::rand::SecureRandom;
    let mut bytes = vec![0u8; n];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow!("the operating system's random generator failed"))?;
    Ok(hex(&bytes))
}

/// A received (and verified) message.
#[derive(Debug, Clone)]
pub struct Message {
    pub header: Value,
    pub parent_header: Value,
    pub content: Value,
}

impl Message {
    pub fn msg_type(&self) -> &str {
        self.header["msg_type"].as_str().unwrap_or("")
    }

    /// The id of the request this message answers or belongs to.
    pub fn parent_id(&self) -> &str {
        self.parent_header["msg_id"].as_str().unwrap_or("")
    }
}

/// What came off a socket.
pub enum Received {
    Message(Message),
    /// A message whose signature did not match: dropped.
    BadSignature,
    /// Frames that are not a Jupyter message (no delimiter, too few frames, not JSON).
    Garbled(String),
}

/// Splits and verifies the frames of one message.
pub fn decode(signer: &Signer, message: ZmqMessage) -> Received {
    let frames = message.into_vec();
    let Some(at) = frames.iter().position(|f| f.as_ref() == DELIMITER) else {
        return Received::Garbled("no <IDS|MSG> delimiter".into());
    };
    let rest = &frames[at + 1..];
    if rest.len() < 5 {
        return Received::Garbled(format!("{} frames after the delimiter", rest.len()));
    }
    let parts: [&[u8]; 4] = [&rest[1], &rest[2], &rest[3], &rest[4]];
    if !signer.verify(&parts, &rest[0]) {
        return Received::BadSignature;
    }
    let parse = |b: &Bytes| serde_json::from_slice::<Value>(b);
    match (parse(&rest[1]), parse(&rest[2]), parse(&rest[4])) {
        (Ok(header), Ok(parent_header), Ok(content)) => Received::Message(Message {
            header,
            parent_header,
            content,
        }),
        _ => Received::Garbled("a frame is not JSON".into()),
    }
}

/// Builds signed messages for one client session.
pub struct Session {
    pub id: String,
    pub signer: Signer,
}

impl Session {
    pub fn new(key: &str) -> Result<Session> {
        Ok(Session {
            id: random_hex(16)?,
            signer: Signer::new(key),
        })
    }

    /// A new message; returns its id and its frames.
    pub fn message(
        &self,
        msg_type: &str,
        content: &Value,
        metadata: &Value,
    ) -> Result<(String, ZmqMessage)> {
        let msg_id = random_hex(16)?;
        let header = json!({
            "msg_id": msg_id,
            "session": self.id,
            "username": "toolbox",
            "date": humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            "msg_type": msg_type,
            "version": PROTOCOL_VERSION,
        });
        let header = serde_json::to_vec(&header)?;
        let parent = b"{}".to_vec();
        let metadata = serde_json::to_vec(metadata)?;
        let content = serde_json::to_vec(content)?;
        let signature = self.signer.sign(&[&header, &parent, &metadata, &content]);
        let frames: Vec<Bytes> = vec![
            Bytes::from_static(DELIMITER),
            Bytes::from(signature.into_bytes()),
            Bytes::from(header),
            Bytes::from(parent),
            Bytes::from(metadata),
            Bytes::from(content),
        ];
        let message = ZmqMessage::try_from(frames).map_err(|e| anyhow!("{e}"))?;
        Ok((msg_id, message))
    }
}

/// The four channels of one connection to a kernel.
pub struct Channels {
    pub shell: DealerSocket,
    pub control: DealerSocket,
    pub iopub: Iopub,
    pub hb: DealerSocket,
}

/// How many iopub messages wait for a reader before the iopub reader stops taking more
/// (the kernel's publisher then drops them for this subscriber, as ZeroMQ's PUB does).
const IOPUB_BACKLOG: usize = 4096;

/// The iopub channel, read all the time by a task of its own: between calls nothing else
/// reads it, and a dead peer is only noticed by reading (the task notices at once).
pub struct Iopub {
    messages: tokio::sync::mpsc::Receiver<ZmqMessage>,
    lost: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Iopub {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Iopub {
    fn start(
        mut socket: SubSocket,
        mut events: futures_channel::mpsc::Receiver<SocketEvent>,
    ) -> Iopub {
        use std::sync::atomic::Ordering;
        let (feed, messages) = tokio::sync::mpsc::channel(IOPUB_BACKLOG);
        let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = lost.clone();
        let reader = tokio::spawn(async move {
            loop {
                // Room first, so a message read is never dropped.
                let permit = tokio::select! {
                    permit = feed.reserve() => match permit {
                        Ok(permit) => permit,
                        Err(_) => return,
                    },
                    event = events.recv() => match event {
                        Ok(SocketEvent::Disconnected(_)) | Err(_) => break,
                        Ok(_) => continue,
                    },
                };
                tokio::select! {
                    message = socket.recv() => match message {
                        Ok(message) => permit.send(message),
                        Err(_) => break,
                    },
                    event = events.recv() => match event {
                        Ok(SocketEvent::Disconnected(_)) | Err(_) => break,
                        Ok(_) => {}
                    },
                }
            }
            flag.store(true, Ordering::SeqCst);
        });
        Iopub {
            messages,
            lost,
            reader,
        }
    }

    /// The next message; an error once the connection is gone.
    pub async fn recv(&mut self) -> Result<ZmqMessage> {
        self.messages
            .recv()
            .await
            .ok_or_else(|| anyhow!("the iopub connection was lost"))
    }
}

impl Channels {
    /// Connects every channel, each within `within`.
    pub async fn connect(info: &ConnectionInfo, within: Duration) -> Result<Channels> {
        let options = || {
            let mut o = SocketOptions::default();
            o.connect_timeout(within.max(Duration::from_millis(100)));
            o
        };
        let mut shell = DealerSocket::with_options(options());
        let mut control = DealerSocket::with_options(options());
        let mut iopub = SubSocket::with_options(options());
        let mut hb = DealerSocket::with_options(options());
        let name =
            |channel: &str, port: u16| format!("{channel} channel ({})", info.socket_addr(port));
        connect_one(&mut iopub, info.endpoint(info.iopub_port), within)
            .await
            .with_context(|| format!("cannot connect the {}", name("iopub", info.iopub_port)))?;
        iopub
            .subscribe("")
            .await
            .map_err(|e| anyhow!("cannot subscribe to iopub: {e}"))?;
        for (socket, channel, port) in [
            (&mut shell, "shell", info.shell_port),
            (&mut control, "control", info.control_port),
            (&mut hb, "heartbeat", info.hb_port),
        ] {
            connect_one(socket, info.endpoint(port), within)
                .await
                .with_context(|| format!("cannot connect the {}", name(channel, port)))?;
        }
        let events = iopub.monitor();
        Ok(Channels {
            shell,
            control,
            iopub: Iopub::start(iopub, events),
            hb,
        })
    }

    /// Whether the kernel's end of the connection went away (the kernel stopped, or was
    /// restarted by its owner). Drops the iopub messages waiting from before (other
    /// clients' output), which no call will ask for.
    pub fn peer_lost(&mut self) -> bool {
        while self.iopub.messages.try_recv().is_ok() {}
        self.iopub.lost.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn connect_one<S: Socket>(socket: &mut S, endpoint: String, within: Duration) -> Result<()> {
    match tokio::time::timeout(within, socket.connect(&endpoint)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(anyhow!("{e}")),
        Err(_) => Err(anyhow!("timed out")),
    }
}

/// Sends on a socket within `within` (a peer that stopped reading must not hang a call).
pub async fn send_within<S: SocketSend>(
    socket: &mut S,
    message: ZmqMessage,
    within: Duration,
) -> Result<()> {
    match tokio::time::timeout(within, socket.send(message)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(anyhow!("{e}")),
        Err(_) => Err(anyhow!(
            "sending took longer than {} ms",
            within.as_millis()
        )),
    }
}

/// Receives one multipart message (cancel-safe: a message is only taken when returned).
pub async fn recv<S: SocketRecv>(socket: &mut S) -> Result<ZmqMessage> {
    socket.recv().await.map_err(|e| anyhow!("{e}"))
}

/// A heartbeat ping: its frame, so the echo can be matched.
pub fn ping_frame(seq: u64) -> ZmqMessage {
    ZmqMessage::from(format!("toolbox-ping-{seq}"))
}

/// ANSI escape sequences (IPython colours its tracebacks) removed.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            // CSI: ESC [ parameters… final byte in @..~
            Some('[') => {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            // OSC: ESC ] … BEL or ESC \
            Some(']') => {
                chars.next();
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            Some(_) => {
                chars.next();
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{"shell_port": 5001, "iopub_port": 5002, "stdin_port": 5003,
        "control_port": 5004, "hb_port": 5005, "ip": "127.0.0.1", "key": "secret",
        "transport": "tcp", "signature_scheme": "hmac-sha256", "kernel_name": ""}"#;

    #[test]
    fn connection_files_are_read_and_checked() {
        let info = ConnectionInfo::parse(FILE).unwrap();
        assert_eq!(info.shell_port, 5001);
        assert_eq!(info.endpoint(info.hb_port), "tcp://127.0.0.1:5005");
        let back = ConnectionInfo::parse(&info.to_json("python3").to_string()).unwrap();
        assert_eq!(back, info);
        let err = |text: &str| format!("{:#}", ConnectionInfo::parse(text).unwrap_err());
        assert!(
            err("not json").starts_with("it is not JSON"),
            "{}",
            err("x")
        );
        assert_eq!(
            err(&FILE.replace("\"shell_port\": 5001,", "")),
            "`shell_port` is missing or not a port number"
        );
        assert_eq!(
            err(&FILE.replace("\"tcp\"", "\"ipc\"")),
            "transport \"ipc\" is not supported (only \"tcp\")"
        );
        assert_eq!(
            err(&FILE.replace("hmac-sha256", "hmac-md5")),
            "signature_scheme \"hmac-md5\" is not supported (only \"hmac-sha256\")"
        );
        assert_eq!(
            err(&FILE.replace("\"key\": \"secret\",", "")),
            "`key` is missing"
        );
        let wide = ConnectionInfo::parse(&FILE.replace("127.0.0.1", "0.0.0.0")).unwrap();
        assert_eq!(wide.ip, "127.0.0.1");
    }

    #[test]
    fn messages_are_signed_and_verified() {
        let session = Session::new("secret").unwrap();
        let (id, message) = session
            .message("execute_request", &json!({"code": "1"}), &json!({}))
            .unwrap();
        assert_eq!(id.len(), 32);
        // As a kernel sends it back: a routing identity, then the message.
        let mut frames = message.into_vec();
        frames.insert(0, Bytes::from_static(b"topic"));
        let ok = ZmqMessage::try_from(frames.clone()).unwrap();
        match decode(&session.signer, ok) {
            Received::Message(m) => {
                assert_eq!(m.msg_type(), "execute_request");
                assert_eq!(m.content["code"], "1");
                assert_eq!(m.header["msg_id"], id);
            }
            _ => panic!("a correctly signed message was refused"),
        }
        // One changed byte in the content, or another key: refused.
        let mut tampered = frames.clone();
        tampered[6] = Bytes::from_static(br#"{"code": "2"}"#);
        assert!(matches!(
            decode(&session.signer, ZmqMessage::try_from(tampered).unwrap()),
            Received::BadSignature
        ));
        let other = Signer::new("other");
        assert!(matches!(
            decode(&other, ZmqMessage::try_from(frames.clone()).unwrap()),
            Received::BadSignature
        ));
        let mut no_hex = frames.clone();
        no_hex[2] = Bytes::from_static(b"zz");
        assert!(matches!(
            decode(&session.signer, ZmqMessage::try_from(no_hex).unwrap()),
            Received::BadSignature
        ));
        let short = ZmqMessage::try_from(frames[..4].to_vec()).unwrap();
        assert!(matches!(
            decode(&session.signer, short),
            Received::Garbled(_)
        ));
        // The signature is the documented one: hex HMAC-SHA256 over the four JSON frames.
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"secret");
        let data: Vec<u8> = frames[3..7].iter().flat_map(|f| f.to_vec()).collect();
        assert_eq!(
            frames[2].as_ref(),
            hex(hmac::sign(&key, &data).as_ref()).as_bytes()
        );
    }

    #[test]
    fn ansi_colours_are_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[0;31mZeroDivisionError\u{1b}[0m: x\u{1b}]8;;http://a\u{7}link"),
            "ZeroDivisionError: xlink"
        );
        assert_eq!(strip_ansi("plain"), "plain");
    }

    #[test]
    fn hex_digits() {
        assert_eq!(unhex(b"0aFf"), Some(vec![10, 255]));
        assert_eq!(unhex(b"0"), None);
    }
}
