//! One lock file per node: which lock file the node's supervisors use, by
//! identity, and the refusal of a supervisor given another one.
//!
//! A path string differs between the host and a pod (`/var/run/lock` on the
//! host may be `/host/lock` in the container), so the identity is the lock
//! directory's device and inode and the file's name: a bind mount preserves
//! both. The lock file's own inode is not used: it may be replaced (see
//! `pivot::lock`), the directory and name stay.
//!
//! `STATE/lock-file.json` records the identity the node uses; each claim
//! carries its supervisor's identity. Before it claims, a supervisor decides
//! under the takeover lock ([`decide`]): a live claim with another identity
//! means two lock files on one node, and it refuses (nothing is locked, no
//! kubelet starts). Otherwise it (re)writes the record with its own identity:
//! a record of another boot (a tmpfs lock directory has new inodes after a
//! reboot) or one that no live supervisor uses any more is replaced, with a
//! line saying so. A refusal is kept in `STATE/lock-mismatch.json` for
//! `status` until a supervisor starts with the node's lock file again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pivot::claims::LiveClaim;
use crate::pivot::role::Rank;
use crate::pivot::state::StateDir;
use crate::procfs;
use crate::safefs::fsutil::{self, Durability, FsError, Owner, ReadError, ReadPolicy};

use crate::pivot::lock_identity::LockRef;

pub const RECORD_FILE_MODE: u32 = 0o600;
/// A record is a few hundred bytes.
pub const MAX_RECORD_BYTES: u64 = 4096;

/// `STATE/lock-file.json`: the lock file the node's supervisors use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockRecord {
    pub lock: LockRef,
    /// Who recorded it (`bootstrap`, `self-hosted gen 2`).
    pub recorded_by: String,
    /// RFC 3339.
    pub since: String,
    /// The boot it was recorded in: after a reboot a tmpfs lock directory
    /// has another inode, so a record of another boot says nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

impl LockRecord {
    pub fn new(lock: LockRef, rank: Rank, since: String) -> LockRecord {
        LockRecord {
            lock,
            recorded_by: rank.to_string(),
            since,
            boot_id: procfs::boot_id(),
        }
    }

    /// Whether it was recorded in this boot (a record without a boot id is
    /// taken as this boot's).
    pub fn this_boot(&self) -> bool {
        match (&self.boot_id, procfs::boot_id()) {
            (Some(theirs), Some(ours)) => *theirs == ours,
            _ => true,
        }
    }
}

/// `STATE/lock-mismatch.json`: the last supervisor that refused to start
/// because it was given another lock file than the node's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mismatch {
    /// The supervisor that refused (`self-hosted gen 1`) and its lock file.
    pub refused: String,
    pub given: LockRef,
    /// The node's lock file and who uses it.
    pub node: LockRef,
    pub used_by: String,
    /// RFC 3339 time of the refusal.
    pub at: String,
}

impl Mismatch {
    /// The one line every report of it uses (log, status, Node condition).
    pub fn message(&self) -> String {
        format!(
            "{} was given lock file {}, but this node's supervisors use {} ({}); two lock files on one node could run two kubelets, so it refuses to start one. Give every supervisor the same lock file: the DaemonSet's --lock-file and its hostPath mount must name the host's lock file",
            self.refused, self.given, self.node, self.used_by
        )
    }
}

/// What a supervisor about to claim does with its lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockVerdict {
    /// The record names our lock file already.
    Agree,
    /// Record ours: there was none, it is of another boot, or no live
    /// supervisor uses the one it names (`replaced`, said in a log line).
    Record { replaced: Option<LockRecord> },
    /// A live supervisor uses another lock file: refuse.
    Refuse(Mismatch),
}

