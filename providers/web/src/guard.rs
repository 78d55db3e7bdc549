//! The SSRF guard: which addresses `web_fetch` may connect to.
//!
//! A model chooses the URL, so without a guard it could make toolbox read the cloud metadata
//! service, a database admin page on the LAN or a service bound to loopback. The guard refuses
//! every address that is not ordinary public unicast, and it does so at three places:
//!
//! 1. before the request, for the URL as given (scheme, IP-literal host, metadata host names);
//! 2. in the DNS resolver ([`GuardedResolver`]): a name is resolved and every address is
//!    checked, so `evil.example` pointing at `127.0.0.1` is caught — the check is on what we
//!    actually connect to, not on the spelling of the name;
//! 3. on every redirect hop ([`redirect_policy`]): scheme, IP literals and names again; the
//!    new name then goes through the resolver.
//!
//! IP literals never reach a resolver (the connector parses them directly), which is why
//! places 1 and 3 check them. Configuration can allow exact host names (`allow_hosts`) and
//! address ranges in CIDR form (`allow_ranges`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use url::{Host, Url};

/// Host names that are metadata services whatever they resolve to. (They normally resolve to
/// link-local addresses, which are refused anyway; the names are refused too in case a
/// resolver maps them elsewhere.)
const METADATA_HOSTS: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.azure.internal",
    "metadata.platformequinix.com",
];

/// The IPv6 address of the AWS instance metadata service (`fd00:ec2::254`).
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// An address range in CIDR form, e.g. `10.0.0.0/8` or `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ADDR/PREFIX`; a bare address means that one address.
    pub fn parse(text: &str) -> Result<Self> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| anyhow!("{text:?} is not an IP address or CIDR range"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| anyhow!("{text:?}: the prefix length must be 0..={max}"))?,
        };
        Ok(Cidr { addr, prefix })
    }

    /// Whether `ip` is in the range; an IPv4-mapped IPv6 address counts as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(u32::from(net).into(), u32::from(ip).into(), 32, self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(u128::from(net), u128::from(ip), 128, self.prefix)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn prefix_eq(a: u128, b: u128, bits: u32, prefix: u8) -> bool {
    if prefix == 0 {
        return true;
    }
    let shift = bits - u32::from(prefix);
    (a >> shift) == (b >> shift)
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is the IPv4 address: the kernel connects
/// to `a.b.c.d`, so it must be judged as such.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Why an address is refused by default, or `None` for ordinary public unicast.
pub fn blocked_reason(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    let in_range = |net: [u8; 4], prefix: u8| {
        prefix_eq(
            u32::from(Ipv4Addr::from(net)).into(),
            u32::from(ip).into(),
            32,
            prefix,
        )
    };
    if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
        return Some("a cloud metadata service");
    }
    let reason = if ip.is_unspecified() || o[0] == 0 {
        "unspecified (0.0.0.0/8)"
    } else if ip.is_loopback() {
        "loopback (127.0.0.0/8)"
    } else if ip.is_private() {
        "private (RFC 1918)"
    } else if ip.is_link_local() {
        "link-local (169.254.0.0/16)"
    } else if in_range([100, 64, 0, 0], 10) {
        "shared carrier-grade NAT space (100.64.0.0/10)"
    } else if in_range([192, 0, 0, 0], 24) {
        "IETF protocol assignments (192.0.0.0/24)"
    } else if in_range([192, 0, 2, 0], 24)
        || in_range([198, 51, 100, 0], 24)
        || in_range([203, 0, 113, 0], 24)
    {
        "documentation-only"
    } else if in_range([198, 18, 0, 0], 15) {
        "benchmarking (198.18.0.0/15)"
    } else if ip.is_broadcast() {
        "broadcast"
    } else if ip.is_multicast() {
        "multicast"
    } else if o[0] >= 240 {
        "reserved (240.0.0.0/4)"
    } else {
        return None;
    };
    Some(reason)
}

