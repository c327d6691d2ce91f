//! Reading process identity and file locks from `/proc`.
//!
//! A pid alone is not an identity: pids are reused. Everything that records a
//! process elsewhere (holder record, claims) stores the pid together with its
//! start time (field 22 of `/proc/PID/stat`, clock ticks since boot) and
//! checks both before trusting or signalling it.

use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub mod syscall;

/// A process as seen through the `/proc` mount of the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: i32,
    /// Start time in clock ticks since boot, from /proc/PID/stat.
    pub start_time: u64,
}

/// What `/proc/PID/stat` says about a process that matters to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub start_time: u64,
}

/// Parses the content of `/proc/PID/stat`. The command name (field 2) may
/// contain spaces and parentheses, so fields are counted after the last ')'.
pub fn parse_stat(content: &str) -> Option<Stat> {
    let open = content.find('(')?;
    let close = content.rfind(')')?;
    let pid = content.get(..open)?.trim().parse().ok()?;
    let rest: Vec<&str> = content.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); field N is rest[N - 3].
    let state = rest.first()?.chars().next()?;
    let ppid = rest.get(1)?.parse().ok()?;
    let pgrp = rest.get(2)?.parse().ok()?;
    let start_time = rest.get(19)?.parse().ok()?;
    Some(Stat {
        pid,
        state,
        ppid,
        pgrp,
        start_time,
    })
}

/// Reads `/proc/PID/stat`; `None` when the process does not exist.
pub fn stat(pid: i32) -> Option<Stat> {
    if pid <= 0 {
        return None;
    }
    let content = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&content)
}

/// The identity of the calling process, in the namespace of the `/proc`
/// mount (which is what other readers of that `/proc` see; inside a PID
/// namespace that kept the host's /proc this is the host pid).
pub fn self_id() -> io::Result<ProcessId> {
    let content = fs::read_to_string("/proc/self/stat")?;
    let st = parse_stat(&content)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable /proc/self/stat"))?;
    Ok(ProcessId {
        pid: st.pid,
        start_time: st.start_time,
    })
}

/// Identity of `pid` right now, if it exists.
pub fn id_of(pid: i32) -> Option<ProcessId> {
    stat(pid).map(|s| ProcessId {
        pid: s.pid,
        start_time: s.start_time,
    })
}

/// Upper bound on the threads looked at for one process.
const MAX_THREADS: usize = 65_536;

/// Whether the process `s` describes still runs code or holds files. The
/// state in `/proc/PID/stat` is its *leader thread's*: a leader that has
/// exited shows `Z` while other threads of the process still run and keep
/// its descriptors (and so its flocks) open, until the last thread exits.
/// Measured: a process whose main thread called pthread_exit while a second
/// thread slept showed `Z` with `Threads: 2` and kept its flock. A kubelet
/// (Go, many threads) leaving through exit_group passes through that state
/// for as long as its threads take to die, which on a loaded node is
/// milliseconds. So a process counts as gone only when its leader is a
/// zombie *and* no thread of it is left that is not.
pub fn runs(s: &Stat) -> bool {
    if s.state != 'Z' && s.state != 'X' {
        return true;
    }
    let Ok(tasks) = fs::read_dir(format!("/proc/{}/task", s.pid)) else {
        return false;
    };
    tasks
        .flatten()
        .take(MAX_THREADS)
        .filter_map(|t| t.file_name().to_str()?.parse::<i32>().ok())
        .filter(|tid| *tid != s.pid)
        .filter_map(|tid| fs::read_to_string(format!("/proc/{}/task/{tid}/stat", s.pid)).ok())
        .filter_map(|content| parse_stat(&content))
        .any(|t| t.state != 'Z' && t.state != 'X')
}

/// Whether `pid` is gone: no such process, or one that is a zombie with no
/// live thread left (see [`runs`]).
pub fn gone(pid: i32) -> bool {
    stat(pid).is_none_or(|s| !runs(&s))
}

/// `PF_EXITING` in the flags of /proc/PID/stat: the process is in exit.
const PF_EXITING: u64 = 0x4;
/// SIGKILL's bit in the pending-signal masks of /proc/PID/status.
const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);

