//! The descriptor work of toolbox's own standard streams and terminal, on rustix: copies of
//! a descriptor, pipes, redirecting stderr, a terminal's width, dropping typed-ahead keys,
//! and waiting for input with a timeout. The binary's stderr pump, its progress line and its
//! approval prompt use these instead of calling libc themselves.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};

/// A close-on-exec copy of `fd`, numbered 3 or above (never one of the standard streams).
pub fn copy_of(fd: impl AsFd) -> io::Result<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, 3)?)
}

/// Points this process's stderr (descriptor 2) at `to`, atomically: a concurrent writer sees
/// either the old stderr or the new one.
pub fn redirect_stderr(to: impl AsFd) -> io::Result<()> {
    Ok(rustix::stdio::dup2_stderr(to)?)
}

/// A pipe, both ends close-on-exec: `(read, write)`, the read end non-blocking when asked.
pub fn pipe(nonblocking_read: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    if nonblocking_read {
        rustix::io::ioctl_fionbio(&read, true)?;
    }
    Ok((read, write))
}

/// The width of the terminal `fd` is, in columns; `None` when it is no terminal or cannot
/// say.
pub fn columns(fd: impl AsFd) -> Option<usize> {
    rustix::termios::tcgetwinsize(fd)
        .ok()
        .map(|size| usize::from(size.ws_col))
        .filter(|&cols| cols > 0)
}

/// Drops whatever was typed on the terminal `fd` and not read yet: keys pressed before a
/// question was on the screen are not its answer.
pub fn discard_typed_ahead(fd: impl AsFd) {
    let _ = rustix::termios::tcflush(fd, rustix::termios::QueueSelector::IFlush);
}

/// What [`wait_readable`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// There is something to read (or the end of input).
    Readable {
        /// The other end hung up as well.
        hung_up: bool,
    },
    /// Nothing arrived within the time.
    TimedOut,
}

/// Waits up to `timeout` (for ever with `None`) for `fd` to have something to read; an
/// interrupted wait is retried.
pub fn wait_readable(fd: impl AsFd, timeout: Option<Duration>) -> io::Result<Readiness> {
    let timeout = timeout.map(|t| Timespec {
        tv_sec: t.as_secs() as i64,
        tv_nsec: i64::from(t.subsec_nanos()),
    });
    loop {
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) => return Ok(Readiness::TimedOut),
            Ok(_) => {
                let seen = fds[0].revents();
                return Ok(Readiness::Readable {
                    hung_up: seen.contains(PollFlags::HUP),
                });
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Reads what `fd` has into `buf` (an interrupted read is retried): 0 at the end of input.
pub fn read(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match rustix::io::read(&fd, &mut *buf) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return Ok(other?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_reads_what_was_written_and_times_out_when_empty() {
        let (read_end, write_end) = pipe(true).unwrap();
        assert_eq!(
            wait_readable(&read_end, Some(Duration::from_millis(10))).unwrap(),
            Readiness::TimedOut
        );
        rustix::io::write(&write_end, b"hi").unwrap();
        assert_eq!(
            wait_readable(&read_end, Some(Duration::from_millis(10))).unwrap(),
            Readiness::Readable { hung_up: false }
        );
        let mut buf = [0u8; 8];
        assert_eq!(read(&read_end, &mut buf).unwrap(), 2);
        // Non-blocking: nothing left is an error, not a wait.
        assert!(read(&read_end, &mut buf).is_err());
        drop(write_end);
        assert_eq!(
            wait_readable(&read_end, Some(Duration::from_millis(10))).unwrap(),
            Readiness::Readable { hung_up: true }
        );
        assert_eq!(read(&read_end, &mut buf).unwrap(), 0);
        let copy = copy_of(&read_end).unwrap();
        assert!(std::os::fd::AsRawFd::as_raw_fd(&copy) >= 3);
        // A pipe is no terminal.
        assert_eq!(columns(&read_end), None);
    }
}
