//! Tasks that a worker thread outside the async runtime may carry on with, in place.
//!
//! A tool call that hands work to a dedicated thread (embedded Python runs on the thread that
//! started the interpreter) waits for the answer on a channel. As a plain tokio task, the
//! answer wakes the task, and a runtime worker that was asleep has to be woken to finish the
//! call: one more thread hand-off between the work and the reply. On this kind of machine
//! that hand-off costs more than the rest of the call's tail.
//!
//! A task started with [`spawn`] is polled on the runtime as usual, except when it is woken
//! from inside [`with_inline_wakeups`] on the thread that finished the work. It is then
//! polled right there, at once: the call's tail (its trajectory line and its reply) runs on
//! the thread that already holds the answer, and nothing else has to wake up.
//!
//! Anything the task waits for later (a timer, another channel) wakes it on the runtime
//! again. A task is polled by one thread at a time; a wake-up that arrives while it is being
//! polled makes that poll go round once more. A panic in the task is caught and logged, on
//! either side.
//!
//! The same thread may also take up [`IdleWork`] while it has nothing to do: `toolbox mcp`
//! offers its input in the [`IdleSlot`] of the provider that owns such a thread, so that a request arriving while the embedded Python thread is idle
//! wakes that thread, which reads it, starts the call in place ([`spawn_here`]), runs the
//! cell and writes the reply, with no other thread involved. While the thread is busy, the
//! runtime reads the input as usual.

use std::cell::Cell;
use std::future::Future;
use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use tokio::runtime::Handle;

type BoxedTask = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Nobody polls the task and no wake-up is pending.
const IDLE: u8 = 0;
/// A poll has been asked for (on the runtime, or about to happen in place).
const SCHEDULED: u8 = 1;
/// Being polled.
const RUNNING: u8 = 2;
/// Being polled, and woken meanwhile: poll once more.
const NOTIFIED: u8 = 3;
/// Finished; wake-ups are ignored.
const DONE: u8 = 4;

thread_local! {
    static INLINE: Cell<bool> = const { Cell::new(false) };
}

struct Task {
    state: AtomicU8,
    future: Mutex<Option<BoxedTask>>,
    runtime: Handle,
}

/// Starts `future` on the current runtime as a task that can be continued in place (see the
/// module documentation). Must be called from within a tokio runtime.
pub fn spawn(future: impl Future<Output = ()> + Send + 'static) {
    start(future);
}

fn start(future: impl Future<Output = ()> + Send + 'static) -> Arc<Task> {
    let task = Task::new(future);
    task.schedule_on_runtime();
    task
}

/// Starts `future` as a task like [`spawn`] does, but polls it for the first time right
/// here, on the calling thread, before returning. For a thread that took up [`IdleWork`].
/// Must be called with a tokio runtime available (inside the runtime, or with a handle
/// entered).
pub fn spawn_here(future: impl Future<Output = ()> + Send + 'static) {
    let task = Task::new(future);
    // What this first poll wakes goes to the runtime, as in any other poll.
    let inline = INLINE.with(|inline| inline.replace(false));
    task.run();
    INLINE.with(|was| was.set(inline));
}

/// Work a dedicated thread (the embedded Python thread) may take up while it has nothing
/// else to do: a descriptor to wait on, and what to do when it is readable.
///
/// The thread calls [`watch`](Self::watch)`(true)` before it waits on [`fd`](Self::fd),
/// [`take`](Self::take) when the descriptor is readable, and `watch(false)` before it turns
/// to anything else, so that the work's owner takes over meanwhile.
pub trait IdleWork: Send + Sync {
    /// Readable when there is work. Stays open as long as this value lives.
    fn fd(&self) -> RawFd;
    /// True once there will never be work again (the input ended): stop waiting on it.
    fn finished(&self) -> bool;
    /// Whether the idle thread is watching `fd` (its owner holds back meanwhile).
    fn watch(&self, watching: bool);
    /// Takes the work that is there, on the idle thread; returns when it is started. What
    /// takes time is started with [`spawn_here`] after `watch(false)`.
    fn take(&self);
}

/// Where a thread that takes up [`IdleWork`] finds it: the work on offer, and how to wake
/// the threads that watch for it.
///
/// The slot belongs to whoever owns such a thread: the python provider owns the embedded
/// interpreter's, and hands it out through `ToolProvider::idle_slot`. A front end with work to
/// offer (`toolbox mcp`'s input) asks the executor for the providers' slots and offers its
/// work there; nothing about it is process-wide, and the provider never names a front end.
#[derive(Default)]
pub struct IdleSlot {
    idle: Mutex<Idle>,
}

