//! `cargo xtask dist [--profile release|dev] [--out DIR]`: the things a user installs.
//!
//! - a wheel, built by maturin from `pyproject.toml` (`bindings = "bin"`): `pip install` or
//!   `uvx --from` it and `toolbox` is on PATH. maturin audits it (`--auditwheel check`):
//!   its platform tag is the lowest manylinux the binary's symbols allow, and a binary that
//!   needs a shared library outside that policy fails the build rather than being bundled;
//! - `toolbox-VERSION-TARGET.tar.gz`: `bin/toolbox` and `share/licenses/toolbox/` (the
//!   repository's `LICENSE*` files and `THIRD-PARTY.md`, every crate the binary is built from
//!   with its licence), to unpack into a prefix;
//! - `toolbox-image-VERSION-TARGET.tar.gz`: the container image's build context (the
//!   runtime stage of `deploy/k8s/Dockerfile` around the same binary), for `docker build -`;
//! - `SHA256SUMS` over all three, in `sha256sum -c`'s format.
//!
//! The tarball and the image carry the binary taken out of the wheel, so all three hold the
//! same bytes. Everything is made in a temporary folder inside the output folder and renamed
//! into place only when all of it succeeded; `SHA256SUMS` comes last.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use flate2::Compression;

use crate::image;
use crate::licenses;
use crate::tarball::TarGz;

/// The package whose binary is distributed, and the binary's name.
const PACKAGE: &str = "toolbox";
/// The maturin versions `pyproject.toml`'s `[build-system]` accepts.
const MATURIN_MIN: (u64, u64) = (1, 15);
const MATURIN_INSTALL: &str = "pip install 'maturin>=1.15,<2'";

/// The cargo profile the binary is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `release`: what users run (fat LTO, one codegen unit).
    Release,
    /// `dev`: a debug build, which the test suite has already built.
    Dev,
}

impl Profile {
    fn name(self) -> &'static str {
        match self {
            Profile::Release => "release",
            Profile::Dev => "dev",
        }
    }

    /// gzip's level for the archives. A dev binary is 4 times a release one and only checked,
    /// never shipped: the fastest level halves the time xtask's unoptimised gzip takes.
    fn compression(self) -> Compression {
        match self {
            Profile::Release => Compression::default(),
            Profile::Dev => Compression::fast(),
        }
    }
}

/// What `cargo xtask dist` was asked for.
#[derive(Debug, PartialEq, Eq)]
pub struct DistArgs {
    /// The cargo profile (`--profile`, release when not given).
    pub profile: Profile,
    /// The output folder (`--out`; `target/dist` when not given).
    pub out: Option<PathBuf>,
}

/// The usage line of `cargo xtask dist`.
pub const USAGE: &str = "cargo xtask dist [--profile release|dev] [--out DIR]";

