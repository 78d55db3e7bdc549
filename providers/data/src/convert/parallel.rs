//! JSONL and CSV → Parquet on several threads. The reading thread cuts the lines (or CSV
//! rows) into chunks; a few workers each turn a chunk into one Arrow batch (the fast path of
//! [`ParquetSink::write_json_line`](crate::write::ParquetSink::write_json_line), or
//! [`CellBatcher`](crate::write::CellBatcher) for CSV); the results come back in input
//! order, so the output is the one the single-threaded path writes. A chunk with a row the
//! fast path does not take comes back unparsed, and the reading thread runs its rows one by
//! one through the general path, which counts, types or refuses each as it always does.

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use anyhow::{anyhow, Result};
use arrow_array::RecordBatch;

use crate::records::{Flow, Item, JsonlLine};
use crate::write::LineBatcher;

/// What a worker is handed: its size in bytes (for the bound on bytes out), and a way to
/// be emptied for reuse.
pub trait Work: Default + Send + 'static {
    /// The bytes it holds.
    fn bytes(&self) -> usize;
    /// Empties it, keeping its buffers.
    fn clear(&mut self);
    /// Whether it holds no entry.
    fn is_empty(&self) -> bool;
}

impl Work for Chunk {
    fn bytes(&self) -> usize {
        self.data.len()
    }
    fn clear(&mut self) {
        Chunk::clear(self);
    }
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

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

/// One entry of a [`CellChunk`], in input order.
enum CellEntry {
    /// A row whose cells are the next `width` cells of the chunk.
    Row { at: u64 },
    /// A row the reader refused (ragged), as it reported it.
    Bad(Item),
}

/// A row a [`CellChunk`] gives back: a record, or the bad row the reader reported.
pub type CellRow<'a> = std::result::Result<&'a csv::ByteRecord, Item>;

/// CSV rows read, in order, on their way to a worker and back: their cells end to end.
#[derive(Default)]
pub struct CellChunk {
    data: Vec<u8>,
    ends: Vec<usize>,
    entries: Vec<CellEntry>,
    has_bad: bool,
}

impl CellChunk {
    /// Adds a row of as many cells as the header (unchecked: the worker checks them).
    pub fn push_row(&mut self, at: u64, rec: &csv::ByteRecord) {
        let base = self.data.len();
        self.data.extend_from_slice(rec.as_slice());
        let mut end = base;
        for cell in rec.iter() {
            end += cell.len();
            self.ends.push(end);
        }
        self.entries.push(CellEntry::Row { at });
    }

    /// Adds a row the reader refused.
    pub fn push_bad(&mut self, item: Item) {
        self.has_bad = true;
        self.entries.push(CellEntry::Bad(item));
    }

    /// Whether it is time to send it to a worker.
    pub fn full(&self) -> bool {
        self.entries.len() >= CHUNK_LINES || self.data.len() >= CHUNK_BYTES
    }

    /// Whether a row in it was refused by the reader (then no worker parses it).
    pub fn has_bad(&self) -> bool {
        self.has_bad
    }

    /// The rows' cells, in order, row after row.
    pub fn cells(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let cell = &self.data[start..end];
            start = end;
            cell
        })
    }

    /// Gives each entry to `f` as the reader gave it (a row as a record again), in order,
    /// until `f` says stop.
    pub fn replay(
        self,
        width: usize,
        f: &mut dyn FnMut(u64, CellRow<'_>) -> Result<Flow>,
    ) -> Result<Flow> {
        let mut cells = self
            .cells()
            .map(<[u8]>::to_vec)
            .collect::<Vec<_>>()
            .into_iter();
        let mut rec = csv::ByteRecord::new();
        for e in self.entries {
            let flow = match e {
                CellEntry::Row { at } => {
                    rec.clear();
                    for cell in cells.by_ref().take(width) {
                        rec.push_field(&cell);
                    }
                    f(at, Ok(&rec))?
                }
                CellEntry::Bad(item) => f(0, Err(item))?,
            };
            if flow == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Go)
    }
}

