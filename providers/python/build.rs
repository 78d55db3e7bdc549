//! Bakes the build interpreter into the crate and makes this package's own test binaries
//! load the libpython they were linked against.
//!
//! - `sys.executable` inside an embedded interpreter is guessed from PATH and can be wrong,
//!   so the build interpreter's path, version and prefix are recorded here (by running it)
//!   and used at run time: as the embedded interpreter's program name (which fixes its
//!   `sys.prefix` and stdlib), for `-m pip`, and for isolated workers.
//! - `add_libpython_rpath_link_args` only reaches this package's own binaries (tests,
//!   benches); dependents need their own build.rs. `--disable-new-dtags` makes the rpath a
//!   DT_RPATH, which the loader honours *before* LD_LIBRARY_PATH (a DT_RUNPATH comes after
//!   it, so `LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu` would load Debian's libpython).
use std::process::Command;

fn main() {
    pyo3_build_config::add_libpython_rpath_link_args();
    println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
    println!("cargo:rerun-if-changed=build.rs");

    let config = pyo3_build_config::get();
    let executable = config
        .executable()
        .expect("pyo3 found no Python executable; set PYO3_PYTHON")
        .to_string();
    // One value per line; sys.version has no newline in CPython builds we accept.
    let probe = "import sys; print(sys.version.replace('\\n', ' ')); print(sys.prefix); print(sys.base_prefix); print(sys.executable)";
    let out = Command::new(&executable)
        .args(["-I", "-c", probe])
        .output()
        .unwrap_or_else(|e| panic!("cannot run the build interpreter {executable}: {e}"));
    assert!(
        out.status.success(),
        "the build interpreter {executable} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("the build interpreter printed UTF-8");
    let mut lines = text.lines();
    let mut next = |what: &str| {
        lines
            .next()
            .unwrap_or_else(|| panic!("the build interpreter did not print {what}"))
            .to_string()
    };
    let version = next("sys.version");
    let prefix = next("sys.prefix");
    let base_prefix = next("sys.base_prefix");
    let sys_executable = next("sys.executable");
    // Prefer the interpreter's own idea of its path (pyenv shims resolve to the real binary).
    let executable = if sys_executable.is_empty() {
        executable
    } else {
        sys_executable
    };
    println!("cargo:rustc-env=TOOLBOX_BUILD_PYTHON_EXECUTABLE={executable}");
    println!("cargo:rustc-env=TOOLBOX_BUILD_PYTHON_VERSION={version}");
    println!("cargo:rustc-env=TOOLBOX_BUILD_PYTHON_PREFIX={prefix}");
    println!("cargo:rustc-env=TOOLBOX_BUILD_PYTHON_BASE_PREFIX={base_prefix}");
    println!(
        "cargo:rustc-env=TOOLBOX_BUILD_PYTHON_LIBDIR={}",
        config.lib_dir().unwrap_or("")
    );
}
