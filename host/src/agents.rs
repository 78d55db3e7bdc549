//! Finding agent definitions on disk: `.toolbox/agents/*.md` of the workspace and the
//! operator's `[agents] dirs`, read without following links where the workspace could plant
//! them. The definitions themselves (the file format, [`AgentDef`], the rules) are core's
//! (`toolbox_core::agent`); see there for the order and the rules.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::OFlags;
use serde_json::Value;
use toolbox_core::agent::{
    AgentDef, AgentSet, AgentsConfig, AGENTS_DIR, MAX_AGENT_FILE_BYTES, MAX_FILES_PER_FOLDER,
};

use crate::dirfd::{self, Dir, EntryKind};
use crate::workspace::{Workspace, TOOLBOX_DIR};

/// Finds the agents of `workspace` (`.toolbox/agents/*.md`), of the configuration's
/// `[agents] dirs` (`config` is the whole provider configuration, as
/// [`ToolContext::config`](crate::ToolContext::config) holds it) and the built-in `default`
/// agent; see [`toolbox_core::agent`] for the order and the rules. Never fails: an invalid
/// file, folder or `[agents]` table becomes one of the set's
/// [`problems`](AgentSet::problems).
/// Blocking: run it off the async threads.
pub fn discover_agents(workspace: &Workspace, config: &Value) -> AgentSet {
    let mut set = AgentSet::new();
    match open_toolbox_agents(workspace) {
        Ok(Some(dir)) => scan(
            &mut set,
            &dir,
            &format!("{TOOLBOX_DIR}/{AGENTS_DIR}"),
            Links::No,
        ),
        Ok(None) => {}
        Err((file, reason)) => set.problem(file, reason),
    }
    match AgentsConfig::from_config(config) {
        Ok(agents_config) => {
            for given in &agents_config.dirs {
                match open_configured(workspace, given) {
                    Ok((dir, shown, links)) => scan(&mut set, &dir, &shown, links),
                    Err((shown, reason)) => {
                        set.problem(shown, format!("[agents] dirs names {given:?}: {reason}"))
                    }
                }
            }
        }
        Err(e) => set.problem("configuration".to_string(), format!("{e:#}")),
    }
    set.finish()
}

/// Reads every `*.md` file of one folder held open; `shown` is the folder for messages.
fn scan(set: &mut AgentSet, dir: &Dir, shown: &str, links: Links) {
    let entries = match dir.entries() {
        Ok(entries) => entries,
        Err(e) => return set.problem(shown.to_string(), format!("cannot list it: {e}")),
    };
    let mut read = 0;
    for entry in entries {
        let bytes = entry.name.as_bytes();
        if bytes.starts_with(b".") || !bytes.ends_with(b".md") {
            continue; // Notes beside the agents, editors' swap files, .git.
        }
        read += 1;
        if read > MAX_FILES_PER_FOLDER {
            set.problem(
                shown.to_string(),
                format!(
                    "only the first {MAX_FILES_PER_FOLDER} .md files (by name) are read; \
                     the rest are ignored"
                ),
            );
            break;
        }
        let file = format!("{shown}/{}", crate::show_name(&entry.name));
        let problem = match (entry.kind, links) {
            (EntryKind::File, _) | (EntryKind::Symlink, Links::Beneath | Links::Follow) => None,
            (EntryKind::Symlink, Links::No) => Some(format!(
                "it is a symbolic link, which toolbox does not follow in {TOOLBOX_DIR}/ \
                 (put the file itself there)"
            )),
            (EntryKind::Dir, _) => Some("it is a folder, not an agent file".to_string()),
            (EntryKind::Other, _) => Some("it is not a regular file".to_string()),
        };
        if let Some(reason) = problem {
            set.problem(file, reason);
            continue;
        }
        let parsed =
            read_file(dir, &entry.name, links).and_then(|bytes| AgentDef::parse(&bytes, &file));
        match parsed {
            Ok(agent) => set.add(agent),
            Err(reason) => set.problem(file, reason),
        }
    }
}

/// How a folder's links are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Links {
    /// Never followed (`.toolbox/agents`).
    No,
    /// Followed while they stay beneath the folder (a workspace-relative folder).
    Beneath,
    /// Followed (an operator's absolute folder).
    Follow,
}

