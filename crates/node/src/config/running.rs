//! What ran last on this node, and which config the next kubelet start
//! uses when that differs from the one the store resolves to.
//!
//! The config that ran is re-derived under *this* build from the document it
//! was decoded from (`v1/applied-input.json`, else the checkpoint of its
//! source, else the effective file), so both sides of a comparison are
//! decoded, defaulted and hashed by one build with one algorithm: a build
//! with another hash algorithm or other defaults sees no change where no
//! input changed, and restarts nothing.

use tracing::{info, warn};

use crate::config::config_dir::{AppliedDropIns, DropInOrigin, DropInSet};
use crate::config::lifecycle::{Origin, Resolved};
use crate::config::store::{EffectiveRecord, Store};
use kp_kubelet_config::disruption::{self, Action, Change, Policy, StateFile};
use kp_kubelet_config::{sha256_hex, KubeletConfig, ValidationTarget, HASH_ALGORITHM};

/// The config of the last kubelet start, decoded by this build.
#[derive(Debug, Clone)]
pub struct Running {
    pub record: EffectiveRecord,
    pub config: KubeletConfig,
}

/// The config the last kubelet on this node was started with, if the store
/// still has its document.
pub fn last_running(store: &Store) -> Option<Running> {
    let record = store.effective_record().ok()??;
    let with = |config| Running {
        record: record.clone(),
        config,
    };
    if let (Some(sum), Ok(Some(bytes))) = (&record.input_sha256, store.applied_input()) {
        if sha256_hex(&bytes) == *sum {
            if let Ok(config) = KubeletConfig::parse(&bytes) {
                return Some(with(config));
            }
        }
    }
    if let Some(src) = &record.source {
        if let Ok(files) = store.load_checkpoint(src) {
            if let Some(config) = files
                .get(&src.kubelet_config_key)
                .and_then(|b| KubeletConfig::parse(b).ok())
            {
                return Some(with(config));
            }
        }
    }
    let bytes = store.effective_config()?;
    KubeletConfig::parse(&bytes).ok().map(with)
}

/// Whether the recorded hash already says "same config" (same algorithm,
/// same hash): no document needs decoding.
pub fn same_as_recorded(record: &EffectiveRecord, target: &KubeletConfig) -> bool {
    record.hash_algorithm == HASH_ALGORITHM && record.hash == target.hash()
}

/// The config the next kubelet start uses.
#[derive(Debug, Clone)]
pub enum StartChoice {
    /// The resolved config; move these kubelet state files aside first.
    Target {
        state_files: Vec<StateFile>,
        change: Change,
    },
    /// The config that ran last: the change to the resolved one waits for
    /// its action (a drain, or a new node).
    Previous {
        running: Box<Resolved>,
        change: Change,
        action: Action,
    },
}

impl StartChoice {
    fn target(change: Change) -> StartChoice {
        StartChoice::Target {
            state_files: change.state_files().into_iter().collect(),
            change,
        }
    }
}

/// Why the target starts although the change would drain or hold.
fn target_anyway(
    store: &Store,
    running: &Running,
    drained: bool,
    crashing: bool,
    kubelet: &ValidationTarget,
) -> Option<&'static str> {
    if drained {
        return Some("the node is drained for it");
    }
    if crashing {
        return Some(
            "the kubelet keeps exiting with the config that ran (nothing runs to protect)",
        );
    }
    if let Some(src) = &running.record.source {
        if matches!(store.bad_entry(src), Ok(Some(_))) {
            return Some("the config that ran is known bad (a rollback)");
        }
    }
    if running.config.validate_for(kubelet).is_err() {
        return Some("the config that ran does not validate under this build");
    }
    None
}

fn origin_of(text: &str) -> Origin {
    match text {
        "assigned" => Origin::Assigned,
        "last-known-good" => Origin::LastKnownGood,
        _ => Origin::Local,
    }
}