#[derive(Default)]
struct Idle {
    work: Option<Arc<dyn IdleWork>>,
    /// Rung when `work` changes, so that a waiting thread looks again.
    bells: Vec<Arc<dyn Fn() + Send + Sync>>,
}

impl IdleSlot {
    fn idle(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Offers `work` to the threads watching this slot until the returned value is dropped.
    pub fn offer(self: &Arc<Self>, work: Arc<dyn IdleWork>) -> IdleOffer {
        let bells = {
            let mut idle = self.idle();
            idle.work = Some(work.clone());
            idle.bells.clone()
        };
        bells.iter().for_each(|ring| ring());
        IdleOffer {
            slot: self.clone(),
            work,
        }
    }

    /// The work on offer, if any.
    pub fn work(&self) -> Option<Arc<dyn IdleWork>> {
        self.idle().work.clone()
    }

    /// Registers a thread that takes up this slot's work: `ring` wakes it when the offer
    /// changes.
    pub fn on_change(&self, ring: Arc<dyn Fn() + Send + Sync>) {
        self.idle().bells.push(ring);
    }
}

impl std::fmt::Debug for IdleSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleSlot")
            .field("offered", &self.idle().work.is_some())
            .finish_non_exhaustive()
    }
}

/// Withdraws its work from the slot when dropped.
pub struct IdleOffer {
    slot: Arc<IdleSlot>,
    work: Arc<dyn IdleWork>,
}

impl Drop for IdleOffer {
    fn drop(&mut self) {
        let bells = {
            let mut idle = self.slot.idle();
            if idle
                .work
                .as_ref()
                .is_some_and(|current| Arc::ptr_eq(current, &self.work))
            {
                idle.work = None;
            }
            idle.bells.clone()
        };
        bells.iter().for_each(|ring| ring());
    }
}

/// Runs `f`; a task started with [`spawn`] that `f` wakes is polled in place, on this thread,
/// before `f`'s wake-up call returns. For a thread outside the runtime that hands results
/// back (with the runtime's handle available to what it polls).
pub fn with_inline_wakeups<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            INLINE.with(|inline| inline.set(self.0));
        }
    }
    let _reset = Reset(INLINE.with(|inline| inline.replace(true)));
    f()
}

impl Task {
    /// A task about to be polled for the first time, on the current runtime.
    fn new(future: impl Future<Output = ()> + Send + 'static) -> Arc<Task> {
        Arc::new(Task {
            state: AtomicU8::new(SCHEDULED),
            future: Mutex::new(Some(Box::pin(future))),
            runtime: Handle::current(),
        })
    }

    fn schedule_on_runtime(self: &Arc<Self>) {
        let task = self.clone();
        self.runtime.spawn(async move { task.run() });
    }