/// `.toolbox/agents`, opened without following a link; `None` when either does not exist.
fn open_toolbox_agents(workspace: &Workspace) -> Result<Option<Dir>, (String, String)> {
    let toolbox = match open_child_dir_no_link(workspace.root_fd(), OsStr::new(TOOLBOX_DIR)) {
        Ok(Some(dir)) => dir,
        Ok(None) => return Ok(None),
        Err(reason) => return Err((TOOLBOX_DIR.to_string(), reason)),
    };
    open_child_dir_no_link(toolbox.as_fd(), OsStr::new(AGENTS_DIR))
        .map_err(|reason| (format!("{TOOLBOX_DIR}/{AGENTS_DIR}"), reason))
}

/// The folder `name` in `parent`, never through a link; `None` when it does not exist.
fn open_child_dir_no_link(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &OsStr,
) -> Result<Option<Dir>, String> {
    match dirfd::open_child(parent, name, OFlags::DIRECTORY | OFlags::RDONLY) {
        Ok(fd) => Ok(Some(Dir::from_fd(fd))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(match dirfd::file_type_at(parent, name) {
            Ok(rustix::fs::FileType::Symlink) => format!(
                "it is a symbolic link, which toolbox does not follow in {TOOLBOX_DIR}/ \
                 (agents there are not read)"
            ),
            Ok(t) if t != rustix::fs::FileType::Directory => {
                "it is not a folder, so no agents are read from it".to_string()
            }
            _ => format!("cannot open it: {e}"),
        }),
    }
}

/// Opens a folder of `[agents] dirs`: absolute, `~` / `~/…` (the operator's home) or
/// relative to the workspace root. Returns the folder, how it is shown and how its links are
/// treated; or how it is shown and why it cannot be used.
fn open_configured(
    workspace: &Workspace,
    given: &str,
) -> Result<(Dir, String, Links), (String, String)> {
    let absolute = crate::operator_path(given).map_err(|why| (given.to_string(), why))?;
    match absolute {
        Some(path) => {
            let shown = path.display().to_string();
            let shown = shown.trim_end_matches('/').to_string();
            match Dir::open_path(&path) {
                Ok(dir) => Ok((dir, shown, Links::Follow)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    Err((shown, "the folder does not exist".to_string()))
                }
                Err(e) => Err((shown, format!("cannot open it: {e}"))),
            }
        }
        None => {
            let shown = given.trim_end_matches('/').to_string();
            let opened = workspace.locate(given).and_then(|p| workspace.open_dir(&p));
            match opened {
                Ok(dir) => Ok((dir, shown, Links::Beneath)),
                Err(e) if e.is_not_found() => Err((
                    shown,
                    "the folder does not exist in the workspace".to_string(),
                )),
                Err(e) => Err((shown, e.to_string())),
            }
        }
    }
}

/// Reads the file `name` of `dir` (at most one byte over the cap), treating links as told.
fn read_file(dir: &Dir, name: &OsStr, links: Links) -> Result<Vec<u8>, String> {
    let opened: io::Result<File> = match links {
        Links::No => dir.open_file(name),
        Links::Beneath => dir.open_file_beneath(Path::new(name)),
        Links::Follow => {
            dirfd::open_child_following(dir.as_fd(), name, OFlags::RDONLY | OFlags::NONBLOCK)
                .and_then(|fd| dirfd::regular_file(fd, name))
        }
    };
    let file = opened.map_err(|e| explain_open(&e))?;
    let mut bytes = Vec::new();
    file.take(MAX_AGENT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    Ok(bytes)
}

/// An open error in words.
fn explain_open(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) if code == rustix::io::Errno::XDEV.raw_os_error() => {
            "it is a link that leads out of its folder, which is not followed".to_string()
        }
        Some(code) if code == rustix::io::Errno::LOOP.raw_os_error() => {
            "it is a symbolic link, which is not followed here".to_string()
        }
        _ if e.kind() == io::ErrorKind::NotFound => {
            "it does not exist (or is a broken link)".to_string()
        }
        _ => format!("cannot open it: {e}"),
    }
}

#[cfg(test)]
mod tests;
