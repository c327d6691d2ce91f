//! The Node lifecycle conditions of KEP-5683 (kubernetes/enhancements,
//! `keps/sig-node/5683-lifecycle-conditions`): `DrainInProgress` and
//! `Drained`, written on the own Node's status while a drain for a config
//! change runs and cleared when it ends or is abandoned, so that tools that
//! read those conditions (and `kubectl describe node`) see the drain without
//! knowing kubelet-pivot.
//!
//! The two conditions are always written together, in one strategic merge
//! patch of `nodes/status` keyed by condition type (other conditions are
//! untouched), with the transitions the KEP gives `kubectl drain
//! --report-node-conditions`, under reasons of our own
//! (`KubeletPivotDrain*`, as kubectl's are `KubectlDrain*`):
//!
//! ```text
//!  transition                           DrainInProgress  Drained  reason
//!  a drain attempt starts               True             False    KubeletPivotDrainStarted
//!  every pod left                       False            True     KubeletPivotDrainCompleted
//!  the attempt gave up (retried later)  False            False    KubeletPivotDrainFailed
//!  abandoned (change gone, or held)     False            False    KubeletPivotDrainInterrupted
//!  new config healthy, node uncordoned  False            False    KubeletPivotDrainEnded
//! ```
//!
//! The clearing transitions (interrupted, ended) are written only over our
//! own observation: when neither condition is True under one of our reasons
//! (never written, or another writer's since), the Node is left alone.
//! A write is best effort and bounded ([`WRITE_TIMEOUT`]); a failure is
//! logged and changes nothing in the drain, as the KEP has it for kubectl.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use kube::api::{Patch, PatchParams};
use serde_json::{json, Value};
use tracing::{info, warn};

use super::answer;
use super::Drainer;
use kp_contract::node_config::{bounded, MAX_MESSAGE_BYTES};
use kp_contract::time::now_rfc3339;

/// KEP-5683's condition: the node is being drained.
pub const DRAIN_IN_PROGRESS: &str = "DrainInProgress";
/// KEP-5683's condition: the drain's criteria were met.
pub const DRAINED: &str = "Drained";
/// The start of every reason we write: a condition under another reason
/// is another writer's.
pub const REASON_PREFIX: &str = "KubeletPivotDrain";
/// Longest message, in bytes (as the KubeletConfigOK message of a change).
pub const MAX_LIFECYCLE_MESSAGE_BYTES: usize = MAX_MESSAGE_BYTES * 4;
/// One write (the read of the Node and the patch) gives up after this.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// A transition of the drain, as the two conditions show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// A drain attempt starts.
    Started,
    /// Every pod that must leave has left.
    Completed,
    /// The attempt gave up (timeout, refusal); tried again later.
    Failed,
    /// The drain was abandoned before the change was applied.
    Interrupted,
    /// The change was applied after the drain and the node is back.
    Ended,
}

impl Lifecycle {
    /// `DrainInProgress`, `Drained`.
    pub fn statuses(self) -> (bool, bool) {
        match self {
            Lifecycle::Started => (true, false),
            Lifecycle::Completed => (false, true),
            Lifecycle::Failed | Lifecycle::Interrupted | Lifecycle::Ended => (false, false),
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Lifecycle::Started => "KubeletPivotDrainStarted",
            Lifecycle::Completed => "KubeletPivotDrainCompleted",
            Lifecycle::Failed => "KubeletPivotDrainFailed",
            Lifecycle::Interrupted => "KubeletPivotDrainInterrupted",
            Lifecycle::Ended => "KubeletPivotDrainEnded",
        }
    }

    /// Whether this transition only clears what we set.
    fn clears(self) -> bool {
        matches!(self, Lifecycle::Interrupted | Lifecycle::Ended)
    }
}

fn status_text(on: bool) -> &'static str {
    if on {
        "True"
    } else {
        "False"
    }
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether `node` shows a lifecycle condition True under one of our reasons.
pub fn shows_ours(node: &Node) -> bool {
    [DRAIN_IN_PROGRESS, DRAINED].iter().any(|t| {
        condition(node, t).is_some_and(|c| {
            c.status == "True"
                && c.reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with(REASON_PREFIX))
        })
    })
}

