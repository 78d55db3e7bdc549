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
    /// The worker of each chunk out, oldest first.
    out: VecDeque<usize>,
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

    /// Sends `chunk` to the next worker. When every worker already has its fill, first takes
    /// the oldest result, which it returns for the caller to write.
    pub fn submit(&mut self, chunk: Chunk) -> Result<Option<Parsed>> {
        let oldest = if self.out.len() >= self.workers.len() * DEPTH {
            self.next()?
        } else {
            None
        };
        let w = self.next;
        self.next = (self.next + 1) % self.workers.len();
        let sent = self.workers[w]
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(chunk).is_ok());
        if !sent {
            return Err(anyhow!("a JSONL parsing thread stopped"));
        }
        self.out.push_back(w);
        Ok(oldest)
    }

    /// The oldest result still out; `None` when none is.
    pub fn next(&mut self) -> Result<Option<Parsed>> {
        let Some(w) = self.out.pop_front() else {
            return Ok(None);
        };
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
