//! `web_search`: a query to the configured backend (SearxNG, Brave Search or Tavily).

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::ToolContext;
use url::Url;

use crate::config::{Backend, SearchConfig};
use crate::convert::{cut_chars, decode_text};
use crate::http::{describe_error, read_capped, Clients};

pub const NAME: &str = "web_search";
const DEFAULT_RESULTS: u64 = 5;
const QUERY: Arg = Arg::string("query").aliases(&["q"]).required();
const MAX_RESULTS: Arg = Arg::integer("max_results", 1, Some(20)).default(DEFAULT_RESULTS);
/// Snippets longer than this are cut: a result list is for choosing what to fetch.
const SNIPPET_CHARS: usize = 400;

/// What to tell a model (and through it, a person) when no backend is configured.
pub const NOT_CONFIGURED: &str = "web_search has no search backend configured. Add one to \
toolbox.toml:\n\
  [web]\n  search_backend = \"searxng\"\n  searxng_url = \"http://localhost:8888\"   # a SearxNG instance with the json format enabled\n\
or\n  [web]\n  search_backend = \"brave\"    # API key in the environment variable BRAVE_API_KEY (or the one named by brave_api_key_env)\n\
or\n  [web]\n  search_backend = \"tavily\"   # API key in the environment variable TAVILY_API_KEY (or the one named by tavily_api_key_env)";

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Search the web and return a numbered list of results, each with title, URL and a \
         short snippet. Use web_fetch on a result's URL to read the page.",
        object(&[
            QUERY.doc("What to search for."),
            MAX_RESULTS.doc(format!(
                "How many results to return (default {DEFAULT_RESULTS})."
            )),
        ]),
    )
    .toolsets(&["web"])
    // Read-only, but it talks to the open web: MCP clients should know.
    .open_world(true)
}

/// One search hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

pub async fn run(clients: Clients, args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let query = QUERY.str(&args)?.trim().to_string();
    if query.is_empty() {
        bail!("{NAME}: argument `query` is empty");
    }
    let max = MAX_RESULTS.u64(&args)? as usize;
    args.finish()?;
    let search = &clients.config.search;
    let Some(backend) = search.backend else {
        bail!("{NOT_CONFIGURED}");
    };
    let (label, request) = build_request(&clients, search, backend, &query, max)?;

    let mut response = tokio::select! {
        r = request.send() => r.map_err(|e| anyhow!("{NAME}: the {label} request failed: {}", describe_error(&e, &clients.config)))?,
        _ = ctx.cancel.cancelled() => bail!("{NAME}: cancelled"),
    };
    let status = response.status();
    let body = read_capped(
        &mut response,
        clients.config.max_response_bytes,
        &ctx.cancel,
    )
    .await
    .map_err(|e| {
        anyhow!(
            "{NAME}: reading the {label} response failed: {}",
            describe_error(&e, &clients.config)
        )
    })?;
    let text = decode_text(&body.bytes, None);
    if status.is_redirection() {
        let to = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("?");
        bail!("{NAME}: {label} answered HTTP {status}, a redirect to {to}; configure the final URL of the endpoint instead (search endpoints are not followed through redirects)");
    }
    if !status.is_success() {
        bail!(
            "{NAME}: {label} answered HTTP {status}{}{}",
            api_message(&text),
            status_hint(backend, status.as_u16(), search)
        );
    }
    if body.truncated {
        bail!(
            "{NAME}: the {label} response was larger than {} bytes ([web] max_response_bytes)",
            clients.config.max_response_bytes
        );
    }
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        let (start, _) = cut_chars(text.trim(), 200);
        anyhow!("{NAME}: {label} did not answer with JSON ({e}); it began: {start:?}")
    })?;
    let hits = parse_hits(backend, &value).ok_or_else(|| {
        anyhow!("{NAME}: the {label} answer has no result list where one was expected")
    })?;
    Ok(Value::String(render(&query, label, &hits, max)))
}

