//! `--lock-file` and the overlap probe (`STANDIN_OVERLAP_PROBE`): taking them, and reporting
//! an overlap.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::process::exit;

use nix::unistd::getpid;

use crate::error::Error;
use crate::events::{event_line, now_ns, Events};
use crate::{EXIT_OVERLAP, OVERLAP_MARKER_SUFFIX};

/// Takes `--lock-file` the way the real kubelet does: blocking exclusive flock, fd kept for life.
pub(super) fn take_lock_file(path: &Path, events: &Events) -> Result<File, Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| Error::Io {
            what: "open --lock-file",
            path: path.to_owned(),
            source,
        })?;
    let lock_err = |source| Error::Io {
        what: "flock --lock-file",
        path: path.to_owned(),
        source,
    };
    // fs2's methods, not std's same-named `File::try_lock`/`File::lock`.
    match fs2::FileExt::try_lock_exclusive(&file) {
        Ok(()) => return Ok(file),
        Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
        Err(err) => return Err(lock_err(err)),
    }
    let lock_field = path.display().to_string();
    events.record("lock-wait", now_ns(), &[("lock", lock_field.as_str())])?;
    say!(
        "stand-in kubelet pid {} waiting for the lock on {}",
        getpid(),
        path.display()
    );
    loop {
        match fs2::FileExt::lock_exclusive(&file) {
            Ok(()) => return Ok(file),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(lock_err(err)),
        }
    }
}

/// Takes the overlap probe or, if another kubelet holds it, reports OVERLAP and exits 97.
pub(super) fn take_probe(path: &Path, events: &Events) -> Result<File, Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
        .map_err(|source| Error::Io {
            what: "open the overlap probe",
            path: path.to_owned(),
            source,
        })?;
    // fs2's method, not std's same-named `File::try_lock`.
    match fs2::FileExt::try_lock_exclusive(&file) {
        Ok(()) => Ok(file),
        Err(err) if err.kind() == io::ErrorKind::WouldBlock => report_overlap(path, &file, events),
        Err(source) => Err(Error::Io {
            what: "flock the overlap probe",
            path: path.to_owned(),
            source,
        }),
    }
}

fn report_overlap(path: &Path, file: &File, events: &Events) -> ! {
    let holder = probe_holder(file).map_or_else(|| "unknown".to_owned(), |pid| pid.to_string());
    let probe_field = path.display().to_string();
    say!(
        "STAND-IN KUBELET OVERLAP: another kubelet holds the overlap probe {probe_field} (pid {holder})"
    );
    let t = now_ns();
    let extra = [("holder", holder.as_str()), ("probe", probe_field.as_str())];
    let mut marker_path = OsString::from(path.as_os_str());
    marker_path.push(OVERLAP_MARKER_SUFFIX);
    let marker = OpenOptions::new()
        .append(true)
        .create(true)
        .open(&marker_path)
        .and_then(|mut marker| marker.write_all(event_line("OVERLAP", t, &extra).as_bytes()));
    // Keep going on failures: the exit code and the other report still tell the story.
    if let Err(err) = marker {
        say!(
            "stand-in kubelet pid {}: failed to write the overlap marker {}: {err}",
            getpid(),
            Path::new(&marker_path).display()
        );
    }
    if let Err(err) = events.record("OVERLAP", t, &extra) {
        say!("stand-in kubelet pid {}: {err}", getpid());
    }
    exit(EXIT_OVERLAP);
}

/// The pid holding the flock on `file`, from /proc/locks (`N: FLOCK ADVISORY WRITE PID MAJ:MIN:INO ..`).
fn probe_holder(file: &File) -> Option<i32> {
    let meta = file.metadata().ok()?;
    let (major, minor) = (
        nix::sys::stat::major(meta.dev()),
        nix::sys::stat::minor(meta.dev()),
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let mut fields = line.split_whitespace().skip(1);
        // Blocked waiters are listed as `N: -> FLOCK ...`.
        if fields.next()? != "FLOCK" {
            return None;
        }
        let pid = fields.nth(2)?.parse::<i32>().ok()?;
        let mut dev_ino = fields.next()?.split(':');
        let same_file = u64::from_str_radix(dev_ino.next()?, 16).ok()? == major
            && u64::from_str_radix(dev_ino.next()?, 16).ok()? == minor
            && dev_ino.next()?.parse::<u64>().ok()? == meta.ino();
        (same_file && pid != getpid().as_raw()).then_some(pid)
    })
}