    /// Polls until the task is finished or nobody woke it during the last poll.
    fn run(self: &Arc<Self>) {
        loop {
            self.state.store(RUNNING, Ordering::Release);
            let finished = {
                let mut slot = self.future.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(future) = slot.as_mut() else {
                    return;
                };
                let waker = Waker::from(self.clone());
                let mut cx = Context::from_waker(&waker);
                let _runtime = self.runtime.enter();
                let finished =
                    match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx))) {
                        Ok(Poll::Pending) => false,
                        Ok(Poll::Ready(())) => true,
                        Err(panic) => {
                            let message = toolbox_core::panic::message(&*panic);
                            tracing::error!("a task (a tool call) panicked: {message}");
                            true
                        }
                    };
                if finished {
                    // Dropped here, under the lock, by whichever thread finished it.
                    *slot = None;
                }
                finished
            };
            if finished {
                self.state.store(DONE, Ordering::Release);
                return;
            }
            if self
                .state
                .compare_exchange(RUNNING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
            // NOTIFIED: woken while polled; go round again.
        }
    }
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            let next = match state {
                IDLE => SCHEDULED,
                RUNNING => NOTIFIED,
                _ => return,
            };
            match self
                .state
                .compare_exchange(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        if state == RUNNING {
            return;
        }
        if INLINE.with(Cell::get) {
            // Not recursively: what the poll wakes in turn goes to the runtime.
            INLINE.with(|inline| inline.set(false));
            self.run();
            INLINE.with(|inline| inline.set(true));
        } else {
            self.schedule_on_runtime();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    /// Until the task has been polled and waits (bounded: a regression fails, never hangs).
    fn wait_until_idle(task: &Arc<Task>) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while task.state.load(Ordering::SeqCst) != IDLE {
            assert!(
                std::time::Instant::now() < deadline,
                "the task never waited"
            );
            std::thread::yield_now();
        }
    }

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_string()
    }

    /// The tail after a channel answered by a helper thread runs on that thread when the
    /// helper wakes it inside `with_inline_wakeups`, and on the runtime otherwise; what the
    /// task waits for next (a timer) wakes it on the runtime either way.
    #[test]
    fn the_waker_thread_continues_the_task_only_when_it_says_so() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rt-worker")
            .enable_all()
            .build()
            .unwrap();
        for inline in [true, false] {
            let (job_tx, job_rx) = std::sync::mpsc::channel::<tokio::sync::oneshot::Sender<u32>>();
            let (go, go_rx) = std::sync::mpsc::channel::<()>();
            let helper = std::thread::Builder::new()
                .name("helper".into())
                .spawn(move || {
                    let reply = job_rx.recv().unwrap();
                    // Only once the task waits for the answer (else it would simply find it).
                    go_rx.recv().unwrap();
                    let send = || reply.send(7).unwrap();
                    if inline {
                        with_inline_wakeups(send)
                    } else {
                        send()
                    }
                })
                .unwrap();
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            let task = runtime.block_on(async move {
                start(async move {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    job_tx.send(tx).unwrap();
                    let answer = rx.await.unwrap();
                    let tail = thread_name();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    done_tx.send((answer, tail, thread_name())).unwrap();
                })
            });
            wait_until_idle(&task);
            go.send(()).unwrap();
            helper.join().unwrap();
            let (answer, tail, after_sleep) =
                done_rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(answer, 7);
            assert_eq!(tail, if inline { "helper" } else { "rt-worker" });
            assert_eq!(after_sleep, "rt-worker");
        }
    }

    struct Pipe {
        read: std::os::fd::OwnedFd,
        taken: std::sync::atomic::AtomicUsize,
    }

    impl IdleWork for Pipe {
        fn fd(&self) -> RawFd {
            std::os::fd::AsRawFd::as_raw_fd(&self.read)
        }
        fn finished(&self) -> bool {
            false
        }
        fn watch(&self, _watching: bool) {}
        fn take(&self) {
            self.taken.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// An offer rings the idle threads' bells, is seen by `work` while it stands, and
    /// is withdrawn (with another ring) when dropped; an older offer's drop does not
    /// withdraw a newer one. Calls started in place run their first poll before
    /// `spawn_here` returns.
    #[test]
    fn idle_work_is_offered_until_withdrawn_and_calls_start_in_place() {
        let slot = Arc::new(IdleSlot::default());
        let rings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = rings.clone();
        slot.on_change(Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        }));
        let (read, _write) = std::io::pipe().unwrap();
        let read: std::os::fd::OwnedFd = read.into();
        let work = Arc::new(Pipe {
            read,
            taken: Default::default(),
        });
        let before = rings.load(Ordering::SeqCst);
        let first = slot.offer(work.clone());
        assert!(rings.load(Ordering::SeqCst) > before);
        let offered = slot.work().expect("offered");
        offered.take();
        assert_eq!(work.taken.load(Ordering::SeqCst), 1);
        let (read, _write2) = std::io::pipe().unwrap();
        let newer = Arc::new(Pipe {
            read: read.into(),
            taken: Default::default(),
        });
        let second = slot.offer(newer);
        drop(first);
        assert!(slot.work().is_some(), "the newer offer stands");
        let rung = rings.load(Ordering::SeqCst);
        drop(second);
        assert!(slot.work().is_none());
        assert!(rings.load(Ordering::SeqCst) > rung);

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let first_poll = Arc::new(AtomicBool::new(false));
        let polled = first_poll.clone();
        spawn_here(async move {
            polled.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        });
        assert!(first_poll.load(Ordering::SeqCst));
    }

    #[test]
    fn a_panicking_task_is_contained() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let (job_tx, job_rx) = std::sync::mpsc::channel::<tokio::sync::oneshot::Sender<()>>();
        let seen = ran.clone();
        let task = runtime.block_on(async move {
            start(async move {
                let (tx, rx) = tokio::sync::oneshot::channel();
                job_tx.send(tx).unwrap();
                rx.await.unwrap();
                seen.store(true, Ordering::SeqCst);
                panic!("boom");
            })
        });
        let reply = job_rx.recv().unwrap();
        wait_until_idle(&task);
        // The helper survives the task's panic.
        with_inline_wakeups(|| reply.send(()).unwrap());
        assert!(ran.load(Ordering::SeqCst));
    }
}
