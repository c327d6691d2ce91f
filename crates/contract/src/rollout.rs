//! The `KubeletConfigRollout` custom resource (kubelet-pivot.io/v1alpha1): its spec as the
//! operator writes it and its status as the controller keeps it. The CRD in
//! `manifests/40-rollout-crd.yaml` is generated from these types (`kubelet-pivot rollout crd`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Unexpected, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The API group of the resource.
pub const GROUP: &str = "kubelet-pivot.io";
/// The label that spreads batches and bounds unavailability by default.
pub const DEFAULT_TOPOLOGY_KEY: &str = "topology.kubernetes.io/zone";
/// The largest count the spec takes (`canary`, `batch`, `maxUnavailable.value`,
/// `maxFailures`): more nodes than any cluster has. The CRD refuses larger ones.
pub const MAX_COUNT: u32 = 100_000;
/// A percentage of the spec (`batch`, `maxUnavailable.value`): 1% to 100%, digits only.
pub const PERCENT_PATTERN: &str = "^(100|[1-9][0-9]?)%$";
/// The largest generation the CRD accepts in `status.observedGeneration`: the largest
/// integer a float64 holds exactly (the API server compares bounds as float64).
pub const MAX_GENERATION: i64 = (1 << 53) - 1;

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

/// A count (at least 1) or a percentage (`"25%"`), as Kubernetes' IntOrString.
///
/// Decoding names what is wrong (`null`, a negative or too large count, a fraction)
/// instead of serde's "did not match any variant"; whether a string is a percentage is
/// checked where the spec is followed ([`IntOrPercent::resolve`]), as the CRD's pattern
/// does at the API.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum IntOrPercent {
    Int(u32),
    Percent(String),
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountOrPercent;

        impl Visitor<'_> for CountOrPercent {
            type Value = IntOrPercent;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(
                    f,
                    "a count from 0 to {} or a percentage like \"10%\"",
                    u32::MAX
                )
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrPercent, E> {
                u32::try_from(v)
                    .map(IntOrPercent::Int)
                    .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrPercent, E> {
                u32::try_from(v)
                    .map(IntOrPercent::Int)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<IntOrPercent, E> {
                // A whole number written as a float (`4.0`), as JSON allows.
                if v.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&v) {
                    Ok(IntOrPercent::Int(v as u32))
                } else {
                    Err(E::invalid_value(Unexpected::Float(v), &self))
                }
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrPercent, E> {
                Ok(IntOrPercent::Percent(v.to_string()))
            }
        }

        deserializer.deserialize_any(CountOrPercent)
    }
}

impl JsonSchema for IntOrPercent {
    fn schema_name() -> Cow<'static, str> {
        "IntOrPercent".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // The API server applies `minimum`/`maximum` to integers only and `pattern`/
        // `maxLength` to strings only; no CEL is needed (and an int-or-string is `dyn` to
        // CEL, whose cost estimate for `matches` on it is the whole request size).
        json_schema!({
            "x-kubernetes-int-or-string": true,
            "minimum": 1,
            "maximum": MAX_COUNT,
            "pattern": PERCENT_PATTERN,
            "maxLength": 4,
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

/// The CustomResourceDefinition, as `kubelet-pivot rollout crd` prints it and
/// `manifests/40-rollout-crd.yaml` holds it: the derived one without any `nullable`.
///
/// kube's derive marks optional fields, and int-or-strings that are not required,
/// `nullable`: the API server then stores an explicit `null`, which the controller reads
/// back as the field's value (a `null` batch is no count nor percentage). Without
/// `nullable`, the server drops a `null` or puts the field's default in its place, so
/// that what it stores is what the types decode.
pub fn crd() -> Result<CustomResourceDefinition, String> {
    let mut value = serde_json::to_value(KubeletConfigRollout::crd())
        .map_err(|e| format!("cannot render the derived CRD: {e}"))?;
    if let Some(versions) = value
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        for version in versions {
            if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
                drop_nullable(schema);
            }
        }
    }
    serde_json::from_value(value).map_err(|e| format!("cannot rebuild the CRD: {e}"))
}

/// Removes every `nullable` keyword (a boolean; a property so named would be an object).
fn drop_nullable(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.get("nullable").is_some_and(Value::is_boolean) {
                map.remove("nullable");
            }
            map.values_mut().for_each(drop_nullable);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nullable),
        _ => {}
    }
}

/// Why a stored object cannot be read as a [`KubeletConfigRollout`]: the field (`spec.batch`)
/// and what is wrong with its value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct DecodeError {
    pub field: String,
    pub reason: String,
}

