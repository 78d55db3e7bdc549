//! `cargo xtask`: project chores that need the whole workspace.
//!
//! - `cargo xtask schema [--check]`: write (or check) `docs/tool-schemas/<format>.json`, the
//!   combined schema of the full bundle in every format.
//! - `cargo xtask bundles`: build the `toolbox` binary with no providers, each provider alone
//!   and all providers, and check each lists exactly its providers' tools.
//! - `cargo xtask dist [--profile release|dev] [--out DIR]`: the wheel, the binary's tarball,
//!   the container image's build context and their `SHA256SUMS` (see [`dist`]).

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use serde_json::Value;
use toolbox::{ExecutorConfig, PermissionMode, SchemaFormat, ToolExecutor};

mod dist;
mod image;
mod licenses;
mod tarball;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["schema"] => schema(false),
        ["schema", "--check"] => schema(true),
        ["bundles"] => bundles(),
        ["dist", rest @ ..] => match dist::parse_args(rest) {
            Ok(dist_args) => dist::dist(dist_args, &repo_root()),
            Err(e) => {
                eprintln!("xtask dist: {e}\nusage: {}", dist::USAGE);
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!(
                "usage: cargo xtask schema [--check] | cargo xtask bundles | {}",
                dist::USAGE
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}

/// An executor over the full bundle that sees every tool.
fn full_executor() -> Result<ToolExecutor> {
    let mut config = ExecutorConfig::new(repo_root());
    config.permissions.mode = PermissionMode::Full;
    config.trajectory = false;
    ToolExecutor::new(config)
}

fn schema(check: bool) -> Result<()> {
    let executor = full_executor()?;
    let dir = repo_root().join("docs/tool-schemas");
    let mut stale = Vec::new();
    for format in SchemaFormat::ALL {
        let schemas = executor.resolve_agent_tool_schemas(None, PermissionMode::Full, format)?;
        let text = serde_json::to_string_pretty(&schemas)? + "\n";
        let path = dir.join(format!("{}.json", format.as_str()));
        if check {
            let current = std::fs::read_to_string(&path).unwrap_or_default();
            if current != text {
                stale.push(path.display().to_string());
            }
        } else {
            std::fs::create_dir_all(&dir)?;
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    if !stale.is_empty() {
        bail!(
            "tool schemas are stale: {}; run `cargo xtask schema` and commit the result",
            stale.join(", ")
        );
    }
    if check {
        println!(
            "tool schemas are up to date ({} formats)",
            SchemaFormat::ALL.len()
        );
    }
    Ok(())
}

fn bundles() -> Result<()> {
    let executor = full_executor()?;
    // What each provider contributes, from the full bundle.
    let mut by_provider: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Tools an agent runtime intercepts (call_agent) are never listed by `toolbox tools`.
    for tool in executor
        .registry()
        .tools()
        .iter()
        .filter(|t| !t.info.intercepted)
    {
        by_provider
            .entry(tool.provider_name().to_string())
            .or_default()
            .push(tool.info.name.clone());
    }
    let providers: Vec<&str> = toolbox::PROVIDERS.to_vec();
    for p in &providers {
        if !by_provider.contains_key(*p) {
            bail!("feature {p} is enabled but no provider named {p} registered any tool");
        }
    }
    let mut bundles: Vec<(String, Vec<&str>)> = vec![("none".into(), vec![])];
    for p in &providers {
        bundles.push((p.to_string(), vec![p]));
    }
    bundles.push(("full".into(), providers.clone()));

    let root = repo_root();
    let scratch = root.join("target/xtask-bundles");
    std::fs::create_dir_all(&scratch)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    for (label, members) in &bundles {
        let features = members.join(",");
        let mut build = Command::new(&cargo);
        build.current_dir(&root).args([
            "build",
            "--quiet",
            "-p",
            "toolbox",
            "--bin",
            "toolbox",
            "--no-default-features",
        ]);
        if !features.is_empty() {
            build.args(["--features", &features]);
        }
        let status = build.status().context("running cargo build")?;
        if !status.success() {
            bail!("bundle {label}: cargo build failed");
        }
        // Both vocabularies: the data agent's family is listed only in its own. Each row names
        // its canonical tool (`canonical` when the listed name is another word).
        let mut got: Vec<String> = Vec::new();
        for vocabulary in ["canonical", "data-agent"] {
            let out = Command::new(target_dir.join("debug/toolbox"))
                .args([
                    "tools",
                    "--json",
                    "--mode",
                    "full",
                    "--vocabulary",
                    vocabulary,
                ])
                .arg("--workspace")
                .arg(&scratch)
                .env_remove("TOOLBOX_CONFIG")
                .output()
                .context("running toolbox tools")?;
            if !out.status.success() {
                bail!(
                    "bundle {label}: toolbox tools failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let listed: Vec<Value> = serde_json::from_slice(&out.stdout)?;
            for row in &listed {
                let name = row["canonical"].as_str().or(row["name"].as_str());
                if let Some(name) = name {
                    if !got.iter().any(|g| g == name) {
                        got.push(name.to_string());
                    }
                }
            }
        }
        let mut want: Vec<String> = members
            .iter()
            .flat_map(|p| by_provider[*p].iter().cloned())
            .collect();
        got.sort();
        want.sort();
        if got != want {
            bail!("bundle {label}: lists {got:?}, expected {want:?}");
        }
        println!("bundle {label:14} ok: {} tools", got.len());
    }
    Ok(())
}
