//! The one stdout every command that prints writes through.
//!
//! A reader that closes early (`kubelet-pivot status | head -1`) is not an
//! error: the write fails with `BrokenPipe`, this writer remembers it, the
//! command stops at its next `?`, and [`finish`] turns whatever the command
//! returned into a quiet exit 0, as coreutils and kubectl end on a closed
//! pipe. SIGPIPE stays ignored (Rust's default) for every command: a
//! supervisor must never die of it, and the tools do not need it.

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout found its reader gone.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether stdout's reader has gone: nothing more can be shown, so nothing
/// is reported either.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// The process's stdout, remembering a closed reader.
#[derive(Debug)]
pub struct Stdout(io::Stdout);

/// The writer for a command's output.
pub fn stdout() -> Stdout {
    Stdout(io::stdout())
}

fn note<T>(result: io::Result<T>) -> io::Result<T> {
    if let Err(err) = &result {
        if err.kind() == io::ErrorKind::BrokenPipe {
            CLOSED.store(true, Ordering::Relaxed);
        }
    }
    result
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        note(self.0.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        note(self.0.write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        note(self.0.flush())
    }
}

/// The exit of a command that printed: its own code, or 0 when its reader
/// closed stdout (then what it printed to stderr was already suppressed by
/// `main::fail`). Flushes first, so a closed pipe is found here at the
/// latest rather than in the standard library's silent flush at exit.
pub fn finish(code: ExitCode) -> ExitCode {
    let flushed = stdout().flush();
    if closed() {
        return ExitCode::SUCCESS;
    }
    match flushed {
        Ok(()) => code,
        Err(err) => {
            eprintln!(
                "{}: error: cannot write to stdout: {err}",
                crate::program_name()
            );
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_broken_pipe_marks_stdout_closed() {
        let other: io::Result<()> = Err(io::Error::other("disk full"));
        assert!(note(other).is_err());
        assert!(!closed());
        let broken: io::Result<()> = Err(io::ErrorKind::BrokenPipe.into());
        assert!(note(broken).is_err());
        assert!(closed());
    }
}
