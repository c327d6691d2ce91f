//! Draining the own node with the node's own credentials (the node
//! authorizer and NodeRestriction apply): cordon by a merge patch of
//! `spec.unschedulable` only, evict every pod bound to the node through the
//! policy/v1 Eviction subresource, wait until they are gone, uncordon.
//!
//! What the node identity may not do is never tried: no DaemonSet or PDB is
//! read (DaemonSet pods are recognised by their ownerReferences, PDBs by the
//! eviction's 429), no taint is touched. Nothing is ever forced: a pod a
//! PodDisruptionBudget protects is asked again with backoff until the
//! deadline, then the drain gives up (the caller uncordons and retries
//! later).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{EvictParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::cluster::events::{self, EventType, NodeEvent};
use crate::observe::disruption_metrics::EvictionResult;
use crate::observe::metrics::Metrics;
use crate::pivot::role::now_rfc3339;

/// Annotation of a static pod's mirror (the kubelet owns it; eviction is
/// pointless).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// How often the pods bound to the node are listed while waiting.
pub const POLL: Duration = Duration::from_millis(500);
/// Backoff of a pod whose eviction was refused (429 or a server error).
const EVICT_BACKOFF: Duration = Duration::from_millis(500);
const EVICT_BACKOFF_MAX: Duration = Duration::from_secs(8);

/// The result of one drain round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// No evictable pod is left.
    Drained { evicted: usize },
    /// Pods are still bound to the node.
    Pending(Progress),
    /// The API refused the drain for good (403).
    Failed(String),
}

/// What a drain remembers between rounds.
#[derive(Debug, Default)]
pub struct EvictState {
    evicted: usize,
    /// Per pod (namespace/name#uid): when to ask again, and the delay.
    retry: HashMap<String, (Instant, Duration)>,
    remaining: usize,
    /// A few of the pods still there (`namespace/name`).
    pub examples: Vec<String>,
}

impl EvictState {
    fn progress(&mut self, remaining: Option<usize>, blocked: usize) -> Progress {
        if let Some(r) = remaining {
            self.remaining = r;
        }
        Progress {
            remaining: self.remaining,
            blocked,
            evicted: self.evicted,
        }
    }
}

/// Progress, for the store record and `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub remaining: usize,
    pub blocked: usize,
    pub evicted: usize,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} pod(s) to leave the node ({} evicted so far, {} blocked by a PodDisruptionBudget)",
            self.remaining, self.evicted, self.blocked
        )
    }
}

/// Why a pod bound to the node is not evicted, if it is not.
pub fn skip_reason(pod: &Pod) -> Option<&'static str> {
    let meta = &pod.metadata;
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
    {
        return Some("mirror pod");
    }
    if meta
        .owner_references
        .as_ref()
        .is_some_and(|refs| refs.iter().any(|r| r.kind == "DaemonSet"))
    {
        return Some("DaemonSet pod");
    }
    None
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
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

    /// The pods bound to the node that a drain evicts (and waits for).
    async fn evictable(&self) -> Result<Vec<Pod>, kube::Error> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
        let list = pods.list(&lp).await?;
        Ok(list
            .items
            .into_iter()
            .filter(|p| skip_reason(p).is_none())
            .collect())
    }

    /// One round of a drain: lists the evictable pods bound to the node and
    /// asks for the eviction of each that is not on its way out already and
    /// not backing off. The caller repeats rounds every [`POLL`] until
    /// [`Round::Drained`] or its deadline.
    pub async fn round(&self, state: &mut EvictState) -> Round {
        let pods = match self.evictable().await {
            Ok(p) => p,
            Err(kube::Error::Api(status)) if status.code == 403 => {
                return Round::Failed(format!(
                    "the node's credentials may not list its pods: {}",
                    status.message
                ))
            }
            Err(err) => {
                warn!(%err, "cannot list the pods bound to this node; retrying");
                return Round::Pending(state.progress(None, 0));
            }
        };
        if pods.is_empty() {
            return Round::Drained {
                evicted: state.evicted,
            };
        }
        let now = Instant::now();
        let mut blocked = 0usize;
        for pod in &pods {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let key = format!(
                "{}#{}",
                pod_key(pod),
                pod.metadata.uid.as_deref().unwrap_or("")
            );
            if state.retry.get(&key).is_some_and(|(at, _)| *at > now) {
                blocked += 1;
                continue;
            }
            match self.evict(pod).await {
                Ok(EvictionResult::Evicted) => {
                    state.evicted += 1;
                    state.retry.remove(&key);
                }
                Ok(EvictionResult::Gone) => {
                    state.retry.remove(&key);
                }
                Ok(result) => {
                    if result == EvictionResult::Blocked {
                        blocked += 1;
                    }
                    let delay = state
                        .retry
                        .get(&key)
                        .map(|(_, d)| (*d * 2).min(EVICT_BACKOFF_MAX))
                        .unwrap_or(EVICT_BACKOFF);
                    state.retry.insert(key, (Instant::now() + delay, delay));
                }
                Err(reason) => return Round::Failed(reason),
            }
        }
        state.examples = pods.iter().take(5).map(pod_key).collect();
        Round::Pending(state.progress(Some(pods.len()), blocked))
    }

    /// One eviction request. `Err` only for answers that end the drain
    /// (403: the node's credentials may not evict this pod).
    async fn evict(&self, pod: &Pod) -> Result<EvictionResult, String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let result = match api.evict(name, &EvictParams::default()).await {
            Ok(_) => {
                debug!(pod = %pod_key(pod), "evicted");
                EvictionResult::Evicted
            }
            Err(kube::Error::Api(status)) if status.code == 404 => EvictionResult::Gone,
            Err(kube::Error::Api(status)) if status.code == 429 => {
                debug!(pod = %pod_key(pod), message = %status.message, "eviction refused by a PodDisruptionBudget; asking again later");
                EvictionResult::Blocked
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {
                self.metrics.disruption.eviction(EvictionResult::Failed);
                return Err(format!(
                    "the node's credentials may not evict pod {}: {}",
                    pod_key(pod),
                    status.message
                ));
            }
            Err(err) => {
                warn!(%err, pod = %pod_key(pod), "eviction failed; asking again later");
                EvictionResult::Failed
            }
        };
        self.metrics.disruption.eviction(result);
        Ok(result)
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    #[test]
    fn mirror_and_daemonset_pods_are_skipped() {
        let mut pod = Pod::default();
        assert_eq!(skip_reason(&pod), None);
        pod.metadata.annotations = Some(BTreeMap::from([(
            MIRROR_ANNOTATION.to_string(),
            "abc".to_string(),
        )]));
        assert_eq!(skip_reason(&pod), Some("mirror pod"));
        let mut ds = Pod::default();
        ds.metadata.owner_references = Some(vec![OwnerReference {
            kind: "DaemonSet".into(),
            api_version: "apps/v1".into(),
            name: "x".into(),
            uid: "u".into(),
            ..Default::default()
        }]);
        assert_eq!(skip_reason(&ds), Some("DaemonSet pod"));
        let mut rs = ds.clone();
        if let Some(refs) = rs.metadata.owner_references.as_mut() {
            refs[0].kind = "ReplicaSet".into();
        }
        assert_eq!(skip_reason(&rs), None);
    }
}
