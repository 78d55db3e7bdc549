//! toolbox-image-gen is the `image_gen` provider: one tool that makes pictures.
//!
//! | tool | risk | what it does |
//! |---|---|---|
//! | `image_gen__generate` | file_write | ask an OpenAI-compatible images endpoint for 1–4 PNGs and save them in the session's `output/` folder |
//!
//! The tool is in the `images` toolset. It POSTs `{base_url}/images/generations` with
//! `{model, prompt, n, size, response_format: "b64_json"}` and a Bearer key, checks that each
//! image really is a PNG, and writes it under a fresh name in
//! [`Workspace::output_dir`](toolbox_core::Workspace::output_dir), returning the paths as the
//! model sees them (`output/image-….png`). The endpoint is configured by the operator, never
//! by the model, so it is not subject to an address guard (a local server works).
//!
//! Configuration, first match wins (see docs/providers/image_gen.md):
//! - base URL: `[image_gen] base_url`, `TOOLBOX_IMAGE_BASE_URL`, `OPENAI_BASE_URL`, and
//!   `https://api.openai.com/v1` only when an API key is set;
//! - model: `[image_gen] model`, `TOOLBOX_IMAGE_MODEL`, else `gpt-image-1`;
//! - key: the environment variable named by `[image_gen] api_key_env` (default `OPENAI_API_KEY`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use async_trait::async_trait;
use base64::Engine as _;
use serde_json::{json, Value};
use toolbox_core::{Args, ConfigTable, ParsedCache, ToolContext, ToolInfo, ToolProvider, ToolRisk};

toolbox_core::register_provider!("image_gen", || std::sync::Arc::new(ImageGen::default()));

pub const NAME: &str = "image_gen__generate";
const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";
const DEFAULT_MODEL: &str = "gpt-image-1";
const DEFAULT_SIZE: &str = "1024x1024";
const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
const DEFAULT_KEY_ENV: &str = "OPENAI_API_KEY";
/// Image models take a while; a minute is common for large images.
const DEFAULT_TIMEOUT_MS: u64 = 180_000;
/// Four base64 PNGs at 1024² are ~10–20 MB; the cap only stops a runaway response.
const DEFAULT_MAX_RESPONSE_BYTES: u64 = 100 * 1024 * 1024;
// An untrusted workspace's toolbox.toml may only shorten [image_gen] limits; the endpoint,
// model and key variable are the operator's alone (a repository must not be able to send a
// key to a server of its choosing).
toolbox_core::workspace_config_rules!(
    "image_gen",
    [
        (
            "timeout_ms",
            toolbox_core::trust::Tighten::AtMost(DEFAULT_TIMEOUT_MS)
        ),
        (
            "max_response_bytes",
            toolbox_core::trust::Tighten::AtMost(DEFAULT_MAX_RESPONSE_BYTES)
        ),
    ]
);

const KEYS: &[&str] = &[
    "base_url",
    "model",
    "api_key_env",
    "timeout_ms",
    "max_response_bytes",
];

/// What to tell a model (and through it, a person) when no endpoint is configured.
const NOT_CONFIGURED: &str = "image_gen__generate has no image endpoint configured. Set one in \
toolbox.toml:\n  [image_gen]\n  base_url = \"https://api.openai.com/v1\"   # any OpenAI-compatible server\n  model = \"gpt-image-1\"\n  api_key_env = \"OPENAI_API_KEY\"   # the environment variable holding the key\n\
or set the environment variables TOOLBOX_IMAGE_BASE_URL (or OPENAI_BASE_URL) and OPENAI_API_KEY \
(setting only OPENAI_API_KEY uses https://api.openai.com/v1).";

/// The `image_gen` provider. It keeps one HTTP client (and its connection pool) per
/// configuration.
#[derive(Default)]
pub struct ImageGen {
    client: ParsedCache<reqwest::Client>,
}

/// The resolved configuration of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    base_url: String,
    model: String,
    key: Option<String>,
    key_env: String,
    timeout: Duration,
    max_response_bytes: u64,
}

