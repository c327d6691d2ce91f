//! What the rollout controller reads off a Node: its labels, its assignment, the config
//! status it reports (kubelet-pivot's status contract), its readiness, and the rollout
//! record the controller wrote when it changed the node. Pure parsing; no I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use kp_contract::node_config::{
    existing_condition, parse_annotation, ConfigRef, DisruptionReason, SOURCE_ANNOTATION,
    STATUS_ANNOTATION,
};
use kp_contract::rollout::NodeSelector;

use kp_contract::rollout::ConfigMapKey;

/// The node annotation where the controller records what it did to the node: which
/// rollout and revision changed it, the assignment it had before, and when.
pub const RECORD_ANNOTATION: &str = "kubelet-pivot.io/rollout";

/// The controller's record on a node it changed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    pub rollout: String,
    pub revision: u32,
    /// The assignment annotation's value before the change (None: none, the local config).
    pub previous: Option<String>,
    /// When the node was changed (RFC 3339).
    pub at: String,
    /// Set when `undo` pointed the node back at `previous`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undone: bool,
    /// The rollout's UID: a rollout deleted and created again is another owner (absent
    /// in records of older builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// When the revision that changed the node started (RFC 3339): of two rollouts, the
    /// newer intent owns the node (see `plan::owner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
}

/// A config source as the status annotation names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reported {
    pub namespace: String,
    pub name: String,
    pub key: String,
    pub uid: String,
}

/// The node's config-status annotation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigStatus {
    pub active: Option<Reported>,
    pub assigned: Option<Reported>,
    pub last_known_good: Option<Reported>,
    pub error: Option<String>,
}

/// The KubeletConfigOK condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigCondition {
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// A Node as the controller sees it.
#[derive(Clone, Debug)]
pub struct NodeView {
    pub name: String,
    pub resource_version: String,
    pub labels: BTreeMap<String, String>,
    /// The assignment annotation's raw value (None: absent).
    pub assignment: Option<String>,
    pub status: Option<ConfigStatus>,
    pub condition: Option<ConfigCondition>,
    pub ready: bool,
    pub unschedulable: bool,
    pub record: Option<NodeRecord>,
}

fn reported(value: &Value) -> Option<Reported> {
    let cm = value.get("configMap")?;
    let text = |k: &str| cm.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Some(Reported {
        namespace: text("namespace"),
        name: text("name"),
        key: text("kubeletConfigKey"),
        uid: text("uid"),
    })
}

