//! The status of a `KubeletConfigRollout`, as the controller keeps it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ConfigMapKey, MAX_GENERATION};

/// Where a rollout stands.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Phase {
    /// Not yet started (no targets snapshot).
    #[default]
    Pending,
    /// Changing the nodes of the current batch, or waiting for their gates.
    Progressing,
    /// The batch is healthy; waiting out the soak.
    Soaking,
    /// Paused: by `spec.paused`, or by itself on failures (see the Paused condition).
    Paused,
    /// Held by the global stop switch.
    Halted,
    /// Outside every maintenance window.
    Waiting,
    /// Every target runs the config.
    Completed,
    /// Every target was changed, but some failed (see the Complete condition and
    /// `status.failures`): they run something else.
    CompletedWithFailures,
    /// Pointing the changed nodes back at their previous config.
    Undoing,
    /// Every changed node is back on its previous config.
    Undone,
    /// The spec cannot be followed (see the Valid condition).
    Invalid,
}

impl Phase {
    /// Every phase, in the order above.
    pub const ALL: [Phase; 11] = [
        Phase::Pending,
        Phase::Progressing,
        Phase::Soaking,
        Phase::Paused,
        Phase::Halted,
        Phase::Waiting,
        Phase::Completed,
        Phase::CompletedWithFailures,
        Phase::Undoing,
        Phase::Undone,
        Phase::Invalid,
    ];

    /// Whether a rollout in this phase has not finished with its nodes: another rollout
    /// that started later waits for them (see `plan::owner`).
    pub fn owns_its_nodes(self) -> bool {
        !matches!(
            self,
            Phase::Completed | Phase::CompletedWithFailures | Phase::Undone | Phase::Invalid
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Progressing => "Progressing",
            Phase::Soaking => "Soaking",
            Phase::Paused => "Paused",
            Phase::Halted => "Halted",
            Phase::Waiting => "Waiting",
            Phase::Completed => "Completed",
            Phase::CompletedWithFailures => "CompletedWithFailures",
            Phase::Undoing => "Undoing",
            Phase::Undone => "Undone",
            Phase::Invalid => "Invalid",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a node failed.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum FailureReason {
    /// The node fell back to its last-known-good config (crash loop, bad config).
    Fallback,
    /// The config did not turn active with KubeletConfigOK=True in time.
    ConfigNotActive,
    /// The Node did not turn Ready in time.
    NodeNotReady,
    /// The node's pods did not turn Ready in time.
    PodsNotReady,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Fallback => "Fallback",
            FailureReason::ConfigNotActive => "ConfigNotActive",
            FailureReason::NodeNotReady => "NodeNotReady",
            FailureReason::PodsNotReady => "PodsNotReady",
        }
    }
}

/// One failed node.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeFailure {
    pub node: String,
    pub reason: FailureReason,
    pub message: String,
    /// The batch the node was in (0: the canary when there is one).
    #[schemars(range(min = 0, max = u32::MAX))]
    pub batch: u32,
    pub time: String,
}

/// A condition of the rollout: `Valid`, `ConfigFound`, `Conflict`, `Superseded`, `Paused`, `Complete`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: String,
    /// The generation of the spec the condition was decided on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_GENERATION))]
    pub observed_generation: Option<i64>,
}

/// Nodes by state, for the current revision.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeCounts {
    #[schemars(range(min = 0, max = u32::MAX))]
    pub total: u32,
    /// Not yet changed.
    #[schemars(range(min = 0, max = u32::MAX))]
    pub pending: u32,
    /// Changed, gates not yet passed.
    #[schemars(range(min = 0, max = u32::MAX))]
    pub in_progress: u32,
    #[schemars(range(min = 0, max = u32::MAX))]
    pub done: u32,
    #[schemars(range(min = 0, max = u32::MAX))]
    pub failed: u32,
}

/// One revision: a config this rollout rolled (or is rolling).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRecord {
    #[schemars(range(min = 0, max = u32::MAX))]
    pub revision: u32,
    pub config: ConfigMapKey,
    /// The ConfigMap's uid when the revision started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_uid: Option<String>,
    pub started: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    /// How it ended: `Completed`, `Undone`, `Superseded`; none while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// When `undo` began pointing its nodes back (RFC 3339); none unless it is being (or
    /// was) undone. The `UndoStarted` Event is posted when this is set, once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_started: Option<String>,
    /// Nodes it changed, and how many of them failed.
    #[serde(default)]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub changed: u32,
    #[serde(default)]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub failed: u32,
    /// The `healthGates.noFallbackFor` in force (`"10m"`), and where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_fallback_for: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_fallback_source: Option<NoFallbackSource>,
}

/// Where a revision's `noFallbackFor` came from.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum NoFallbackSource {
    /// `spec.healthGates.noFallbackFor`.
    Spec,
    /// The config's own `configTrialDuration`.
    ConfigTrialDuration,
    /// The config sets no `configTrialDuration`: the default trial (10m).
    Default,
}

impl NoFallbackSource {
    pub fn as_str(self) -> &'static str {
        match self {
            NoFallbackSource::Spec => "Spec",
            NoFallbackSource::ConfigTrialDuration => "ConfigTrialDuration",
            NoFallbackSource::Default => "Default",
        }
    }
}

/// The controller's record of the rollout. Per-node progress lives on the nodes (the
/// assignment annotation and the rollout record annotation); this holds the plan.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<RolloutCondition>,
    /// The current revision (0: none started).
    #[serde(default)]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub revision: u32,
    /// The targets snapshot, batch by batch (the canary first when there is one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<Vec<String>>,
    /// Whether `batches[0]` is the canary.
    #[serde(default)]
    pub has_canary: bool,
    /// The batch being rolled (equal to the number of batches when all are done).
    #[serde(default)]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub current_batch: u32,
    /// `2/10` or `canary`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_text: Option<String>,
    /// When the current batch's soak ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak_until: Option<String>,
    #[serde(default)]
    pub counts: NodeCounts,
    /// The same counts per batch, in batch order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch_counts: Vec<NodeCounts>,
    /// Failed nodes of the current revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<NodeFailure>,
    /// Failures the operator has resumed past (`kubectl pivot rollout resume`).
    #[serde(default)]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub acknowledged_failures: u32,
    /// Revisions, oldest first (the newest 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<RevisionRecord>,
}
