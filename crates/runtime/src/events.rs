//! Events on the own Node (core/v1, namespace `default`, as the kubelet
//! posts them), within the API's validation limits whatever the node name
//! and the texts. Posting is best effort: a failure is logged, never fatal.

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::PostParams;
use kube::{Api, Client};
use tracing::warn;

use kp_contract::node_config::{bounded, MAX_EVENT_MESSAGE_BYTES};
use kp_contract::text::prefix;

/// Component name in Events.
pub const COMPONENT: &str = "kubelet-pivot";
/// Namespace of Node events (as the kubelet does).
const EVENT_NAMESPACE: &str = "default";
/// Longest object name (a DNS subdomain), and longest reportingInstance of an
/// Event with eventTime set; longest reason.
const MAX_NAME: usize = 253;
const MAX_REPORTING_INSTANCE: usize = 128;
const MAX_EVENT_REASON: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One Event about the own Node.
#[derive(Debug, Clone, Copy)]
pub struct NodeEvent<'a> {
    pub type_: EventType,
    /// CamelCase, e.g. `Cordoned`, `DrainTimeout`.
    pub reason: &'a str,
    pub message: &'a str,
    /// What was done, e.g. `Sync`, `Drain`.
    pub action: &'a str,
}

/// Posts `ev` about `node` (best effort).
pub async fn post(client: &Client, node: &str, uid: Option<String>, ev: &NodeEvent<'_>, now: &str) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let object = event_object(node, uid, ev, now, nanos);
    let events: Api<CoreEvent> = Api::namespaced(client.clone(), EVENT_NAMESPACE);
    if let Err(err) = events.create(&PostParams::default(), &object).await {
        warn!(err = %crate::api_error::shown(&err), reason = ev.reason, "cannot post an Event on the Node");
    }
}

/// The core/v1 Event: name ≤ 253, reason ≤ 128, reportingInstance ≤ 128,
/// message ≤ 1024.
fn event_object(
    node: &str,
    uid: Option<String>,
    ev: &NodeEvent<'_>,
    now: &str,
    nanos: u128,
) -> CoreEvent {
    let time: Option<Time> =
        serde_json::from_value(serde_json::Value::String(now.to_string())).ok();
    let micro: Option<MicroTime> =
        serde_json::from_value(serde_json::Value::String(now.to_string())).ok();
    let suffix = format!(".{nanos:x}");
    let stem = prefix(node, MAX_NAME - suffix.len()).trim_end_matches(['.', '-']);
    CoreEvent {
        metadata: ObjectMeta {
            name: Some(format!("{stem}{suffix}")),
            namespace: Some(EVENT_NAMESPACE.to_string()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            uid,
            ..Default::default()
        },
        reason: Some(prefix(ev.reason, MAX_EVENT_REASON).to_string()),
        message: Some(bounded(ev.message, MAX_EVENT_MESSAGE_BYTES)),
        type_: Some(ev.type_.as_str().into()),
        count: Some(1),
        first_timestamp: time.clone(),
        last_timestamp: time,
        event_time: micro,
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(prefix(node, MAX_REPORTING_INSTANCE).to_string()),
        action: Some(ev.action.into()),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: Some(node.to_string()),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_stay_within_the_api_limits_whatever_the_input() {
        let node = format!("{}.example", "n".repeat(240));
        let reason = "r".repeat(5000);
        let message = "m".repeat(5000);
        let ev = NodeEvent {
            type_: EventType::Warning,
            reason: &reason,
            message: &message,
            action: "Sync",
        };
        let object = event_object(&node, None, &ev, "2026-01-01T00:00:00Z", u128::MAX);
        let name = object.metadata.name.unwrap();
        assert!(name.len() <= MAX_NAME, "{}", name.len());
        assert!(!name.contains(".."), "{name}");
        assert!(object.reporting_instance.unwrap().len() <= MAX_REPORTING_INSTANCE);
        assert!(object.reason.unwrap().len() <= 128);
        assert!(object.message.unwrap().len() <= MAX_EVENT_MESSAGE_BYTES);
        assert!(object.event_time.is_some());
        let short = event_object("node-a", None, &ev, "2026-01-01T00:00:00Z", 0x1f);
        assert_eq!(short.metadata.name.unwrap(), "node-a.1f");
        assert_eq!(short.type_.as_deref(), Some("Warning"));
    }
}
