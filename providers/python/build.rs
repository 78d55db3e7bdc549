//! Builds the embedded backend's CPython layer, `embed/` (the cdylib
//! `toolbox-python-embed`, for CPython's stable ABI), and hands its bytes to the crate,
//! which carries them inside the binary and loads them after a libpython found at run time
//! (see src/backend/embedded/). So the binary links no libpython and needs no Python to
//! start, and no Python is needed to build it either.
//!
//! A cdylib cannot be a dependency, so this runs a second cargo, in a target folder of its
//! own (`<target>/embed`, shared by every profile of the outer build: the library is always
//! built optimised) so it never waits on the outer build's lock. It reruns only when the
//! library's sources, or the lock file, change.

use std::path::{Path, PathBuf};
use std::process::Command;

const LIB: &str = "libtoolbox_python_embed.so";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo did not set {name}"))
}

fn main() {
    println!("cargo:rerun-if-changed=embed/src");
    println!("cargo:rerun-if-changed=embed/Cargo.toml");
    // The value format it shares with the provider.
    println!("cargo:rerun-if-changed=tape/src");
    println!("cargo:rerun-if-changed=tape/Cargo.toml");
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    println!("cargo:rerun-if-changed=build.rs");

    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env("OUT_DIR"));
    // OUT_DIR is <target>[/<triple>]/<profile>/build/<package>-<hash>/out.
    let target_root = out_dir
        .ancestors()
        .nth(4)
        .unwrap_or_else(|| panic!("unexpected OUT_DIR {}", out_dir.display()));
    let embed_target = target_root.join("embed");
    let target = env("TARGET");
    let cross = target != env("HOST");

    let mut cargo = Command::new(env("CARGO"));
    cargo
        .arg("build")
        .arg("--release")
        .arg("--manifest-path")
        .arg(manifest_dir.join("embed/Cargo.toml"))
        .arg("--target-dir")
        .arg(&embed_target);
    if cross {
        cargo.arg("--target").arg(&target);
    }
    // What configures the outer build's own compilation must not leak in: a wrapper (clippy's
    // driver), a target folder, a build of only some files.
    for name in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cargo.env_remove(name);
    }
    // The library links no libpython and needs no interpreter to build (as in
    // .cargo/config.toml, repeated for builds that do not read it, such as `cargo install`
    // from another folder).
    cargo
        .env("PYO3_BUILD_EXTENSION_MODULE", "1")
        .env("PYO3_NO_PYTHON", "1");
    let out = cargo
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build providers/python/embed: {e}"));
    if !out.status.success() {
        panic!(
            "building providers/python/embed (the embedded Python layer) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut built = embed_target;
    if cross {
        built.push(&target);
    }
    let built = built.join("release").join(LIB);
    let copy = out_dir.join(LIB);
    copy_whole(&built, &copy);
    println!(
        "cargo:rustc-env=TOOLBOX_PYTHON_EMBED_LIB={}",
        copy.display()
    );
}

/// Copies `from` to `to` through a temporary name, so a build stopped half-way never leaves
/// a truncated library where the crate includes it.
fn copy_whole(from: &Path, to: &Path) {
    let tmp = to.with_extension("so.tmp");
    std::fs::copy(from, &tmp).unwrap_or_else(|e| panic!("cannot copy {}: {e}", from.display()));
    std::fs::rename(&tmp, to).unwrap_or_else(|e| panic!("cannot move {}: {e}", to.display()));
}
