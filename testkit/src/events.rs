//! Events, served by core/v1 and events.k8s.io/v1: the two shapes, the field renames between
//! them, their validation and their field selector labels.
//!
//! [`ApiServer::events`] is here too.

use crate::decode::with_type_meta;
use crate::resource::Resource;
use crate::ApiServer;

use serde_json::{json, Value};

use crate::decode::{Shape, OBJECT_META};
use crate::errors::FieldError;
use crate::resource::ApiGroup;
use crate::validation::qualified_name;

pub(crate) static EVENT_CORE: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("involvedObject", Shape::Any),
    ("reason", Shape::Any),
    ("message", Shape::Any),
    ("source", Shape::Any),
    ("firstTimestamp", Shape::Any),
    ("lastTimestamp", Shape::Any),
    ("count", Shape::Any),
    ("type", Shape::Any),
    ("eventTime", Shape::Any),
    ("series", Shape::Any),
    ("action", Shape::Any),
    ("related", Shape::Any),
    ("reportingComponent", Shape::Any),
    ("reportingInstance", Shape::Any),
]);

pub(crate) static EVENT_V1: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("eventTime", Shape::Any),
    ("series", Shape::Any),
    ("reportingController", Shape::Any),
    ("reportingInstance", Shape::Any),
    ("action", Shape::Any),
    ("reason", Shape::Any),
    ("regarding", Shape::Any),
    ("related", Shape::Any),
    ("note", Shape::Any),
    ("type", Shape::Any),
    ("deprecatedSource", Shape::Any),
    ("deprecatedFirstTimestamp", Shape::Any),
    ("deprecatedLastTimestamp", Shape::Any),
    ("deprecatedCount", Shape::Any),
]);

/// core/v1 Event field ↔ events.k8s.io/v1 Event field.
const EVENT_FIELD_RENAMES: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Renames Event fields core → events.k8s.io (`to_v1`) or back.
pub(crate) fn rename_event_fields(obj: Value, to_v1: bool) -> Value {
    let Value::Object(map) = obj else { return obj };
    let renamed = map
        .into_iter()
        .map(|(key, value)| {
            let new_key = EVENT_FIELD_RENAMES
                .iter()
                .find(|(core, v1)| if to_v1 { core == &key } else { v1 == &key })
                .map(|(core, v1)| {
                    if to_v1 {
                        v1.to_string()
                    } else {
                        core.to_string()
                    }
                })
                .unwrap_or(key);
            (new_key, value)
        })
        .collect();
    Value::Object(renamed)
}

fn is_zero_time(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    }
}

/// ValidateEventCreate / ValidateEventUpdate (the stored object is in core/v1 form; field
/// paths are those of the internal type, as in the real messages).
pub(crate) fn validate_event(
    obj: &Value,
    group: ApiGroup,
    old: Option<&Value>,
    errors: &mut Vec<FieldError>,
) {
    let text = |field: &str| {
        obj.get(field)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let namespace = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let involved_ns = obj["involvedObject"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mismatch = || {
        FieldError::invalid(
            "involvedObject.namespace",
            json!(involved_ns),
            "does not match event.namespace",
        )
    };
    if is_zero_time(obj.get("eventTime")) {
        let ok = if involved_ns.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == involved_ns
        };
        if !ok {
            errors.push(mismatch());
        }
    } else {
        if involved_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
            errors.push(mismatch());
        }
        let controller = text("reportingComponent");
        if controller.is_empty() {
            errors.push(FieldError::required("reportingController", ""));
        }
        for msg in qualified_name(&controller) {
            errors.push(FieldError::invalid(
                "reportingController",
                json!(controller),
                &msg,
            ));
        }
        for (field, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
            let value = text(field);
            if value.is_empty() {
                errors.push(FieldError::required(field, ""));
            }
            if value.len() > limit {
                errors.push(FieldError::invalid(
                    field,
                    json!(""),
                    &format!("can have at most {limit} characters"),
                ));
            }
        }
        if text("message").len() > 1024 {
            errors.push(FieldError::invalid(
                "message",
                json!(""),
                "can have at most 1024 characters",
            ));
        }
    }
    if group != ApiGroup::EventsV1 {
        return;
    }
    match old {
        None => {
            if let Some(series) = obj.get("series").filter(|v| !v.is_null()) {
                if series["count"].as_i64().unwrap_or(0) < 2 {
                    errors.push(FieldError::invalid(
                        "series.count",
                        json!(""),
                        "should be at least 2",
                    ));
                }
                if is_zero_time(series.get("lastObservedTime")) {
                    errors.push(FieldError::required("series.lastObservedTime", ""));
                }
            }
            if is_zero_time(obj.get("eventTime")) {
                errors.push(FieldError::required("eventTime", ""));
            }
            let kind = text("type");
            if kind != "Normal" && kind != "Warning" {
                errors.push(FieldError::invalid(
                    "type",
                    json!(""),
                    &format!("has invalid value: {kind}"),
                ));
            }
            for field in ["firstTimestamp", "lastTimestamp"] {
                if !is_zero_time(obj.get(field)) {
                    errors.push(FieldError::invalid(field, json!(""), "needs to be unset"));
                }
            }
            if obj["count"].as_i64().unwrap_or(0) != 0 {
                errors.push(FieldError::invalid("count", json!(""), "needs to be unset"));
            }
            let source = &obj["source"];
            if source["component"].as_str().is_some_and(|s| !s.is_empty())
                || source["host"].as_str().is_some_and(|s| !s.is_empty())
            {
                errors.push(FieldError::invalid(
                    "source",
                    json!(""),
                    "needs to be unset",
                ));
            }
        }
        Some(old) => {
            let immutable = [
                ("involvedObject", "involvedObject"),
                ("reason", "reason"),
                ("message", "message"),
                ("source", "source"),
                ("firstTimestamp", "firstTimestamp"),
                ("lastTimestamp", "lastTimestamp"),
                ("count", "count"),
                ("type", "type"),
                ("eventTime", "eventTime"),
                ("action", "action"),
                ("related", "related"),
                ("reportingComponent", "reportingController"),
                ("reportingInstance", "reportingInstance"),
            ];
            for (field, path) in immutable {
                let new_value = obj.get(field).filter(|v| !v.is_null());
                if new_value != old.get(field).filter(|v| !v.is_null()) {
                    errors.push(FieldError::invalid(
                        path,
                        new_value.cloned().unwrap_or(json!("")),
                        "field is immutable",
                    ));
                }
            }
        }
    }
}

pub(crate) const EVENT_FIELD_LABELS: [&str; 10] = [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "type",
];

impl ApiServer {
    /// Every stored Event (core/v1 form), in namespace/name order.
    pub fn events(&self) -> Vec<Value> {
        let state = self.lock();
        state
            .objects(Resource::Events)
            .values()
            .map(|obj| with_type_meta(obj.clone(), Resource::Events, ApiGroup::Core))
            .collect()
    }
}
