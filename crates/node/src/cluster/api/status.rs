//! What the supervisor's API access is doing, as `status` shows it: the
//! holder writes it to `STATE/api.json` (atomically, on every change) and
//! `status` reads it from there.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pivot::state::StateDir;
use crate::safefs::fsutil::{self, Durability, Owner, ReadPolicy};
use kp_contract::time::now_rfc3339;

/// Name of the record in the state directory.
pub const FILE_NAME: &str = "api.json";

/// Largest record `status` reads.
const MAX_RECORD_BYTES: u64 = 16 * 1024;

/// Longest error text kept in the record.
const MAX_MESSAGE_CHARS: usize = 2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ApiPhase {
    /// `--kubeconfig` does not exist yet.
    Waiting,
    /// Credentials read; the node's assignment is followed.
    Following,
    /// The kubeconfig or a file it names was refused (with or without last
    /// good credentials still in use).
    Invalid,
    /// In-cluster service account.
    InCluster,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiStatus {
    pub phase: ApiPhase,
    pub kubeconfig: Option<PathBuf>,
    /// One line for `status`'s `API` row.
    pub message: String,
    pub since: String,
    /// The supervisor that wrote the record (`status` shows only the live
    /// holder's).
    #[serde(default)]
    pub pid: Option<i32>,
}

impl ApiStatus {
    fn new(phase: ApiPhase, kubeconfig: Option<&Path>, message: String) -> Self {
        ApiStatus {
            phase,
            kubeconfig: kubeconfig.map(Path::to_path_buf),
            message,
            since: now_rfc3339(),
            pid: None,
        }
    }
    pub fn waiting(path: &Path) -> Self {
        Self::new(
            ApiPhase::Waiting,
            Some(path),
            format!(
                "waiting for {} (the kubelet writes it after its TLS bootstrap)",
                path.display()
            ),
        )
    }
    pub fn following(path: &Path) -> Self {
        Self::new(
            ApiPhase::Following,
            Some(path),
            format!("following the node's assignment with {}", path.display()),
        )
    }
    /// `kept`: last good credentials are still in use.
    pub fn invalid(path: &Path, error: &str, kept: bool) -> Self {
        // One line: a YAML error spans several (the caret diagram).
        let error: String = error
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(MAX_MESSAGE_CHARS)
            .collect();
        let message = if kept {
            format!("{error}; keeping the last good credentials until it is fixed")
        } else {
            format!("{error}; the kubelet keeps running, waiting for a valid file")
        };
        Self::new(ApiPhase::Invalid, Some(path), message)
    }
    pub fn in_cluster() -> Self {
        Self::new(
            ApiPhase::InCluster,
            None,
            "following the node's assignment with the in-cluster service account".to_string(),
        )
    }
    /// Same state, whatever the time.
    pub fn same_as(&self, other: &ApiStatus) -> bool {
        self.phase == other.phase
            && self.kubeconfig == other.kubeconfig
            && self.message == other.message
    }

    /// Writes the record (runtime state: atomic, not fsynced). Blocking.
    pub fn write(&self, state: &StateDir) -> Result<(), String> {
        let bytes = serde_json::to_vec(self).map_err(|e| e.to_string())?;
        fsutil::write_atomic_with(&path(state), &bytes, 0o600, Durability::Volatile)
            .map_err(|e| e.to_string())
    }

    /// Reads the record, if one was written. Blocking.
    pub fn read(state: &StateDir) -> Result<Option<ApiStatus>, String> {
        let policy = ReadPolicy {
            what: "API status record",
            max_len: MAX_RECORD_BYTES,
            owner: Owner::me(),
            private: true,
        };
        match fsutil::read_bounded(&path(state), &policy) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| format!("corrupt API status record: {e}")),
            Ok(None) => Ok(None),
            Err(err) => Err(err.to_string()),
        }
    }
}

fn path(state: &StateDir) -> PathBuf {
    state.root().join(FILE_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waiting_row_names_the_file_and_why() {
        let s = ApiStatus::waiting(Path::new("/etc/kubernetes/kubelet.conf"));
        assert_eq!(
            s.message,
            "waiting for /etc/kubernetes/kubelet.conf (the kubelet writes it after its TLS bootstrap)"
        );
    }

    #[test]
    fn a_record_round_trips() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(d.path()).unwrap();
        assert_eq!(ApiStatus::read(&state).unwrap(), None);
        let s = ApiStatus::invalid(Path::new("/k"), "bad", true);
        s.write(&state).unwrap();
        assert_eq!(ApiStatus::read(&state).unwrap(), Some(s));
    }
}
