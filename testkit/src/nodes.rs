//! Nodes: the decoder's shape, the node strategies (spec and status through their own
//! endpoints, `configSource` dropped as since v1.24) and the validation of an old server's
//! `configSource`.
//!
//! [`ApiServer`]'s helpers for Nodes are here too.

use serde_json::Map;

use crate::clock::now_rfc3339;
use crate::patch::PatchKind;
use crate::resource::Resource;
use crate::store::Opts;
use crate::ApiServer;

use serde_json::{json, Value};

use crate::configmaps::config_map_key;
use crate::decode::{Shape, OBJECT_META};
use crate::errors::FieldError;
use crate::resource::Target;
use crate::store::copy_field;
use crate::validation::{dns1123_label, dns1123_subdomain};

static CONFIGMAP_REF: Shape = Shape::Fields(&[
    ("namespace", Shape::Any),
    ("name", Shape::Any),
    ("uid", Shape::Any),
    ("resourceVersion", Shape::Any),
    ("kubeletConfigKey", Shape::Any),
]);

static NODE_CONFIG_SOURCE: Shape = Shape::Fields(&[("configMap", Shape::Nested(&CONFIGMAP_REF))]);

static NODE_CONDITION: Shape = Shape::Fields(&[
    ("type", Shape::Any),
    ("status", Shape::Any),
    ("lastHeartbeatTime", Shape::Any),
    ("lastTransitionTime", Shape::Any),
    ("reason", Shape::Any),
    ("message", Shape::Any),
]);

static NODE_ADDRESS: Shape = Shape::Fields(&[("type", Shape::Any), ("address", Shape::Any)]);

static NODE_CONFIG_STATUS: Shape = Shape::Fields(&[
    ("assigned", Shape::Nested(&NODE_CONFIG_SOURCE)),
    ("active", Shape::Nested(&NODE_CONFIG_SOURCE)),
    ("lastKnownGood", Shape::Nested(&NODE_CONFIG_SOURCE)),
    ("error", Shape::Any),
]);

static NODE_SPEC: Shape = Shape::Fields(&[
    ("podCIDR", Shape::Any),
    ("podCIDRs", Shape::Any),
    ("providerID", Shape::Any),
    ("unschedulable", Shape::Any),
    ("taints", Shape::Any),
    ("configSource", Shape::Nested(&NODE_CONFIG_SOURCE)),
    ("externalID", Shape::Any),
]);

static NODE_STATUS: Shape = Shape::Fields(&[
    ("capacity", Shape::Any),
    ("allocatable", Shape::Any),
    ("phase", Shape::Any),
    ("conditions", Shape::ListOf(&NODE_CONDITION)),
    ("addresses", Shape::ListOf(&NODE_ADDRESS)),
    ("daemonEndpoints", Shape::Any),
    ("nodeInfo", Shape::Any),
    ("images", Shape::Any),
    ("volumesInUse", Shape::Any),
    ("volumesAttached", Shape::Any),
    ("config", Shape::Nested(&NODE_CONFIG_STATUS)),
    ("runtimeHandlers", Shape::Any),
    ("features", Shape::Any),
]);

pub(crate) static NODE: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("spec", Shape::Nested(&NODE_SPEC)),
    ("status", Shape::Nested(&NODE_STATUS)),
]);

