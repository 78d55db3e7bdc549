//! `skill_lookup`: find skills by words of their name or description, best first.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk};
use toolbox_host::ToolContext;

use crate::registry::{Skill, SkillSet};
use crate::{discover, TOOLSET};

pub const NAME: &str = "skill_lookup";
const DEFAULT_LIMIT: u64 = 20;
const QUERY: Arg = Arg::string("query").aliases(&["q"]);
const LIMIT: Arg = Arg::integer("limit", 1, Some(200)).default(DEFAULT_LIMIT);
/// Longer queries are refused (a query is a few words).
const MAX_QUERY_CHARS: usize = 500;

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Find skills: folders of instructions, scripts and references for particular tasks \
         (Agent Skills, SKILL.md). Give words from what you need to do; skills are ranked by \
         how well their name and description match. Without a query, every skill is listed. \
         Also says which skill folders were skipped and why. Load a skill with the skill tool \
         before doing a task it describes.",
        object(&[
            QUERY.doc(
                "Words to look for in skill names and descriptions, e.g. \"pdf report\" \
                 (default: list every skill).",
            ),
            LIMIT.doc("How many skills to show (1-200, default 20)."),
        ]),
    )
    .risk(ToolRisk::Read)
    .toolsets(&[TOOLSET])
}

pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let query = QUERY.opt_nonempty_str(&a)?.map(str::trim);
    if let Some(q) = query {
        if q.chars().count() > MAX_QUERY_CHARS {
            anyhow::bail!("{NAME}: the query is longer than {MAX_QUERY_CHARS} characters");
        }
    }
    let limit = LIMIT.u64(&a)? as usize;
    a.finish()?;
    let set = discover(NAME, ctx).await?;
    Ok(Value::String(render(&set, query, limit)))
}

/// The skills matching `query` (every skill when `None`), best first, then the skipped ones.
pub fn render(set: &SkillSet, query: Option<&str>, limit: usize) -> String {
    let total = set.skills().len();
    let mut out = String::new();
    if total == 0 {
        out.push_str(&format!(
            "no skills found (looked in {}). A skill is a folder holding a SKILL.md.\n",
            set.roots().join(", ")
        ));
    } else {
        let ranked: Vec<&Skill> = match query {
            None => set.skills().iter().collect(),
            Some(q) => rank(set.skills(), q),
        };
        match query {
            _ if ranked.is_empty() => out.push_str(&format!(
                "no skill matches {:?} ({total} skill{} in all: call {NAME} without a query to \
                 list them)\n",
                query.unwrap_or(""),
                plural(total)
            )),
            None => out.push_str(&format!("{total} skill{}:\n", plural(total))),
            Some(q) => out.push_str(&format!(
                "{} of {total} skill{} match {q:?}, best first:\n",
                ranked.len(),
                plural(total)
            )),
        }
        for skill in ranked.iter().take(limit) {
            out.push_str(&format!(
                "- {}: {} [{}]\n",
                skill.name(),
                one_line(skill.description()),
                skill.location()
            ));
        }
        if ranked.len() > limit {
            out.push_str(&format!(
                "… {} more (raise limit to see them)\n",
                ranked.len() - limit
            ));
        }
        if !ranked.is_empty() {
            out.push_str("Load one with skill {\"name\": \"<name>\"}.\n");
        }
    }
    if !set.skipped().is_empty() {
        out.push_str(&format!(
            "\nskipped ({}; fix them to use them):\n",
            set.skipped().len()
        ));
        for s in set.skipped() {
            out.push_str(&format!("- {}: {}\n", s.path, s.reason()));
        }
    }
    out.pop();
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Newlines and runs of spaces as single spaces.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The skills with any match for `query`, best first (ties by name).
pub fn rank<'a>(skills: &'a [Skill], query: &str) -> Vec<&'a Skill> {
    let terms = terms(query);
    let phrase = terms.join(" ");
    let mut scored: Vec<(u32, &Skill)> = skills
        .iter()
        .map(|s| (score(s, &terms, &phrase), s))
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name().cmp(b.1.name())));
    scored.into_iter().map(|(_, s)| s).collect()
}

/// The query's words, lower-case; punctuation (ASCII and CJK) separates words. Single
/// ASCII letters are dropped unless they are all there is.
fn terms(query: &str) -> Vec<String> {
    let lower = query.to_lowercase();
    let words: Vec<String> = lower
        .split(|c: char| {
            c.is_whitespace()
                || (c.is_ascii_punctuation() && c != '-')
                || "，。、；：？！（）《》“”「」".contains(c)
        })
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let long: Vec<String> = words
        .iter()
        .filter(|w| !(w.len() == 1 && w.is_ascii()))
        .cloned()
        .collect();
    if long.is_empty() {
        words
    } else {
        long
    }
}

fn score(skill: &Skill, terms: &[String], phrase: &str) -> u32 {
    let name = skill.name().as_str();
    let desc = skill.description().to_lowercase();
    let parts: Vec<&str> = name.split('-').collect();
    let mut total = 0;
    let mut matched = 0;
    for term in terms {
        let mut s = 0;
        if name == term {
            s += 100;
        } else if parts.contains(&term.as_str()) {
            s += 40;
        } else if name.contains(term.as_str()) {
            s += 20;
        }
        if desc.contains(term.as_str()) {
            s += 10 + 2 * desc.matches(term.as_str()).count().min(3) as u32;
        } else if !term.is_ascii() {
            // Chinese and Japanese text has no spaces: a query word can match in pieces.
            s += bigram_overlap(term, &desc);
        }
        if s > 0 {
            matched += 1;
        }
        total += s;
    }
    if total == 0 {
        return 0;
    }
    if terms.len() > 1 {
        if name.replace('-', " ") == phrase {
            total += 100;
        }
        if desc.contains(phrase) {
            total += 15;
        }
        if matched == terms.len() {
            total += 10;
        }
    }
    total
}

/// Up to 10 points for the share of the term's two-character pieces found in `text`.
fn bigram_overlap(term: &str, text: &str) -> u32 {
    let chars: Vec<char> = term.chars().collect();
    if chars.len() < 2 {
        return 0;
    }
    let grams: Vec<String> = chars.windows(2).map(|w| w.iter().collect()).collect();
    let found = grams.iter().filter(|g| text.contains(g.as_str())).count();
    (found * 10 / grams.len()) as u32
}
