//! The rollout controller's Prometheus metrics, kept with the Prometheus project's client
//! library (`prometheus-client`) and rendered by [`serve`](super::serve) in the format the
//! scraper negotiated (OpenMetrics or the text format 0.0.4, see [`Format`]):
//!
//! - `kubelet_pivot_rollouts{phase}`: rollouts by phase (every phase, 0 included);
//! - `kubelet_pivot_rollout_nodes{rollout,state}`: each rollout's targets by state
//!   (`pending`, `in_progress`, `done`, `failed`) as its status counts them;
//! - `kubelet_pivot_rollout_reconciles_total`: reconciles run;
//! - `kubelet_pivot_rollout_reconcile_errors_total{error}`: of which failed (`api`,
//!   `not_leader`);
//! - `kubelet_pivot_rollout_reconcile_duration_seconds`: their durations (histogram);
//! - `kubelet_pivot_rollout_controller_leader`: 1 while this replica leads, else 0;
//! - `kubelet_pivot_rollout_paused{rollout,reason}`: 1 for each paused or halted rollout,
//!   with its Paused condition's reason (`Manual`, `GlobalStop`, `Fallback`,
//!   `CanaryFailed`, `MaxFailuresExceeded`; `Other` for any other);
//! - `kubelet_pivot_global_stop`: 1 while the global stop switch is on, else 0;
//! - `kubelet_pivot_global_stop_since_timestamp_seconds`: the switch's creation time while
//!   it is on, else 0.
//!
//! A rollout's phase and counts are what the controller last saw or wrote; a rollout that
//! is no longer in the cache is dropped from both at the next update.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::plan::conditions::{ConditionType, PauseReason};
use kp_contract::rollout::{NodeCounts, Phase, RolloutCondition};
use kp_runtime::exposition::Format;

/// The reasons of a Paused condition the metrics name; any other is `Other`.
const PAUSE_REASONS: [PauseReason; 5] = [
    PauseReason::Manual,
    PauseReason::GlobalStop,
    PauseReason::Fallback,
    PauseReason::CanaryFailed,
    PauseReason::MaxFailures,
];
/// The label of a Paused reason not in [`PAUSE_REASONS`].
const OTHER_REASON: &str = "Other";

/// The reason of `conditions`' Paused condition while it is True, as a bounded label value.
pub fn paused_reason(conditions: &[RolloutCondition]) -> Option<&'static str> {
    let paused = conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Paused.as_str() && c.status == "True")?;
    Some(
        PAUSE_REASONS
            .iter()
            .map(|r| r.as_str())
            .find(|r| *r == paused.reason)
            .unwrap_or(OTHER_REASON),
    )
}

/// Reconcile duration buckets: 1 ms doubling to about 33 s.
const DURATION_FIRST_BUCKET: f64 = 0.001;
const DURATION_BUCKETS: u16 = 16;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

/// The state of a rollout's target, as `status.counts` has it (the label value is the
/// variant's name).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum NodeState {
    pending,
    in_progress,
    done,
    failed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    rollout: String,
    state: NodeState,
}

/// Why a reconcile failed (the label value is the variant's name).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ErrorKind {
    /// An API request failed.
    api,
    /// This replica no longer leads.
    not_leader,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PausedLabels {
    rollout: String,
    reason: &'static str,
}

/// What the metrics remember of a rollout between updates.
#[derive(Clone, Debug)]
struct Seen {
    phase: Phase,
    counts: NodeCounts,
    paused: Option<&'static str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    error: ErrorKind,
}

/// The controller's metrics (one per process).
pub struct ControllerMetrics {
    registry: Registry,
    rollouts: Family<PhaseLabels, Gauge>,
    nodes: Family<NodeLabels, Gauge>,
    reconciles: Counter,
    errors: Family<ErrorLabels, Counter>,
    durations: Histogram,
    leader: Gauge,
    paused: Family<PausedLabels, Gauge>,
    global_stop: Gauge,
    global_stop_since: Gauge,
    /// Each known rollout's phase, counts and pause, as last seen.
    known: Mutex<BTreeMap<String, Seen>>,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        ControllerMetrics::new()
    }
}