/// ValidateNodeConfigSourceSpec / validateNodeConfigSourceStatus (only on an old server).
fn validate_node_config_source(
    source: &Value,
    path: &str,
    spec: bool,
    errors: &mut Vec<FieldError>,
) {
    let Some(config_map) = source.get("configMap").filter(|v| !v.is_null()) else {
        errors.push(FieldError::invalid(
            path,
            source.clone(),
            "exactly one reference subfield must be non-nil",
        ));
        return;
    };
    let path = format!("{path}.configMap");
    let field = |name: &str| {
        config_map
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (uid, rv) = (field("uid"), field("resourceVersion"));
    if spec {
        if !uid.is_empty() {
            errors.push(FieldError::forbidden(
                &format!("{path}.uid"),
                "uid must not be set in spec",
            ));
        }
        if !rv.is_empty() {
            errors.push(FieldError::forbidden(
                &format!("{path}.resourceVersion"),
                "resourceVersion must not be set in spec",
            ));
        }
    } else {
        if uid.is_empty() {
            errors.push(FieldError::required(
                &format!("{path}.uid"),
                "uid must be set in status",
            ));
        }
        if rv.is_empty() {
            errors.push(FieldError::required(
                &format!("{path}.resourceVersion"),
                "resourceVersion must be set in status",
            ));
        }
    }
    let checks: [(&str, NameCheck); 3] = [
        ("namespace", dns1123_label),
        ("name", dns1123_subdomain),
        ("kubeletConfigKey", config_map_key),
    ];
    for (name, check) in checks {
        let value = field(name);
        let field_path = format!("{path}.{name}");
        if value.is_empty() {
            errors.push(FieldError::required(
                &field_path,
                &format!("{name} must be set"),
            ));
        } else {
            for msg in check(&value) {
                errors.push(FieldError::invalid(&field_path, json!(value), &msg));
            }
        }
    }
}

/// A name or key check returning the validation messages.
type NameCheck = fn(&str) -> Vec<String>;

/// PrepareForCreate / PrepareForUpdate of nodeStrategy and nodeStatusStrategy: the spec and
/// the status change only through their own endpoints; `configSource` and `status.config`
/// are dropped unless `keep_config_source` (an old server) or the stored node uses them.
/// Returns the warnings.
pub(crate) fn prepare(
    target: &Target,
    obj: &mut Value,
    old: Option<&Value>,
    keep_config_source: bool,
) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(old) = old {
        if target.is_status() {
            // nodeStatusStrategy: the spec cannot change through /status.
            copy_field(obj, old, "spec");
        } else {
            // nodeStrategy: the status cannot change through the main resource.
            copy_field(obj, old, "status");
        }
    }
    if obj.get("spec").is_none_or(Value::is_null) {
        obj["spec"] = json!({});
    }
    if obj.get("status").is_none_or(Value::is_null) {
        obj["status"] = json!({});
    }
    if !keep_config_source {
        // dropDisabledFields: kept only where the stored node already uses them.
        let in_use = |pointer: &str| {
            old.and_then(|o| o.pointer(pointer))
                .is_some_and(|v| !v.is_null())
        };
        if !in_use("/spec/configSource") {
            remove_field(obj, &["spec", "configSource"]);
        }
        if !in_use("/status/config") {
            remove_field(obj, &["status", "config"]);
        }
        // WarningsOnCreate/Update look at the prepared object.
        if obj
            .pointer("/spec/configSource")
            .is_some_and(|v| !v.is_null())
        {
            warnings.push("spec.configSource: the feature is removed".to_string());
        }
    }
    warnings
}

/// The `configSource` checks of ValidateNode on an old server (one that keeps them).
pub(crate) fn validate_config_sources(obj: &Value, errors: &mut Vec<FieldError>) {
    if let Some(source) = obj.pointer("/spec/configSource").filter(|v| !v.is_null()) {
        validate_node_config_source(source, "spec.configSource", true, errors);
    }
    if let Some(config) = obj.pointer("/status/config").filter(|v| !v.is_null()) {
        for part in ["assigned", "active", "lastKnownGood"] {
            if let Some(source) = config.get(part).filter(|v| !v.is_null()) {
                validate_node_config_source(
                    source,
                    &format!("status.config.{part}"),
                    false,
                    errors,
                );
            }
        }
    }
}

fn remove_field(obj: &mut Value, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cursor = obj;
    for part in parents {
        match cursor.get_mut(*part) {
            Some(next) => cursor = next,
            None => return,
        }
    }
    if let Some(map) = cursor.as_object_mut() {
        map.remove(*last);
    }
}

impl ApiServer {
    /// Creates a Node with these annotations and the Ready condition.
    pub fn create_node<K, V>(
        &self,
        name: &str,
        annotations: impl IntoIterator<Item = (K, V)>,
    ) -> Value
    where
        K: Into<String>,
        V: Into<String>,
    {
        let annotations: Map<String, Value> = annotations
            .into_iter()
            .map(|(k, v)| (k.into(), Value::String(v.into())))
            .collect();
        let body = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": annotations, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339(),
                }],
                "addresses": [{"type": "Hostname", "address": name}],
            },
        });
        self.helper(|state| state.create(&Target::cluster(Resource::Nodes), body, &Opts::default()))
    }

    /// The stored Node; panics if there is none.
    pub fn node(&self, name: &str) -> Value {
        self.try_node(name)
            .unwrap_or_else(|| panic!("fake API server has no node {name:?}"))
    }

    pub fn try_node(&self, name: &str) -> Option<Value> {
        self.lock()
            .get_served(&Target::object(Resource::Nodes, None, name))
    }

    /// Applies a JSON merge patch to `nodes/NAME` (or `nodes/NAME/status` if `status`) with
    /// the server's semantics; `Err` is the Status a client would get.
    pub fn patch_node(&self, name: &str, merge_patch: Value, status: bool) -> Result<Value, Value> {
        let mut target = Target::object(Resource::Nodes, None, name);
        if status {
            target.subresource = Some("status".to_string());
        }
        let patch = merge_patch.to_string().into_bytes();
        self.helper_result(|state| state.patch(&target, PatchKind::Merge, &patch, &Opts::default()))
    }

    /// Sets (`Some`) or removes (`None`) one annotation of a Node, as `kubectl annotate` does.
    pub fn set_node_annotation(&self, name: &str, key: &str, value: Option<&str>) -> Value {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.patch_node(name, patch, false)
            .unwrap_or_else(|status| panic!("failed to annotate node {name}: {status}"))
    }

    pub fn delete_node(&self, name: &str) {
        let target = Target::object(Resource::Nodes, None, name);
        self.helper(|state| state.delete(&target, None, &Opts::default()));
    }
}
