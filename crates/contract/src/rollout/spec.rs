//! The spec of a `KubeletConfigRollout`, as the operator writes it.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    IntOrPercent, NodeSelector, RolloutStatus, SelectorRequirement, DEFAULT_TOPOLOGY_KEY, MAX_COUNT,
};

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
    /// Set-based requirements a target must also meet, as a LabelSelector's
    /// `matchExpressions` (`In`, `NotIn`, `Exists`, `DoesNotExist`). Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selector_expressions: Vec<SelectorRequirement>,
    /// Nodes rolled first, alone; any failure among them pauses the rollout.
    #[serde(default = "default_canary")]
    #[schemars(range(min = 0, max = MAX_COUNT))]
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
    #[schemars(range(min = 0, max = MAX_COUNT))]
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
    crate::node_config::DEFAULT_KEY.to_string()
}

impl RolloutSpec {
    /// The nodes the rollout targets: `nodeSelector` and `nodeSelectorExpressions` together.
    pub fn selector(&self) -> NodeSelector {
        NodeSelector {
            labels: self.node_selector.clone(),
            expressions: self.node_selector_expressions.clone(),
        }
    }
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
    /// config before it counts as done (a fallback at any time fails it). Unset: the
    /// config's own `configTrialDuration` (else the default trial, 10m), so that a node is
    /// done only once it can no longer fall back; set it (`"1m"`, `"0s"`) to go faster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_fallback_for: Option<String>,
    /// Every pod bound to the node that is not finished is Ready again.
    #[serde(default = "default_true")]
    pub pods_ready: bool,
    #[serde(default = "default_gate_timeout")]
    pub pods_ready_timeout: String,
}

fn default_gate_timeout() -> String {
    "10m".to_string()
}

fn default_true() -> bool {
    true
}

impl Default for HealthGates {
    fn default() -> Self {
        HealthGates {
            config_active_timeout: default_gate_timeout(),
            node_ready_timeout: default_gate_timeout(),
            no_fallback_for: None,
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
