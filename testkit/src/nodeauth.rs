//! Node credentials: a kubelet's identity (`system:node:NAME`, groups `system:nodes` and
//! `system:authenticated`), the Node authorizer, RBAC (module `rbac`: the Roles and bindings of
//! the repository's top-level `manifests/*.yaml`, or what a test set), and the NodeRestriction
//! admission plugin, as they apply to the resources this server serves.
//!
//! Authorization is the union of (plugin/pkg/auth/authorizer/node/node_authorizer.go, with
//! the AuthorizeNodeWithSelectors gate of v1.32 on unless
//! [`ApiServer::authorize_node_with_selectors`] turns it off):
//!
//! - the Node authorizer: its own Node (any verb but delete; others' only through RBAC);
//!   Leases: get/create/update/patch/delete (NodeRestriction: only its own, in
//!   `kube-node-lease`);
//!   pods: `get` of pods bound to the node, `list`/`watch` only with the field selector
//!   `spec.nodeName=NODE` (or of one pod bound to it, by `metadata.name`), `create`/`delete`
//!   (NodeRestriction narrows them), `pods/status` update/patch, `pods/eviction` create;
//!   configmaps: `get`/`list`/`watch` of one ConfigMap a pod bound to the node (or the Node's
//!   `spec.configSource`) references; core/v1 events: create/update/patch;
//! - RBAC ([`crate::rbac::Policy`]) for the user `system:node:NAME` and its groups. With the
//!   shipped manifests that is the Role `kubelet-config-reader` (get/list/watch of ConfigMaps
//!   in `kubelet-config`, bound to `system:nodes` in `manifests/10-rbac.yaml`) and nothing
//!   else; [`ApiServer::apply_rbac_manifest`] adds e.g. the opt-in
//!   `manifests/optional/node-rbac-without-node-authorizer.yaml`.
//!
//! Everything else (other Nodes, pods not bound to the node, PodDisruptionBudgets, Namespaces,
//! DaemonSets, ReplicaSets, any resource this server does not serve) is 403 with the real
//! message, plus the Node authorizer's reason where it gives one. NodeRestriction then limits
//! writes: a node may modify only its own Node (not its taints, not its configSource, not
//! `node-restriction.kubernetes.io/` or other non-kubelet `kubernetes.io`/`k8s.io` labels),
//! delete and evict only pods bound to it, update the status only of pods bound to it, and
//! create only mirror pods of itself.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::errors::ApiError;
use crate::rbac::{Policy, Request, User};
use crate::resource::{Resource, Target};
use crate::store::State;
use crate::{ApiServer, INSECURE_PORT_USER};