fn build_request(
    clients: &Clients,
    search: &SearchConfig,
    backend: Backend,
    query: &str,
    max: usize,
) -> Result<(&'static str, reqwest::RequestBuilder)> {
    let client = &clients.search;
    match backend {
        Backend::Searxng => {
            let base = search.searxng_url.as_deref().ok_or_else(|| {
                anyhow!("{NAME}: search_backend = \"searxng\" needs [web] searxng_url in toolbox.toml (the base URL of your SearxNG instance, e.g. \"http://localhost:8888\")")
            })?;
            let mut url = endpoint(base, "searxng_url", "search")?;
            url.query_pairs_mut()
                .append_pair("q", query)
                .append_pair("format", "json");
            Ok(("SearxNG", client.get(url)))
        }
        Backend::Brave => {
            let key = api_key(
                &search.brave_api_key_env,
                "Brave Search",
                "brave_api_key_env",
            )?;
            let mut url = endpoint(
                &search.brave_base_url,
                "brave_base_url",
                "res/v1/web/search",
            )?;
            url.query_pairs_mut()
                .append_pair("q", query)
                .append_pair("count", &max.to_string());
            Ok((
                "Brave Search",
                client
                    .get(url)
                    .header("X-Subscription-Token", key)
                    .header(reqwest::header::ACCEPT, "application/json"),
            ))
        }
        Backend::Tavily => {
            let key = api_key(&search.tavily_api_key_env, "Tavily", "tavily_api_key_env")?;
            let url = endpoint(&search.tavily_base_url, "tavily_base_url", "search")?;
            let body = json!({"query": query, "max_results": max, "search_depth": "basic"});
            Ok((
                "Tavily",
                client
                    .post(url)
                    .bearer_auth(key)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string()),
            ))
        }
    }
}

/// `base` joined with `path`, keeping any path prefix the base has (`http://h/searx` →
/// `http://h/searx/search`).
fn endpoint(base: &str, key: &str, path: &str) -> Result<Url> {
    let url = Url::parse(base.trim())
        .map_err(|e| anyhow!("{NAME}: [web] {key} = {base:?} is not a valid URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        bail!("{NAME}: [web] {key} must be an http:// or https:// URL, got {base:?}");
    }
    let joined = format!("{}/{path}", url.as_str().trim_end_matches('/'));
    Url::parse(&joined).map_err(|e| anyhow!("{NAME}: [web] {key}: {e}"))
}

fn api_key(var: &str, service: &str, config_key: &str) -> Result<String> {
    // Through the secrets toolbox took out of its environment at start-up.
    match toolbox_host::secrets::var(var) {
        Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => bail!(
            "{NAME}: {service} needs an API key in the environment variable {var}, which is not set (set it, or name another variable with [web] {config_key})"
        ),
    }
}

/// The error message an API put in its JSON body, else the start of the body.
fn api_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        [
            v.pointer("/error/message"),
            v.pointer("/error/detail"),
            v.pointer("/detail/error"),
            v.pointer("/detail"),
            v.pointer("/message"),
            v.pointer("/error"),
        ]
        .into_iter()
        .flatten()
        .find_map(|m| m.as_str().map(str::to_string))
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_string());
    if text.is_empty() {
        return String::new();
    }
    let (short, _) = cut_chars(&text, 300);
    format!(": {short}")
}

fn status_hint(backend: Backend, status: u16, search: &SearchConfig) -> String {
    match (backend, status) {
        (Backend::Searxng, 403) => " (is the json format enabled? add `json` to search.formats in the instance's settings.yml)".into(),
        (Backend::Brave, 401 | 403 | 422) => format!(" (check the key in {})", search.brave_api_key_env),
        (Backend::Tavily, 401 | 403) => format!(" (check the key in {})", search.tavily_api_key_env),
        (_, 429) => " (rate limited; try again later)".into(),
        _ => String::new(),
    }
}

