//! Discovery: /version and the legacy discovery documents of the built-in groups (those of
//! CustomResourceDefinitions come from module `crd`).

use serde_json::{json, Value};

use crate::crd;
use crate::resource::{ApiGroup, Resource};
use crate::store::State;

/// The server version reported by /version.
const SERVER_MAJOR: &str = "1";

const SERVER_MINOR: &str = "32";

const SERVER_GIT_VERSION: &str = "v1.32.4";

pub(crate) const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

pub(crate) fn version_info() -> Value {
    json!({
        "major": SERVER_MAJOR,
        "minor": SERVER_MINOR,
        "gitVersion": SERVER_GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

fn resource_entry(resource: Resource) -> Value {
    let mut entry = json!({
        "name": resource.plural(),
        "singularName": resource.kind().to_lowercase(),
        "namespaced": resource.namespaced(),
        "kind": resource.kind(),
        "verbs": VERBS,
    });
    if !resource.short_names().is_empty() {
        entry["shortNames"] = json!(resource.short_names());
    }
    match resource {
        Resource::Pods => entry["categories"] = json!(["all"]),
        Resource::CustomResourceDefinitions => entry["categories"] = json!(["api-extensions"]),
        _ => {}
    }
    entry
}

/// The discovery entry of a `status` subresource.
fn status_entry(resource: Resource) -> Value {
    json!({
        "name": format!("{}/status", resource.plural()),
        "singularName": "",
        "namespaced": resource.namespaced(),
        "kind": resource.kind(),
        "verbs": ["get", "patch", "update"],
    })
}

/// An APIGroup entry: the group with its versions, the first one preferred.
pub(crate) fn group_versions_entry(group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|version| {
            let group_version = if group.is_empty() {
                version.to_string()
            } else {
                format!("{group}/{version}")
            };
            json!({"groupVersion": group_version, "version": version})
        })
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

fn group_entry(group: ApiGroup) -> Value {
    group_versions_entry(group.group(), &["v1"])
}

/// The built-in groups besides the core one.
const GROUPS: [ApiGroup; 4] = [
    ApiGroup::EventsV1,
    ApiGroup::PolicyV1,
    ApiGroup::CoordinationV1,
    ApiGroup::ApiextensionsV1,
];

/// The legacy discovery documents (also the answer to aggregated-discovery requests, which
/// clients then parse as legacy because of the plain `application/json` content type);
/// the groups of CustomResourceDefinitions come from module `crd`.
pub(crate) fn discovery(state: &State, path: &str, host: &str) -> Option<Value> {
    Some(match path {
        "/api" => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        }),
        "/api/v1" => json!({
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                resource_entry(Resource::ConfigMaps),
                resource_entry(Resource::Events),
                resource_entry(Resource::Namespaces),
                resource_entry(Resource::Nodes),
                status_entry(Resource::Nodes),
                resource_entry(Resource::Pods),
                {
                    "name": "pods/eviction",
                    "singularName": "",
                    "namespaced": true,
                    "group": "policy",
                    "version": "v1",
                    "kind": "Eviction",
                    "verbs": ["create"],
                },
                status_entry(Resource::Pods),
            ],
        }),
        "/apis" => {
            let mut groups: Vec<Value> = GROUPS.iter().map(|g| group_entry(*g)).collect();
            groups.extend(crd::discovery_groups(state));
            json!({
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": groups,
            })
        }
        _ => {
            let group = GROUPS
                .into_iter()
                .find(|g| path.strip_prefix("/apis/") == Some(g.group()))
                .map(|g| {
                    let mut entry = group_entry(g);
                    entry["kind"] = json!("APIGroup");
                    entry["apiVersion"] = json!("v1");
                    entry
                });
            if group.is_some() {
                return group;
            }
            let Some(group) = GROUPS
                .into_iter()
                .find(|g| path.strip_prefix("/apis/") == Some(g.api_version()))
            else {
                return crd::discovery(state, path);
            };
            let resources: Vec<Value> = match group {
                ApiGroup::PolicyV1 => vec![
                    resource_entry(Resource::PodDisruptionBudgets),
                    status_entry(Resource::PodDisruptionBudgets),
                ],
                ApiGroup::CoordinationV1 => vec![resource_entry(Resource::Leases)],
                ApiGroup::ApiextensionsV1 => vec![
                    resource_entry(Resource::CustomResourceDefinitions),
                    status_entry(Resource::CustomResourceDefinitions),
                ],
                _ => vec![resource_entry(Resource::Events)],
            };
            json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": group.api_version(),
                "resources": resources,
            })
        }
    })
}
