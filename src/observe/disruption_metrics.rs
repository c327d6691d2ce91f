//! Counters of disruptive config changes: drains by result, evictions by
//! result, kubelet state files moved aside, changes held for a node
//! replacement. Rendered after the supervisor's own families.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

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

#[derive(Debug, Default)]
pub struct DisruptionMetrics {
    drains: [AtomicU64; 3],
    evictions: [AtomicU64; 4],
    moved: [AtomicU64; 2],
    held_total: AtomicU64,
    held: AtomicU64,
    draining: AtomicU64,
}

fn slot<T: PartialEq + Copy>(all: &[T], x: T) -> usize {
    all.iter().position(|&y| y == x).unwrap_or(0)
}

impl DisruptionMetrics {
    pub fn drain(&self, result: DrainResult) {
        self.drains[slot(&DrainResult::ALL, result)].fetch_add(1, Ordering::Relaxed);
    }
    pub fn eviction(&self, result: EvictionResult) {
        self.evictions[slot(&EvictionResult::ALL, result)].fetch_add(1, Ordering::Relaxed);
    }
    /// A state file moved aside (`name` as in [`STATE_FILES`]).
    pub fn state_file_moved(&self, name: &str) {
        if let Some(i) = STATE_FILES.iter().position(|f| *f == name) {
            self.moved[i].fetch_add(1, Ordering::Relaxed);
        }
    }
    /// A change is held (counted once per held change) or no longer held.
    pub fn set_held(&self, held: bool, newly: bool) {
        if held && newly {
            self.held_total.fetch_add(1, Ordering::Relaxed);
        }
        self.held.store(u64::from(held), Ordering::Relaxed);
    }
    pub fn set_draining(&self, draining: bool) {
        self.draining.store(u64::from(draining), Ordering::Relaxed);
    }

    /// The exposition text of these families.
    pub fn render(&self, out: &mut String) {
        let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, u64)>| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, value) in samples {
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {value}");
                } else {
                    let _ = writeln!(out, "{name}{{{labels}}} {value}");
                }
            }
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        family(
            "kubelet_pivot_drains_total",
            "counter",
            "Drains for disruptive kubelet config changes, by result.",
            DrainResult::ALL
                .iter()
                .zip(&self.drains)
                .map(|(r, v)| (format!("result=\"{}\"", r.label()), load(v)))
                .collect(),
        );
        family(
            "kubelet_pivot_evictions_total",
            "counter",
            "Eviction requests of drains, by answer (blocked = 429 from a PodDisruptionBudget).",
            EvictionResult::ALL
                .iter()
                .zip(&self.evictions)
                .map(|(r, v)| (format!("result=\"{}\"", r.label()), load(v)))
                .collect(),
        );
        family(
            "kubelet_pivot_state_files_moved_total",
            "counter",
            "Kubelet resource-manager checkpoints moved aside before a start with a config they contradict.",
            STATE_FILES
                .iter()
                .zip(&self.moved)
                .map(|(f, v)| (format!("file=\"{f}\""), load(v)))
                .collect(),
        );
        family(
            "kubelet_pivot_held_changes_total",
            "counter",
            "Config changes held because they need a new node (RollRequired).",
            vec![(String::new(), load(&self.held_total))],
        );
        family(
            "kubelet_pivot_change_held",
            "gauge",
            "1 while a config change is held (RollRequired).",
            vec![(String::new(), load(&self.held))],
        );
        family(
            "kubelet_pivot_draining",
            "gauge",
            "1 while this node is being drained for a config change.",
            vec![(String::new(), load(&self.draining))],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_counts() {
        let m = DisruptionMetrics::default();
        m.drain(DrainResult::Timeout);
        m.eviction(EvictionResult::Blocked);
        m.eviction(EvictionResult::Blocked);
        m.state_file_moved("cpu_manager_state");
        m.state_file_moved("elsewhere");
        m.set_held(true, true);
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("kubelet_pivot_drains_total{result=\"timeout\"} 1"));
        assert!(out.contains("kubelet_pivot_evictions_total{result=\"blocked\"} 2"));
        assert!(out.contains("kubelet_pivot_state_files_moved_total{file=\"cpu_manager_state\"} 1"));
        assert!(out.contains("kubelet_pivot_held_changes_total 1"));
        assert!(out.contains("kubelet_pivot_change_held 1"));
        assert!(out.contains("kubelet_pivot_draining 0"));
    }
}
