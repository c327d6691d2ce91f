//! The `KubeletConfigRollout` custom resource (kubelet-pivot.io/v1alpha1): its spec as the
//! operator writes it and its status as the controller keeps it. The CRD in
//! `manifests/40-rollout-crd.yaml` is generated from these types (`kubelet-pivot rollout crd`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// The API group of the resource.
pub const GROUP: &str = "kubelet-pivot.io";
/// The label that spreads batches and bounds unavailability by default.
pub const DEFAULT_TOPOLOGY_KEY: &str = "topology.kubernetes.io/zone";

/// A staged rollout of one kubelet config (a ConfigMap key) to the nodes a selector picks:
/// a canary, then batches, each gated on the nodes' health and followed by a soak.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kubelet-pivot.io",
    version = "v1alpha1",
    kind = "KubeletConfigRollout",
    plural = "kubeletconfigrollouts",
    singular = "kubeletconfigrollout",
    shortname = "kcr",
    status = "RolloutStatus",
    doc = "A staged rollout of a kubelet config across the nodes a selector picks",
    label("app.kubernetes.io/part-of", "kubelet-pivot"),
    printcolumn = r#"{"name": "Config", "type": "string", "jsonPath": ".spec.config.name"}"#,
    printcolumn = r#"{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}"#,
    printcolumn = r#"{"name": "Batch", "type": "string", "jsonPath": ".status.batchText"}"#,
    printcolumn = r#"{"name": "Done", "type": "integer", "jsonPath": ".status.counts.done"}"#,
    printcolumn = r#"{"name": "Failed", "type": "integer", "jsonPath": ".status.counts.failed"}"#,
    printcolumn = r#"{"name": "Total", "type": "integer", "jsonPath": ".status.counts.total"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// The config to roll out: a key of a ConfigMap.
    pub config: ConfigMapKey,
    /// Labels a node must carry to be a target (all of them). Empty: every node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Nodes rolled first, alone; any failure among them pauses the rollout.
    #[serde(default = "default_canary")]
    #[schemars(range(min = 0))]
    pub canary: u32,
    /// Nodes per batch after the canary: a count (`5`) or a share of the targets (`"10%"`).
    #[serde(default = "default_batch")]
    pub batch: IntOrPercent,
    /// At most this many nodes of one topology domain are unavailable (being changed, not
    /// Ready, cordoned or draining) at a time.
    #[serde(default)]
    pub max_unavailable: MaxUnavailable,
    /// How long a healthy batch waits before the next starts (`"10m"`, `"0s"`).
    #[serde(default = "default_soak")]
    pub soak: String,
    /// What a changed node must show, and for how long it may take.
    #[serde(default)]
    pub health_gates: HealthGates,
    /// Failed nodes tolerated after the canary; one more pauses the rollout.
    #[serde(default)]
    pub max_failures: u32,
    /// Stop changing nodes (nodes already changed are still watched).
    #[serde(default)]
    pub paused: bool,
    /// When nodes may be changed (UTC). Empty: any time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maintenance_windows: Vec<MaintenanceWindow>,
    /// Point every node this revision changed back at the config it had before.
    #[serde(default)]
    pub undo: bool,
}

fn default_canary() -> u32 {
    1
}

fn default_batch() -> IntOrPercent {
    IntOrPercent::Percent("10%".to_string())
}

fn default_soak() -> String {
    "0s".to_string()
}

/// A ConfigMap key, as the node assignment annotation names it (`NAMESPACE/NAME:KEY`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKey {
    pub namespace: String,
    pub name: String,
    #[serde(default = "default_key")]
    pub key: String,
}

fn default_key() -> String {
    crate::cluster::nodeconfig::DEFAULT_KEY.to_string()
}

impl ConfigMapKey {
    /// The node assignment annotation's value for this key.
    pub fn annotation(&self) -> String {
        format!("{}/{}:{}", self.namespace, self.name, self.key)
    }
}

impl std::fmt::Display for ConfigMapKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.annotation())
    }
}

/// A count or a percentage (`"25%"`), as Kubernetes' IntOrString.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum IntOrPercent {
    Int(u32),
    Percent(String),
}

impl JsonSchema for IntOrPercent {
    fn schema_name() -> Cow<'static, str> {
        "IntOrPercent".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "x-kubernetes-int-or-string": true,
        })
    }
}

impl IntOrPercent {
    fn percent(text: &str) -> Result<usize, String> {
        let digits = text
            .trim()
            .strip_suffix('%')
            .ok_or_else(|| format!("{text:?} is neither a count nor a percentage like \"10%\""))?;
        let pct: usize = digits
            .parse()
            .map_err(|_| format!("{text:?} is not a percentage like \"10%\""))?;
        if pct == 0 || pct > 100 {
            return Err(format!("{text:?} must be between 1% and 100%"));
        }
        Ok(pct)
    }

