//! `memory__search` over 100,000 memories, through the executor (trajectory on, as toolbox
//! runs by default): saves them one call at a time, then times searches of several kinds and
//! prints the insert rate, the file size, and the median and p99 latency of each kind.
//!
//! Run with `cargo bench -p toolbox-memory --bench search_100k` (`-- 20000` for a smaller
//! store). The corpus is generated: 70 % English-like text over a 20,000-word vocabulary
//! with Zipf-like frequencies, 30 % Chinese over the 3,000 most common ideographs' range,
//! 50 tags. Not a test: it only prints figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_executor::{ExecutorConfig, PermissionMode, Registry, ToolExecutor, ToolRequest};
use toolbox_host::{EventSink, ToolProvider};
use toolbox_memory::MemoryProvider;

const DEFAULT_MEMORIES: usize = 100_000;
const VOCABULARY: usize = 20_000;
const HAN: usize = 3_000;
const TAGS: usize = 50;
/// Searches timed per kind of query.
const SEARCHES_PER_KIND: usize = 300;

/// xorshift64*: deterministic, so every run searches the same corpus.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Roughly Zipf: rank r is drawn with probability about proportional to 1/r.
    fn zipf(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((n as f64).powf(u) as usize).saturating_sub(1).min(n - 1)
    }
}

/// Word `i` of the vocabulary: pronounceable, distinct.
fn word(i: usize) -> String {
    const C: &[&str] = &[
        "b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "st", "tr", "pl",
    ];
    const V: &[&str] = &["a", "e", "i", "o", "u", "ai", "ou"];
    let mut n = i + 1;
    let mut out = String::new();
    while n > 0 {
        out.push_str(C[n % C.len()]);
        n /= C.len();
        out.push_str(V[n % V.len()]);
        n /= V.len();
    }
    out
}

fn han(i: usize) -> char {
    char::from_u32(0x4E00 + (i as u32 * 7) % 0x5000).unwrap_or('中')
}

fn english(rng: &mut Rng) -> String {
    let words = 20 + rng.below(60);
    let mut out = String::new();
    for i in 0..words {
        if i > 0 {
            out.push(if rng.below(12) == 0 { '.' } else { ' ' });
            if out.ends_with('.') {
                out.push(' ');
            }
        }
        out.push_str(&word(rng.zipf(VOCABULARY)));
    }
    out.push('.');
    out
}

fn chinese(rng: &mut Rng) -> String {
    let chars = 30 + rng.below(120);
    let mut out = String::new();
    for i in 0..chars {
        if i > 0 && rng.below(10) == 0 {
            out.push('，');
        }
        out.push(han(rng.zipf(HAN)));
    }
    out.push('。');
    out
}

fn memory(rng: &mut Rng) -> (Value, String) {
    let text = if rng.below(10) < 7 {
        english(rng)
    } else {
        chinese(rng)
    };
    let mut args = json!({"text": text});
    if rng.below(2) == 0 {
        let title: Vec<String> = (0..3).map(|_| word(rng.zipf(VOCABULARY))).collect();
        args["title"] = json!(title.join(" "));
    }
    let tags: Vec<String> = (0..rng.below(3))
        .map(|_| format!("tag{}", rng.below(TAGS)))
        .collect();
    args["tags"] = json!(tags);
    (args, text)
}

