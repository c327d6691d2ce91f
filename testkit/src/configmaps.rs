//! ConfigMaps: the decoder's shape, keys, size limit, base64 `binaryData` and immutability.
//!
//! [`ApiServer`]'s helpers for ConfigMaps are here too.

use std::collections::BTreeMap;

use crate::patch::PatchKind;
use crate::resource::{Resource, Target};
use crate::store::Opts;
use crate::ApiServer;

use serde_json::{json, Value};

use crate::decode::{Shape, OBJECT_META};
use crate::errors::FieldError;
use crate::validation::regex_error;

pub(crate) static CONFIGMAP: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("data", Shape::Any),
    ("binaryData", Shape::Any),
    ("immutable", Shape::Any),
]);

/// corev1.MaxSecretSize, the limit on a ConfigMap's data plus binaryData.
const MAX_CONFIGMAP_BYTES: usize = 1024 * 1024;

/// Byte offset of the first invalid character of standard base64 (with padding), if any.
pub(crate) fn base64_error(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let body_len = bytes.iter().rposition(|b| *b != b'=').map_or(0, |i| i + 1);
    if let Some(i) = bytes[..body_len]
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/'))
    {
        return Some(i);
    }
    let padding = bytes.len() - body_len;
    if bytes.len() & 3 != 0 || padding > 2 {
        return Some(bytes.len().saturating_sub(1).min(body_len));
    }
    None
}

pub(crate) fn config_map_key(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if text.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    let valid = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !valid {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if text == "." {
        errs.push("must not be '.'".to_string());
    } else if text == ".." {
        errs.push("must not be '..'".to_string());
    } else if text.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

fn validate_configmap(obj: &Value, errors: &mut Vec<FieldError>) {
    let data = obj.get("data").and_then(Value::as_object);
    let binary = obj.get("binaryData").and_then(Value::as_object);
    let mut total = 0;
    for (key, value) in data.into_iter().flatten() {
        for msg in config_map_key(key) {
            errors.push(FieldError::invalid(
                &format!("data[{key}]"),
                json!(key),
                &msg,
            ));
        }
        if binary.is_some_and(|b| b.contains_key(key)) {
            errors.push(FieldError::invalid(
                &format!("data[{key}]"),
                json!(key),
                "duplicate of key present in binaryData",
            ));
        }
        total += value.as_str().map_or(0, str::len);
    }
    for (key, value) in binary.into_iter().flatten() {
        for msg in config_map_key(key) {
            errors.push(FieldError::invalid(
                &format!("binaryData[{key}]"),
                json!(key),
                &msg,
            ));
        }
        // Stored base64: the decoded size is about three quarters.
        total += value.as_str().map_or(0, |v| v.len() / 4 * 3);
    }
    if total > MAX_CONFIGMAP_BYTES {
        errors.push(FieldError::too_long("", MAX_CONFIGMAP_BYTES));
    }
}

/// ValidateConfigMapUpdate's immutability rules (Go's DeepEqual: a missing map differs from
/// an empty one).
fn validate_configmap_update(new: &Value, old: &Value, errors: &mut Vec<FieldError>) {
    if old.get("immutable") != Some(&Value::Bool(true)) {
        return;
    }
    const IMMUTABLE: &str = "field is immutable when `immutable` is set";
    if new.get("immutable") != Some(&Value::Bool(true)) {
        errors.push(FieldError::forbidden("immutable", IMMUTABLE));
    }
    let present = |obj: &Value, field: &str| obj.get(field).filter(|v| !v.is_null()).cloned();
    if present(new, "data") != present(old, "data") {
        errors.push(FieldError::forbidden("data", IMMUTABLE));
    }
    if present(new, "binaryData") != present(old, "binaryData") {
        errors.push(FieldError::forbidden("binaryData", IMMUTABLE));
    }
}

/// ValidateConfigMap, and ValidateConfigMapUpdate for an update.
pub(crate) fn validate(obj: &Value, old: Option<&Value>, errors: &mut Vec<FieldError>) {
    if let Some(old) = old {
        validate_configmap_update(obj, old, errors);
    }
    validate_configmap(obj, errors);
}

impl ApiServer {
    /// Creates a ConfigMap and returns it (with uid and resourceVersion).
    pub fn create_configmap(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
        immutable: bool,
    ) -> Value {
        let mut body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        });
        if immutable {
            body["immutable"] = Value::Bool(true);
        }
        let target = Target::collection(Resource::ConfigMaps, Some(namespace));
        self.helper(|state| state.create(&target, body, &Opts::default()))
    }

    /// Replaces a ConfigMap's data (an update, with all of the server's checks: an immutable
    /// ConfigMap gives `Err` with the 422 Status).
    pub fn update_configmap_data(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<Value, Value> {
        let target = Target::object(Resource::ConfigMaps, Some(namespace), name);
        let patch = json!([{"op": "add", "path": "/data", "value": data}]).to_string();
        self.helper_result(|state| {
            state.patch(&target, PatchKind::Json, patch.as_bytes(), &Opts::default())
        })
    }

    /// The stored ConfigMap, if any.
    pub fn configmap(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .get_served(&Target::object(Resource::ConfigMaps, Some(namespace), name))
    }

    pub fn delete_configmap(&self, namespace: &str, name: &str) {
        let target = Target::object(Resource::ConfigMaps, Some(namespace), name);
        self.helper(|state| state.delete(&target, None, &Opts::default()));
    }
}
