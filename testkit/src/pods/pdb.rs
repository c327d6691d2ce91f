//! The PodDisruptionBudget strategy and validation, the selection of pods, and the status a
//! disruption controller would write.

use serde_json::{json, Map, Value};

use crate::clock::now_rfc3339;
use crate::conditions::set_condition;
use crate::errors::FieldError;
use crate::resource::{Resource, Target};
use crate::store::{copy_field, is_deleting, State};
use crate::validation::{label_value, qualified_name};

use super::pod::{is_pod_ready, is_terminal, set_default};

const PDB_STATUS_COUNTS: [&str; 4] = [
    "disruptionsAllowed",
    "currentHealthy",
    "desiredHealthy",
    "expectedPods",
];

fn empty_pdb_status() -> Value {
    json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0})
}

/// podDisruptionBudgetStrategy / podDisruptionBudgetStatusStrategy.
pub(crate) fn prepare_pdb(target: &Target, obj: &mut Value, old: Option<&Value>) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    match old {
        None => {
            obj["status"] = empty_pdb_status();
            obj["metadata"]["generation"] = json!(1);
        }
        Some(old) => {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            if target.is_status() {
                copy_field(obj, old, "spec");
                obj["metadata"]["generation"] = json!(generation);
            } else {
                copy_field(obj, old, "status");
                let changed = obj["spec"] != old["spec"];
                obj["metadata"]["generation"] = json!(generation + i64::from(changed));
            }
        }
    }
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    for field in PDB_STATUS_COUNTS {
        set_default(&mut obj["status"], field, json!(0));
    }
}

/// ValidatePositiveIntOrPercent and IsNotMoreThan100Percent.
fn validate_int_or_percent(value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match value {
        Value::Number(n) if n.as_i64().unwrap_or(-1) < 0 => {
            errors.push(FieldError::invalid(
                path,
                value.clone(),
                "must be greater than or equal to 0",
            ));
        }
        Value::String(text) => {
            let digits = text
                .strip_suffix('%')
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            match digits.map(|d| d.parse::<u64>().unwrap_or(u64::MAX)) {
                None => errors.push(FieldError::invalid(
                    path,
                    value.clone(),
                    "must be an integer or percentage (e.g '5%')",
                )),
                Some(percent) if percent > 100 => errors.push(FieldError::invalid(
                    path,
                    value.clone(),
                    "must not be greater than 100%",
                )),
                Some(_) => {}
            }
        }
        _ => {}
    }
}