/// Decides (pure): `ours` against the record and the live claims of other
/// supervisors (claims of builds that do not carry a lock file agree).
pub fn decide(
    ours: &LockRef,
    rank: Rank,
    record: Option<&LockRecord>,
    record_this_boot: bool,
    live: &[LiveClaim],
    now: &str,
) -> LockVerdict {
    let other = live.iter().find_map(|c| {
        c.claim
            .lock
            .as_ref()
            .filter(|l| l.identity != ours.identity)
            .map(|l| (l, c.claim.rank()))
    });
    if let Some((lock, user)) = other {
        return LockVerdict::Refuse(Mismatch {
            refused: rank.to_string(),
            given: ours.clone(),
            node: lock.clone(),
            used_by: format!("{user}, pid {}, is running", live_pid(live, user)),
            at: now.to_owned(),
        });
    }
    match record {
        Some(rec) if record_this_boot && rec.lock.identity == ours.identity => LockVerdict::Agree,
        Some(rec) if record_this_boot => LockVerdict::Record {
            replaced: Some(rec.clone()),
        },
        _ => LockVerdict::Record { replaced: None },
    }
}

fn live_pid(live: &[LiveClaim], rank: Rank) -> i32 {
    live.iter()
        .find(|c| c.claim.rank() == rank)
        .map_or(0, |c| c.owner)
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Unsafe(#[from] ReadError),
    #[error("{path} is corrupt ({source}); it is ignored and rewritten")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

fn record_path(state: &StateDir) -> PathBuf {
    state.root().join("lock-file.json")
}

fn mismatch_path(state: &StateDir) -> PathBuf {
    state.root().join("lock-mismatch.json")
}

fn policy(what: &'static str) -> ReadPolicy {
    ReadPolicy {
        what,
        max_len: MAX_RECORD_BYTES,
        owner: Owner::me(),
        private: true,
    }
}

fn read_json<T: serde::de::DeserializeOwned>(
    path: PathBuf,
    what: &'static str,
) -> Result<Option<T>, RecordError> {
    match fsutil::read_bounded(&path, &policy(what))? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| RecordError::Corrupt { path, source }),
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), RecordError> {
    let data = serde_json::to_vec_pretty(value).map_err(|source| RecordError::Corrupt {
        path: path.to_path_buf(),
        source,
    })?;
    // Durable: the record outlives the processes (it is what a supervisor of
    // the same boot compares with after every supervisor restarted).
    fsutil::write_atomic_with(path, &data, RECORD_FILE_MODE, Durability::Durable)?;
    Ok(())
}

pub fn read_record(state: &StateDir) -> Result<Option<LockRecord>, RecordError> {
    read_json(record_path(state), "lock file record")
}

pub fn write_record(state: &StateDir, rec: &LockRecord) -> Result<(), RecordError> {
    write_json(&record_path(state), rec)
}

pub fn read_mismatch(state: &StateDir) -> Result<Option<Mismatch>, RecordError> {
    read_json(mismatch_path(state), "lock mismatch record")
}

pub fn write_mismatch(state: &StateDir, m: &Mismatch) -> Result<(), RecordError> {
    write_json(&mismatch_path(state), m)
}

/// Removes the refusal (a supervisor started with the node's lock file);
/// `true` if there was one.
pub fn clear_mismatch(state: &StateDir) -> bool {
    let path = mismatch_path(state);
    if std::fs::symlink_metadata(&path).is_err() {
        return false;
    }
    fsutil::remove_with(&path, Durability::Durable).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pivot::claims::Claim;
    use crate::pivot::lock_identity::LockIdentity;
    use crate::pivot::role::Role;
    use crate::procfs::FileKey;

    fn lock(path: &str, ino: u64) -> LockRef {
        LockRef {
            path: path.into(),
            identity: LockIdentity {
                dir_dev: 2049,
                dir_ino: ino,
                name: "kubelet.lock".into(),
            },
        }
    }

    fn live(rank: Rank, lock: Option<LockRef>) -> LiveClaim {
        LiveClaim {
            claim: Claim {
                role: rank.role,
                generation: rank.generation,
                pid: 77,
                start_time: 1,
                since: "t".into(),
                build: None,
                lock,
            },
            file: FileKey {
                major: 0,
                minor: 1,
                inode: 2,
            },
            owner: 77,
        }
    }

    fn record(ino: u64) -> LockRecord {
        LockRecord {
            lock: lock("/run/lock/kubelet.lock", ino),
            recorded_by: "bootstrap".into(),
            since: "t".into(),
            boot_id: None,
        }
    }

    #[test]
    fn a_live_claim_with_another_lock_file_refuses() {
        let ours = lock("/host/other/kubelet.lock", 9);
        let bootstrap = Rank {
            role: Role::Bootstrap,
            generation: 0,
        };
        let v = decide(
            &ours,
            Rank::self_hosted(1),
            Some(&record(5)),
            true,
            &[live(bootstrap, Some(lock("/run/lock/kubelet.lock", 5)))],
            "now",
        );
        let LockVerdict::Refuse(m) = v else {
            panic!("{v:?}")
        };
        let msg = m.message();
        assert!(msg.contains("/host/other/kubelet.lock"), "{msg}");
        assert!(msg.contains("/run/lock/kubelet.lock"), "{msg}");
        assert!(msg.contains("pid 77"), "{msg}");
    }

    #[test]
    fn the_same_directory_under_another_path_agrees() {
        // A bind mount: another path, the same directory.
        let ours = lock("/host/run/lock/kubelet.lock", 5);
        let v = decide(
            &ours,
            Rank::self_hosted(1),
            Some(&record(5)),
            true,
            &[live(
                Rank::self_hosted(0),
                Some(lock("/run/lock/kubelet.lock", 5)),
            )],
            "now",
        );
        assert_eq!(v, LockVerdict::Agree);
    }

    #[test]
    fn claims_of_older_builds_and_stale_records_do_not_refuse() {
        let ours = lock("/x/kubelet.lock", 9);
        let old = [live(Rank::self_hosted(1), None)];
        // Another boot's record: replaced without a word.
        assert_eq!(
            decide(
                &ours,
                Rank::self_hosted(2),
                Some(&record(5)),
                false,
                &old,
                "n"
            ),
            LockVerdict::Record { replaced: None }
        );
        // This boot's record, nobody uses it: replaced, said.
        assert_eq!(
            decide(
                &ours,
                Rank::self_hosted(2),
                Some(&record(5)),
                true,
                &old,
                "n"
            ),
            LockVerdict::Record {
                replaced: Some(record(5))
            }
        );
        assert_eq!(
            decide(&ours, Rank::self_hosted(2), None, true, &[], "n"),
            LockVerdict::Record { replaced: None }
        );
    }

    #[test]
    fn records_round_trip_and_identity_is_the_directory() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        let a = LockRef::of(&d.path().join("kubelet.lock")).unwrap();
        let b = LockRef::of(&d.path().join("other.lock")).unwrap();
        assert_eq!(a.identity.dir_ino, b.identity.dir_ino);
        assert_ne!(a.identity, b.identity);
        assert!(read_record(&state).unwrap().is_none());
        let rec = LockRecord::new(a, Rank::self_hosted(1), "t".into());
        write_record(&state, &rec).unwrap();
        assert_eq!(read_record(&state).unwrap().unwrap(), rec);
        assert!(rec.this_boot());
        assert!(!clear_mismatch(&state));
        let m = Mismatch {
            refused: "self-hosted gen 1".into(),
            given: b,
            node: rec.lock.clone(),
            used_by: "bootstrap".into(),
            at: "t".into(),
        };
        write_mismatch(&state, &m).unwrap();
        assert_eq!(read_mismatch(&state).unwrap().unwrap(), m);
        assert!(clear_mismatch(&state));
        assert!(read_mismatch(&state).unwrap().is_none());
    }

    #[test]
    fn a_missing_directory_has_no_identity() {
        let d = tempfile::tempdir().unwrap();
        let err = LockIdentity::of(&d.path().join("gone/kubelet.lock")).unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
    }
}
