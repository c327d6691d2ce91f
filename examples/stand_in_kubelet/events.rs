//! The event log (`STANDIN_LOG`): one line per event, each in one `write()`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::unistd::{getpid, getppid};

use crate::error::Error;

/// The optional event log (`STANDIN_LOG`); recording is a no-op without one.
#[derive(Default)]
pub(super) struct Events {
    file: Option<(PathBuf, File)>,
}

impl Events {
    pub(super) fn open(path: &Path) -> Result<Self, Error> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|source| Error::Io {
                what: "open the event log",
                path: path.to_owned(),
                source,
            })?;
        Ok(Events {
            file: Some((path.to_owned(), file)),
        })
    }

    pub(super) fn raw_fd(&self) -> Option<RawFd> {
        self.file.as_ref().map(|(_, file)| file.as_raw_fd())
    }

    /// A second handle on the same log (for another thread).
    pub(super) fn try_clone(&self) -> Result<Self, Error> {
        let Some((path, file)) = &self.file else {
            return Ok(Events::default());
        };
        let file = file.try_clone().map_err(|source| Error::Io {
            what: "duplicate the event log descriptor of",
            path: path.clone(),
            source,
        })?;
        Ok(Events {
            file: Some((path.clone(), file)),
        })
    }

    /// Appends `<event> t=.. pid=.. ppid=.. k=v..` with a single `write()`, so lines from
    /// concurrent writers never interleave.
    pub(super) fn record(
        &self,
        event: &str,
        t_ns: u128,
        extra: &[(&str, &str)],
    ) -> Result<(), Error> {
        let Some((path, file)) = &self.file else {
            return Ok(());
        };
        let line = event_line(event, t_ns, extra);
        let io_err = |source| Error::Io {
            what: "append to the event log",
            path: path.clone(),
            source,
        };
        let mut writer = file;
        let written = writer.write(line.as_bytes()).map_err(io_err)?;
        if written != line.len() {
            return Err(io_err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {written} of {} bytes", line.len()),
            )));
        }
        Ok(())
    }
}

pub(super) fn event_line(event: &str, t_ns: u128, extra: &[(&str, &str)]) -> String {
    let mut line = format!("{event} t={t_ns} pid={} ppid={}", getpid(), getppid());
    for (key, value) in extra {
        line.push(' ');
        line.push_str(key);
        line.push('=');
        line.push_str(value);
    }
    line.push('\n');
    line
}

pub(super) fn now_ns() -> u128 {
    // The realtime clock is before the epoch only on a badly broken host; report 0 then.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos())
}

pub(super) fn path_field(path: Option<&Path>) -> String {
    path.map_or_else(|| "-".to_owned(), |path| path.display().to_string())
}