fn blocked_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let seg = ip.segments();
    let bits = u128::from(ip);
    let in_range = |net: u128, prefix: u8| prefix_eq(net, bits, 128, prefix);
    // Forms that carry an IPv4 address inside: judge the IPv4 address.
    let embedded_v4 = |low32: u32| blocked_v4(Ipv4Addr::from(low32));
    if ip == AWS_METADATA_V6 {
        return Some("a cloud metadata service");
    }
    let reason = if ip.is_unspecified() {
        "unspecified (::)"
    } else if ip.is_loopback() {
        "loopback (::1)"
    } else if in_range(0, 96) {
        // IPv4-compatible (::a.b.c.d), deprecated; refuse what its IPv4 part would reach.
        return embedded_v4(bits as u32).or(Some("IPv4-compatible IPv6 (::/96)"));
    } else if in_range(0x0064_ff9b_u128 << 96, 96) {
        // NAT64: the gateway connects to the embedded IPv4 address.
        return embedded_v4(bits as u32);
    } else if in_range(0x0064_ff9b_0001_u128 << 80, 48) {
        "local-use NAT64 (64:ff9b:1::/48)"
    } else if in_range(0x2002_u128 << 112, 16) {
        // 6to4: the IPv4 address sits in bits 16..48.
        return embedded_v4(((bits >> 80) & 0xffff_ffff) as u32);
    } else if in_range(0x2001_0000_u128 << 96, 32) {
        "Teredo tunnelling (2001::/32)"
    } else if in_range(0x2001_0db8_u128 << 96, 32) {
        "documentation-only (2001:db8::/32)"
    } else if in_range(0x0100_u128 << 112, 64) {
        "discard-only (100::/64)"
    } else if (seg[0] & 0xfe00) == 0xfc00 {
        "unique local (fc00::/7)"
    } else if (seg[0] & 0xffc0) == 0xfe80 {
        "link-local (fe80::/10)"
    } else if (seg[0] & 0xffc0) == 0xfec0 {
        "site-local (fec0::/10)"
    } else if ip.is_multicast() {
        "multicast (ff00::/8)"
    } else {
        return None;
    };
    Some(reason)
}

/// What the configuration allows beyond public addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardPolicy {
    /// Exact host names or IP literals (lower case, no trailing dot, IPv6 without brackets).
    pub allow_hosts: Vec<String>,
    /// Address ranges let through even though they are not public.
    pub allow_ranges: Vec<Cidr>,
}

impl GuardPolicy {
    fn host_allowed(&self, host: &str) -> bool {
        let host = normalize_host(host);
        self.allow_hosts.contains(&host)
    }

    /// Whether the guard lets a connection to `ip` through, and if not, why.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), &'static str> {
        if self.allow_ranges.iter().any(|r| r.contains(ip)) {
            return Ok(());
        }
        match blocked_reason(ip) {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }

    /// The checks that need no DNS: the scheme, IP-literal hosts and metadata host names.
    /// Names are checked again after resolution by [`GuardedResolver`].
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        let refuse = |why: String| Refused {
            url: url.to_string(),
            why,
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refuse(format!(
                "the scheme {:?} is not allowed (only http and https)",
                url.scheme()
            )));
        }
        let Some(host) = url.host() else {
            return Err(refuse("the URL has no host".into()));
        };
        let shown = url.host_str().unwrap_or_default();
        if self.host_allowed(shown) {
            return Ok(());
        }
        let ip = match host {
            Host::Ipv4(v4) => IpAddr::V4(v4),
            Host::Ipv6(v6) => IpAddr::V6(v6),
            Host::Domain(name) => {
                let name = normalize_host(name);
                if METADATA_HOSTS.contains(&name.as_str()) {
                    return Err(refuse(format!(
                        "{name} is a cloud metadata service host name"
                    )));
                }
                return Ok(());
            }
        };
        self.check_ip(ip)
            .map_err(|reason| refuse(format!("{ip} is {reason}")))
    }

    /// Keeps the resolved addresses the guard allows; an error when none is left.
    pub fn filter_resolved(
        &self,
        host: &str,
        addrs: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, Refused> {
        let all: Vec<SocketAddr> = addrs.into_iter().collect();
        if self.host_allowed(host) {
            return Ok(all);
        }
        let mut kept = Vec::new();
        let mut refused = Vec::new();
        for addr in &all {
            match self.check_ip(addr.ip()) {
                Ok(()) => kept.push(*addr),
                Err(reason) => refused.push(format!("{} ({reason})", addr.ip())),
            }
        }
        if kept.is_empty() {
            let why = if refused.is_empty() {
                format!("{host} did not resolve to any address")
            } else {
                format!("{host} resolves to {}", refused.join(", "))
            };
            return Err(Refused {
                url: host.to_string(),
                why,
            });
        }
        Ok(kept)
    }
}