impl ControllerMetrics {
    pub fn new() -> ControllerMetrics {
        let mut registry = Registry::default();
        let rollouts = Family::<PhaseLabels, Gauge>::default();
        let nodes = Family::<NodeLabels, Gauge>::default();
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let durations = Histogram::new(exponential_buckets(
            DURATION_FIRST_BUCKET,
            2.0,
            DURATION_BUCKETS,
        ));
        let leader = Gauge::default();
        let paused = Family::<PausedLabels, Gauge>::default();
        let (global_stop, global_stop_since) = (Gauge::default(), Gauge::default());
        registry.register(
            "kubelet_pivot_rollouts",
            "Rollouts by phase",
            rollouts.clone(),
        );
        registry.register(
            "kubelet_pivot_rollout_nodes",
            "Targets of each rollout by state",
            nodes.clone(),
        );
        registry.register(
            "kubelet_pivot_rollout_reconciles",
            "Reconciles of rollouts run",
            reconciles.clone(),
        );
        registry.register(
            "kubelet_pivot_rollout_reconcile_errors",
            "Reconciles of rollouts that failed, by error",
            errors.clone(),
        );
        registry.register(
            "kubelet_pivot_rollout_reconcile_duration_seconds",
            "How long reconciles of rollouts took",
            durations.clone(),
        );
        registry.register(
            "kubelet_pivot_rollout_controller_leader",
            "1 while this replica leads the rollout controllers, else 0",
            leader.clone(),
        );
        registry.register(
            "kubelet_pivot_rollout_paused",
            "1 for each paused or halted rollout, by its Paused condition's reason",
            paused.clone(),
        );
        registry.register(
            "kubelet_pivot_global_stop",
            "1 while the global stop switch is on (as the leader sees it), else 0",
            global_stop.clone(),
        );
        registry.register(
            "kubelet_pivot_global_stop_since_timestamp_seconds",
            "Unix time the global stop switch was turned on (its ConfigMap's creation) while it is on, else 0",
            global_stop_since.clone(),
        );
        let metrics = ControllerMetrics {
            registry,
            rollouts,
            nodes,
            reconciles,
            errors,
            durations,
            leader,
            paused,
            global_stop,
            global_stop_since,
            known: Mutex::new(BTreeMap::new()),
        };
        metrics.publish_phases(&BTreeMap::new());
        // Both error counters from the first scrape (0), so that rates see the first error.
        for error in [ErrorKind::api, ErrorKind::not_leader] {
            metrics
                .errors
                .get_or_create(&ErrorLabels { error })
                .inc_by(0);
        }
        metrics
    }

    /// One reconcile, how long it took and how it ended.
    pub fn reconciled(&self, took: Duration, error: Option<ErrorKind>) {
        self.reconciles.inc();
        self.durations.observe(took.as_secs_f64());
        if let Some(error) = error {
            self.errors.get_or_create(&ErrorLabels { error }).inc();
        }
    }

    pub fn set_leader(&self, leads: bool) {
        self.leader.set(i64::from(leads));
    }

    /// The global stop switch is on since `since` (Unix seconds), or off (`None`).
    pub fn global_stop(&self, since: Option<i64>) {
        self.global_stop.set(i64::from(since.is_some()));
        self.global_stop_since.set(since.unwrap_or(0));
    }

    /// `name` is in `phase` with `counts`, paused for the reason `paused` (see
    /// [`paused_reason`]) or not; rollouts not in `existing` are forgotten.
    pub fn rollout(
        &self,
        name: &str,
        phase: Phase,
        counts: &NodeCounts,
        paused: Option<&'static str>,
        existing: &BTreeSet<String>,
    ) {
        let Ok(mut known) = self.known.lock() else {
            return;
        };
        let before = known.insert(
            name.to_string(),
            Seen {
                phase,
                counts: counts.clone(),
                paused,
            },
        );
        if let Some(old) = before.and_then(|b| b.paused).filter(|r| Some(*r) != paused) {
            self.paused.remove(&PausedLabels {
                rollout: name.to_string(),
                reason: old,
            });
        }
        let gone: Vec<String> = known
            .keys()
            .filter(|k| !existing.contains(*k))
            .cloned()
            .collect();
        for rollout in gone {
            if let Some(reason) = known.remove(&rollout).and_then(|s| s.paused) {
                self.paused.remove(&PausedLabels {
                    rollout: rollout.clone(),
                    reason,
                });
            }
            for state in [
                NodeState::pending,
                NodeState::in_progress,
                NodeState::done,
                NodeState::failed,
            ] {
                self.nodes.remove(&NodeLabels {
                    rollout: rollout.clone(),
                    state,
                });
            }
        }
        for (rollout, seen) in known.iter() {
            let c = &seen.counts;
            if let Some(reason) = seen.paused {
                self.paused
                    .get_or_create(&PausedLabels {
                        rollout: rollout.clone(),
                        reason,
                    })
                    .set(1);
            }
            for (state, n) in [
                (NodeState::pending, c.pending),
                (NodeState::in_progress, c.in_progress),
                (NodeState::done, c.done),
                (NodeState::failed, c.failed),
            ] {
                self.nodes
                    .get_or_create(&NodeLabels {
                        rollout: rollout.clone(),
                        state,
                    })
                    .set(i64::from(n));
            }
        }
        self.publish_phases(&known);
    }

