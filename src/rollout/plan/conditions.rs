//! The rollout's conditions.

use super::super::types::{RolloutCondition, RolloutStatus};

/// Why a rollout does not change more nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseReason {
    /// `spec.paused`.
    Manual,
    /// The global stop switch.
    GlobalStop,
    /// A node fell back to its last-known-good config.
    Fallback,
    /// A canary node failed.
    CanaryFailed,
    /// More nodes failed than maxFailures.
    MaxFailures,
}

impl PauseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            PauseReason::Manual => "Manual",
            PauseReason::GlobalStop => "GlobalStop",
            PauseReason::Fallback => "Fallback",
            PauseReason::CanaryFailed => "CanaryFailed",
            PauseReason::MaxFailures => "MaxFailuresExceeded",
        }
    }

    /// Whether the rollout paused itself because nodes failed.
    pub fn is_failure(reason: &str) -> bool {
        [
            PauseReason::Fallback,
            PauseReason::CanaryFailed,
            PauseReason::MaxFailures,
        ]
        .iter()
        .any(|r| r.as_str() == reason)
    }
}

/// Sets a condition; its lastTransitionTime moves only when its status does.
pub fn set_condition(
    st: &mut RolloutStatus,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &str,
) {
    let status = if status { "True" } else { "False" };
    let message = crate::cluster::nodeconfig::bounded(message, 1024);
    match st.conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now.to_string();
            }
            c.status = status.to_string();
            c.reason = reason.to_string();
            c.message = message;
        }
        None => st.conditions.push(RolloutCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message,
            last_transition_time: now.to_string(),
        }),
    }
}
