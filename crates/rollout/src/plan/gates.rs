//! The per-node health gates: what a changed node must show, each within its bound.

use std::time::{Duration, SystemTime};

use kp_contract::node_config::ConfigRef;

use super::super::nodeview::{NodeRecord, NodeView};
use super::settings::Settings;
use kp_contract::rollout::FailureReason;

/// How soon a node whose pods are not Ready yet is looked at again.
pub const PODS_RECHECK: Duration = Duration::from_secs(2);

/// What the controller knows of a node's pods (it lists them only when asked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodsState {
    /// Not listed recently.
    Unknown,
    Ready,
    /// Some pod is not Ready: which.
    NotReady(String),
}

/// Where a changed node stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateResult {
    Passed,
    /// Still waiting; look again after this long at the latest. `wants_pods`: the pods
    /// must be listed to decide.
    Waiting {
        after: Duration,
        wants_pods: bool,
    },
    Failed {
        reason: FailureReason,
        message: String,
    },
}

/// When the node was changed, from its record (unparseable: now, so the bounds restart
/// rather than fail the node at once).
pub fn changed_at(record: &NodeRecord, now: SystemTime) -> SystemTime {
    kp_contract::time::parse(&record.at).unwrap_or(now)
}

fn wait_or_fail(
    elapsed: Duration,
    bound: Duration,
    reason: FailureReason,
    message: impl FnOnce() -> String,
) -> GateResult {
    if elapsed >= bound {
        GateResult::Failed {
            reason,
            message: message(),
        }
    } else {
        GateResult::Waiting {
            after: bound - elapsed,
            wants_pods: false,
        }
    }
}

/// What a node was changed to, and when.
pub struct Change<'a> {
    /// The config it was pointed at (None: its local config).
    pub target: Option<&'a ConfigRef>,
    /// The ConfigMap's uid, when known.
    pub uid: Option<&'a str>,
    pub since: SystemTime,
    /// All gates (a rollout); otherwise only the config one (an undo).
    pub full: bool,
}

/// The gates of a changed node.
pub fn evaluate(
    view: &NodeView,
    change: &Change,
    now: SystemTime,
    settings: &Settings,
    pods: &PodsState,
) -> GateResult {
    let Change {
        target,
        uid,
        since,
        full,
    } = *change;
    let elapsed = now.duration_since(since).unwrap_or_default();
    if !view.shows_active(target, uid) {
        return wait_or_fail(
            elapsed,
            settings.config_active_timeout,
            FailureReason::ConfigNotActive,
            || {
                format!(
                    "config not active with KubeletConfigOK=True after {}: {}",
                    humantime::format_duration(settings.config_active_timeout),
                    view.describe()
                )
            },
        );
    }
    if !full {
        return GateResult::Passed;
    }
    if !view.ready {
        return wait_or_fail(
            elapsed,
            settings.node_ready_timeout,
            FailureReason::NodeNotReady,
            || {
                format!(
                    "Node not Ready after {}",
                    humantime::format_duration(settings.node_ready_timeout)
                )
            },
        );
    }
    if elapsed < settings.no_fallback_for {
        return GateResult::Waiting {
            after: settings.no_fallback_for - elapsed,
            wants_pods: false,
        };
    }
    if !settings.pods_ready {
        return GateResult::Passed;
    }
    match pods {
        PodsState::Ready => GateResult::Passed,
        PodsState::Unknown => GateResult::Waiting {
            after: PODS_RECHECK,
            wants_pods: true,
        },
        PodsState::NotReady(which) => {
            match wait_or_fail(
                elapsed,
                settings.pods_ready_timeout,
                FailureReason::PodsNotReady,
                || {
                    format!(
                        "pods not Ready after {}: {which}",
                        humantime::format_duration(settings.pods_ready_timeout)
                    )
                },
            ) {
                GateResult::Waiting { after, .. } => GateResult::Waiting {
                    after: after.min(PODS_RECHECK),
                    wants_pods: true,
                },
                other => other,
            }
        }
    }
}
