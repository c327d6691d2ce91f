//! The objects of CustomResourceDefinitions, as apiextensions-apiserver's customresource
//! registry handles them:
//!
//! - decoding: the body must name the request's apiVersion and kind; metadata is ObjectMeta;
//!   fields the version's schema does not specify are pruned (reported as
//!   `unknown field "spec.foo"`: a warning, or a 400 with `fieldValidation=Strict`), nulls of
//!   non-nullable fields are dropped and defaults applied (module `schema`);
//! - strategy: a create sets `metadata.generation` 1; an update increments it when anything
//!   outside `metadata` changes (and outside `status`, with the status subresource); with the
//!   status subresource a create drops `status`, a write to the object keeps the stored
//!   `status`, and a write to `/status` keeps everything else (metadata included);
//! - validation: the version's schema, converted to field errors as the real server does;
//! - strategic merge patch is 415 (no Go struct tags to merge by), field selectors are
//!   `metadata.name` and `metadata.namespace` only.

use serde_json::Value;

use crate::decode::{check_types, go_type, strip_unknown, unknown_fields, OBJECT_META};
use crate::errors::{ApiError, FieldError};
use crate::resource::Target;
use crate::store::{copy_field, Opts, State};
use crate::{crd, schema};

/// The patch types a custom resource accepts (server-side apply is not implemented).
pub(crate) const PATCH_TYPES: &str = "application/json-patch+json, application/merge-patch+json";

/// Refuses a create while the definition is being deleted.
pub(crate) fn admit_create(state: &State, target: &Target) -> Result<(), ApiError> {
    match crd::served(state, target) {
        Some(served) if served.terminating => Err(crd::terminating_error()),
        _ => Ok(()),
    }
}

/// Decodes a body (or a patched object) of a custom resource into its stored form.
pub(crate) fn decode(
    state: &State,
    target: &Target,
    body: Value,
    opts: &Opts,
) -> Result<(Value, Vec<String>), ApiError> {
    let kind = target.resource.kind();
    let api_version = target.group.api_version();
    let Value::Object(fields) = &body else {
        return Err(ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
            go_type(&body)
        )));
    };
    let found_kind = fields.get("kind").and_then(Value::as_str).unwrap_or("");
    if found_kind.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Object 'Kind' is missing in '{body}'"
        )));
    }
    let found_version = fields
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if found_version != api_version {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({found_version}) does not match the expected API version ({api_version})"
        )));
    }
    if found_kind != kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({found_kind}) does not match the expected kind ({kind})"
        )));
    }
    // The metadata is ObjectMeta; the kind-specific checks of `check_types` do not apply to
    // an unstructured object, so only its metadata is given to them.
    let meta_only =
        serde_json::json!({"metadata": body.get("metadata").cloned().unwrap_or(Value::Null)});
    check_types(&meta_only, kind).map_err(|why| {
        ApiError::bad_request(format!(
            "{kind} in version \"{}\" cannot be handled as a {kind}: {why}",
            api_version.rsplit('/').next().unwrap_or("")
        ))
    })?;
    let mut obj = body;
    let mut unknown = Vec::new();
    if let Some(meta) = obj.get_mut("metadata") {
        strip_unknown(meta, &OBJECT_META, "metadata", &mut unknown);
    }
    let served = crd::served(state, target);
    let schema = served.as_ref().and_then(|s| s.schema);
    if let Some(schema) = schema {
        schema::prune(&mut obj, schema, "", true, &mut unknown);
    }
    unknown.sort();
    let warnings = unknown_fields(&unknown, opts.validation)?;
    if let Some(schema) = schema {
        schema::default(&mut obj, schema);
    }
    if let Some(map) = obj.as_object_mut() {
        // Stored in the storage version (conversion `None`: only apiVersion changes).
        map.insert(
            "apiVersion".into(),
            Value::from(target.resource.home_group().api_version()),
        );
        if !map.get("metadata").is_some_and(Value::is_object) {
            map.insert("metadata".into(), serde_json::json!({}));
        }
    }
    Ok((obj, warnings))
}

/// Everything but `metadata` (and `status` when the status subresource owns it).
fn content_changed(new: &Value, old: &Value, status_enabled: bool) -> bool {
    let strip = |obj: &Value| {
        let mut copy = obj.as_object().cloned().unwrap_or_default();
        copy.remove("metadata");
        if status_enabled {
            copy.remove("status");
        }
        copy
    };
    strip(new) != strip(old)
}

/// customResourceStrategy / statusStrategy PrepareForCreate and PrepareForUpdate.
pub(crate) fn prepare(state: &State, target: &Target, obj: &mut Value, old: Option<&Value>) {
    let status_enabled = crd::served(state, target).is_some_and(|s| s.status_enabled);
    match old {
        None => {
            if status_enabled {
                if let Some(map) = obj.as_object_mut() {
                    map.remove("status");
                }
            }
            obj["metadata"]["generation"] = Value::from(1);
        }
        Some(old) if target.is_status() => {
            // Only the status changes through /status, metadata included.
            let status = obj.get("status").cloned();
            *obj = old.clone();
            if let Some(map) = obj.as_object_mut() {
                match status {
                    Some(status) => map.insert("status".into(), status),
                    None => map.remove("status"),
                };
            }
        }
        Some(old) => {
            if status_enabled {
                copy_field(obj, old, "status");
            }
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            let changed = content_changed(obj, old, status_enabled);
            obj["metadata"]["generation"] = Value::from(generation + i64::from(changed));
        }
    }
}

/// The version's schema (the metadata is the server's common validation).
pub(crate) fn validate(state: &State, target: &Target, obj: &Value, errors: &mut Vec<FieldError>) {
    if let Some(schema) = crd::served(state, target).and_then(|s| s.schema) {
        schema::validate(obj, schema, errors);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn generation_ignores_metadata_and_an_owned_status() {
        let old = json!({"metadata": {"generation": 1}, "spec": {"a": 1}, "status": {"b": 1}});
        let new = json!({"metadata": {"labels": {"x": "y"}}, "spec": {"a": 1}, "status": {"b": 2}});
        assert!(!content_changed(&new, &old, true));
        assert!(content_changed(&new, &old, false));
    }
}