/// The message as it goes on the Node: control characters escaped, bounded.
pub fn message_of(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || c.is_whitespace() && c != ' ' {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    bounded(&escaped, MAX_LIFECYCLE_MESSAGE_BYTES)
}

/// The strategic merge patch of both conditions as of `now`; a condition
/// whose status does not change keeps its lastTransitionTime.
pub fn patch(node: Option<&Node>, to: Lifecycle, message: &str, now: &str) -> Value {
    let (in_progress, drained) = to.statuses();
    let entry = |type_: &str, on: bool| {
        let status = status_text(on);
        let since = node
            .and_then(|n| condition(n, type_))
            .filter(|c| c.status == status)
            .and_then(|c| c.last_transition_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .unwrap_or_else(|| Value::String(now.to_string()));
        json!({
            "type": type_,
            "status": status,
            "reason": to.reason(),
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": since,
        })
    };
    json!({"status": {"conditions": [
        entry(DRAIN_IN_PROGRESS, in_progress),
        entry(DRAINED, drained),
    ]}})
}

impl Drainer {
    /// Shows `to` on the Node (see the module doc); best effort, bounded.
    pub async fn lifecycle(&self, to: Lifecycle, message: &str) {
        let message = message_of(message);
        match tokio::time::timeout(WRITE_TIMEOUT, self.write_lifecycle(to, &message)).await {
            Ok(Ok(true)) => {
                info!(reason = to.reason(), %message, "node lifecycle conditions (DrainInProgress, Drained) reported")
            }
            Ok(Ok(false)) => {}
            Ok(Err(err)) => warn!(
                reason = to.reason(),
                err = %answer::cleaned(&kp_runtime::api_error::shown(&err).to_string()),
                "cannot report the node lifecycle conditions (DrainInProgress, Drained); the drain goes on"
            ),
            Err(_) => warn!(
                reason = to.reason(),
                "cannot report the node lifecycle conditions (DrainInProgress, Drained): no answer in {}; the drain goes on", humantime::format_duration(WRITE_TIMEOUT)
            ),
        }
    }

    /// Reads the Node and patches its status; `Ok(false)` when a clearing
    /// transition finds nothing of ours to clear.
    async fn write_lifecycle(&self, to: Lifecycle, message: &str) -> Result<bool, kube::Error> {
        let node = self.nodes().get_opt(&self.node).await?;
        if to.clears() && !node.as_ref().is_some_and(shows_ours) {
            return Ok(false);
        }
        let body = Patch::Strategic(patch(node.as_ref(), to, message, &now_rfc3339()));
        self.nodes()
            .patch_status(&self.node, &PatchParams::default(), &body)
            .await?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_with(conditions: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn both_conditions_go_in_one_patch_with_the_kep_transitions() {
        let p = patch(None, Lifecycle::Started, "draining", "2026-01-01T00:00:00Z");
        let c = &p["status"]["conditions"];
        assert_eq!(c[0]["type"], DRAIN_IN_PROGRESS);
        assert_eq!(c[0]["status"], "True");
        assert_eq!(c[1]["type"], DRAINED);
        assert_eq!(c[1]["status"], "False");
        assert_eq!(c[0]["reason"], "KubeletPivotDrainStarted");
        assert_eq!(c[1]["message"], "draining");
        for (to, want) in [
            (Lifecycle::Completed, (false, true)),
            (Lifecycle::Failed, (false, false)),
            (Lifecycle::Interrupted, (false, false)),
            (Lifecycle::Ended, (false, false)),
        ] {
            assert_eq!(to.statuses(), want, "{to:?}");
            assert!(to.reason().starts_with(REASON_PREFIX));
        }
    }

    #[test]
    fn an_unchanged_status_keeps_its_transition_time() {
        let node = node_with(json!([
            {"type": DRAIN_IN_PROGRESS, "status": "True", "reason": "KubeletPivotDrainStarted",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": DRAINED, "status": "False", "reason": "KubeletPivotDrainStarted",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ]));
        let p = patch(
            Some(&node),
            Lifecycle::Completed,
            "m",
            "2026-01-02T00:00:00Z",
        );
        let c = &p["status"]["conditions"];
        assert_eq!(
            c[0]["lastTransitionTime"], "2026-01-02T00:00:00Z",
            "True -> False"
        );
        assert_eq!(
            c[1]["lastTransitionTime"], "2026-01-02T00:00:00Z",
            "False -> True"
        );
        let p = patch(Some(&node), Lifecycle::Started, "m", "2026-01-02T00:00:00Z");
        let c = &p["status"]["conditions"];
        assert_eq!(c[0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(c[1]["lastTransitionTime"], "2026-01-01T00:00:00Z");
    }

    #[test]
    fn only_our_true_conditions_are_ours_to_clear() {
        assert!(!shows_ours(&node_with(json!([]))));
        assert!(shows_ours(&node_with(json!([
            {"type": DRAINED, "status": "True", "reason": "KubeletPivotDrainCompleted"},
        ]))));
        // kubectl drain --report-node-conditions, or an admin: not ours.
        assert!(!shows_ours(&node_with(json!([
            {"type": DRAIN_IN_PROGRESS, "status": "True", "reason": "KubectlDrainStarted"},
        ]))));
        // Ours, but cleared already.
        assert!(!shows_ours(&node_with(json!([
            {"type": DRAIN_IN_PROGRESS, "status": "False", "reason": "KubeletPivotDrainFailed"},
        ]))));
    }

    #[test]
    fn messages_are_escaped_and_bounded() {
        assert_eq!(message_of("a\nb\u{7}c"), "a\\nb\\u{7}c");
        let long = message_of(&"x".repeat(5000));
        assert!(long.len() <= MAX_LIFECYCLE_MESSAGE_BYTES, "{}", long.len());
        assert!(long.ends_with("more bytes)"), "{long}");
    }
}