#[async_trait]
impl ToolProvider for ImageGen {
    fn name(&self) -> &str {
        "image_gen"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        vec![ToolInfo::new(
            NAME,
            "Generate images from a text prompt with the configured image model and save them \
             as PNG files in the session's output folder. Returns the saved paths (e.g. \
             output/image-….png). Describe the subject, style and composition in the prompt.",
            json!({
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "What the image should show."},
                    "size": {"type": "string", "description": "WIDTHxHEIGHT in pixels, e.g. \"1024x1024\" (default), \"1536x1024\", \"1024x1536\". The model decides which sizes it supports."},
                    "n": {"type": "integer", "minimum": 1, "maximum": 4, "description": "How many images (1-4, default 1)."}
                },
                "required": ["prompt"],
                "additionalProperties": false
            }),
        )
        .risk(ToolRisk::FileWrite)
        .toolsets(&["images"])]
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<Value> {
        match tool {
            NAME => self.generate(args, ctx).await,
            other => Err(anyhow!("image_gen has no tool named {other}")),
        }
    }
}

impl ImageGen {
    async fn generate(&self, args: Value, ctx: &ToolContext) -> Result<Value> {
        let args = Args::new(NAME, &args)?;
        args.reject_unknown(&["prompt", "size", "n"])?;
        let prompt = args.str("prompt", &["description"])?.trim().to_string();
        if prompt.is_empty() {
            bail!("{NAME}: argument `prompt` is empty");
        }
        let size = args.opt_str("size", &[])?.unwrap_or(DEFAULT_SIZE).trim();
        check_size(size)?;
        let n = args.u64_in("n", &[], 1, 1, 4)?;

        let table = ctx.provider_config("image_gen");
        let endpoint = endpoint(table, |var| std::env::var(var).ok())?;
        let client = self.client(table, &endpoint)?;

        let mut body = json!({"model": endpoint.model, "prompt": prompt, "n": n, "size": size});
        // gpt-image models always answer in base64 and reject the parameter; every other
        // OpenAI-compatible model needs it to send the image bytes instead of a URL.
        if !endpoint.model.starts_with("gpt-image") {
            body["response_format"] = json!("b64_json");
        }
        let url = format!(
            "{}/images/generations",
            endpoint.base_url.trim_end_matches('/')
        );
        let mut request = client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(key) = &endpoint.key {
            request = request.bearer_auth(key);
        }
        ctx.emit_progress(format!("asking {url} for {n} image(s) of {size}"));
        let mut response = tokio::select! {
            r = request.send() => r.map_err(|e| anyhow!("{NAME}: the request to {url} failed: {}", describe(&e, &endpoint)))?,
            _ = ctx.cancel.cancelled() => bail!("{NAME}: cancelled"),
        };
        let status = response.status();
        let bytes = read_capped(&mut response, endpoint.max_response_bytes, ctx)
            .await
            .map_err(|e| anyhow!("{NAME}: reading the answer from {url} failed: {e}"))?;
        let text = String::from_utf8_lossy(&bytes);
        if !status.is_success() {
            let hint = match status.as_u16() {
                401 | 403 => format!(
                    " (check the API key in the environment variable {})",
                    endpoint.key_env
                ),
                404 => " (is base_url right? it should end before /images/generations, e.g. https://api.openai.com/v1)".to_string(),
                _ => String::new(),
            };
            bail!(
                "{NAME}: the images endpoint answered HTTP {status}{}{hint}",
                api_message(&text)
            );
        }
        let answer: Value = serde_json::from_str(&text).map_err(|e| {
            anyhow!(
                "{NAME}: the images endpoint did not answer with JSON ({e}); it began: {:?}",
                text.chars().take(200).collect::<String>()
            )
        })?;
        let images = decode_images(&answer)?;
        let revised: Vec<String> = answer["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["revised_prompt"].as_str().map(str::to_string))
            .collect();

        let dir = ctx
            .workspace
            .output_dir()
            .map_err(|e| anyhow!("{NAME}: cannot create the output folder: {e}"))?;
        let call_id = toolbox_core::safe_file_part(&ctx.call_id);
        let saved = tokio::task::spawn_blocking(move || save_all(&dir, &call_id, &images))
            .await
            .map_err(|e| anyhow!("{NAME}: saving the images stopped unexpectedly: {e}"))??;

        let shown: Vec<String> = saved.iter().map(|p| ctx.workspace.display(p)).collect();
        let mut out = format!(
            "Saved {} image{} ({size}, model {}):\n",
            shown.len(),
            if shown.len() == 1 { "" } else { "s" },
            endpoint.model
        );
        for path in &shown {
            out.push_str(path);
            out.push('\n');
        }
        if (shown.len() as u64) < n {
            out.push_str(&format!(
                "Note: {n} were asked for; the endpoint returned {}.\n",
                shown.len()
            ));
        }
        if let Some(r) = revised.first() {
            out.push_str(&format!("Revised prompt: {r}\n"));
        }
        Ok(Value::String(out.trim_end().to_string()))
    }

    /// The HTTP client for this `[image_gen]` table, built once per table.
    fn client(&self, table: Option<&Value>, endpoint: &Endpoint) -> Result<reqwest::Client> {
        let client = self.client.get_or_build(table, |_| {
            // reqwest is built with `rustls-no-provider`: install ring unless the embedding
            // program already installed a provider (then theirs is used).
            if rustls::crypto::CryptoProvider::get_default().is_none() {
                let _ = rustls::crypto::ring::default_provider().install_default();
            }
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(30).min(endpoint.timeout))
                .timeout(endpoint.timeout)
                .user_agent(concat!(
                    "toolbox/",
                    env!("CARGO_PKG_VERSION"),
                    " (image_gen)"
                ))
                // The endpoint is configured; a redirect would be a misconfiguration, and
                // following it would resend the prompt somewhere else.
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .build()
                .map_err(|e| anyhow!("{NAME}: cannot build the HTTP client: {e}"))
        })?;
        Ok((*client).clone())
    }
}

