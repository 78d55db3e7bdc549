//! The CPython side of toolbox's embedded Python backend, as a shared library.
//!
//! The `toolbox` binary links no libpython, so it starts where no Python is installed. When
//! `run_python_code` first needs the embedded interpreter, the python provider finds an
//! interpreter at run time, loads its libpython with `RTLD_GLOBAL`, then loads this library
//! (carried inside the binary) whose undefined `Py*` symbols resolve against it. Built for
//! CPython's stable ABI (abi3, 3.10 and later), one copy serves every version.
//!
//! Everything else of the backend (its thread, its queue, timeouts, sessions) stays in the
//! provider; this library only does what needs the C API, behind a small C ABI:
//!
//! | function | does |
//! |---|---|
//! | `toolbox_embed_abi` | the ABI version, [`ABI`]; the provider refuses any other |
//! | `toolbox_embed_start` | initialise CPython (program name, no environment, no signal handlers) and load the driver |
//! | `toolbox_embed_run` | run one driver request (a tape in, a tape out: see `toolbox-python-tape`) with the GIL held |
//! | `toolbox_embed_interrupt` | raise the driver's `ExecutionInterrupted` in a running job |
//! | `toolbox_embed_eval` | evaluate an expression (with an optional value, a tape, bound to `v`); the result as a tape |
//!
//! Text goes out through a `Sink` callback the caller gives, so no memory crosses the
//! boundary to be freed by the other side. No panic crosses it either: every entry point
//! catches it and answers with an error.

#![deny(missing_docs)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyModule};
use serde_json::json;
use toolbox_python_tape::{Reader, Writer};

mod pyvalue;

/// The version of the C ABI below; the provider checks it before any other call.
pub const ABI: u32 = 2;

/// Where an entry point writes its answer: called once, with `ctx` as given.
pub type Sink = extern "C" fn(ctx: *mut c_void, data: *const u8, len: usize);

/// The driver module and the interpreter thread's `threading.get_ident()`.
struct State {
    driver: Py<PyModule>,
    ident: u64,
}

static STATE: OnceLock<State> = OnceLock::new();

/// The job the interpreter thread is running (0: none). Written and read with the GIL held,
/// so a job is either skipped or visible to the interrupter as running, never neither.
static RUNNING: AtomicU64 = AtomicU64::new(0);

/// The ABI version this library speaks.
#[no_mangle]
pub extern "C" fn toolbox_embed_abi() -> u32 {
    ABI
}

/// Initialises CPython, unless it runs already, with `program` (a Python executable's path)
/// as its program name, so its `sys.prefix`, stdlib and `sys.executable` are that
/// interpreter's; then loads the driver from `driver` (its Python source) and configures it.
/// Answers 0 and `{"version": sys.version, "signal_interrupts": bool}`, or 1 and why not.
/// Must be called on the thread that will run every job; it leaves the GIL released.
///
/// # Safety
///
/// `program` and `driver` point at `program_len` and `driver_len` readable bytes; `sink` is
/// callable with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn toolbox_embed_start(
    program: *const u8,
    program_len: usize,
    driver: *const u8,
    driver_len: usize,
    sink: Sink,
    ctx: *mut c_void,
) -> c_int {
    // SAFETY: the caller's promise.
    let (program, driver) = unsafe { (bytes(program, program_len), bytes(driver, driver_len)) };
    answer(sink, ctx, guarded(|| start(program, driver)))
}

/// Runs the driver request `request` (a tape) as job `job`, with the GIL held: answers 0 and
/// the driver's answer (a tape), 1 and why it failed, or 2 when `abandoned` was set before the
/// job started. `cwd_fd`, unless negative, is the folder the code runs in (the driver
/// `fchdir`s into it).
///
/// # Safety
///
/// `request` points at `len` readable bytes; `abandoned` at a live `AtomicBool`; `sink` is
/// callable with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn toolbox_embed_run(
    job: u64,
    request: *const u8,
    len: usize,
    cwd_fd: c_int,
    abandoned: *const AtomicBool,
    sink: Sink,
    ctx: *mut c_void,
) -> c_int {
    // SAFETY: the caller's promise.
    let (request, abandoned) = unsafe { (bytes(request, len), &*abandoned) };
    match guarded(|| run(job, request, cwd_fd, abandoned)) {
        Err(why) if why == ABANDONED => {
            sink(ctx, why.as_ptr(), why.len());
            2
        }
        other => answer(sink, ctx, other),
    }
}

