//! JSONL → Parquet on several threads. The reading thread cuts the lines into chunks; a few
//! workers each turn a chunk into one Arrow batch (the fast path of
//! [`ParquetSink::write_json_line`](crate::write::ParquetSink::write_json_line)); the
//! results come back in input order, so the output is the one the single-threaded path
//! writes. A chunk with a line the fast path does not take comes back unparsed, and the
//! reading thread runs its lines one by one through the general path, which counts, types or
//! refuses each as it always does.

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use anyhow::{anyhow, Result};
use arrow_array::RecordBatch;

use crate::records::{Flow, Item, JsonlLine};
use crate::write::LineBatcher;

/// Lines a chunk holds at most.
const CHUNK_LINES: usize = 8192;
/// Bytes of lines a chunk holds at most (one line may take it over, up to the line limit).
const CHUNK_BYTES: usize = 4 << 20;
/// Chunks a worker has in hand at most: one being parsed, one waiting.
const DEPTH: usize = 2;
/// Bytes of lines out with the workers at most (one chunk may be out whatever its size): a
/// chunk is cut at [`CHUNK_BYTES`] but can end with a line up to `max_line_bytes`.
const BYTES_OUT: usize = 32 << 20;
/// Workers at most when the count is left to the machine: past this the writing thread is
/// the bottleneck.
const MAX_AUTO_WORKERS: usize = 4;

/// One entry of a chunk, in input order.
enum Entry {
    /// A line whose bytes end at `end` in the chunk's data (and start where the previous
    /// line's end).
    Line { at: u64, end: usize },
    /// A line the reader refused (too long), as it reported it.
    Bad(Item),
}

/// Lines read, in order, on their way to a worker and back.
#[derive(Default)]
pub struct Chunk {
    data: Vec<u8>,
    entries: Vec<Entry>,
    /// Whether an entry is [`Entry::Bad`]: then no worker parses it.
    has_bad: bool,
}

impl Chunk {
    /// Adds a line as the reader gave it.
    pub fn push(&mut self, line: JsonlLine<'_>) {
        match line {
            JsonlLine::Line { at, bytes } => {
                self.data.extend_from_slice(bytes);
                self.entries.push(Entry::Line {
                    at,
                    end: self.data.len(),
                });
            }
            JsonlLine::Bad(item) => {
                self.has_bad = true;
                self.entries.push(Entry::Bad(item));
            }
        }
    }

    /// Whether it is time to send it to a worker.
    pub fn full(&self) -> bool {
        self.entries.len() >= CHUNK_LINES || self.data.len() >= CHUNK_BYTES
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn clear(&mut self) {
        self.data.clear();
        self.entries.clear();
        self.has_bad = false;
    }

    /// The bytes of each line (none when the chunk holds a refused line: the caller
    /// replays such a chunk).
    fn lines(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.entries.iter().filter_map(move |e| match e {
            Entry::Line { end, .. } => {
                let line = &self.data[start..*end];
                start = *end;
                Some(line)
            }
            Entry::Bad(_) => None,
        })
    }

    /// Gives each entry to `f` as the reader gave it, in order, until `f` says stop.
    pub fn replay(self, f: &mut dyn FnMut(JsonlLine<'_>) -> Result<Flow>) -> Result<Flow> {
        let Chunk { data, entries, .. } = self;
        let mut start = 0;
        for e in entries {
            let flow = match e {
                Entry::Line { at, end } => {
                    let bytes = &data[start..end];
                    start = end;
                    f(JsonlLine::Line { at, bytes })?
                }
                Entry::Bad(item) => f(JsonlLine::Bad(item))?,
            };
            if flow == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Go)
    }
}

/// A chunk back from a worker: with its batch when every line took the fast path.
pub struct Parsed {
    /// The chunk, to replay when there is no batch, or to reuse.
    pub chunk: Chunk,
    /// Its lines as one batch, in order.
    pub batch: Option<RecordBatch>,
}

struct Worker {
    jobs: Option<SyncSender<Chunk>>,
    done: Option<Receiver<Parsed>>,
    thread: Option<JoinHandle<()>>,
}

/// The workers, fed round-robin, so the oldest chunk out is always the next result of one
/// known worker: the results come back in input order without reordering.
pub struct Pool {
    workers: Vec<Worker>,
    /// The worker and the bytes of each chunk out, oldest first.
    out: VecDeque<(usize, usize)>,
    /// The bytes of the chunks out.
    bytes_out: usize,
    next: usize,
    spare: Vec<Chunk>,
}

impl Pool {
    /// Starts `threads` workers (0: as many as the machine has cores, at most
    /// [`MAX_AUTO_WORKERS`]), each with its own copy of `batcher`.
    pub fn start(batcher: &LineBatcher, threads: u64) -> Result<Pool> {
        let n = match usize::try_from(threads) {
            Ok(0) | Err(_) => std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(MAX_AUTO_WORKERS),
            Ok(n) => n,
        };
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let (jobs, todo) = sync_channel::<Chunk>(DEPTH);
            let (give, done) = sync_channel::<Parsed>(DEPTH);
            let mut batcher = batcher.clone();
            let thread = std::thread::Builder::new()
                .name(format!("jsonl-parse-{i}"))
                .spawn(move || {
                    for chunk in todo {
                        let batch = if chunk.has_bad {
                            None
                        } else {
                            batcher.batch(chunk.lines())
                        };
                        if give.send(Parsed { chunk, batch }).is_err() {
                            return;
                        }
                    }
                })?;
            workers.push(Worker {
                jobs: Some(jobs),
                done: Some(done),
                thread: Some(thread),
            });
        }
        Ok(Pool {
            workers,
            out: VecDeque::new(),
            bytes_out: 0,
            next: 0,
            spare: Vec::new(),
        })
    }

    /// An empty chunk, reusing the buffers of one already written.
    pub fn fresh(&mut self) -> Chunk {
        self.spare.pop().unwrap_or_default()
    }

    /// Keeps a written chunk's buffers for [`Pool::fresh`].
    pub fn recycle(&mut self, mut chunk: Chunk) {
        chunk.clear();
        if self.spare.len() < 2 {
            self.spare.push(chunk);
        }
    }

    /// Whether `chunk` must wait for the oldest result before it is sent: every worker has
    /// its fill, or the chunks out and this one would pass [`BYTES_OUT`] (chunks of long
    /// lines then go one at a time).
    pub fn must_wait(&self, chunk: &Chunk) -> bool {
        !self.out.is_empty()
            && (self.out.len() >= self.workers.len() * DEPTH
                || self.bytes_out + chunk.data.len() > BYTES_OUT)
    }

    /// Sends `chunk` to the next worker (after [`Pool::must_wait`] said it need not wait).
    pub fn submit(&mut self, chunk: Chunk) -> Result<()> {
        let w = self.next;
        self.next = (self.next + 1) % self.workers.len();
        let bytes = chunk.data.len();
        let sent = self.workers[w]
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(chunk).is_ok());
        if !sent {
            return Err(anyhow!("a JSONL parsing thread stopped"));
        }
        self.out.push_back((w, bytes));
        self.bytes_out += bytes;
        Ok(())
    }