/// Reads `[image_gen]` and the environment (through `env`, so tests need not touch the
/// process environment).
fn endpoint(table: Option<&Value>, env: impl Fn(&str) -> Option<String>) -> Result<Endpoint> {
    let t = ConfigTable::new("image_gen", table, KEYS)
        .map_err(|e| anyhow!("{NAME}: invalid configuration: {e:#}"))?;
    let read = || -> Result<_> {
        // An empty string is a value not given.
        let string = |key: &str| -> Result<Option<String>> {
            Ok(t.string(key)?
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string))
        };
        let number = |key: &str, default: u64| -> Result<u64> {
            Ok(t.u64_in(key, 1, u64::MAX)?.unwrap_or(default))
        };
        Ok((
            string("base_url")?,
            string("model")?,
            string("api_key_env")?,
            number("timeout_ms", DEFAULT_TIMEOUT_MS)?,
            number("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES)?,
        ))
    };
    let (base_url, model, key_env, timeout_ms, max_response_bytes) =
        read().map_err(|e| anyhow!("{NAME}: invalid configuration: {e:#}"))?;
    let nonempty = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let key_env = key_env.unwrap_or_else(|| DEFAULT_KEY_ENV.to_string());
    let key = nonempty(env(&key_env)).map(|k| k.trim().to_string());
    let base_url = match base_url
        .or_else(|| nonempty(env("TOOLBOX_IMAGE_BASE_URL")))
        .or_else(|| nonempty(env("OPENAI_BASE_URL")))
    {
        Some(url) => url,
        None if key.is_some() => OPENAI_BASE_URL.to_string(),
        None => bail!("{NOT_CONFIGURED}"),
    };
    match reqwest::Url::parse(&base_url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => bail!("{NAME}: the image endpoint base URL {base_url:?} is not an http:// or https:// URL ([image_gen] base_url, TOOLBOX_IMAGE_BASE_URL or OPENAI_BASE_URL)"),
    }
    let model = model
        .or_else(|| nonempty(env("TOOLBOX_IMAGE_MODEL")))
        .unwrap_or_else(|| DEFAULT_MODEL.to_string());
    Ok(Endpoint {
        base_url,
        model,
        key,
        key_env,
        timeout: Duration::from_millis(timeout_ms),
        max_response_bytes,
    })
}

