//! Dispatching to the kinds' strategies: preparation (defaults) and validation.

use serde_json::{json, Value};

use crate::errors::FieldError;
use crate::events::validate_event;
use crate::resource::{Resource, Target};
use crate::validation::{dns1123_label, dns1123_subdomain, validate_labels_annotations};
use crate::{configmaps, crd, custom, leases, nodes, pods};

use super::{copy_field, finalizers, is_deleting, State};

impl State {
    /// PrepareForCreate / PrepareForUpdate of the resource's strategy; returns warnings.
    pub(super) fn prepare(
        &self,
        target: &Target,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Vec<String> {
        let mut warnings = Vec::new();
        match target.resource {
            Resource::Nodes => {
                warnings.extend(nodes::prepare(target, obj, old, self.keep_config_source));
            }
            Resource::Namespaces => {
                if old.is_none() {
                    if obj.pointer("/spec/finalizers").is_none() {
                        obj["spec"] = json!({"finalizers": ["kubernetes"]});
                    }
                    obj["status"] = json!({"phase": "Active"});
                } else if let Some(old) = old {
                    copy_field(obj, old, "status");
                }
            }
            Resource::Pods => pods::prepare_pod(target, obj, old),
            Resource::PodDisruptionBudgets => pods::prepare_pdb(target, obj, old),
            Resource::Leases => leases::prepare(obj, old),
            Resource::CustomResourceDefinitions => crd::prepare(target, obj, old),
            Resource::Custom(_) => custom::prepare(self, target, obj, old),
            Resource::ConfigMaps | Resource::Events => {}
        }
        warnings
    }

    pub(super) fn validate(
        &self,
        target: &Target,
        obj: &Value,
        old: Option<&Value>,
    ) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        let name_errors = if target.resource == Resource::Namespaces {
            dns1123_label(name)
        } else {
            dns1123_subdomain(name)
        };
        if old.is_none() {
            for msg in name_errors {
                errors.push(FieldError::invalid("metadata.name", json!(name), &msg));
            }
        }
        validate_labels_annotations(obj, &mut errors);
        if let Some(old) = old.filter(|old| is_deleting(old)) {
            // ValidateObjectMetaUpdate: an object being deleted only loses finalizers.
            let before = finalizers(old);
            let added: Vec<String> = finalizers(obj)
                .iter()
                .filter(|f| !before.contains(f))
                .map(|f| format!("{:?}", f.as_str().unwrap_or("")))
                .collect();
            if !added.is_empty() {
                errors.push(FieldError::forbidden(
                    "metadata.finalizers",
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        added.join(", ")
                    ),
                ));
            }
        }
        match target.resource {
            Resource::ConfigMaps => configmaps::validate(obj, old, &mut errors),
            Resource::Nodes => {
                if self.keep_config_source {
                    nodes::validate_config_sources(obj, &mut errors);
                }
            }
            Resource::Events => validate_event(obj, target.group, old, &mut errors),
            Resource::Pods => pods::validate_pod(obj, old, &mut errors),
            Resource::PodDisruptionBudgets => pods::validate_pdb(obj, old, &mut errors),
            Resource::Leases => leases::validate(obj, &mut errors),
            Resource::CustomResourceDefinitions => crd::validate(obj, old, &mut errors),
            Resource::Custom(_) => custom::validate(self, target, obj, &mut errors),
            Resource::Namespaces => {}
        }
        errors
    }
}