/// Lower case, without the brackets of an IPv6 literal or a trailing dot: the form
/// `allow_hosts` entries are compared in.
pub fn normalize_host(host: &str) -> String {
    host.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// A request the guard refused. It travels through reqwest's error chain as the source of
/// the resolver or redirect error, so the tool can find it and say exactly what happened.
#[derive(Debug, Clone)]
pub struct Refused {
    /// The URL (or host) that was refused.
    pub url: String,
    /// What is wrong with it, e.g. `127.0.0.1 is loopback (127.0.0.0/8)`.
    pub why: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "refused to fetch {}: {}. web_fetch does not connect to private, loopback, \
             link-local, metadata or other non-public addresses; an operator can allow a host \
             or range with [web] allow_hosts / allow_ranges in toolbox.toml",
            self.url, self.why
        )
    }
}

impl std::error::Error for Refused {}

/// A reqwest DNS resolver that drops refused addresses from every answer.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    /// What every resolved address is checked against.
    pub policy: Arc<GuardPolicy>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            if METADATA_HOSTS.contains(&normalize_host(&host).as_str())
                && !policy.host_allowed(&host)
            {
                return Err(Box::new(Refused {
                    url: host.clone(),
                    why: format!("{host} is a cloud metadata service host name"),
                })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            // Port 0: reqwest puts the URL's port in afterwards.
            let resolved = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| {
                    Box::new(std::io::Error::new(
                        e.kind(),
                        format!("cannot resolve {host}: {e}"),
                    )) as Box<dyn std::error::Error + Send + Sync>
                })?;
            let kept = policy
                .filter_resolved(&host, resolved)
                .map_err(|r| Box::new(r) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Follows at most `max` redirects, checking each new URL like the first.
pub fn redirect_policy(policy: Arc<GuardPolicy>, max: usize) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        // `previous` starts with the original URL, so its length is the hop count so far.
        if attempt.previous().len() > max {
            let msg = format!(
                "stopped after {max} redirects (the limit, [web] max_redirects); the last \
                 location was {}",
                attempt.url()
            );
            return attempt.error(TooManyRedirects(msg));
        }
        match policy.check_url(attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(refused) => {
                let refused = Refused {
                    why: format!("{} (reached through a redirect)", refused.why),
                    ..refused
                };
                attempt.error(refused)
            }
        }
    })
}

/// A redirect chain longer than `[web] max_redirects`; the message names the last location.
#[derive(Debug)]
pub struct TooManyRedirects(pub String);

impl fmt::Display for TooManyRedirects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TooManyRedirects {}

/// Parses `[web] allow_ranges` entries.
pub fn parse_ranges(entries: &[String]) -> Result<Vec<Cidr>> {
    entries
        .iter()
        .map(|e| Cidr::parse(e).map_err(|err| anyhow!("[web] allow_ranges: {err}")))
        .collect()
}

