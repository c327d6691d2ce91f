//! A kubelet start prepared while the lock is someone else's.
//!
//! A waiting supervisor resolves the config it would start (reading,
//! parsing and validating the store's checkpoints, read-only) and checks
//! that the effective config file already holds exactly that config. When
//! it gets the lock it only verifies, with a few `lstat`s, that none of the
//! store's inputs, no `--config-dir` drop-in and not the effective file
//! changed since: then the kubelet is spawned at once, and what runs is
//! recorded in the store right after.
//! Anything else (a changed input, an error to record such as a config to
//! mark bad, an effective file to rewrite) takes the full path, so no check
//! is skipped.

use std::path::PathBuf;

use crate::config::config_dir;
use crate::config::lifecycle::{self, Access, LocalConfig, Resolved};
use crate::config::running::{self, StartChoice};
use crate::config::store::{DisruptionRecord, FileStamp, Store};
use kp_kubelet_config::disruption::Policy;

#[derive(Debug, Clone)]
pub struct Prepared {
    pub resolved: Resolved,
    inputs: Vec<Option<FileStamp>>,
    /// The `--config-dir` directories and drop-ins it was prepared from.
    drop_ins: Vec<(PathBuf, Option<FileStamp>)>,
    /// The effective file, as it was when it was found to hold exactly
    /// this config.
    effective: FileStamp,
    /// The store's disruption record (one of the inputs the stamps cover):
    /// the holder knows it at start without another read.
    pub disruption: Option<DisruptionRecord>,
}

impl Prepared {
    /// Resolves read-only (blocking I/O and parsing: run it off the event
    /// loop). `None` when the result cannot be used at start as it is: the
    /// resolution reported an error (the holder must record it), or the
    /// effective file does not hold this config yet (the holder must write
    /// it), or the start is not a plain start of the resolved config (a
    /// disruptive change waits, or state files must be moved aside).
    pub fn prepare(
        store: &Store,
        local: &LocalConfig,
        policy: &Policy,
        api: bool,
    ) -> Option<Prepared> {
        let inputs = store.input_stamp();
        let resolved = lifecycle::resolve(store, local, Access::ReadOnly);
        if resolved.error.is_some() {
            return None;
        }
        match running::choose_start(store, &resolved, policy, api, false, &local.target) {
            StartChoice::Target { state_files, .. } if state_files.is_empty() => {}
            _ => return None,
        }
        let effective = store.effective_stamp()?;
        if !store.effective_config_matches(&resolved.config.effective_bytes()) {
            return None;
        }
        let disruption = store.disruption().ok()?;
        let drop_ins = resolved
            .drop_ins
            .as_ref()
            .map(|d| d.set.stamps.clone())
            .unwrap_or_default();
        // Inputs or the file changed while we read them: not usable.
        if store.input_stamp() != inputs
            || store.effective_stamp() != Some(effective)
            || !config_dir::unchanged(&drop_ins)
        {
            return None;
        }
        Some(Prepared {
            resolved,
            inputs,
            drop_ins,
            effective,
            disruption,
        })
    }

    /// Whether nothing it was prepared from changed (a few lstats).
    pub fn still_valid(&self, store: &Store) -> bool {
        store.input_stamp() == self.inputs
            && store.effective_stamp() == Some(self.effective)
            && config_dir::unchanged(&self.drop_ins)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::config::store::test_source as src;

    const GOOD: &str =
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 42\n";

    /// What a holder does: resolve and write the effective file; then a
    /// waiter can prepare the same start.
    fn hold_then_prepare(store: &Store, local: &LocalConfig) -> (Resolved, Prepared) {
        // Until the holder wrote the effective file, nothing is prepared.
        assert!(Prepared::prepare(store, local, &Policy::defaults(), false).is_none());
        let r = lifecycle::resolve(store, local, Access::Holder);
        store
            .write_effective_config(&r.config.effective_bytes())
            .unwrap();
        let p = Prepared::prepare(store, local, &Policy::defaults(), false).unwrap();
        (r, p)
    }

    #[test]
    fn prepared_only_while_nothing_changes() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let local = LocalConfig::load(None).unwrap();
        let (r, p) = hold_then_prepare(&store, &local);
        assert!(p.still_valid(&store));
        assert_eq!(p.resolved.hash(), r.hash());
        // A new assignment invalidates it.
        let s = src("u1", "1");
        let mut files = BTreeMap::new();
        files.insert("kubelet".to_string(), GOOD.as_bytes().to_vec());
        store.save_checkpoint(&s, &files).unwrap();
        store.set_assigned(Some(&s)).unwrap();
        assert!(!p.still_valid(&store));
        // Prepared again, it resolves the assignment, once the holder wrote it.
        let (r, p) = hold_then_prepare(&store, &local);
        assert_eq!(p.resolved.hash(), r.hash());
        assert!(p.resolved.config.effective_bytes().len() > 10);
    }

    #[test]
    fn the_disruption_record_comes_with_the_prepared_start() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let local = LocalConfig::load(None).unwrap();
        let (_, p) = hold_then_prepare(&store, &local);
        assert_eq!(p.disruption, None, "no record in the store");
        // A record that cannot be read is the full path's to report.
        let record = d.path().join("v1").join("disruption.json");
        std::fs::write(&record, "{ not json").unwrap();
        assert!(!p.still_valid(&store), "the record is one of the inputs");
        assert!(Prepared::prepare(&store, &local, &Policy::defaults(), false).is_none());
        std::fs::remove_file(&record).unwrap();
        assert!(Prepared::prepare(&store, &local, &Policy::defaults(), false).is_some());
    }
}
