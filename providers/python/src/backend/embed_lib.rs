//! The embedded backend's CPython layer, seen from the provider: a found interpreter's
//! libpython, loaded with `RTLD_GLOBAL`, then `providers/python/embed` (built by build.rs
//! for CPython's stable ABI and carried in the binary as bytes), loaded from memory, its
//! undefined `Py*` symbols resolving against that libpython. Each entry point of its C ABI
//! gets a safe method here; text comes back through [`collect`].

use std::ffi::{c_int, c_void};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use serde_json::Value;
use toolbox_host::dylib::Library;

/// The CPython layer, as build.rs built it.
static LAYER: &[u8] = include_bytes!(env!("TOOLBOX_PYTHON_EMBED_LIB"));

/// The C ABI version this provider speaks (the layer's `ABI`).
const ABI: u32 = 2;

type Sink = extern "C" fn(*mut c_void, *const u8, usize);
type AbiFn = unsafe extern "C" fn() -> u32;
type StartFn = unsafe extern "C" fn(*const u8, usize, *const u8, usize, Sink, *mut c_void) -> c_int;
type RunFn = unsafe extern "C" fn(
    u64,
    *const u8,
    usize,
    c_int,
    *const AtomicBool,
    Sink,
    *mut c_void,
) -> c_int;
type InterruptFn = unsafe extern "C" fn(u64, *const u8, usize) -> c_int;
type EvalFn = unsafe extern "C" fn(*const u8, usize, *const u8, usize, Sink, *mut c_void) -> c_int;

/// Makes one call into the layer with [`collect`] as its sink: the call's code and what it
/// wrote.
fn collected(call: impl FnOnce(Sink, *mut c_void) -> c_int) -> (c_int, Vec<u8>) {
    let mut out = Vec::new();
    let code = call(collect, (&mut out as *mut Vec<u8>).cast());
    (code, out)
}

/// The sink every call hands the layer: appends to the `Vec<u8>` at `ctx`.
extern "C" fn collect(ctx: *mut c_void, data: *const u8, len: usize) {
    if ctx.is_null() || (data.is_null() && len > 0) {
        return;
    }
    // SAFETY: `ctx` is the `&mut Vec<u8>` `collected` passed for this call, and `data`
    // points at `len` bytes the layer owns for the length of the call.
    unsafe {
        let out = &mut *ctx.cast::<Vec<u8>>();
        if len > 0 {
            out.extend_from_slice(std::slice::from_raw_parts(data, len));
        }
    }
}

/// What `start` learnt.
pub(crate) struct Started {
    /// The started interpreter's `sys.version`, on one line.
    pub version: String,
    /// Whether the driver's SIGUSR2 handler is installed.
    pub signal_interrupts: bool,
}

/// How a job ended.
pub(crate) enum RunAnswer {
    /// The driver's answer.
    Answer(Value),
    /// The driver (or the layer) failed.
    Failed(String),
    /// The job was abandoned before it started.
    Abandoned,
}

/// The loaded layer and libpython (never unloaded).
pub(crate) struct EmbedLib {
    start: StartFn,
    run: RunFn,
    interrupt: InterruptFn,
    /// Only tests evaluate expressions (see `embedded::eval`).
    #[cfg_attr(not(test), allow(dead_code))]
    eval: EvalFn,
    /// The libpython file the loader mapped.
    pub libpython: PathBuf,
    _python: Library,
    _layer: Library,
}

