//! Request bodies into stored objects: apiVersion and kind checks, the Go decoder's type
//! errors, unknown fields (dropped and reported per `fieldValidation`), type meta on the way
//! out.

use serde_json::{json, Value};

use crate::configmaps::{base64_error, CONFIGMAP};
use crate::errors::ApiError;
use crate::events::{rename_event_fields, EVENT_CORE, EVENT_V1};
use crate::nodes::NODE;
use crate::resource::{ApiGroup, Resource, Target};
use crate::store::{FieldValidation, Opts};
use crate::{crd, leases, pods};

/// What the decoder knows of a kind's fields (unknown ones are dropped and reported).
pub(crate) enum Shape {
    Any,
    Fields(&'static [(&'static str, Shape)]),
    /// An object with the fields of another table.
    Nested(&'static Shape),
    /// A list of objects with the fields of another table.
    ListOf(&'static Shape),
    /// A map whose values are objects with the fields of another table.
    MapOf(&'static Shape),
}

pub(crate) static OBJECT_META: Shape = Shape::Fields(&[
    ("name", Shape::Any),
    ("generateName", Shape::Any),
    ("namespace", Shape::Any),
    ("selfLink", Shape::Any),
    ("uid", Shape::Any),
    ("resourceVersion", Shape::Any),
    ("generation", Shape::Any),
    ("creationTimestamp", Shape::Any),
    ("deletionTimestamp", Shape::Any),
    ("deletionGracePeriodSeconds", Shape::Any),
    ("labels", Shape::Any),
    ("annotations", Shape::Any),
    ("ownerReferences", Shape::Any),
    ("finalizers", Shape::Any),
    ("managedFields", Shape::Any),
]);

static NAMESPACE: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("spec", Shape::Any),
    ("status", Shape::Any),
]);

fn shape_for(target: &Target) -> &'static Shape {
    match (target.resource, target.group) {
        (Resource::Nodes, _) => &NODE,
        (Resource::ConfigMaps, _) => &CONFIGMAP,
        (Resource::Namespaces, _) => &NAMESPACE,
        (Resource::Events, ApiGroup::EventsV1) => &EVENT_V1,
        (Resource::Events, _) => &EVENT_CORE,
        (Resource::Pods, _) => &pods::POD,
        (Resource::PodDisruptionBudgets, _) => &pods::PDB,
        (Resource::Leases, _) => &leases::LEASE,
        (Resource::CustomResourceDefinitions, _) => &crd::CRD,
        // Pruned against the definition's schema instead (module `custom`).
        (Resource::Custom(_), _) => &Shape::Any,
    }
}

/// Removes fields the kind does not have, recording their paths (`spec.foo`,
/// `status.conditions[0].bar`), as the strict JSON decoder reports them.
pub(crate) fn strip_unknown(
    value: &mut Value,
    shape: &Shape,
    prefix: &str,
    unknown: &mut Vec<String>,
) {
    match (shape, value) {
        (Shape::Any, _) => {}
        (Shape::Fields(fields), Value::Object(map)) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                match fields.iter().find(|(name, _)| *name == key) {
                    Some((_, inner)) => {
                        if let Some(child) = map.get_mut(&key) {
                            strip_unknown(child, inner, &path, unknown);
                        }
                    }
                    None => {
                        map.remove(&key);
                        unknown.push(path);
                    }
                }
            }
        }
        (Shape::ListOf(inner), Value::Array(items)) => {
            for (i, item) in items.iter_mut().enumerate() {
                strip_unknown(item, inner, &format!("{prefix}[{i}]"), unknown);
            }
        }
        (Shape::Nested(inner), value) => strip_unknown(value, inner, prefix, unknown),
        (Shape::MapOf(inner), Value::Object(map)) => {
            for (key, child) in map.iter_mut() {
                strip_unknown(child, inner, &format!("{prefix}.{key}"), unknown);
            }
        }
        _ => {}
    }
}

/// Server-side field validation of the unknown fields found while decoding: the warnings
/// (Warn), none (Ignore), or the 400 of Strict.
pub(crate) fn unknown_fields(
    unknown: &[String],
    validation: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let list: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match validation {
        FieldValidation::Strict if !list.is_empty() => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            list.join(", ")
        ))),
        FieldValidation::Warn => Ok(list),
        _ => Ok(Vec::new()),
    }
}

