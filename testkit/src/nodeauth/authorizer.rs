//! The Node authorizer (plugin/pkg/auth/authorizer/node), then RBAC.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::errors::ApiError;
use crate::rbac::{Request, User};
use crate::resource::{Resource, Target};
use crate::store::State;

use super::identity::node_user;

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
pub(super) fn admission_forbidden(target: &Target, name: &str, why: &str) -> ApiError {
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
pub(super) fn references(pod: &Value, kind: &str) -> Vec<String> {
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
