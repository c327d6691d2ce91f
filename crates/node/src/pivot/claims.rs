//! Claims: how a supervisor announces "I want the lock, with this rank".
//!
//! Each supervisor writes `claims/<pid>-<starttime>.json` in the state
//! directory before it opens the lock file, and keeps an exclusive flock on
//! that claim file for its whole life. A claim counts only when:
//! * its file is a regular file owned by our uid and readable by nobody
//!   else (mode 0600 in a 0700 directory), so no other user can open it to
//!   flock it or plant one;
//! * its flock is held (the kernel says its owner lives), and
//! * the process holding that flock in /proc/locks is the process the claim
//!   names (pid, or pid in a nested PID namespace, and start time).
//!
//! Files that fail a check are ignored and reported; only a supervisor (not
//! `status`) removes claims whose flock is free.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pivot::lock_identity::LockRef;
use crate::pivot::role::{Rank, Role};
use crate::pivot::state::StateDir;
use crate::procfs::{self, FileKey, LockEntry, ProcessId};
use crate::safefs::fsutil::{self, FsError, Owner, ReadPolicy, TEMP_PREFIX};
use crate::version::BuildInfo;

pub const CLAIM_FILE_MODE: u32 = 0o600;
/// A claim is about 150 bytes.
pub const MAX_CLAIM_BYTES: u64 = 4096;
/// At most this many claim files are looked at (a node runs a handful of
/// supervisors; more is somebody filling the directory).
pub const MAX_CLAIM_FILES: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    pub role: Role,
    pub generation: u32,
    pub pid: i32,
    pub start_time: u64,
    pub since: String,
    /// The build of the claimant (0.5.0 and later; absent in claims of
    /// older builds, which ignore it when they read a newer one's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildInfo>,
    /// The lock file the claimant was given (absent in claims of builds
    /// before it was recorded: such a claim is taken to agree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<LockRef>,
}

impl Claim {
    pub fn rank(&self) -> Rank {
        Rank {
            role: self.role,
            generation: self.generation,
        }
    }

    pub fn process(&self) -> ProcessId {
        ProcessId {
            pid: self.pid,
            start_time: self.start_time,
        }
    }
}

/// A verified claim of another process: its file, and the pid (in our
/// /proc's view) that holds the claim file's flock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveClaim {
    pub claim: Claim,
    pub file: FileKey,
    pub owner: i32,
}

/// A claim file that was not trusted, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedClaim {
    pub path: PathBuf,
    pub reason: String,
}

impl std::fmt::Display for RejectedClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "claim {} ignored: {}", self.path.display(), self.reason)
    }
}

/// What one look at the claims directory found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Verified live claims, highest generation first.
    pub live: Vec<LiveClaim>,
    /// Files that failed a check.
    pub rejected: Vec<RejectedClaim>,
    /// Claims whose flock is free (their owner is gone).
    pub dead: usize,
}