/// The annotation that makes a pod a mirror pod (of a static pod).
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The namespace of node Leases (NodeRestriction keeps a node's Lease writes there).
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Who made a request.
pub(crate) enum Identity {
    /// The default token's user, or the insecure port's.
    User(String),
    /// A node's credentials.
    Node(String),
    /// No credentials with `require_token`.
    Anonymous,
}

impl Identity {
    /// The user name, `None` for the anonymous user.
    pub(crate) fn user(&self) -> Option<String> {
        match self {
            Identity::User(user) => Some(user.clone()),
            Identity::Node(node) => Some(node_user(node)),
            Identity::Anonymous => None,
        }
    }

    pub(crate) fn node(&self) -> Option<&str> {
        match self {
            Identity::Node(node) => Some(node),
            _ => None,
        }
    }
}

/// The user name of a node's credentials.
pub(crate) fn node_user(node: &str) -> String {
    format!("system:node:{node}")
}

/// Bearer token authentication: 401 for a token that is neither the default one nor a node's.
pub(crate) fn authenticate(
    state: &State,
    authorization: Option<&str>,
    client_cn: Option<&str>,
) -> Result<Identity, ApiError> {
    let Some(value) = authorization else {
        // A verified client certificate (HTTPS): its Common Name, as kube-apiserver's x509
        // authenticator; `system:node:NAME` is the node NAME.
        if let Some(cn) = client_cn {
            return match cn.strip_prefix("system:node:") {
                Some(node) => Ok(Identity::Node(node.to_string())),
                None if cn == state.user => Ok(Identity::User(cn.to_string())),
                None => Err(ApiError::unauthorized()),
            };
        }
        return Ok(if state.require_token {
            Identity::Anonymous
        } else {
            Identity::User(INSECURE_PORT_USER.to_string())
        });
    };
    let token = value
        .strip_prefix("Bearer ")
        .map(str::trim)
        .ok_or_else(ApiError::unauthorized)?;
    if token == state.token {
        return Ok(Identity::User(state.user.clone()));
    }
    state
        .node_tokens
        .get(token)
        .map(|node| Identity::Node(node.clone()))
        .ok_or_else(ApiError::unauthorized)
}

/// One field selector requirement: field, `=`/`==` (true) or `!=` (false), value.
type FieldRequirement = (String, bool, String);

/// The authorizer.Attributes of a resource request.
pub(crate) struct Attrs {
    verb: String,
    group: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
    fields: Vec<FieldRequirement>,
}

fn field_requirements(query: &HashMap<String, String>) -> Vec<FieldRequirement> {
    let Some(text) = query.get("fieldSelector") else {
        return Vec::new();
    };
    text.split(',')
        .filter_map(|term| {
            let term = term.trim();
            if let Some((key, value)) = term.split_once("!=") {
                return Some((key.trim().to_string(), false, value.trim().to_string()));
            }
            term.split_once("==")
                .or_else(|| term.split_once('='))
                .map(|(key, value)| (key.trim().to_string(), true, value.trim().to_string()))
        })
        .collect()
}

impl Attrs {
    fn build(
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
        query: &HashMap<String, String>,
    ) -> Attrs {
        let fields = field_requirements(query);
        let mut name = name.to_string();
        if name.is_empty() && (verb == "list" || verb == "watch") {
            // RequestInfo takes the name of a list or watch from `metadata.name=NAME`.
            if let Some((_, _, value)) = fields
                .iter()
                .find(|(field, equals, _)| field == "metadata.name" && *equals)
            {
                name = value.clone();
            }
        }
        Attrs {
            verb: verb.to_string(),
            group: group.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            namespace: namespace.to_string(),
            name,
            fields,
        }
    }

    /// The attributes of a request to a served resource.
    pub(crate) fn new(verb: &str, target: &Target, query: &HashMap<String, String>) -> Attrs {
        // `/api/v1/namespaces/NAME` is in the namespace NAME for the authorizer.
        let namespace = match (target.resource, &target.name) {
            (Resource::Namespaces, Some(name)) => name.clone(),
            _ => target.namespace.clone().unwrap_or_default(),
        };
        Attrs::build(
            verb,
            target.group.group(),
            target.resource.plural(),
            target.subresource.as_deref().unwrap_or(""),
            &namespace,
            target.name(),
            query,
        )
    }

    /// The attributes of a request to any resource path (`/api/v1/...`, `/apis/G/V/...`),
    /// as the RequestInfo resolver parses it; `None` for a non-resource path.
    pub(crate) fn from_path(
        method: &str,
        path: &str,
        query: &HashMap<String, String>,
        watch: bool,
    ) -> Option<Attrs> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, rest) = match segments.as_slice() {
            ["api", "v1", rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return None,
        };
        let (namespace, parts) = match rest {
            ["namespaces", ns, parts @ ..] if !parts.is_empty() => (*ns, parts),
            ["namespaces", ns] => (*ns, rest),
            [] => return None,
            parts => ("", parts),
        };
        let resource = parts[0];
        let name = parts.get(1).copied().unwrap_or("");
        let subresource = parts.get(2).copied().unwrap_or("");
        let verb = match method {
            "GET" if watch => "watch",
            "GET" if name.is_empty() => "list",
            "GET" => "get",
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" if name.is_empty() => "deletecollection",
            "DELETE" => "delete",
            _ => return None,
        };
        Some(Attrs::build(
            verb,
            group,
            resource,
            subresource,
            namespace,
            name,
            query,
        ))
    }

    /// The authorizer's 403 (`responsewriters.Forbidden`), with the reason, if any, appended.
    pub(crate) fn forbidden(&self, user: &str, reason: &str) -> ApiError {
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let scope = if self.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", self.namespace)
        };
        let mut why = format!(
            "User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            self.verb, self.group
        );
        if !reason.is_empty() {
            why.push_str(": ");
            why.push_str(reason);
        }
        forbidden(&self.group, &self.resource, &self.name, &why)
    }

    /// What RBAC looks at.
    fn rbac_request(&self) -> Request {
        Request {
            verb: self.verb.clone(),
            api_group: self.group.clone(),
            resource: self.resource.clone(),
            subresource: self.subresource.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    fn is(&self, group: &str, resource: &str, subresource: &str) -> bool {
        self.group == group && self.resource == resource && self.subresource == subresource
    }

    fn verb_in(&self, verbs: &[&str]) -> bool {
        verbs.contains(&self.verb.as_str())
    }
}

/// `apierrors.NewForbidden(groupResource, name, why)`.
fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let message = if name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} \"{name}\" is forbidden: {why}")
    };
    let mut details = json!({"kind": resource});
    if !name.is_empty() {
        details["name"] = json!(name);
    }
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    ApiError::new(403, "Forbidden", message).with_details(details)
}

