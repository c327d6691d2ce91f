//! Whether a process sleeps in a blocking flock(2) on a given file, read
//! from the process's own `/proc` files: `/proc/PID/task/TID/syscall` names
//! the system call a sleeping thread is in and its arguments, and
//! `/proc/PID/fd/N` the file behind the descriptor. Neither takes the
//! kernel's `file_rwsem`, which every read of `/proc/locks` takes for
//! writing (stalling every flock on the node meanwhile, for an RCU grace
//! period when the semaphore was idle): this is the cheap look a holder
//! makes at a claimant it already knows, many times a millisecond if need
//! be, before one read of `/proc/locks` confirms. ARCHITECTURE.md,
//! "Seeing a contender block", has the measurements.
//!
//! Reading another process's `syscall` file needs ptrace access to it
//! (root, or the same uid without a Yama restriction); without it the
//! look fails and the caller falls back to `/proc/locks`.

use std::fs;
use std::io::{self, Read};

use super::FileKey;

/// Most threads of one process looked at: a supervisor has a handful (the
/// event loop, its flock thread, a few of the blocking pool). A claimant
/// with more costs each look at most this many small reads; one whose flock
/// thread is not among them is still seen by the full looks.
const MAX_TASKS: usize = 64;
/// A `syscall` line is under 200 bytes.
const LINE_BYTES: usize = 256;

/// The system call a sleeping thread is in, with its first two arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SleepingCall {
    pub nr: i64,
    pub arg0: u64,
    pub arg1: u64,
}

/// Parses a `syscall` file: `NR ARG0 ARG1 ... SP PC` for a thread asleep in
/// a system call; `running` (a running thread) and `-1 SP PC` (asleep
/// outside any system call) say nothing about a flock.
pub fn parse_syscall(content: &str) -> Option<SleepingCall> {
    let mut fields = content.split_whitespace();
    let nr: i64 = fields.next()?.parse().ok()?;
    if nr < 0 {
        return None;
    }
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
    let arg0 = hex(fields.next()?)?;
    let arg1 = hex(fields.next()?)?;
    Some(SleepingCall { nr, arg0, arg1 })
}

impl SleepingCall {
    /// The descriptor of a flock(2) that waits for the lock (not a
    /// LOCK_NB one, not an unlock).
    pub fn blocking_flock_fd(&self) -> Option<i32> {
        let op = self.arg1 as libc::c_int;
        let locks = op & (libc::LOCK_EX | libc::LOCK_SH) != 0;
        let waits = op & libc::LOCK_NB == 0;
        (self.nr == libc::SYS_flock && locks && waits)
            .then(|| i32::try_from(self.arg0).ok())
            .flatten()
    }
}

/// Whether a thread of `pid` (in our `/proc`'s view) sleeps in a blocking
/// flock on the file `key`. An error when the process's files cannot be
/// read (gone, or no ptrace access): the caller then reads `/proc/locks`.
pub fn sleeps_in_flock(pid: i32, key: FileKey) -> io::Result<bool> {
    let mut line = [0u8; LINE_BYTES];
    for tid in tasks(pid)? {
        let tid = tid?;
        let n = match fs::File::open(format!("/proc/{pid}/task/{tid}/syscall")) {
            Ok(mut f) => f.read(&mut line)?,
            // A thread that exited since the listing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let call = std::str::from_utf8(&line[..n]).ok().and_then(parse_syscall);
        let Some(fd) = call.and_then(|c| c.blocking_flock_fd()) else {
            continue;
        };
        match fs::metadata(format!("/proc/{pid}/fd/{fd}")) {
            Ok(meta) if FileKey::of_metadata(&meta) == key => return Ok(true),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Whether a thread of `pid` waits for a CPU (state `R`: woken, not run
/// yet, or running). A contender whose flock thread was woken by our release
/// shows it until it runs; on a starved node that can take a second.
pub fn has_runnable_thread(pid: i32) -> bool {
    let Ok(tids) = tasks(pid) else {
        return false;
    };
    tids.flatten().any(|tid| {
        fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
            .ok()
            .and_then(|stat| super::parse_stat(&stat))
            .is_some_and(|s| s.state == 'R')
    })
}

/// The first [`MAX_TASKS`] thread ids of `pid`, as listed in its task
/// directory.
fn tasks(pid: i32) -> io::Result<impl Iterator<Item = io::Result<i32>>> {
    let dir = fs::read_dir(format!("/proc/{pid}/task"))?;
    Ok(dir
        .take(MAX_TASKS)
        .map(|entry| entry.map(|e| e.file_name().to_str().and_then(|t| t.parse().ok())))
        .filter_map(|tid| tid.transpose()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_syscall_line_is_read() {
        let call = parse_syscall("73 0x4 0x2 0x0 0x0 0x0 0x7ff8b92da740 0x7fff13e8d138 0x7f\n");
        assert_eq!(
            call,
            Some(SleepingCall {
                nr: 73,
                arg0: 4,
                arg1: 2
            })
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7fff13e8d138 0x7f\n"), None);
        assert_eq!(parse_syscall(""), None);
        assert_eq!(parse_syscall("73 zz 0x2"), None);
    }

    #[test]
    fn only_a_waiting_flock_counts() {
        let call = |nr, op| SleepingCall {
            nr,
            arg0: 5,
            arg1: op as u64,
        };
        assert_eq!(
            call(libc::SYS_flock, libc::LOCK_EX).blocking_flock_fd(),
            Some(5)
        );
        assert_eq!(
            call(libc::SYS_flock, libc::LOCK_SH).blocking_flock_fd(),
            Some(5)
        );
        assert_eq!(
            call(libc::SYS_flock, libc::LOCK_EX | libc::LOCK_NB).blocking_flock_fd(),
            None
        );
        assert_eq!(
            call(libc::SYS_flock, libc::LOCK_UN).blocking_flock_fd(),
            None
        );
        assert_eq!(
            call(libc::SYS_read, libc::LOCK_EX).blocking_flock_fd(),
            None
        );
    }

    /// A real child blocked in flock on a real file is seen; on another file
    /// or before it blocks it is not.
    #[test]
    fn a_child_blocked_in_flock_is_seen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lock");
        let other = dir.path().join("other");
        let held = nix::fcntl::Flock::lock(
            fs::File::create(&path).expect("create lock"),
            nix::fcntl::FlockArg::LockExclusive,
        )
        .expect("flock");
        fs::File::create(&other).expect("create other");
        let key = FileKey::of_path(&path).expect("key");
        let other_key = FileKey::of_path(&other).expect("key");
        let mut child = std::process::Command::new("flock")
            .arg(&path)
            .arg("true")
            .spawn()
            .expect("util-linux flock");
        let pid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sleeps_in_flock(pid, key).expect("look") {
            assert!(
                Instant::now() < deadline,
                "child never seen blocked in flock"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!sleeps_in_flock(pid, other_key).expect("look"));
        assert!(!has_runnable_thread(pid), "a child asleep in flock");
        drop(held);
        child.wait().expect("child exits once the lock is free");
        assert!(sleeps_in_flock(pid, key).is_err(), "a reaped child is gone");
    }
}