/// Reads `dist`'s arguments (those after `dist`). The error names the argument and what
/// was wrong with it.
pub fn parse_args(args: &[&str]) -> std::result::Result<DistArgs, String> {
    let mut profile = None;
    let mut out = None;
    let mut rest = args.iter();
    while let Some(&arg) = rest.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (arg, None),
        };
        match flag {
            "--profile" | "--out" => {
                // A missing value, or the next flag where the value should be, is no value.
                let value = match inline {
                    Some(v) => v,
                    None if rest.as_slice().first().is_some_and(|v| v.starts_with("--")) => "",
                    None => rest.next().copied().unwrap_or_default(),
                };
                if flag == "--profile" {
                    if profile.is_some() {
                        return Err("--profile is given twice".into());
                    }
                    profile = Some(match value {
                        "release" => Profile::Release,
                        "dev" | "debug" => Profile::Dev,
                        "" => return Err("--profile needs a value: release or dev".into()),
                        other => {
                            return Err(format!(
                            "--profile: `{other}` is not a profile dist builds; use release or dev"
                        ))
                        }
                    });
                } else {
                    if out.is_some() {
                        return Err("--out is given twice".into());
                    }
                    if value.is_empty() {
                        return Err("--out needs a directory".into());
                    }
                    out = Some(PathBuf::from(value));
                }
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}` (dist takes --profile release|dev and --out DIR)"
                ))
            }
        }
    }
    Ok(DistArgs {
        profile: profile.unwrap_or(Profile::Release),
        out,
    })
}

/// Builds every artifact into the output folder and prints where each is.
pub fn dist(args: DistArgs, root: &Path) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    // What the build needs, before anything is made.
    let maturin = find_maturin()?;
    let triple = host_triple()?;
    let out = match args.out {
        Some(out) if out.is_absolute() => out,
        Some(out) => std::env::current_dir()?.join(out),
        None => target_dir.join("dist"),
    };
    if out.exists() && !out.is_dir() {
        bail!("--out {}: is not a directory", out.display());
    }
    std::fs::create_dir_all(&out)
        .with_context(|| format!("--out {}: cannot create it", out.display()))?;
    let pyproject = root.join("pyproject.toml");
    if !pyproject.is_file() {
        bail!(
            "{} is missing: maturin reads the wheel's settings from it",
            pyproject.display()
        );
    }
    let metadata = licenses::metadata(&cargo, root, &triple)?;
    let (version, license) = licenses::package(&metadata, PACKAGE)?;
    let crates = licenses::from_metadata(&metadata, PACKAGE)?;

    let top = format!("{PACKAGE}-{version}-{triple}");
    let tarball_name = format!("{top}.tar.gz");
    let image_name = format!("{PACKAGE}-image-{version}-{triple}.tar.gz");
    // The image's Dockerfile first: one that dist cannot follow fails before the build.
    let source = root.join("deploy/k8s/Dockerfile");
    let source_text = std::fs::read_to_string(&source)
        .with_context(|| format!("reading {}", source.display()))?;
    let dockerfile = image::context_dockerfile(&source_text, &version, &image_name)?;
    for file in &dockerfile.files {
        if !root.join(file).is_file() {
            bail!(
                "deploy/k8s/Dockerfile copies {file}, which is not a file in {}",
                root.display()
            );
        }
    }

    // Everything is made here first; dropped (and so removed) on any error.
    let staging = tempfile::Builder::new()
        .prefix(".dist-")
        .tempdir_in(&out)
        .with_context(|| format!("--out {}: cannot write in it", out.display()))?;
    let stage = staging.path();

    // 1. The wheel.
    let started = Instant::now();
    let wheel_dir = stage.join("wheel");
    let mut build = Command::new(&maturin);
    build
        .current_dir(root)
        .args(["build", "--locked", "--auditwheel", "check"])
        .args(["--profile", args.profile.name()])
        .arg("--out")
        .arg(&wheel_dir);
    without_cargo_run_env(&mut build);
    println!("dist: {}", describe(&build));
    let status = build
        .status()
        .with_context(|| format!("running {maturin}"))?;
    if !status.success() {
        bail!("maturin build failed ({status}); its messages are above");
    }
    let wheel = only_wheel(&wheel_dir)?;
    let wheel_name = file_name(&wheel);
    let tag = wheel_tag(&wheel_name)?;
    let binary = stage.join(PACKAGE);
    extract_binary(&wheel, &binary)?;
    check_glibc(&tag, dockerfile.debian_release.as_deref())?;
    let wheel_time = started.elapsed();

    // 2. The licences, shared by the tarball and the image.
    let mut license_files: Vec<(String, Vec<u8>)> = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("LICENSE") && entry.file_type()?.is_file() {
            license_files.push((name, std::fs::read(entry.path())?));
        }
    }
    license_files.sort();
    if license_files.is_empty() {
        eprintln!(
            "dist: warning: no LICENSE* file at {}; the archives state the licence ({license}) \
             in THIRD-PARTY.md only",
            root.display()
        );
    }
    let third_party = licenses::render(PACKAGE, &version, &license, &crates);
    license_files.push(("THIRD-PARTY.md".into(), third_party.into_bytes()));

    let mtime = source_date_epoch()?;

    // 3. The tarball (bin/toolbox and the licences, under one top folder) and the image's
    // build context, side by side: gzip is most of dist's time once the binary is built.
    let archives_started = Instant::now();
    let tarball = stage.join(&tarball_name);
    let context = stage.join(&image_name);
    let level = args.profile.compression();
    let (made_tarball, made_context) = std::thread::scope(|s| {
        let tarball =
            s.spawn(|| write_tarball(&tarball, &top, &binary, &license_files, mtime, level));
        let context = s.spawn(|| {
            write_context(
                &context,
                root,
                &dockerfile,
                &binary,
                &license_files,
                mtime,
                level,
            )
        });
        (tarball.join(), context.join())
    });
    made_tarball
        .map_err(|_| anyhow::anyhow!("writing {tarball_name} panicked"))?
        .with_context(|| format!("writing {tarball_name}"))?;
    made_context
        .map_err(|_| anyhow::anyhow!("writing {image_name} panicked"))?
        .with_context(|| format!("writing {image_name}"))?;
    let archives_time = archives_started.elapsed();

    // 4. Into place: the artifacts, then SHA256SUMS over them.
    let artifacts = [wheel_name.clone(), tarball_name.clone(), image_name.clone()];
    let mut sums = String::new();
    for name in &artifacts {
        let from = if *name == wheel_name {
            wheel.clone()
        } else {
            stage.join(name)
        };
        sums.push_str(&format!("{}  {name}\n", sha256_hex(&from)?));
    }
    let sums_path = out.join("SHA256SUMS");
    if sums_path.exists() {
        // What an earlier dist made (another version or tag) goes, and its list first: a
        // stale list must never stand beside new artifacts.
        let old = std::fs::read_to_string(&sums_path).unwrap_or_default();
        std::fs::remove_file(&sums_path)?;
        for name in listed_names(&old) {
            if !artifacts.contains(&name) {
                match std::fs::remove_file(out.join(&name)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("removing the earlier {name}"))
                    }
                    _ => {}
                }
            }
        }
    }
    for name in &artifacts {
        let from = if *name == wheel_name {
            wheel.clone()
        } else {
            stage.join(name)
        };
        std::fs::rename(&from, out.join(name))
            .with_context(|| format!("moving {name} into {}", out.display()))?;
    }
    let sums_tmp = stage.join("SHA256SUMS");
    std::fs::write(&sums_tmp, &sums)?;
    std::fs::rename(&sums_tmp, &sums_path)?;
    drop(staging);

    println!(
        "dist: {} profile, {triple}, in {} s (the wheel {} s, the archives {} s)",
        args.profile.name(),
        started.elapsed().as_secs(),
        wheel_time.as_secs(),
        archives_time.as_secs()
    );
    println!(
        "  wheel     {}  (tag {tag})",
        out.join(&wheel_name).display()
    );
    println!("  tarball   {}", out.join(&tarball_name).display());
    println!(
        "  image     {}  (docker build -t toolbox:{version} - < {image_name})",
        out.join(&image_name).display()
    );
    println!("  checksums {}", sums_path.display());
    if !tag.starts_with("py3-none-") {
        println!(
            "dist: note: maturin tagged the wheel {tag}: it found pyo3 in {PACKAGE}'s \
             dependencies, so the binary links libpython and installs only for that Python"
        );
    }
    Ok(())
}

/// maturin, from `MATURIN` or PATH, at a version `pyproject.toml` accepts.
fn find_maturin() -> Result<String> {
    check_maturin(std::env::var("MATURIN").unwrap_or_else(|_| "maturin".into()))
}

fn check_maturin(maturin: String) -> Result<String> {
    let out = match Command::new(&maturin).arg("--version").output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "maturin is not installed (no `{maturin}` on PATH): the wheel is built with maturin \
             {}.{} or later 1.x. Install it with `{MATURIN_INSTALL}` (or `uv tool install maturin`), \
             or set MATURIN to its path; scripts/test-dist.sh installs it into target/dist-venv",
            MATURIN_MIN.0,
            MATURIN_MIN.1
        ),
        Err(e) => return Err(e).with_context(|| format!("running `{maturin} --version`")),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(1).unwrap_or_default();
    let parts: Vec<u64> = version.split('.').map_while(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [major, minor, ..] if *major == MATURIN_MIN.0 && *minor >= MATURIN_MIN.1 => Ok(maturin),
        _ => bail!(
            "`{maturin} --version` says {:?}; the wheel needs maturin {}.{} or later 1.x: \
             `{MATURIN_INSTALL}`",
            text.trim(),
            MATURIN_MIN.0,
            MATURIN_MIN.1
        ),
    }
}

/// Removes what `cargo run` set for xtask itself (its manifest folder, package name and
/// version, …) from `cmd`'s environment. The cargo that maturin starts would pass them on to
/// build scripts, and some (ring's) rebuild when one changes: the build would not reuse the
/// one the test suite made, and the next plain `cargo build` would redo it again.
fn without_cargo_run_env(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_by_cargo_run = name.starts_with("CARGO_PKG_")
            || matches!(
                name.as_ref(),
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_RUSTC_CURRENT_DIR"
            );
        if set_by_cargo_run {
            cmd.env_remove(name.as_ref());
        }
    }
}

/// The target the binary is built for: rustc's host (maturin builds for it).
fn host_triple() -> Result<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc)
        .arg("-vV")
        .output()
        .with_context(|| format!("running `{rustc} -vV`"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .with_context(|| format!("`{rustc} -vV` names no host"))
}

fn only_wheel(dir: &Path) -> Result<PathBuf> {
    let mut wheels = Vec::new();
    for entry in std::fs::read_dir(dir)
        .with_context(|| format!("maturin succeeded but wrote no folder {}", dir.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "whl") {
            wheels.push(path);
        }
    }
    match wheels.len() {
        1 => Ok(wheels.remove(0)),
        n => bail!(
            "maturin wrote {n} wheels into {}, expected one",
            dir.display()
        ),
    }
}

/// `py3-none-manylinux_2_34_x86_64` out of `toolbox-0.1.0-py3-none-manylinux_2_34_x86_64.whl`.
fn wheel_tag(name: &str) -> Result<String> {
    let stem = name
        .strip_suffix(".whl")
        .with_context(|| format!("{name} is not a wheel's name"))?;
    let parts: Vec<&str> = stem.split('-').collect();
    if parts.len() < 5 {
        bail!("{name}: a wheel's name has five or six parts separated by `-`");
    }
    Ok(parts[parts.len() - 3..].join("-"))
}

/// Writes the wheel's `*.data/scripts/toolbox` to `to`, after checking the wheel bundles no
/// shared library (a binary that needed one would not be what the tag promises).
fn extract_binary(wheel: &Path, to: &Path) -> Result<()> {
    let name = file_name(wheel);
    let mut zip = zip::ZipArchive::new(File::open(wheel)?)
        .with_context(|| format!("{name} is not a readable zip"))?;
    let mut found = None;
    let mut bundled = Vec::new();
    for i in 0..zip.len() {
        let entry = zip.by_index(i)?;
        let path = entry.name()?.into_owned();
        let base = path.rsplit('/').next().unwrap_or_default();
        if path.split('/').any(|p| p.ends_with(".libs"))
            || base.ends_with(".so")
            || base.contains(".so.")
        {
            bundled.push(path.clone());
        }
        if path.ends_with(&format!(".data/scripts/{PACKAGE}")) {
            found = Some(i);
        }
    }
    if !bundled.is_empty() {
        bail!(
            "{name} bundles shared libraries ({}): the binary needs libraries outside the \
             manylinux policy; it must link only what every manylinux system has",
            bundled.join(", ")
        );
    }
    let index = found.with_context(|| {
        format!("{name} has no {PACKAGE}-*.data/scripts/{PACKAGE}: is `bindings = \"bin\"` set in pyproject.toml?")
    })?;
    let mut entry = zip.by_index(index)?;
    let mut file = File::create(to)?;
    std::io::copy(&mut entry, &mut file)?;
    file.sync_all()?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Refuses an image whose base has an older glibc than the wheel's tag says the binary needs.
