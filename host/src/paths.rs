//! Paths an operator writes in a configuration file, and programs found on PATH.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// An operator's path as written: `~` and `~/…` under the home folder (`HOME`), an absolute
/// path as is, `None` for a relative one (whose base the caller knows: the workspace, or an
/// error). `~user` is not expanded (it is taken as relative). The error says why `~` cannot
/// be expanded (`HOME` unset or empty).
pub fn operator_path(given: &str) -> Result<Option<PathBuf>, String> {
    if given == "~" || given.starts_with("~/") {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .ok_or_else(|| "HOME is not set, so ~ cannot be expanded".to_string())?;
        let rest = given.trim_start_matches('~').trim_start_matches('/');
        return Ok(Some(Path::new(&home).join(rest)));
    }
    if Path::new(given).is_absolute() {
        return Ok(Some(PathBuf::from(given)));
    }
    Ok(None)
}

/// A file name as one safe line for messages: control characters escaped (a name is the
/// Whether `path` is a file someone may execute.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A program: `program` itself when it holds a `/` (and is executable), else the first
/// executable of that name in PATH's absolute folders (a relative entry would depend on the
/// working folder).
pub fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let path = PathBuf::from(program);
        return is_executable(&path).then_some(path);
    }
    find_program_in(program, &std::env::var_os("PATH")?)
}

/// [`find_program`]'s search of `path` (a PATH value) for `program`.
pub fn find_program_in(program: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

/// workspace's, so it may hold a newline or an escape sequence).
pub fn show_name(name: &OsStr) -> String {
    let text = name.to_string_lossy();
    if !text.chars().any(char::is_control) {
        return text.into_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_absolute_and_relative() {
        let home = PathBuf::from(std::env::var_os("HOME").expect("HOME is set for tests"));
        assert_eq!(operator_path("~"), Ok(Some(home.clone())));
        assert_eq!(operator_path("~/a/b"), Ok(Some(home.join("a/b"))));
        assert_eq!(operator_path("/srv/x"), Ok(Some(PathBuf::from("/srv/x"))));
        assert_eq!(operator_path("rel/x"), Ok(None));
        assert_eq!(operator_path("~bob/x"), Ok(None));
    }
}