/// Whether `pid` was killed and will run no user code again, though it may
/// not be gone yet: a SIGKILL is pending (the kernel acts on it before any
/// return to user space, and a fork with a fatal signal pending fails), or
/// it is exiting. A killed process can take minutes to be gone on a node
/// whose disk stalls (a thread in uninterruptible sleep); measured here, a
/// killed supervisor's kubelet lived 3 s (its PDEATHSIG waits for that exit).
pub fn doomed(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let killed = status
        .lines()
        .filter_map(|l| {
            l.strip_prefix("SigPnd:")
                .or_else(|| l.strip_prefix("ShdPnd:"))
        })
        .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
        .any(|mask| mask & SIGKILL_BIT != 0);
    let exiting = fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|content| {
            let rest = content.get(content.rfind(')')? + 1..)?;
            rest.split_whitespace().nth(6)?.parse::<u64>().ok()
        })
        .is_some_and(|flags| flags & PF_EXITING != 0);
    killed || exiting
}

impl ProcessId {
    /// True when the same process (pid and start time) is still running:
    /// not a zombie, or a zombie leader whose other threads still run.
    pub fn is_alive(&self) -> bool {
        match stat(self.pid) {
            Some(s) => s.start_time == self.start_time && runs(&s),
            None => false,
        }
    }

    /// True when the same process still exists in any state, zombie included.
    pub fn exists(&self) -> bool {
        matches!(stat(self.pid), Some(s) if s.start_time == self.start_time)
    }
}

/// Pids of the processes of group `pgid` that still run (see [`runs`]). A
/// zombie with no live thread has released its files and locks and runs no
/// code, so it does not count (an init that is slow to reap must not block a
/// handoff); a zombie leader whose other threads still run does.
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .filter(|s| s.pgrp == pgid && runs(s))
        .map(|s| s.pid)
        .collect()
}

// PID namespaces. kubelet-pivot may run in its own PID namespace with the
// host's /proc mounted (a DaemonSet pod without hostPID, or `unshare --pid`
// without --mount-proc). Then the kernel's syscalls (kill, waitpid) speak our
// namespace's pids while /proc speaks the host's. Records on disk use /proc's
// ("view") pids, which every reader of that /proc understands; signals use
// our namespace's ("local") pids. The NSpid/NSpgid lines of /proc/PID/status
// translate between the two.

/// Whether /proc shows the pids of our own PID namespace.
pub fn proc_is_own_namespace() -> bool {
    self_id()
        .map(|id| id.pid == nix::unistd::getpid().as_raw())
        .unwrap_or(true)
}

/// The ids of a `NS...:` line of /proc/PID/status, outermost namespace
/// (that of the /proc mount) first.
fn ns_ids(view_pid: &str, field: &str) -> Option<Vec<i32>> {
    let status = fs::read_to_string(format!("/proc/{view_pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(field))?;
    line.split_whitespace().map(|w| w.parse().ok()).collect()
}

/// Whether the process `view_pid` lives in our own PID namespace. Several
/// PID namespaces (pods) may use the same pid numbers; only a process of ours
/// may be translated and signalled.
fn in_own_namespace(view_pid: &str) -> bool {
    match (
        fs::read_link("/proc/self/ns/pid"),
        fs::read_link(format!("/proc/{view_pid}/ns/pid")),
    ) {
        (Ok(mine), Ok(theirs)) => mine == theirs,
        _ => false,
    }
}

/// The /proc ("view") pid of a process of our namespace known by its pid
/// there (its innermost NSpid).
pub fn view_pid_of_local(local: i32) -> Option<i32> {
    if proc_is_own_namespace() {
        return Some(local);
    }
    fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let name = e.file_name().into_string().ok()?;
        let view: i32 = name.parse().ok()?;
        let ids = ns_ids(&name, "NSpid:")?;
        (ids.last() == Some(&local) && in_own_namespace(&name)).then_some(view)
    })
}

/// Our namespace's process group id for a group known by its /proc ("view")
/// id; `None` when no live member of that group is in our namespace (then
/// we cannot signal it).
pub fn local_pgid_of_view(view_pgid: i32) -> Option<i32> {
    if proc_is_own_namespace() {
        return Some(view_pgid);
    }
    live_group_members(view_pgid).into_iter().find_map(|pid| {
        let name = pid.to_string();
        if !in_own_namespace(&name) {
            return None;
        }
        ns_ids(&name, "NSpgid:")?.last().copied()
    })
}