/// `admission.NewForbidden` for a request to `target` about the object `name`.
fn admission_forbidden(target: &Target, name: &str, why: &str) -> ApiError {
    forbidden(target.group.group(), target.resource.plural(), name, why)
}

/// Authorizes a node's request: the Node authorizer, then RBAC; 403 if neither allows it.
pub(crate) fn authorize(state: &State, node: &str, attrs: &Attrs) -> Result<(), ApiError> {
    let (allowed, reason) = node_authorizer(state, node, attrs);
    if allowed || state.rbac.allows(&User::node(node), &attrs.rbac_request()) {
        return Ok(());
    }
    Err(attrs.forbidden(&node_user(node), &reason))
}

/// The Node authorizer's decision (allow, or no opinion with a reason).
fn node_authorizer(state: &State, node: &str, a: &Attrs) -> (bool, String) {
    let allow = (true, String::new());
    let no_opinion = |reason: &str| (false, reason.to_string());
    match (a.group.as_str(), a.resource.as_str()) {
        ("", "configmaps") => {
            if !a.verb_in(&["get", "list", "watch"]) {
                return no_opinion("can only read resources of this type");
            }
            if !a.subresource.is_empty() {
                return no_opinion("cannot read subresource");
            }
            if a.namespace.is_empty() {
                return no_opinion("can only read namespaced object of this type");
            }
            graph(state, node, a, configmap_related)
        }
        ("", "nodes") if state.node_selectors => match (a.subresource.as_str(), a.verb.as_str()) {
            ("", "create" | "update" | "patch") => allow,
            ("", "get" | "list" | "watch") => {
                if a.name == node {
                    allow
                } else if a.name.is_empty() {
                    no_opinion(&format!(
                        "node '{node}' cannot read all nodes, only its own Node object"
                    ))
                } else {
                    no_opinion(&format!(
                        "node '{node}' cannot read '{}', only its own Node object",
                        a.name
                    ))
                }
            }
            ("status", "update" | "patch") => allow,
            _ => no_opinion(""),
        },
        ("", "pods") if state.node_selectors => match (a.subresource.as_str(), a.verb.as_str()) {
            ("", "get") => graph(state, node, a, pod_related),
            ("", "list" | "watch") => {
                let scoped = a.fields.iter().any(|(field, equals, value)| {
                    field == "spec.nodeName" && *equals && value == node
                });
                if scoped {
                    allow
                } else if !a.name.is_empty() {
                    graph(state, node, a, pod_related)
                } else {
                    no_opinion("can only list/watch pods with spec.nodeName field selector")
                }
            }
            ("", "create" | "delete") => allow,
            ("status", "update" | "patch") => allow,
            ("eviction", "create") => allow,
            _ => no_opinion(""),
        },
        _ => (node_rules(a), String::new()),
    }
}