/// A query of `kind`, taken from `text` (a memory's text) or the vocabulary.
fn query(kind: &str, rng: &mut Rng, texts: &[String]) -> Value {
    let pick_text = |rng: &mut Rng, zh: bool| loop {
        let t = &texts[rng.below(texts.len())];
        if t.is_ascii() != zh {
            return t.clone();
        }
    };
    match kind {
        "word, common" => json!({"query": word(rng.below(50))}),
        "word, rare" => json!({"query": word(1000 + rng.below(VOCABULARY - 1000))}),
        "phrase of 2 words" | "3 words from one note" => {
            let t = pick_text(rng, false);
            let words: Vec<&str> = t.split([' ', '.']).filter(|w| !w.is_empty()).collect();
            let n = if kind.starts_with("phrase") { 2 } else { 3 };
            let q: Vec<&str> = if n == 2 {
                let at = rng.below(words.len() - 1);
                words[at..at + 2].to_vec()
            } else {
                (0..3).map(|_| words[rng.below(words.len())]).collect()
            };
            json!({"query": q.join(" ")})
        }
        "Chinese, 2 characters" | "Chinese, 4 characters" => {
            let n = if kind.contains('2') { 2 } else { 4 };
            let text = pick_text(rng, true);
            // A stretch between two punctuation marks, long enough.
            let runs: Vec<Vec<char>> = text
                .split(['，', '。'])
                .map(|r| r.chars().collect::<Vec<char>>())
                .filter(|r| r.len() >= n)
                .collect();
            let run = &runs[rng.below(runs.len())];
            let at = rng.below(run.len() - n + 1);
            json!({"query": run[at..at + n].iter().collect::<String>()})
        }
        "word + tag filter" => {
            json!({"query": word(rng.below(200)), "tags": [format!("tag{}", rng.below(TAGS))]})
        }
        _ => unreachable!("{kind}"),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    // `cargo bench` passes `--bench`; a bare number sets the store's size.
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(DEFAULT_MEMORIES);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = PermissionMode::Full;
    let registry =
        Registry::from_providers([Arc::new(MemoryProvider::default()) as Arc<dyn ToolProvider>])
            .unwrap();
    let exec = ToolExecutor::with_registry(config, registry, EventSink::none()).unwrap();
    let run = |name: &str, args: Value| {
        let info = rt.block_on(exec.run(ToolRequest::new("bench", name, args).session("bench")));
        assert!(info.is_done(), "{name}: {}", info.result);
        info.result
    };

    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut texts = Vec::with_capacity(n);
    println!("saving {n} memories through the executor…");
    let started = Instant::now();
    for _ in 0..n {
        let (args, text) = memory(&mut rng);
        run("memory__save", args);
        texts.push(text);
    }
    let took = started.elapsed();
    let db = dir.path().join(".toolbox/memory.sqlite");
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let wal = size(&db.with_file_name("memory.sqlite-wal"));
    let text_bytes: usize = texts.iter().map(String::len).sum();
    println!(
        "insert: {n} memories in {:.1} s = {:.0} saves/s ({} per save)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        ms(took / n as u32)
    );
    println!(
        "file: {:.1} MiB database + {:.1} MiB write-ahead log, for {:.1} MiB of text",
        size(&db) as f64 / 1048576.0,
        wal as f64 / 1048576.0,
        text_bytes as f64 / 1048576.0
    );

    let kinds = [
        "word, common",
        "word, rare",
        "phrase of 2 words",
        "3 words from one note",
        "Chinese, 2 characters",
        "Chinese, 4 characters",
        "word + tag filter",
    ];
    // Warm the page cache and the statement cache.
    for kind in kinds {
        run("memory__search", query(kind, &mut rng, &texts));
    }
    let mut all = Vec::new();
    println!("\nmemory__search, {SEARCHES_PER_KIND} searches per kind (limit 10):");
    println!(
        "{:24} {:>10} {:>10} {:>10}",
        "query", "median", "p99", "max"
    );
    for kind in kinds {
        let mut times = Vec::with_capacity(SEARCHES_PER_KIND);
        let mut empty = 0;
        for _ in 0..SEARCHES_PER_KIND {
            let args = query(kind, &mut rng, &texts);
            let t = Instant::now();
            let out = run("memory__search", args);
            times.push(t.elapsed());
            if out.starts_with("No memories") {
                empty += 1;
            }
        }
        times.sort();
        println!(
            "{kind:24} {:>10} {:>10} {:>10}{}",
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99)),
            ms(*times.last().unwrap()),
            if empty > 0 {
                format!("   ({empty} found nothing)")
            } else {
                String::new()
            }
        );
        all.extend(times);
    }
    all.sort();
    println!(
        "{:24} {:>10} {:>10} {:>10}",
        "all",
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        ms(*all.last().unwrap())
    );
}