/// Decides what the next kubelet start runs: the resolved config, unless
/// the change from the config that ran last needs a drain or a new node
/// (then the previous config runs on and the change waits). `api`: an API
/// server is configured (without one there is nothing to drain through;
/// a drain becomes a restart). `crashing`: the kubelet keeps exiting; the
/// previous config is not kept for it.
pub fn choose_start(
    store: &Store,
    target: &Resolved,
    policy: &Policy,
    api: bool,
    crashing: bool,
    kubelet: &ValidationTarget,
) -> StartChoice {
    let Some(running) = last_running(store) else {
        return StartChoice::target(Change::default());
    };
    if same_as_recorded(&running.record, &target.config) {
        return StartChoice::target(Change::default());
    }
    let change = disruption::classify(&running.config, &target.config);
    let Some(class) = change.class() else {
        return StartChoice::target(change);
    };
    let drained = store
        .disruption()
        .ok()
        .flatten()
        .is_some_and(|r| r.phase.drained());
    if let Some(why) = target_anyway(store, &running, drained, crashing, kubelet) {
        info!(class = %class, fields = %change.summary(512), why, "starting the new config directly");
        return StartChoice::target(change);
    }
    let action = match policy.action(class) {
        Action::Drain if !api => {
            warn!(class = %class, "no API server configured: nothing to drain through; restarting in place");
            Action::Restart
        }
        other => other,
    };
    if action == Action::Restart {
        return StartChoice::target(change);
    }
    // The config that ran has the drop-ins that ran merged in already.
    let drop_ins = store
        .drop_in_record()
        .ok()
        .and_then(|r| r.applied)
        .map(|snapshot| AppliedDropIns {
            origin: DropInOrigin::Previous,
            set: DropInSet::from_snapshot(snapshot),
        });
    let previous = Resolved {
        origin: origin_of(&running.record.origin),
        source: running.record.source.clone(),
        config: running.config.clone(),
        error: None,
        assigned: target.assigned.clone(),
        last_known_good: target.last_known_good.clone(),
        drop_ins,
    };
    StartChoice::Previous {
        running: Box::new(previous),
        change,
        action,
    }
}

/// The per-class actions for this node: the supervisor's (defaults and
/// `--disruption-action`), then the Node's annotation as last copied to the
/// store.
/// A record that cannot be read or parsed is reported, never applied in
/// part: the supervisor's actions apply until the syncer rewrites it.
pub fn node_policy(base: &Policy, store: &Store) -> Policy {
    match store.node_overrides() {
        Ok(Some(text)) => match text.parse() {
            Ok(overrides) => base.with(&overrides),
            Err(err) => {
                warn!(%err, "ignoring the recorded disruption-action override of this node; the supervisor's actions apply");
                base.clone()
            }
        },
        Ok(None) => base.clone(),
        Err(err) => {
            warn!(%err, "cannot read the recorded disruption-action override of this node; the supervisor's actions apply");
            base.clone()
        }
    }
}

/// Classes for messages: `allocatable (kubeReserved.memory, maxPods)`.
pub fn describe(change: &Change) -> String {
    match change.class() {
        Some(class) => format!("{class} change ({})", change.fields_of(class).join(", ")),
        None => "no change".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::config::store::EffectiveRecord;

    fn local_record() -> EffectiveRecord {
        EffectiveRecord {
            source: None,
            origin: "local".into(),
            hash_algorithm: "sha256-canonical-json-v1".into(),
            hash: "00".into(),
            class_hashes: None,
            input_sha256: None,
            error: None,
            since: "T".into(),
        }
    }

    #[test]
    fn a_planted_fifo_as_the_effective_file_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        store.set_effective_record(&local_record()).unwrap();
        let path = store.effective_config_path();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let started = Instant::now();
        assert!(last_running(&store).is_none());
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn the_recorded_document_wins_only_when_its_digest_matches() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let doc = b"{\"apiVersion\":\"kubelet.config.k8s.io/v1beta1\",\"kind\":\"KubeletConfiguration\",\"maxPods\":7}";
        store.set_applied_input(doc).unwrap();
        let mut record = local_record();
        record.input_sha256 = Some(sha256_hex(doc));
        store.set_effective_record(&record).unwrap();
        let running = last_running(&store).unwrap();
        assert_eq!(running.config.effective()["maxPods"], 7);
        // A document that does not match its recorded digest is not used.
        record.input_sha256 = Some(sha256_hex(b"other"));
        store.set_effective_record(&record).unwrap();
        assert!(last_running(&store).is_none());
    }
}
