//! Fencing: proving that the process group a holder record names is a
//! kubelet started by a kubelet-pivot before anything is killed.
//!
//! A record comes from the trusted state directory, but it may be stale
//! (another boot, a reused pid) or damaged. A group is signalled only when:
//! * the record belongs to this boot;
//! * the kubelet pid is greater than 1;
//! * the group is not ours (the supervisor's own process group);
//! * the group leader, if it still exists, has the recorded start time; if
//!   it is gone, every live member of the group started after the recorded
//!   kubelet (they are its children: a group id cannot be reused while the
//!   group has members).

use std::fs;

use crate::pivot::holder::HolderRecord;
use crate::procfs::{self, FileKey, ProcessId};

/// At most this many processes are looked at for leftovers.
const MAX_PROCESSES: usize = 65_536;
/// At most this many descriptors per process.
const MAX_FDS_PER_PROCESS: usize = 65_536;

/// Why a recorded kubelet is not fenced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotProven {
    #[error("the holder record names no kubelet")]
    NoKubelet,
    #[error("the holder record is from another boot; its pids mean nothing now")]
    OtherBoot,
    #[error("the holder record names kubelet pid {0}; pids below 2 are never signalled")]
    BadPid(i32),
    #[error("the holder record names process group {0}, which is kubelet-pivot's own")]
    OwnGroup(i32),
    #[error("pid {pid} now belongs to another process (start time {now}, recorded {recorded})")]
    Reused { pid: i32, now: u64, recorded: u64 },
    #[error("process {member} in group {pgid} started before the recorded kubelet; the group is not the kubelet's")]
    Foreign { pgid: i32, member: i32 },
    #[error("no live process is left in group {0}")]
    Gone(i32),
}

/// The /proc ("view") process group id of our own supervisor.
pub fn own_view_pgid() -> Option<i32> {
    procfs::stat(procfs::self_id().ok()?.pid).map(|s| s.pgrp)
}

/// Proves that the kubelet `rec` names may be killed; returns its /proc
/// process group id.
pub fn prove(rec: &HolderRecord, own_pgid: Option<i32>) -> Result<i32, NotProven> {
    let k = rec.kubelet().ok_or(NotProven::NoKubelet)?;
    prove_group(k, rec.this_boot(), own_pgid)
}

fn prove_group(k: ProcessId, this_boot: bool, own_pgid: Option<i32>) -> Result<i32, NotProven> {
    if !this_boot {
        return Err(NotProven::OtherBoot);
    }
    if k.pid <= 1 {
        return Err(NotProven::BadPid(k.pid));
    }
    if own_pgid == Some(k.pid) || nix::unistd::getpgrp().as_raw() == k.pid {
        return Err(NotProven::OwnGroup(k.pid));
    }
    if let Some(now) = procfs::stat(k.pid) {
        if now.start_time != k.start_time {
            return Err(NotProven::Reused {
                pid: k.pid,
                now: now.start_time,
                recorded: k.start_time,
            });
        }
    }
    let members = procfs::live_group_members(k.pid);
    if members.is_empty() {
        return Err(NotProven::Gone(k.pid));
    }
    if let Some(member) = members
        .iter()
        .find(|m| procfs::stat(**m).is_some_and(|s| s.start_time < k.start_time))
    {
        return Err(NotProven::Foreign {
            pgid: k.pid,
            member: *member,
        });
    }
    Ok(k.pid)
}

/// Whether the process that took a lock (its pid in /proc/locks) is gone.
/// A lock whose taker is gone is held only by descriptors it handed down
/// (the kubelet and whatever the kubelet forked). Pid 0 (not visible from
/// here) is not known to be gone.
pub fn taker_gone(pid: i32) -> bool {
    pid > 0 && procfs::gone(pid)
}

/// Pids (in our /proc) of the processes that hold a descriptor on the open
/// file description whose flock on `key` was taken by `taker`: the `lock:`
/// lines of /proc/PID/fdinfo/FD show the flock (and the pid that took it)
/// on every descriptor of that description, whichever process holds it. A
/// lock taken since by somebody else is another description with another
/// taker, so its holders are never listed. `me` is left out.
pub fn lock_holders(key: FileKey, taker: i32, me: i32) -> Vec<i32> {
    let Ok(proc_dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in proc_dir.flatten().take(MAX_PROCESSES) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid <= 1 || pid == me {
            continue;
        }
        if holds_lock_on(pid, key, taker) {
            out.push(pid);
        }
    }
    out
}