    /// The oldest result still out; `None` when none is.
    pub fn next(&mut self) -> Result<Option<Parsed>> {
        let Some((w, bytes)) = self.out.pop_front() else {
            return Ok(None);
        };
        self.bytes_out -= bytes;
        self.workers[w]
            .done
            .as_ref()
            .and_then(|done| done.recv().ok())
            .map(Some)
            .ok_or_else(|| anyhow!("a JSONL parsing thread stopped"))
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing both ends stops each worker at its next chunk or result.
        for w in &mut self.workers {
            w.jobs = None;
            w.done = None;
        }
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::format::Format;
    use crate::write::{Out, Sink};

    /// A pool of two workers for the columns `id` (integer) and `s` (text), and a chunk of
    /// `lines` lines whose strings are `len` bytes.
    fn pool_and_chunk() -> (Pool, impl Fn(usize, usize) -> Chunk) {
        let mut file = tempfile::tempfile().unwrap();
        let mut sink = Sink::new(Format::Parquet, &mut file, None);
        for i in 0..8192i64 {
            let rec = [
                (Arc::from("id"), json!(i)),
                (Arc::from("s"), json!(format!("v{}", i % 7))),
            ];
            sink.write(Out::Fields(&rec)).unwrap().unwrap();
        }
        let Sink::Parquet(p) = &sink else {
            unreachable!()
        };
        let pool = Pool::start(&p.batcher(u64::MAX).unwrap(), 2).unwrap();
        let chunk = |lines: usize, len: usize| {
            let mut c = Chunk::default();
            let text = format!(r#"{{"id":1,"s":"{}"}}"#, "x".repeat(len));
            for at in 0..lines {
                c.push(JsonlLine::Line {
                    at: at as u64 + 1,
                    bytes: text.as_bytes(),
                });
            }
            c
        };
        (pool, chunk)
    }

    #[test]
    fn chunks_out_are_bounded_by_count_and_by_bytes() {
        let (mut pool, chunk) = pool_and_chunk();
        // By count: two workers, two chunks each.
        for _ in 0..4 {
            let c = chunk(10, 10);
            assert!(!pool.must_wait(&c));
            pool.submit(c).unwrap();
        }
        assert!(pool.must_wait(&chunk(10, 10)));
        let first = pool.next().unwrap().unwrap();
        assert_eq!(first.batch.unwrap().num_rows(), 10);
        assert!(!pool.must_wait(&chunk(10, 10)));
        while pool.next().unwrap().is_some() {}

        // By bytes: a chunk of one 20 MiB line goes alone, whatever the count.
        let big = chunk(1, 20 << 20);
        assert!(!pool.must_wait(&big), "nothing out: it goes");
        pool.submit(big).unwrap();
        assert!(pool.must_wait(&chunk(1, 20 << 20)), "40 MiB would be out");
        assert!(!pool.must_wait(&chunk(10, 10)), "small ones still fit");
        let back = pool.next().unwrap().unwrap();
        assert_eq!(back.batch.unwrap().num_rows(), 1);
        assert!(!pool.must_wait(&chunk(1, 20 << 20)));
        assert!(pool.next().unwrap().is_none());
    }

    #[test]
    fn a_chunk_with_a_line_the_fast_path_refuses_comes_back_whole_and_unparsed() {
        let (mut pool, chunk) = pool_and_chunk();
        let mut c = chunk(3, 5);
        c.push(JsonlLine::Line {
            at: 4,
            bytes: br#"{"id":"text"}"#,
        });
        pool.submit(c).unwrap();
        let back = pool.next().unwrap().unwrap();
        assert!(back.batch.is_none());
        let mut seen = Vec::new();
        back.chunk
            .replay(&mut |line| {
                if let JsonlLine::Line { at, bytes } = line {
                    seen.push((at, bytes.len()));
                }
                Ok(Flow::Go)
            })
            .unwrap();
        assert_eq!(
            seen.iter().map(|(at, _)| *at).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        assert_eq!(seen[3].1, 13);
    }
}