/// The statically defined node rules (bootstrappolicy.NodeRules) for the served resources.
fn node_rules(a: &Attrs) -> bool {
    (a.is("", "nodes", "") && a.verb_in(&["create", "get", "list", "watch", "update", "patch"]))
        || (a.is("", "nodes", "status") && a.verb_in(&["update", "patch"]))
        || (a.is("", "events", "") && a.verb_in(&["create", "update", "patch"]))
        || (a.is("", "pods", "") && a.verb_in(&["get", "list", "watch", "create", "delete"]))
        || (a.is("", "pods", "status") && a.verb_in(&["update", "patch"]))
        || (a.is("", "pods", "eviction") && a.verb == "create")
        || (a.is("coordination.k8s.io", "leases", "")
            && a.verb_in(&["get", "create", "update", "patch", "delete"]))
}

/// The Node authorizer's graph walk: is the named object related to the node?
fn graph(
    state: &State,
    node: &str,
    a: &Attrs,
    related: fn(&State, &str, &str, &str) -> bool,
) -> (bool, String) {
    if a.name.is_empty() {
        return (false, "No Object name found".to_string());
    }
    let node_exists = state
        .objects(Resource::Nodes)
        .contains_key(&(String::new(), node.to_string()));
    if node_exists && related(state, node, &a.namespace, &a.name) {
        (true, String::new())
    } else {
        (
            false,
            format!("no relationship found between node '{node}' and this object"),
        )
    }
}

fn pod_related(state: &State, node: &str, namespace: &str, name: &str) -> bool {
    state
        .objects(Resource::Pods)
        .get(&(namespace.to_string(), name.to_string()))
        .is_some_and(|pod| pod["spec"]["nodeName"].as_str() == Some(node))
}

/// A ConfigMap is related to a node through a pod bound to it that references it, or
/// through the Node's `spec.configSource`.
fn configmap_related(state: &State, node: &str, namespace: &str, name: &str) -> bool {
    let source = state
        .objects(Resource::Nodes)
        .get(&(String::new(), node.to_string()))
        .and_then(|n| n.pointer("/spec/configSource/configMap"))
        .cloned()
        .unwrap_or(Value::Null);
    if source["namespace"].as_str() == Some(namespace) && source["name"].as_str() == Some(name) {
        return true;
    }
    state
        .objects(Resource::Pods)
        .iter()
        .filter(|((ns, _), pod)| ns == namespace && pod["spec"]["nodeName"].as_str() == Some(node))
        .any(|(_, pod)| references(pod, "configMap").contains(&name.to_string()))
}

/// The names of the ConfigMaps (`kind` "configMap") or Secrets ("secret") a pod references in
/// its volumes and its containers' environment.
fn references(pod: &Value, kind: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut push = |value: &Value| {
        if let Some(name) = value.as_str() {
            names.push(name.to_string());
        }
    };
    let volume_key = if kind == "secret" {
        "secretName"
    } else {
        "name"
    };
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        push(&volume[kind][volume_key]);
        for source in volume["projected"]["sources"]
            .as_array()
            .into_iter()
            .flatten()
        {
            push(&source[kind]["name"]);
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for container in pod["spec"][list].as_array().into_iter().flatten() {
            for env in container["envFrom"].as_array().into_iter().flatten() {
                push(&env[format!("{kind}Ref")]["name"]);
            }
            for env in container["env"].as_array().into_iter().flatten() {
                push(&env["valueFrom"][format!("{kind}KeyRef")]["name"]);
            }
        }
    }
    if kind == "secret" {
        for secret in pod["spec"]["imagePullSecrets"]
            .as_array()
            .into_iter()
            .flatten()
        {
            push(&secret["name"]);
        }
    }
    names
}

