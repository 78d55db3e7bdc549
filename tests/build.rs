//! Binaries and tests of this package embed Python through the python provider. Without an
//! rpath to the build interpreter's libpython they would silently load another libpython
//! (and its stdlib) found on the system; link args from a library's build script do not
//! reach dependents, so every package that links pyo3 says this itself.
fn main() {
    pyo3_build_config::add_libpython_rpath_link_args();
    // A DT_RPATH (not DT_RUNPATH) is searched before LD_LIBRARY_PATH, so a misleading
    // LD_LIBRARY_PATH cannot swap in another libpython.
    println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags");
}
