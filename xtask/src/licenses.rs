//! The third-party crates a `toolbox` binary is built from, with their licences, from
//! `cargo metadata`: what `cargo xtask dist` puts beside the binary as `THIRD-PARTY.md`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// One crate of the dependency graph that is not ours.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Crate {
    /// Its name on its registry.
    pub name: String,
    /// The version the lock file holds.
    pub version: String,
    /// Its SPDX licence expression, or where its licence file is when it has none.
    pub license: String,
    /// Its source repository, when the crate names one.
    pub repository: String,
}

/// `cargo metadata` of the workspace at `root`, resolved for `target`, as the lock file has it.
pub fn metadata(cargo: &str, root: &Path, target: &str) -> Result<Value> {
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(["--filter-platform", target])
        .output()
        .with_context(|| format!("running `{cargo} metadata`"))?;
    if !out.status.success() {
        bail!(
            "`{cargo} metadata --locked` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("reading `cargo metadata`'s JSON")
}

/// The version and licence expression of the workspace package `name`.
pub fn package(metadata: &Value, name: &str) -> Result<(String, String)> {
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let pkg = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name && p["id"].as_str().is_some_and(|id| members.contains(id)))
        .with_context(|| format!("cargo metadata: the workspace has no package named {name}"))?;
    let version = pkg["version"].as_str().unwrap_or_default().to_string();
    let license = pkg["license"]
        .as_str()
        .with_context(|| format!("{name}'s Cargo.toml states no `license`"))?
        .to_string();
    Ok((version, license))
}

/// The crates outside the workspace that `package` (and every workspace package whose only
/// target is a cdylib, which the binary carries as bytes) depends on, through normal
/// dependencies (build scripts' and tests' dependencies are not in the binary), from
/// [`metadata`]'s output.
pub fn from_metadata(metadata: &Value, package: &str) -> Result<Vec<Crate>> {
    let packages: BTreeMap<&str, &Value> = metadata["packages"]
        .as_array()
        .context("cargo metadata: no `packages`")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .context("cargo metadata: no `resolve.nodes`")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .context("cargo metadata: no `workspace_members`")?
        .iter()
        .filter_map(Value::as_str)
        .collect();

    let mut roots = Vec::new();
    for id in &members {
        let pkg = packages[id];
        let is_package = pkg["name"] == package;
        if is_package || only_cdylib(pkg) {
            roots.push(*id);
        }
    }
    if !roots.iter().any(|id| packages[id]["name"] == package) {
        bail!("cargo metadata: the workspace has no package named {package}");
    }

    let mut seen: BTreeSet<&str> = roots.iter().copied().collect();
    let mut queue: VecDeque<&str> = roots.into_iter().collect();
    while let Some(id) = queue.pop_front() {
        let Some(node) = nodes.get(id) else { continue };
        for dep in node["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].is_null());
            let Some(dep_id) = dep["pkg"].as_str() else {
                continue;
            };
            if normal && seen.insert(dep_id) {
                queue.push_back(dep_id);
            }
        }
    }

    let mut crates: Vec<Crate> = seen
        .into_iter()
        .filter(|id| !members.contains(id))
        .filter_map(|id| packages.get(id))
        .map(|p| {
            let text = |key: &str| p[key].as_str().unwrap_or_default().to_string();
            let license = match (p["license"].as_str(), p["license_file"].as_str()) {
                (Some(l), _) => l.to_string(),
                (None, Some(file)) => format!("see {}", file_name(file)),
                (None, None) => "not stated".to_string(),
            };
            Crate {
                name: text("name"),
                version: text("version"),
                license,
                repository: text("repository"),
            }
        })
        .collect();
    crates.sort();
    crates.dedup();
    Ok(crates)
}

fn only_cdylib(pkg: &Value) -> bool {
    let targets = pkg["targets"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let kinds = |t: &Value| -> Vec<String> {
        t["kind"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect()
    };
    let built: Vec<&Value> = targets
        .iter()
        .filter(|t| {
            !kinds(t)
                .iter()
                .any(|k| matches!(k.as_str(), "test" | "bench" | "example" | "custom-build"))
        })
        .collect();
    !built.is_empty() && built.iter().all(|t| kinds(t) == ["cdylib"])
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `THIRD-PARTY.md`: the project's own licence, then a table of `crates`.
pub fn render(project: &str, version: &str, license: &str, crates: &[Crate]) -> String {
    let mut text = format!(
        "# Licences of {project} {version}\n\n\
         {project} itself is licensed under {license} (the `license` of its Cargo.toml).\n\n\
         The binary is built from these {} crates of other authors, each under its own \
         licence, as its crate states it (listed by `cargo xtask dist` from `cargo metadata`: \
         the normal dependencies, for this target). Each crate's licence text is in its \
         source package on crates.io.\n\n\
         | crate | version | licence | repository |\n|---|---|---|---|\n",
        crates.len()
    );
    for c in crates {
        let cell = |s: &str| s.replace('|', "\\|");
        text.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            cell(&c.name),
            cell(&c.version),
            cell(&c.license),
            cell(&c.repository)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pkg(id: &str, license: Option<&str>, kinds: &[&str]) -> Value {
        json!({
            "id": id,
            "name": id.split('@').next().unwrap(),
            "version": id.split('@').nth(1).unwrap_or("0.1.0"),
            "license": license,
            "license_file": if license.is_none() { Some("/src/LICENSE.txt") } else { None },
            "repository": "https://example.invalid/repo",
            "targets": [{"kind": kinds}],
        })
    }

    fn dep(id: &str, kind: Option<&str>) -> Value {
        json!({"pkg": id, "dep_kinds": [{"kind": kind, "target": null}]})
    }

    /// Normal dependencies of the binary's package and of an embedded cdylib are listed;
    /// build and dev dependencies, and workspace crates, are not.
    #[test]
    fn lists_the_normal_dependencies_of_the_binary_and_its_embedded_libraries() {
        let metadata = json!({
            "workspace_members": ["toolbox@0.1.0", "embed@0.1.0", "xtask@0.1.0", "host@0.1.0"],
            "packages": [
                pkg("toolbox@0.1.0", Some("MIT"), &["lib"]),
                pkg("embed@0.1.0", Some("MIT"), &["cdylib"]),
                pkg("xtask@0.1.0", Some("MIT"), &["bin"]),
                pkg("host@0.1.0", Some("MIT"), &["lib"]),
                pkg("serde@1.0.0", Some("MIT OR Apache-2.0"), &["lib"]),
                pkg("odd@2.0.0", None, &["lib"]),
                pkg("cc@1.0.0", Some("MIT"), &["lib"]),
                pkg("pyo3@0.30.1", Some("MIT OR Apache-2.0"), &["lib"]),
                pkg("criterion@0.8.2", Some("MIT"), &["lib"]),
                pkg("clap@4.0.0", Some("MIT"), &["lib"]),
            ],
            "resolve": {"nodes": [
                {"id": "toolbox@0.1.0", "deps": [
                    dep("host@0.1.0", None), dep("cc@1.0.0", Some("build")),
                    dep("criterion@0.8.2", Some("dev")),
                ]},
                {"id": "host@0.1.0", "deps": [dep("serde@1.0.0", None), dep("odd@2.0.0", None)]},
                {"id": "embed@0.1.0", "deps": [dep("pyo3@0.30.1", None)]},
                {"id": "xtask@0.1.0", "deps": [dep("clap@4.0.0", None)]},
                {"id": "serde@1.0.0", "deps": []},
                {"id": "odd@2.0.0", "deps": []},
                {"id": "pyo3@0.30.1", "deps": []},
            ]},
        });
        let crates = from_metadata(&metadata, "toolbox").unwrap();
        let names: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["odd", "pyo3", "serde"]);
        assert_eq!(crates[0].license, "see LICENSE.txt");
        let text = render("toolbox", "0.1.0", "MIT OR Apache-2.0", &crates);
        assert!(text.contains("licensed under MIT OR Apache-2.0"), "{text}");
        assert!(text.contains("these 3 crates"), "{text}");
        assert!(
            text.contains("| serde | 1.0.0 | MIT OR Apache-2.0 |"),
            "{text}"
        );

        assert_eq!(
            package(&metadata, "toolbox").unwrap(),
            ("0.1.0".to_string(), "MIT".to_string())
        );
        let err = package(&metadata, "serde").unwrap_err().to_string();
        assert!(err.contains("no package named serde"), "{err}");
        let err = from_metadata(&metadata, "nope").unwrap_err().to_string();
        assert!(err.contains("no package named nope"), "{err}");
    }
}
