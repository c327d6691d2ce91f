//! The records of a disruptive config change: `v1/disruption.json` (a
//! drain in progress, a drain backing off, or a held change: what
//! survives a kill -9 mid-drain, and what `status` shows), the node's
//! override of the per-class actions (`meta/node-overrides`, copied from the
//! Node's annotation by the syncer) and the document of the config that runs
//! (`v1/applied-input.json`, re-decoded under the current build to compare
//! with a new one).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConfigSource, Store, StoreError, DIR_MODE, FILE_MODE, MAX_META_BYTES, MAX_PAYLOAD};
use crate::safefs::fsutil;
use kp_kubelet_config::disruption::{Action, Class, MAX_OVERRIDES_BYTES};

/// Where a disruptive change stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrainPhase {
    /// Not applied: the change needs a new node (action `hold`).
    Held,
    /// Evicting the pods bound to the node (cordoned first).
    Evicting,
    /// Drained: the kubelet restarts with the new config.
    Restarting,
    /// Restarted: waiting for the kubelet's healthz before uncordoning.
    HealthGate,
    /// The last drain timed out (or failed); uncordoned, tried again at `retry_at`.
    BackingOff,
}

impl DrainPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            DrainPhase::Held => "held",
            DrainPhase::Evicting => "evicting",
            DrainPhase::Restarting => "restarting",
            DrainPhase::HealthGate => "health-gate",
            DrainPhase::BackingOff => "backing-off",
        }
    }

    /// The node is drained: any config may start now.
    pub fn drained(self) -> bool {
        matches!(self, DrainPhase::Restarting | DrainPhase::HealthGate)
    }
}

/// Why pods a drain asked to evict are still on the node: the server's
/// answer, by kind (`kubectl drain` tells the same answers apart). Each is
/// asked again with backoff until `--drain-timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockReason {
    /// 429 with the cause `DisruptionBudget`: a PodDisruptionBudget allows
    /// no disruption now.
    DisruptionBudget,
    /// 403 with the cause `NamespaceTerminating`: the pod's namespace is
    /// being deleted (its pods go with it).
    NamespaceTerminating,
    /// 5xx, or 429 without the `DisruptionBudget` cause (API priority and
    /// fairness): the server could not handle the eviction now.
    ServerError,
    /// No answer (connection refused, reset, timed out).
    Unreachable,
}

impl BlockReason {
    pub const ALL: [BlockReason; 4] = [
        BlockReason::DisruptionBudget,
        BlockReason::NamespaceTerminating,
        BlockReason::ServerError,
        BlockReason::Unreachable,
    ];

    /// How the reason reads after "N pod(s) ...".
    pub fn describe(self) -> &'static str {
        match self {
            BlockReason::DisruptionBudget => "blocked by a PodDisruptionBudget",
            BlockReason::NamespaceTerminating => "in a namespace being deleted",
            BlockReason::ServerError => "refused by API server errors",
            BlockReason::Unreachable => "not answered by the API server",
        }
    }
}

/// Pods of a drain refused for one [`BlockReason`], with the server's last
/// answer of that kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedPods {
    pub reason: BlockReason,
    pub pods: usize,
    /// The pod of the last such answer, `namespace/name`.
    pub example: String,
    /// HTTP status of that answer (0: none).
    pub code: u16,
    /// The server's message (an escaped excerpt).
    pub message: String,
}

/// Why a drain gave up, typed (the words are in `last_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrainFailure {
    /// Pods were still there at `--drain-timeout`.
    Timeout,
    /// 500: more than one PodDisruptionBudget selects a pod, which the
    /// eviction subresource does not support; asking again cannot help, so
    /// the round fails at once (as `kubectl drain` does).
    MultipleBudgets,
    /// 403: the node's credentials may not list, evict or cordon.
    Forbidden,
    /// Another answer that asking again cannot change (400, 422, ...), or
    /// the cordon failed.
    Refused,
}

impl DrainFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            DrainFailure::Timeout => "timeout",
            DrainFailure::MultipleBudgets => "multiple PodDisruptionBudgets",
            DrainFailure::Forbidden => "forbidden",
            DrainFailure::Refused => "refused",
        }
    }
}

/// A disruptive change in progress or held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionRecord {
    /// Hash of the config the change brings ([`hash_algorithm`](Self::hash_algorithm)).
    pub target_hash: String,
    pub hash_algorithm: String,
    /// Its source (`None`: the local config).
    pub target: Option<ConfigSource>,
    pub class: Class,
    pub action: Action,
    /// The changed fields, e.g. `kubeReserved.memory`.
    pub fields: Vec<String>,
    pub phase: DrainPhase,
    /// Whether we cordoned the node (only then is it ours to uncordon).
    pub cordoned_by_us: bool,
    /// RFC 3339: when this change was first seen.
    pub since: String,
    /// Drains tried for it.
    pub attempts: u32,
    /// RFC 3339: when a backing-off drain is tried again.
    pub retry_at: Option<String>,
    /// What the change waits for, in words.
    pub waiting_for: String,
    pub last_error: Option<String>,
    /// Pods the drain could not evict yet, by reason (empty: none refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<BlockedPods>,
    /// Why the last drain gave up, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<DrainFailure>,
}

