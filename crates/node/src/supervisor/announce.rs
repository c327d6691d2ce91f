//! A contender says when it blocks. Its open of the lock file tells the
//! holder that a flock is coming; the flock itself makes no event. So once
//! its own flock thread sleeps in flock on the lock file (read from
//! `/proc/self/task/TID/syscall`, a few microseconds; looked at every
//! [`CADENCE`] through the event loop), a self-hosted contender opens the
//! lock file once more through `/proc/self/fd/N` (the same inode, whatever
//! the path names now) and closes it: the holder's inotify wakes it at the
//! moment a look finds the contender blocked, instead of at its next timed
//! look. The open is only a hint: the holder decides on its own looks, as
//! for any open, and a holder of an older build just looks once more.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;

use crate::procfs::syscall::parse_syscall;
use crate::procfs::FileKey;

/// How often the flock thread is looked at.
const CADENCE: Duration = Duration::from_micros(50);
/// How long after the flock thread started it is looked for (it blocks
/// within a millisecond; a loaded node may take longer, then the holder's
/// own looks still find it).
const PATIENCE: Duration = Duration::from_millis(20);

/// The flock thread's id, set by the thread before it calls flock (0 until
/// then).
pub(super) type FlockTid = Arc<AtomicI32>;

/// An announcement to make once the flock thread blocks.
#[derive(Debug)]
pub(super) struct Announce {
    tid: FlockTid,
    fd: RawFd,
    key: FileKey,
    until: Instant,
}

impl Announce {
    /// For the flock thread `tid`, waiting on descriptor `fd` of the file `key`.
    pub(super) fn new(tid: FlockTid, fd: RawFd, key: FileKey, now: Instant) -> Announce {
        Announce {
            tid,
            fd,
            key,
            until: now + PATIENCE,
        }
    }

    /// When to look at the flock thread next (None: given up).
    pub(super) fn next_look(&self, now: Instant) -> Option<Instant> {
        (now < self.until).then(|| now + CADENCE)
    }

    /// One look: true when the announcement is made (or given up), false to
    /// look again.
    pub(super) fn look(&self, now: Instant) -> bool {
        if now >= self.until {
            debug!("our flock thread was not seen blocked in time; the holder's own looks will find it");
            return true;
        }
        if !self.blocked() {
            return false;
        }
        // The same inode as our descriptor, whatever the path names now.
        if let Err(err) = std::fs::File::open(format!("/proc/self/fd/{}", self.fd)) {
            debug!(%err, "cannot open the lock file again to say we are blocked");
        }
        true
    }

    /// Whether the flock thread sleeps in a blocking flock on our file.
    fn blocked(&self) -> bool {
        let tid = self.tid.load(Ordering::SeqCst);
        if tid <= 0 {
            return false;
        }
        let Ok(text) = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) else {
            return false;
        };
        let fd = parse_syscall(&text).and_then(|call| call.blocking_flock_fd());
        fd == Some(self.fd)
            && std::fs::metadata(format!("/proc/self/fd/{}", self.fd))
                .is_ok_and(|m| FileKey::of_metadata(&m) == self.key)
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::AsRawFd;

    #[test]
    fn an_announcement_waits_for_the_flock_thread_and_gives_up_in_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lock");
        let held = nix::fcntl::Flock::lock(
            File::create(&path).expect("create"),
            nix::fcntl::FlockArg::LockExclusive,
        )
        .expect("flock");
        let waiter = File::open(&path).expect("open");
        let key = FileKey::of_path(&path).expect("key");
        let tid: FlockTid = Arc::default();
        let now = Instant::now();
        let announce = Announce::new(tid.clone(), waiter.as_raw_fd(), key, now);
        assert!(!announce.look(now), "no flock thread yet");
        assert_eq!(announce.next_look(now), Some(now + CADENCE));
        let fd = waiter.as_raw_fd();
        let thread_tid = tid.clone();
        let thread = std::thread::spawn(move || {
            thread_tid.store(nix::unistd::gettid().as_raw(), Ordering::SeqCst);
            // SAFETY: a plain system call on a descriptor the test keeps open.
            unsafe { libc::flock(fd, libc::LOCK_EX) }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !announce.blocked() {
            assert!(
                Instant::now() < deadline,
                "the flock thread never seen blocked"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(announce.look(now), "blocked: announced");
        drop(held);
        assert_eq!(thread.join().expect("thread"), 0, "flock");
        let late = now + PATIENCE;
        assert!(announce.look(late), "given up after the patience");
        assert_eq!(announce.next_look(late), None);
    }
}