/// With the GIL taken: raises the driver's `ExecutionInterrupted` in job `job` if it is in
/// user code, with `reason` for its message. Answers 1 while the job still runs, else 0.
///
/// # Safety
///
/// `reason` points at `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn toolbox_embed_interrupt(job: u64, reason: *const u8, len: usize) -> c_int {
    // SAFETY: the caller's promise.
    let reason = String::from_utf8_lossy(unsafe { bytes(reason, len) }).into_owned();
    match guarded(|| Ok(Python::attach(|py| raise_in(py, job, &reason)))) {
        Ok(true) => 1,
        _ => 0,
    }
}

/// Evaluates the Python expression `code` in a fresh namespace where `v` is `value` (a tape,
/// or nothing when `value_len` is 0) and answers 0 and the result as a tape, or 1 and the
/// error. For tests and diagnostics; the interpreter must be started.
///
/// # Safety
///
/// `code` and `value` point at `code_len` and `value_len` readable bytes; `sink` is callable
/// with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn toolbox_embed_eval(
    code: *const u8,
    code_len: usize,
    value: *const u8,
    value_len: usize,
    sink: Sink,
    ctx: *mut c_void,
) -> c_int {
    // SAFETY: the caller's promise.
    let (code, value) = unsafe { (bytes(code, code_len), bytes(value, value_len)) };
    answer(sink, ctx, guarded(|| eval(code, value)))
}

/// The bytes at `ptr`, none when `len` is 0 (whatever `ptr` is).
///
/// # Safety
///
/// Unless `len` is 0, `ptr` points at `len` readable bytes that outlive the borrow.
unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 || ptr.is_null() {
        &[]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

/// Writes the answer or the error to `sink`: 0 for an answer, 1 for an error.
fn answer(sink: Sink, ctx: *mut c_void, result: Result<impl AsRef<[u8]>, String>) -> c_int {
    let (code, bytes) = match &result {
        Ok(bytes) => (0, bytes.as_ref()),
        Err(text) => (1, text.as_bytes()),
    };
    sink(ctx, bytes.as_ptr(), bytes.len());
    code
}

/// `f`, with a panic turned into an error: none may unwind into the caller.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        Err(format!("the embedded Python layer panicked: {what}"))
    })
}

/// What `run` answers for a job abandoned before it started.
const ABANDONED: &str = "abandoned";

fn start(program: &[u8], driver_source: &[u8]) -> Result<String, String> {
    if STATE.get().is_some() {
        return Err("the embedded interpreter was started already".into());
    }
    // SAFETY: CPython is checked, and initialised if needed, before any other use of it by
    // this library, on the thread the caller runs every job on.
    unsafe {
        if ffi::Py_IsInitialized() == 0 {
            initialise(program)?;
            // Initialisation leaves this thread holding the GIL; jobs attach as they come.
            ffi::PyEval_SaveThread();
        }
    }
    Python::attach(|py| -> PyResult<String> {
        let version: String = py.import("sys")?.getattr("version")?.extract()?;
        let source = CString::new(driver_source)
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("a NUL byte in the driver"))?;
        let driver = PyModule::from_code(py, &source, c"toolbox_driver.py", c"toolbox_driver")?;
        driver.call_method1("configure", (true,))?;
        let signal_interrupts = driver
            .getattr("_STATE")
            .and_then(|s| s.get_item("signal"))
            .and_then(|v| v.extract::<bool>())
            .unwrap_or(false);
        let ident: u64 = py
            .import("threading")?
            .call_method0("get_ident")?
            .extract()?;
        let _ = STATE.set(State {
            driver: driver.unbind(),
            ident,
        });
        Ok(json!({
            "version": version.replace('\n', " "),
            "signal_interrupts": signal_interrupts,
        })
        .to_string())
    })
    .map_err(|e| e.to_string())
}

/// A symbol of the loaded libpython, if this version has it.
fn symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym only reads the loader's tables; RTLD_DEFAULT searches the global scope,
    // where the provider put libpython.
    let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!found.is_null()).then_some(found)
}

