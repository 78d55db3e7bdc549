//! `pdf__search`: case-insensitive search of a PDF's text, each match with its page and
//! context.

use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::{open, pages, pages_arg, pages_prop, path_prop, PATH, TOOLSET};

pub(crate) const NAME: &str = "pdf__search";
const DEFAULT_MAX_RESULTS: u64 = 20;
const QUERY: Arg = Arg::string("query").aliases(&["pattern"]).required();
const MAX_RESULTS: Arg = Arg::integer("max_results", 1, Some(500)).default(DEFAULT_MAX_RESULTS);
/// Characters of context shown on each side of a search match.
const CONTEXT_CHARS: usize = 80;

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Search the text of a PDF file for a phrase (case-insensitive; line breaks \
         and runs of spaces in the PDF match a single space). Returns each match with \
         its page number and the surrounding text.",
        object(&[
            path_prop(),
            QUERY.doc("The text to look for."),
            pages_prop(),
            MAX_RESULTS.doc(format!(
                "Show at most this many matches (default {DEFAULT_MAX_RESULTS})."
            )),
        ]),
    )
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let given = PATH.str(&args)?;
    let query = QUERY.str(&args)?;
    let needle = fold(&normalize_space(query));
    if needle.is_empty() {
        bail!("{NAME}: argument `query` is empty");
    }
    let spec = pages_arg(NAME, &args)?;
    let max_results = MAX_RESULTS.u64(&args)? as usize;
    args.finish()?;
    let (pdf, shown) = open(NAME, given, ctx).await?;
    pdf.ensure_readable(&shown)
        .map_err(|e| anyhow!("{NAME}: {e}"))?;
    let wanted = pages::parse(NAME, spec.as_deref(), pdf.page_count)?;
    let cancel = ctx.cancel.clone();
    let searched = wanted.len();
    let (matches, total, failed) =
        toolbox_host::blocking(format!("{NAME}: the PDF task"), move || {
            let mut matches = Vec::new();
            let mut total = 0usize;
            let mut failed = Vec::new();
            for (page, text) in pdf.pages_text(&wanted, usize::MAX, &cancel) {
                let Ok(text) = text else {
                    failed.push(page);
                    continue;
                };
                let hay: Vec<char> = normalize_space(&text).chars().collect();
                for at in find_all(&hay, &needle) {
                    total += 1;
                    if matches.len() < max_results {
                        matches.push((page, context(&hay, at, needle.len())));
                    }
                }
            }
            (matches, total, failed)
        })
        .await?;
    if ctx.cancel.is_cancelled() {
        bail!("{NAME}: cancelled");
    }

    let pages_note = format!(
        "{searched} page{} searched",
        if searched == 1 { "" } else { "s" }
    );
    let mut out = if total == 0 {
        format!("No matches for {query:?} in {shown} ({pages_note}).")
    } else {
        let mut out = format!(
            "{total} match{} for {query:?} in {shown} ({pages_note}){}:\n",
            if total == 1 { "" } else { "es" },
            if total > matches.len() {
                format!(", showing the first {}", matches.len())
            } else {
                String::new()
            }
        );
        for (page, ctx_text) in &matches {
            out.push_str(&format!("\npage {page}: {ctx_text}"));
        }
        out
    };
    if !failed.is_empty() {
        out.push_str(&format!(
            "\n\nNote: the text of page{} {} could not be extracted, so {} not searched.",
            if failed.len() == 1 { "" } else { "s" },
            pages::describe(&failed),
            if failed.len() == 1 {
                "it was"
            } else {
                "they were"
            }
        ));
    }
    Ok(Value::String(out))
}

/// Collapses every run of whitespace (line breaks included) to one space, so a phrase that
/// wraps across lines in the PDF is still found.
fn normalize_space(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Case folding one char at a time, so positions in the folded text are positions in the
/// original (a char whose lower case is several chars keeps its first).
fn fold_char(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

fn fold(text: &str) -> Vec<char> {
    text.chars().map(fold_char).collect()
}

/// Start positions (in chars) of non-overlapping matches of `needle` in `hay`.
fn find_all(hay: &[char], needle: &[char]) -> Vec<usize> {
    let mut found = Vec::new();
    if needle.is_empty() || needle.len() > hay.len() {
        return found;
    }
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        if hay[i..i + needle.len()]
            .iter()
            .zip(needle)
            .all(|(h, n)| fold_char(*h) == *n)
        {
            found.push(i);
            i += needle.len();
        } else {
            i += 1;
        }
    }
    found
}

/// The match with up to [`CONTEXT_CHARS`] on each side, the match itself in `**`.
fn context(hay: &[char], at: usize, len: usize) -> String {
    let from = at.saturating_sub(CONTEXT_CHARS);
    let to = (at + len + CONTEXT_CHARS).min(hay.len());
    let s = |a: usize, b: usize| hay[a..b].iter().collect::<String>();
    format!(
        "{}{}**{}**{}{}",
        if from > 0 { "…" } else { "" },
        s(from, at),
        s(at, at + len),
        s(at + len, to),
        if to < hay.len() { "…" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_is_case_insensitive_and_spans_lines() {
        let hay: Vec<char> = normalize_space("Café  NAÏVE\nZürich café")
            .chars()
            .collect();
        assert_eq!(find_all(&hay, &fold("café naïve zürich")), vec![0]);
        assert_eq!(find_all(&hay, &fold("CAFÉ")), vec![0, 18]);
        assert!(find_all(&hay, &fold("tea")).is_empty());
        let at = find_all(&hay, &fold("naïve"))[0];
        assert_eq!(context(&hay, at, 5), "Café **NAÏVE** Zürich café");
    }

    #[test]
    fn context_is_cut_with_ellipses() {
        let text = format!("{}needle{}", "a".repeat(200), "b".repeat(200));
        let hay: Vec<char> = text.chars().collect();
        let at = find_all(&hay, &fold("NEEDLE"))[0];
        let c = context(&hay, at, 6);
        assert!(c.starts_with('…') && c.ends_with('…'), "{c}");
        assert_eq!(c.chars().count(), 2 + 80 + 10 + 80);
    }
}
