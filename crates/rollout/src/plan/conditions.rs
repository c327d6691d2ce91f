//! The rollout's conditions.

use kp_contract::rollout::{RolloutCondition, RolloutStatus};

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

/// The conditions the controller sets (and the only ones the CRD's schema names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionType {
    /// The spec can be followed (False: `Invalid` phase, or an object that cannot be read).
    Valid,
    /// The ConfigMap of a new revision exists.
    ConfigFound,
    /// Nodes of the current batch are owned by an older, unfinished rollout.
    Conflict,
    /// A newer rollout took targets of this one.
    Superseded,
    /// The rollout changes no more nodes (reason: a [`PauseReason`]).
    Paused,
    /// Every target runs the config (False with `NodesFailed` when some do not).
    Complete,
}

impl ConditionType {
    pub const ALL: [ConditionType; 6] = [
        ConditionType::Valid,
        ConditionType::ConfigFound,
        ConditionType::Conflict,
        ConditionType::Superseded,
        ConditionType::Paused,
        ConditionType::Complete,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionType::Valid => "Valid",
            ConditionType::ConfigFound => "ConfigFound",
            ConditionType::Conflict => "Conflict",
            ConditionType::Superseded => "Superseded",
            ConditionType::Paused => "Paused",
            ConditionType::Complete => "Complete",
        }
    }
}

/// Sets a condition; its lastTransitionTime moves only when its status does. Its
/// observedGeneration is the status's: the generation of the spec it was decided on.
pub fn set_condition(
    st: &mut RolloutStatus,
    type_: ConditionType,
    status: bool,
    reason: &str,
    message: &str,
    now: &str,
) {
    let status = if status { "True" } else { "False" };
    let message = kp_contract::node_config::bounded(message, 1024);
    let generation = st.observed_generation;
    let type_ = type_.as_str();
    match st.conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now.to_string();
            }
            c.status = status.to_string();
            c.reason = reason.to_string();
            c.message = message;
            c.observed_generation = generation;
        }
        None => st.conditions.push(RolloutCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message,
            last_transition_time: now.to_string(),
            observed_generation: generation,
        }),
    }
}
