//! Serving the custom resources of established definitions: requests, paths and discovery.

use serde_json::{json, Value};

use crate::discovery::{group_versions_entry, VERBS};
use crate::errors::ApiError;
use crate::resource::{ApiGroup, Resource, Target};
use crate::store::{is_deleting, State};

use super::types::{condition_true, custom_type, group_version, text, versions};

/// What a request to a custom resource needs of its definition.
pub(crate) struct Served<'a> {
    /// The version's `openAPIV3Schema`.
    pub(crate) schema: Option<&'a Value>,
    pub(crate) status_enabled: bool,
    /// The definition is being deleted: no new objects.
    pub(crate) terminating: bool,
}

/// The established definition of `group` serving `version` of `plural`, and that version.
fn find<'a>(
    state: &'a State,
    group: &str,
    version: &str,
    plural: &str,
) -> Option<(&'a Value, &'a Value)> {
    state
        .objects(Resource::CustomResourceDefinitions)
        .values()
        .filter(|crd| {
            text(crd, "/spec/group") == group
                && text(crd, "/status/acceptedNames/plural") == plural
                && condition_true(crd, "Established")
        })
        .find_map(|crd| {
            versions(crd)
                .iter()
                .find(|v| v["name"] == version && v["served"] == Value::Bool(true))
                .map(|v| (crd, v))
        })
}

fn status_enabled(version: &Value) -> bool {
    version
        .pointer("/subresources/status")
        .is_some_and(|s| !s.is_null())
}

/// The definition behind a custom resource target (`None` if it is no longer served).
pub(crate) fn served<'a>(state: &'a State, target: &Target) -> Option<Served<'a>> {
    let (Resource::Custom(custom), ApiGroup::Custom(gv)) = (target.resource, target.group) else {
        return None;
    };
    let (crd, version) = find(state, custom.group, gv.version, custom.plural)?;
    Some(Served {
        schema: version
            .pointer("/schema/openAPIV3Schema")
            .filter(|s| !s.is_null()),
        status_enabled: status_enabled(version),
        terminating: is_deleting(crd),
    })
}

/// Parses `/apis/GROUP/VERSION/[namespaces/NS/]PLURAL[/NAME[/status]]` for a served custom
/// resource.
pub(crate) fn parse_target(state: &State, path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let ["apis", group, version, rest @ ..] = segments.as_slice() else {
        return None;
    };
    let (namespace, plural, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] => (Some(*ns), *plural, tail),
        [plural, tail @ ..] => (None, *plural, tail),
        [] => return None,
    };
    let (crd, served_version) = find(state, group, version, plural)?;
    let custom = custom_type(crd)?;
    if namespace.is_some() && !custom.namespaced {
        return None;
    }
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some(name.to_string()), None),
        [name, "status"] if status_enabled(served_version) => {
            (Some(name.to_string()), Some("status".to_string()))
        }
        _ => return None,
    };
    if custom.namespaced && namespace.is_none() && name.is_some() {
        return None;
    }
    Some(Target {
        group: ApiGroup::Custom(group_version(group, version)),
        resource: Resource::Custom(custom),
        namespace: namespace.map(str::to_string),
        name,
        subresource,
    })
}

/// Kube-aware version priority: GA before beta before alpha, higher numbers first, others
/// last by name.
fn version_order(version: &str) -> (u8, i64, i64, String) {
    let parse = || -> Option<(u8, i64, i64)> {
        let rest = version.strip_prefix('v')?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let major: i64 = rest.get(..digits)?.parse().ok()?;
        let rest = &rest[digits..];
        if rest.is_empty() {
            return Some((3, major, 0));
        }
        let (class, minor) = if let Some(minor) = rest.strip_prefix("beta") {
            (2, minor)
        } else if let Some(minor) = rest.strip_prefix("alpha") {
            (1, minor)
        } else {
            return None;
        };
        Some((class, major, minor.parse().ok()?))
    };
    match parse() {
        Some((class, major, minor)) => (3 - class, -major, -minor, String::new()),
        None => (4, 0, 0, version.to_string()),
    }
}

/// The served versions of each custom group, in priority order.
fn custom_groups(state: &State) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for crd in state.objects(Resource::CustomResourceDefinitions).values() {
        if !condition_true(crd, "Established") {
            continue;
        }
        let group = text(crd, "/spec/group").to_string();
        let served = versions(crd)
            .iter()
            .filter(|v| v["served"] == Value::Bool(true))
            .filter_map(|v| v["name"].as_str().map(str::to_string));
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, list)) => list.extend(served),
            None => groups.push((group, served.collect())),
        }
    }
    for (_, list) in &mut groups {
        list.sort_by_key(|v| version_order(v));
        list.dedup();
    }
    groups.retain(|(_, list)| !list.is_empty());
    groups
}

/// The APIGroup entries of the custom groups, for `/apis`.
pub(crate) fn discovery_groups(state: &State) -> Vec<Value> {
    custom_groups(state)
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<&str> = versions.iter().map(String::as_str).collect();
            group_versions_entry(group, &versions)
        })
        .collect()
}

/// `/apis/GROUP` and `/apis/GROUP/VERSION` of a custom group.
pub(crate) fn discovery(state: &State, path: &str) -> Option<Value> {
    let rest = path.strip_prefix("/apis/")?;
    let (group, version) = match rest.split_once('/') {
        Some((group, version)) => (group, Some(version)),
        None => (rest, None),
    };
    let (_, group_versions) = custom_groups(state).into_iter().find(|(g, _)| g == group)?;
    let Some(version) = version else {
        let listed: Vec<&str> = group_versions.iter().map(String::as_str).collect();
        let mut entry = group_versions_entry(group, &listed);
        entry["kind"] = json!("APIGroup");
        entry["apiVersion"] = json!("v1");
        return Some(entry);
    };
    if !group_versions.iter().any(|v| v == version) {
        return None;
    }
    let mut resources = Vec::new();
    for crd in state.objects(Resource::CustomResourceDefinitions).values() {
        if text(crd, "/spec/group") != group || !condition_true(crd, "Established") {
            continue;
        }
        let Some(served) = versions(crd)
            .iter()
            .find(|v| v["name"] == version && v["served"] == Value::Bool(true))
        else {
            continue;
        };
        let names = &crd["status"]["acceptedNames"];
        let namespaced = text(crd, "/spec/scope") == "Namespaced";
        let kind = names["kind"].clone();
        let mut entry = json!({
            "name": names["plural"],
            "singularName": names["singular"],
            "namespaced": namespaced,
            "kind": kind,
            "verbs": VERBS,
        });
        for list in ["shortNames", "categories"] {
            if names[list].as_array().is_some_and(|l| !l.is_empty()) {
                entry[list] = names[list].clone();
            }
        }
        resources.push(entry);
        if status_enabled(served) {
            resources.push(json!({
                "name": format!("{}/status", names["plural"].as_str().unwrap_or("")),
                "singularName": "",
                "namespaced": namespaced,
                "kind": kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{group}/{version}"),
        "resources": resources,
    }))
}

/// 405 for a create while the definition is being deleted.
pub(crate) fn terminating_error() -> ApiError {
    ApiError::new(
        405,
        "MethodNotAllowed",
        "create not allowed while custom resource definition is terminating",
    )
    .with_details(json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kube() {
        let mut list = vec!["v1alpha1", "v2", "v1beta2", "foo", "v1", "v1beta1", "v10"];
        list.sort_by_key(|v| version_order(v));
        assert_eq!(
            list,
            ["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }
}
