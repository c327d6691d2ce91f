//! PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch (the merge keys of
//! k8s.io/api and its directives) and JSON patch (RFC 6902).

use serde_json::{json, Map, Value};

use crate::decode::go_type;
use crate::errors::ApiError;
use crate::pods;
use crate::protocol::media_type;
use crate::resource::Resource;

/// Accepted PATCH content types, in the order the real server lists them.
const PATCH_TYPES: &str =
    "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Merge,
    Strategic,
    Json,
}

pub(crate) fn patch_kind(content_type: Option<&str>) -> Result<PatchKind, ApiError> {
    match media_type(content_type).as_str() {
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
        "application/json-patch+json" => Ok(PatchKind::Json),
        _ => Err(ApiError::unsupported_media_type(PATCH_TYPES)),
    }
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &Value, patch: &Value) -> Value {
    let Value::Object(patch) = patch else {
        return patch.clone();
    };
    let mut result = match target {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    for (key, value) in patch {
        if value.is_null() {
            result.remove(key);
        } else {
            let current = result.get(key).cloned().unwrap_or(Value::Null);
            result.insert(key.clone(), merge_patch(&current, value));
        }
    }
    Value::Object(result)
}

/// How a list field merges in a strategic merge patch (the `patchStrategy`/`patchMergeKey`
/// struct tags of k8s.io/api); lists without a tag are replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListStrategy {
    Replace,
    MergeKey(&'static str),
    MergePrimitives,
}

fn list_strategy(resource: Resource, path: &str) -> ListStrategy {
    match (resource, path) {
        (_, "metadata.finalizers") => ListStrategy::MergePrimitives,
        (_, "metadata.ownerReferences") => ListStrategy::MergeKey("uid"),
        (Resource::Nodes, "spec.podCIDRs") => ListStrategy::MergePrimitives,
        (Resource::Nodes, "status.conditions") => ListStrategy::MergeKey("type"),
        (Resource::Nodes, "status.addresses") => ListStrategy::MergeKey("type"),
        (Resource::Pods, _) => pods::pod_list_strategy(path),
        (Resource::PodDisruptionBudgets, "status.conditions") => ListStrategy::MergeKey("type"),
        _ => ListStrategy::Replace,
    }
}

/// Strategic merge patch of a built-in kind.
pub(crate) fn strategic_merge(
    original: &Value,
    patch: &Value,
    resource: Resource,
) -> Result<Value, ApiError> {
    let original = original.as_object().cloned().unwrap_or_default();
    let patch = patch.as_object().cloned().unwrap_or_default();
    Ok(Value::Object(
        smp_map(original, &patch, resource, "")?.unwrap_or_default(),
    ))
}

/// Merges `patch` into `orig`; `None` means the map was deleted (`$patch: delete`).
fn smp_map(
    mut orig: Map<String, Value>,
    patch: &Map<String, Value>,
    resource: Resource,
    path: &str,
) -> Result<Option<Map<String, Value>>, ApiError> {
    match patch.get("$patch") {
        None => {}
        Some(Value::String(directive)) if directive == "merge" => {}
        Some(Value::String(directive)) if directive == "delete" => return Ok(None),
        Some(Value::String(directive)) if directive == "replace" => {
            let mut replacement = patch.clone();
            replacement.remove("$patch");
            return smp_map(Map::new(), &replacement, resource, path);
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Unknown patch type: {other}, only merge, replace and delete are supported"
            )))
        }
    }
    let retain: Option<Vec<String>> = match patch.get("$retainKeys") {
        None => None,
        Some(Value::Array(keys)) if keys.iter().all(Value::is_string) => Some(
            keys.iter()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect(),
        ),
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid patch: $retainKeys must be a list of strings",
            ))
        }
    };
    for (key, value) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            // Element order is accepted but not enforced.
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let Value::Array(remove) = value else {
                return Err(ApiError::bad_request(
                    "invalid patch format of primitive list: $deleteFromPrimitiveList must be a list",
                ));
            };
            if let Some(Value::Array(list)) = orig.get_mut(field) {
                list.retain(|item| !remove.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(ApiError::bad_request(format!(
                "invalid patch: unknown patch directive {key}"
            )));
        }
        let child = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        if value.is_null() {
            orig.remove(key);
            continue;
        }
        let merged = match (orig.get(key), value) {
            (Some(Value::Object(current)), Value::Object(p)) => {
                smp_map(current.clone(), p, resource, &child)?.map(Value::Object)
            }
            (_, Value::Object(p)) => smp_map(Map::new(), p, resource, &child)?.map(Value::Object),
            (current, Value::Array(p)) => {
                let current = match current {
                    Some(Value::Array(items)) => items.clone(),
                    _ => Vec::new(),
                };
                Some(Value::Array(smp_list(
                    current,
                    p,
                    list_strategy(resource, &child),
                    resource,
                    &child,
                )?))
            }
            (_, scalar) => Some(scalar.clone()),
        };
        match merged {
            Some(merged) => orig.insert(key.clone(), merged),
            None => orig.remove(key),
        };
    }
    if let Some(keep) = retain {
        orig.retain(|key, _| keep.contains(key));
    }
    Ok(Some(orig))
}

