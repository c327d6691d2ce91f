//! Field and label selectors of lists and watches: parsing `fieldSelector` (per kind
//! labels) and `labelSelector` (module `labels`), and matching objects.

use std::collections::HashMap;

use serde_json::Value;

use crate::errors::ApiError;
use crate::events::EVENT_FIELD_LABELS;
use crate::resource::Resource;
use crate::{labels, pods};

#[derive(Clone, Debug)]
pub(crate) enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

impl Requirement {
    fn matches(&self, lookup: impl Fn(&str) -> Option<String>) -> bool {
        let number = |key: &str| lookup(key).and_then(|v| v.parse::<i64>().ok());
        match self {
            Requirement::Equals(key, want) => lookup(key).as_deref() == Some(want.as_str()),
            Requirement::NotEquals(key, want) => lookup(key).as_deref() != Some(want.as_str()),
            Requirement::In(key, values) => lookup(key).is_some_and(|v| values.contains(&v)),
            Requirement::NotIn(key, values) => !lookup(key).is_some_and(|v| values.contains(&v)),
            Requirement::Exists(key) => lookup(key).is_some(),
            Requirement::NotExists(key) => lookup(key).is_none(),
            Requirement::GreaterThan(key, bound) => number(key).is_some_and(|n| n > *bound),
            Requirement::LessThan(key, bound) => number(key).is_some_and(|n| n < *bound),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Selector {
    pub(crate) fields: Vec<Requirement>,
    labels: Vec<Requirement>,
}

impl Selector {
    pub(crate) fn parse(
        query: &HashMap<String, String>,
        resource: Resource,
    ) -> Result<Selector, ApiError> {
        let mut selector = Selector::default();
        if let Some(text) = query.get("fieldSelector").filter(|t| !t.trim().is_empty()) {
            for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                let requirement = if let Some((key, value)) = term.split_once("!=") {
                    Requirement::NotEquals(key.trim().to_string(), value.trim().to_string())
                } else if let Some((key, value)) = term.split_once("==") {
                    Requirement::Equals(key.trim().to_string(), value.trim().to_string())
                } else if let Some((key, value)) = term.split_once('=') {
                    Requirement::Equals(key.trim().to_string(), value.trim().to_string())
                } else {
                    return Err(ApiError::bad_request(format!(
                        "invalid field selector: invalid selector: '{text}'; can't understand '{term}'"
                    )));
                };
                let (Requirement::Equals(key, _) | Requirement::NotEquals(key, _)) = &requirement
                else {
                    unreachable!("field selectors only have = and !=")
                };
                if !field_label_supported(resource, key) {
                    return Err(ApiError::bad_request(field_label_error(resource, key)));
                }
                selector.fields.push(requirement);
            }
        }
        if let Some(text) = query.get("labelSelector") {
            selector.labels = labels::parse(text).map_err(ApiError::bad_request)?;
        }
        Ok(selector)
    }

    pub(crate) fn for_name(name: &str) -> Selector {
        Selector {
            fields: vec![Requirement::Equals(
                "metadata.name".to_string(),
                name.to_string(),
            )],
            labels: Vec::new(),
        }
    }

    /// Whether there is neither a field nor a label selector.
    pub(crate) fn is_empty(&self) -> bool {
        self.fields.is_empty() && self.labels.is_empty()
    }

    pub(crate) fn matches(&self, obj: &Value, resource: Resource) -> bool {
        self.fields
            .iter()
            .all(|req| req.matches(|key| field_value(obj, resource, key)))
            && self.labels.iter().all(|req| {
                req.matches(|key| {
                    obj["metadata"]["labels"]
                        .get(key)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
            })
    }
}

/// The message of the 400 for a field selector on a label `resource` does not support: the
/// core kinds' conversion functions say so, the others fall back to
/// runtime.DefaultMetaV1FieldSelectorConversion.
fn field_label_error(resource: Resource, key: &str) -> String {
    match resource {
        Resource::Leases | Resource::CustomResourceDefinitions | Resource::Custom(_) => format!(
            "{key:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        ),
        _ => format!("field label not supported: {key}"),
    }
}

fn field_label_supported(resource: Resource, key: &str) -> bool {
    match key {
        "metadata.name" | "metadata.namespace" => true,
        _ if resource == Resource::Pods => pods::POD_FIELD_LABELS.contains(&key),
        "spec.unschedulable" => resource == Resource::Nodes,
        "status.phase" => resource == Resource::Namespaces,
        "source" => resource == Resource::Events,
        other => resource == Resource::Events && EVENT_FIELD_LABELS.contains(&other),
    }
}

fn field_value(obj: &Value, resource: Resource, key: &str) -> Option<String> {
    let text = |value: &Value| Some(value.as_str().unwrap_or("").to_string());
    match key {
        "metadata.name" => text(&obj["metadata"]["name"]),
        "metadata.namespace" => text(&obj["metadata"]["namespace"]),
        "spec.unschedulable" => Some(
            obj["spec"]["unschedulable"]
                .as_bool()
                .unwrap_or(false)
                .to_string(),
        ),
        "status.phase" => text(&obj["status"]["phase"]),
        _ if resource == Resource::Pods => pods::pod_field_value(obj, key),
        "source" => text(&obj["source"]["component"]),
        other if resource == Resource::Events => {
            let pointer = format!("/{}", other.replace('.', "/"));
            text(obj.pointer(&pointer).unwrap_or(&Value::Null))
        }
        _ => None,
    }
}
