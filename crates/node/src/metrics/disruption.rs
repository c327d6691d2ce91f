//! Counters of disruptive config changes: drains by result, evictions by
//! result, kubelet state files moved aside, changes held for a node
//! replacement. Registered after the supervisor's own families.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use kp_runtime::exposition::{register_one, register_series, slot};

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainResult {
    /// Every pod left; the kubelet was restarted and found healthy.
    Completed,
    /// Pods were still there at `--drain-timeout` (nothing forced).
    Timeout,
    /// The API refused the drain (for example 403) or the node vanished.
    Failed,
}

impl DrainResult {
    pub const ALL: [DrainResult; 3] = [
        DrainResult::Completed,
        DrainResult::Timeout,
        DrainResult::Failed,
    ];
    pub fn label(self) -> &'static str {
        match self {
            DrainResult::Completed => "completed",
            DrainResult::Timeout => "timeout",
            DrainResult::Failed => "failed",
        }
    }
}

/// The answer to one eviction request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionResult {
    /// Accepted: the pod is on its way out.
    Evicted,
    /// 429: a PodDisruptionBudget allows no disruption now (retried).
    Blocked,
    /// 404: the pod was gone already.
    Gone,
    /// Any other error (retried with backoff, or ends the drain on 403).
    Failed,
}

impl EvictionResult {
    pub const ALL: [EvictionResult; 4] = [
        EvictionResult::Evicted,
        EvictionResult::Blocked,
        EvictionResult::Gone,
        EvictionResult::Failed,
    ];
    pub fn label(self) -> &'static str {
        match self {
            EvictionResult::Evicted => "evicted",
            EvictionResult::Blocked => "blocked",
            EvictionResult::Gone => "gone",
            EvictionResult::Failed => "failed",
        }
    }
}

/// Kubelet state files kubelet-pivot moves aside.
pub const STATE_FILES: [&str; 2] = ["cpu_manager_state", "memory_manager_state"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FileLabels {
    file: &'static str,
}

fn results<const N: usize>(labels: [&'static str; N]) -> [ResultLabels; N] {
    labels.map(|result| ResultLabels { result })
}

#[derive(Debug)]
pub struct DisruptionMetrics {
    drains: [Counter; DrainResult::ALL.len()],
    evictions: [Counter; EvictionResult::ALL.len()],
    moved: [Counter; STATE_FILES.len()],
    held_total: Counter,
    held: Gauge,
    draining: Gauge,
}

impl DisruptionMetrics {
    /// Registers these families in `registry`.
    pub fn register(registry: &mut Registry) -> DisruptionMetrics {
        let drains = register_series(
            registry,
            "kubelet_pivot_drains",
            "Drains for disruptive kubelet config changes, by result",
            results(DrainResult::ALL.map(DrainResult::label)),
        );
        let evictions = register_series(
            registry,
            "kubelet_pivot_evictions",
            "Eviction requests of drains, by answer (blocked = 429 from a PodDisruptionBudget)",
            results(EvictionResult::ALL.map(EvictionResult::label)),
        );
        let moved = register_series(
            registry,
            "kubelet_pivot_state_files_moved",
            "Kubelet resource-manager checkpoints moved aside before a start with a config they contradict",
            STATE_FILES.map(|file| FileLabels { file }),
        );
        let held_total: Counter = register_one(
            registry,
            "kubelet_pivot_held_changes",
            "Config changes held because they need a new node (RollRequired)",
        );
        let held: Gauge = register_one(
            registry,
            "kubelet_pivot_change_held",
            "1 while a config change is held (RollRequired)",
        );
        let draining: Gauge = register_one(
            registry,
            "kubelet_pivot_draining",
            "1 while this node is being drained for a config change",
        );
        DisruptionMetrics {
            drains,
            evictions,
            moved,
            held_total,
            held,
            draining,
        }
    }

    pub fn drain(&self, result: DrainResult) {
        self.drains[slot(&DrainResult::ALL, result)].inc();
    }
    pub fn eviction(&self, result: EvictionResult) {
        self.evictions[slot(&EvictionResult::ALL, result)].inc();
    }
    /// A state file moved aside (`name` as in [`STATE_FILES`]).
    pub fn state_file_moved(&self, name: &str) {
        if let Some(i) = STATE_FILES.iter().position(|f| *f == name) {
            self.moved[i].inc();
        }
    }
    /// A change is held (counted once per held change) or no longer held.
    pub fn set_held(&self, held: bool, newly: bool) {
        if held && newly {
            self.held_total.inc();
        }
        self.held.set(i64::from(held));
    }
    pub fn set_draining(&self, draining: bool) {
        self.draining.set(i64::from(draining));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kp_runtime::exposition::Format;

    #[test]
    fn renders_every_family_with_counts() {
        let mut registry = Registry::default();
        let m = DisruptionMetrics::register(&mut registry);
        m.drain(DrainResult::Timeout);
        m.eviction(EvictionResult::Blocked);
        m.eviction(EvictionResult::Blocked);
        m.state_file_moved("cpu_manager_state");
        m.state_file_moved("elsewhere");
        m.set_held(true, true);
        let out = Format::Text.encode(&[&registry]).unwrap();
        assert!(out.contains("kubelet_pivot_drains_total{result=\"timeout\"} 1"));
        assert!(out.contains("kubelet_pivot_evictions_total{result=\"blocked\"} 2"));
        assert!(out.contains("kubelet_pivot_state_files_moved_total{file=\"cpu_manager_state\"} 1"));
        assert!(out.contains("kubelet_pivot_held_changes_total 1"));
        assert!(out.contains("kubelet_pivot_change_held 1"));
        assert!(out.contains("kubelet_pivot_draining 0"));
    }
}
