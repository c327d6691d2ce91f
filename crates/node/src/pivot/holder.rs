//! The holder record: `holder.json` in the state directory, saying which
//! supervisor holds the lock and which kubelet it runs. Written atomically by
//! the holder only; read by `status`, by standing-by supervisors, and by the
//! next holder to fence a kubelet that outlived its supervisor. It is read
//! only if it is a regular file owned by our uid, not writable by others,
//! and at most [`MAX_RECORD_BYTES`] long.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::pivot::role::{Rank, Role};
use crate::pivot::state::StateDir;
use crate::procfs::{self, FileKey, ProcessId};
use crate::safefs::fsutil::{self, Durability, FsError, Owner, ReadError, ReadPolicy};
use crate::version::BuildInfo;

pub const HOLDER_FILE_MODE: u32 = 0o600;
/// A record is a few hundred bytes; anything larger is not one of ours.
pub const MAX_RECORD_BYTES: u64 = 4096;

fn read_policy() -> ReadPolicy {
    ReadPolicy {
        what: "holder record",
        max_len: MAX_RECORD_BYTES,
        owner: Owner::me(),
        private: true,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HolderRecord {
    pub role: Role,
    pub generation: u32,
    pub pid: i32,
    pub start_time: u64,
    pub kubelet_pid: Option<i32>,
    pub kubelet_start_time: Option<u64>,
    /// RFC 3339 time the lock was taken.
    pub since: String,
    /// The boot the pids belong to (/proc/sys/kernel/random/boot_id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// Device and inode of the lock file whose locked description the
    /// kubelet holds (it inherits it). While that inode is locked, a kubelet
    /// of this record may run, whatever file the lock path names now. Absent
    /// in records of versions before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_file: Option<FileKey>,
    /// The build of the supervisor that wrote the record (0.5.0 and later;
    /// absent in records of older builds, which ignore it when they read a
    /// newer one's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildInfo>,
}

#[derive(Debug, thiserror::Error)]
pub enum HolderError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Unsafe(#[from] ReadError),
    #[error("holder record {path} is corrupt ({source}); it is ignored and will be rewritten by the next holder")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl HolderRecord {
    pub fn new(rank: Rank, me: ProcessId, since: String) -> Self {
        HolderRecord {
            role: rank.role,
            generation: rank.generation,
            pid: me.pid,
            start_time: me.start_time,
            kubelet_pid: None,
            kubelet_start_time: None,
            since,
            boot_id: procfs::boot_id(),
            lock_file: None,
            build: Some(BuildInfo::current()),
        }
    }

    pub fn rank(&self) -> Rank {
        Rank {
            role: self.role,
            generation: self.generation,
        }
    }

    pub fn supervisor(&self) -> ProcessId {
        ProcessId {
            pid: self.pid,
            start_time: self.start_time,
        }
    }

    pub fn kubelet(&self) -> Option<ProcessId> {
        match (self.kubelet_pid, self.kubelet_start_time) {
            (Some(pid), Some(start_time)) => Some(ProcessId { pid, start_time }),
            _ => None,
        }
    }

    /// Whether the record's pids belong to this boot. A record without a
    /// boot id (written before it was recorded) is taken as this boot's.
    pub fn this_boot(&self) -> bool {
        match (&self.boot_id, procfs::boot_id()) {
            (Some(theirs), Some(ours)) => *theirs == ours,
            _ => true,
        }
    }

    /// A record is live when its supervisor (pid and start time) still runs
    /// in this boot.
    pub fn is_live(&self) -> bool {
        self.this_boot() && self.supervisor().is_alive()
    }

    pub fn write(&self, state: &StateDir) -> Result<(), HolderError> {
        let path = state.holder_path();
        let data = serde_json::to_vec_pretty(self).map_err(|e| HolderError::Corrupt {
            path: path.clone(),
            source: e,
        })?;
        // Runtime state: atomic, but no fsyncs (a record of another boot is
        // never live, so losing one to a power cut is harmless).
        fsutil::write_atomic_with(&path, &data, HOLDER_FILE_MODE, Durability::Volatile)?;
        Ok(())
    }

    /// Reads the record; `Ok(None)` when there is none.
    pub fn read(state: &StateDir) -> Result<Option<HolderRecord>, HolderError> {
        let path = state.holder_path();
        match fsutil::read_bounded(&path, &read_policy())? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| HolderError::Corrupt { path, source: e }),
        }
    }

    /// Removes the record, but only if it is still ours (a record written by
    /// a later holder is left alone).
    pub fn remove_if_ours(state: &StateDir, me: ProcessId) -> Result<(), HolderError> {
        if let Ok(Some(rec)) = Self::read(state) {
            if rec.supervisor() != me {
                return Ok(());
            }
        }
        fsutil::remove_with(&state.holder_path(), Durability::Volatile)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs;

    #[test]
    fn round_trip_and_liveness() {
        let d = tempfile::tempdir().unwrap();
        let lock = StateDir::open(&d.path().join("state")).unwrap();
        let me = procfs::self_id().unwrap();
        let mut rec =
            HolderRecord::new(Rank::self_hosted(2), me, "2026-01-01T00:00:00.000Z".into());
        rec.kubelet_pid = Some(42);
        rec.write(&lock).unwrap();
        let back = HolderRecord::read(&lock).unwrap().unwrap();
        assert_eq!(back, rec);
        assert!(back.is_live());
        let text = std::fs::read_to_string(lock.holder_path()).unwrap();
        assert!(text.contains("\"role\": \"self-hosted\""));
        assert!(text.contains("\"kubeletPid\": 42"));
        let stale = HolderRecord {
            start_time: me.start_time + 1,
            ..rec.clone()
        };
        assert!(!stale.is_live());
        let other_boot = HolderRecord {
            boot_id: Some("another-boot".into()),
            ..rec
        };
        assert!(!other_boot.is_live());
    }

    #[test]
    fn records_of_older_and_newer_builds_are_read() {
        let d = tempfile::tempdir().unwrap();
        let lock = StateDir::open(&d.path().join("state")).unwrap();
        // As 0.4.0 wrote it: no build.
        let older = r#"{"role":"self-hosted","generation":1,"pid":7,"startTime":9,
            "kubeletPid":8,"kubeletStartTime":10,"since":"T","bootId":"b",
            "lockFile":{"major":0,"minor":20,"inode":5}}"#;
        std::fs::write(lock.holder_path(), older).unwrap();
        let rec = HolderRecord::read(&lock).unwrap().unwrap();
        assert_eq!((rec.pid, rec.build), (7, None));
        // A later build's record with a field this one does not know.
        let newer = r#"{"role":"bootstrap","generation":0,"pid":7,"startTime":9,
            "kubeletPid":null,"kubeletStartTime":null,"since":"T",
            "build":{"version":"0.6.0","commit":"c","protocol":5,"extra":1},"future":true}"#;
        std::fs::write(lock.holder_path(), newer).unwrap();
        let rec = HolderRecord::read(&lock).unwrap().unwrap();
        assert_eq!(rec.build.map(|b| b.protocol), Some(5));
        // Ours records this build.
        let me = procfs::self_id().unwrap();
        let ours = HolderRecord::new(Rank::BOOTSTRAP, me, "T".into());
        assert_eq!(ours.build, Some(BuildInfo::current()));
    }

    #[test]
    fn corrupt_record_is_an_error_not_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let lock = StateDir::open(&d.path().join("state")).unwrap();
        std::fs::write(lock.holder_path(), b"{not json").unwrap();
        assert!(matches!(
            HolderRecord::read(&lock),
            Err(HolderError::Corrupt { .. })
        ));
    }

    #[test]
    fn odd_files_are_refused_without_blocking() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let lock = StateDir::open(&d.path().join("state")).unwrap();
        let path = lock.holder_path();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = HolderRecord::read(&lock).unwrap_err();
        assert!(err.to_string().contains("fifo"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(MAX_RECORD_BYTES + 1).unwrap();
        let err = HolderRecord::read(&lock).unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
        f.set_len(10).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = HolderRecord::read(&lock).unwrap_err();
        assert!(
            err.to_string().contains("writable by group or others"),
            "{err}"
        );
    }
}
