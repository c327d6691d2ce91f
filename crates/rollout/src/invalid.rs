//! A rollout the controller cannot read (an object an older CRD, or a server that does not
//! enforce the CRD, let in: `spec.batch: null`, `spec.canary: 4294967296`): reported on the
//! object itself and skipped, so that it stops no other rollout.
//!
//! The report is written without the typed object, as raw JSON: the stored object with
//! `status.phase: Invalid` and the condition `Valid=False` (reason [`REASON`]) naming the
//! field, everything else of the status kept as it is (its revisions and snapshot are still
//! what the nodes' records refer to). A Warning Event with the same message goes with it.
//! Both happen once per object generation and error: a controller that restarts finds the
//! report in the status and does not repeat it.

use serde_json::{json, Map, Value};

use kp_contract::node_config::bounded;
use kp_contract::rollout::{DecodeError, Phase};

/// The reason of the `Valid=False` condition and of the Event.
pub const REASON: &str = "Undecodable";
/// The condition the report sets.
pub const CONDITION: &str = super::plan::conditions::ConditionType::Valid.as_str();

/// The longest message of the condition and the Event (an Event's note is at most 1 KiB).
pub const MAX_MESSAGE: usize = 1024;

/// What the condition and the Event say about `name` (at most [`MAX_MESSAGE`] bytes: the
/// error can quote a long value).
pub fn message(name: &str, err: &DecodeError) -> String {
    bounded(
        &format!(
            "the rollout controller cannot read this object ({err}); it skips it, and the other \
             rollouts go on, until the field is fixed (kubectl edit kcr {name}) or the object is deleted"
        ),
        MAX_MESSAGE,
    )
}

/// The report, for a given object generation, as the controller keeps it in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub message: String,
}

/// How far the report of one object has got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub key: Key,
    /// The Event was posted (or could not be: Events are best effort).
    pub event_done: bool,
    /// The status says it, or the server refused the write for good (see [`StatusWrite`]).
    pub status_done: bool,
}

impl Report {
    pub fn new(key: Key) -> Report {
        Report {
            key,
            event_done: false,
            status_done: false,
        }
    }

    pub fn done(&self) -> bool {
        self.event_done && self.status_done
    }
}

/// The outcome of writing the report into the status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusWrite {
    Written,
    /// The object changed or is gone meanwhile (409, 404): look again.
    Stale,
    /// The server validates the whole object on a status write and refuses its spec (a
    /// server without CRD validation ratcheting, before Kubernetes 1.30): the Event is
    /// the only report; retrying cannot help.
    Refused,
}

/// Whether `raw`'s status already carries this report (written before a restart).
pub fn already_reported(raw: &Value, message: &str) -> bool {
    let status = &raw["status"];
    status["phase"] == Phase::Invalid.as_str()
        && status["conditions"].as_array().is_some_and(|conds| {
            conds.iter().any(|c| {
                c["type"] == CONDITION
                    && c["status"] == "False"
                    && c["reason"] == REASON
                    && c["message"] == message
            })
        })
}

/// The object `raw` with the report in its status: phase `Invalid`, the condition set (its
/// lastTransitionTime kept if it was already False), `observedGeneration` the object's
/// generation; other status fields as they are (a status that is not an object, or
/// conditions that are not a list, are replaced).
pub fn with_report(raw: &Value, message: &str, now: &str) -> Value {
    let mut obj = raw.clone();
    let generation = raw["metadata"]["generation"].clone();
    let Some(map) = obj.as_object_mut() else {
        return obj;
    };
    let status = map
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let Some(status) = status.as_object_mut() else {
        return obj;
    };
    status.insert("phase".into(), json!(Phase::Invalid.as_str()));
    if generation.is_i64() {
        status.insert("observedGeneration".into(), generation.clone());
    }
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let Some(conditions) = conditions.as_array_mut() else {
        return obj;
    };
    let message = bounded(message, MAX_MESSAGE);
    let since = conditions
        .iter()
        .find(|c| c["type"] == CONDITION && c["status"] == "False")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or(now)
        .to_string();
    conditions.retain(|c| c["type"] != CONDITION);
    conditions.push(json!({
        "type": CONDITION,
        "status": "False",
        "reason": REASON,
        "message": message,
        "lastTransitionTime": since,
    }));
    if generation.is_i64() {
        if let Some(c) = conditions.last_mut().and_then(Value::as_object_mut) {
            c.insert("observedGeneration".into(), generation);
        }
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err() -> DecodeError {
        DecodeError {
            field: "spec.canary".into(),
            reason: "invalid value: integer `4294967296`, expected u32".into(),
        }
    }

    #[test]
    fn the_report_keeps_the_rest_of_the_status() {
        let raw = json!({
            "metadata": {"name": "r1", "generation": 3},
            "spec": {"canary": 4294967296u64},
            "status": {
                "phase": "Progressing", "revision": 2, "batches": [["a"], ["b"]],
                "conditions": [
                    {"type": "Valid", "status": "True", "reason": "SpecValid", "message": "",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "ConfigFound", "status": "True", "reason": "Found", "message": "",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"},
                ],
            },
        });
        let msg = message("r1", &err());
        assert!(!already_reported(&raw, &msg));
        let out = with_report(&raw, &msg, "2026-02-02T00:00:00Z");
        assert_eq!(out["status"]["phase"], "Invalid");
        assert_eq!(out["status"]["observedGeneration"], 3);
        assert_eq!(out["status"]["revision"], 2);
        assert_eq!(out["status"]["batches"], json!([["a"], ["b"]]));
        assert_eq!(out["spec"], raw["spec"]);
        let conds = out["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2);
        let valid = conds.iter().find(|c| c["type"] == "Valid").unwrap();
        assert_eq!(valid["status"], "False");
        assert_eq!(valid["reason"], "Undecodable");
        assert_eq!(valid["lastTransitionTime"], "2026-02-02T00:00:00Z");
        assert_eq!(valid["observedGeneration"], 3);
        assert!(
            valid["message"]
                .as_str()
                .unwrap()
                .contains("spec.canary: invalid value: integer `4294967296`"),
            "{valid}"
        );
        assert!(already_reported(&out, &msg));
        // Written again later: the transition time stays.
        let again = with_report(&out, &msg, "2026-03-03T00:00:00Z");
        assert_eq!(again, out);
    }

    #[test]
    fn a_long_value_is_quoted_within_the_limit_and_the_report_is_still_found() {
        let err = DecodeError {
            field: "spec.canary".into(),
            reason: format!("invalid type: string {:?}, expected u32", "x".repeat(5000)),
        };
        let msg = message("r1", &err);
        assert!(msg.len() <= MAX_MESSAGE, "{}", msg.len());
        let out = with_report(&json!({"metadata": {"name": "r1"}}), &msg, "t");
        assert!(already_reported(&out, &msg));
    }

    #[test]
    fn a_status_of_the_wrong_shape_is_replaced() {
        for status in [json!(null), json!("x"), json!({"conditions": 7})] {
            let raw = json!({"metadata": {"name": "r1"}, "status": status});
            let out = with_report(&raw, "m", "2026-02-02T00:00:00Z");
            assert_eq!(out["status"]["phase"], "Invalid", "{status}");
            assert_eq!(out["status"]["conditions"][0]["message"], "m");
            assert!(already_reported(&out, "m"));
        }
        let none = with_report(&json!({"metadata": {}}), "m", "t");
        assert_eq!(none["status"]["conditions"][0]["reason"], "Undecodable");
    }
}