/// ValidateLabelSelector.
fn validate_label_selector(selector: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(labels) = selector["matchLabels"].as_object() {
        for (key, value) in labels {
            for msg in qualified_name(key) {
                errors.push(FieldError::invalid(
                    &format!("{path}.matchLabels"),
                    json!(key),
                    &msg,
                ));
            }
            let value = value.as_str().unwrap_or("");
            for msg in label_value(value) {
                errors.push(FieldError::invalid(
                    &format!("{path}.matchLabels"),
                    json!(value),
                    &msg,
                ));
            }
        }
    }
    for (i, expr) in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{path}.matchExpressions[{i}]");
        let values = expr["values"].as_array().map_or(0, Vec::len);
        match expr["operator"].as_str().unwrap_or("") {
            "In" | "NotIn" if values == 0 => errors.push(FieldError::required(
                &format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if values > 0 => errors.push(FieldError::forbidden(
                &format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errors.push(FieldError::invalid(
                &format!("{at}.operator"),
                json!(other),
                "not a valid selector operator",
            )),
        }
        let key = expr["key"].as_str().unwrap_or("");
        for msg in qualified_name(key) {
            errors.push(FieldError::invalid(&format!("{at}.key"), json!(key), &msg));
        }
    }
}

/// ValidatePodDisruptionBudget(Update) and ValidatePodDisruptionBudgetStatusUpdate (v1).
pub(crate) fn validate_pdb(obj: &Value, old: Option<&Value>, errors: &mut Vec<FieldError>) {
    let spec = &obj["spec"];
    let present = |field: &str| spec.get(field).filter(|v| !v.is_null());
    if present("minAvailable").is_some() && present("maxUnavailable").is_some() {
        errors.push(FieldError::invalid(
            "spec",
            spec.clone(),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    for field in ["minAvailable", "maxUnavailable"] {
        if let Some(value) = present(field) {
            validate_int_or_percent(value, &format!("spec.{field}"), errors);
        }
    }
    if let Some(selector) = present("selector") {
        validate_label_selector(selector, "spec.selector", errors);
    }
    if let Some(policy) = present("unhealthyPodEvictionPolicy") {
        let text = policy.as_str().unwrap_or("");
        if !["AlwaysAllow", "IfHealthyBudget"].contains(&text) {
            errors.push(FieldError::not_supported(
                "spec.unhealthyPodEvictionPolicy",
                policy.clone(),
                &["AlwaysAllow", "IfHealthyBudget"],
            ));
        }
    }
    if old.is_some() {
        for field in PDB_STATUS_COUNTS {
            let value = obj["status"][field].as_i64().unwrap_or(0);
            if value < 0 {
                errors.push(FieldError::invalid(
                    &format!("status.{field}"),
                    json!(value),
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
}

/// metav1.LabelSelectorAsSelector(...).Matches(labels); `None` for an empty or invalid
/// selector (which the eviction handler treats as matching nothing).
pub(super) fn selector_matches(selector: &Value, labels: &Map<String, Value>) -> Option<bool> {
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    let mut requirements = 0;
    let mut matches = true;
    for (key, want) in selector["matchLabels"].as_object().into_iter().flatten() {
        requirements += 1;
        matches &= label(key) == Some(want.as_str()?);
    }
    for expr in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        requirements += 1;
        let key = expr["key"].as_str()?;
        let values: Vec<&str> = expr["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let ok = match expr["operator"].as_str()? {
            "In" if !values.is_empty() => label(key).is_some_and(|v| values.contains(&v)),
            "NotIn" if !values.is_empty() => !label(key).is_some_and(|v| values.contains(&v)),
            "Exists" if values.is_empty() => label(key).is_some(),
            "DoesNotExist" if values.is_empty() => label(key).is_none(),
            _ => return None,
        };
        matches &= ok;
    }
    (requirements > 0).then_some(matches)
}

pub(super) fn pod_labels(pod: &Value) -> Map<String, Value> {
    pod["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// pdbhelper.UpdateDisruptionAllowedCondition.
pub(super) fn set_disruption_allowed_condition(pdb: &mut Value) {
    let allowed = pdb["status"]["disruptionsAllowed"].as_i64().unwrap_or(0) > 0;
    let (status, reason) = if allowed {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let observed = pdb["status"]["observedGeneration"].as_i64().unwrap_or(0);
    let mut conditions = pdb["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let condition = json!({
        "type": "DisruptionAllowed",
        "status": status,
        "observedGeneration": observed,
        "lastTransitionTime": now_rfc3339(),
        "reason": reason,
        "message": "",
    });
    set_condition(
        &mut conditions,
        condition,
        &["reason", "observedGeneration"],
    );
    pdb["status"]["conditions"] = json!(conditions);
}

impl State {
    /// What a disruption controller would write for `disruptions_allowed` (healthy: matching
    /// ready pods, not terminating, not already disrupted).
    pub(super) fn pdb_status_for(&self, pdb: &Value, disruptions_allowed: i64) -> Value {
        let namespace = pdb["metadata"]["namespace"].as_str().unwrap_or("");
        let mut disrupted = pdb["status"]["disruptedPods"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let pods: Vec<&Value> = self
            .objects(Resource::Pods)
            .iter()
            .filter(|((ns, _), pod)| {
                ns == namespace
                    && selector_matches(&pdb["spec"]["selector"], &pod_labels(pod)) == Some(true)
            })
            .map(|(_, pod)| pod)
            .collect();
        disrupted.retain(|name, _| pods.iter().any(|p| p["metadata"]["name"] == name.as_str()));
        let expected = pods.iter().filter(|p| !is_terminal(p)).count() as i64;
        let healthy = pods
            .iter()
            .filter(|p| {
                is_pod_ready(p)
                    && !is_deleting(p)
                    && !disrupted.contains_key(p["metadata"]["name"].as_str().unwrap_or(""))
            })
            .count() as i64;
        let mut status = json!({
            "observedGeneration": pdb["metadata"]["generation"],
            "disruptionsAllowed": disruptions_allowed,
            "currentHealthy": healthy,
            "desiredHealthy": (healthy - disruptions_allowed).max(0),
            "expectedPods": expected,
            "conditions": pdb["status"]["conditions"].as_array().cloned().unwrap_or_default(),
        });
        if !disrupted.is_empty() {
            status["disruptedPods"] = Value::Object(disrupted);
        }
        status
    }
}
