//! Reporting the config status on the Node: the freshest copy of the Node,
//! the condition, Node.status.config and annotation patches (only what the
//! Node does not show yet, retried with backoff), and the Event of a
//! condition change.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::Api;
use tracing::{debug, info};

use super::backoff::retry;
use super::Syncer;
use kp_contract::node_config;
use kp_contract::time::now_rfc3339;
use kp_runtime::events::{self, EventType, NodeEvent};

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
            info!(node = %self.node, uid = node.metadata.uid.as_deref(), "this node's Node object was re-created; reporting the status on it");
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
        let cond = node_config::condition(&report, self.sync_error.as_deref());
        let config = node_config::config_status(&report, self.sync_error.as_deref());
        let cond_shown = node_config::shows_condition(node, &cond);
        let roll = node_config::roll_required(&report);
        let annotation_shown = node_config::shows_annotation(node, &config, roll);
        // Where the server keeps Node.status.config (old servers), it goes
        // with the condition and is refreshed with the annotation.
        let keeps_config = node.status.as_ref().is_some_and(|s| s.config.is_some());
        let patch_status = !cond_shown || (!annotation_shown && keeps_config);
        if !patch_status && annotation_shown {
            self.metrics.synced(SystemTime::now());
            self.report_retry.succeeded();
            return;
        }
        let now = now_rfc3339();
        let nodes: Api<Node> = Api::all(self.client.clone());
        let pp = PatchParams::default();
        // The freshest Node a patch answered with, and the first failure.
        let mut fresh: Option<Node> = None;
        let mut failed: Option<kube::Error> = None;
        if patch_status {
            let status = node_config::status_patch(Some(node), &cond, &config, &now);
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
            let annotation = Patch::Merge(node_config::annotation_patch(&config, roll));
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
                self.report_retry.succeeded();
            }
            // A watch that resumes after an outage (no re-list) gives no
            // event to report on: this retry is what brings a status from
            // the outage to the Node (at most a backoff cap later).
            Some(err) => {
                let wait = self.report_retry.failed_call(&err);
                self.report_retry_at = Some(tokio::time::Instant::now() + wait);
            }
        }
        if post_event {
            info!(status = cond.status.as_str(), reason = %cond.reason, message = %cond.message, "KubeletConfigOK");
            self.event(&cond, &now).await;
        }
    }

    async fn event(&self, cond: &node_config::Condition, now: &str) {
        let uid = self.last_node.as_ref().and_then(|n| n.metadata.uid.clone());
        let (type_, reason) = match (cond.status, cond.event_reason()) {
            (_, Some(reason)) => (EventType::Warning, reason),
            (node_config::ConditionStatus::True, None) => (EventType::Normal, "KubeletConfigOK"),
            (node_config::ConditionStatus::False, None) => (
                EventType::Warning,
                node_config::Failure::RolledBack.event_reason(),
            ),
            (node_config::ConditionStatus::Unknown, None) => {
                (EventType::Warning, "KubeletConfigSyncFailed")
            }
        };
        let ev = NodeEvent {
            type_,
            reason,
            message: &node_config::event_message(cond),
            action: "Sync",
        };
        events::post(&self.client, &self.node, uid, &ev, now).await;
    }
}
