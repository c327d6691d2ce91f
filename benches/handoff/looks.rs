//! The cost of each kind of look a holder makes at a contender (ARCHITECTURE.md, "Seeing a
//! contender block"): a full look reads /proc/locks, which takes the kernel's `file_rwsem`
//! for writing (every flock on the node waits meanwhile, for an RCU grace period when the
//! semaphore was idle); a fast look reads the claimant's `/proc/PID/task/*/syscall` and
//! stats `/proc/PID/fd/N` (`kp_node::procfs::syscall`), taking no kernel-wide lock.
//!
//! A child (util-linux `flock`) blocks on a lock this process holds; each look is timed
//! alone, after a pause like a holder's between events (so the semaphore's idle state,
//! not a warm loop, is measured), alternating the kinds. Run the bench under
//! `../shared/tools/under-load` for the loaded figures.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kp_node::procfs::{self, FileKey};

use crate::support::bench::{fail, stats, Stats};

/// Pause before each look: a holder looks on events, not in a loop.
const PAUSE: Duration = Duration::from_millis(5);

pub struct LookCosts {
    pub full: Stats,
    pub fast: Stats,
}

/// Times `rounds` looks of each kind at a child blocked on a lock in `dir`.
pub fn measure(dir: &Path, rounds: usize) -> LookCosts {
    let path = dir.join("looks.lock");
    let held = nix::fcntl::Flock::lock(
        File::create(&path).unwrap_or_else(|err| fail(&format!("create {path:?}: {err}"))),
        nix::fcntl::FlockArg::LockExclusive,
    )
    .unwrap_or_else(|(_, err)| fail(&format!("flock {path:?}: {err}")));
    let key = FileKey::of_path(&path).unwrap_or_else(|err| fail(&err.to_string()));
    let mut child = Command::new("flock")
        .arg(&path)
        .arg("true")
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| fail(&format!("util-linux flock: {err}")));
    let pid = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !procfs::syscall::sleeps_in_flock(pid, key).unwrap_or(false) {
        if Instant::now() > deadline {
            fail("the flock child never blocked");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut full = Vec::with_capacity(rounds);
    let mut fast = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        std::thread::sleep(PAUSE);
        let t = Instant::now();
        let seen = procfs::read_locks()
            .unwrap_or_else(|err| fail(&format!("/proc/locks: {err}")))
            .iter()
            .any(|e| e.blocked && e.file == key);
        full.push(t.elapsed().as_secs_f64() * 1e6);
        if !seen {
            fail("/proc/locks does not show the blocked child");
        }
        std::thread::sleep(PAUSE);
        let t = Instant::now();
        let seen = procfs::syscall::sleeps_in_flock(pid, key)
            .unwrap_or_else(|err| fail(&format!("fast look: {err}")));
        fast.push(t.elapsed().as_secs_f64() * 1e6);
        if !seen {
            fail("the fast look does not see the blocked child");
        }
    }
    drop(held);
    let _ = child.wait();
    LookCosts {
        full: stats(&full),
        fast: stats(&fast),
    }
}