// ------------------------------------------------------------------------------------------
// NodeRestriction admission
// ------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------
// Public API
// ------------------------------------------------------------------------------------------

impl ApiServer {
    /// The bearer token of `node`'s credentials (the same on every call): it authenticates as
    /// `system:node:NODE` in the groups `system:nodes` and `system:authenticated`, and is
    /// authorized like a kubelet's credentials by the Node authorizer, NodeRestriction and
    /// RBAC from the repository's top-level `manifests/*.yaml` (see the crate docs and
    /// [`ApiServer::apply_rbac_manifest`]). The node need not exist.
    pub fn node_token(&self, node: &str) -> String {
        let mut state = self.lock();
        if let Some((token, _)) = state.node_tokens.iter().find(|(_, n)| *n == node) {
            return token.clone();
        }
        let random: String = (0..16)
            .map(|_| format!("{:x}", rand::random::<u8>() & 15))
            .collect();
        let token = format!("kubelet-pivot-node-token.{random}");
        state.node_tokens.insert(token.clone(), node.to_string());
        token
    }

    /// Rotates `node`'s bearer token: the old one is refused (401) from now on, and the new
    /// one (returned) authenticates as the node.
    pub fn rotate_node_token(&self, node: &str) -> String {
        self.lock().node_tokens.retain(|_, n| n != node);
        self.node_token(node)
    }

    /// Writes a kubeconfig for this server whose user reads its bearer token from
    /// `token_file` (`tokenFile`), as a kubelet's credentials written by a provisioner are.
    pub fn write_token_file_kubeconfig(&self, path: &Path, token_file: &Path) {
        self.write_kubeconfig_for_user(path, &format!("tokenFile: {}", token_file.display()));
    }

    /// Writes a kubeconfig with `node`'s credentials ([`ApiServer::node_token`]) to `path`, in
    /// the format of [`ApiServer::write_kubeconfig`].
    pub fn write_node_kubeconfig(&self, path: &Path, node: &str) {
        let token = self.node_token(node);
        self.write_kubeconfig_with(path, &token);
    }

    /// Writes a kubeconfig with `node`'s credentials to `<dir>/kubeconfig-node-NODE` and
    /// returns its path.
    pub fn node_kubeconfig_in(&self, dir: &Path, node: &str) -> PathBuf {
        let path = dir.join(format!("kubeconfig-node-{node}"));
        self.write_node_kubeconfig(&path, node);
        path
    }

    /// The AuthorizeNodeWithSelectors feature gate of the Node authorizer: `true` (the
    /// default, as on v1.32 servers) restricts a node's pod reads to pods bound to it (`get`
    /// of such a pod, `list`/`watch` with the field selector `spec.nodeName=NODE`); `false`
    /// (an older server) lets a node get, list and watch every pod.
    pub fn authorize_node_with_selectors(&self, enabled: bool) {
        self.lock().node_selectors = enabled;
    }

    /// Adds the RBAC objects (Roles, ClusterRoles and their bindings) of a manifest file to
    /// the policy that authorizes node credentials, as `kubectl apply -f FILE` on top of the
    /// shipped manifests would; e.g. [`crate::rbac::manifests_dir`]`().join("optional/...")`.
    /// Panics if the file cannot be read or holds an RBAC object the API server would refuse.
    pub fn apply_rbac_manifest(&self, path: &Path) {
        let mut state = self.lock();
        Arc::make_mut(&mut state.rbac)
            .apply_file(path)
            .unwrap_or_else(|err| panic!("apply_rbac_manifest: {err}"));
    }

    /// Replaces the RBAC policy that authorizes node credentials (by default the repository's
    /// top-level manifests, [`Policy::shipped`]); [`Policy::empty`] leaves nodes nothing but
    /// the Node authorizer.
    pub fn set_rbac(&self, policy: Policy) {
        self.lock().rbac = Arc::new(policy);
    }

    /// The RBAC policy that authorizes node credentials.
    pub fn rbac(&self) -> Policy {
        Policy::clone(&self.lock().rbac)
    }
}