/// Whether `pid` holds the flock it took on `key` (a granted lock, not a
/// wait), from its /proc/PID/fdinfo. Unlike a read of /proc/locks, this
/// takes no node-wide lock (see `supervisor::fencing`): a look at one known
/// process costs a few small reads and blocks nobody's flock.
pub fn holds(pid: i32, key: FileKey) -> bool {
    pid > 0 && holds_lock_on(pid, key, pid)
}

fn holds_lock_on(pid: i32, key: FileKey, taker: i32) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return false;
    };
    fds.flatten().take(MAX_FDS_PER_PROCESS).any(|fd| {
        fs::read_to_string(fd.path()).is_ok_and(|info| {
            info.lines()
                .filter_map(|l| l.strip_prefix("lock:"))
                .filter_map(procfs::parse_lock_line)
                .any(|e| !e.blocked && e.kind == "FLOCK" && e.file == key && e.pid == taker)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pivot::role::Rank;

    fn record(pid: i32, start_time: u64) -> HolderRecord {
        let me = procfs::self_id().unwrap();
        let mut rec = HolderRecord::new(Rank::BOOTSTRAP, me, "T".into());
        rec.kubelet_pid = Some(pid);
        rec.kubelet_start_time = Some(start_time);
        rec
    }

    #[test]
    fn never_pid_0_1_negative_or_our_group() {
        for pid in [0, 1, -1, -42] {
            assert_eq!(prove(&record(pid, 1), None), Err(NotProven::BadPid(pid)));
        }
        let own = own_view_pgid().unwrap();
        let st = procfs::stat(own).map(|s| s.start_time).unwrap_or(0);
        assert_eq!(
            prove(&record(own, st), Some(own)),
            Err(NotProven::OwnGroup(own))
        );
    }

    #[test]
    fn finds_every_process_sharing_a_locked_description() {
        use std::os::unix::process::CommandExt;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("l");
        let file = std::fs::File::create(&path).unwrap();
        fs2::FileExt::lock_exclusive(&file).unwrap();
        let key = FileKey::of_metadata(&file.metadata().unwrap());
        let me = procfs::self_id().unwrap().pid;
        // Another test of this process may fork meanwhile: its child shares every
        // descriptor until it execs. Wait (with a deadline) for no one else to hold it.
        let holders_become = |want: Vec<i32>| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                let now = lock_holders(key, me, me);
                if now == want {
                    return;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "holders {now:?}, want {want:?}"
                );
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        holders_become(vec![]);
        // A child that inherits the locked descriptor (as fd 9) holds it too.
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        #[allow(unsafe_code)]
        // SAFETY: dup2 is async-signal-safe; nothing is allocated.
        unsafe {
            cmd.pre_exec(move || {
                // dup2 clears FD_CLOEXEC on the copy (fd 9 is not `fd`).
                if libc::dup2(fd, 9) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let pid = child.id() as i32;
        holders_become(vec![pid]);
        // We took it: we hold it; the child holds our description, not a lock it took.
        assert!(holds(me, key));
        assert!(!holds(pid, key));
        // A lock of the same file taken by another process is not ours to fence.
        assert!(lock_holders(key, me + 1, me).is_empty());
        assert!(!taker_gone(me));
        child.kill().unwrap();
        child.wait().unwrap();
        holders_become(vec![]);
    }

    #[test]
    fn another_boot_or_a_reused_pid_is_not_fenced() {
        let mut rec = record(12345, 1);
        rec.boot_id = Some("not-this-boot".into());
        assert_eq!(prove(&rec, None), Err(NotProven::OtherBoot));
        // A live process (a child of ours in its own group) with another start time.
        let mut child = std::process::Command::new("sleep");
        std::os::unix::process::CommandExt::process_group(&mut child, 0);
        let mut child = child.arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let real = procfs::stat(pid).unwrap().start_time;
        assert!(matches!(
            prove(&record(pid, real + 1), None),
            Err(NotProven::Reused { .. })
        ));
        assert_eq!(prove(&record(pid, real), None), Ok(pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(prove(&record(pid, real), None), Err(NotProven::Gone(pid)));
    }
}