impl EmbedLib {
    /// Loads `libpython`, then the layer.
    pub fn load(libpython: &Path) -> Result<EmbedLib, String> {
        let python = Library::open_global(libpython)?;
        python.symbol(c"Py_IsInitialized")?;
        let libpython = python
            .file_of(c"Py_IsInitialized")
            .unwrap_or_else(|| libpython.to_path_buf());
        let layer = Library::from_bytes("toolbox-python-embed", LAYER)?;
        // SAFETY: each symbol is the layer's function of that name, with the signature its
        // ABI version (checked first) gives it.
        unsafe {
            let abi =
                std::mem::transmute::<*mut c_void, AbiFn>(layer.symbol(c"toolbox_embed_abi")?)();
            if abi != ABI {
                return Err(format!(
                    "the embedded Python layer speaks ABI {abi}, this provider {ABI}"
                ));
            }
            Ok(EmbedLib {
                start: std::mem::transmute::<*mut c_void, StartFn>(
                    layer.symbol(c"toolbox_embed_start")?,
                ),
                run: std::mem::transmute::<*mut c_void, RunFn>(layer.symbol(c"toolbox_embed_run")?),
                interrupt: std::mem::transmute::<*mut c_void, InterruptFn>(
                    layer.symbol(c"toolbox_embed_interrupt")?,
                ),
                eval: std::mem::transmute::<*mut c_void, EvalFn>(
                    layer.symbol(c"toolbox_embed_eval")?,
                ),
                libpython,
                _python: python,
                _layer: layer,
            })
        }
    }

    /// Initialises CPython with `program` as its program name and loads the driver; on the
    /// thread that will run every job.
    pub fn start(&self, program: &Path, driver: &str) -> Result<Started, String> {
        use std::os::unix::ffi::OsStrExt;
        let program = program.as_os_str().as_bytes();
        // SAFETY: both slices outlive the call.
        let (code, out) = collected(|sink, ctx| unsafe {
            (self.start)(
                program.as_ptr(),
                program.len(),
                driver.as_ptr(),
                driver.len(),
                sink,
                ctx,
            )
        });
        let text = String::from_utf8_lossy(&out);
        if code != 0 {
            return Err(text.into_owned());
        }
        let answer: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        Ok(Started {
            version: answer["version"].as_str().unwrap_or_default().to_string(),
            signal_interrupts: answer["signal_interrupts"].as_bool().unwrap_or(false),
        })
    }

    /// Runs the driver request `request` as job `job`; see `toolbox_embed_run`.
    pub fn run(
        &self,
        job: u64,
        request: &Value,
        cwd: Option<RawFd>,
        abandoned: &AtomicBool,
    ) -> RunAnswer {
        let request = toolbox_python_tape::encode(request);
        // SAFETY: the request and `abandoned` outlive the call.
        let (code, out) = collected(|sink, ctx| unsafe {
            (self.run)(
                job,
                request.as_ptr(),
                request.len(),
                cwd.unwrap_or(-1),
                abandoned,
                sink,
                ctx,
            )
        });
        match code {
            0 => match toolbox_python_tape::decode(&out) {
                Ok(answer) => RunAnswer::Answer(answer),
                Err(e) => RunAnswer::Failed(format!("a bad answer from the CPython layer: {e}")),
            },
            2 => RunAnswer::Abandoned,
            _ => RunAnswer::Failed(String::from_utf8_lossy(&out).into_owned()),
        }
    }

    /// Raises the driver's interrupt in job `job` if it is in user code; whether it still
    /// runs. Takes the GIL, so it waits for as long as a C call holds it.
    pub fn interrupt(&self, job: u64, reason: &str) -> bool {
        // SAFETY: the reason outlives the call.
        unsafe { (self.interrupt)(job, reason.as_ptr(), reason.len()) == 1 }
    }

    /// Evaluates `code` with `v` bound to `value`; the result as JSON.
    #[cfg(test)]
    pub fn eval(&self, code: &str, value: Option<&Value>) -> Result<Value, String> {
        let value = value.map(toolbox_python_tape::encode).unwrap_or_default();
        // SAFETY: both texts outlive the call.
        let (code, out) = collected(|sink, ctx| unsafe {
            (self.eval)(
                code.as_ptr(),
                code.len(),
                value.as_ptr(),
                value.len(),
                sink,
                ctx,
            )
        });
        if code != 0 {
            return Err(String::from_utf8_lossy(&out).into_owned());
        }
        toolbox_python_tape::decode(&out)
    }
}