    fn publish_phases(&self, known: &BTreeMap<String, Seen>) {
        for phase in Phase::ALL {
            let n = known.values().filter(|s| s.phase == phase).count();
            self.rollouts
                .get_or_create(&PhaseLabels {
                    phase: phase.as_str(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// The text of every metric in `format`.
    pub fn render(&self, format: Format) -> Result<String, std::fmt::Error> {
        format.encode(&[&self.registry])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(done: u32, failed: u32) -> NodeCounts {
        NodeCounts {
            total: done + failed,
            done,
            failed,
            ..NodeCounts::default()
        }
    }

    #[test]
    fn phases_nodes_reconciles_and_leadership_render() {
        let m = ControllerMetrics::new();
        let text = m.render(Format::OpenMetrics).unwrap();
        assert!(
            text.contains("kubelet_pivot_rollouts{phase=\"Completed\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("kubelet_pivot_rollout_controller_leader 0"),
            "{text}"
        );
        assert!(
            text.contains("kubelet_pivot_rollout_reconcile_errors_total{error=\"not_leader\"} 0"),
            "{text}"
        );
        let both: BTreeSet<String> = ["r1".to_string(), "r2".to_string()].into();
        m.rollout("r1", Phase::Completed, &counts(3, 0), None, &both);
        m.rollout(
            "r2",
            Phase::Paused,
            &counts(1, 1),
            Some("CanaryFailed"),
            &both,
        );
        m.global_stop(Some(1_700_000_000));
        m.reconciled(Duration::from_millis(3), None);
        m.reconciled(Duration::from_millis(3), Some(ErrorKind::api));
        m.set_leader(true);
        let text = m.render(Format::OpenMetrics).unwrap();
        for line in [
            "kubelet_pivot_rollouts{phase=\"Completed\"} 1",
            "kubelet_pivot_rollouts{phase=\"Paused\"} 1",
            "kubelet_pivot_rollout_paused{rollout=\"r2\",reason=\"CanaryFailed\"} 1",
            "kubelet_pivot_global_stop 1",
            "kubelet_pivot_global_stop_since_timestamp_seconds 1700000000",
            "kubelet_pivot_rollout_nodes{rollout=\"r2\",state=\"failed\"} 1",
            "kubelet_pivot_rollout_nodes{rollout=\"r1\",state=\"done\"} 3",
            "kubelet_pivot_rollout_reconciles_total 2",
            "kubelet_pivot_rollout_reconcile_errors_total{error=\"api\"} 1",
            "kubelet_pivot_rollout_reconcile_duration_seconds_count 2",
            "kubelet_pivot_rollout_controller_leader 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        // r2 deleted: gone from both at the next update.
        let one: BTreeSet<String> = ["r1".to_string()].into();
        m.rollout("r1", Phase::Undoing, &counts(3, 0), None, &one);
        m.global_stop(None);
        let text = m.render(Format::OpenMetrics).unwrap();
        assert!(
            text.contains("kubelet_pivot_rollouts{phase=\"Completed\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("kubelet_pivot_rollouts{phase=\"Undoing\"} 1"),
            "{text}"
        );
        assert!(!text.contains("rollout=\"r2\""), "{text}");
        assert!(text.contains("kubelet_pivot_global_stop 0"), "{text}");
        assert!(
            text.contains("kubelet_pivot_global_stop_since_timestamp_seconds 0"),
            "{text}"
        );
    }

    #[test]
    fn a_pause_is_named_by_its_reason_and_forgotten_when_it_ends() {
        let cond = |reason: &str, status: &str| RolloutCondition {
            type_: "Paused".into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: String::new(),
            observed_generation: None,
        };
        assert_eq!(paused_reason(&[cond("Fallback", "True")]), Some("Fallback"));
        assert_eq!(paused_reason(&[cond("Fallback", "False")]), None);
        assert_eq!(paused_reason(&[cond("x\"y", "True")]), Some("Other"));
        let m = ControllerMetrics::new();
        let one: BTreeSet<String> = ["r".to_string()].into();
        m.rollout("r", Phase::Paused, &counts(0, 1), Some("Fallback"), &one);
        m.rollout("r", Phase::Paused, &counts(0, 1), Some("Manual"), &one);
        let text = m.render(Format::Text).unwrap();
        assert!(
            text.contains("kubelet_pivot_rollout_paused{rollout=\"r\",reason=\"Manual\"} 1"),
            "{text}"
        );
        assert!(!text.contains("reason=\"Fallback\""), "{text}");
        m.rollout("r", Phase::Progressing, &counts(0, 1), None, &one);
        let text = m.render(Format::Text).unwrap();
        assert!(!text.contains("kubelet_pivot_rollout_paused{"), "{text}");
    }
}
