//! Which nodes a rollout targets: the spec's equality labels (`nodeSelector`) and its
//! set-based requirements (`nodeSelectorExpressions`, shaped as a LabelSelector's
//! `matchExpressions`), matched against a node's labels and written as the text
//! `kubectl get nodes -l` takes.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a requirement relates a label to its values (a LabelSelector's operators; `Gt`
/// and `Lt` belong to node affinity, not to label selectors).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SelectorOperator {
    /// The label is set to one of the values.
    In,
    /// The label is absent or set to none of the values.
    NotIn,
    /// The label is set (to anything).
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One set-based requirement on a node's labels.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectorRequirement {
    /// The label's key.
    pub key: String,
    pub operator: SelectorOperator,
    /// The values for `In` and `NotIn` (at least one); none for `Exists` and `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl SelectorRequirement {
    pub fn new(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    /// Whether a node with `labels` meets the requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }

    /// What is wrong with the requirement's shape (values where none belong, or none
    /// where some must be), as the API server words it for a LabelSelector.
    pub fn shape_error(&self) -> Option<String> {
        match (self.operator, self.values.is_empty()) {
            (SelectorOperator::In | SelectorOperator::NotIn, true) => Some(format!(
                "{}: values must be non-empty when operator is In or NotIn",
                self.key
            )),
            (SelectorOperator::Exists | SelectorOperator::DoesNotExist, false) => Some(format!(
                "{}: values must be empty when operator is Exists or DoesNotExist",
                self.key
            )),
            _ => None,
        }
    }
}

impl fmt::Display for SelectorRequirement {
    /// As `kubectl get -l` takes it: `k in (a,b)`, `k notin (a)`, `k`, `!k`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operator {
            SelectorOperator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            SelectorOperator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
            SelectorOperator::Exists => write!(f, "{}", self.key),
            SelectorOperator::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

/// A rollout's whole node selector: every label and every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSelector {
    pub labels: BTreeMap<String, String>,
    pub expressions: Vec<SelectorRequirement>,
}

impl NodeSelector {
    /// Selects every node.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.expressions.is_empty()
    }

    /// Whether a node with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
            && self.expressions.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for NodeSelector {
    /// The `labelSelector` text: `pool=a,zone in (x,y),!gpu` (empty: every node).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            let s = if first { "" } else { "," };
            first = false;
            f.write_str(s)
        };
        for (k, v) in &self.labels {
            sep(f)?;
            write!(f, "{k}={v}")?;
        }
        for r in &self.expressions {
            sep(f)?;
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement::new(key, operator, values)
    }

    #[test]
    fn each_operator_matches_as_a_label_selector_does() {
        use SelectorOperator::*;
        let node = labels(&[("pool", "a"), ("zone", "z1")]);
        let bare = labels(&[]);
        assert!(req("pool", In, &["a", "b"]).matches(&node));
        assert!(!req("pool", In, &["b"]).matches(&node));
        assert!(!req("pool", In, &["a"]).matches(&bare));
        assert!(req("pool", NotIn, &["b"]).matches(&node));
        assert!(!req("pool", NotIn, &["a"]).matches(&node));
        assert!(
            req("pool", NotIn, &["a"]).matches(&bare),
            "absent is not in"
        );
        assert!(req("zone", Exists, &[]).matches(&node));
        assert!(!req("gpu", Exists, &[]).matches(&node));
        assert!(req("gpu", DoesNotExist, &[]).matches(&node));
        assert!(!req("zone", DoesNotExist, &[]).matches(&node));
    }

    #[test]
    fn a_selector_needs_every_part_and_prints_as_kubectl_takes_it() {
        use SelectorOperator::*;
        let sel = NodeSelector {
            labels: labels(&[("pool", "a")]),
            expressions: vec![
                req("zone", In, &["z1", "z2"]),
                req("gpu", DoesNotExist, &[]),
            ],
        };
        assert_eq!(sel.to_string(), "pool=a,zone in (z1,z2),!gpu");
        assert!(sel.matches(&labels(&[("pool", "a"), ("zone", "z2")])));
        assert!(!sel.matches(&labels(&[("pool", "a"), ("zone", "z3")])));
        assert!(!sel.matches(&labels(&[("pool", "a"), ("zone", "z1"), ("gpu", "")])));
        assert!(!sel.matches(&labels(&[("zone", "z1")])));
        assert!(NodeSelector::default().matches(&labels(&[])));
        assert_eq!(NodeSelector::default().to_string(), "");
    }

    #[test]
    fn shapes_the_api_server_refuses_are_named() {
        use SelectorOperator::*;
        assert!(req("a", In, &[]).shape_error().is_some());
        assert!(req("a", Exists, &["x"]).shape_error().is_some());
        assert!(req("a", NotIn, &["x"]).shape_error().is_none());
        assert!(req("a", DoesNotExist, &[]).shape_error().is_none());
    }

    #[test]
    fn the_wire_form_is_a_label_selectors_match_expressions() {
        let r: SelectorRequirement =
            serde_json::from_str(r#"{"key":"pool","operator":"NotIn","values":["a"]}"#).unwrap();
        assert_eq!(r, req("pool", SelectorOperator::NotIn, &["a"]));
        let back = serde_json::to_value(req("gpu", SelectorOperator::Exists, &[])).unwrap();
        assert_eq!(
            back,
            serde_json::json!({"key": "gpu", "operator": "Exists"})
        );
    }
}
