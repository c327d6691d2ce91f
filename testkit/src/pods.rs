//! Pods, PodDisruptionBudgets and the `pods/eviction` subresource.
//!
//! Pods follow pkg/registry/core/pod: defaults of the versioned type and of the admission
//! plugins a real server runs (Priority, DefaultTolerationSeconds; not ServiceAccount: no
//! service account or token volume is added), a create resets the status to `Pending` with
//! the QoS class, `pods/NAME` cannot change the status and `pods/NAME/status` cannot change
//! the spec, the spec is immutable but for images, activeDeadlineSeconds, added tolerations
//! and terminationGracePeriodSeconds, and a delete returns the deleted object.
//!
//! There is no kubelet: a graceful delete of a bound pod removes it at once (DELETED), or,
//! with [`ApiServer::set_pod_termination_delay`], marks it (deletionTimestamp and
//! deletionGracePeriodSeconds, MODIFIED) and removes it when the delay (at most the grace
//! period) has passed, as a kubelet does when the containers have stopped.
//!
//! Evictions follow pkg/registry/core/pod/storage/eviction.go of v1.32 (including the
//! `DisruptionTarget` condition written before the delete), and PodDisruptionBudgets
//! pkg/registry/policy/poddisruptionbudget. There is no disruption controller: a PDB's status
//! is whatever was written to it (through `/status` or [`ApiServer::set_pdb_disruptions_allowed`]),
//! and an eviction only decrements `disruptionsAllowed` and records `disruptedPods`.

use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Map, Value};

use crate::clock::{now_rfc3339, rfc3339};
use crate::decode::{
    capitalize, check_types as check_common_types, go_type, strip_unknown, with_type_meta, Shape,
    OBJECT_META,
};
use crate::errors::{ApiError, FieldError};
use crate::ids::uuid_v4;
use crate::patch::ListStrategy;
use crate::resource::{ApiGroup, Resource, Target};
use crate::server::Shared;
use crate::store::{copy_field, finalizers, EventType, FieldValidation, Key, Opts, Outcome, State};
use crate::validation::{dns1123_label, dns1123_subdomain, label_value, qualified_name};
use crate::watch::WATCH_POLL;
use crate::ApiServer;

// ------------------------------------------------------------------------------------------
// Shapes (the fields the strict decoder knows)
// ------------------------------------------------------------------------------------------

static CONTAINER: Shape = Shape::Fields(&[
    ("name", Shape::Any),
    ("image", Shape::Any),
    ("command", Shape::Any),
    ("args", Shape::Any),
    ("workingDir", Shape::Any),
    ("ports", Shape::Any),
    ("envFrom", Shape::Any),
    ("env", Shape::Any),
    ("resources", Shape::Any),
    ("resizePolicy", Shape::Any),
    ("restartPolicy", Shape::Any),
    ("volumeMounts", Shape::Any),
    ("volumeDevices", Shape::Any),
    ("livenessProbe", Shape::Any),
    ("readinessProbe", Shape::Any),
    ("startupProbe", Shape::Any),
    ("lifecycle", Shape::Any),
    ("terminationMessagePath", Shape::Any),
    ("terminationMessagePolicy", Shape::Any),
    ("imagePullPolicy", Shape::Any),
    ("securityContext", Shape::Any),
    ("stdin", Shape::Any),
    ("stdinOnce", Shape::Any),
    ("tty", Shape::Any),
]);

static POD_SPEC: Shape = Shape::Fields(&[
    ("volumes", Shape::Any),
    ("initContainers", Shape::ListOf(&CONTAINER)),
    ("containers", Shape::ListOf(&CONTAINER)),
    ("ephemeralContainers", Shape::Any),
    ("restartPolicy", Shape::Any),
    ("terminationGracePeriodSeconds", Shape::Any),
    ("activeDeadlineSeconds", Shape::Any),
    ("dnsPolicy", Shape::Any),
    ("nodeSelector", Shape::Any),
    ("serviceAccountName", Shape::Any),
    ("serviceAccount", Shape::Any),
    ("automountServiceAccountToken", Shape::Any),
    ("nodeName", Shape::Any),
    ("hostNetwork", Shape::Any),
    ("hostPID", Shape::Any),
    ("hostIPC", Shape::Any),
    ("shareProcessNamespace", Shape::Any),
    ("securityContext", Shape::Any),
    ("imagePullSecrets", Shape::Any),
    ("hostname", Shape::Any),
    ("subdomain", Shape::Any),
    ("affinity", Shape::Any),
    ("schedulerName", Shape::Any),
    ("tolerations", Shape::Any),
    ("hostAliases", Shape::Any),
    ("priorityClassName", Shape::Any),
    ("priority", Shape::Any),
    ("dnsConfig", Shape::Any),
    ("readinessGates", Shape::Any),
    ("runtimeClassName", Shape::Any),
    ("enableServiceLinks", Shape::Any),
    ("preemptionPolicy", Shape::Any),
    ("overhead", Shape::Any),
    ("topologySpreadConstraints", Shape::Any),
    ("setHostnameAsFQDN", Shape::Any),
    ("os", Shape::Any),
    ("hostUsers", Shape::Any),
    ("schedulingGates", Shape::Any),
    ("resourceClaims", Shape::Any),
    ("resources", Shape::Any),
]);