pub(crate) fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The JSON type errors the Go decoder would report, as `json: cannot unmarshal ...`.
pub(crate) fn check_types(obj: &Value, kind: &str) -> Result<(), String> {
    let unmarshal = |value: &Value, field: &str, want: &str| {
        Err(format!(
            "json: cannot unmarshal {} into Go struct field {field} of type {want}",
            go_type(value)
        ))
    };
    let string_map = |value: Option<&Value>, field: &str| -> Result<(), String> {
        match value {
            None | Some(Value::Null) => Ok(()),
            Some(Value::Object(map)) => match map.values().find(|v| !v.is_string()) {
                Some(bad) => unmarshal(bad, field, "string"),
                None => Ok(()),
            },
            Some(other) => unmarshal(other, field, "map[string]string"),
        }
    };
    let meta = &obj["metadata"];
    if !meta.is_null() && !meta.is_object() {
        return unmarshal(meta, &format!("{kind}.metadata"), "v1.ObjectMeta");
    }
    for field in [
        "name",
        "generateName",
        "namespace",
        "resourceVersion",
        "uid",
    ] {
        if let Some(value) = meta.get(field).filter(|v| !v.is_null() && !v.is_string()) {
            return unmarshal(value, &format!("ObjectMeta.metadata.{field}"), "string");
        }
    }
    string_map(meta.get("labels"), "ObjectMeta.metadata.labels")?;
    string_map(meta.get("annotations"), "ObjectMeta.metadata.annotations")?;
    match meta.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            if let Some(bad) = items.iter().find(|v| !v.is_string()) {
                return unmarshal(bad, "ObjectMeta.metadata.finalizers", "string");
            }
        }
        Some(other) => return unmarshal(other, "ObjectMeta.metadata.finalizers", "[]string"),
    }
    match kind {
        "ConfigMap" => {
            string_map(obj.get("data"), "ConfigMap.data")?;
            string_map(obj.get("binaryData"), "ConfigMap.binaryData")?;
            if let Some(Value::Object(map)) = obj.get("binaryData") {
                for value in map.values() {
                    if let Some(at) = value.as_str().and_then(base64_error) {
                        return Err(format!("illegal base64 data at input byte {at}"));
                    }
                }
            }
            if let Some(value) = obj
                .get("immutable")
                .filter(|v| !v.is_null() && !v.is_boolean())
            {
                return unmarshal(value, "ConfigMap.immutable", "bool");
            }
        }
        "Node" => {
            for field in ["spec", "status"] {
                if let Some(value) = obj.get(field).filter(|v| !v.is_null() && !v.is_object()) {
                    return unmarshal(
                        value,
                        &format!("Node.{field}"),
                        &format!("v1.Node{}", capitalize(field)),
                    );
                }
            }
            if let Some(value) = obj
                .pointer("/spec/unschedulable")
                .filter(|v| !v.is_null() && !v.is_boolean())
            {
                return unmarshal(value, "NodeSpec.spec.unschedulable", "bool");
            }
            for list in ["conditions", "addresses"] {
                match obj.pointer(&format!("/status/{list}")) {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(items)) => {
                        if let Some(bad) = items.iter().find(|v| !v.is_object()) {
                            return unmarshal(
                                bad,
                                &format!("NodeStatus.status.{list}"),
                                "v1.NodeCondition",
                            );
                        }
                    }
                    Some(other) => {
                        return unmarshal(
                            other,
                            &format!("NodeStatus.status.{list}"),
                            "[]v1.NodeCondition",
                        )
                    }
                }
            }
        }
        "Pod" | "PodDisruptionBudget" => pods::check_types(obj, kind)?,
        "Lease" => leases::check_types(obj)?,
        "CustomResourceDefinition" => crd::check_types(obj)?,
        _ => {}
    }
    Ok(())
}

pub(crate) fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Checks and normalises a request body (or a patched object) into the stored core/v1 form.
pub(crate) fn decode_body(
    target: &Target,
    body: Value,
    opts: &Opts,
) -> Result<(Value, Vec<String>), ApiError> {
    let kind = target.resource.kind();
    let cannot = |why: String| {
        ApiError::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: {why}"
        ))
    };
    if !body.is_object() {
        return Err(cannot(format!(
            "json: cannot unmarshal {} into Go value of type v1.{kind}",
            go_type(&body)
        )));
    }
    let api_version = target.group.api_version();
    if let Some(found) = body.get("apiVersion").and_then(Value::as_str) {
        if !found.is_empty() && found != api_version {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({found}) does not match the expected API version ({api_version})"
            )));
        }
    }
    if let Some(found) = body.get("kind").and_then(Value::as_str) {
        if !found.is_empty() && found != kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({found}) does not match the expected kind ({kind})"
            )));
        }
    }
    check_types(&body, kind).map_err(cannot)?;
    let mut obj = body;
    let mut unknown = Vec::new();
    strip_unknown(&mut obj, shape_for(target), "", &mut unknown);
    let warnings = unknown_fields(&unknown, opts.validation)?;
    if target.resource == Resource::Events && target.group == ApiGroup::EventsV1 {
        obj = rename_event_fields(obj, false);
    }
    if let Some(map) = obj.as_object_mut() {
        map.insert(
            "apiVersion".to_string(),
            json!(target.resource.home_group().api_version()),
        );
        map.insert("kind".to_string(), json!(kind));
        if !map.get("metadata").is_some_and(Value::is_object) {
            map.insert("metadata".to_string(), json!({}));
        }
    }
    Ok((obj, warnings))
}

/// The stored (core/v1) object as served through `group`.
pub(crate) fn with_type_meta(obj: Value, resource: Resource, group: ApiGroup) -> Value {
    let mut obj = if resource == Resource::Events && group == ApiGroup::EventsV1 {
        rename_event_fields(obj, true)
    } else {
        obj
    };
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".to_string(), json!(group.api_version()));
        map.insert("kind".to_string(), json!(resource.kind()));
    }
    obj
}
