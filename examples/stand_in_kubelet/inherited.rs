//! Inherited lock descriptors and their release (`STANDIN_UNLOCK_INHERITED`).

use std::io::{self};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::getpid;

use crate::error::Error;
use crate::events::{now_ns, Events};

/// The descriptors open in this process, from /proc/self/fd (empty if it cannot be read).
pub(super) fn open_fds() -> Vec<RawFd> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut fds: Vec<RawFd> = dir
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    fds
}

pub(super) fn is_cloexec(fd: RawFd) -> bool {
    // SAFETY: F_GETFD on any integer only reads the descriptor table.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    flags >= 0 && flags & libc::FD_CLOEXEC != 0
}

/// Descriptors inherited across exec that name a regular file (and `lock_path`, if given).
fn inherited_lock_fds(lock_path: Option<&Path>) -> Vec<RawFd> {
    open_fds()
        .into_iter()
        .filter(|fd| *fd > 2 && !is_cloexec(*fd))
        .filter(|fd| {
            nix::sys::stat::fstat(*fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
        })
        .filter(|fd| {
            let Some(want) = lock_path else {
                return true;
            };
            let Ok(link) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
                return false;
            };
            let mut deleted = want.as_os_str().to_owned();
            deleted.push(" (deleted)");
            link.as_os_str() == want.as_os_str() || link.as_os_str() == deleted
        })
        .collect()
}

/// After `delay`, unlocks every inherited lock descriptor (on a thread of its own).
pub(super) fn start_unlocker(
    events: Events,
    delay: Duration,
    lock_path: Option<PathBuf>,
) -> Result<(), Error> {
    std::thread::Builder::new()
        .name("unlocker".to_owned())
        .spawn(move || {
            std::thread::sleep(delay);
            let fds = inherited_lock_fds(lock_path.as_deref());
            if fds.is_empty() {
                eprintln!(
                    "stand-in kubelet pid {}: no inherited lock descriptor to unlock",
                    getpid()
                );
                if let Err(err) = events.record("unlocked", now_ns(), &[("fd", "none")]) {
                    eprintln!("stand-in kubelet pid {}: {err}", getpid());
                }
            }
            for fd in fds {
                // SAFETY: flock on an open descriptor of ours touches no memory.
                if unsafe { libc::flock(fd, libc::LOCK_UN) } != 0 {
                    eprintln!(
                        "stand-in kubelet pid {}: flock(fd {fd}, LOCK_UN) failed: {}",
                        getpid(),
                        io::Error::last_os_error()
                    );
                    continue;
                }
                eprintln!(
                    "stand-in kubelet pid {} unlocked inherited fd {fd}",
                    getpid()
                );
                let fd = fd.to_string();
                if let Err(err) = events.record("unlocked", now_ns(), &[("fd", fd.as_str())]) {
                    eprintln!("stand-in kubelet pid {}: {err}", getpid());
                }
            }
        })
        .map(drop)
        .map_err(|source| Error::Os {
            what: "start the unlocker thread",
            source,
        })
}
