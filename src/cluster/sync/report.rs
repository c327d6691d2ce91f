//! Reporting the config status on the Node: the freshest copy of the Node,
//! the condition, Node.status.config and annotation patches (only what the
//! Node does not show yet, retried with backoff), and the Event of a
//! condition change.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use tracing::{debug, info, warn};

use super::backoff::retry;
use super::{Syncer, DOWNLOAD_BACKOFF};
use crate::cluster::nodeconfig;
use crate::pivot::role::now_rfc3339;

/// Component name in Events.
const COMPONENT: &str = "kubelet-pivot";
/// Namespace of Node events (as the kubelet does).
const EVENT_NAMESPACE: &str = "default";
/// Longest wait before a failed status report is tried again: a watch that
/// resumes after an outage (no re-list) gives no event to report on, so the
/// retry is what brings a status from the outage to the Node.
const REPORT_BACKOFF_MAX: Duration = Duration::from_secs(5);

impl Syncer {
    /// Keeps `node` as the freshest copy of the Node unless an older version
    /// of the same Node arrives after a newer one (a watch event queued
    /// behind our own patch's response). A new UID (a re-created Node)
    /// always replaces it.
    pub(super) fn observe_node(&mut self, node: Node) {
        if let Some(old) = &self.last_node {
            let rv = |n: &Node| {
                n.metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse::<u64>().ok())
            };
            let same_uid = old.metadata.uid == node.metadata.uid;
            if let (true, Some(old_rv), Some(new_rv)) = (same_uid, rv(old), rv(&node)) {
                if new_rv < old_rv {
                    return;
                }
            }
        }
        if self.last_uid.is_some() && self.last_uid != node.metadata.uid {
            info!(node = %self.node, uid = ?node.metadata.uid, "this node's Node object was re-created; reporting the status on it");
        }
        self.last_uid.clone_from(&node.metadata.uid);
        self.last_node = Some(node);
    }

    /// Reports the current config status on the Node: condition (with
    /// Node.status.config) and status annotation, each only if the Node does
    /// not show it already, and an Event when the condition's status, reason
    /// or message changed. Nothing before the Node has been read.
    pub(super) async fn report(&mut self) {
        let Some(report) = self.reports.borrow_and_update().clone() else {
            return;
        };
        self.metrics.sync_error(self.sync_error.as_deref());
        let Some(node) = self.last_node.as_ref() else {
            debug!("the Node has not been read (yet); reporting once it is");
            return;
        };
        self.report_retry_at = None;
        let cond = nodeconfig::condition(&report, self.sync_error.as_deref());
        let config = nodeconfig::config_status(&report, self.sync_error.as_deref());
        let cond_shown = nodeconfig::shows_condition(node, &cond);
        let annotation_shown = nodeconfig::shows_annotation(node, &config);
        // Where the server keeps Node.status.config (old servers), it goes
        // with the condition and is refreshed with the annotation.
        let keeps_config = node.status.as_ref().is_some_and(|s| s.config.is_some());
        let patch_status = !cond_shown || (!annotation_shown && keeps_config);
        if !patch_status && annotation_shown {
            self.metrics.synced(SystemTime::now());
            self.report_retry_delay = DOWNLOAD_BACKOFF;
            return;
        }
        let now = now_rfc3339();
        let nodes: Api<Node> = Api::all(self.client.clone());
        let pp = PatchParams::default();
        // The freshest Node a patch answered with, and the first failure.
        let mut fresh: Option<Node> = None;
        let mut failed: Option<kube::Error> = None;
        if patch_status {
            let status = nodeconfig::status_patch(Some(node), &cond, &config, &now);
            let status_patch = Patch::Strategic(status);
            match retry(|| nodes.patch_status(&self.node, &pp, &status_patch)).await {
                Ok(n) => fresh = Some(n),
                Err(err) => failed = Some(err),
            }
        }
        // The condition changed on the Node: its Event goes out even if the
        // annotation patch fails (the retry then finds the condition shown,
        // as the status patch's answer is kept).
        let post_event = !cond_shown && failed.is_none();
        if !annotation_shown && failed.is_none() {
            let annotation = Patch::Merge(nodeconfig::annotation_patch(&config));
            match retry(|| nodes.patch(&self.node, &pp, &annotation)).await {
                Ok(n) => fresh = Some(n),
                Err(err) => failed = Some(err),
            }
        }
        if let Some(node) = fresh {
            self.observe_node(node);
        }
        match failed {
            None => {
                self.metrics.synced(SystemTime::now());
                self.report_retry_delay = DOWNLOAD_BACKOFF;
            }
            Some(err) => {
                warn!(%err, retry_in = ?self.report_retry_delay, "cannot report the config status on the Node; will try again");
                self.report_retry_at = Some(tokio::time::Instant::now() + self.report_retry_delay);
                self.report_retry_delay = (self.report_retry_delay * 2).min(REPORT_BACKOFF_MAX);
            }
        }
        if post_event {
            info!(status = cond.status.as_str(), reason = %cond.reason, message = %cond.message, "KubeletConfigOK");
            self.event(&cond, &now).await;
        }
    }

    async fn event(&self, cond: &nodeconfig::Condition, now: &str) {
        let uid = self.last_node.as_ref().and_then(|n| n.metadata.uid.clone());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let ev = event_object(&self.node, uid, cond, now, nanos);
        let events: Api<CoreEvent> = Api::namespaced(self.client.clone(), EVENT_NAMESPACE);
        if let Err(err) = events.create(&PostParams::default(), &ev).await {
            warn!(%err, "cannot post the config Event on the Node");
        }
    }
}