/// `WIDTHxHEIGHT` with each side 64..=4096, or `auto` (gpt-image models choose).
fn check_size(size: &str) -> Result<()> {
    if size == "auto" {
        return Ok(());
    }
    let ok = size
        .split_once(['x', 'X'])
        .and_then(|(w, h)| Some((w.parse::<u32>().ok()?, h.parse::<u32>().ok()?)))
        .is_some_and(|(w, h)| (64..=4096).contains(&w) && (64..=4096).contains(&h));
    if !ok {
        bail!("{NAME}: argument `size` must be WIDTHxHEIGHT with each side 64-4096, like \"1024x1024\", \"1536x1024\" or \"1024x1536\" (or \"auto\"); got {size:?}");
    }
    Ok(())
}

/// The PNG bytes of every image in an images answer, all checked before any is saved.
fn decode_images(answer: &Value) -> Result<Vec<Vec<u8>>> {
    let data = answer["data"]
        .as_array()
        .ok_or_else(|| anyhow!("{NAME}: the images endpoint's answer has no `data` list"))?;
    if data.is_empty() {
        bail!("{NAME}: the images endpoint returned no images");
    }
    data.iter()
        .enumerate()
        .map(|(i, item)| {
            let Some(b64) = item["b64_json"].as_str() else {
                if item.get("url").is_some() {
                    bail!("{NAME}: image {} came back as a URL, not as b64_json data; toolbox does not download image URLs (does this endpoint support response_format = \"b64_json\"?)", i + 1);
                }
                bail!("{NAME}: image {} in the answer has no b64_json field", i + 1);
            };
            // Some servers wrap long base64 lines.
            let compact: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(compact.as_bytes())
                .map_err(|e| anyhow!("{NAME}: image {} is not valid base64: {e}", i + 1))?;
            if !bytes.starts_with(PNG_MAGIC) {
                let start: String = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
                bail!("{NAME}: image {} is not a PNG (it starts with bytes {start}, not the PNG signature 89504e470d0a1a0a); ask the endpoint for PNG output", i + 1);
            }
            Ok(bytes)
        })
        .collect()
}

/// Writes each image under a new name `image-<unix_ms>-<call_id>-<i>.png`, never
/// overwriting an existing file.
fn save_all(dir: &Path, call_id: &str, images: &[Vec<u8>]) -> Result<Vec<PathBuf>> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let mut saved = Vec::with_capacity(images.len());
    for (i, bytes) in images.iter().enumerate() {
        let stem = format!("image-{ms}-{call_id}-{}", i + 1);
        let mut done = false;
        for attempt in 0..1000u32 {
            let name = if attempt == 0 {
                format!("{stem}.png")
            } else {
                format!("{stem}-{attempt}.png")
            };
            let path = dir.join(&name);
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut file) => {
                    file.write_all(bytes)
                        .and_then(|_| file.sync_all())
                        .map_err(|e| anyhow!("{NAME}: cannot write {name}: {e}"))?;
                    saved.push(path);
                    done = true;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => bail!("{NAME}: cannot create {name}: {e}"),
            }
        }
        if !done {
            bail!("{NAME}: cannot find a free file name for {stem}.png");
        }
    }
    Ok(saved)
}

async fn read_capped(
    response: &mut reqwest::Response,
    cap: u64,
    ctx: &ToolContext,
) -> Result<Vec<u8>> {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    loop {
        let chunk = tokio::select! {
            c = response.chunk() => c.map_err(|e| anyhow!("{e}"))?,
            _ = ctx.cancel.cancelled() => bail!("cancelled"),
        };
        let Some(chunk) = chunk else {
            return Ok(out);
        };
        if out.len() + chunk.len() > cap {
            bail!("the answer is larger than {cap} bytes ([image_gen] max_response_bytes)");
        }
        out.extend_from_slice(&chunk);
    }
}