impl Store {
    fn disruption_path(&self) -> PathBuf {
        self.v1_dir().join("disruption.json")
    }
    fn node_overrides_path(&self) -> PathBuf {
        self.meta_dir().join("node-overrides")
    }
    fn applied_input_path(&self) -> PathBuf {
        self.v1_dir().join("applied-input.json")
    }

    pub fn disruption(&self) -> Result<Option<DisruptionRecord>, StoreError> {
        self.read_json(&self.disruption_path(), "disruption record", MAX_META_BYTES)
    }

    pub fn set_disruption(&self, record: Option<&DisruptionRecord>) -> Result<(), StoreError> {
        let path = self.disruption_path();
        match record {
            Some(r) => self.write_json(&path, r),
            None => {
                self.check_no_symlink(&path)?;
                Ok(fsutil::remove_durable(&path)?)
            }
        }
    }

    /// The Node's override of the per-class actions, as last copied from its
    /// annotation (the text; parsed by the caller). Read with the cap the
    /// syncer checks before it writes ([`MAX_OVERRIDES_BYTES`]): a longer
    /// file was not written by us and is an error, not a truncated policy.
    pub fn node_overrides(&self) -> Result<Option<String>, StoreError> {
        let bytes = self.read_file(
            &self.node_overrides_path(),
            "node override record",
            MAX_OVERRIDES_BYTES as u64,
        )?;
        Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Writes (or removes) the node override; unchanged text is not
    /// rewritten. A record that cannot be read (too long, not a regular
    /// file) is replaced or removed all the same, so that a bad record never
    /// outlives the annotation that produced it.
    pub fn set_node_overrides(&self, text: Option<&str>) -> Result<(), StoreError> {
        if let Some(t) = text {
            if t.len() > MAX_OVERRIDES_BYTES {
                return Err(StoreError::OverridesTooLong {
                    size: t.len(),
                    max: MAX_OVERRIDES_BYTES,
                });
            }
        }
        if matches!(self.node_overrides(), Ok(current) if current.as_deref() == text) {
            return Ok(());
        }
        let path = self.node_overrides_path();
        self.check_no_symlink(&path)?;
        match text {
            Some(t) => Ok(fsutil::write_atomic(&path, t.as_bytes(), FILE_MODE)?),
            None => Ok(fsutil::remove_durable(&path)?),
        }
    }

    /// The document of the config that runs, as last recorded.
    pub fn applied_input(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.read_file(
            &self.applied_input_path(),
            "applied config document",
            MAX_PAYLOAD as u64,
        )
    }

    pub fn set_applied_input(&self, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.applied_input_path();
        self.check_no_symlink(&path)?;
        if self.applied_input().ok().flatten().as_deref() != Some(bytes) {
            fsutil::write_atomic(&path, bytes, FILE_MODE)?;
        }
        Ok(())
    }

    /// The directory kubelet state files are moved into (created 0700).
    pub fn state_files_dir(&self) -> Result<PathBuf, StoreError> {
        let dir = self.root().join("state-files");
        self.check_no_symlink(&dir)?;
        fsutil::ensure_dir(&dir, DIR_MODE)?;
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_override_record_is_replaced_and_removed_not_kept() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        store
            .set_node_overrides(Some("allocatable=restart"))
            .unwrap();
        // As an older build (no cap where it entered) left it: longer than reads accept.
        let path = store.node_overrides_path();
        std::fs::write(&path, "allocatable=restart ".repeat(10_000)).unwrap();
        assert!(store.node_overrides().is_err(), "reads stop at the cap");
        store.set_node_overrides(Some("state-bound=hold")).unwrap();
        assert_eq!(
            store.node_overrides().unwrap().as_deref(),
            Some("state-bound=hold")
        );
        std::fs::write(&path, "x".repeat(MAX_OVERRIDES_BYTES + 1)).unwrap();
        store.set_node_overrides(None).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn an_override_over_the_cap_is_never_written() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let long = "allocatable=restart,".repeat(60);
        assert!(long.len() > MAX_OVERRIDES_BYTES);
        let err = store.set_node_overrides(Some(&long)).unwrap_err();
        assert!(err.to_string().contains("at most 1024"), "{err}");
        assert!(store.node_overrides().unwrap().is_none());
    }
}
