//! The container image's build context: a Dockerfile made from `deploy/k8s/Dockerfile`'s
//! runtime stage, with a prebuilt binary in place of the build stage's.
//!
//! `deploy/k8s/Dockerfile` stays the one description of the image; this only cuts it: the
//! stages before `FROM … AS runtime` go, `COPY --from=build /out/toolbox …` becomes a copy of
//! the context's `toolbox`, the licences are copied beside it, and the repository files the
//! other `COPY` lines name are listed so the context can carry them.

use anyhow::{bail, Result};

/// Where the binary sits in the context, and where the binary's build stage put it.
pub const BINARY: &str = "toolbox";
const BUILT_BINARY: &str = "/out/toolbox";
/// The context's folder of licence files, and where the image keeps them.
pub const LICENSES: &str = "licenses";
const LICENSES_IN_IMAGE: &str = "/usr/share/licenses/toolbox/";

/// A build context's Dockerfile and the repository files it copies.
#[derive(Debug)]
pub struct ContextDockerfile {
    /// The Dockerfile's text.
    pub text: String,
    /// Paths relative to the repository (and so to the context) that its `COPY` lines name.
    pub files: Vec<String>,
    /// The Debian release of the runtime stage (the `DEBIAN_RELEASE` argument's default).
    pub debian_release: Option<String>,
}

/// Cuts `source` (the text of `deploy/k8s/Dockerfile`) into the context's Dockerfile.
/// `archive` is the context's file name, for the comment that says how to build it.
pub fn context_dockerfile(source: &str, version: &str, archive: &str) -> Result<ContextDockerfile> {
    const FROM: &str = "deploy/k8s/Dockerfile";
    let lines: Vec<&str> = source.lines().collect();
    let is_from = |l: &str| first_word(l).eq_ignore_ascii_case("FROM");
    let first_from = lines
        .iter()
        .position(|l| is_from(l))
        .ok_or_else(|| anyhow::anyhow!("{FROM} has no FROM line"))?;
    let runtime = lines
        .iter()
        .position(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            is_from(l)
                && words.len() >= 4
                && words[words.len() - 2].eq_ignore_ascii_case("AS")
                && words[words.len() - 1] == "runtime"
        })
        .ok_or_else(|| anyhow::anyhow!("{FROM} has no `FROM … AS runtime` stage"))?;
    if let Some(extra) = lines[runtime + 1..].iter().find(|l| is_from(l)) {
        bail!("{FROM}: the runtime stage must be the last one; found `{extra}` after it");
    }
    let stage = &lines[runtime..];

    let mut text = String::new();
    if let Some(syntax) = lines.first().filter(|l| l.starts_with("# syntax=")) {
        text.push_str(syntax);
        text.push('\n');
    }
    text.push_str(&format!(
        "# Made by `cargo xtask dist` from {FROM}: its runtime stage, with the prebuilt binary\n\
         # of this context in place of the build stage's, and the licences beside it. Build it\n\
         # with (this archive is the whole context):\n\
         #   docker build -t toolbox:{version} - < {archive}\n"
    ));
    // The global arguments the runtime stage uses (the base image's release).
    let stage_text = stage.join("\n");
    let mut debian_release = None;
    for line in &lines[..first_from] {
        if !first_word(line).eq_ignore_ascii_case("ARG") {
            continue;
        }
        let decl = line.split_whitespace().nth(1).unwrap_or_default();
        let (name, default) = decl.split_once('=').unwrap_or((decl, ""));
        if name == "DEBIAN_RELEASE" && !default.is_empty() {
            debian_release = Some(default.to_string());
        }
        if stage_text.contains(&format!("${{{name}}}")) || stage_text.contains(&format!("${name}"))
        {
            text.push_str(line);
            text.push('\n');
        }
    }
    text.push('\n');

    let mut files = Vec::new();
    let mut swapped = 0;
    for line in stage {
        let word = first_word(line);
        if word.eq_ignore_ascii_case("ADD") {
            bail!("{FROM}: the runtime stage uses ADD (`{line}`); cargo xtask dist copies only what COPY names");
        }
        if !word.eq_ignore_ascii_case("COPY") {
            text.push_str(line);
            text.push('\n');
            continue;
        }
        let args: Vec<&str> = line.split_whitespace().skip(1).collect();
        if line.trim_end().ends_with('\\') || args.first().is_some_and(|a| a.starts_with('[')) {
            bail!("{FROM}: cargo xtask dist reads COPY lines of one line in the shell form, not `{line}`");
        }
        let (flags, paths): (Vec<&str>, Vec<&str>) = args.iter().partition(|a| a.starts_with("--"));
        let Some((dest, sources)) = paths.split_last().filter(|(_, s)| !s.is_empty()) else {
            bail!("{FROM}: `{line}` names no source and destination");
        };
        if let Some(stage_name) = flags.iter().find_map(|f| f.strip_prefix("--from=")) {
            if sources != [BUILT_BINARY] {
                bail!(
                    "{FROM}: `{line}` copies {} from stage {stage_name}, which a context of a \
                     prebuilt binary does not have (cargo xtask dist swaps in only {BUILT_BINARY})",
                    sources.join(" ")
                );
            }
            let others: Vec<&str> = flags
                .iter()
                .filter(|f| !f.starts_with("--from="))
                .copied()
                .collect();
            let mut copy = vec!["COPY"];
            copy.extend(others.iter().copied());
            copy.extend([BINARY, dest]);
            text.push_str(&copy.join(" "));
            text.push('\n');
            text.push_str(&format!("COPY {LICENSES}/ {LICENSES_IN_IMAGE}\n"));
            swapped += 1;
            continue;
        }
        for source in sources {
            if source.starts_with('/')
                || source.split('/').any(|p| p == "..")
                || source.contains('*')
            {
                bail!("{FROM}: `{line}`: cargo xtask dist copies plain repository paths only, not {source}");
            }
            files.push(source.to_string());
        }
        text.push_str(line);
        text.push('\n');
    }
    if swapped != 1 {
        bail!(
            "{FROM}: the runtime stage must copy the binary once as `COPY --from=build {BUILT_BINARY} …` \
             (found {swapped} such lines); cargo xtask dist puts the prebuilt binary there"
        );
    }
    Ok(ContextDockerfile {
        text,
        files,
        debian_release,
    })
}

