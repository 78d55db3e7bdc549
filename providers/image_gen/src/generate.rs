//! `image_gen__generate`: ask the images endpoint for PNGs and save them in the session's
//! `output/` folder.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use base64::Engine as _;
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk};
use toolbox_host::ToolContext;

use crate::config::{endpoint, Endpoint};
use crate::ImageGen;

/// The tool's name.
pub const NAME: &str = "image_gen__generate";
const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";
const DEFAULT_SIZE: &str = "1024x1024";
const PROMPT: Arg = Arg::string("prompt").aliases(&["description"]).required();
const SIZE: Arg = Arg::string("size");
const N: Arg = Arg::integer("n", 1, Some(4)).default(1);

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Generate images from a text prompt with the configured image model and save them \
         as PNG files in the session's output folder. Returns the saved paths (e.g. \
         output/image-….png). Describe the subject, style and composition in the prompt.",
        object(&[
            PROMPT.doc("What the image should show."),
            SIZE.doc(
                "WIDTHxHEIGHT in pixels, e.g. \"1024x1024\" (default), \"1536x1024\", \
                 \"1024x1536\". The model decides which sizes it supports.",
            ),
            N.doc("How many images (1-4, default 1)."),
        ]),
    )
    .risk(ToolRisk::FileWrite)
    .toolsets(&["images"])
}

pub(crate) async fn run(provider: &ImageGen, args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let prompt = PROMPT.str(&args)?.trim().to_string();
    if prompt.is_empty() {
        bail!("{NAME}: argument `prompt` is empty");
    }
    let size = SIZE.opt_str(&args)?.unwrap_or(DEFAULT_SIZE).trim();
    check_size(size)?;
    let n = N.u64(&args)?;
    args.finish()?;

    let table = ctx.provider_config("image_gen");
    let endpoint = endpoint(table, toolbox_host::secrets::var)?;
    let client = provider.client(table, &endpoint)?;

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
    let call_id = toolbox_host::safe_file_part(&ctx.call_id);
    let saved = toolbox_host::blocking(format!("{NAME}: saving the images"), move || {
        save_all(&dir, &call_id, &images)
    })
    .await??;

    // The real path, and the short one the model names it by: `.toolbox/sessions/s1/output/
    // image-….png (output/image-….png)`.
    let shown: Vec<String> = saved
        .iter()
        .map(|p| ctx.workspace.display_real(p))
        .collect();
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
    let mut out = toolbox_core::error::chain(err);
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
