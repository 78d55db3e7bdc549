//! The process table, read from `/proc`: who is whose child, in which process group and
//! session, since when.

use std::collections::{HashMap, HashSet};

/// The fields of `/proc/<pid>/stat` containment needs.
#[derive(Debug, Clone)]
pub struct ProcStat {
    /// The process id.
    pub pid: i32,
    /// `Z` for a zombie.
    pub state: char,
    /// The parent's process id.
    pub ppid: i32,
    /// The process group id.
    pub pgrp: i32,
    /// The session id.
    pub session: i32,
    /// Start time in clock ticks after boot: with the pid, a process's identity.
    pub start: u64,
}

/// Parses one `/proc/<pid>/stat` line.
pub fn parse_stat(pid: i32, stat: &str) -> Option<ProcStat> {
    // Fields after the command name, which may itself contain spaces and parentheses:
    // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
    // cutime cstime priority nice num_threads itrealvalue starttime ...
    let rest: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some(ProcStat {
        pid,
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        pgrp: rest.get(2)?.parse().ok()?,
        session: rest.get(3)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
    })
}

/// Every process on the system, as far as `/proc` shows it at this moment.
pub fn processes() -> Vec<ProcStat> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(pid, &stat)
        })
        .collect()
}

/// The descendants of `root` in a process table (not `root` itself).
pub fn descendants(root: i32, table: &[ProcStat]) -> Vec<&ProcStat> {
    let mut children: HashMap<i32, Vec<&ProcStat>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = HashSet::from([root]);
    while let Some(pid) = stack.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if seen.insert(child.pid) {
                out.push(*child);
                stack.push(child.pid);
            }
        }
    }
    out
}

/// The start time of a process, for the janitor to recognise toolbox.
pub(super) fn start_time(pid: i32) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(pid, &stat)
        .map(|p| p.start)
        .ok_or_else(|| std::io::Error::other("unreadable /proc stat"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_and_trees() {
        let p = parse_stat(
            7,
            "7 (a (b) c) S 1 7 7 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0",
        )
        .unwrap();
        assert_eq!(
            (p.state, p.ppid, p.pgrp, p.session, p.start),
            ('S', 1, 7, 7, 12345)
        );
        let mk = |pid, ppid| ProcStat {
            pid,
            state: 'S',
            ppid,
            pgrp: pid,
            session: pid,
            start: 0,
        };
        let table = [mk(2, 1), mk(3, 2), mk(4, 3), mk(5, 1)];
        let mut d: Vec<i32> = descendants(2, &table).iter().map(|p| p.pid).collect();
        d.sort();
        assert_eq!(d, [3, 4]);
    }
}