fn check_glibc(tag: &str, debian_release: Option<&str>) -> Result<()> {
    let floor = tag
        .split('-')
        .next_back()
        .and_then(|p| p.strip_prefix("manylinux_"))
        .and_then(|p| {
            let mut it = p.split('_');
            Some((
                it.next()?.parse::<u32>().ok()?,
                it.next()?.parse::<u32>().ok()?,
            ))
        });
    let base = debian_release.and_then(|r| Some((r, image::debian_glibc(r)?)));
    match (floor, base) {
        (Some(floor), Some((release, glibc))) if floor > glibc => bail!(
            "the binary needs glibc {}.{} (wheel tag {tag}), but the image's base, Debian \
             {release}, has {}.{}: build on an older system or raise DEBIAN_RELEASE in \
             deploy/k8s/Dockerfile",
            floor.0,
            floor.1,
            glibc.0,
            glibc.1
        ),
        (None, _) => {
            eprintln!("dist: warning: the wheel tag {tag} states no glibc floor; the image's base may be too old for the binary");
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `<top>/bin/toolbox` and `<top>/share/licenses/toolbox/*`.
fn write_tarball(
    path: &Path,
    top: &str,
    binary: &Path,
    license_files: &[(String, Vec<u8>)],
    mtime: u64,
    level: Compression,
) -> Result<()> {
    let mut tar = TarGz::new(BufWriter::new(File::create(path)?), mtime, level);
    tar.dir(top)?;
    tar.dir(&format!("{top}/bin"))?;
    add_file(&mut tar, &format!("{top}/bin/{PACKAGE}"), binary, 0o755)?;
    for dir in ["share", "share/licenses", "share/licenses/toolbox"] {
        tar.dir(&format!("{top}/{dir}"))?;
    }
    for (name, data) in license_files {
        tar.bytes(&format!("{top}/share/licenses/toolbox/{name}"), 0o644, data)?;
    }
    tar.finish()?.into_inner()?.sync_all()?;
    Ok(())
}

/// The build context: `Dockerfile`, the binary, the licences and the repository files the
/// Dockerfile copies, at their paths.
fn write_context(
    path: &Path,
    root: &Path,
    dockerfile: &image::ContextDockerfile,
    binary: &Path,
    license_files: &[(String, Vec<u8>)],
    mtime: u64,
    level: Compression,
) -> Result<()> {
    let mut tar = TarGz::new(BufWriter::new(File::create(path)?), mtime, level);
    tar.bytes("Dockerfile", 0o644, dockerfile.text.as_bytes())?;
    add_file(&mut tar, image::BINARY, binary, 0o755)?;
    tar.dir(image::LICENSES)?;
    for (name, data) in license_files {
        tar.bytes(&format!("{}/{name}", image::LICENSES), 0o644, data)?;
    }
    let mut dirs: Vec<String> = Vec::new();
    for file in &dockerfile.files {
        let parts: Vec<&str> = file.split('/').collect();
        for depth in 1..parts.len() {
            let dir = parts[..depth].join("/");
            if !dirs.contains(&dir) {
                tar.dir(&dir)?;
                dirs.push(dir);
            }
        }
        let source = root.join(file);
        add_file(&mut tar, file, &source, mode_of(&source)?)?;
    }
    tar.finish()?.into_inner()?.sync_all()?;
    Ok(())
}

fn add_file<W: Write>(tar: &mut TarGz<W>, name: &str, path: &Path, mode: u32) -> Result<()> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let size = file.metadata()?.len();
    tar.file(name, mode, size, file)
}

fn mode_of(path: &Path) -> Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode();
    Ok(if mode & 0o111 != 0 { 0o755 } else { 0o644 })
}

/// `SOURCE_DATE_EPOCH` when set (reproducible archives), else now.
fn source_date_epoch() -> Result<u64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v
            .trim()
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH={v:?} is not a number of seconds")),
        Err(_) => Ok(SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs()),
    }
}

