//! The crate layering of docs/architecture.md, checked from `cargo metadata`:
//!
//! - core depends on no toolbox crate, and on nothing that touches the operating system;
//! - host depends on core only;
//! - a provider depends on core and host only (never on another provider or the executor);
//! - the executor on core and host; the runtime and the MCP layer on core, host and the
//!   executor, never a provider;
//! - the state store (sync) on core and host only: it reads the workspace through host's
//!   descriptors, and knows nothing of turns or tools;
//! - the router on core and the front door only: it passes requests to session servers, and
//!   runs no tool itself;
//! - the front door (the accept loop `toolbox serve` and `toolbox router` share) on no crate
//!   of ours.

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
    assert!(ours(&packages["toolbox-mcp"].0).is_subset(&set(&[
        "toolbox-core",
        "toolbox-host",
        "toolbox-executor"
    ])));
    assert_eq!(
        ours(&packages["toolbox-sync"].0),
        set(&["toolbox-core", "toolbox-host"]),
        "sync depends on core and host only"
    );
    assert!(
        !ours(&packages["toolbox-runtime"].0).contains("toolbox-sync")
            && !ours(&packages["toolbox-executor"].0).contains("toolbox-sync"),
        "only the server (session server mode) uses the state store"
    );
    assert_eq!(
        ours(&packages["toolbox-router"].0),
        set(&["toolbox-core", "toolbox-front-door"]),
        "the router depends on core and the front door only: never on the executor, the \
         runtime or a provider"
    );
    assert!(
        ours(&packages["toolbox-front-door"].0).is_empty(),
        "the front door (the accept loop serve and the router share) depends on no crate of ours"
    );
    let providers: Vec<&String> = packages
        .iter()
        .filter(|(_, (_, provider))| *provider)
        .map(|(name, _)| name)
        .collect();
    assert!(providers.len() >= 10, "found providers {providers:?}");
    for name in providers {
        // Its own parts (the python provider's CPython layer and value tape) are its own:
        // `toolbox-python-*` for `toolbox-python` and for each of them.
        let family = name.splitn(3, '-').take(2).collect::<Vec<_>>().join("-");
        let own = format!("{family}-");
        let deps: BTreeSet<&str> = ours(&packages[name].0)
            .into_iter()
            .filter(|dep| !dep.starts_with(&own))
            .collect();
        assert!(
            deps.is_subset(&set(&["toolbox-core", "toolbox-host"])),
            "{name} depends on {deps:?}: a provider depends on core, host and its own parts only"
        );
    }
}

/// The repository's root.
fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `path` under `base`, as text.
fn relative(path: &std::path::Path, base: &std::path::Path) -> String {
    path.strip_prefix(base)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The crates' source folders: every `Cargo.toml` of the workspace but the root's.
fn crate_dirs() -> Vec<std::path::PathBuf> {
    let root = repo_root();
    let mut dirs = Vec::new();
    for parent in [
        root.clone(),
        root.join("providers"),
        root.join("providers/python"),
    ] {
        for entry in std::fs::read_dir(&parent).unwrap() {
            let dir = entry.unwrap().path();
            if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
                dirs.push(dir);
            }
        }
    }
    dirs.sort();
    dirs
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    out
}

/// A crate whose code has no `unsafe` says so: `#![forbid(unsafe_code)]` at its root.
#[test]
fn crates_without_unsafe_code_forbid_it() {
    let mut missing = Vec::new();
    for dir in crate_dirs() {
        let src = dir.join("src");
        let uses_unsafe = sources(&src).iter().any(|(_, text)| {
            text.lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .any(|l| {
                    l.contains("unsafe {") || l.contains("unsafe fn") || l.contains("unsafe impl")
                })
        });
        let root = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.is_file())
            .unwrap();
        let forbids = std::fs::read_to_string(&root)
            .unwrap()
            .contains("#![forbid(unsafe_code)]");
        if !uses_unsafe && !forbids {
            missing.push(root.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "no unsafe code, but no #![forbid(unsafe_code)]: {missing:?}"
    );
}

/// The executor routes through the registry and names no tool: no string literal in its
/// code (tests aside) is the name or alias of a registered tool.
#[test]
fn the_executor_names_no_tool() {
    use toolbox as _;
    let mut names = BTreeSet::new();
    for provider in toolbox_host::registered_providers() {
        for tool in (provider.build)().list_tools() {
            names.insert(tool.name.to_string());
            names.extend(tool.aliases.iter().map(|a| a.to_string()));
        }
    }
    assert!(
        names.contains("call_agent") && names.contains("shell"),
        "{names:?}"
    );
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../executor/src");
    let mut named = Vec::new();
    for (path, text) in sources(&src) {
        // Code only: a file's tests start at its #[cfg(test)].
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for literal in line.split('"').skip(1).step_by(2) {
                if names.contains(literal) {
                    named.push(format!("{}:{}: \"{literal}\"", path.display(), i + 1));
                }
            }
        }
    }
    assert!(named.is_empty(), "the executor names tools: {named:#?}");
}

