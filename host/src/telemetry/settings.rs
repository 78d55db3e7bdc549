//! [`Settings`]: where and how spans and metrics are exported, from the standard
//! `OTEL_*` variables over the operator's `[otel]` table. Parsed once; every bad value is an
//! error naming the key or variable and what was wrong.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};

/// How OTLP is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`, the default; port 4318).
    HttpProtobuf,
    /// OTLP/gRPC (`grpc`; port 4317).
    Grpc,
}

impl Protocol {
    fn parse(raw: &str, from: &str) -> Result<Self> {
        match raw.trim() {
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "grpc" => Ok(Protocol::Grpc),
            "http/json" => {
                bail!("{from} = \"http/json\" is not supported: use \"http/protobuf\" or \"grpc\"")
            }
            other => bail!("{from} = {other:?}: expected \"http/protobuf\" or \"grpc\""),
        }
    }

    /// The name OTLP gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::Grpc => "grpc",
        }
    }
}

/// Which traces are kept: always, never, or a share of new traces; a call whose caller sent
/// a `traceparent` follows the caller's decision unless `parent_based` is off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// The share of new traces kept, 0 to 1.
    pub ratio: f64,
    /// Follow the sampled flag of an incoming parent.
    pub parent_based: bool,
}

/// Everything the exporter is set up from.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Where spans go (the full URL of the traces endpoint for OTLP/HTTP).
    pub traces_endpoint: String,
    /// Where metrics go; `None` when metrics are off (`OTEL_METRICS_EXPORTER=none`).
    pub metrics_endpoint: Option<String>,
    /// OTLP/HTTP or gRPC.
    pub protocol: Protocol,
    /// Headers (or gRPC metadata) sent with every export: an API key, a project name.
    pub headers: BTreeMap<String, String>,
    /// How long one export may take before it counts as failed.
    pub timeout: Duration,
    /// Which traces are kept.
    pub sampling: Sampling,
    /// `service.name` when `OTEL_SERVICE_NAME` does not say.
    pub service_name: String,
    /// The most spans waiting for export; more are dropped and counted.
    pub queue_size: usize,
    /// How often queued spans are sent.
    pub schedule_delay: Duration,
    /// How often metrics are sent.
    pub metrics_interval: Duration,
    /// Record tool arguments and results (cut and with secrets redacted).
    pub record_content: bool,
    /// The most characters of an argument or result recorded.
    pub content_max_chars: usize,
}

/// The default OTLP/HTTP endpoint (a collector on this machine).
pub const DEFAULT_HTTP_ENDPOINT: &str = "http://localhost:4318";
/// The default OTLP/gRPC endpoint.
pub const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";
/// The longest a single export may take unless configured (OTLP's own default is 10 s; a
/// dead collector should not hold an exit that long).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Spans waiting for export at most, unless configured (OTel's own default).
pub const DEFAULT_QUEUE_SIZE: usize = 2048;
/// The largest queue accepted: a bound on memory however it is configured.
pub const MAX_QUEUE_SIZE: usize = 1 << 20;
/// Characters of an argument or result recorded when content is recorded.
pub const DEFAULT_CONTENT_MAX_CHARS: usize = 2048;

/// The keys `[otel]` takes.
const KEYS: &[&str] = &[
    "enabled",
    "endpoint",
    "traces_endpoint",
    "metrics_endpoint",
    "protocol",
    "headers",
    "timeout_ms",
    "sampling",
    "parent_based",
    "service_name",
    "queue_size",
    "schedule_delay_ms",
    "metrics",
    "metrics_interval_ms",
    "record_content",
    "content_max_chars",
];