    /// The count out of `total`: a percentage rounds up (a batch of 10% of 5 nodes is 1).
    pub fn resolve(&self, total: usize) -> Result<usize, String> {
        match self {
            IntOrPercent::Int(n) => Ok(*n as usize),
            IntOrPercent::Percent(text) => Ok((total * Self::percent(text)?).div_ceil(100)),
        }
    }

    /// The count out of `total`, a percentage rounded down but at least 1 (as
    /// maxUnavailable rounds in Kubernetes, with a floor so that progress is possible).
    pub fn resolve_down(&self, total: usize) -> Result<usize, String> {
        match self {
            IntOrPercent::Int(n) => Ok(*n as usize),
            IntOrPercent::Percent(text) => Ok((total * Self::percent(text)? / 100).max(1)),
        }
    }
}

/// How many nodes of one topology domain may be unavailable at once.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaxUnavailable {
    /// The node label whose values are the domains (nodes without it share one domain).
    #[serde(default = "default_topology_key")]
    pub topology_key: String,
    /// A count, or a share of the domain's target nodes (rounded down, at least 1).
    #[serde(default = "default_max_unavailable")]
    pub value: IntOrPercent,
}

fn default_topology_key() -> String {
    DEFAULT_TOPOLOGY_KEY.to_string()
}

fn default_max_unavailable() -> IntOrPercent {
    IntOrPercent::Int(1)
}

impl Default for MaxUnavailable {
    fn default() -> Self {
        MaxUnavailable {
            topology_key: default_topology_key(),
            value: default_max_unavailable(),
        }
    }
}

/// The per-node health gates; each is waited for up to its timeout, counted from the
/// moment the node was changed.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthGates {
    /// The node's config-status annotation shows the target active, with KubeletConfigOK=True.
    #[serde(default = "default_gate_timeout")]
    pub config_active_timeout: String,
    /// The Node is Ready.
    #[serde(default = "default_gate_timeout")]
    pub node_ready_timeout: String,
    /// How long the node must run the target without falling back to its last-known-good
    /// config before it counts as done (a fallback at any time fails it).
    #[serde(default = "default_no_fallback")]
    pub no_fallback_for: String,
    /// Every pod bound to the node that is not finished is Ready again.
    #[serde(default = "default_true")]
    pub pods_ready: bool,
    #[serde(default = "default_gate_timeout")]
    pub pods_ready_timeout: String,
}

fn default_gate_timeout() -> String {
    "10m".to_string()
}

fn default_no_fallback() -> String {
    "1m".to_string()
}

fn default_true() -> bool {
    true
}

impl Default for HealthGates {
    fn default() -> Self {
        HealthGates {
            config_active_timeout: default_gate_timeout(),
            node_ready_timeout: default_gate_timeout(),
            no_fallback_for: default_no_fallback(),
            pods_ready: true,
            pods_ready_timeout: default_gate_timeout(),
        }
    }
}

/// A weekly window in UTC: from `start` (`HH:MM`) for `duration`, on `days` (empty: every day).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// `Mon` .. `Sun`; empty: every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<String>,
    /// Start time of day, UTC, `HH:MM`.
    pub start: String,
    /// How long the window stays open (`"4h"`), at most 7 days.
    pub duration: String,
}

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
    pub batch: u32,
    pub time: String,
}

/// A condition of the rollout (`Progressing`, `Paused`, `Valid`, `Complete`).
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
}

/// Nodes by state, for the current revision.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeCounts {
    pub total: u32,
    /// Not yet changed.
    pub pending: u32,
    /// Changed, gates not yet passed.
    pub in_progress: u32,
    pub done: u32,
    pub failed: u32,
}

/// One revision: a config this rollout rolled (or is rolling).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRecord {
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
    /// Nodes it changed, and how many of them failed.
    #[serde(default)]
    pub changed: u32,
    #[serde(default)]
    pub failed: u32,
}

/// The controller's record of the rollout. Per-node progress lives on the nodes (the
/// assignment annotation and the rollout record annotation); this holds the plan.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<RolloutCondition>,
    /// The current revision (0: none started).
    #[serde(default)]
    pub revision: u32,
    /// The targets snapshot, batch by batch (the canary first when there is one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<Vec<String>>,
    /// Whether `batches[0]` is the canary.
    #[serde(default)]
    pub has_canary: bool,
    /// The batch being rolled (equal to the number of batches when all are done).
    #[serde(default)]
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
    pub acknowledged_failures: u32,
    /// Revisions, oldest first (the newest 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<RevisionRecord>,
}
