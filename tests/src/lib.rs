//! Helpers shared by the integration tests in `tests/tests/`.

#![forbid(unsafe_code)]

/// The request side of the tiny loopback HTTP/1.1 servers the web and image tests run.
pub mod http {
    use std::collections::HashMap;
    use std::io::Read;
    use std::net::TcpStream;
    use std::time::Duration;

    /// One request as the test server saw it.
    #[derive(Debug, Clone)]
    pub struct Request {
        pub method: String,
        /// Path and query, as sent.
        pub target: String,
        /// Lower-case names.
        pub headers: HashMap<String, String>,
        pub body: Vec<u8>,
    }

    impl Request {
        /// The decoded query parameters.
        pub fn query(&self) -> HashMap<String, String> {
            let query = self.target.split_once('?').map(|(_, q)| q).unwrap_or("");
            query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (percent_decode(k), percent_decode(v))
                })
                .collect()
        }

        pub fn path(&self) -> String {
            self.target.split('?').next().unwrap_or("").to_string()
        }
    }

    /// `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` a byte.
    pub fn percent_decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 3 <= bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                    i += 2;
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Reads one request (head and a Content-Length body) with a 5 s read timeout; `None`
    /// when the peer goes away first or the head passes 1 MiB.
    pub fn read_request(stream: &mut TcpStream) -> Option<Request> {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.len() > 1 << 20 {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap_or("").split(' ');
        let method = first.next().unwrap_or("").to_string();
        let target = first.next().unwrap_or("").to_string();
        let headers: HashMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = buf[head_end + 4..].to_vec();
        while body.len() < len {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
        Some(Request {
            method,
            target,
            headers,
            body,
        })
    }
}
