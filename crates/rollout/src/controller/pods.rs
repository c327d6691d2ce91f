//! The pods gate's I/O: the pods of the nodes the plan asks about are listed (one list
//! per node), and the results kept per rollout, revision and node. A passed result holds
//! for the revision, any other for [`PODS_RECHECK`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::plan::gates::{PodsState, PODS_RECHECK};

/// Pod lists in flight at once.
const POD_LIST_CONCURRENCY: usize = 16;

/// Rollout, revision and node.
type Key = (String, u32, String);

/// The pods gate's results, with when each was found.
#[derive(Debug, Default)]
pub(super) struct PodsCache {
    results: Mutex<HashMap<Key, (Instant, PodsState)>>,
}

impl PodsCache {
    /// Lists the pods of `nodes` (at most [`POD_LIST_CONCURRENCY`] at once), into the cache.
    pub(super) async fn check(
        &self,
        client: &Client,
        rollout: &str,
        revision: u32,
        nodes: &[String],
    ) {
        let api: Api<Pod> = Api::all(client.clone());
        let results: Vec<(String, PodsState)> = futures::stream::iter(nodes.iter().cloned())
            .map(|node| {
                let api = api.clone();
                async move {
                    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
                    let state = match api.list(&lp).await {
                        Ok(list) => pods_state(&list.items),
                        Err(err) => PodsState::NotReady(format!("cannot list its pods: {err}")),
                    };
                    (node, state)
                }
            })
            .buffer_unordered(POD_LIST_CONCURRENCY)
            .collect()
            .await;
        self.record(rollout, revision, results, Instant::now());
    }

    fn record(&self, rollout: &str, revision: u32, results: Vec<(String, PodsState)>, at: Instant) {
        if let Ok(mut cache) = self.results.lock() {
            for (node, state) in results {
                cache.insert((rollout.to_string(), revision, node), (at, state));
            }
        }
    }

    /// Runs `f` with the lookup of a node's pods state for `rollout` at `revision`, read
    /// under the cache's lock (the plan is synchronous; no copy of the cache).
    pub(super) fn with_lookup<R>(
        &self,
        rollout: &str,
        revision: u32,
        f: impl FnOnce(&dyn Fn(&str) -> PodsState) -> R,
    ) -> R {
        let cache = self.results.lock().ok();
        let now = Instant::now();
        let pods = |node: &str| {
            cache.as_deref().map_or(PodsState::Unknown, |c| {
                cached(c, rollout, revision, node, now)
            })
        };
        f(&pods)
    }
}

/// The cached state of a node's pods at `now`: Unknown once a result that did not pass is
/// [`PODS_RECHECK`] old.
fn cached(
    cache: &HashMap<Key, (Instant, PodsState)>,
    rollout: &str,
    revision: u32,
    node: &str,
    now: Instant,
) -> PodsState {
    match cache.get(&(rollout.to_string(), revision, node.to_string())) {
        Some((_, PodsState::Ready)) => PodsState::Ready,
        Some((at, state)) if now.saturating_duration_since(*at) < PODS_RECHECK => state.clone(),
        _ => PodsState::Unknown,
    }
}

/// Whether every pod bound to the node that is not finished (nor being deleted) is Ready;
/// if not, which.
fn pods_state(pods: &[Pod]) -> PodsState {
    let not_ready: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded") | Some("Failed"))
        })
        .filter(|p| {
            !p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    match not_ready.as_slice() {
        [] => PodsState::Ready,
        [one] => PodsState::NotReady(format!("pod {one} is not Ready")),
        [first, ..] => PodsState::NotReady(format!(
            "{} pods are not Ready (first {first})",
            not_ready.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn pod(name: &str, phase: &str, ready: Option<bool>, deleting: bool) -> Pod {
        let mut p = json!({
            "metadata": {"name": name, "namespace": "ns"},
            "status": {"phase": phase},
        });
        if let Some(ready) = ready {
            p["status"]["conditions"] =
                json!([{"type": "Ready", "status": if ready { "True" } else { "False" }}]);
        }
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(p).expect("a Pod")
    }

    #[test]
    fn finished_and_deleted_pods_do_not_count() {
        assert_eq!(pods_state(&[]), PodsState::Ready);
        let pods = [
            pod("a", "Running", Some(true), false),
            pod("done", "Succeeded", None, false),
            pod("crashed", "Failed", Some(false), false),
            pod("going", "Running", Some(false), true),
        ];
        assert_eq!(pods_state(&pods), PodsState::Ready);
    }

    #[test]
    fn names_the_pod_not_ready_or_the_first_of_them() {
        let one = [
            pod("a", "Running", Some(true), false),
            pod("b", "Running", Some(false), false),
        ];
        assert_eq!(
            pods_state(&one),
            PodsState::NotReady("pod ns/b is not Ready".into())
        );
        let three = [
            pod("b", "Pending", None, false),
            pod("c", "Running", Some(false), false),
            pod("d", "Running", None, false),
        ];
        assert_eq!(
            pods_state(&three),
            PodsState::NotReady("3 pods are not Ready (first ns/b)".into())
        );
    }

    #[test]
    fn a_pass_holds_for_the_revision_anything_else_for_the_recheck_time() {
        let cache = PodsCache::default();
        let t0 = Instant::now();
        cache.record(
            "r1",
            2,
            vec![
                ("ok".into(), PodsState::Ready),
                ("bad".into(), PodsState::NotReady("pod x".into())),
            ],
            t0,
        );
        let map = cache.results.lock().expect("not poisoned").clone();
        let at = |after: Duration| t0 + after;
        let soon = at(Duration::from_millis(100));
        let later = at(PODS_RECHECK + Duration::from_secs(60));
        assert_eq!(cached(&map, "r1", 2, "ok", later), PodsState::Ready);
        assert_eq!(
            cached(&map, "r1", 2, "bad", soon),
            PodsState::NotReady("pod x".into())
        );
        assert_eq!(cached(&map, "r1", 2, "bad", later), PodsState::Unknown);
        assert_eq!(
            cached(&map, "r1", 3, "ok", soon),
            PodsState::Unknown,
            "per revision"
        );
        assert_eq!(
            cached(&map, "r2", 2, "ok", soon),
            PodsState::Unknown,
            "per rollout"
        );
        assert_eq!(cached(&map, "r1", 2, "new", soon), PodsState::Unknown);
        let seen = cache.with_lookup("r1", 2, |pods| (pods("ok"), pods("none")));
        assert_eq!(seen, (PodsState::Ready, PodsState::Unknown));
    }
}