/// Whether a scan may remove the claims of dead owners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleanup {
    /// A supervisor: removes claims whose flock is free.
    RemoveDead,
    /// `status`: reads only.
    ReadOnly,
}

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("failed to lock claim file {path}: {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Our own claim. The file is deliberately neither removed nor closed on
/// drop: its flock ends only when the process is gone (all threads, including one blocked
/// in flock on the lock file), so a claim can never vanish while its owner
/// still shows as a waiter in /proc/locks (which would make it look like an
/// unclaimed plain kubelet). Supervisors remove claims whose lock is free.
#[derive(Debug)]
pub struct ClaimGuard {
    path: PathBuf,
    /// Never closed before the process exits: closing it would release the
    /// claim's flock while our flock waiter may still be listed in
    /// /proc/locks, and a holder would take us for an unclaimed kubelet.
    _file: std::mem::ManuallyDrop<File>,
    pub claim: Claim,
}

impl ClaimGuard {
    /// Writes and locks our claim. The file is locked before it becomes
    /// visible under its final name, so no reader ever sees it unlocked.
    pub fn create(state: &StateDir, claim: Claim) -> Result<Self, ClaimError> {
        let path = state
            .claims_dir()
            .join(format!("{}-{}.json", claim.pid, claim.start_time));
        let (tmp, mut file) = fsutil::create_temp_beside(&path, CLAIM_FILE_MODE)?;
        let body = serde_json::to_vec(&claim).unwrap_or_default();
        file.write_all(&body)
            .map_err(|e| FsError::io("write", &tmp, e))?;
        fs2::FileExt::try_lock_exclusive(&file).map_err(|e| ClaimError::Lock {
            path: tmp.clone(),
            source: e,
        })?;
        // A claim is runtime state: liveness is its flock, so it needs no fsync.
        fsutil::commit_temp_with(&tmp, &file, &path, fsutil::Durability::Volatile)?;
        Ok(ClaimGuard {
            path,
            _file: std::mem::ManuallyDrop::new(file),
            claim,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the claim file (the descriptor and its flock stay until the
    /// process exits). For a supervisor that leaves while *holding* the
    /// lock: it is not blocked in flock, so nobody can take it for an
    /// unclaimed waiter.
    pub fn withdraw(&self) {
        if let Err(err) = fs::remove_file(&self.path) {
            tracing::debug!(%err, path = %self.path.display(), "claim already gone");
        }
    }
}

/// Looks at every claim file: verified live claims of other processes (`me`
/// excluded), rejected files with reasons, and the number of dead ones.
/// `locks` is a read of /proc/locks taken *before* this call (a claim is
/// locked before it appears, so a waiter in that read has its claim on disk).
pub fn scan(
    state: &StateDir,
    me: Option<ProcessId>,
    locks: &[LockEntry],
    cleanup: Cleanup,
) -> Scan {
    let dir = state.claims_dir();
    let mut scan = Scan::default();
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return scan,
        Err(e) => {
            scan.rejected.push(RejectedClaim {
                path: dir,
                reason: format!("cannot list the claims directory: {e}"),
            });
            return scan;
        }
    };
    let mut seen = 0usize;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(TEMP_PREFIX) || !name.ends_with(".json") {
            continue;
        }
        seen += 1;
        if seen > MAX_CLAIM_FILES {
            scan.rejected.push(RejectedClaim {
                path: dir.clone(),
                reason: format!("more than {MAX_CLAIM_FILES} claim files; the rest are not read"),
            });
            break;
        }
        match inspect(&entry.path(), locks, cleanup) {
            Inspected::Live(live) if Some(live.claim.process()) != me => scan.live.push(live),
            Inspected::Live(_) | Inspected::Unverified => {}
            Inspected::Dead => scan.dead += 1,
            Inspected::Rejected(reason) => scan.rejected.push(RejectedClaim {
                path: entry.path(),
                reason,
            }),
        }
    }
    scan.live
        .sort_by_key(|c| std::cmp::Reverse(c.claim.generation));
    scan
}

enum Inspected {
    Live(LiveClaim),
    Dead,
    /// Locked, but the lock is not in our (earlier) read of /proc/locks: it
    /// was taken since. The next look decides.
    Unverified,
    Rejected(String),
}

fn read_policy() -> ReadPolicy {
    ReadPolicy {
        what: "claim",
        max_len: MAX_CLAIM_BYTES,
        owner: Owner::me(),
        private: true,
    }
}

fn inspect(path: &Path, locks: &[LockEntry], cleanup: Cleanup) -> Inspected {
    let (file, meta) = match fsutil::open_checked(path, &read_policy()) {
        Ok(Some(opened)) => opened,
        Ok(None) => return Inspected::Dead,
        Err(e) => return Inspected::Rejected(e.kind().to_string() + ": " + &e.to_string()),
    };
    if meta.mode() & 0o077 != 0 {
        return Inspected::Rejected(format!(
            "readable by others (mode {:04o}); another user could flock it",
            meta.mode() & 0o7777
        ));
    }
    let key = FileKey::of_metadata(&meta);
    match fs2::FileExt::try_lock_shared(&file) {
        Ok(()) => {
            if cleanup == Cleanup::RemoveDead {
                remove_if_same(path, key);
            }
            return Inspected::Dead;
        }
        Err(e) if e.raw_os_error() == fs2::lock_contended_error().raw_os_error() => {}
        Err(e) => return Inspected::Rejected(format!("cannot test its lock: {e}")),
    }
    let mut text = Vec::new();
    if let Err(e) = (&file).take(MAX_CLAIM_BYTES).read_to_end(&mut text) {
        return Inspected::Rejected(format!("cannot read: {e}"));
    }
    let claim: Claim = match serde_json::from_slice(&text) {
        Ok(c) => c,
        Err(e) => return Inspected::Rejected(format!("corrupt: {e}")),
    };
    let owners: Vec<i32> = locks
        .iter()
        .filter(|e| !e.blocked && e.kind == "FLOCK" && e.file == key)
        .map(|e| e.pid)
        .collect();
    if owners.is_empty() {
        return Inspected::Unverified;
    }
    match owners
        .iter()
        .find(|pid| procfs::names_process(**pid, claim.pid, claim.start_time))
    {
        Some(owner) => Inspected::Live(LiveClaim {
            claim,
            file: key,
            owner: *owner,
        }),
        None => Inspected::Rejected(format!(
            "it names pid {} but its lock is held by pid {}, another process",
            claim.pid,
            owners
                .iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Pids named by the claim files' names (`<pid>-<start time>.json`), live
/// or not, read without /proc/locks: the processes a fencing waiter never
/// kills. Wider than the verified claims of [`scan`] (a dead claim's pid
/// may be reused by a leftover, which is then not killed here and is left to
/// the look that reads /proc/locks): never narrower.
pub fn claimed_pids(state: &StateDir) -> Vec<i32> {
    let Ok(entries) = fs::read_dir(state.claims_dir()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .take(MAX_CLAIM_FILES)
        .filter_map(|entry| {
            let name = entry.file_name();
            let name = name.to_str()?;
            let (pid, _) = name.strip_suffix(".json")?.split_once('-')?;
            pid.parse().ok()
        })
        .collect()
}

/// Whether `id` is a supervisor with a live claim, seen without /proc/locks:
/// its claim file (`<pid>-<start time>.json`, ours to trust: only our uid
/// writes the directory) is flock'ed by `id` itself (its /proc/PID/fdinfo,
/// via `holds`). The same evidence as [`scan`]'s, from the claimant's side.
pub fn held_by(state: &StateDir, id: ProcessId, holds: impl Fn(i32, FileKey) -> bool) -> bool {
    let path = state
        .claims_dir()
        .join(format!("{}-{}.json", id.pid, id.start_time));
    match fs::symlink_metadata(&path) {
        Ok(meta) if meta.is_file() => holds(id.pid, FileKey::of_metadata(&meta)),
        _ => false,
    }
}

/// Removes a dead claim if the path still names the file we looked at.
fn remove_if_same(path: &Path, key: FileKey) {
    if let Ok(m) = fs::symlink_metadata(path) {
        if FileKey::of_metadata(&m) == key {
            let _ = fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn claim(gen: u32, me: ProcessId) -> Claim {
        Claim {
            role: if gen == 0 {
                Role::Bootstrap
            } else {
                Role::SelfHosted
            },
            generation: gen,
            pid: me.pid,
            start_time: me.start_time,
            since: "x".into(),
            build: Some(BuildInfo::current()),
            lock: None,
        }
    }

    fn locks() -> Vec<LockEntry> {
        procfs::read_locks().unwrap()
    }

    #[test]
    fn claimed_pids_are_read_from_the_file_names() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        let me = procfs::self_id().unwrap();
        let _g = ClaimGuard::create(&state, claim(2, me)).unwrap();
        for name in ["13-1.json", "junk.json", "14-2.txt"] {
            fs::write(state.claims_dir().join(name), b"{}").unwrap();
        }
        let mut pids = claimed_pids(&state);
        pids.sort_unstable();
        let mut want = vec![13, me.pid];
        want.sort_unstable();
        assert_eq!(pids, want);
    }

    #[test]
    fn a_claim_is_held_by_the_process_that_locks_it() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        let me = procfs::self_id().unwrap();
        let holds = crate::pivot::fence::holds;
        assert!(!held_by(&state, me, holds));
        let _g = ClaimGuard::create(&state, claim(2, me)).unwrap();
        assert!(held_by(&state, me, holds));
        let reused = ProcessId {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        assert!(!held_by(&state, reused, holds));
    }

    #[test]
    fn live_claim_is_verified_and_dead_one_cleaned() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        let me = procfs::self_id().unwrap();
        let g = ClaimGuard::create(&state, claim(2, me)).unwrap();
        let found = scan(&state, None, &locks(), Cleanup::RemoveDead);
        assert_eq!(found.live.len(), 1, "{found:?}");
        assert_eq!(found.live[0].claim.generation, 2);
        assert_eq!(found.live[0].owner, me.pid);
        // Excluding ourselves.
        assert!(scan(&state, Some(me), &locks(), Cleanup::RemoveDead)
            .live
            .is_empty());
        // A claim file nobody locks is dead: kept by a read-only scan,
        // removed by a supervisor's.
        let dead = state.claims_dir().join("7-1.json");
        fs::write(&dead, serde_json::to_vec(&claim(5, me)).unwrap()).unwrap();
        fs::set_permissions(&dead, fs::Permissions::from_mode(0o600)).unwrap();
        let found = scan(&state, None, &locks(), Cleanup::ReadOnly);
        assert_eq!((found.live.len(), found.dead), (1, 1));
        assert!(dead.exists(), "a read-only scan deleted a claim");
        let found = scan(&state, None, &locks(), Cleanup::RemoveDead);
        assert_eq!((found.live.len(), found.dead), (1, 1));
        assert!(!dead.exists());
        let path = g.path().to_path_buf();
        drop(g);
        // Dropping the guard keeps the claim (file and flock) until the
        // process exits.
        assert!(path.exists());
        assert_eq!(
            scan(&state, None, &locks(), Cleanup::RemoveDead).live.len(),
            1
        );
    }

    #[test]
    fn claims_of_older_and_newer_builds_decode() {
        // As 0.4.0 wrote it: no build.
        let older: Claim = serde_json::from_str(
            r#"{"role":"bootstrap","generation":0,"pid":1,"startTime":2,"since":"T"}"#,
        )
        .unwrap();
        assert_eq!(older.build, None);
        let newer: Claim = serde_json::from_str(
            r#"{"role":"self-hosted","generation":3,"pid":1,"startTime":2,"since":"T",
                "build":{"version":"0.6.0","commit":"c","protocol":5},"future":[1]}"#,
        )
        .unwrap();
        assert_eq!(newer.build.map(|b| b.version), Some("0.6.0".to_string()));
    }

    #[test]
    fn a_claim_locked_by_another_process_than_it_names_is_rejected() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        let me = procfs::self_id().unwrap();
        // Our process locks a claim that names pid 1.
        let forged = Claim {
            pid: 1,
            ..claim(9, me)
        };
        let _g = ClaimGuard::create(&state, forged).unwrap();
        let found = scan(&state, None, &locks(), Cleanup::RemoveDead);
        assert!(found.live.is_empty(), "{found:?}");
        assert_eq!(found.rejected.len(), 1);
        assert!(
            found.rejected[0].reason.contains("another process"),
            "{found:?}"
        );
    }

    #[test]
    fn readable_or_odd_claim_files_are_rejected_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        let me = procfs::self_id().unwrap();
        let open = state.claims_dir().join("1-1.json");
        fs::write(&open, serde_json::to_vec(&claim(5, me)).unwrap()).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o644)).unwrap();
        let fifo = state.claims_dir().join("2-2.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let found = scan(&state, None, &locks(), Cleanup::RemoveDead);
        assert!(found.live.is_empty());
        assert_eq!(found.rejected.len(), 2, "{found:?}");
        assert!(open.exists() && fifo.exists());
    }
}
