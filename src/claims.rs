//! Claims: how a supervisor announces "I want the lock, with this rank".
//!
//! Each supervisor writes `<lock>.claims/<pid>-<starttime>.json` before it
//! opens the lock file, and keeps an exclusive flock on that claim file for
//! its whole life. Liveness of a claim is therefore decided by the kernel,
//! not by pids (which differ between PID namespaces): a claim whose file is
//! not locked belongs to a dead process and is removed by whoever sees it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::{self, FsError, TEMP_PREFIX};
use crate::procfs::{FileKey, ProcessId};
use crate::role::{Rank, Role};

pub const CLAIMS_DIR_MODE: u32 = 0o755;
pub const CLAIM_FILE_MODE: u32 = 0o644;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    pub role: Role,
    pub generation: u32,
    pub pid: i32,
    pub start_time: u64,
    pub since: String,
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

/// A claim another process holds, with the identity of its file so that
/// /proc/locks entries can be tied to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveClaim {
    pub claim: Claim,
    pub file: FileKey,
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

/// Directory of claims for a lock file: `<lock>.claims`.
pub fn claims_dir(lock: &Path) -> PathBuf {
    let mut s = lock.as_os_str().to_owned();
    s.push(".claims");
    PathBuf::from(s)
}

/// Creates the claims directory beside the lock file (done first at start,
/// so that an unwritable lock directory is reported before anything else).
pub fn prepare(lock: &Path) -> Result<(), ClaimError> {
    fsutil::ensure_dir(&claims_dir(lock), CLAIMS_DIR_MODE)?;
    Ok(())
}

/// Our own claim. The file is deliberately neither removed nor closed on
/// drop: its flock ends only when the process is gone (all threads, including one blocked
/// in flock on the lock file), so a claim can never vanish while its owner
/// still shows as a waiter in /proc/locks (which would make it look like an
/// unclaimed plain kubelet). Readers remove claims whose lock is free.
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
    pub fn create(lock: &Path, claim: Claim) -> Result<Self, ClaimError> {
        let dir = claims_dir(lock);
        fsutil::ensure_dir(&dir, CLAIMS_DIR_MODE)?;
        let path = dir.join(format!("{}-{}.json", claim.pid, claim.start_time));
        let (tmp, mut file) = fsutil::create_temp_beside(&path, CLAIM_FILE_MODE)?;
        let body = serde_json::to_vec(&claim).unwrap_or_default();
        file.write_all(&body)
            .map_err(|e| FsError::io("write", &tmp, e))?;
        fs2::FileExt::try_lock_exclusive(&file).map_err(|e| ClaimError::Lock {
            path: tmp.clone(),
            source: e,
        })?;
        fsutil::commit_temp(&tmp, &file, &path)?;
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

/// Lists live claims of other processes, removing claims of dead ones.
/// `me` is excluded.
pub fn live_claims(lock: &Path, me: Option<ProcessId>) -> Vec<LiveClaim> {
    let dir = claims_dir(lock);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(_) => return Vec::new(),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(TEMP_PREFIX) || !name.ends_with(".json") {
            continue;
        }
        let path = entry.path();
        if let Some(live) = inspect_claim(&path) {
            if Some(live.claim.process()) != me {
                out.push(live);
            }
        }
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.claim.generation));
    out
}

/// Reads one claim file; removes it and returns `None` when its owner is
/// gone (its flock is free) or it is unreadable garbage of a dead owner.
fn inspect_claim(path: &Path) -> Option<LiveClaim> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_file() {
        return None;
    }
    match fs2::FileExt::try_lock_shared(&file) {
        Ok(()) => {
            // Nobody holds it: the claimant is dead. Remove it if the path
            // still names this file.
            if let Ok(m) = fs::symlink_metadata(path) {
                if FileKey::of_metadata(&m) == FileKey::of_metadata(&meta) {
                    let _ = fs::remove_file(path);
                }
            }
            None
        }
        Err(_) => {
            let text = fs::read(path).ok()?;
            let claim: Claim = serde_json::from_slice(&text).ok()?;
            Some(LiveClaim {
                claim,
                file: FileKey::of_metadata(&meta),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs;

    fn claim(gen: u32, pid: i32) -> Claim {
        Claim {
            role: if gen == 0 {
                Role::Bootstrap
            } else {
                Role::SelfHosted
            },
            generation: gen,
            pid,
            start_time: 1,
            since: "x".into(),
        }
    }

    #[test]
    fn live_claim_is_listed_and_dead_one_cleaned() {
        let d = tempfile::tempdir().unwrap();
        let lock = d.path().join("kubelet.lock");
        let g = ClaimGuard::create(&lock, claim(2, 4242)).unwrap();
        let listed = live_claims(&lock, None);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].claim.generation, 2);
        // Excluding ourselves.
        assert!(live_claims(&lock, Some(g.claim.process())).is_empty());
        // A claim file nobody locks is dead and gets removed.
        let dead = claims_dir(&lock).join("7-1.json");
        fs::write(&dead, serde_json::to_vec(&claim(5, 7)).unwrap()).unwrap();
        let listed = live_claims(&lock, None);
        assert_eq!(listed.len(), 1);
        assert!(!dead.exists());
        let path = g.path().to_path_buf();
        drop(g);
        // Dropping the guard keeps the claim (file and flock) until the
        // process exits.
        assert!(path.exists());
        assert_eq!(live_claims(&lock, None).len(), 1);
        let _ = procfs::self_id();
    }
}