/// Reads each backend's result list; `None` when the answer has none.
pub fn parse_hits(backend: Backend, v: &Value) -> Option<Vec<Hit>> {
    let (list, snippet_key) = match backend {
        Backend::Searxng => (v.get("results")?, "content"),
        Backend::Brave => match v.get("web") {
            Some(web) => (web.get("results")?, "description"),
            // Brave omits `web` entirely when nothing matched.
            None if v.get("type").is_some() => return Some(Vec::new()),
            None => return None,
        },
        Backend::Tavily => (v.get("results")?, "content"),
    };
    let text = |item: &Value, key: &str| {
        item.get(key)
            .and_then(Value::as_str)
            .map(clean)
            .unwrap_or_default()
    };
    Some(
        list.as_array()?
            .iter()
            .filter_map(|item| {
                let url = text(item, "url");
                (!url.is_empty()).then(|| Hit {
                    title: text(item, "title"),
                    url,
                    snippet: text(item, snippet_key),
                })
            })
            .collect(),
    )
}

/// Removes the highlighting tags (`<strong>`) some backends put in snippets, decodes the
/// common entities, and joins lines.
fn clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            _ => out.push(c),
        }
    }
    let out = out
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn render(query: &str, label: &str, hits: &[Hit], max: usize) -> String {
    if hits.is_empty() {
        return format!("No results for {query:?} ({label}).");
    }
    let shown = &hits[..hits.len().min(max)];
    let mut out = format!(
        "{} result{} for {query:?} ({label}):\n",
        shown.len(),
        if shown.len() == 1 { "" } else { "s" }
    );
    for (i, hit) in shown.iter().enumerate() {
        let title = if hit.title.is_empty() {
            "(no title)"
        } else {
            &hit.title
        };
        out.push_str(&format!("\n{}. {title}\n   {}\n", i + 1, hit.url));
        if !hit.snippet.is_empty() {
            let (snippet, cut) = cut_chars(&hit.snippet, SNIPPET_CHARS);
            out.push_str(&format!(
                "   {snippet}{}\n",
                if cut.is_some() { "…" } else { "" }
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wire_format_is_read() {
        let sx =
            json!({"results": [{"title": "A", "url": "https://a.example", "content": "about a"}]});
        let br = json!({"type": "search", "web": {"results": [{"title": "B", "url": "https://b.example", "description": "about <strong>b</strong> &amp; more"}]}});
        let tv = json!({"results": [{"title": "C", "url": "https://c.example", "content": "about c", "score": 0.9}]});
        assert_eq!(
            parse_hits(Backend::Searxng, &sx).unwrap()[0].snippet,
            "about a"
        );
        assert_eq!(
            parse_hits(Backend::Brave, &br).unwrap()[0].snippet,
            "about b & more"
        );
        assert_eq!(parse_hits(Backend::Tavily, &tv).unwrap()[0].title, "C");
        assert_eq!(
            parse_hits(Backend::Brave, &json!({"type": "search"})).unwrap(),
            vec![]
        );
        assert!(parse_hits(Backend::Searxng, &json!({"oops": 1})).is_none());
    }

    #[test]
    fn rendering() {
        let hits = vec![
            Hit {
                title: "A".into(),
                url: "https://a".into(),
                snippet: "s".into(),
            },
            Hit {
                title: String::new(),
                url: "https://b".into(),
                snippet: String::new(),
            },
        ];
        let out = render("q", "X", &hits, 5);
        assert!(out.starts_with("2 results for \"q\" (X):"), "{out}");
        assert!(out.contains("\n1. A\n   https://a\n   s\n"), "{out}");
        assert!(out.contains("\n2. (no title)\n   https://b\n"), "{out}");
        assert_eq!(render("q", "X", &[], 5), "No results for \"q\" (X).");
        assert!(render("q", "X", &hits, 1).starts_with("1 result for"));
    }

    #[test]
    fn endpoints_keep_a_base_path() {
        assert_eq!(
            endpoint("http://h:1/searx/", "k", "search")
                .unwrap()
                .as_str(),
            "http://h:1/searx/search"
        );
        assert!(endpoint("ftp://h", "k", "search").is_err());
        assert!(endpoint("nope", "k", "search")
            .unwrap_err()
            .to_string()
            .contains("[web] k"));
        assert_eq!(
            api_message(r#"{"error":{"message":"bad key"}}"#),
            ": bad key"
        );
        assert_eq!(
            api_message(r#"{"detail":{"error":"Unauthorized"}}"#),
            ": Unauthorized"
        );
    }
}