static POD_STATUS: Shape = Shape::Fields(&[
    ("observedGeneration", Shape::Any),
    ("phase", Shape::Any),
    ("conditions", Shape::Any),
    ("message", Shape::Any),
    ("reason", Shape::Any),
    ("nominatedNodeName", Shape::Any),
    ("hostIP", Shape::Any),
    ("hostIPs", Shape::Any),
    ("podIP", Shape::Any),
    ("podIPs", Shape::Any),
    ("startTime", Shape::Any),
    ("initContainerStatuses", Shape::Any),
    ("containerStatuses", Shape::Any),
    ("qosClass", Shape::Any),
    ("ephemeralContainerStatuses", Shape::Any),
    ("resize", Shape::Any),
    ("resourceClaimStatuses", Shape::Any),
]);

pub(crate) static POD: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("spec", Shape::Nested(&POD_SPEC)),
    ("status", Shape::Nested(&POD_STATUS)),
]);

static PDB_SPEC: Shape = Shape::Fields(&[
    ("minAvailable", Shape::Any),
    ("selector", Shape::Any),
    ("maxUnavailable", Shape::Any),
    ("unhealthyPodEvictionPolicy", Shape::Any),
]);

static PDB_STATUS: Shape = Shape::Fields(&[
    ("observedGeneration", Shape::Any),
    ("disruptedPods", Shape::Any),
    ("disruptionsAllowed", Shape::Any),
    ("currentHealthy", Shape::Any),
    ("desiredHealthy", Shape::Any),
    ("expectedPods", Shape::Any),
    ("conditions", Shape::Any),
]);

pub(crate) static PDB: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("spec", Shape::Nested(&PDB_SPEC)),
    ("status", Shape::Nested(&PDB_STATUS)),
]);

static DELETE_OPTIONS: Shape = Shape::Fields(&[
    ("kind", Shape::Any),
    ("apiVersion", Shape::Any),
    ("gracePeriodSeconds", Shape::Any),
    ("preconditions", Shape::Any),
    ("orphanDependents", Shape::Any),
    ("propagationPolicy", Shape::Any),
    ("dryRun", Shape::Any),
    (
        "ignoreStoreReadErrorWithClusterBreakingPotential",
        Shape::Any,
    ),
]);

static EVICTION: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("deleteOptions", Shape::Nested(&DELETE_OPTIONS)),
]);

