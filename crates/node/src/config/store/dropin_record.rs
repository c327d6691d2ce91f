//! `v1/config-dir.json`: what the store keeps of the kubelet's `--config-dir`
//! drop-ins, so that a refused or crash-looping change of the directory
//! loses nothing: the set that ran last and the last-known-good set (each a
//! checkpoint of the merged drop-ins), the trial of a new set and the sets
//! that crash-looped in theirs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Store, StoreError, MAX_BAD_REASON, MAX_PAYLOAD};

/// Largest `v1/config-dir.json`: two checkpoints of at most
/// [`MAX_DROP_IN_LAYER`] bytes each, plus file lists and a few records.
const MAX_DROP_IN_RECORD: u64 = 3 * MAX_PAYLOAD as u64;
/// Largest merged drop-in layer kept (canonical JSON).
pub const MAX_DROP_IN_LAYER: usize = MAX_PAYLOAD;
/// Crash-looped sets remembered (the oldest is forgotten first).
pub const MAX_BAD_DROP_IN_SETS: usize = 16;

/// One drop-in file of a set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DropInFile {
    /// Path relative to the `--config-dir` directory.
    pub name: String,
    pub sha256: String,
    /// The top-level fields it sets (besides apiVersion and kind), to name
    /// the file behind a merged config that does not validate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

/// A checkpoint of a drop-in set: what it merged to, and where from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DropInSnapshot {
    /// SHA-256 over the files' names and contents, in merge order.
    pub id: String,
    pub files: Vec<DropInFile>,
    /// The drop-ins merged among themselves (v1beta1 field names).
    pub layer: Map<String, Value>,
}

impl DropInSnapshot {
    /// The first 12 hex digits of the id, for messages.
    pub fn short_id(&self) -> &str {
        self.id.get(..12).unwrap_or(&self.id)
    }
}

/// A drop-in set on trial, with its own stored clock and crash count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DropInTrial {
    pub id: String,
    /// RFC 3339 start of the trial (when the set first ran).
    pub since: String,
    /// RFC 3339 times of kubelet exits kubelet-pivot did not cause.
    #[serde(default)]
    pub startups: Vec<String>,
}

/// Why a drop-in set is not run again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DropInBad {
    pub time: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DropInRecord {
    /// The set the last kubelet ran with: kept when the directory changes
    /// to something that does not load or validate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<DropInSnapshot>,
    /// The set that survived its trial: where a crash loop goes back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_good: Option<DropInSnapshot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<DropInTrial>,
    /// Sets (by id) that crash-looped in their trial.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bad: BTreeMap<String, DropInBad>,
}

impl DropInRecord {
    /// Records a set as bad (reason cut to the store's limit), forgetting the
    /// oldest entries beyond [`MAX_BAD_DROP_IN_SETS`].
    pub fn mark_bad(&mut self, id: &str, reason: &str, time: &str) {
        self.bad.insert(
            id.to_owned(),
            DropInBad {
                time: time.to_owned(),
                reason: kp_contract::text::prefix(reason, MAX_BAD_REASON).to_owned(),
            },
        );
        while self.bad.len() > MAX_BAD_DROP_IN_SETS {
            let oldest = self
                .bad
                .iter()
                .min_by(|a, b| a.1.time.cmp(&b.1.time))
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => self.bad.remove(&id),
                None => break,
            };
        }
    }
}

impl Store {
    pub(super) fn drop_in_path(&self) -> std::path::PathBuf {
        self.v1_dir().join("config-dir.json")
    }

    /// The drop-in record (empty when absent).
    pub fn drop_in_record(&self) -> Result<DropInRecord, StoreError> {
        Ok(self
            .read_json(
                &self.drop_in_path(),
                "--config-dir drop-in record",
                MAX_DROP_IN_RECORD,
            )?
            .unwrap_or_default())
    }

    /// Writes the drop-in record (the caller holds the store lock).
    pub fn set_drop_in_record(&self, record: &DropInRecord) -> Result<(), StoreError> {
        self.write_json(&self.drop_in_path(), record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_absent_is_empty() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        assert_eq!(s.drop_in_record().unwrap(), DropInRecord::default());
        let mut layer = Map::new();
        layer.insert("maxPods".into(), Value::from(10));
        let snap = DropInSnapshot {
            id: "ab".repeat(32),
            files: vec![DropInFile {
                name: "10-a.conf".into(),
                sha256: "cd".repeat(32),
                fields: vec!["maxPods".into()],
            }],
            layer,
        };
        let mut record = DropInRecord {
            applied: Some(snap.clone()),
            last_known_good: Some(snap),
            trial: None,
            bad: BTreeMap::new(),
        };
        record.mark_bad("x", &"é".repeat(MAX_BAD_REASON), "T1");
        s.set_drop_in_record(&record).unwrap();
        assert_eq!(s.drop_in_record().unwrap(), record);
        assert!(record.bad["x"].reason.len() <= MAX_BAD_REASON);
    }

    #[test]
    fn bad_sets_are_bounded_oldest_first() {
        let mut record = DropInRecord::default();
        for i in 0..MAX_BAD_DROP_IN_SETS + 3 {
            record.mark_bad(&format!("id{i:02}"), "crash loop", &format!("T{i:02}"));
        }
        assert_eq!(record.bad.len(), MAX_BAD_DROP_IN_SETS);
        assert!(!record.bad.contains_key("id00"));
        assert!(record
            .bad
            .contains_key(&format!("id{:02}", MAX_BAD_DROP_IN_SETS + 2)));
    }
}