fn config_status(text: &str) -> Option<ConfigStatus> {
    let value: Value = serde_json::from_str(text).ok()?;
    Some(ConfigStatus {
        active: value.get("active").and_then(reported),
        assigned: value.get("assigned").and_then(reported),
        last_known_good: value.get("lastKnownGood").and_then(reported),
        error: value
            .get("error")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

impl NodeView {
    pub fn of(node: &Node) -> NodeView {
        let annotations = node.metadata.annotations.as_ref();
        let annotation = |key: &str| annotations.and_then(|a| a.get(key));
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        NodeView {
            name: node.metadata.name.clone().unwrap_or_default(),
            resource_version: node.metadata.resource_version.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            assignment: annotation(SOURCE_ANNOTATION).cloned(),
            status: annotation(STATUS_ANNOTATION).and_then(|t| config_status(t)),
            condition: existing_condition(node).map(|c| ConfigCondition {
                status: c.status.clone(),
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
            }),
            ready,
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            record: annotation(RECORD_ANNOTATION).and_then(|t| serde_json::from_str(t).ok()),
        }
    }

    /// Whether the rollout's `selector` picks the node.
    pub fn matches(&self, selector: &NodeSelector) -> bool {
        selector.matches(&self.labels)
    }

    /// The node's topology domain under `key` ("" without the label).
    pub fn domain(&self, key: &str) -> &str {
        self.labels.get(key).map_or("", String::as_str)
    }

    /// Whether the node is draining for a disruptive change (KubeletConfigOK's reason
    /// `Draining`; a drain that timed out has uncordoned the node and waits to retry).
    pub fn draining(&self) -> bool {
        self.condition
            .as_ref()
            .is_some_and(|c| c.reason == DisruptionReason::Draining.as_str())
    }

    /// Not available for workloads: not Ready, cordoned or draining.
    pub fn unavailable(&self) -> bool {
        !self.ready || self.unschedulable || self.draining()
    }

    /// The record of `rollout` at `revision`, if this node carries it.
    pub fn record_of(&self, rollout: &str, revision: u32) -> Option<&NodeRecord> {
        self.record
            .as_ref()
            .filter(|r| r.rollout == rollout && r.revision == revision)
    }

    fn condition_true(&self) -> bool {
        self.condition.as_ref().is_some_and(|c| c.status == "True")
    }

    /// The config-active gate for a target: the status annotation shows it active (by
    /// namespace, name, key and, when known, the ConfigMap's uid), without an error, and
    /// KubeletConfigOK is True. `None` as the target is the node's local config.
    pub fn shows_active(&self, target: Option<&ConfigRef>, uid: Option<&str>) -> bool {
        let Some(status) = &self.status else {
            return false;
        };
        if status.error.is_some() || !self.condition_true() {
            return false;
        }
        match (target, &status.active) {
            (None, None) => true,
            (Some(t), Some(a)) => same_source(a, t) && uid.is_none_or(|u| a.uid == u),
            _ => false,
        }
    }

    /// Whether the node fell back from `target`: it is assigned the target but reports an
    /// error and runs another config (its last-known-good or the local one).
    pub fn fell_back_from(&self, target: &ConfigRef) -> bool {
        let Some(status) = &self.status else {
            return false;
        };
        let assigned = status
            .assigned
            .as_ref()
            .is_some_and(|a| same_source(a, target));
        let active_target = status
            .active
            .as_ref()
            .is_some_and(|a| same_source(a, target));
        assigned && status.error.is_some() && !active_target
    }

    /// A short account of what the node reports, for failure messages: the node's reason
    /// (in the validator's words) and message, escaped (whoever may patch the Node wrote
    /// them) and bounded.
    pub fn describe(&self) -> String {
        let shown = |text: &str| {
            kp_contract::node_config::bounded(&kp_contract::text::printable(text), 160)
        };
        match &self.condition {
            Some(c) => format!(
                "KubeletConfigOK={} ({}): {}",
                shown(&c.status),
                shown(&c.reason),
                shown(&c.message)
            ),
            None => "no KubeletConfigOK condition yet".to_string(),
        }
    }
}

fn same_source(reported: &Reported, target: &ConfigRef) -> bool {
    reported.namespace == target.namespace
        && reported.name == target.name
        && reported.key == target.key
}

/// The assignment a ConfigMap key stands for.
pub fn config_ref(key: &ConfigMapKey) -> ConfigRef {
    ConfigRef {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        key: key.key.clone(),
    }
}

/// The config an assignment annotation's raw value names (None: the local config or an
/// unparseable value, which the node runs as its local config too).
pub fn assignment_ref(raw: Option<&str>) -> Option<ConfigRef> {
    raw.filter(|v| !v.trim().is_empty())
        .and_then(|v| parse_annotation(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node_with(annotations: &[(&str, String)]) -> NodeView {
        NodeView::of(&Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.clone()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        })
    }

    /// Annotations are written by whoever may patch the Node (the node itself among them):
    /// garbage, wrong shapes and deep nesting are read as absent, never trusted or panicked on.
    #[test]
    fn planted_annotations_are_read_as_absent() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        for bad in [
            "not json".to_string(),
            "{\"rollout\": 5}".to_string(),
            "[]".to_string(),
            deep,
        ] {
            let view = node_with(&[
                (RECORD_ANNOTATION, bad.clone()),
                (STATUS_ANNOTATION, bad.clone()),
            ]);
            assert!(view.record.is_none(), "{bad:.40}");
            assert!(!view.shows_active(None, None));
            assert!(view.record_of("r1", 1).is_none());
        }
        // A status that names no config and no error shows the local config only with
        // KubeletConfigOK=True, which a Node without the condition lacks.
        let view = node_with(&[(STATUS_ANNOTATION, "{}".to_string())]);
        assert!(!view.shows_active(None, None));
    }

    /// Issue 32 item 1: a node that refused the target shows as fallen back, and the
    /// failure the rollout records says why in the validator's words, as the node
    /// reports them (the contract's own condition and status, not a hand-made copy).
    #[test]
    fn a_refused_target_fails_with_the_validators_words() {
        use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
        use kp_contract::node_config::{self, ConfigReport, ConfigSource, Origin};
        let source = |name: &str, uid: &str| ConfigSource {
            namespace: "kubelet-config".into(),
            name: name.into(),
            uid: uid.into(),
            resource_version: "7".into(),
            kubelet_config_key: "kubelet".into(),
        };
        let words =
            "failed to validate config: port (70000) must be between 1 and 65535, inclusive";
        // The target refused while the previous config is still on trial: it runs on.
        let report = ConfigReport {
            origin: Origin::Assigned,
            source: Some(source("cfg-a", "u1")),
            local_kind: "default",
            error: Some(words.into()),
            failure: Some(node_config::Failure::Refused),
            assigned: Some(source("cfg-b", "u2")),
            last_known_good: None,
            disruption: None,
        };
        let cond = node_config::condition(&report, None);
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.metadata.annotations = Some(
            [(
                STATUS_ANNOTATION.to_string(),
                node_config::config_status(&report, None).to_string(),
            )]
            .into(),
        );
        node.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: node_config::CONDITION_TYPE.into(),
                status: cond.status.as_str().into(),
                reason: Some(cond.reason.clone()),
                message: Some(cond.message.clone()),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        });
        let view = NodeView::of(&node);
        let target = parse_annotation("kubelet-config/cfg-b").unwrap();
        assert!(view.fell_back_from(&target));
        assert!(!view.shows_active(Some(&target), None));
        assert_eq!(
            view.describe(),
            format!("KubeletConfigOK=False ({words}): using previous, on trial (UID: u1, ResourceVersion: 7)")
        );
        // A condition someone else planted on the Node is escaped and cut.
        if let Some(c) = node.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c[0].reason = Some(format!("\u{1b}]0;pwned\u{7}{}", "x".repeat(1000)));
        }
        let shown = NodeView::of(&node).describe();
        assert!(
            shown.starts_with("KubeletConfigOK=False (\\u{1b}]0;pwned\\u{7}xx"),
            "{shown}"
        );
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.len() < 400, "{shown}");
    }
}
