//! The generic create: names (generateName), metadata, namespaces, strategies, commit.

use serde_json::{json, Value};

use crate::clock::now_rfc3339;
use crate::decode::with_type_meta;
use crate::errors::{ApiError, FieldError};
use crate::ids::{random_suffix, uuid_v4};
use crate::resource::Target;
use crate::{custom, nodeauth};

use super::{EventType, Opts, Outcome, State};

impl State {
    pub(crate) fn create(
        &mut self,
        target: &Target,
        body: Value,
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        let (mut obj, mut warnings) = self.decode(target, body, opts)?;
        let meta = obj["metadata"].clone();
        // Name or generateName.
        let name = match meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            Some(name) => name.to_string(),
            None => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
                _ => {
                    return Err(ApiError::invalid_object(
                        target,
                        "",
                        &[FieldError::required(
                            "metadata.name",
                            "name or generateName is required",
                        )],
                    ))
                }
            },
        };
        obj["metadata"]["name"] = json!(name);
        // Namespace: from the URL; a different one in the body is a bad request.
        if target.resource.namespaced() {
            let url_ns = target.namespace.clone().unwrap_or_default();
            match meta.get("namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() && ns != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                _ => obj["metadata"]["namespace"] = json!(url_ns),
            }
        } else if let Some(map) = obj["metadata"].as_object_mut() {
            map.remove("namespace");
        }
        if meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty())
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if let Some(node) = &opts.node {
            nodeauth::admit_create(self, node, target, &obj)?;
        }
        if target.resource.is_custom() {
            custom::admit_create(self, target)?;
        }
        // System fields (FillObjectMetaSystemFields): set by the server, whatever was sent.
        if let Some(map) = obj["metadata"].as_object_mut() {
            map.insert("uid".to_string(), json!(uuid_v4()));
            map.insert("creationTimestamp".to_string(), json!(now_rfc3339()));
            for field in [
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
                "generation",
                "managedFields",
            ] {
                map.remove(field);
            }
        }
        warnings.extend(self.prepare(target, &mut obj, None));
        let errors = self.validate(target, &obj, None);
        if !errors.is_empty() {
            return Err(ApiError::invalid_object(target, &name, &errors));
        }
        let ns = target.namespace.clone().unwrap_or_default();
        if target.resource.namespaced() && !self.namespace_exists(&ns) {
            return Err(ApiError::namespace_not_found(&ns));
        }
        let created_target = Target {
            name: Some(name.clone()),
            ..target.clone()
        };
        if self.stored(&created_target).is_some() {
            return Err(ApiError::already_exists(target, &name));
        }
        let stored = if opts.dry_run {
            obj
        } else {
            self.commit(target.resource, EventType::Added, obj, None)
        };
        Ok(Outcome {
            code: 201,
            body: with_type_meta(stored, target.resource, target.group),
            warnings,
        })
    }
}