impl Settings {
    /// The settings from `env` (the process's variables; header variables are read through
    /// [`crate::secrets::var`] by the caller and passed in `env` too) over the operator's
    /// `[otel]` table. `Ok(None)` means export is off: nothing asked for it, or
    /// `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none` or `enabled = false` said so.
    pub fn resolve(
        env: &dyn Fn(&str) -> Option<String>,
        table: Option<&toml::Table>,
    ) -> Result<Option<Settings>> {
        let empty = toml::Table::new();
        let table = table.unwrap_or(&empty);
        if let Some(key) = table.keys().find(|k| !KEYS.contains(&k.as_str())) {
            bail!(
                "[otel] has no key {key:?}; the keys are {}",
                KEYS.join(", ")
            );
        }
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if let Some(v) = var("OTEL_SDK_DISABLED") {
            if parse_bool(&v, "OTEL_SDK_DISABLED")? {
                return Ok(None);
            }
        }
        let traces_exporter = var("OTEL_TRACES_EXPORTER");
        match traces_exporter.as_deref().map(str::trim) {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => {
                bail!("OTEL_TRACES_EXPORTER = {other:?}: toolbox exports \"otlp\" (or \"none\")")
            }
        }
        let env_endpoint = var("OTEL_EXPORTER_OTLP_ENDPOINT");
        let env_traces_endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let asked_by_env =
            traces_exporter.is_some() || env_endpoint.is_some() || env_traces_endpoint.is_some();
        let enabled = match table.get("enabled") {
            Some(v) => v
                .as_bool()
                .ok_or_else(|| anyhow!("[otel] enabled must be true or false, not {v}"))?,
            None => table.contains_key("endpoint") || table.contains_key("traces_endpoint"),
        };
        // `enabled = false` is the operator's word: only an explicit exporter choice in the
        // environment overrides it.
        let explicitly_off = table.get("enabled").and_then(toml::Value::as_bool) == Some(false);
        if !(enabled || asked_by_env) || (explicitly_off && traces_exporter.is_none()) {
            return Ok(None);
        }

        let protocol = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .map(|v| (v, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
            .or_else(|| {
                var("OTEL_EXPORTER_OTLP_PROTOCOL").map(|v| (v, "OTEL_EXPORTER_OTLP_PROTOCOL"))
            }) {
            Some((v, from)) => Protocol::parse(&v, from)?,
            None => match table_str(table, "protocol")? {
                Some(v) => Protocol::parse(&v, "[otel] protocol")?,
                None => Protocol::HttpProtobuf,
            },
        };

        let base = env_endpoint
            .map(|v| (v, "OTEL_EXPORTER_OTLP_ENDPOINT"))
            .or(table_str(table, "endpoint")?.map(|v| (v, "[otel] endpoint")));
        let signal = |name: &str, key: &str, path: &str| -> Result<String> {
            if let Some(v) = var(name) {
                return check_url(&v, name);
            }
            if let Some(v) = table_str(table, key)? {
                return check_url(&v, &format!("[otel] {key}"));
            }
            let (base, from) = match &base {
                Some((b, from)) => (b.clone(), *from),
                None => match protocol {
                    Protocol::HttpProtobuf => (DEFAULT_HTTP_ENDPOINT.to_string(), "the default"),
                    Protocol::Grpc => (DEFAULT_GRPC_ENDPOINT.to_string(), "the default"),
                },
            };
            let base = check_url(&base, from)?;
            Ok(match protocol {
                // The base gets the signal's path, as OTLP/HTTP's exporters do.
                Protocol::HttpProtobuf => format!("{}/{path}", base.trim_end_matches('/')),
                Protocol::Grpc => base,
            })
        };
        let traces_endpoint = signal(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "traces_endpoint",
            "v1/traces",
        )?;
        let metrics_on = match var("OTEL_METRICS_EXPORTER").as_deref().map(str::trim) {
            Some("none") => false,
            Some("otlp") => true,
            Some(other) => {
                bail!("OTEL_METRICS_EXPORTER = {other:?}: toolbox exports \"otlp\" (or \"none\")")
            }
            None => match table.get("metrics") {
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| anyhow!("[otel] metrics must be true or false, not {v}"))?,
                None => true,
            },
        };
        let metrics_endpoint = if metrics_on {
            Some(signal(
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "metrics_endpoint",
                "v1/metrics",
            )?)
        } else {
            None
        };

        let mut headers = BTreeMap::new();
        if let Some(v) = table.get("headers") {
            let t = v.as_table().ok_or_else(|| {
                anyhow!("[otel] headers must be a table of names to values, e.g. headers = {{ \"x-api-key\" = \"…\" }}")
            })?;
            for (name, value) in t {
                let value = value.as_str().ok_or_else(|| {
                    anyhow!("[otel] headers.{name} must be a string, not {value}")
                })?;
                insert_header(&mut headers, name, value, "[otel] headers")?;
            }
        }
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            if let Some(v) = var(name) {
                for pair in v.split(',').filter(|p| !p.trim().is_empty()) {
                    let (k, val) = pair
                        .split_once('=')
                        .ok_or_else(|| anyhow!("{name}: {:?} is not name=value", shorten(pair)))?;
                    let val = percent_decode(val.trim()).ok_or_else(|| {
                        anyhow!("{name}: the value of {:?} has a bad %-escape", k.trim())
                    })?;
                    insert_header(&mut headers, k.trim(), &val, name)?;
                }
            }
        }

        let timeout = match var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .map(|v| (v, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"))
            .or_else(|| {
                var("OTEL_EXPORTER_OTLP_TIMEOUT").map(|v| (v, "OTEL_EXPORTER_OTLP_TIMEOUT"))
            }) {
            Some((v, from)) => millis(&v, from, 1, 600_000)?,
            None => table_millis(table, "timeout_ms", 1, 600_000)?.unwrap_or(DEFAULT_TIMEOUT),
        };

        let sampling = sampling(&var, table)?;
        let service_name = match var("OTEL_SERVICE_NAME") {
            Some(name) => name.trim().to_string(),
            None => table_str(table, "service_name")?.unwrap_or_else(|| "toolbox".into()),
        };
        let queue_size = match var("OTEL_BSP_MAX_QUEUE_SIZE") {
            Some(v) => count(&v, "OTEL_BSP_MAX_QUEUE_SIZE", MAX_QUEUE_SIZE)?,
            None => match table.get("queue_size") {
                Some(v) => count(&v.to_string(), "[otel] queue_size", MAX_QUEUE_SIZE)?,
                None => DEFAULT_QUEUE_SIZE,
            },
        };
        let schedule_delay = match var("OTEL_BSP_SCHEDULE_DELAY") {
            Some(v) => millis(&v, "OTEL_BSP_SCHEDULE_DELAY", 1, 3_600_000)?,
            None => table_millis(table, "schedule_delay_ms", 1, 3_600_000)?
                .unwrap_or(Duration::from_secs(1)),
        };
        let metrics_interval = match var("OTEL_METRIC_EXPORT_INTERVAL") {
            Some(v) => millis(&v, "OTEL_METRIC_EXPORT_INTERVAL", 100, 86_400_000)?,
            None => table_millis(table, "metrics_interval_ms", 100, 86_400_000)?
                .unwrap_or(Duration::from_secs(60)),
        };
        let record_content = match table.get("record_content") {
            Some(v) => v
                .as_bool()
                .ok_or_else(|| anyhow!("[otel] record_content must be true or false, not {v}"))?,
            None => false,
        };
        let content_max_chars = match table.get("content_max_chars") {
            Some(v) => count(&v.to_string(), "[otel] content_max_chars", 1 << 20)?,
            None => DEFAULT_CONTENT_MAX_CHARS,
        };
        Ok(Some(Settings {
            traces_endpoint,
            metrics_endpoint,
            protocol,
            headers,
            timeout,
            sampling,
            service_name,
            queue_size,
            schedule_delay,
            metrics_interval,
            record_content,
            content_max_chars,
        }))
    }
}

fn sampling(var: &dyn Fn(&str) -> Option<String>, table: &toml::Table) -> Result<Sampling> {
    let arg = || -> Result<f64> {
        match var("OTEL_TRACES_SAMPLER_ARG") {
            Some(v) => ratio(&v, "OTEL_TRACES_SAMPLER_ARG"),
            None => Ok(1.0),
        }
    };
    if let Some(v) = var("OTEL_TRACES_SAMPLER") {
        let (parent_based, ratio) = match v.trim() {
            "always_on" => (false, 1.0),
            "always_off" => (false, 0.0),
            "traceidratio" => (false, arg()?),
            "parentbased_always_on" => (true, 1.0),
            "parentbased_always_off" => (true, 0.0),
            "parentbased_traceidratio" => (true, arg()?),
            other => bail!("OTEL_TRACES_SAMPLER = {other:?}: expected always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"),
        };
        return Ok(Sampling {
            ratio,
            parent_based,
        });
    }
    let ratio = match table.get("sampling") {
        Some(toml::Value::Float(f)) => self::ratio(&f.to_string(), "[otel] sampling")?,
        Some(toml::Value::Integer(i)) => self::ratio(&i.to_string(), "[otel] sampling")?,
        Some(other) => bail!("[otel] sampling must be a number from 0 to 1, not {other}"),
        None => 1.0,
    };
    let parent_based = match table.get("parent_based") {
        Some(v) => v
            .as_bool()
            .ok_or_else(|| anyhow!("[otel] parent_based must be true or false, not {v}"))?,
        None => true,
    };
    Ok(Sampling {
        ratio,
        parent_based,
    })
}

fn table_str(table: &toml::Table, key: &str) -> Result<Option<String>> {
    match table.get(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
        Some(other) => bail!("[otel] {key} must be a non-empty string, not {other}"),
    }
}

fn table_millis(table: &toml::Table, key: &str, min: u64, max: u64) -> Result<Option<Duration>> {
    match table.get(key) {
        None => Ok(None),
        Some(v) => millis(&v.to_string(), &format!("[otel] {key}"), min, max).map(Some),
    }
}

fn millis(raw: &str, from: &str, min: u64, max: u64) -> Result<Duration> {
    let n: u64 = raw.trim().parse().map_err(|_| {
        anyhow!(
            "{from} = {:?}: expected milliseconds, a whole number",
            shorten(raw)
        )
    })?;
    if !(min..=max).contains(&n) {
        bail!("{from} = {n}: expected {min} to {max} milliseconds");
    }
    Ok(Duration::from_millis(n))
}

fn count(raw: &str, from: &str, max: usize) -> Result<usize> {
    let n: usize = raw
        .trim()
        .parse()
        .map_err(|_| anyhow!("{from} = {:?}: expected a whole number", shorten(raw)))?;
    if !(1..=max).contains(&n) {
        bail!("{from} = {n}: expected 1 to {max}");
    }
    Ok(n)
}

fn ratio(raw: &str, from: &str) -> Result<f64> {
    let r: f64 = raw
        .trim()
        .parse()
        .map_err(|_| anyhow!("{from} = {:?}: expected a number from 0 to 1", shorten(raw)))?;
    if !(0.0..=1.0).contains(&r) {
        bail!("{from} = {r}: expected a number from 0 to 1");
    }
    Ok(r)
}

fn parse_bool(raw: &str, from: &str) -> Result<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => bail!("{from} = {:?}: expected true or false", shorten(raw)),
    }
}