fn smp_list(
    orig: Vec<Value>,
    patch: &[Value],
    strategy: ListStrategy,
    resource: Resource,
    path: &str,
) -> Result<Vec<Value>, ApiError> {
    let is_replace_directive =
        |item: &Value| item.get("$patch").and_then(Value::as_str) == Some("replace");
    let replace_all = patch.iter().any(is_replace_directive);
    let items: Vec<&Value> = patch
        .iter()
        .filter(|item| !is_replace_directive(item))
        .collect();
    match strategy {
        ListStrategy::Replace => Ok(items.into_iter().cloned().collect()),
        ListStrategy::MergePrimitives => {
            let mut result = if replace_all { Vec::new() } else { orig };
            for item in items {
                if !result.contains(item) {
                    result.push(item.clone());
                }
            }
            Ok(result)
        }
        ListStrategy::MergeKey(merge_key) => {
            let mut result = if replace_all { Vec::new() } else { orig };
            for item in items {
                let Value::Object(fields) = item else {
                    return Err(ApiError::bad_request(format!(
                        "invalid patch: element of {path} is not an object: {item}"
                    )));
                };
                let Some(key_value) = fields.get(merge_key) else {
                    return Err(ApiError::bad_request(format!(
                        "map: {item} does not contain declared merge key: {merge_key}"
                    )));
                };
                let position = result
                    .iter()
                    .position(|existing| existing.get(merge_key) == Some(key_value));
                if fields.get("$patch").and_then(Value::as_str) == Some("delete") {
                    result.retain(|existing| existing.get(merge_key) != Some(key_value));
                    continue;
                }
                match position {
                    Some(i) => {
                        let current = result[i].as_object().cloned().unwrap_or_default();
                        match smp_map(current, fields, resource, path)? {
                            Some(merged) => result[i] = Value::Object(merged),
                            None => {
                                result.remove(i);
                            }
                        }
                    }
                    None => {
                        if let Some(added) = smp_map(Map::new(), fields, resource, path)? {
                            result.push(Value::Object(added));
                        }
                    }
                }
            }
            Ok(result)
        }
    }
}

/// RFC 6902 JSON patch; errors are answered like the real server (decode errors 400, failed
/// operations 422 with the generic message).
pub(crate) fn apply_json_patch(doc: &Value, patch: &[u8]) -> Result<Value, ApiError> {
    let ops: Value =
        serde_json::from_slice(patch).map_err(|err| ApiError::bad_request(err.to_string()))?;
    let Value::Array(ops) = ops else {
        return Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
            go_type(&ops)
        )));
    };
    let mut doc = doc.clone();
    for op in &ops {
        json_patch_op(&mut doc, op).map_err(|cause| {
            // The real Status does not say why; the test log does.
            eprintln!("fake API server: JSON patch operation {op} failed: {cause}");
            ApiError::new(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            )
            .with_details(json!({}))
        })?;
    }
    Ok(doc)
}

fn json_patch_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let name = op.get("op").and_then(Value::as_str).unwrap_or("");
    let path = op
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{name} operation missing path"))?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| format!("{name} operation missing value"))
    };
    let from = || {
        op.get("from")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{name} operation missing from"))
    };
    match name {
        "add" => pointer_add(doc, path, value()?),
        "remove" => pointer_remove(doc, path).map(drop),
        "replace" => {
            let target = doc.pointer_mut(path).ok_or_else(|| {
                format!(
                    "replace operation does not apply: doc is missing key: {path}: missing value"
                )
            })?;
            *target = value()?;
            Ok(())
        }
        "move" => {
            let moved = pointer_remove(doc, from()?)?;
            pointer_add(doc, path, moved)
        }
        "copy" => {
            let from = from()?;
            let copied = doc
                .pointer(from)
                .cloned()
                .ok_or_else(|| format!("copy operation does not apply: doc is missing from path: {from}: missing value"))?;
            pointer_add(doc, path, copied)
        }
        "test" => {
            let want = value()?;
            match doc.pointer(path) {
                Some(found) if *found == want => Ok(()),
                _ => Err(format!("testing value {path} failed: test failed")),
            }
        }
        other => Err(format!("Unexpected kind: {other}")),
    }
}

fn unescape_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<(&str, String), String> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("invalid JSON pointer {path:?}"))?;
    Ok((parent, unescape_token(last)))
}

fn pointer_add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    let missing =
        || format!("add operation does not apply: doc is missing path: {path:?}: missing value");
    match doc.pointer_mut(parent).ok_or_else(missing)? {
        Value::Object(map) => {
            map.insert(last, value);
            Ok(())
        }
        Value::Array(items) => {
            let index = if last == "-" {
                items.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= items.len())
                    .ok_or_else(|| {
                        format!("add operation does not apply: index out of bounds: {path}")
                    })?
            };
            items.insert(index, value);
            Ok(())
        }
        _ => Err(missing()),
    }
}

fn pointer_remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(path)?;
    let missing =
        || format!("remove operation does not apply: doc is missing path: {path:?}: missing value");
    match doc.pointer_mut(parent).ok_or_else(missing)? {
        Value::Object(map) => map.remove(&last).ok_or_else(missing),
        Value::Array(items) => {
            let index = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i < items.len())
                .ok_or_else(missing)?;
            Ok(items.remove(index))
        }
        _ => Err(missing()),
    }
}
