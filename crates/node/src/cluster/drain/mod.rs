//! Draining the own node with the node's own credentials (the node
//! authorizer and NodeRestriction apply): cordon by a merge patch of
//! `spec.unschedulable` only, evict every pod bound to the node through the
//! policy/v1 Eviction subresource, wait until they are gone, uncordon.
//!
//! What the node identity may not do is never tried: no DaemonSet or PDB is
//! read (DaemonSet pods are recognised by their controller reference, PDBs
//! by the eviction's answer), no taint is touched. Nothing is ever forced:
//! a pod a PodDisruptionBudget protects, or whose eviction the server
//! cannot handle now, is asked again with backoff until the deadline, then
//! the drain gives up (the caller uncordons and retries later). Modules:
//! which pods leave and what is kept of each ([`pods`]), what an eviction's
//! answer means ([`answer`]), how many evictions may be in flight at once
//! ([`window`]), the list, watch and eviction loop ([`session`]), and the
//! KEP-5683 Node conditions `DrainInProgress` and `Drained` ([`lifecycle`]).

mod answer;
pub mod lifecycle;
pub mod pods;
mod session;
mod window;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tracing::info;

use crate::config::store::{BlockedPods, DrainFailure};
use crate::metrics::Metrics;
use kp_contract::time::now_rfc3339;
use kp_runtime::events::{self, EventType, NodeEvent};

pub use answer::{Answer, MULTIPLE_BUDGETS};
pub use lifecycle::Lifecycle;
pub use pods::{PodCount, MIRROR_ANNOTATION};
pub use session::{Session, PAGE_SIZE, REPORT_EVERY};
pub use window::{MAX_IN_FLIGHT, THROTTLE_PAUSE};

/// The result of one drain step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// No pod that must leave is left.
    Drained { evicted: usize },
    /// Pods are still bound to the node.
    Pending(Progress),
    /// The API refused the drain for good.
    Failed(Failure),
}

/// Why a drain gave up: the kind and the words (with the server's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: DrainFailure,
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Progress, for the store record and `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Pods still to leave the node, and whether that is the whole count.
    pub remaining: PodCount,
    /// Evictions accepted in this attempt.
    pub evicted: usize,
    /// Pods refused, by reason.
    pub blocked: Vec<BlockedPods>,
    /// Why listing or watching the pods fails, while it does.
    pub list_error: Option<String>,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} evicted in this attempt",
            self.remaining, self.evicted
        )?;
        for b in &self.blocked {
            write!(f, "; {} {}", b.pods, b.reason.describe())?;
        }
        f.write_str(")")?;
        if let Some(err) = &self.list_error {
            write!(f, "; cannot list or watch them, retrying: {err}")?;
        }
        Ok(())
    }
}

/// The API side of a drain of one node.
#[derive(Clone)]
pub struct Drainer {
    client: Client,
    node: String,
    metrics: Arc<Metrics>,
}

impl Drainer {
    pub fn new(client: Client, node: String, metrics: Arc<Metrics>) -> Drainer {
        Drainer {
            client,
            node,
            metrics,
        }
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Cordons the node. `Ok(true)` when we cordoned it, `Ok(false)` when it
    /// was unschedulable already (then it is not ours to uncordon).
    pub async fn cordon(&self) -> Result<bool, kube::Error> {
        let node = self.nodes().get(&self.node).await?;
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            info!(node = %self.node, "node is unschedulable already; it stays so after the drain");
            return Ok(false);
        }
        let patch = Patch::Merge(json!({"spec": {"unschedulable": true}}));
        self.nodes()
            .patch(&self.node, &PatchParams::default(), &patch)
            .await?;
        info!(node = %self.node, "cordoned the node");
        Ok(true)
    }

    /// Uncordons the node (call only for a node we cordoned).
    pub async fn uncordon(&self) -> Result<(), kube::Error> {
        let patch = Patch::Merge(json!({"spec": {"unschedulable": null}}));
        self.nodes()
            .patch(&self.node, &PatchParams::default(), &patch)
            .await?;
        info!(node = %self.node, "uncordoned the node");
        Ok(())
    }

    /// A drain session: lists and watches the node's pods and evicts
    /// them; see [`Session::step`].
    pub fn session(&self) -> Session {
        Session::new(self.clone())
    }

    /// One eviction request: a policy/v1 Eviction with a uid precondition,
    /// so that only the pod the drain knows is evicted, not a new one of
    /// the same name.
    async fn evict(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<(), kube::Error> {
        let mut body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        });
        if let Some(uid) = uid {
            body["deleteOptions"] = json!({"preconditions": {"uid": uid}});
        }
        let data = serde_json::to_vec(&body).map_err(kube::Error::SerdeError)?;
        let request = kube::core::Request::new(format!(
            "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        ))
        .create(&PostParams::default(), data)
        .map_err(kube::Error::BuildRequest)?;
        self.client
            .request::<kube::core::Status>(request)
            .await
            .map(|_| ())
    }

    /// Posts an Event on the own Node (best effort).
    pub async fn event(&self, type_: EventType, reason: &str, message: &str) {
        let uid = match self.nodes().get_metadata_opt(&self.node).await {
            Ok(Some(meta)) => meta.metadata.uid,
            _ => None,
        };
        let ev = NodeEvent {
            type_,
            reason,
            message,
            action: "Drain",
        };
        events::post(&self.client, &self.node, uid, &ev, &now_rfc3339()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::store::BlockReason;

    #[test]
    fn progress_names_each_reason_apart() {
        let mut p = Progress {
            remaining: PodCount::Exact(3),
            evicted: 1,
            blocked: vec![],
            list_error: None,
        };
        assert_eq!(
            p.to_string(),
            "3 pod(s) to leave the node (1 evicted in this attempt)"
        );
        let blocked = |reason, pods| BlockedPods {
            reason,
            pods,
            example: "default/web-1".into(),
            code: 429,
            message: String::new(),
        };
        p.blocked = vec![
            blocked(BlockReason::DisruptionBudget, 1),
            blocked(BlockReason::ServerError, 2),
        ];
        p.list_error = Some("connection refused".into());
        assert_eq!(
            p.to_string(),
            "3 pod(s) to leave the node (1 evicted in this attempt; 1 blocked by a PodDisruptionBudget; 2 refused by API server errors); cannot list or watch them, retrying: connection refused"
        );
        p.remaining = PodCount::AtLeast(500);
        p.blocked.clear();
        p.list_error = None;
        assert_eq!(
            p.to_string(),
            "at least 500 pod(s) to leave the node, listing not finished (1 evicted in this attempt)"
        );
    }
}
