//! Every Python session's state, in one structure the provider owns.
//!
//! [`Sessions`] holds what each backend keeps per session: the embedded interpreter's
//! namespaces ([`embedded::Namespaces`]), the isolated workers and the Jupyter kernels (each a
//! [`Slots`] table), which sessions were told where their code runs, and the clock that says
//! when to look for sessions to evict ([`crate::evict`]'s rule) and runs the sweeper.
//!
//! There is one per process, [`Sessions::shared`]: the embedded interpreter is one per
//! process (its namespaces are that interpreter's), and the `python` `CodeRunner` is a plain
//! function that reaches the sessions without a provider. [`crate::PythonProvider`] holds a
//! reference to it, and every call passes it down; no backend keeps state of its own beyond
//! the interpreter itself.
//!
//! This module knows what each backend keeps and hands each backend its part
//! ([`Sessions::embedded`], [`Sessions::isolated`], [`Sessions::jupyter`]); the backends do
//! not know this module.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use toolbox_host::ToolContext;

use crate::backend::Backend;
use crate::embedded::{self, Embedded};
use crate::evict::{SessionLimits, Slots, LOOK_EVERY, SWEEP_EVERY};
use crate::isolated::{self, Isolated};
use crate::jupyter::{self, Jupyter};

/// See the module's documentation.
#[derive(Default)]
pub(crate) struct Sessions {
    /// The embedded interpreter's namespaces.
    namespaces: embedded::Namespaces,
    /// The isolated backend's workers, one slot per session.
    workers: Slots<isolated::Slot>,
    /// The jupyter backend's kernels, one slot per connection file or per started session.
    kernels: Slots<jupyter::Slot>,
    /// Sessions (per workspace root) that were told where their code runs (see
    /// `run::run_tool`).
    told_working_folder: Mutex<HashSet<(PathBuf, String)>>,
    clock: Mutex<Clock>,
}

/// When the sessions were last looked at for eviction, and by which rule.
#[derive(Default)]
struct Clock {
    /// The rule in force: the latest configuration a call brought.
    limits: SessionLimits,
    looked: Option<Instant>,
    sweeper: bool,
}

/// At most this many sessions are remembered as told where their code runs.
const MAX_TOLD: usize = 100_000;

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

impl Sessions {
    /// The process's sessions.
    pub fn shared() -> &'static Sessions {
        static SHARED: LazyLock<Sessions> = LazyLock::new(Sessions::default);
        &SHARED
    }

    /// The embedded backend, over the interpreter's namespaces.
    pub fn embedded(&self) -> Embedded<'_> {
        Embedded {
            namespaces: &self.namespaces,
        }
    }

    /// The isolated backend, over its workers.
    pub fn isolated(&self) -> Isolated<'_> {
        Isolated {
            workers: &self.workers,
        }
    }

    /// The jupyter backend, over its kernels.
    pub fn jupyter(&self) -> Jupyter<'_> {
        Jupyter {
            kernels: &self.kernels,
        }
    }

    /// Called as a call starts, with its configuration's rule: records the rule, starts the
    /// sweeper once, and says whether this call should look for sessions to evict now (at
    /// most once a [`LOOK_EVERY`]).
    pub fn on_call(&'static self, limits: SessionLimits) -> bool {
        let mut clock = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        clock.limits = limits;
        if !clock.sweeper {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                clock.sweeper = true;
                handle.spawn(async move {
                    loop {
                        tokio::time::sleep(SWEEP_EVERY).await;
                        self.sweep();
                    }
                });
            }
        }
        let now = Instant::now();
        let look = clock
            .looked
            .is_none_or(|t| now.duration_since(t) >= LOOK_EVERY);
        if look {
            clock.looked = Some(now);
        }
        look
    }

    /// Every backend looks once, by the rule in force.
    pub fn sweep(&self) {
        let limits = self.clock.lock().unwrap_or_else(|e| e.into_inner()).limits;
        self.isolated().evict(limits, None);
        self.jupyter().evict(limits, None);
        self.embedded().evict(limits, None);
    }

    /// Whether this is the first `run_python_code` call of the call's session in this
    /// process (per workspace root): only that one looks at whether the scratchpad is new.
    pub fn first_result_of(&self, ctx: &ToolContext) -> bool {
        let key = (
            ctx.workspace.root().to_path_buf(),
            ctx.session_id.to_string(),
        );
        let mut told = self
            .told_working_folder
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if told.len() >= MAX_TOLD {
            // Bounded: past this, sessions are not told again rather than remembered forever.
            return false;
        }
        told.insert(key)
    }
}