/// Parses `[web] allow_hosts` entries (names or IP literals; no schemes, ports or paths).
pub fn parse_hosts(entries: &[String]) -> Result<Vec<String>> {
    entries
        .iter()
        .map(|e| {
            let h = normalize_host(e);
            if h.is_empty() || h.contains(['/', '@', ' ']) || (h.contains(':') && h.parse::<Ipv6Addr>().is_err()) {
                bail!("[web] allow_hosts: {e:?} is not a host name or IP address (give just the host, without scheme, port or path)");
            }
            Ok(h)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn non_public_addresses_are_blocked() {
        for a in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "192.0.0.192",
            "198.18.0.1",
            "::",
            "::1",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "2001:db8::1",
            "2001::1",
        ] {
            assert!(blocked_reason(ip(a)).is_some(), "{a} should be blocked");
        }
        assert_eq!(
            blocked_reason(ip("169.254.169.254")),
            Some("a cloud metadata service")
        );
        assert_eq!(
            blocked_reason(ip("::ffff:127.0.0.1")),
            Some("loopback (127.0.0.0/8)")
        );
    }

    #[test]
    fn public_addresses_pass() {
        for a in [
            "93.184.216.34",
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::",
        ] {
            assert_eq!(blocked_reason(ip(a)), None, "{a} should pass");
        }
    }

    #[test]
    fn cidr_parsing_and_matching() {
        let r = Cidr::parse("127.0.0.0/8").unwrap();
        assert!(r.contains(ip("127.1.2.3")));
        assert!(r.contains(ip("::ffff:127.0.0.1")));
        assert!(!r.contains(ip("128.0.0.1")));
        let r = Cidr::parse("fd00::/8").unwrap();
        assert!(r.contains(ip("fd12::1")));
        assert!(!r.contains(ip("fe80::1")));
        assert!(Cidr::parse("10.0.0.1").unwrap().contains(ip("10.0.0.1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("1.2.3.4")));
        for bad in ["10.0.0.0/33", "x/8", "10.0.0.0/", "::/129"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn url_checks() {
        let p = GuardPolicy::default();
        let u = |s: &str| Url::parse(s).unwrap();
        assert!(p.check_url(&u("https://example.com/")).is_ok());
        for bad in [
            "http://127.0.0.1/",
            "http://[::1]:8080/",
            "http://[::ffff:7f00:1]/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://metadata.google.internal/",
            "http://METADATA.google.internal./",
            "file:///etc/passwd",
            "ftp://example.com/",
        ] {
            let e = p.check_url(&u(bad));
            assert!(e.is_err(), "{bad} should be refused");
        }
        let allowed = GuardPolicy {
            allow_hosts: vec!["127.0.0.1".into(), "::1".into()],
            allow_ranges: vec![Cidr::parse("10.0.0.0/8").unwrap()],
        };
        assert!(allowed.check_url(&u("http://127.0.0.1:9/")).is_ok());
        assert!(allowed.check_url(&u("http://[::1]:9/")).is_ok());
        assert!(allowed.check_url(&u("http://10.2.3.4/")).is_ok());
        assert!(allowed.check_url(&u("http://127.0.0.2/")).is_err());
    }

    #[test]
    fn resolved_addresses_are_filtered() {
        let p = GuardPolicy::default();
        let sa = |s: &str| SocketAddr::new(ip(s), 0);
        // A name with a public and a private address keeps only the public one.
        let kept = p
            .filter_resolved("mixed.test", [sa("10.0.0.1"), sa("93.184.216.34")])
            .unwrap();
        assert_eq!(kept, vec![sa("93.184.216.34")]);
        // A name that resolves only to refused addresses is refused, naming them.
        let e = p
            .filter_resolved("evil.test", [sa("127.0.0.1"), sa("::1")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("evil.test resolves to 127.0.0.1 (loopback"),
            "{e}"
        );
        // An allowed name keeps everything; an allowed range keeps its addresses.
        let p = GuardPolicy {
            allow_hosts: vec!["intranet.test".into()],
            allow_ranges: vec![Cidr::parse("127.0.0.0/8").unwrap()],
        };
        assert_eq!(
            p.filter_resolved("INTRANET.test.", [sa("10.0.0.1")])
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            p.filter_resolved("x.test", [sa("127.0.0.5"), sa("10.0.0.1")])
                .unwrap(),
            vec![sa("127.0.0.5")]
        );
    }

    #[test]
    fn host_entries_are_checked() {
        assert_eq!(
            parse_hosts(&["LocalHost.".into(), "[::1]".into()]).unwrap(),
            vec!["localhost".to_string(), "::1".to_string()]
        );
        assert!(parse_hosts(&["http://x".into()]).is_err());
        assert!(parse_hosts(&["x:80".into()]).is_err());
        assert!(parse_ranges(&["nope".into()]).is_err());
    }
}