/// The JSON type errors of the Pod and PodDisruptionBudget fields the server looks at.
pub(crate) fn check_types(obj: &Value, kind: &str) -> Result<(), String> {
    let unmarshal = |value: &Value, field: &str, want: &str| {
        Err(format!(
            "json: cannot unmarshal {} into Go struct field {field} of type {want}",
            go_type(value)
        ))
    };
    for field in ["spec", "status"] {
        if let Some(value) = obj.get(field).filter(|v| !v.is_null() && !v.is_object()) {
            return unmarshal(
                value,
                &format!("{kind}.{field}"),
                &format!("v1.{kind}{}", capitalize(field)),
            );
        }
    }
    if kind == "Pod" {
        for list in ["containers", "initContainers"] {
            match obj["spec"].get(list) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for item in items {
                        if !item.is_object() {
                            return unmarshal(
                                item,
                                &format!("PodSpec.spec.{list}"),
                                "v1.Container",
                            );
                        }
                        for field in ["name", "image"] {
                            if let Some(bad) =
                                item.get(field).filter(|v| !v.is_null() && !v.is_string())
                            {
                                return unmarshal(
                                    bad,
                                    &format!("Container.spec.{list}.{field}"),
                                    "string",
                                );
                            }
                        }
                    }
                }
                Some(other) => {
                    return unmarshal(other, &format!("PodSpec.spec.{list}"), "[]v1.Container")
                }
            }
        }
        if let Some(bad) = obj["spec"]
            .get("nodeName")
            .filter(|v| !v.is_null() && !v.is_string())
        {
            return unmarshal(bad, "PodSpec.spec.nodeName", "string");
        }
    } else {
        for field in [
            "disruptionsAllowed",
            "currentHealthy",
            "desiredHealthy",
            "expectedPods",
            "observedGeneration",
        ] {
            if let Some(bad) = obj["status"]
                .get(field)
                .filter(|v| !v.is_null() && !v.is_i64())
            {
                let want = if field == "observedGeneration" {
                    "int64"
                } else {
                    "int32"
                };
                return unmarshal(
                    bad,
                    &format!("PodDisruptionBudgetStatus.status.{field}"),
                    want,
                );
            }
        }
        for field in ["minAvailable", "maxUnavailable"] {
            if let Some(bad) = obj["spec"]
                .get(field)
                .filter(|v| !v.is_null() && !v.is_i64() && !v.is_string())
            {
                return Err(format!(
                    "json: cannot unmarshal {} into Go value of type int32",
                    go_type(bad)
                ));
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Field selectors and strategic merge keys
// ------------------------------------------------------------------------------------------

/// The field labels pods support besides metadata.name and metadata.namespace.
pub(crate) const POD_FIELD_LABELS: [&str; 9] = [
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];

/// PodToSelectableFields.
pub(crate) fn pod_field_value(pod: &Value, key: &str) -> Option<String> {
    let text = |value: &Value| Some(value.as_str().unwrap_or("").to_string());
    match key {
        "spec.nodeName" => text(&pod["spec"]["nodeName"]),
        "spec.restartPolicy" => text(&pod["spec"]["restartPolicy"]),
        "spec.schedulerName" => text(&pod["spec"]["schedulerName"]),
        "spec.serviceAccountName" => text(&pod["spec"]["serviceAccountName"]),
        "spec.hostNetwork" => Some(
            pod["spec"]["hostNetwork"]
                .as_bool()
                .unwrap_or(false)
                .to_string(),
        ),
        "status.phase" => text(&pod["status"]["phase"]),
        "status.podIP" | "status.podIPs" => text(&pod["status"]["podIPs"][0]["ip"]),
        "status.nominatedNodeName" => text(&pod["status"]["nominatedNodeName"]),
        _ => None,
    }
}

/// The `patchMergeKey`s of k8s.io/api's Pod (lists without one are replaced).
pub(crate) fn pod_list_strategy(path: &str) -> ListStrategy {
    let containers = [
        "spec.containers",
        "spec.initContainers",
        "spec.ephemeralContainers",
    ];
    let in_container = |suffix: &str| {
        containers
            .iter()
            .any(|c| path.strip_prefix(c) == Some(suffix))
    };
    match path {
        _ if containers.contains(&path) => ListStrategy::MergeKey("name"),
        "spec.volumes"
        | "spec.imagePullSecrets"
        | "spec.schedulingGates"
        | "spec.resourceClaims" => ListStrategy::MergeKey("name"),
        "spec.hostAliases" | "status.podIPs" | "status.hostIPs" => ListStrategy::MergeKey("ip"),
        "status.conditions" => ListStrategy::MergeKey("type"),
        _ if in_container(".env") => ListStrategy::MergeKey("name"),
        _ if in_container(".ports") => ListStrategy::MergeKey("containerPort"),
        _ if in_container(".volumeMounts") => ListStrategy::MergeKey("mountPath"),
        _ if in_container(".volumeDevices") => ListStrategy::MergeKey("devicePath"),
        _ => ListStrategy::Replace,
    }
}

// ------------------------------------------------------------------------------------------
// Pod strategy and validation
// ------------------------------------------------------------------------------------------

const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

fn set_default(obj: &mut Value, key: &str, value: Value) {
    if let Some(map) = obj.as_object_mut() {
        if map.get(key).is_none_or(Value::is_null) {
            map.insert(key.to_string(), value);
        }
    }
}

/// SetDefaults_PullPolicy: `Always` for `:latest` or no tag (and no digest).
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// The defaults a real server applies to every Pod it decodes.
fn default_pod(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "enableServiceLinks", json!(true));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    set_default(spec, "priority", json!(0));
    for list in ["initContainers", "containers"] {
        for container in spec[list].as_array_mut().into_iter().flatten() {
            if !container.is_object() {
                continue;
            }
            let image = container["image"].as_str().unwrap_or("").to_string();
            set_default(
                container,
                "terminationMessagePath",
                json!("/dev/termination-log"),
            );
            set_default(container, "terminationMessagePolicy", json!("File"));
            set_default(container, "imagePullPolicy", json!(pull_policy(&image)));
            set_default(container, "resources", json!({}));
            for port in container["ports"].as_array_mut().into_iter().flatten() {
                set_default(port, "protocol", json!("TCP"));
            }
        }
    }
}

/// qos.GetPodQOS for cpu and memory.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|list| spec[*list].as_array().into_iter().flatten())
        .collect();
    let amount = |c: &Value, kind: &str, resource: &str| {
        c["resources"][kind]
            .get(resource)
            .filter(|v| !v.is_null())
            .map(Value::to_string)
    };
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        for resource in ["cpu", "memory"] {
            let request = amount(c, "requests", resource);
            let limit = amount(c, "limits", resource);
            any |= request.is_some() || limit.is_some();
            match (&request, &limit) {
                (_, None) => guaranteed = false,
                (Some(r), Some(l)) if r != l => guaranteed = false,
                _ => {}
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// podStrategy / podStatusStrategy PrepareForCreate and PrepareForUpdate, with defaulting.
pub(crate) fn prepare_pod(target: &Target, obj: &mut Value, old: Option<&Value>) {
    default_pod(obj);
    match old {
        None => {
            // DefaultTolerationSeconds admission.
            let mut tolerations = obj["spec"]["tolerations"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for key in [
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
            ] {
                let present = tolerations
                    .iter()
                    .any(|t| t["effect"] == "NoExecute" && (t["key"] == key || t["key"].is_null()));
                if !present {
                    tolerations.push(json!({
                        "key": key, "operator": "Exists", "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    }));
                }
            }
            obj["spec"]["tolerations"] = json!(tolerations);
            let qos = qos_class(&obj["spec"]);
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        Some(old) if target.is_status() => {
            copy_field(obj, old, "spec");
            match old["metadata"].get("ownerReferences") {
                Some(owners) => obj["metadata"]["ownerReferences"] = owners.clone(),
                None => {
                    if let Some(meta) = obj["metadata"].as_object_mut() {
                        meta.remove("ownerReferences");
                    }
                }
            }
            if !obj.get("status").is_some_and(Value::is_object) {
                obj["status"] = json!({});
            }
            if obj["status"]["qosClass"].as_str().unwrap_or("").is_empty() {
                obj["status"]["qosClass"] = old["status"]["qosClass"].clone();
            }
        }
        Some(old) => copy_field(obj, old, "status"),
    }
}

fn validate_containers(spec: &Value, errors: &mut Vec<FieldError>) {
    let mut names: Vec<String> = Vec::new();
    for list in ["initContainers", "containers"] {
        let containers = spec[list].as_array().cloned().unwrap_or_default();
        if list == "containers" && containers.is_empty() {
            errors.push(FieldError::required("spec.containers", ""));
        }
        for (i, container) in containers.iter().enumerate() {
            let path = format!("spec.{list}[{i}]");
            let name = container["name"].as_str().unwrap_or("");
            if name.is_empty() {
                errors.push(FieldError::required(&format!("{path}.name"), ""));
            } else {
                for msg in dns1123_label(name) {
                    errors.push(FieldError::invalid(
                        &format!("{path}.name"),
                        json!(name),
                        &msg,
                    ));
                }
                if names.iter().any(|n| n == name) {
                    errors.push(FieldError::duplicate(&format!("{path}.name"), json!(name)));
                }
                names.push(name.to_string());
            }
            if container["image"].as_str().unwrap_or("").is_empty() {
                errors.push(FieldError::required(&format!("{path}.image"), ""));
            }
            let policy = container["imagePullPolicy"].as_str().unwrap_or("");
            if !["Always", "IfNotPresent", "Never"].contains(&policy) {
                errors.push(FieldError::not_supported(
                    &format!("{path}.imagePullPolicy"),
                    json!(policy),
                    &["Always", "IfNotPresent", "Never"],
                ));
            }
        }
    }
}

/// The spec of `old` with the fields a pod update may change taken from `new`.
fn munged_spec(new: &Value, old: &Value) -> Value {
    let mut spec = old.clone();
    for list in ["containers", "initContainers"] {
        let new_list = new[list].as_array().cloned().unwrap_or_default();
        if let Some(items) = spec[list].as_array_mut() {
            if items.len() == new_list.len() {
                for (item, new_item) in items.iter_mut().zip(&new_list) {
                    item["image"] = new_item["image"].clone();
                }
            }
        }
    }
    copy_field(&mut spec, new, "activeDeadlineSeconds");
    let old_tolerations = old["tolerations"].as_array().cloned().unwrap_or_default();
    let new_tolerations = new["tolerations"].as_array().cloned().unwrap_or_default();
    if old_tolerations.iter().all(|t| new_tolerations.contains(t)) {
        copy_field(&mut spec, new, "tolerations");
    }
    let old_grace = old["terminationGracePeriodSeconds"].as_i64().unwrap_or(0);
    if old_grace < 0 && new["terminationGracePeriodSeconds"].as_i64() == Some(1) {
        copy_field(&mut spec, new, "terminationGracePeriodSeconds");
    }
    spec
}

/// ValidatePodCreate / ValidatePodUpdate (the parts that matter here).
pub(crate) fn validate_pod(obj: &Value, old: Option<&Value>, errors: &mut Vec<FieldError>) {
    let spec = &obj["spec"];
    validate_containers(spec, errors);
    let restart = spec["restartPolicy"].as_str().unwrap_or("");
    if !["Always", "OnFailure", "Never"].contains(&restart) {
        errors.push(FieldError::not_supported(
            "spec.restartPolicy",
            json!(restart),
            &["Always", "Never", "OnFailure"],
        ));
    }
    let dns = spec["dnsPolicy"].as_str().unwrap_or("");
    if !["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"].contains(&dns) {
        errors.push(FieldError::not_supported(
            "spec.dnsPolicy",
            json!(dns),
            &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
        ));
    }
    if let Some(node) = spec["nodeName"].as_str().filter(|n| !n.is_empty()) {
        for msg in dns1123_subdomain(node) {
            errors.push(FieldError::invalid("spec.nodeName", json!(node), &msg));
        }
    }
    if let Some(old) = old {
        if munged_spec(spec, &old["spec"]) != *spec {
            errors.push(FieldError::forbidden("spec", POD_UPDATE_FORBIDDEN));
        }
    }
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// podutil.IsPodReady.
fn is_pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

// ------------------------------------------------------------------------------------------
// PodDisruptionBudget strategy and validation
// ------------------------------------------------------------------------------------------

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
fn selector_matches(selector: &Value, labels: &Map<String, Value>) -> Option<bool> {
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

fn pod_labels(pod: &Value) -> Map<String, Value> {
    pod["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// pdbhelper.UpdateDisruptionAllowedCondition.
fn set_disruption_allowed_condition(pdb: &mut Value) {
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
    match conditions
        .iter_mut()
        .find(|c| c["type"] == "DisruptionAllowed")
    {
        Some(existing) => {
            if existing["status"] != status {
                *existing = condition;
            } else {
                existing["reason"] = json!(reason);
                existing["observedGeneration"] = json!(observed);
            }
        }
        None => conditions.push(condition),
    }
    pdb["status"]["conditions"] = json!(conditions);
}

// ------------------------------------------------------------------------------------------
// Deletion and termination
// ------------------------------------------------------------------------------------------

/// A pod being terminated, removed when due unless it was replaced meanwhile.
#[derive(Clone, Debug)]
pub(crate) struct Termination {
    key: Key,
    uid: String,
    due: Instant,
}

fn success_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

fn served_pod(obj: Value) -> Value {
    with_type_meta(obj, Resource::Pods, ApiGroup::Core)
}

impl State {
    /// A pod DELETE after its preconditions (rest.BeforeDelete with the pod strategy's
    /// CheckGracefulDelete): at once if the grace period is 0 (or the pod is unbound or
    /// terminal) or there is no termination delay, else marked for deletion.
    pub(crate) fn delete_pod(
        &mut self,
        target: &Target,
        old: Value,
        options: Option<&Value>,
        opts: &Opts,
    ) -> Outcome {
        let requested = options
            .and_then(|o| o.get("gracePeriodSeconds"))
            .and_then(Value::as_i64);
        let mut period = requested
            .or_else(|| old["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(0);
        if old["spec"]["nodeName"].as_str().unwrap_or("").is_empty() || is_terminal(&old) {
            period = 0;
        }
        if period < 0 {
            period = 1;
        }
        if opts.dry_run {
            return Outcome::ok(served_pod(old));
        }
        if is_deleting(&old) {
            let current = old["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(0);
            if current == 0 || (requested.is_some() && period == 0) {
                return self.remove_pod(old);
            }
            if requested.is_some() && period < current {
                // Only a shorter grace period may be given.
                return self.mark_terminating(target, old, period);
            }
            return Outcome::ok(served_pod(old));
        }
        if period == 0 || self.pod_termination_delay.is_zero() {
            return self.remove_pod(old);
        }
        self.mark_terminating(target, old, period)
    }

    /// Sets deletionTimestamp and deletionGracePeriodSeconds and schedules the removal.
    fn mark_terminating(&mut self, target: &Target, old: Value, period: i64) -> Outcome {
        let seconds = Duration::from_secs(period.unsigned_abs());
        let mut obj = old.clone();
        obj["metadata"]["deletionTimestamp"] = json!(rfc3339(SystemTime::now() + seconds));
        obj["metadata"]["deletionGracePeriodSeconds"] = json!(period);
        let stored = self.commit(Resource::Pods, EventType::Modified, obj, Some(old));
        let key = target.key();
        let uid = stored["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let due = Instant::now() + self.pod_termination_delay.min(seconds);
        match self
            .terminations
            .iter_mut()
            .find(|t| t.key == key && t.uid == uid)
        {
            Some(t) => t.due = t.due.min(due),
            None => self.terminations.push(Termination { key, uid, due }),
        }
        Outcome::ok(served_pod(stored))
    }

    /// The final delete (grace period 0): gone, or kept until its finalizers are removed.
    fn remove_pod(&mut self, old: Value) -> Outcome {
        if !finalizers(&old).is_empty() {
            if is_deleting(&old)
                && old["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0)
            {
                return Outcome::ok(served_pod(old));
            }
            let mut obj = old.clone();
            if !is_deleting(&obj) {
                obj["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            }
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            let stored = self.commit(Resource::Pods, EventType::Modified, obj, Some(old));
            return Outcome::ok(served_pod(stored));
        }
        let stored = self.commit(Resource::Pods, EventType::Deleted, old.clone(), Some(old));
        Outcome::ok(served_pod(stored))
    }

    /// Finishes the terminations due at `now`; returns whether anything changed and when the
    /// next one is due.
    pub(crate) fn finish_terminations(&mut self, now: Instant) -> (bool, Option<Instant>) {
        let (due, pending): (Vec<Termination>, Vec<Termination>) =
            std::mem::take(&mut self.terminations)
                .into_iter()
                .partition(|t| t.due <= now);
        self.terminations = pending;
        let mut changed = false;
        for termination in due {
            let Some(pod) = self.objects(Resource::Pods).get(&termination.key).cloned() else {
                continue;
            };
            if pod["metadata"]["uid"].as_str() == Some(termination.uid.as_str())
                && is_deleting(&pod)
            {
                self.remove_pod(pod);
                changed = true;
            }
        }
        (changed, self.terminations.iter().map(|t| t.due).min())
    }

    // --- eviction -----------------------------------------------------------------------

    /// `POST pods/NAME/eviction` (EvictionREST.Create).
    pub(crate) fn evict(
        &mut self,
        target: &Target,
        body: Value,
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        let (eviction, warnings) = decode_eviction(body, opts)?;
        let namespace = target.namespace.clone().unwrap_or_default();
        if let Some(ns) = eviction["metadata"]["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
        {
            if ns != namespace {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        if let Some(node) = &opts.node {
            super::nodeauth::admit_eviction(self, node, target)?;
        }
        let name = target.name().to_string();
        if eviction["metadata"]["name"].as_str().unwrap_or("") != name {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
        let options = eviction
            .get("deleteOptions")
            .filter(|o| o.is_object())
            .cloned()
            .unwrap_or_else(|| json!({}));
        let dry_run = propagate_dry_run(&options, opts.dry_run)?;
        let pod_target = Target::object(Resource::Pods, Some(&namespace), &name);
        let pod = self.existing(&pod_target)?;
        let outcome = |_| Outcome {
            code: 201,
            body: success_status(),
            warnings: warnings.clone(),
        };
        // canIgnorePDB: terminal, pending and terminating pods are deleted directly.
        if is_terminal(&pod) || phase(&pod) == "Pending" || is_deleting(&pod) {
            return self
                .evict_pod(&pod_target, pod, &options, dry_run)
                .map(outcome);
        }
        let pdbs: Vec<Value> = self
            .objects(Resource::PodDisruptionBudgets)
            .iter()
            .filter(|((ns, _), _)| *ns == namespace)
            .filter(|(_, pdb)| {
                selector_matches(&pdb["spec"]["selector"], &pod_labels(&pod)) == Some(true)
            })
            .map(|(_, pdb)| pdb.clone())
            .collect();
        match pdbs.as_slice() {
            [] => {}
            [pdb] => {
                let status = &pdb["status"];
                let current = status["currentHealthy"].as_i64().unwrap_or(0);
                let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
                let always_allow =
                    pdb["spec"]["unhealthyPodEvictionPolicy"].as_str() == Some("AlwaysAllow");
                // An unready pod does not count as healthy: deleting it disrupts nothing.
                let unhealthy_ok =
                    !is_pod_ready(&pod) && (always_allow || (current >= desired && desired > 0));
                if !unhealthy_ok {
                    self.check_and_decrement(pdb.clone(), &name, dry_run)?;
                }
            }
            _ => {
                return Err(ApiError::new(
                    500,
                    "",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ))
            }
        }
        self.evict_pod(&pod_target, pod, &options, dry_run)
            .map(outcome)
    }

    /// checkAndDecrement: 429 unless the budget allows a disruption, then records it.
    fn check_and_decrement(
        &mut self,
        mut pdb: Value,
        pod: &str,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let name = pdb["metadata"]["name"].as_str().unwrap_or("").to_string();
        let status = pdb["status"].clone();
        let generation = pdb["metadata"]["generation"].as_i64().unwrap_or(0);
        let too_many = |cause: String, retry: u32| {
            let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
            if retry > 0 {
                details["retryAfterSeconds"] = json!(retry);
            }
            let mut err = ApiError::new(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
            .with_details(details);
            err.retry_after = (retry > 0).then_some(retry);
            err
        };
        let forbidden = |why: &str| {
            ApiError::new(
                403,
                "Forbidden",
                format!("poddisruptionbudget.policy \"{name}\" is forbidden: {why}"),
            )
            .with_details(json!({"name": name, "group": "policy", "kind": "poddisruptionbudget"}))
        };
        if status["observedGeneration"].as_i64().unwrap_or(0) < generation {
            return Err(too_many(
                format!("The disruption budget {name} is still being processed by the server."),
                10,
            ));
        }
        let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
        if allowed < 0 {
            return Err(forbidden("pdb disruptions allowed is negative"));
        }
        if status["disruptedPods"].as_object().map_or(0, Map::len) > 2000 {
            return Err(forbidden(
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            ));
        }
        if allowed == 0 {
            return Err(too_many(
                format!(
                    "The disruption budget {name} needs {} healthy pods and has {} currently",
                    status["desiredHealthy"].as_i64().unwrap_or(0),
                    status["currentHealthy"].as_i64().unwrap_or(0)
                ),
                0,
            ));
        }
        if dry_run {
            return Ok(());
        }
        let old = pdb.clone();
        pdb["status"]["disruptionsAllowed"] = json!(allowed - 1);
        if allowed == 1 {
            set_disruption_allowed_condition(&mut pdb);
        }
        if !pdb["status"]["disruptedPods"].is_object() {
            pdb["status"]["disruptedPods"] = json!({});
        }
        pdb["status"]["disruptedPods"][pod] = json!(now_rfc3339());
        self.commit(
            Resource::PodDisruptionBudgets,
            EventType::Modified,
            pdb,
            Some(old),
        );
        Ok(())
    }

    /// addConditionAndDeletePod: the client's preconditions, the DisruptionTarget
    /// condition, then the delete.
    fn evict_pod(
        &mut self,
        target: &Target,
        pod: Value,
        options: &Value,
        dry_run: bool,
    ) -> Result<Outcome, ApiError> {
        let name = target.name();
        let conflict = |why: String| {
            ApiError::new(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on Pod \"{name}\": {why}"),
            )
            .with_details(json!({"name": name, "kind": "Pod"}))
        };
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let rv = pod["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let pre = &options["preconditions"];
        if let Some(want) = pre["uid"].as_str().filter(|u| !u.is_empty()) {
            if want != uid {
                return Err(conflict(format!(
                    "the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
                )));
            }
        }
        if let Some(want) = pre["resourceVersion"].as_str().filter(|r| !r.is_empty()) {
            if want != rv {
                return Err(conflict(format!(
                    "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rv}). The object might have been modified"
                )));
            }
        }
        let opts = Opts {
            dry_run,
            ..Opts::default()
        };
        if dry_run {
            return Ok(self.delete_pod(target, pod, Some(options), &opts));
        }
        let mut updated = pod.clone();
        let mut conditions = pod["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let existing = conditions
            .iter()
            .position(|c| c["type"] == "DisruptionTarget");
        let condition = json!({
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": now_rfc3339(),
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        });
        // podutil.UpdatePodCondition: the transition time changes with the status only.
        match existing {
            Some(i) if conditions[i]["status"] == "True" => {
                conditions[i]["reason"] = condition["reason"].clone();
                conditions[i]["message"] = condition["message"].clone();
            }
            Some(i) => conditions[i] = condition,
            None => conditions.push(condition),
        }
        updated["status"]["conditions"] = json!(conditions);
        let pod = if updated != pod {
            self.commit(Resource::Pods, EventType::Modified, updated, Some(pod))
        } else {
            pod
        };
        Ok(self.delete_pod(target, pod, Some(options), &opts))
    }
}

/// Decodes a policy/v1 (or v1beta1) Eviction.
fn decode_eviction(body: Value, opts: &Opts) -> Result<(Value, Vec<String>), ApiError> {
    let cannot = |why: String| {
        ApiError::bad_request(format!(
            "Eviction in version \"v1\" cannot be handled as a Eviction: {why}"
        ))
    };
    if !body.is_object() {
        return Err(cannot(format!(
            "json: cannot unmarshal {} into Go value of type v1.Eviction",
            go_type(&body)
        )));
    }
    let api_version = body["apiVersion"].as_str().unwrap_or("");
    if !["", "policy/v1", "policy/v1beta1"].contains(&api_version) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version (policy/v1)"
        )));
    }
    let kind = body["kind"].as_str().unwrap_or("");
    if !kind.is_empty() && kind != "Eviction" {
        let version = if api_version.is_empty() {
            "policy/v1"
        } else {
            api_version
        };
        return Err(ApiError::bad_request(format!(
            "no kind \"{kind}\" is registered for version \"{version}\" in scheme \"pkg/api/legacyscheme/scheme.go:30\""
        )));
    }
    check_common_types(&body, "Eviction").map_err(cannot)?;
    if let Some(bad) = body
        .get("deleteOptions")
        .filter(|v| !v.is_null() && !v.is_object())
    {
        return Err(cannot(format!(
            "json: cannot unmarshal {} into Go struct field Eviction.deleteOptions of type v1.DeleteOptions",
            go_type(bad)
        )));
    }
    let mut obj = body;
    let mut unknown = Vec::new();
    strip_unknown(&mut obj, &EVICTION, "", &mut unknown);
    let list: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    let warnings = match opts.validation {
        FieldValidation::Strict if !list.is_empty() => {
            return Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                list.join(", ")
            )))
        }
        FieldValidation::Warn => list,
        _ => Vec::new(),
    };
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    Ok((obj, warnings))
}

/// propagateDryRun: the query's dryRun and the delete options' must agree.
fn propagate_dry_run(options: &Value, query_dry_run: bool) -> Result<bool, ApiError> {
    let body: Vec<String> = options["dryRun"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    if body.is_empty() {
        return Ok(query_dry_run);
    }
    if let Some(bad) = body.iter().find(|v| *v != "All") {
        return Err(ApiError::invalid(
            "DeleteOptions",
            "meta.k8s.io",
            "",
            &[FieldError::not_supported("dryRun", json!(bad), &["All"])],
        ));
    }
    // Only "All" exists, so the two cannot disagree.
    Ok(true)
}

// ------------------------------------------------------------------------------------------
// Public API
// ------------------------------------------------------------------------------------------

/// The pod termination thread: removes terminating pods when due.
fn reap(shared: Weak<Shared>) {
    loop {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut state = shared.lock();
        let (changed, next) = state.finish_terminations(Instant::now());
        if changed {
            shared.changed.notify_all();
        }
        let wait = next
            .map(|due| due.saturating_duration_since(Instant::now()))
            .unwrap_or(WATCH_POLL)
            .clamp(Duration::from_millis(1), WATCH_POLL);
        drop(
            shared
                .changed
                .wait_timeout(state, wait)
                .unwrap_or_else(|poison| poison.into_inner()),
        );
    }
}

/// The name of a pod's controller, from the pod's name (`web-7d4f9-x2x4q` -> `web-7d4f9`).
fn owner_name(pod: &str) -> String {
    pod.rsplit_once('-')
        .map_or(pod, |(prefix, _)| prefix)
        .to_string()
}

/// The status a kubelet reports for a running pod of [`ApiServer::create_pod`].
fn running_status(pod: &Value) -> Value {
    let now = now_rfc3339();
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "",
                "containerID": format!("containerd://{}", uuid_v4().replace('-', "")),
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    json!({
        "phase": "Running",
        "conditions": [
            condition("PodReadyToStartContainers"),
            condition("Initialized"),
            condition("Ready"),
            condition("ContainersReady"),
            condition("PodScheduled"),
        ],
        "hostIP": "10.0.0.1",
        "hostIPs": [{"ip": "10.0.0.1"}],
        "podIP": "10.244.0.10",
        "podIPs": [{"ip": "10.244.0.10"}],
        "startTime": now,
        "containerStatuses": statuses,
        "qosClass": pod["status"]["qosClass"],
    })
}

impl State {
    /// What a disruption controller would write for `disruptions_allowed` (healthy: matching
    /// ready pods, not terminating, not already disrupted).
    fn pdb_status_for(&self, pdb: &Value, disruptions_allowed: i64) -> Value {
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

impl ApiServer {
    /// How long a graceful delete (or eviction) of a bound, non-terminal pod takes: zero (the
    /// default) removes the pod at once; otherwise the pod gets `metadata.deletionTimestamp`
    /// and `deletionGracePeriodSeconds` (a MODIFIED event) and is removed (DELETED) after
    /// `delay` or its grace period, whichever is shorter, as a kubelet would.
    pub fn set_pod_termination_delay(&self, delay: Duration) {
        self.lock().pod_termination_delay = delay;
        let mut reaper = self
            .reaper
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if reaper.is_none() && !delay.is_zero() {
            let shared = Arc::downgrade(&self.shared);
            *reaper = Some(thread::spawn(move || reap(shared)));
        }
    }

    /// Creates a pod with one container (`main`, `registry.k8s.io/pause:3.10`) bound to `node`
    /// and, if `node` is not empty, makes it Running and Ready as its kubelet would (a second
    /// write, through `pods/NAME/status`). `labels` and `annotations` are JSON objects (or
    /// null); `owner_kind` adds a controller ownerReference of that kind (apiVersion `apps/v1`
    /// for DaemonSet, ReplicaSet, StatefulSet and Deployment, `batch/v1` for Job, `v1` for
    /// Node, named after the pod's name without its last `-` part, or after the node).
    pub fn create_pod(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        labels: Value,
        owner_kind: Option<&str>,
        annotations: Value,
    ) -> Value {
        let mut metadata = json!({"name": name, "namespace": namespace});
        if !labels.is_null() {
            metadata["labels"] = labels;
        }
        if !annotations.is_null() {
            metadata["annotations"] = annotations;
        }
        let node_uid = (!node.is_empty())
            .then(|| self.try_node(node))
            .flatten()
            .and_then(|n| n["metadata"]["uid"].as_str().map(str::to_string));
        if let Some(kind) = owner_kind {
            let api_version = match kind {
                "DaemonSet" | "ReplicaSet" | "StatefulSet" | "Deployment" => "apps/v1",
                "Job" | "CronJob" => "batch/v1",
                _ => "v1",
            };
            let owner = if kind == "Node" {
                json!({
                    "apiVersion": api_version, "kind": kind, "name": node,
                    "uid": node_uid.clone().unwrap_or_else(uuid_v4), "controller": true,
                })
            } else {
                json!({
                    "apiVersion": api_version, "kind": kind, "name": owner_name(name),
                    "uid": uuid_v4(), "controller": true, "blockOwnerDeletion": true,
                })
            };
            metadata["ownerReferences"] = json!([owner]);
        }
        let mut spec =
            json!({"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]});
        if !node.is_empty() {
            spec["nodeName"] = json!(node);
        }
        let body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
        let target = Target::collection(Resource::Pods, Some(namespace));
        let mut status_target = Target::object(Resource::Pods, Some(namespace), name);
        status_target.subresource = Some("status".to_string());
        // Created and marked running under one lock: no client sees (and evicts, as a
        // drain does with a pending pod) the pod between the two writes.
        self.helper(|state| {
            let created = state.create(&target, body, &Opts::default())?;
            if node.is_empty() {
                return Ok(created);
            }
            let mut pod = created.body;
            pod["status"] = running_status(&pod);
            state.update(&status_target, pod, &Opts::default())
        })
    }

    /// The stored pod, if any.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .get_served(&Target::object(Resource::Pods, Some(namespace), name))
    }

    /// Every pod bound to `node` (spec.nodeName), in namespace/name order.
    pub fn pods_on(&self, node: &str) -> Vec<Value> {
        self.lock()
            .objects(Resource::Pods)
            .values()
            .filter(|pod| pod["spec"]["nodeName"].as_str() == Some(node))
            .map(|pod| served_pod(pod.clone()))
            .collect()
    }

    /// Sets a pod's `status.phase` through `pods/NAME/status` (a terminal phase also makes
    /// the pod and its containers not ready).
    pub fn set_pod_phase(&self, namespace: &str, name: &str, phase: &str) -> Value {
        let mut target = Target::object(Resource::Pods, Some(namespace), name);
        target.subresource = Some("status".to_string());
        let terminal = matches!(phase, "Succeeded" | "Failed");
        self.helper(|state| {
            let mut pod = state.existing(&target)?;
            pod["status"]["phase"] = json!(phase);
            if terminal {
                for condition in pod["status"]["conditions"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
                        condition["status"] = json!("False");
                        condition["reason"] = json!("PodCompleted");
                    }
                }
                for status in pod["status"]["containerStatuses"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    status["ready"] = json!(false);
                }
            }
            state.update(&target, pod, &Opts::default())
        })
    }

    /// Deletes a pod as `DELETE pods/NAME` without options would (graceful, see
    /// [`ApiServer::set_pod_termination_delay`]); `Err` is the Status a client would get.
    pub fn delete_pod(&self, namespace: &str, name: &str) -> Result<Value, Value> {
        let target = Target::object(Resource::Pods, Some(namespace), name);
        self.helper_result(|state| state.delete(&target, None, &Opts::default()))
    }

    /// Creates a PodDisruptionBudget selecting pods by `match_labels` (a JSON object), with
    /// `spec.maxUnavailable` `disruptions_allowed` (at least 0), and writes its status as the
    /// disruption controller would: `disruptionsAllowed` as given (even negative), the ready
    /// matching pods as `currentHealthy`, `desiredHealthy` = currentHealthy - allowed (at
    /// least 0), `observedGeneration` current.
    pub fn create_pdb(
        &self,
        namespace: &str,
        name: &str,
        match_labels: Value,
        disruptions_allowed: i64,
    ) -> Value {
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": match_labels},
                "maxUnavailable": disruptions_allowed.max(0),
            },
        });
        let target = Target::collection(Resource::PodDisruptionBudgets, Some(namespace));
        self.helper(|state| state.create(&target, body, &Opts::default()));
        self.set_pdb_disruptions_allowed(namespace, name, disruptions_allowed)
    }

    /// Rewrites a PodDisruptionBudget's status for `disruptions_allowed` as
    /// [`ApiServer::create_pdb`] does (recounting the healthy pods; entries of
    /// `disruptedPods` for pods that are gone are dropped); panics if there is no such PDB.
    pub fn set_pdb_disruptions_allowed(
        &self,
        namespace: &str,
        name: &str,
        disruptions_allowed: i64,
    ) -> Value {
        let target = Target::object(Resource::PodDisruptionBudgets, Some(namespace), name);
        self.helper(|state| {
            let old = state.existing(&target)?;
            let mut pdb = old.clone();
            pdb["status"] = state.pdb_status_for(&old, disruptions_allowed);
            set_disruption_allowed_condition(&mut pdb);
            if pdb == old {
                return Ok(Outcome::ok(with_type_meta(
                    old,
                    target.resource,
                    target.group,
                )));
            }
            let stored = state.commit(target.resource, EventType::Modified, pdb, Some(old));
            Ok(Outcome::ok(with_type_meta(
                stored,
                target.resource,
                target.group,
            )))
        })
    }

    /// The stored PodDisruptionBudget, if any.
    pub fn pdb(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock().get_served(&Target::object(
            Resource::PodDisruptionBudgets,
            Some(namespace),
            name,
        ))
    }
}