/// An endpoint must be an http or https URL with a host; it is where data leaves the machine.
fn check_url(raw: &str, from: &str) -> Result<String> {
    let raw = raw.trim();
    let rest = raw
        .strip_prefix("http://")
        .or_else(|| raw.strip_prefix("https://"))
        .ok_or_else(|| {
            anyhow!(
                "{from} = {:?}: expected an http:// or https:// URL",
                shorten(raw)
            )
        })?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty()
        || host.contains('@')
        || raw.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        bail!(
            "{from} = {:?}: expected an http:// or https:// URL with a host (and no user name)",
            shorten(raw)
        );
    }
    Ok(raw.to_string())
}

fn insert_header(
    headers: &mut BTreeMap<String, String>,
    name: &str,
    value: &str,
    from: &str,
) -> Result<()> {
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        bail!("{from}: {:?} is not a header name", shorten(&name));
    }
    if value.bytes().any(|b| b.is_ascii_control()) {
        bail!("{from}: the value of {name} has a control character");
    }
    headers.insert(name, value.to_string());
    Ok(())
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn shorten(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(env: &[(&str, &str)], table: &str) -> Result<Option<Settings>> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let table: toml::Table = toml::from_str(table).unwrap();
        Settings::resolve(&lookup, Some(&table))
    }

    #[test]
    fn off_unless_something_asks() {
        assert_eq!(resolve(&[], "").unwrap(), None);
        assert_eq!(
            resolve(
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_SDK_DISABLED", "true")
                ],
                ""
            )
            .unwrap(),
            None
        );
        assert_eq!(
            resolve(
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")],
                "enabled = false"
            )
            .unwrap(),
            None
        );
        assert_eq!(
            resolve(
                &[("OTEL_TRACES_EXPORTER", "none")],
                "endpoint = \"http://c:4318\""
            )
            .unwrap(),
            None
        );
    }

    #[test]
    fn the_environment_wins_over_the_table_and_paths_are_added_to_a_base() {
        let s = resolve(
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318/")],
            "endpoint = \"http://table:4318\"\nheaders = { \"X-Project\" = \"p\" }",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.traces_endpoint, "http://env:4318/v1/traces");
        assert_eq!(
            s.metrics_endpoint.as_deref(),
            Some("http://env:4318/v1/metrics")
        );
        assert_eq!(s.headers.get("x-project").map(String::as_str), Some("p"));
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        let s = resolve(
            &[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "authorization=Basic%20abc,x-a=b",
                ),
                ("OTEL_METRICS_EXPORTER", "none"),
            ],
            "",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.traces_endpoint, "http://t:1/custom");
        assert_eq!(s.metrics_endpoint, None);
        assert_eq!(s.headers["authorization"], "Basic abc");
        let s = resolve(
            &[],
            "endpoint = \"http://g:4317\"\nprotocol = \"grpc\"\nsampling = 0.25",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.protocol, Protocol::Grpc);
        assert_eq!(s.traces_endpoint, "http://g:4317");
        assert_eq!(
            s.sampling,
            Sampling {
                ratio: 0.25,
                parent_based: true
            }
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        for (env, table, want) in [
            (vec![], "endpoint = \"ftp://x\"", "[otel] endpoint"),
            (vec![], "endpoint = \"http://u@x\"", "no user name"),
            (
                vec![],
                "enabled = true\nprotocol = \"http/json\"",
                "not supported",
            ),
            (vec![], "enabled = true\nsampling = 2", "0 to 1"),
            (vec![], "enabled = true\nqueue_size = 0", "queue_size"),
            (
                vec![],
                "enabled = true\nendpont = \"x\"",
                "no key \"endpont\"",
            ),
            (
                vec![("OTEL_TRACES_EXPORTER", "jaeger")],
                "",
                "OTEL_TRACES_EXPORTER",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"),
                    ("OTEL_EXPORTER_OTLP_HEADERS", "novalue"),
                ],
                "",
                "name=value",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"),
                    ("OTEL_TRACES_SAMPLER", "sometimes"),
                ],
                "",
                "OTEL_TRACES_SAMPLER",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"),
                    ("OTEL_EXPORTER_OTLP_TIMEOUT", "5s"),
                ],
                "",
                "milliseconds",
            ),
        ] {
            let err = resolve(&env, table).unwrap_err().to_string();
            assert!(err.contains(want), "{table} {env:?}: {err}");
        }
    }
}
