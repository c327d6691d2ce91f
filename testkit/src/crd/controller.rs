//! The controllers, done at once after a write: names, establishing, serving, cleanup.

use serde_json::{json, Map, Value};

use crate::clock::now_rfc3339;
use crate::conditions::set_condition;
use crate::decode::with_type_meta;
use crate::resource::{Resource, Target};
use crate::store::{self, is_deleting, EventType, Outcome, State};
use crate::watch::History;

use super::types::{custom_type, CustomType};
use super::CLEANUP_FINALIZER;

/// The status the naming and establishing controllers give a definition.
fn established_status(crd: &Value) -> Value {
    let mut status = crd["status"].as_object().cloned().unwrap_or_default();
    let names = &crd["spec"]["names"];
    let mut accepted = Map::new();
    for field in [
        "plural",
        "singular",
        "shortNames",
        "kind",
        "listKind",
        "categories",
    ] {
        match &names[field] {
            Value::Null => {}
            Value::Array(items) if items.is_empty() => {}
            value => {
                accepted.insert(field.to_string(), value.clone());
            }
        }
    }
    status.insert("acceptedNames".into(), Value::Object(accepted));
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (kind, reason, message) in [
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        (
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ] {
        let fresh = json!({
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        });
        set_condition(&mut conditions, fresh, &[]);
    }
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// Called by `State::commit` after every write of a definition (`prev` is the served type
/// of the definition before the write).
pub(crate) fn on_commit(
    state: &mut State,
    kind: EventType,
    crd: &Value,
    prev: Option<&'static CustomType>,
) {
    let current = custom_type(crd);
    if kind == EventType::Deleted {
        if let Some(gone) = current.or(prev) {
            state.store.remove(&Resource::Custom(gone));
            state.histories.remove(&Resource::Custom(gone));
        }
        return;
    }
    if let (Some(old), Some(new)) = (prev, current) {
        if old != new {
            // The storage is rebuilt for the new identity; watches of the old one end.
            let objects = state
                .store
                .remove(&Resource::Custom(old))
                .unwrap_or_default();
            state.store.insert(Resource::Custom(new), objects);
            state.histories.remove(&Resource::Custom(old));
            state
                .histories
                .insert(Resource::Custom(new), History::new(state.rv));
        }
    }
    if is_deleting(crd) {
        if store::finalizers(crd)
            .iter()
            .any(|f| f == CLEANUP_FINALIZER)
        {
            clean_up(state, crd, current);
        }
        return;
    }
    let status = established_status(crd);
    if crd["status"] != status {
        let mut updated = crd.clone();
        updated["status"] = status;
        state.commit(
            Resource::CustomResourceDefinitions,
            EventType::Modified,
            updated,
            Some(crd.clone()),
        );
        return;
    }
    if let Some(served) = current {
        let rv = state.rv;
        state.store.entry(Resource::Custom(served)).or_default();
        state
            .histories
            .entry(Resource::Custom(served))
            .or_insert_with(|| History::new(rv));
    }
}

/// The cleanup controller: every object of the resource deleted, then the finalizer removed.
fn clean_up(state: &mut State, crd: &Value, served: Option<&'static CustomType>) {
    if let Some(served) = served {
        let resource = Resource::Custom(served);
        let objects: Vec<Value> = state.objects(resource).values().cloned().collect();
        for obj in objects {
            state.commit(resource, EventType::Deleted, obj.clone(), Some(obj));
        }
    }
    let mut updated = crd.clone();
    let remaining: Vec<Value> = store::finalizers(crd)
        .into_iter()
        .filter(|f| f != CLEANUP_FINALIZER)
        .collect();
    if let Some(conditions) = updated
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for condition in conditions.iter_mut() {
            if condition["type"] == "Terminating" {
                condition["reason"] = json!("InstanceDeletionCompleted");
                condition["message"] = json!("removed all instances");
                condition["status"] = json!("False");
            }
        }
    }
    let kind = if remaining.is_empty() {
        EventType::Deleted
    } else {
        EventType::Modified
    };
    updated["metadata"]["finalizers"] = Value::Array(remaining);
    state.commit(
        Resource::CustomResourceDefinitions,
        kind,
        updated,
        Some(crd.clone()),
    );
}

/// The REST Delete of definitions: the first delete marks the definition (deletionTimestamp,
/// the cleanup finalizer, `Terminating`) and answers with it; the cleanup follows at once.
pub(crate) fn delete(state: &mut State, target: &Target, old: Value) -> Outcome {
    if is_deleting(&old) {
        return Outcome::ok(with_type_meta(old, target.resource, target.group));
    }
    let mut obj = old.clone();
    obj["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
    obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    let mut finalizers = store::finalizers(&obj);
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        finalizers.push(json!(CLEANUP_FINALIZER));
    }
    obj["metadata"]["finalizers"] = Value::Array(finalizers);
    let terminating = json!({
        "type": "Terminating",
        "status": "True",
        "reason": "InstanceDeletionPending",
        "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
        "lastTransitionTime": now_rfc3339(),
    });
    match obj
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        Some(conditions) => {
            conditions.retain(|c| c["type"] != "Terminating");
            conditions.push(terminating);
        }
        None => obj["status"]["conditions"] = json!([terminating]),
    }
    let stored = state.commit(target.resource, EventType::Modified, obj, Some(old));
    Outcome::ok(with_type_meta(stored, target.resource, target.group))
}