/// Initialises CPython with `program` as its program name, ignoring PYTHON* environment
/// variables (meant for some other Python, they must not redirect the stdlib), installing no
/// signal handlers (signals belong to toolbox) and leaving argv and C stdio alone.
///
/// Python 3.14 and later have the PEP 741 configuration API, with no struct whose layout
/// changes between versions; earlier ones take the same settings through the (stable ABI)
/// legacy calls. Both are looked up at run time, so this library loads on every version.
///
/// # Safety
///
/// CPython is not initialised yet, and nothing else initialises it meanwhile.
unsafe fn initialise(program: &[u8]) -> Result<(), String> {
    let program = CString::new(program).map_err(|_| "a NUL byte in the interpreter path")?;
    if let Some(create) = symbol(c"PyInitConfig_Create") {
        // SAFETY: the PEP 741 functions, with their documented signatures.
        return unsafe { initialise_741(create, &program) };
    }
    type SetProgramName = unsafe extern "C" fn(*const libc::wchar_t);
    let set_program_name = symbol(c"Py_SetProgramName")
        .ok_or("this libpython has neither PyInitConfig_Create nor Py_SetProgramName")?;
    // SAFETY: Py_DecodeLocale may be called before initialisation; the wide string it returns
    // is leaked on purpose, as CPython keeps the pointer.
    let wide = unsafe { ffi::Py_DecodeLocale(program.as_ptr(), std::ptr::null_mut()) };
    if wide.is_null() {
        return Err("cannot decode the interpreter path".into());
    }
    // SAFETY: the symbol is Py_SetProgramName, whose signature this is; `wide` lives forever.
    unsafe {
        std::mem::transmute::<*mut c_void, SetProgramName>(set_program_name)(wide);
    }
    if let Some(flag) = symbol(c"Py_IgnoreEnvironmentFlag") {
        // SAFETY: an int global of libpython, read by initialisation, nothing else running.
        unsafe { *flag.cast::<c_int>() = 1 };
    }
    // SAFETY: 0: no signal handlers. The legacy ("compat") configuration parses no argv and
    // leaves C stdio as it is.
    unsafe { ffi::Py_InitializeEx(0) };
    // SAFETY: a plain query.
    if unsafe { ffi::Py_IsInitialized() } == 0 {
        return Err("Py_InitializeEx did not initialise Python".into());
    }
    Ok(())
}

/// Initialisation through PEP 741's `PyInitConfig` (Python 3.14+).
///
/// # Safety
///
/// `create` is `PyInitConfig_Create`; the rest as [`initialise`].
unsafe fn initialise_741(create: *mut c_void, program: &CStr) -> Result<(), String> {
    type Create = unsafe extern "C" fn() -> *mut c_void;
    type Free = unsafe extern "C" fn(*mut c_void);
    type SetInt = unsafe extern "C" fn(*mut c_void, *const c_char, i64) -> c_int;
    type SetStr = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> c_int;
    type Init = unsafe extern "C" fn(*mut c_void) -> c_int;
    type GetError = unsafe extern "C" fn(*mut c_void, *mut *const c_char) -> c_int;
    let find = |name: &CStr| symbol(name).ok_or_else(|| format!("libpython lacks {name:?}"));
    // SAFETY: each symbol is the PEP 741 function of that name, with that signature.
    unsafe {
        let create = std::mem::transmute::<*mut c_void, Create>(create);
        let free = std::mem::transmute::<*mut c_void, Free>(find(c"PyInitConfig_Free")?);
        let set_int = std::mem::transmute::<*mut c_void, SetInt>(find(c"PyInitConfig_SetInt")?);
        let set_str = std::mem::transmute::<*mut c_void, SetStr>(find(c"PyInitConfig_SetStr")?);
        let init = std::mem::transmute::<*mut c_void, Init>(find(c"Py_InitializeFromInitConfig")?);
        let get_error =
            std::mem::transmute::<*mut c_void, GetError>(find(c"PyInitConfig_GetError")?);
        let config = create();
        if config.is_null() {
            return Err("PyInitConfig_Create failed".into());
        }
        // PyInitConfig_Create starts from the isolated configuration (no environment, no
        // signal handlers, no argv); keep the user's site-packages, as the legacy path does.
        let ok = set_str(config, c"program_name".as_ptr(), program.as_ptr()) == 0
            && set_int(config, c"isolated".as_ptr(), 0) == 0
            && set_int(config, c"use_environment".as_ptr(), 0) == 0
            && set_int(config, c"user_site_directory".as_ptr(), 1) == 0
            && init(config) == 0;
        let result = if ok {
            Ok(())
        } else {
            let mut message: *const c_char = std::ptr::null();
            get_error(config, &mut message);
            Err(if message.is_null() {
                "initialising Python failed".to_string()
            } else {
                format!(
                    "initialising Python failed: {}",
                    CStr::from_ptr(message).to_string_lossy()
                )
            })
        };
        free(config);
        result
    }
}