impl Work for CellChunk {
    fn bytes(&self) -> usize {
        self.data.len()
    }
    fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
        self.entries.clear();
        self.has_bad = false;
    }
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A chunk back from a worker: with its batch when every row took the fast path.
pub struct Parsed<C = Chunk> {
    /// The chunk, to replay when there is no batch, or to reuse.
    pub chunk: C,
    /// Its rows as one batch, in order.
    pub batch: Option<RecordBatch>,
}

struct Worker<C> {
    jobs: Option<SyncSender<C>>,
    done: Option<Receiver<Parsed<C>>>,
    thread: Option<JoinHandle<()>>,
}

/// The workers, fed round-robin, so the oldest chunk out is always the next result of one
/// known worker: the results come back in input order without reordering.
pub struct Pool<C: Work = Chunk> {
    workers: Vec<Worker<C>>,
    /// The worker and the bytes of each chunk out, oldest first.
    out: VecDeque<(usize, usize)>,
    /// The bytes of the chunks out.
    bytes_out: usize,
    next: usize,
    spare: Vec<C>,
}

impl Pool<Chunk> {
    /// Starts `threads` workers (0: as many as the machine has cores, at most
    /// [`MAX_AUTO_WORKERS`]), each with its own copy of `batcher`.
    pub fn start(batcher: &LineBatcher, threads: u64) -> Result<Pool> {
        let batcher = batcher.clone();
        Pool::start_with(threads, "jsonl-parse", move || {
            let mut batcher = batcher.clone();
            move |chunk: &Chunk| {
                if chunk.has_bad {
                    None
                } else {
                    batcher.batch(chunk.lines())
                }
            }
        })
    }
}

impl<C: Work> Pool<C> {
    /// Starts `threads` workers (0: as many as the machine has cores, at most
    /// [`MAX_AUTO_WORKERS`]), named `name`, each running a function `make` gives it on each
    /// chunk it is handed.
    pub fn start_with<F, M>(threads: u64, name: &str, make: M) -> Result<Pool<C>>
    where
        F: FnMut(&C) -> Option<RecordBatch> + Send + 'static,
        M: Fn() -> F,
    {
        let n = match usize::try_from(threads) {
            Ok(0) | Err(_) => std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(MAX_AUTO_WORKERS),
            Ok(n) => n,
        };
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let (jobs, todo) = sync_channel::<C>(DEPTH);
            let (give, done) = sync_channel::<Parsed<C>>(DEPTH);
            let mut work = make();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    for chunk in todo {
                        let batch = work(&chunk);
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
    pub fn fresh(&mut self) -> C {
        self.spare.pop().unwrap_or_default()
    }

    /// Keeps a written chunk's buffers for [`Pool::fresh`].
    pub fn recycle(&mut self, mut chunk: C) {
        chunk.clear();
        if self.spare.len() < 2 {
            self.spare.push(chunk);
        }
    }

    /// Whether `chunk` must wait for the oldest result before it is sent: every worker has
    /// its fill, or the chunks out and this one would pass [`BYTES_OUT`] (chunks of long
    /// lines then go one at a time).
    pub fn must_wait(&self, chunk: &C) -> bool {
        !self.out.is_empty()
            && (self.out.len() >= self.workers.len() * DEPTH
                || self.bytes_out + chunk.bytes() > BYTES_OUT)
    }

    /// Sends `chunk` to the next worker (after [`Pool::must_wait`] said it need not wait).
    pub fn submit(&mut self, chunk: C) -> Result<()> {
        let w = self.next;
        self.next = (self.next + 1) % self.workers.len();
        let bytes = chunk.bytes();
        let sent = self.workers[w]
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(chunk).is_ok());
        if !sent {
            return Err(anyhow!("a parsing thread stopped"));
        }
        self.out.push_back((w, bytes));
        self.bytes_out += bytes;
        Ok(())
    }

    /// The oldest result still out; `None` when none is.
    pub fn next(&mut self) -> Result<Option<Parsed<C>>> {
        let Some((w, bytes)) = self.out.pop_front() else {
            return Ok(None);
        };
        self.bytes_out -= bytes;
        self.workers[w]
            .done
            .as_ref()
            .and_then(|done| done.recv().ok())
            .map(Some)
            .ok_or_else(|| anyhow!("a parsing thread stopped"))
    }
}

impl<C: Work> Drop for Pool<C> {
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