/// The OpenAI-style `{"error": {"message": ...}}` of an error answer, else its start.
fn api_message(body: &str) -> String {
    let message = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error"))
            .or_else(|| v.get("message"))
            .or_else(|| v.get("detail"))
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    let text = message.unwrap_or_else(|| body.trim().chars().take(300).collect());
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

fn describe(err: &reqwest::Error, endpoint: &Endpoint) -> String {
    let mut out = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = e.source();
    }
    if err.is_timeout() {
        out.push_str(&format!(
            " (timed out after {} ms; [image_gen] timeout_ms)",
            endpoint.timeout.as_millis()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn endpoint_resolution_order() {
        let e = endpoint(None, env(&[])).unwrap_err().to_string();
        assert!(
            e.contains("no image endpoint configured")
                && e.contains("[image_gen]")
                && e.contains("OPENAI_API_KEY"),
            "{e}"
        );

        let e = endpoint(None, env(&[("OPENAI_API_KEY", "k")])).unwrap();
        assert_eq!(e.base_url, OPENAI_BASE_URL);
        assert_eq!(e.model, DEFAULT_MODEL);
        assert_eq!(e.key.as_deref(), Some("k"));

        let e = endpoint(
            Some(&json!({"api_key_env": "MY_KEY"})),
            env(&[
                ("OPENAI_BASE_URL", "http://b/v1"),
                ("TOOLBOX_IMAGE_BASE_URL", "http://a/v1"),
                ("MY_KEY", "mk"),
                ("TOOLBOX_IMAGE_MODEL", "m2"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (e.base_url.as_str(), e.model.as_str(), e.key.as_deref()),
            ("http://a/v1", "m2", Some("mk"))
        );

        let e = endpoint(
            Some(&json!({"base_url": "http://c/v1", "model": "m1"})),
            env(&[("TOOLBOX_IMAGE_BASE_URL", "http://a/v1")]),
        )
        .unwrap();
        assert_eq!(
            (e.base_url.as_str(), e.model.as_str(), e.key),
            ("http://c/v1", "m1", None)
        );

        for (table, want) in [
            (
                json!({"base_url": "ftp://x"}),
                "not an http:// or https:// URL",
            ),
            (
                json!({"baseurl": "http://x"}),
                "invalid configuration: [image_gen] has an unknown key `baseurl`",
            ),
            (
                json!({"base_url": 3}),
                "[image_gen] base_url must be a string, got 3",
            ),
            (
                json!({"base_url": "http://x", "timeout_ms": 0}),
                "[image_gen] timeout_ms must be at least 1, got 0",
            ),
        ] {
            let e = endpoint(Some(&table), env(&[])).unwrap_err().to_string();
            assert!(e.contains(want), "{table}: {e}");
        }
    }

    #[test]
    fn sizes() {
        for good in ["1024x1024", "1536x1024", "256X256", "auto"] {
            assert!(check_size(good).is_ok(), "{good}");
        }
        for bad in [
            "1024",
            "big",
            "0x0",
            "1024x99999",
            "1024x",
            "-1x5",
            "1024*1024",
        ] {
            let e = check_size(bad).unwrap_err().to_string();
            assert!(e.contains("argument `size` must be WIDTHxHEIGHT"), "{e}");
        }
    }

    #[test]
    fn images_are_decoded_and_checked() {
        let png = [PNG_MAGIC, b"rest"].concat();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
        let ok = decode_images(&json!({"data": [{"b64_json": b64}]})).unwrap();
        assert_eq!(ok, vec![png]);
        let jpeg = base64::engine::general_purpose::STANDARD.encode(b"\xff\xd8\xff\xe0JFIF");
        for (answer, want) in [
            (
                json!({"data": [{"b64_json": jpeg}]}),
                "image 1 is not a PNG (it starts with bytes ffd8ffe0",
            ),
            (
                json!({"data": [{"b64_json": "!!!"}]}),
                "image 1 is not valid base64",
            ),
            (
                json!({"data": [{"url": "https://x/y.png"}]}),
                "came back as a URL",
            ),
            (json!({"data": []}), "returned no images"),
            (json!({"created": 1}), "no `data` list"),
        ] {
            let e = decode_images(&answer).unwrap_err().to_string();
            assert!(e.contains(want), "{answer}: {e}");
        }
    }

    #[test]
    fn files_are_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let a = save_all(dir.path(), "c", &[b"1".to_vec(), b"2".to_vec()]).unwrap();
        let b = save_all(dir.path(), "c", &[b"3".to_vec()]).unwrap();
        assert_eq!(a.len(), 2);
        assert_ne!(a[0], b[0]);
        assert_eq!(std::fs::read(&a[0]).unwrap(), b"1");
        assert!(a[1]
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .ends_with("-2.png"));
    }
}