fn state() -> Result<&'static State, String> {
    STATE
        .get()
        .ok_or_else(|| "the embedded interpreter was not started".to_string())
}

fn run(job: u64, request: &[u8], cwd_fd: c_int, abandoned: &AtomicBool) -> Result<Vec<u8>, String> {
    let state = state()?;
    Python::attach(|py| {
        RUNNING.store(job, Ordering::SeqCst);
        if abandoned.load(Ordering::SeqCst) {
            RUNNING.store(0, Ordering::SeqCst);
            return Err(ABANDONED.to_string());
        }
        let driver = state.driver.bind(py);
        let response = pyvalue::from_tape(py, &mut Reader::new(request))
            .and_then(|request| {
                if cwd_fd >= 0 {
                    request.set_item(pyo3::intern!(py, "cwd_fd"), cwd_fd)?;
                }
                driver.call_method1(pyo3::intern!(py, "handle_object"), (request,))
            })
            .and_then(|answer| {
                let mut tape = Writer::with_capacity(512);
                pyvalue::to_tape(&answer, &mut tape)?;
                Ok(tape.bytes)
            })
            .map_err(|e| e.to_string());
        // An interrupt that arrived too late to hit the user's code must not hit the next
        // job. Neither step runs Python bytecode, so neither can trigger it.
        // SAFETY: the GIL is held; a NULL exception clears the pending one.
        unsafe {
            ffi::PyThreadState_SetAsyncExc(state.ident as _, std::ptr::null_mut());
        }
        if let Ok(interrupt) = driver.getattr(pyo3::intern!(py, "_INTERRUPT")) {
            let _ = interrupt.set_item(pyo3::intern!(py, "armed"), false);
        }
        RUNNING.store(0, Ordering::SeqCst);
        response
    })
}

/// With the GIL held: raises ExecutionInterrupted in job `id` if it is in user code.
/// Returns whether the job is still running.
fn raise_in(py: Python<'_>, id: u64, reason: &str) -> bool {
    if RUNNING.load(Ordering::SeqCst) != id {
        return false;
    }
    let Some(state) = STATE.get() else {
        return false;
    };
    let driver = state.driver.bind(py);
    // Attribute and item reads only: running bytecode here could hand the GIL back to the
    // interpreter thread between this check and the raise.
    let in_user_code = driver
        .getattr("_STATE")
        .and_then(|state| state.get_item("current"))
        .and_then(|run| run.getattr("in_user_code"))
        .and_then(|v| v.extract::<bool>())
        .unwrap_or(false);
    if !in_user_code {
        // The driver is compiling or saving figures; it finishes on its own.
        return true;
    }
    if let Ok(interrupt) = driver.getattr("_INTERRUPT") {
        let _ = interrupt.set_item("reason", reason);
        let _ = interrupt.set_item("armed", true);
    }
    if let Ok(exc) = driver.getattr("ExecutionInterrupted") {
        // SAFETY: the GIL is held; CPython takes its own reference to the class.
        unsafe {
            ffi::PyThreadState_SetAsyncExc(state.ident as _, exc.as_ptr());
        }
    }
    true
}

fn eval(code: &[u8], value: &[u8]) -> Result<Vec<u8>, String> {
    state()?;
    let code = CString::new(code).map_err(|_| "a NUL byte in the expression")?;
    Python::attach(|py| -> PyResult<Vec<u8>> {
        let locals = PyDict::new(py);
        if !value.is_empty() {
            locals.set_item("v", pyvalue::from_tape(py, &mut Reader::new(value))?)?;
        }
        let result = py.eval(&code, None, Some(&locals))?;
        let mut tape = Writer::default();
        pyvalue::to_tape(&result, &mut tape)?;
        Ok(tape.bytes)
    })
    .map_err(|e| e.to_string())
}
