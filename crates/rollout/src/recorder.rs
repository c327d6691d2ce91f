//! Posts events.k8s.io/v1 Events about rollouts: one create per Event.
//!
//! kube-runtime's `Recorder` folds Events with the same reason and action about the same
//! object into one series, whatever their notes say ("batch 1 starts" then "batch 2
//! starts" would show as the first, seen twice). Each [`Happening`](super::events::Happening)
//! is a fact of its own, so each is created, as client-go names them
//! (`NAME.UNIXNANOS-in-hex`); nothing is patched.

use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;

use kp_contract::node_config::bounded;

/// The reporting controller of the rollout controller's Events.
pub const REPORTER: &str = "kubelet-pivot-rollout-controller";
/// Where the Events about cluster-scoped objects live.
const CLUSTER_EVENTS_NAMESPACE: &str = "default";
/// The longest note the API server takes.
const MAX_NOTE: usize = 1024;
/// The longest reportingInstance the API server takes.
const MAX_INSTANCE: usize = 128;

/// `Normal` or `Warning` (the Node Events' type).
pub use kp_runtime::events::EventType as Severity;

/// One Event to post.
#[derive(Clone, Debug)]
pub struct Note<'a> {
    pub severity: Severity,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: &'a str,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot post the Event {reason} about {object}: {}", kp_runtime::api_error::shown(.source))]
pub struct PostError {
    reason: String,
    object: String,
    #[source]
    source: kube::Error,
}

/// Posts Events as one replica of the controller.
#[derive(Clone)]
pub struct Recorder {
    api: Api<Event>,
    instance: String,
}

impl Recorder {
    pub fn new(client: Client, instance: &str) -> Recorder {
        Recorder {
            api: Api::namespaced(client, CLUSTER_EVENTS_NAMESPACE),
            instance: instance.to_string(),
        }
    }

    /// Creates one Event about the cluster-scoped object `regarding`.
    pub async fn post(
        &self,
        regarding: &ObjectReference,
        note: &Note<'_>,
    ) -> Result<(), PostError> {
        let event = event(&self.instance, regarding, note, SystemTime::now());
        self.api
            .create(&PostParams::default(), &event)
            .await
            .map(|_| ())
            .map_err(|source| PostError {
                reason: note.reason.to_string(),
                object: regarding.name.clone().unwrap_or_default(),
                source,
            })
    }
}

/// The Event `instance` posts about `regarding` at `at`.
fn event(instance: &str, regarding: &ObjectReference, note: &Note<'_>, at: SystemTime) -> Event {
    let nanos = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    let object = regarding.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{object}.{nanos:x}")),
            namespace: Some(CLUSTER_EVENTS_NAMESPACE.to_string()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        reporting_controller: Some(REPORTER.to_string()),
        reporting_instance: Some(bounded(instance, MAX_INSTANCE)),
        action: Some(note.action.to_string()),
        reason: Some(note.reason.to_string()),
        regarding: Some(regarding.clone()),
        note: Some(bounded(note.note, MAX_NOTE)),
        type_: Some(note.severity.as_str().to_string()),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_named_after_its_object_and_its_note_is_cut_to_the_limit() {
        let regarding = ObjectReference {
            name: Some("r1".into()),
            ..ObjectReference::default()
        };
        let long = "x".repeat(5000);
        let note = Note {
            severity: Severity::Warning,
            reason: "NodeFailed",
            action: "GateNode",
            note: &long,
        };
        let at = UNIX_EPOCH + std::time::Duration::from_nanos(0xabc);
        let event = event(&"i".repeat(300), &regarding, &note, at);
        assert_eq!(event.metadata.name.as_deref(), Some("r1.abc"));
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        assert!(event.note.unwrap().len() <= MAX_NOTE);
        assert!(event.reporting_instance.unwrap().len() <= MAX_INSTANCE);
        assert_eq!(event.type_.as_deref(), Some("Warning"));
    }
}