/// The real and effective uid of a process (as mapped into our user
/// namespace), from /proc/PID/status.
pub fn uids(view_pid: i32) -> Option<(u32, u32)> {
    if view_pid <= 0 {
        return None;
    }
    let status = fs::read_to_string(format!("/proc/{view_pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut ids = line.split_whitespace().map(|w| w.parse::<u32>().ok());
    Some((ids.next()??, ids.next()??))
}

/// Whether the process /proc shows as `view_pid` is the process a record
/// names as `pid` with `start_time`: same start time, and `pid` is its
/// /proc pid or its pid in one of its nested PID namespaces (a supervisor
/// in a pod with its own /proc records the pod's pid). Any state counts: a
/// process whose main thread has exited shows as a zombie while its other
/// threads (one blocked in flock) still hold its locks.
pub fn names_process(view_pid: i32, pid: i32, start_time: u64) -> bool {
    if view_pid <= 0 || pid <= 0 {
        return false;
    }
    match stat(view_pid) {
        Some(s) if s.start_time == start_time => {
            view_pid == pid
                || ns_ids(&view_pid.to_string(), "NSpid:").is_some_and(|ids| ids.contains(&pid))
        }
        _ => false,
    }
}

/// This boot's id (/proc/sys/kernel/random/boot_id): records that carry
/// another boot's id name processes of a previous boot, whatever their pids.
pub fn boot_id() -> Option<String> {
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            let text = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let id = text.trim();
            (id.len() <= 64 && !id.is_empty()).then(|| id.to_string())
        })
        .clone()
}

/// Our namespace's pid for a process known by its /proc ("view") pid;
/// `None` when it is not in our PID namespace.
pub fn local_pid_of_view(view_pid: i32) -> Option<i32> {
    if proc_is_own_namespace() {
        return Some(view_pid);
    }
    let name = view_pid.to_string();
    if !in_own_namespace(&name) {
        return None;
    }
    ns_ids(&name, "NSpid:")?.last().copied()
}

/// Device and inode of a file, as /proc/locks prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileKey {
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
}

impl std::fmt::Display for FileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02x}:{:02x}:{}", self.major, self.minor, self.inode)
    }
}

impl FileKey {
    pub fn of_metadata(meta: &fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        let dev = meta.dev();
        FileKey {
            major: nix::sys::stat::major(dev) as u32,
            minor: nix::sys::stat::minor(dev) as u32,
            inode: meta.ino(),
        }
    }

    pub fn of_path(path: &Path) -> io::Result<Self> {
        fs::metadata(path).map(|m| Self::of_metadata(&m))
    }
}

/// One line of /proc/locks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEntry {
    /// True for a waiter (`->` lines): a process blocked on this lock.
    pub blocked: bool,
    pub kind: String,
    /// Pid in the namespace of the reader's /proc; 0 when not visible there.
    pub pid: i32,
    pub file: FileKey,
}

/// The pid that took the (granted, not waiting) lock on `key`, if any.
pub fn taker(locks: &[LockEntry], key: FileKey) -> Option<i32> {
    locks
        .iter()
        .find(|e| !e.blocked && e.file == key)
        .map(|e| e.pid)
}

/// Parses /proc/locks. Lines that do not parse are skipped (the format is
/// stable since Linux 2.6 but OFD and lease lines vary).
pub fn parse_locks(content: &str) -> Vec<LockEntry> {
    content.lines().filter_map(parse_lock_line).collect()
}

pub fn parse_lock_line(line: &str) -> Option<LockEntry> {
    let mut words = line.split_whitespace();
    let _id = words.next()?;
    let mut kind = words.next()?;
    let blocked = kind == "->";
    if blocked {
        kind = words.next()?;
    }
    let _advisory = words.next()?;
    let _mode = words.next()?;
    let pid = words.next()?.parse().ok()?;
    let mut dev = words.next()?.split(':');
    let major = u32::from_str_radix(dev.next()?, 16).ok()?;
    let minor = u32::from_str_radix(dev.next()?, 16).ok()?;
    let inode = dev.next()?.parse().ok()?;
    Some(LockEntry {
        blocked,
        kind: kind.to_string(),
        pid,
        file: FileKey {
            major,
            minor,
            inode,
        },
    })
}

