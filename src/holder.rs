//! The holder record: a JSON file beside the lock file that says which
//! supervisor holds the lock and which kubelet it runs. Written atomically by
//! the holder only; read by `status`, by standing-by supervisors, and by the
//! next holder to fence a kubelet that outlived its supervisor.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::{self, FsError};
use crate::procfs::ProcessId;
use crate::role::{Rank, Role};

pub const HOLDER_FILE_MODE: u32 = 0o644;

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
}

#[derive(Debug, thiserror::Error)]
pub enum HolderError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("holder record {path} is corrupt ({source}); it is ignored and will be rewritten by the next holder")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Path of the holder record for a lock file: `<lock>.holder`.
pub fn holder_path(lock: &Path) -> PathBuf {
    let mut s = lock.as_os_str().to_owned();
    s.push(".holder");
    PathBuf::from(s)
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

    /// A record is live when its supervisor (pid and start time) still runs.
    pub fn is_live(&self) -> bool {
        self.supervisor().is_alive()
    }

    pub fn write(&self, lock: &Path) -> Result<(), HolderError> {
        let data = serde_json::to_vec_pretty(self).map_err(|e| HolderError::Corrupt {
            path: holder_path(lock),
            source: e,
        })?;
        fsutil::write_atomic(&holder_path(lock), &data, HOLDER_FILE_MODE)?;
        Ok(())
    }

    /// Reads the record; `Ok(None)` when there is none.
    pub fn read(lock: &Path) -> Result<Option<HolderRecord>, HolderError> {
        let path = holder_path(lock);
        match fsutil::read_nofollow(&path, 4096)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| HolderError::Corrupt { path, source: e }),
        }
    }

    /// Removes the record, but only if it is still ours (a record written by
    /// a later holder is left alone).
    pub fn remove_if_ours(lock: &Path, me: ProcessId) -> Result<(), HolderError> {
        if let Ok(Some(rec)) = Self::read(lock) {
            if rec.supervisor() != me {
                return Ok(());
            }
        }
        fsutil::remove_durable(&holder_path(lock))?;
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
        let lock = d.path().join("kubelet.lock");
        let me = procfs::self_id().unwrap();
        let mut rec =
            HolderRecord::new(Rank::self_hosted(2), me, "2026-01-01T00:00:00.000Z".into());
        rec.kubelet_pid = Some(42);
        rec.write(&lock).unwrap();
        let back = HolderRecord::read(&lock).unwrap().unwrap();
        assert_eq!(back, rec);
        assert!(back.is_live());
        let text = std::fs::read_to_string(holder_path(&lock)).unwrap();
        assert!(text.contains("\"role\": \"self-hosted\""));
        assert!(text.contains("\"kubeletPid\": 42"));
        let stale = HolderRecord {
            start_time: me.start_time + 1,
            ..rec
        };
        assert!(!stale.is_live());
    }

    #[test]
    fn corrupt_record_is_an_error_not_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let lock = d.path().join("kubelet.lock");
        std::fs::write(holder_path(&lock), b"{not json").unwrap();
        assert!(matches!(
            HolderRecord::read(&lock),
            Err(HolderError::Corrupt { .. })
        ));
    }
}
