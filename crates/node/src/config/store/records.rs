//! The small records: assignment, last-known-good, bad configs, kubelet
//! startups, the trial, the effective record and config file, and the
//! stamps that tell whether any of them changed.

use std::path::PathBuf;

use super::json::policy;
use super::{
    BadConfigs, BadEntry, ConfigSource, EffectiveRecord, FileStamp, Store, StoreError, Trial,
    FILE_MODE, MAX_BAD_CONFIGS_BYTES, MAX_BAD_REASON, MAX_EFFECTIVE_BYTES, MAX_META_BYTES,
};
use crate::safefs::fsutil;

/// Cuts a reason to at most `max` bytes at a character boundary.
fn truncate_reason(reason: &str, max: usize) -> String {
    kp_contract::text::cut_with(reason, max, "... (truncated, see the log)")
}

impl Store {
    /// A cheap fingerprint of everything `lifecycle::resolve` reads besides
    /// the immutable checkpoints: meta/assigned, meta/last-known-good,
    /// v1/bad-configs.json, v1/config-dir.json and the records of a
    /// disruptive change (each replaced by rename, so a change is a new
    /// inode). Equal stamps mean an earlier resolution still holds.
    pub fn input_stamp(&self) -> Vec<Option<FileStamp>> {
        [
            self.meta_dir().join("assigned"),
            self.meta_dir().join("last-known-good"),
            self.v1_dir().join("bad-configs.json"),
            self.meta_dir().join("node-overrides"),
            self.v1_dir().join("disruption.json"),
            self.drop_in_path(),
        ]
        .iter()
        .map(|p| FileStamp::of(p))
        .collect()
    }

    /// The stamp of the effective config file, if it exists.
    pub fn effective_stamp(&self) -> Option<FileStamp> {
        FileStamp::of(&self.effective_config_path())
    }

    pub fn assigned(&self) -> Result<Option<ConfigSource>, StoreError> {
        self.read_json(
            &self.meta_dir().join("assigned"),
            "assigned config record",
            MAX_META_BYTES,
        )
    }
    pub fn set_assigned(&self, src: Option<&ConfigSource>) -> Result<(), StoreError> {
        self.write_optional(&self.meta_dir().join("assigned"), src)
    }
    pub fn last_known_good(&self) -> Result<Option<ConfigSource>, StoreError> {
        self.read_json(
            &self.meta_dir().join("last-known-good"),
            "last-known-good config record",
            MAX_META_BYTES,
        )
    }
    pub fn set_last_known_good(&self, src: Option<&ConfigSource>) -> Result<(), StoreError> {
        self.write_optional(&self.meta_dir().join("last-known-good"), src)
    }

    pub fn bad_configs(&self) -> Result<BadConfigs, StoreError> {
        Ok(self
            .read_json(
                &self.v1_dir().join("bad-configs.json"),
                "bad-config list",
                MAX_BAD_CONFIGS_BYTES,
            )?
            .unwrap_or_default())
    }
    /// Whether this exact source (uid and resourceVersion) is known bad.
    pub fn bad_entry(&self, src: &ConfigSource) -> Result<Option<BadEntry>, StoreError> {
        Ok(self
            .bad_configs()?
            .remove(&src.uid)
            .filter(|e| e.resource_version == src.resource_version))
    }
    pub fn mark_bad(&self, src: &ConfigSource, reason: &str, time: &str) -> Result<(), StoreError> {
        let mut bad = self.bad_configs()?;
        bad.insert(
            src.uid.clone(),
            BadEntry {
                time: time.to_string(),
                reason: truncate_reason(reason, MAX_BAD_REASON),
                resource_version: src.resource_version.clone(),
            },
        );
        self.write_json(&self.v1_dir().join("bad-configs.json"), &bad)
    }
    /// Returns whether an entry was removed.
    pub fn forget_bad(&self, uid: &str) -> Result<bool, StoreError> {
        let mut bad = self.bad_configs()?;
        let removed = bad.remove(uid).is_some();
        if removed {
            self.write_json(&self.v1_dir().join("bad-configs.json"), &bad)?;
        }
        Ok(removed)
    }

    pub fn startups(&self) -> Result<Vec<String>, StoreError> {
        Ok(self
            .read_json(
                &self.v1_dir().join("startups.json"),
                "kubelet startup record",
                MAX_META_BYTES,
            )?
            .unwrap_or_default())
    }
    pub fn set_startups(&self, list: &[String]) -> Result<(), StoreError> {
        self.write_json(&self.v1_dir().join("startups.json"), &list)
    }