/// The glibc of a Debian release's `-slim` image, for the releases in use.
pub fn debian_glibc(release: &str) -> Option<(u32, u32)> {
    match release {
        "bullseye" => Some((2, 31)),
        "bookworm" => Some((2, 36)),
        "trixie" => Some((2, 41)),
        _ => None,
    }
}

fn first_word(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_dockerfile() -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        std::fs::read_to_string(root.join("deploy/k8s/Dockerfile")).unwrap()
    }

    /// The repository's own Dockerfile still cuts cleanly: a change to it that `cargo xtask
    /// dist` cannot follow fails here, in the main test suite.
    #[test]
    fn the_k8s_dockerfile_becomes_a_context_of_the_prebuilt_binary() {
        let made = context_dockerfile(&repo_dockerfile(), "0.1.0", "ctx.tar.gz").unwrap();
        let text = &made.text;
        assert!(text.starts_with("# syntax="), "{text}");
        assert!(
            text.contains("docker build -t toolbox:0.1.0 - < ctx.tar.gz"),
            "{text}"
        );
        assert!(!text.contains("--from="), "{text}");
        assert!(!text.contains("AS build"), "{text}");
        assert!(!text.contains("cargo build"), "{text}");
        assert!(
            text.contains("COPY toolbox /usr/local/bin/toolbox\n"),
            "{text}"
        );
        assert!(
            text.contains("COPY licenses/ /usr/share/licenses/toolbox/\n"),
            "{text}"
        );
        assert!(text.contains("ARG DEBIAN_RELEASE="), "{text}");
        assert!(!text.contains("ARG RUST_VERSION"), "{text}");
        assert_eq!(made.debian_release.as_deref(), Some("bookworm"));
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert!(!made.files.is_empty());
        for file in &made.files {
            assert!(root.join(file).is_file(), "{file} is not in the repository");
        }
    }

    #[test]
    fn a_dockerfile_it_cannot_follow_is_refused_by_what_is_missing() {
        let cases = [
            ("FROM debian AS build\n", "no `FROM … AS runtime` stage"),
            ("ARG X=1\n", "has no FROM line"),
            (
                "FROM a AS runtime\nCOPY --from=build /out/other /x\n",
                "copies /out/other from stage build",
            ),
            ("FROM a AS runtime\nRUN true\n", "found 0 such lines"),
            (
                "FROM a AS runtime\nCOPY --from=build /out/toolbox /x\nFROM b\n",
                "must be the last one",
            ),
            (
                "FROM a AS runtime\nCOPY --from=build /out/toolbox /x\nCOPY ../secret /y\n",
                "plain repository paths only",
            ),
            ("FROM a AS runtime\nADD x /y\n", "uses ADD"),
        ];
        for (source, needle) in cases {
            let err = context_dockerfile(source, "0", "c")
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{source}: {err}");
        }
    }
}
