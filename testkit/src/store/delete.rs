//! The generic delete: preconditions, finalizers, the kinds' own deletes.

use serde_json::{json, Value};

use crate::clock::now_rfc3339;
use crate::decode::with_type_meta;
use crate::errors::ApiError;
use crate::resource::{Resource, Target};
use crate::{crd, nodeauth};

use super::{finalizers, is_deleting, EventType, Key, Opts, Outcome, State};

impl State {
    pub(crate) fn delete(
        &mut self,
        target: &Target,
        options: Option<&Value>,
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        let name = target.name().to_string();
        let old = self.existing(target)?;
        if let Some(node) = &opts.node {
            nodeauth::admit_delete(node, target, &old)?;
        }
        let uid = old["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let rv = old["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if let Some(pre) = options.and_then(|o| o.get("preconditions")) {
            if let Some(want) = pre.get("uid").and_then(Value::as_str) {
                if want != uid {
                    return Err(ApiError::conflict(
                        target,
                        &name,
                        &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
                    ));
                }
            }
            if let Some(want) = pre.get("resourceVersion").and_then(Value::as_str) {
                if want != rv {
                    return Err(ApiError::conflict(
                        target,
                        &name,
                        &format!(
                            "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rv}"
                        ),
                    ));
                }
            }
        }
        if target.resource == Resource::Pods {
            // Graceful deletion; the deleted object is returned (ReturnDeletedObject).
            return Ok(self.delete_pod(target, old, options, opts));
        }
        if opts.dry_run {
            return Ok(Outcome::ok(deleted_status(target, &name, &uid)));
        }
        if target.resource == Resource::CustomResourceDefinitions {
            return Ok(crd::delete(self, target, old));
        }
        if !finalizers(&old).is_empty() {
            // Finalizers: the object stays, marked for deletion, until they are removed.
            if is_deleting(&old) {
                return Ok(Outcome::ok(with_type_meta(
                    old,
                    target.resource,
                    target.group,
                )));
            }
            let mut obj = old.clone();
            obj["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            // markAsDeleting: controllers see the deletion as a new generation.
            if let Some(generation) = old["metadata"]["generation"].as_i64().filter(|g| *g > 0) {
                obj["metadata"]["generation"] = json!(generation + 1);
            }
            let stored = self.commit(target.resource, EventType::Modified, obj, Some(old));
            return Ok(Outcome::ok(with_type_meta(
                stored,
                target.resource,
                target.group,
            )));
        }
        if target.resource == Resource::Namespaces {
            // The namespace controller's job, done at once: delete what the namespace holds.
            let namespaced: Vec<Resource> = self
                .store
                .keys()
                .copied()
                .filter(|resource| resource.namespaced())
                .collect();
            for resource in namespaced {
                let keys: Vec<Key> = self
                    .objects(resource)
                    .keys()
                    .filter(|(ns, _)| *ns == name)
                    .cloned()
                    .collect();
                for key in keys {
                    if let Some(obj) = self.objects(resource).get(&key).cloned() {
                        self.commit(resource, EventType::Deleted, obj.clone(), Some(obj));
                    }
                }
            }
        }
        self.commit(target.resource, EventType::Deleted, old.clone(), Some(old));
        Ok(Outcome::ok(deleted_status(target, &name, &uid)))
    }
}

fn deleted_status(target: &Target, name: &str, uid: &str) -> Value {
    let mut details = ApiError::resource_details(target, name);
    details["uid"] = json!(uid);
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}
