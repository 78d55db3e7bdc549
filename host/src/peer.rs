//! Who is at the other end of a TCP connection made from this machine.
//!
//! A server toolbox runs (`toolbox serve`) answers approvals for a person. Code a model runs
//! is toolbox's child, on the same machine: were it to reach the server, it could answer its
//! own questions. TCP has no peer credentials, so the kernel's socket table tells: the
//! connection's other end is a socket in `/proc/net/tcp` (or `tcp6`) whose inode some
//! process holds open. [`tcp_peer`] looks for that inode among the descriptors of toolbox
//! itself (the embedded interpreter runs inside it), of its descendants, and of every
//! process in toolbox's cgroups (a daemon that double-forked away from its parent is still
//! there).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What [`tcp_peer`] found at the other end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// Another machine.
    Remote,
    /// This machine, a process that is neither toolbox nor anything it started.
    Elsewhere,
    /// toolbox itself or a process it started (model-run code), with its pid.
    OwnCode(i32),
    /// This machine, but its socket is gone or cannot be found (the client closed before
    /// the server looked): nobody can be told apart, so treat it as untrusted.
    Unknown,
}

/// Looks up the process behind a connection accepted on `local` from `peer`.
pub fn tcp_peer(local: SocketAddr, peer: SocketAddr) -> Peer {
    let same_host = peer.ip().is_loopback()
        || peer.ip() == local.ip()
        || unmapped(peer.ip()) == unmapped(local.ip());
    if !same_host {
        return Peer::Remote;
    }
    let Some(inode) = socket_inode(peer, local) else {
        return Peer::Unknown;
    };
    let wanted = format!("socket:[{inode}]");
    for pid in candidates() {
        let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for entry in entries.flatten() {
            if std::fs::read_link(entry.path())
                .is_ok_and(|target| target.as_os_str() == wanted.as_str())
            {
                return Peer::OwnCode(pid);
            }
        }
    }
    Peer::Elsewhere
}

fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// toolbox's own pid, its descendants, and every process of its cgroups.
fn candidates() -> BTreeSet<i32> {
    let me = std::process::id() as i32;
    let mut pids = BTreeSet::from([me]);
    let table = crate::containment::processes();
    pids.extend(
        crate::containment::descendants(me, &table)
            .iter()
            .map(|p| p.pid),
    );
    if let Some(containment) = crate::containment::current() {
        for cgroup in containment.cgroups() {
            collect_cgroup(&cgroup.dir, &mut pids, 0);
        }
    }
    pids
}

fn collect_cgroup(dir: &std::path::Path, pids: &mut BTreeSet<i32>, depth: usize) {
    if depth > 16 {
        return;
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_cgroup(&entry.path(), pids, depth + 1);
        }
    }
}

/// The inode of the socket whose own address is `theirs` and whose remote address is
/// `ours`: the client's end of the connection. `None` when no such socket is open (inode 0
/// is a socket no process holds, such as one in TIME_WAIT).
fn socket_inode(theirs: SocketAddr, ours: SocketAddr) -> Option<u64> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        if let Some(inode) = find_in_table(&text, theirs, ours) {
            return (inode != 0).then_some(inode);
        }
    }
    None
}

/// In the text of `/proc/net/tcp{,6}`, the inode of the line for `local` → `remote`.
fn find_in_table(text: &str, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(l), Some(r), Some(inode)) = (fields.get(1), fields.get(2), fields.get(9)) else {
            continue;
        };
        let (Some(l), Some(r)) = (parse_addr(l), parse_addr(r)) else {
            continue;
        };
        if same(l, local) && same(r, remote) {
            return inode.parse().ok();
        }
    }
    None
}

fn same(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && unmapped(a.ip()) == unmapped(b.ip())
}

/// `0100007F:1F90` (IPv4: the address's bytes as the kernel's 32-bit word, printed in host
/// order) or 32 hex digits of four such words (IPv6), then the port in hex.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |hex: &str| u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes);
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(addr)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[4 * i..4 * i + 4].copy_from_slice(&word(&addr[8 * i..8 * i + 8])?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_addresses_are_read() {
        assert_eq!(
            parse_addr("0100007F:1F90"),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            parse_addr("00000000000000000000000001000000:0050"),
            Some("[::1]:80".parse().unwrap())
        );
        assert_eq!(
            parse_addr("0000000000000000FFFF00000100007F:0050"),
            Some("[::ffff:127.0.0.1]:80".parse().unwrap())
        );
        assert_eq!(parse_addr("zz:1"), None);
    }

    #[test]
    fn a_connection_from_this_process_is_its_own_and_from_elsewhere_is_not() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(local).unwrap();
        let (_server_side, peer) = listener.accept().unwrap();
        assert_eq!(
            tcp_peer(local, peer),
            Peer::OwnCode(std::process::id() as i32)
        );
        drop(client);
        // Closed before anyone looked: no process holds it any more.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(tcp_peer(local, peer), Peer::Unknown);
        // A client outside toolbox's tree is the integration tests' (toolbox/tests).
        let remote: SocketAddr = "192.0.2.7:5555".parse().unwrap();
        assert_eq!(tcp_peer(local, remote), Peer::Remote);
    }
}