/// Reads and parses /proc/locks with large read() calls. The kernel renders
/// each call under its lock, but only up to a page per call, so the table
/// is not one atomic snapshot when it is larger than a page: lines can be
/// skipped or repeated when locks come and go between two calls. Callers
/// that act on an *absence* (an unclaimed waiter) confirm with a second read.
pub fn read_locks() -> io::Result<Vec<LockEntry>> {
    use std::io::Read;
    let mut f = fs::File::open("/proc/locks")?;
    let mut content = Vec::with_capacity(LOCKS_READ_SIZE);
    let mut chunk = vec![0u8; LOCKS_READ_SIZE];
    loop {
        if content.len() >= LOCKS_MAX_BYTES {
            // Any local user can add locks. A truncated table could hide a
            // claimant's claim lock and make it look unclaimed, so a table
            // this large is an error: callers then see no contender at all.
            return Err(io::Error::other(format!(
                "/proc/locks is larger than {LOCKS_MAX_BYTES} bytes; not judging contention from it"
            )));
        }
        match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => content.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(parse_locks(&String::from_utf8_lossy(&content)))
}

/// Most of /proc/locks read (about 250,000 locks).
const LOCKS_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Size of each read() of /proc/locks (the kernel returns at most a page).
const LOCKS_READ_SIZE: usize = 64 * 1024;

/// Clock ticks per second for converting start times.
pub fn ticks_per_second() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as u64,
        _ => 100,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process whose leader thread exited while another thread lives (as
    /// a multi-threaded kubelet is for a moment while it exits) shows `Z`
    /// in /proc/PID/stat, yet still holds its descriptors: it runs.
    #[test]
    fn a_killed_process_is_doomed_before_it_is_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(!doomed(pid));
        // Stopped, a SIGKILL stays pending for a moment at least.
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let st = stat(pid);
        assert!(doomed(pid) || st.is_none_or(|s| !runs(&s)), "{st:?}");
        child.wait().unwrap();
        assert!(!doomed(pid));
    }

    #[test]
    fn a_zombie_leader_with_a_live_thread_still_runs() {
        let script = "import ctypes, threading, time\n\
                      threading.Thread(target=time.sleep, args=(30,)).start()\n\
                      ctypes.CDLL(None).pthread_exit(None)\n";
        let Ok(mut child) = std::process::Command::new("python3")
            .args(["-c", script])
            .spawn()
        else {
            eprintln!("python3 not found; skipping");
            return;
        };
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let st = loop {
            let st = stat(pid).unwrap();
            if st.state == 'Z' {
                break st;
            }
            assert!(std::time::Instant::now() < deadline, "leader never exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert!(runs(&st), "a live thread is left");
        assert!(!gone(pid));
        assert!(id_of(pid).unwrap().is_alive());
        assert!(live_group_members(st.pgrp).contains(&pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(gone(pid));
    }

    #[test]
    fn parses_stat_with_spaces_and_parens_in_comm() {
        let line = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        let st = parse_stat(line).unwrap();
        assert_eq!(st.pid, 1234);
        assert_eq!(st.state, 'S');
        assert_eq!(st.ppid, 1);
        assert_eq!(st.pgrp, 1234);
        assert_eq!(st.start_time, 987654);
    }

    #[test]
    fn own_namespace_translations_are_identity() {
        // The test runs in the namespace of its /proc.
        if proc_is_own_namespace() {
            let me = std::process::id() as i32;
            assert_eq!(view_pid_of_local(me), Some(me));
            assert_eq!(local_pgid_of_view(me), Some(me));
        }
        assert!(ns_ids("self", "NSpid:").is_some_and(|v| !v.is_empty()));
    }

    #[test]
    fn rejects_truncated_stat() {
        assert!(parse_stat("12 (x) S 1 2").is_none());
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn self_id_is_alive() {
        let me = self_id().unwrap();
        assert!(me.is_alive());
        let fake = ProcessId {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        assert!(!fake.is_alive());
    }

    #[test]
    fn parses_proc_locks_holder_and_waiter() {
        let c = "1: FLOCK  ADVISORY  WRITE 2219 fe:00:10010696 0 EOF\n\
                 1: -> FLOCK  ADVISORY  WRITE 2260 fe:00:10010696 0 EOF\n\
                 2: POSIX  ADVISORY  READ 99 08:1a:42 0 EOF\n\
                 nonsense line\n";
        let e = parse_locks(c);
        assert_eq!(e.len(), 3);
        assert!(!e[0].blocked);
        assert!(e[1].blocked);
        assert_eq!(e[1].pid, 2260);
        assert_eq!(
            e[1].file,
            FileKey {
                major: 0xfe,
                minor: 0,
                inode: 10010696
            }
        );
        assert_eq!(e[2].kind, "POSIX");
        assert_eq!(e[2].file.minor, 0x1a);
    }
}
