//! The newest copy of each rollout this controller wrote: the reflector's cache may lag
//! behind our own status writes, and a plan made from an older copy would redo them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::ResourceExt;

use kp_contract::rollout::KubeletConfigRollout;

/// The rollouts as we last wrote them, by name.
#[derive(Debug, Default)]
pub(super) struct LatestWrites {
    by_name: Mutex<HashMap<String, Arc<KubeletConfigRollout>>>,
}

impl LatestWrites {
    /// Records the copy the API server answered a status write with.
    pub(super) fn wrote(&self, written: KubeletConfigRollout) {
        if let Ok(mut latest) = self.by_name.lock() {
            latest.insert(written.name_any(), Arc::new(written));
        }
    }

    /// Our last write of the rollout named `name`, if it is the same object (`uid`): one
    /// deleted and created again is another rollout.
    pub(super) fn ours(&self, name: &str, uid: Option<&str>) -> Option<Arc<KubeletConfigRollout>> {
        self.by_name
            .lock()
            .ok()
            .and_then(|l| l.get(name).cloned())
            .filter(|w| w.metadata.uid.as_deref() == uid)
    }

    /// The cache's copy, with our newer status if we wrote one since (see [`newest`]).
    pub(super) fn newest(&self, cached: Arc<KubeletConfigRollout>) -> Arc<KubeletConfigRollout> {
        let ours = self
            .by_name
            .lock()
            .ok()
            .and_then(|m| m.get(&cached.name_any()).cloned());
        newest(cached, ours.as_deref())
    }

    /// Our last write of the rollout if it is the same object, else the cache's copy.
    pub(super) fn ours_or(&self, cached: Arc<KubeletConfigRollout>) -> Arc<KubeletConfigRollout> {
        self.ours(&cached.name_any(), cached.metadata.uid.as_deref())
            .unwrap_or(cached)
    }
}

/// A resourceVersion as a number (they are opaque, but the API server's are integers).
fn version(o: &KubeletConfigRollout) -> Option<u64> {
    o.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
}

/// The cache's copy, with the status (and resourceVersion) of `ours` when ours is newer:
/// the spec is always the cache's, since it may have changed after our write.
fn newest(
    cached: Arc<KubeletConfigRollout>,
    ours: Option<&KubeletConfigRollout>,
) -> Arc<KubeletConfigRollout> {
    match ours {
        Some(ours) if version(ours) > version(&cached) => {
            let mut merged = (*cached).clone();
            merged.status = ours.status.clone();
            merged.metadata.resource_version = ours.metadata.resource_version.clone();
            Arc::new(merged)
        }
        _ => cached,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kp_contract::rollout::{Phase, RolloutStatus};

    fn rollout(rv: &str, uid: &str, batch: u32, phase: Phase) -> KubeletConfigRollout {
        let mut r: KubeletConfigRollout = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubelet-pivot.io/v1alpha1",
            "kind": "KubeletConfigRollout",
            "metadata": {"name": "r1", "uid": uid, "resourceVersion": rv},
            "spec": {"config": {"namespace": "kc", "name": "cfg"}, "canary": batch},
        }))
        .expect("a rollout");
        r.status = Some(RolloutStatus {
            phase,
            ..RolloutStatus::default()
        });
        r
    }

    #[test]
    fn a_newer_write_of_ours_gives_its_status_and_the_caches_spec() {
        let latest = LatestWrites::default();
        latest.wrote(rollout("12", "u1", 1, Phase::Soaking));
        // The cache lags: an older copy, but with a spec changed since.
        let cached = Arc::new(rollout("10", "u1", 3, Phase::Progressing));
        let merged = latest.newest(cached);
        assert_eq!(merged.spec.canary, 3, "the spec is the cache's");
        assert_eq!(
            merged.status.as_ref().map(|s| s.phase),
            Some(Phase::Soaking)
        );
        assert_eq!(merged.metadata.resource_version.as_deref(), Some("12"));
    }

    #[test]
    fn the_cache_wins_once_it_caught_up() {
        let latest = LatestWrites::default();
        latest.wrote(rollout("12", "u1", 1, Phase::Soaking));
        for rv in ["12", "13"] {
            let cached = Arc::new(rollout(rv, "u1", 1, Phase::Completed));
            assert!(Arc::ptr_eq(&latest.newest(cached.clone()), &cached), "{rv}");
        }
        let none = LatestWrites::default();
        let cached = Arc::new(rollout("1", "u1", 1, Phase::Pending));
        assert!(Arc::ptr_eq(&none.newest(cached.clone()), &cached));
    }

    #[test]
    fn ours_is_of_the_same_object_only() {
        let latest = LatestWrites::default();
        latest.wrote(rollout("12", "u1", 1, Phase::Soaking));
        assert!(latest.ours("r1", Some("u1")).is_some());
        assert!(latest.ours("r1", Some("u2")).is_none(), "created again");
        assert!(latest.ours("r2", Some("u1")).is_none());
        let recreated = Arc::new(rollout("5", "u2", 1, Phase::Pending));
        assert!(Arc::ptr_eq(&latest.ours_or(recreated.clone()), &recreated));
        let same = Arc::new(rollout("5", "u1", 1, Phase::Pending));
        assert_eq!(
            latest.ours_or(same).status.as_ref().map(|s| s.phase),
            Some(Phase::Soaking)
        );
    }
}
