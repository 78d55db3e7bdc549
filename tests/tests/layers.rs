//! The crate layering of docs/architecture.md, checked from `cargo metadata`:
//!
//! - core depends on no toolbox crate, and on nothing that touches the operating system;
//! - host depends on core only;
//! - a provider depends on core and host only (never on another provider or the executor);
//! - the executor on core and host; the runtime on core, host and the executor, never a
//!   provider.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Every workspace package with its normal (not dev or build) dependencies, and whether it
/// is a provider (its manifest is under `providers/`).
fn packages() -> BTreeMap<String, (BTreeSet<String>, bool)> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cannot run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect();
            let provider = p["manifest_path"].as_str().unwrap().contains("/providers/");
            (p["name"].as_str().unwrap().to_string(), (deps, provider))
        })
        .collect()
}

fn ours(deps: &BTreeSet<String>) -> BTreeSet<&str> {
    deps.iter()
        .map(String::as_str)
        .filter(|d| d.starts_with("toolbox"))
        .collect()
}

#[test]
fn crates_depend_only_on_the_layers_below_them() {
    let packages = packages();
    let set = |names: &[&'static str]| names.iter().copied().collect::<BTreeSet<&str>>();
    let core = &packages["toolbox-core"].0;
    assert!(ours(core).is_empty(), "core depends on {:?}", ours(core));
    for os in [
        "libc",
        "rustix",
        "nix",
        "tokio",
        "tokio-util",
        "async-trait",
    ] {
        assert!(
            !core.contains(os),
            "core depends on {os}: what touches the OS belongs in host"
        );
    }
    assert_eq!(ours(&packages["toolbox-host"].0), set(&["toolbox-core"]));
    assert!(
        ours(&packages["toolbox-executor"].0).is_subset(&set(&["toolbox-core", "toolbox-host"]))
    );
    assert!(ours(&packages["toolbox-runtime"].0).is_subset(&set(&[
        "toolbox-core",
        "toolbox-host",
        "toolbox-executor"
    ])));
    let providers: Vec<&String> = packages
        .iter()
        .filter(|(_, (_, provider))| *provider)
        .map(|(name, _)| name)
        .collect();
    assert!(providers.len() >= 10, "found providers {providers:?}");
    for name in providers {
        let deps = ours(&packages[name].0);
        assert!(
            deps.is_subset(&set(&["toolbox-core", "toolbox-host"])),
            "{name} depends on {deps:?}: a provider depends on core and host only"
        );
    }
}