/// Every crate documents its public items: `#![deny(missing_docs)]` at its root.
#[test]
fn crates_deny_missing_docs() {
    let mut missing = Vec::new();
    for dir in crate_dirs() {
        let src = dir.join("src");
        let root = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.is_file())
            .unwrap();
        if !std::fs::read_to_string(&root)
            .unwrap()
            .contains("#![deny(missing_docs)]")
        {
            missing.push(root.display().to_string());
        }
    }
    assert!(missing.is_empty(), "no #![deny(missing_docs)]: {missing:?}");
}

/// The map is true (issue 40, point 7): docs/architecture.md has a section
/// `## name (`<crate>/src/`)` for every crate, and that section names every source file of
/// the crate, in backticks, by its path under `src/`. A file added without a line on the
/// map fails here.
#[test]
fn the_map_names_every_crate_and_every_source_file() {
    let root = repo_root();
    let map = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    // Each level-2 section whose heading ends with a crate's source folder in backticks.
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in map.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            current = heading
                .strip_suffix("`)")
                .and_then(|h| h.rsplit_once("(`"))
                .map(|(_, folder)| folder.to_string());
            if let Some(folder) = &current {
                sections.entry(folder.clone()).or_default();
            }
            continue;
        }
        if let Some(folder) = &current {
            let text = sections.get_mut(folder).unwrap();
            text.push_str(line);
            text.push('\n');
        }
    }
    let mut missing = Vec::new();
    for dir in crate_dirs() {
        let rel = relative(&dir, &root);
        let folder = format!("{rel}/src/");
        let Some(section) = sections.get(&folder) else {
            missing.push(format!("no section `## … (`{folder}`)`"));
            continue;
        };
        let mut files: Vec<String> = sources(&dir.join("src"))
            .into_iter()
            .map(|(path, _)| relative(&path, &dir.join("src")))
            .collect();
        files.sort();
        for file in files {
            if !section.contains(&format!("`{file}`")) {
                missing.push(format!("{folder}{file}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md does not name (each in its crate's section, in backticks):\n{}",
        missing.join("\n")
    );
}

/// Host is the one OS layer (issue 40, point 3): `libc::` calls and `unsafe` code live in
/// host, but for the files listed here, each with its reason. A new file that reaches for
/// either fails here; move the call into host (on rustix where it has it) instead. Tests
/// are not checked. And core touches no OS: no `std::fs`, `std::env`, `std::process` or
/// `std::net` in it.
#[test]
fn os_calls_stay_in_host() {
    // (file, why it may): keep this list short, and shrink it.
    const ALLOWED: &[(&str, &str)] = &[
        (
            "providers/python/src/backend/embedded.rs",
            "the embedded interpreter's thread and its wake-ups (an eventfd, poll, \
             pthread_kill with SIGUSR2) are that interpreter's",
        ),
        (
            "providers/python/src/backend/embed_lib.rs",
            "calls the C ABI of the CPython layer host::dylib loaded (function pointers)",
        ),
        (
            "providers/python/embed/src/lib.rs",
            "the CPython layer itself: CPython's C API (pyo3), and dlsym for what only some \
             versions have",
        ),
        (
            "mcp/src/stdio/transport.rs",
            "tokio's AsyncFd::register_with_interest, which is unsafe (no libc: host::stdio)",
        ),
        (
            "toolbox/src/main.rs",
            "calls host's unsafe start-up functions (secrets::capture_and_scrub, withhold)",
        ),
    ];
    let root = repo_root();
    let mut found = Vec::new();
    for dir in crate_dirs() {
        let rel = relative(&dir, &root);
        if rel == "host" || rel == "tests" {
            continue;
        }
        for (path, text) in sources(&dir.join("src")) {
            let name = relative(&path, &root);
            if name.ends_with("tests.rs") || name.contains("/tests/") {
                continue;
            }
            // Code only: the part before a `#[cfg(test)]` module at the end.
            let code = text
                .split("\n#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or(&text);
            let os_call = code.contains("libc::")
                || code.lines().any(|l| {
                    let l = l.trim_start();
                    !l.starts_with("//") && (l.contains("unsafe {") || l.contains("unsafe fn"))
                });
            if os_call && !ALLOWED.iter().any(|(file, _)| *file == name) {
                found.push(name.clone());
            }
            if rel == "core" {
                for module in ["std::fs", "std::env", "std::process", "std::net"] {
                    if code.contains(module) {
                        found.push(format!("{name} uses {module}"));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "libc or unsafe outside host (move it into host, on rustix where it can be):\n{}",
        found.join("\n")
    );
    // The list stays true: every file on it still needs to be there.
    for (file, _) in ALLOWED {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(
            text.contains("libc::") || text.contains("unsafe"),
            "{file} no longer calls libc or unsafe code: take it off the list"
        );
    }
}