/// Longest object name (a DNS subdomain), and longest reportingInstance of an
/// Event with eventTime set.
const MAX_NAME: usize = 253;
const MAX_REPORTING_INSTANCE: usize = 128;

/// At most `max` bytes of `s`, on a character boundary.
fn prefix(s: &str, max: usize) -> &str {
    let mut cut = s.len().min(max);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

/// The core/v1 Event of a condition change, within the API's validation
/// limits whatever the node name and the texts: name ≤ 253, reason ≤ 128,
/// reportingInstance ≤ 128, message ≤ 1024.
fn event_object(
    node: &str,
    uid: Option<String>,
    cond: &nodeconfig::Condition,
    now: &str,
    nanos: u128,
) -> CoreEvent {
    let (type_, reason) = match cond.status {
        nodeconfig::ConditionStatus::True => ("Normal", "KubeletConfigOK"),
        nodeconfig::ConditionStatus::False => ("Warning", "KubeletConfigRolledBack"),
        nodeconfig::ConditionStatus::Unknown => ("Warning", "KubeletConfigSyncFailed"),
    };
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
        reason: Some(reason.into()),
        message: Some(nodeconfig::event_message(cond)),
        type_: Some(type_.into()),
        count: Some(1),
        first_timestamp: time.clone(),
        last_timestamp: time,
        event_time: micro,
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(prefix(node, MAX_REPORTING_INSTANCE).to_string()),
        action: Some("Sync".into()),
        source: Some(k8s_openapi::api::core::v1::EventSource {
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
        let cond = nodeconfig::Condition {
            status: nodeconfig::ConditionStatus::Unknown,
            reason: "r".repeat(5000),
            message: "m".repeat(5000),
        };
        let ev = event_object(&node, None, &cond, "2026-01-01T00:00:00Z", u128::MAX);
        let name = ev.metadata.name.unwrap();
        assert!(name.len() <= MAX_NAME, "{}", name.len());
        assert!(!name.contains(".."), "{name}");
        assert!(ev.reporting_instance.unwrap().len() <= MAX_REPORTING_INSTANCE);
        assert!(ev.reason.unwrap().len() <= 128);
        assert!(ev.message.unwrap().len() <= nodeconfig::MAX_EVENT_MESSAGE_BYTES);
        assert!(ev.event_time.is_some());
        let short = event_object("node-a", None, &cond, "2026-01-01T00:00:00Z", 0x1f);
        assert_eq!(short.metadata.name.unwrap(), "node-a.1f");
    }
}