/// Reads a rollout as the API server answered it (an object the CRD of its day accepted;
/// the current CRD refuses what this cannot read, an older one or another server may not).
pub fn decode(value: Value) -> Result<KubeletConfigRollout, DecodeError> {
    use crate::node_config::bounded;
    // Bounded: a path can hold map keys, and serde quotes the offending string.
    serde_path_to_error::deserialize(value).map_err(|err| DecodeError {
        field: bounded(&err.path().to_string(), 256),
        reason: bounded(&err.inner().to_string(), 512),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rollout(spec: Value) -> Value {
        json!({
            "apiVersion": "kubelet-pivot.io/v1alpha1",
            "kind": "KubeletConfigRollout",
            "metadata": {"name": "r1"},
            "spec": spec,
        })
    }

    fn config() -> Value {
        json!({"namespace": "kubelet-config", "name": "cfg-b"})
    }

    #[test]
    fn a_decode_error_names_the_field_and_the_value() {
        let cases = [
            (
                json!({"config": config(), "batch": null}),
                "spec.batch",
                "null",
            ),
            (
                json!({"config": config(), "canary": 4294967296u64}),
                "spec.canary",
                "4294967296",
            ),
            (json!({"config": config(), "batch": -1}), "spec.batch", "-1"),
            (
                json!({"config": config(), "batch": 2.5}),
                "spec.batch",
                "2.5",
            ),
            (
                json!({"config": config(), "maxUnavailable": {"value": true}}),
                "spec.maxUnavailable.value",
                "boolean",
            ),
            (json!({"config": {"name": "x"}}), "spec.config", "namespace"),
            (
                json!({"config": config(), "maxFailures": -3}),
                "spec.maxFailures",
                "-3",
            ),
        ];
        for (spec, field, shown) in cases {
            let err = decode(rollout(spec.clone())).expect_err(&spec.to_string());
            assert_eq!(err.field, field, "{spec}: {err}");
            assert!(err.reason.contains(shown), "{spec}: {err}");
        }
        let err = decode(rollout(json!({"config": config(), "batch": null}))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.batch: invalid type: null, expected a count from 0 to 4294967295 or a percentage like \"10%\""
        );
    }

    #[test]
    fn counts_and_percentages_decode() {
        let r = decode(rollout(json!({
            "config": config(), "batch": 3, "maxUnavailable": {"value": "25%"}, "canary": 4.0,
        })));
        // A u32 field takes no float; an int-or-string takes a whole one.
        assert_eq!(r.unwrap_err().field, "spec.canary");
        let r = decode(rollout(json!({
            "config": config(), "batch": 3.0, "maxUnavailable": {"value": "25%"},
        })))
        .expect("decodes");
        assert_eq!(r.spec.batch, IntOrPercent::Int(3));
        assert_eq!(
            r.spec.max_unavailable.value,
            IntOrPercent::Percent("25%".into())
        );
        assert_eq!(r.spec.canary, 1);
        // Serialized as the API takes it: a bare number or a string.
        assert_eq!(
            serde_json::to_value(&r.spec.batch).unwrap(),
            json!(3),
            "{:?}",
            r.spec.batch
        );
    }

    /// Every schema node of the generated CRD, with its path.
    fn nodes(schema: &Value, path: String, out: &mut Vec<(String, Value)>) {
        out.push((path.clone(), schema.clone()));
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                nodes(v, format!("{path}.{k}"), out);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(sub) = schema.get(key).filter(|v| v.is_object()) {
                nodes(sub, format!("{path}[{key}]"), out);
            }
        }
    }

    fn crd_nodes() -> Vec<(String, Value)> {
        let crd = serde_json::to_value(crd().expect("the CRD")).expect("JSON");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut out = Vec::new();
        nodes(schema, String::new(), &mut out);
        out
    }

    #[test]
    fn the_crd_bounds_every_integer_and_has_no_nullable() {
        let all = crd_nodes();
        assert!(all.len() > 50, "{}", all.len());
        for (path, node) in &all {
            assert!(node.get("nullable").is_none(), "{path} is nullable");
            let int_or_string = node["x-kubernetes-int-or-string"] == true;
            if node["type"] == "integer" || int_or_string {
                let min = node["minimum"].as_f64();
                let max = node["maximum"].as_f64();
                assert!(
                    min.is_some() && max.is_some(),
                    "{path} is not bounded: {node}"
                );
                // Within what the types decode.
                assert!(min >= Some(0.0), "{path}");
                let limit = if path.ends_with("observedGeneration") {
                    MAX_GENERATION as f64
                } else {
                    f64::from(u32::MAX)
                };
                assert!(max <= Some(limit), "{path}");
            }
            if int_or_string {
                assert_eq!(node["pattern"], PERCENT_PATTERN, "{path}");
                assert_eq!(node["minimum"], 1.0, "{path}");
            }
        }
        let spec_counts: Vec<&str> = all
            .iter()
            .filter(|(p, n)| p.starts_with(".spec") && n["maximum"] == f64::from(MAX_COUNT))
            .map(|(p, _)| p.as_str())
            .collect();
        assert_eq!(
            spec_counts,
            [
                ".spec.batch",
                ".spec.canary",
                ".spec.maxFailures",
                ".spec.maxUnavailable.value"
            ]
        );
    }

    #[test]
    fn the_percentage_pattern_takes_1_to_100_percent_only() {
        let re = regex::Regex::new(PERCENT_PATTERN).expect("the pattern compiles");
        for ok in ["1%", "9%", "10%", "55%", "99%", "100%"] {
            assert!(re.is_match(ok), "{ok}");
            assert!(IntOrPercent::Percent(ok.into()).resolve(10).is_ok(), "{ok}");
        }
        for bad in [
            "0%", "00%", "05%", "101%", "1000%", "10", "%", "10 %", " 10%", "10%\n", "1.5%", "-5%",
            "ten%", "",
        ] {
            assert!(!re.is_match(bad), "{bad:?}");
        }
    }
}