/// The file names a `SHA256SUMS` lists: plain names only, never a path.
fn listed_names(sums: &str) -> Vec<String> {
    sums.lines()
        .filter_map(|l| l.split_once("  ").map(|(_, name)| name.trim()))
        .filter(|n| !n.is_empty() && !n.contains('/') && *n != "." && *n != "..")
        .map(str::to_string)
        .collect()
}

/// The lowercase hex SHA-256 of a file's contents.
pub fn sha256_hex(path: &Path) -> Result<String> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        digest.update(&buf[..n]);
    }
    Ok(digest
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn describe(cmd: &Command) -> String {
    let mut words = vec![cmd.get_program().to_string_lossy().into_owned()];
    words.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_read_and_each_mistake_is_named() {
        assert_eq!(
            parse_args(&[]).unwrap(),
            DistArgs {
                profile: Profile::Release,
                out: None
            }
        );
        assert_eq!(
            parse_args(&["--profile", "dev", "--out=x/y"]).unwrap(),
            DistArgs {
                profile: Profile::Dev,
                out: Some("x/y".into())
            }
        );
        assert_eq!(
            parse_args(&["--profile=release"]).unwrap().profile,
            Profile::Release
        );
        let cases: &[(&[&str], &str)] = &[
            (&["--profile"], "--profile needs a value: release or dev"),
            (
                &["--profile", "--out", "x"],
                "--profile needs a value: release or dev",
            ),
            (&["--out", "--profile=dev"], "--out needs a directory"),
            (
                &["--profile", "bench"],
                "--profile: `bench` is not a profile",
            ),
            (
                &["--profile", "dev", "--profile=dev"],
                "--profile is given twice",
            ),
            (&["--out"], "--out needs a directory"),
            (&["--out", "a", "--out", "b"], "--out is given twice"),
            (&["--release"], "unknown argument `--release`"),
        ];
        for (args, needle) in cases {
            let err = parse_args(args).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn only_plain_names_of_an_earlier_list_are_removed() {
        let old = "ab  toolbox-0.0.9-py3-none-manylinux_2_34_x86_64.whl\n\
                   cd  ../outside\ncd  /etc/passwd\nbroken line\nef  toolbox-0.0.9.tar.gz\n";
        assert_eq!(
            listed_names(old),
            [
                "toolbox-0.0.9-py3-none-manylinux_2_34_x86_64.whl",
                "toolbox-0.0.9.tar.gz"
            ]
        );
    }

    #[test]
    fn the_wheel_tag_is_the_last_three_parts_of_its_name() {
        assert_eq!(
            wheel_tag("toolbox-0.1.0-py3-none-manylinux_2_34_x86_64.whl").unwrap(),
            "py3-none-manylinux_2_34_x86_64"
        );
        assert_eq!(
            wheel_tag("toolbox-0.1.0-1-cp311-cp311-linux_x86_64.whl").unwrap(),
            "cp311-cp311-linux_x86_64"
        );
        assert!(wheel_tag("toolbox.tar.gz").is_err());
        assert!(wheel_tag("a-b.whl").is_err());
    }

    #[test]
    fn an_image_base_older_than_the_binarys_glibc_is_refused() {
        let tag = "py3-none-manylinux_2_38_x86_64";
        let err = check_glibc(tag, Some("bookworm")).unwrap_err().to_string();
        assert!(err.contains("needs glibc 2.38"), "{err}");
        assert!(err.contains("Debian bookworm, has 2.36"), "{err}");
        check_glibc("py3-none-manylinux_2_34_x86_64", Some("bookworm")).unwrap();
        check_glibc(tag, Some("trixie")).unwrap();
        check_glibc(tag, Some("unknown-release")).unwrap();
    }

    /// The format `sha256sum -c` reads: the hex digest, two spaces, the name.
    #[test]
    fn sha256_matches_the_system_sha256sum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"toolbox\n").unwrap();
        let hex = sha256_hex(&path).unwrap();
        std::fs::write(dir.path().join("SUMS"), format!("{hex}  f\n")).unwrap();
        let check = Command::new("sha256sum")
            .args(["-c", "SUMS"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(check.status.success(), "{check:?}");
    }

    /// Without maturin, dist says so and how to install it, before building anything.
    #[test]
    fn a_missing_maturin_is_named_with_how_to_install_it() {
        let err = check_maturin("/nonexistent/maturin".into())
            .unwrap_err()
            .to_string();
        assert!(err.contains("maturin is not installed"), "{err}");
        assert!(err.contains(MATURIN_INSTALL), "{err}");
    }
}
