//! The NodeRestriction admission plugin.

use serde_json::Value;

use crate::errors::ApiError;
use crate::resource::{Resource, Target};
use crate::store::State;

use super::authorizer::{admission_forbidden, references};
use super::{MIRROR_POD_ANNOTATION, NODE_LEASE_NAMESPACE};

fn labels(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["labels"]
        .as_object()
        .map(|map| {
            map.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(namespace, _)| namespace)
}

fn in_namespace(namespace: &str, suffix: &str) -> bool {
    namespace == suffix || namespace.ends_with(&format!(".{suffix}"))
}

/// kubeletapis.IsKubeletLabel.
fn is_kubelet_label(key: &str) -> bool {
    const KUBELET_LABELS: [&str; 11] = [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    ];
    let namespace = label_namespace(key);
    KUBELET_LABELS.contains(&key)
        || in_namespace(namespace, "kubelet.kubernetes.io")
        || in_namespace(namespace, "node.kubernetes.io")
}

/// The modified labels a node may not set (sorted, as sets.String.List()).
fn forbidden_labels(new: &Value, old: Option<&Value>) -> Vec<String> {
    let new = labels(new);
    let old = old.map(labels).unwrap_or_default();
    let mut modified: Vec<String> = new
        .iter()
        .filter(|pair| !old.contains(pair))
        .chain(old.iter().filter(|pair| !new.contains(pair)))
        .map(|(key, _)| key.clone())
        .filter(|key| {
            let namespace = label_namespace(key);
            let kubernetes =
                in_namespace(namespace, "kubernetes.io") || in_namespace(namespace, "k8s.io");
            in_namespace(namespace, "node-restriction.kubernetes.io")
                || (kubernetes && !is_kubelet_label(key))
        })
        .collect();
    modified.sort();
    modified.dedup();
    modified
}

/// Missing, null and empty lists are the same (apiequality.Semantic).
fn semantic_list(value: Option<&Value>) -> Vec<Value> {
    value.and_then(Value::as_array).cloned().unwrap_or_default()
}

fn admit_node(
    node: &str,
    target: &Target,
    name: &str,
    new: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let deny = |why: String| Err(admission_forbidden(target, name, &why));
    if name != node {
        return deny(format!(
            "node \"{node}\" is not allowed to modify node \"{name}\""
        ));
    }
    let Some(new) = new else { return Ok(()) };
    let config_source = new.pointer("/spec/configSource").filter(|v| !v.is_null());
    match old {
        None => {
            if config_source.is_some() {
                return deny(format!(
                    "node \"{node}\" is not allowed to create pods with a non-nil configSource"
                ));
            }
            let bad = forbidden_labels(new, None);
            if !bad.is_empty() {
                return deny(format!(
                    "node \"{node}\" is not allowed to set the following labels: {}",
                    bad.join(", ")
                ));
            }
        }
        Some(old) => {
            if config_source.is_some()
                && config_source != old.pointer("/spec/configSource").filter(|v| !v.is_null())
            {
                return deny(format!(
                    "node \"{node}\" is not allowed to update configSource to a new non-nil configSource"
                ));
            }
            if semantic_list(new.pointer("/spec/taints"))
                != semantic_list(old.pointer("/spec/taints"))
            {
                return deny(format!("node \"{node}\" is not allowed to modify taints"));
            }
            let bad = forbidden_labels(new, Some(old));
            if !bad.is_empty() {
                return deny(format!(
                    "is not allowed to modify labels: {}",
                    bad.join(", ")
                ));
            }
        }
    }
    Ok(())
}

fn admit_pod_create(
    state: &State,
    node: &str,
    target: &Target,
    pod: &Value,
) -> Result<(), ApiError> {
    let meta = &pod["metadata"];
    let name = meta["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or_else(|| meta["generateName"].as_str().filter(|n| !n.is_empty()))
        .unwrap_or("Unknown");
    let deny = |why: String| Err(admission_forbidden(target, name, &why));
    if meta["annotations"].get(MIRROR_POD_ANNOTATION).is_none() {
        return deny(format!(
            "pod does not have \"{MIRROR_POD_ANNOTATION}\" annotation, node \"{node}\" can only create mirror pods"
        ));
    }
    if pod["spec"]["nodeName"].as_str().unwrap_or("") != node {
        return deny(format!(
            "node \"{node}\" can only create pods with spec.nodeName set to itself"
        ));
    }
    let owners = semantic_list(meta.get("ownerReferences"));
    match owners.as_slice() {
        [] => {
            return deny(format!(
                "node \"{node}\" can only create pods with an owner reference set to itself"
            ))
        }
        [owner] => {
            if owner["apiVersion"] != "v1" || owner["kind"] != "Node" || owner["name"] != node {
                return deny(format!(
                    "node \"{node}\" can only create pods with an owner reference set to itself"
                ));
            }
            if owner["controller"] != true {
                return deny(format!(
                    "node \"{node}\" can only create pods with a controller owner reference set to itself"
                ));
            }
            if owner["blockOwnerDeletion"] == true {
                return deny(format!(
                    "node \"{node}\" must not set blockOwnerDeletion on an owner reference"
                ));
            }
            let node_target = Target::object(Resource::Nodes, None, node);
            let stored = state.existing(&node_target)?;
            let uid = stored["metadata"]["uid"].as_str().unwrap_or("");
            let owner_uid = owner["uid"].as_str().unwrap_or("");
            if owner_uid != uid {
                return deny(format!(
                    "node {node} UID mismatch: expected {owner_uid} got {uid}"
                ));
            }
        }
        _ => {
            return deny(format!(
                "node \"{node}\" can only create pods with a single owner reference set to itself"
            ))
        }
    }
    if pod["spec"]["serviceAccountName"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        return deny(format!(
            "node \"{node}\" can not create pods that reference a service account"
        ));
    }
    if !references(pod, "secret").is_empty() {
        return deny(format!(
            "node \"{node}\" can not create pods that reference secrets"
        ));
    }
    if !references(pod, "configMap").is_empty() {
        return deny(format!(
            "node \"{node}\" can not create pods that reference configmaps"
        ));
    }
    let volumes = semantic_list(pod.pointer("/spec/volumes"));
    if volumes.iter().any(|v| {
        semantic_list(v.pointer("/projected/sources"))
            .iter()
            .any(|s| s.get("clusterTrustBundle").is_some_and(|c| !c.is_null()))
    }) {
        return deny(format!(
            "node \"{node}\" can not create pods that reference clustertrustbundles"
        ));
    }
    if volumes
        .iter()
        .any(|v| v.get("persistentVolumeClaim").is_some_and(|c| !c.is_null()))
    {
        return deny(format!(
            "node \"{node}\" can not create pods that reference persistentvolumeclaims"
        ));
    }
    Ok(())
}

/// NodeRestriction for a node's write of a Lease: only its own, in `kube-node-lease`.
fn admit_lease(node: &str, target: &Target, name: &str) -> Result<(), ApiError> {
    if target.namespace.as_deref() != Some(NODE_LEASE_NAMESPACE) {
        return Err(admission_forbidden(
            target,
            name,
            &format!("can only access leases in the \"{NODE_LEASE_NAMESPACE}\" system namespace"),
        ));
    }
    if name != node {
        return Err(admission_forbidden(
            target,
            name,
            "can only access node lease with the same name as the requesting node",
        ));
    }
    Ok(())
}

/// NodeRestriction for a create by `node`.
pub(crate) fn admit_create(
    state: &State,
    node: &str,
    target: &Target,
    obj: &Value,
) -> Result<(), ApiError> {
    match target.resource {
        Resource::Nodes => {
            let name = obj["metadata"]["name"].as_str().unwrap_or("");
            admit_node(node, target, name, Some(obj), None)
        }
        Resource::Pods => admit_pod_create(state, node, target, obj),
        Resource::Leases => {
            admit_lease(node, target, obj["metadata"]["name"].as_str().unwrap_or(""))
        }
        _ => Ok(()),
    }
}

/// NodeRestriction for an update or patch by `node` (after the patch, before the strategy).
pub(crate) fn admit_update(
    node: &str,
    target: &Target,
    new: &Value,
    old: &Value,
) -> Result<(), ApiError> {
    let name = target.name();
    match (target.resource, target.subresource.as_deref()) {
        (Resource::Nodes, _) => admit_node(node, target, name, Some(new), Some(old)),
        (Resource::Pods, Some("status")) => {
            if old["spec"]["nodeName"].as_str().unwrap_or("") != node {
                return Err(admission_forbidden(
                    target,
                    name,
                    &format!(
                        "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
                    ),
                ));
            }
            if labels(new) != labels(old) {
                return Err(admission_forbidden(
                    target,
                    name,
                    &format!("node \"{node}\" cannot update labels through pod status"),
                ));
            }
            Ok(())
        }
        (Resource::Pods, _) => Err(admission_forbidden(
            target,
            name,
            &format!(
                "unexpected operation \"UPDATE\", node \"{node}\" can only create and delete mirror pods"
            ),
        )),
        (Resource::Leases, _) => admit_lease(node, target, name),
        _ => Ok(()),
    }
}

/// NodeRestriction for a delete by `node` of the stored object `old`.
pub(crate) fn admit_delete(node: &str, target: &Target, old: &Value) -> Result<(), ApiError> {
    let name = target.name();
    match target.resource {
        Resource::Nodes => admit_node(node, target, name, None, None),
        Resource::Leases => admit_lease(node, target, name),
        Resource::Pods if old["spec"]["nodeName"].as_str().unwrap_or("") != node => {
            Err(admission_forbidden(
                target,
                name,
                &format!("node \"{node}\" can only delete pods with spec.nodeName set to itself"),
            ))
        }
        _ => Ok(()),
    }
}

/// NodeRestriction for an eviction by `node` (`target` is `pods/NAME/eviction`): 404 if the
/// pod does not exist, 403 unless it is bound to the node.
pub(crate) fn admit_eviction(state: &State, node: &str, target: &Target) -> Result<(), ApiError> {
    let pod_target = Target {
        subresource: None,
        ..target.clone()
    };
    let pod = state.existing(&pod_target)?;
    if pod["spec"]["nodeName"].as_str().unwrap_or("") != node {
        return Err(admission_forbidden(
            target,
            target.name(),
            &format!("node {node} can only evict pods with spec.nodeName set to itself"),
        ));
    }
    Ok(())
}
