//! The generic update and patch: preconditions, metadata rules, no-op detection, commit.

use serde_json::{json, Value};

use crate::decode::with_type_meta;
use crate::errors::{ApiError, FieldError};
use crate::patch::{apply_json_patch, merge_patch, strategic_merge, PatchKind};
use crate::resource::Target;
use crate::{custom, nodeauth};

use super::{finalizers, is_deleting, EventType, Opts, Outcome, State};

impl State {
    pub(crate) fn update(
        &mut self,
        target: &Target,
        body: Value,
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        let old = self.existing(target)?;
        let (obj, warnings) = self.decode(target, body, opts)?;
        self.write_update(target, old, obj, warnings, opts)
    }

    pub(crate) fn patch(
        &mut self,
        target: &Target,
        kind: PatchKind,
        patch: &[u8],
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        if kind == PatchKind::Strategic && target.resource.is_custom() {
            // Custom resources have no Go struct tags to merge by.
            return Err(ApiError::unsupported_media_type(custom::PATCH_TYPES));
        }
        let old = self.existing(target)?;
        let served = with_type_meta(old.clone(), target.resource, target.group);
        let patched = match kind {
            PatchKind::Merge => {
                let patch: Value = serde_json::from_slice(patch)
                    .map_err(|err| ApiError::bad_request(format!("error decoding patch: {err}")))?;
                merge_patch(&served, &patch)
            }
            PatchKind::Strategic => {
                let patch: Value = serde_json::from_slice(patch)
                    .map_err(|err| ApiError::bad_request(format!("error decoding patch: {err}")))?;
                if !patch.is_object() {
                    return Err(ApiError::bad_request(
                        "unable to find api field in struct for the patch: the patch must be a JSON object",
                    ));
                }
                strategic_merge(&served, &patch, target.resource)?
            }
            PatchKind::Json => apply_json_patch(&served, patch)?,
        };
        if !patched.is_object() {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: the patched object is not a JSON object",
                target.resource.kind(),
                target.group.api_version(),
                target.resource.kind()
            )));
        }
        let (obj, warnings) = self.decode(target, patched, opts)?;
        self.write_update(target, old, obj, warnings, opts)
    }

    /// The common tail of PUT and PATCH: preconditions, strategy, validation, no-op check.
    fn write_update(
        &mut self,
        target: &Target,
        old: Value,
        mut obj: Value,
        mut warnings: Vec<String>,
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        let name = target.name().to_string();
        let meta = obj["metadata"].clone();
        if let Some(body_name) = meta.get("name").and_then(Value::as_str) {
            if !body_name.is_empty() && body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
        }
        if let Some(ns) = meta.get("namespace").and_then(Value::as_str) {
            if target.resource.namespaced()
                && !ns.is_empty()
                && Some(ns) != target.namespace.as_deref()
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let old_rv = old["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        match meta.get("resourceVersion").and_then(Value::as_str) {
            Some(rv) if !rv.is_empty() && rv != old_rv => {
                return Err(ApiError::modified(target, &name));
            }
            _ => {}
        }
        let mut errors = Vec::new();
        let old_uid = old["metadata"]["uid"].clone();
        match meta.get("uid").and_then(Value::as_str) {
            Some(uid) if !uid.is_empty() && Some(uid) != old_uid.as_str() => {
                errors.push(FieldError::invalid(
                    "metadata.uid",
                    json!(uid),
                    "field is immutable",
                ));
            }
            _ => {}
        }
        if let Some(node) = &opts.node {
            nodeauth::admit_update(node, target, &obj, &old)?;
        }
        // Fields the client cannot change (BeforeUpdate).
        if let Some(map) = obj["metadata"].as_object_mut() {
            map.insert("name".to_string(), json!(name));
            map.insert("uid".to_string(), old_uid);
            map.insert("resourceVersion".to_string(), json!(old_rv));
            for field in [
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "namespace",
            ] {
                match old["metadata"].get(field) {
                    Some(value) => map.insert(field.to_string(), value.clone()),
                    None => map.remove(field),
                };
            }
            map.remove("managedFields");
            map.remove("selfLink");
        }
        warnings.extend(self.prepare(target, &mut obj, Some(&old)));
        errors.extend(self.validate(target, &obj, Some(&old)));
        if !errors.is_empty() {
            return Err(ApiError::invalid_object(target, &name, &errors));
        }
        if obj == old {
            // Nothing changed: etcd is not written, no new resourceVersion, no event.
            return Ok(Outcome {
                code: 200,
                body: with_type_meta(old, target.resource, target.group),
                warnings,
            });
        }
        if opts.dry_run {
            return Ok(Outcome {
                code: 200,
                body: with_type_meta(obj, target.resource, target.group),
                warnings,
            });
        }
        let finalized = is_deleting(&obj) && finalizers(&obj).is_empty();
        let kind = if finalized {
            EventType::Deleted
        } else {
            EventType::Modified
        };
        let stored = self.commit(target.resource, kind, obj, Some(old));
        Ok(Outcome {
            code: 200,
            body: with_type_meta(stored, target.resource, target.group),
            warnings,
        })
    }
}
