//! The served custom types, interned so that `Resource` and `ApiGroup` stay `Copy`, and
//! what a definition says about them.

use std::sync::Mutex;

use serde_json::Value;

use crate::unpoisoned;

/// The identity of a served custom resource: what a definition says about it. A change of
/// any of these moves the stored objects to the new identity.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct CustomType {
    pub(crate) group: &'static str,
    pub(crate) plural: &'static str,
    pub(crate) singular: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) list_kind: &'static str,
    pub(crate) namespaced: bool,
    /// The storage version (objects are stored with its apiVersion).
    pub(crate) storage: &'static GroupVersion,
}

/// A version of a group (`kubelet-pivot.io/v1alpha1`).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupVersion {
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
    pub(crate) api_version: &'static str,
}

static TYPES: Mutex<Vec<&'static CustomType>> = Mutex::new(Vec::new());
static VERSIONS: Mutex<Vec<&'static GroupVersion>> = Mutex::new(Vec::new());
static STRINGS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// Interned strings: the few names of the definitions tests create, kept for the process.
fn leak(text: &str) -> &'static str {
    let mut strings = unpoisoned::lock(&STRINGS);
    if let Some(found) = strings.iter().find(|s| **s == text) {
        return found;
    }
    let leaked: &'static str = Box::leak(text.to_string().into_boxed_str());
    strings.push(leaked);
    leaked
}

fn intern<T: PartialEq + 'static>(pool: &Mutex<Vec<&'static T>>, value: T) -> &'static T {
    let mut pool = unpoisoned::lock(pool);
    if let Some(found) = pool.iter().find(|known| ***known == value) {
        return found;
    }
    let leaked: &'static T = Box::leak(Box::new(value));
    pool.push(leaked);
    leaked
}

pub(crate) fn group_version(group: &str, version: &str) -> &'static GroupVersion {
    intern(
        &VERSIONS,
        GroupVersion {
            group: leak(group),
            version: leak(version),
            api_version: leak(&format!("{group}/{version}")),
        },
    )
}

pub(super) fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

pub(super) fn versions(crd: &Value) -> &[Value] {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

pub(super) fn storage_version(crd: &Value) -> Option<&str> {
    versions(crd)
        .iter()
        .find(|v| v["storage"] == Value::Bool(true))
        .and_then(|v| v["name"].as_str())
}

/// The served identity of a (valid, stored) definition.
pub(crate) fn custom_type(crd: &Value) -> Option<&'static CustomType> {
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    let kind = text(crd, "/spec/names/kind");
    let storage = storage_version(crd)?;
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return None;
    }
    Some(intern(
        &TYPES,
        CustomType {
            group: leak(group),
            plural: leak(plural),
            singular: leak(text(crd, "/spec/names/singular")),
            kind: leak(kind),
            list_kind: leak(text(crd, "/spec/names/listKind")),
            namespaced: text(crd, "/spec/scope") == "Namespaced",
            storage: group_version(group, storage),
        },
    ))
}

pub(super) fn condition_true(crd: &Value, kind: &str) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_gives_one_type_per_identity() {
        let a = group_version("example.com", "v1");
        let b = group_version("example.com", "v1");
        assert!(std::ptr::eq(a, b));
        assert_eq!(a.api_version, "example.com/v1");
    }
}
