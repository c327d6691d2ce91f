//! Structural pruning and defaulting of custom objects.

use serde_json::Value;

use super::{additional, child, flag, properties};

/// Removes the fields `schema` does not specify from `value` (at `path`; `root` is the
/// object itself, whose apiVersion, kind and metadata are not the schema's), recording
/// their paths.
pub(crate) fn prune(
    value: &mut Value,
    schema: &Value,
    path: &str,
    root: bool,
    unknown: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => {
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
            let props = properties(schema);
            let extra = schema.get("additionalProperties");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let key_path = child(path, &key);
                if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(&key)) {
                    if let Some(child_value) = map.get_mut(&key) {
                        prune(child_value, sub, &key_path, false, unknown);
                    }
                } else if let Some(sub) = extra.filter(|e| e.is_object()) {
                    if let Some(child_value) = map.get_mut(&key) {
                        prune(child_value, sub, &key_path, false, unknown);
                    }
                } else if extra == Some(&Value::Bool(true)) || preserve {
                    // Kept as it is.
                } else {
                    map.remove(&key);
                    unknown.push(key_path);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item, sub, &format!("{path}[{i}]"), false, unknown);
                }
            }
        }
        _ => {}
    }
}

/// Structural defaulting: in every object, a property that is null without being nullable
/// is dropped, or set to its default if it has one; a missing property with a default gets
/// it; then the same inside properties, map values and list items.
pub(crate) fn default(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = properties(schema) {
                for (key, sub) in props {
                    let nullable = flag(sub, "nullable");
                    let default_value = sub.get("default");
                    match (map.get(key), default_value) {
                        (Some(Value::Null), Some(default)) if !nullable => {
                            map.insert(key.clone(), default.clone());
                        }
                        (Some(Value::Null), None) if !nullable => {
                            map.remove(key);
                        }
                        (None, Some(default)) => {
                            map.insert(key.clone(), default.clone());
                        }
                        _ => {}
                    }
                    if let Some(child_value) = map.get_mut(key) {
                        default(child_value, sub);
                    }
                }
            }
            if let Some(extra) = additional(schema) {
                let known = properties(schema);
                for (key, child_value) in map.iter_mut() {
                    if known.is_none_or(|p| !p.contains_key(key)) {
                        default(child_value, extra);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items").filter(|i| i.is_object()) {
                for item in items {
                    default(item, sub);
                }
            }
        }
        _ => {}
    }
}