    pub fn trial(&self) -> Result<Option<Trial>, StoreError> {
        self.read_json(
            &self.v1_dir().join("trial.json"),
            "trial record",
            MAX_META_BYTES,
        )
    }
    pub fn set_trial(&self, trial: Option<&Trial>) -> Result<(), StoreError> {
        let path = self.v1_dir().join("trial.json");
        match trial {
            Some(t) => self.write_json(&path, t),
            None => Ok(fsutil::remove_durable(&path)?),
        }
    }

    pub fn effective_record(&self) -> Result<Option<EffectiveRecord>, StoreError> {
        self.read_json(
            &self.v1_dir().join("effective.json"),
            "effective config record",
            MAX_META_BYTES,
        )
    }
    pub fn set_effective_record(&self, rec: &EffectiveRecord) -> Result<(), StoreError> {
        self.write_json(&self.v1_dir().join("effective.json"), rec)
    }
    /// The effective config file's content, through the bounded reader
    /// (`None` when absent or unreadable: planted, too large, not regular).
    pub fn effective_config(&self) -> Option<Vec<u8>> {
        fsutil::read_bounded(
            &self.effective_config_path(),
            &policy("effective kubelet config", MAX_EFFECTIVE_BYTES),
        )
        .ok()
        .flatten()
    }

    /// Whether the effective config file holds exactly `bytes` (read-only:
    /// for a supervisor preparing its start while another holds the lock).
    pub fn effective_config_matches(&self, bytes: &[u8]) -> bool {
        self.effective_config().as_deref() == Some(bytes)
    }

    /// Writes the config file the kubelet is started with.
    pub fn write_effective_config(&self, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let path = self.effective_config_path();
        self.check_no_symlink(&path)?;
        // Unchanged content needs no new file (and no fsyncs on the start
        // path). Anything unreadable (planted, too large) is replaced.
        if self.effective_config().as_deref() != Some(bytes) {
            fsutil::write_atomic(&path, bytes, FILE_MODE)?;
        }
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{self, File};

    use super::*;
    use crate::config::store::test_source as src;

    #[test]
    fn meta_round_trip_and_absent_is_local() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("store")).unwrap();
        assert_eq!(s.assigned().unwrap(), None);
        s.set_assigned(Some(&src("u1", "5"))).unwrap();
        assert_eq!(s.assigned().unwrap(), Some(src("u1", "5")));
        s.set_assigned(None).unwrap();
        assert_eq!(s.assigned().unwrap(), None);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(d.path().join("store/meta"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn corrupt_meta_is_reported_with_path() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        fs::write(d.path().join("meta/assigned"), b"{\"namespace\":").unwrap();
        let err = s.assigned().unwrap_err().to_string();
        assert!(err.contains("meta/assigned"), "{err}");
        assert!(err.contains("corrupt"), "{err}");
    }

    #[test]
    fn bad_configs_track_resource_version() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        s.mark_bad(&src("u1", "5"), "crash loop", "2026-01-01T00:00:00Z")
            .unwrap();
        assert!(s.bad_entry(&src("u1", "5")).unwrap().is_some());
        assert!(s.bad_entry(&src("u1", "6")).unwrap().is_none());
        assert!(s.forget_bad("u1").unwrap());
        assert!(!s.forget_bad("u1").unwrap());
        assert!(s.bad_entry(&src("u1", "5")).unwrap().is_none());
    }

    #[test]
    fn planted_files_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        let assigned = d.path().join("meta/assigned");
        nix::unistd::mkfifo(&assigned, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = s.assigned().unwrap_err().to_string();
        assert!(
            err.contains("fifo") && err.contains("meta/assigned"),
            "{err}"
        );
        let bad = d.path().join("v1/bad-configs.json");
        let f = File::create(&bad).unwrap();
        f.set_len(64 * 1024 * 1024).unwrap();
        let err = s.bad_configs().unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
        // Group-writable: someone else may have written it.
        let lkg = d.path().join("meta/last-known-good");
        fs::write(&lkg, b"{}").unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&lkg, fs::Permissions::from_mode(0o666)).unwrap();
        let err = s.last_known_good().unwrap_err().to_string();
        assert!(err.contains("writable by group or others"), "{err}");
    }

    #[test]
    fn long_bad_reasons_are_truncated() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        let reason = "é".repeat(MAX_BAD_REASON);
        s.mark_bad(&src("u1", "5"), &reason, "2026-01-01T00:00:00Z")
            .unwrap();
        let stored = s.bad_entry(&src("u1", "5")).unwrap().unwrap().reason;
        assert!(stored.len() < MAX_BAD_REASON + 64, "{}", stored.len());
        assert!(stored.ends_with("(truncated, see the log)"));
    }
}
