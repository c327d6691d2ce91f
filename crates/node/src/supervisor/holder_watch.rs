//! A waiter's event source for "the recorded holder may be gone": pidfds of
//! the holder's supervisor and kubelet, readable when the process exits.
//! While the holder record names a live supervisor whose kubelet runs on
//! the inode we wait on, nothing can need fencing, and these two pidfds (plus
//! inotify on the record) replace the 100 ms look the waiter made before.
//! Where a pid cannot be turned into a pidfd (not in our PID namespace:
//! `/proc` shows another namespace's pids), there is no watch and the waiter
//! keeps its timed look.
//!
//! `unsafe` is allowed here for the `pidfd_open` system call (libc; nix 0.29
//! has no wrapper) and tokio's registration of the descriptor it returns.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::procfs::{self, ProcessId};

/// The pidfds of one holder record's supervisor and kubelet.
pub(super) struct HolderWatch {
    pub(super) supervisor: ProcessId,
    pub(super) kubelet: ProcessId,
    fds: [AsyncFd<OwnedFd>; 2],
}

impl HolderWatch {
    /// Pidfds of both processes (ids as `/proc` shows them), or `None`
    /// when either cannot be had (gone, reused, not in our namespace).
    pub(super) fn open(supervisor: ProcessId, kubelet: ProcessId) -> Option<HolderWatch> {
        let fds = [pidfd_of(supervisor)?, pidfd_of(kubelet)?];
        Some(HolderWatch {
            supervisor,
            kubelet,
            fds,
        })
    }

    /// Whether it watches exactly these two processes.
    pub(super) fn watches(&self, supervisor: ProcessId, kubelet: ProcessId) -> bool {
        self.supervisor == supervisor && self.kubelet == kubelet
    }

    /// Returns once either process has exited (its pidfd is readable).
    pub(super) async fn exited(&self) {
        let [a, b] = &self.fds;
        tokio::select! {
            r = a.readable() => drop(r),
            r = b.readable() => drop(r),
        }
    }
}

/// Waits for the watched holder's exit; never returns without a watch.
pub(super) async fn exited_opt(watch: &Option<HolderWatch>) {
    match watch {
        Some(w) => w.exited().await,
        None => std::future::pending().await,
    }
}

/// A pidfd for the process `/proc` shows as `id`, checked to be that very
/// process after it was opened (its pid may have been reused before).
fn pidfd_of(id: ProcessId) -> Option<AsyncFd<OwnedFd>> {
    let local = procfs::local_pid_of_view(id.pid)?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; nothing is borrowed.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, local, libc::PIDFD_NONBLOCK) };
    if raw < 0 {
        return None;
    }
    let raw = i32::try_from(raw).ok()?;
    // SAFETY: `raw` is a descriptor we own, returned by pidfd_open just now.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // The pidfd names whatever had pid `local` at the open: the process we
    // mean only if it still has the recorded start time now.
    if !id.is_alive() {
        return None;
    }
    // SAFETY: the AsyncFd owns `fd`: it stays open until the AsyncFd is
    // dropped, which deregisters it first.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_pidfd_wakes_when_the_process_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        let start_time = procfs::stat(pid).expect("stat").start_time;
        let id = ProcessId { pid, start_time };
        let me = procfs::self_id().expect("self id");
        let watch = HolderWatch::open(me, id).expect("pidfds of ourselves and the child");
        assert!(watch.watches(me, id));
        let early = tokio::time::timeout(Duration::from_millis(100), watch.exited()).await;
        assert!(early.is_err(), "woke while both processes run");
        child.kill().expect("kill");
        tokio::time::timeout(Duration::from_secs(5), watch.exited())
            .await
            .expect("woke after the child's exit");
        let _ = child.wait();
    }

    #[test]
    fn a_reused_pid_gets_no_watch() {
        let me = procfs::self_id().expect("self id");
        let wrong = ProcessId {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        assert!(pidfd_of(wrong).is_none());
    }
}
