//! The pod strategy: defaults, the create and update rules, validation, and the predicates
//! on a pod's phase and readiness.

use serde_json::{json, Value};

use crate::errors::FieldError;
use crate::resource::Target;
use crate::store::copy_field;
use crate::validation::{dns1123_label, dns1123_subdomain};

const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

pub(super) fn set_default(obj: &mut Value, key: &str, value: Value) {
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

pub(super) fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

pub(super) fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// podutil.IsPodReady.
pub(super) fn is_pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}
