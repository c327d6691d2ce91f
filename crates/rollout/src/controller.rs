//! `kubelet-pivot rollout-controller`: the kube-runtime controller around [`plan`].
//!
//! It leads through a Lease before it reads anything, keeps Nodes (stripped to what the
//! plan reads) and the global stop switch in reflector caches, and reconciles every rollout
//! on any change of either, debounced. A reconcile reads caches only; the API requests it
//! makes are the writes the plan asks for (one patch per node changed, status replaces),
//! one ConfigMap read per new revision and, for the pods gate, one pod list per node.
//!
//! Rollouts are watched untyped ([`DynamicObject`]) and decoded one by one in reconcile: an
//! object the types cannot read (module [`invalid`](super::invalid)) is reported on itself
//! and skipped, instead of failing the watch of every rollout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::configwatch::ConfigWatches;
use super::events::{self, Happening};
use super::health::{Health, Role};
use super::invalid::{self, StatusWrite};
use super::lease::{Elector, Leadership, LeaseTimings};
use super::metrics::{ControllerMetrics, ErrorKind};
use super::nodeview::{NodeView, RECORD_ANNOTATION};
use super::nodewrites::NodeWrites;
use super::plan::gates::{PodsState, PODS_RECHECK};
use super::plan::owner::OtherRollout;
use super::plan::{self, ConfigLookup, Inputs, Plan, Touch};
use super::recorder::{Note, Recorder, Severity};
use super::serve;
use kp_contract::node_config::SOURCE_ANNOTATION;
use kp_contract::rollout::{self as types, KubeletConfigRollout};
use kp_runtime::retry::{self, Outage, SharedBackoff};

/// Least time between two status writes of one rollout that only update counts.
const STATUS_MIN_INTERVAL: Duration = Duration::from_secs(1);
/// Pod lists in flight at once.
const POD_LIST_CONCURRENCY: usize = 16;
/// First wait after a failed reconcile of a rollout.
const RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest wait between retries of a failing rollout.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How long a leader that lost its Lease tries to give it up before exiting.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);
/// How soon a rollout waiting for the cache to catch up with its own node writes is looked
/// at again if no Node event comes first.
const CACHE_LAG_RECHECK: Duration = Duration::from_secs(2);

/// What the controller is told on its command line.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Where the Lease and the stop switch live.
    pub namespace: String,
    pub lease_name: String,
    pub identity: String,
    pub timings: LeaseTimings,
    /// The ConfigMap whose existence halts every rollout.
    pub stop_configmap: String,
    pub debounce: Duration,
    /// Where to serve /metrics, /healthz and /readyz (none: not served).
    pub metrics_address: Option<std::net::SocketAddr>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("not the leader any more")]
    NotLeader,
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError {
    fn kind(&self) -> ErrorKind {
        match self {
            ReconcileError::NotLeader => ErrorKind::not_leader,
            ReconcileError::Api { .. } => ErrorKind::api,
        }
    }
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ReconcileError {
    let what = what.into();
    move |source| ReconcileError::Api { what, source }
}

/// Pods gate results: passed results hold for the revision, others for [`PODS_RECHECK`].
type PodsCache = HashMap<(String, u32, String), (Instant, PodsState)>;

struct Context {
    client: Client,
    /// Every rollout, undecoded (the controller's own cache).
    rollouts: Store<DynamicObject>,
    /// Watches of the ConfigMaps rollouts wait for.
    config_watches: ConfigWatches,
    nodes: Store<Node>,
    stop: Store<ConfigMap>,
    leadership: Leadership,
    /// The newest copy of each rollout we wrote (the cache may lag behind our own writes).
    latest: Mutex<HashMap<String, Arc<KubeletConfigRollout>>>,
    /// When each rollout's status was last written.
    written: Mutex<HashMap<String, Instant>>,
    pods: Mutex<PodsCache>,
    /// Failed reconciles in a row, per rollout (reset by a success).
    failures: Mutex<HashMap<String, u32>>,
    /// The rollouts' API resource (they are watched untyped).
    resource: ApiResource,
    recorder: Recorder,
    /// Rollouts that cannot be read, and how far their report got.
    invalid: Mutex<HashMap<String, invalid::Report>>,
    /// Cached Nodes already written against (module [`nodewrites`](super::nodewrites)).
    node_writes: NodeWrites,
    metrics: Arc<ControllerMetrics>,
}

/// Keeps only what the plan reads of a Node: a cache of 5,000 full Nodes (images, volumes,
/// addresses) would be tens of MiB.
fn strip(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(spec) = node.spec.as_mut() {
        spec.taints = None;
        spec.pod_cidrs = None;
    }
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.addresses = None;
        status.node_info = None;
        status.capacity = None;
        status.allocatable = None;
        status.daemon_endpoints = None;
        status.config = None;
        if let Some(conditions) = status.conditions.as_mut() {
            conditions.retain(|c| {
                c.type_ == "Ready" || c.type_ == kp_contract::node_config::CONDITION_TYPE
            });
        }
    }
    if let Some(annotations) = node.metadata.annotations.as_mut() {
        annotations.retain(|k, _| k.starts_with(kp_contract::rollout::GROUP));
    }
}

fn newest(ctx: &Context, obj: Arc<KubeletConfigRollout>) -> Arc<KubeletConfigRollout> {
    let name = obj.name_any();
    let latest = ctx.latest.lock().ok().and_then(|m| m.get(&name).cloned());
    let rv = |o: &KubeletConfigRollout| {
        o.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    match latest {
        Some(ours) if rv(&ours) > rv(&obj) => {
            // Our write with the cache's spec: the spec may have changed since.
            let mut merged = (*obj).clone();
            merged.status = ours.status.clone();
            merged.metadata.resource_version = ours.metadata.resource_version.clone();
            Arc::new(merged)
        }
        _ => obj,
    }
}

async fn lookup_config(ctx: &Context, rollout: &KubeletConfigRollout) -> ConfigLookup {
    let status = rollout.status.clone().unwrap_or_default();
    if !plan::needs_new_revision(&rollout.spec, &status) {
        return ConfigLookup::NotNeeded;
    }
    let key = &rollout.spec.config;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let found = api.get_opt(&key.name).await;
    match &found {
        Ok(Some(cm)) if cm.data.as_ref().is_some_and(|d| d.contains_key(&key.key)) => {
            ctx.config_watches.found(&key.namespace, &key.name)
        }
        Ok(_) => ctx.config_watches.missing(&key.namespace, &key.name),
        Err(_) => {}
    }
    match found {
        Ok(Some(cm)) => match cm.data.as_ref().and_then(|d| d.get(&key.key)) {
            Some(payload) => ConfigLookup::Found {
                uid: cm.metadata.uid.clone().unwrap_or_default(),
                trial: plan::nofallback::trial_of(payload),
            },
            None => ConfigLookup::Missing(format!("the ConfigMap has no key {:?}", key.key)),
        },
        Ok(None) => ConfigLookup::Missing(format!("configmaps {:?} not found", key.name)),
        Err(err) => ConfigLookup::Missing(format!("cannot read the ConfigMap: {err}")),
    }
}

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

/// Lists the pods of the nodes the plan asked about, into the cache.
async fn check_pods(ctx: &Context, rollout: &str, revision: u32, nodes: &[String]) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
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
    if let Ok(mut cache) = ctx.pods.lock() {
        let now = Instant::now();
        for (node, state) in results {
            cache.insert((rollout.to_string(), revision, node), (now, state));
        }
    }
}

fn cached_pods(cache: &PodsCache, rollout: &str, revision: u32, node: &str) -> PodsState {
    match cache.get(&(rollout.to_string(), revision, node.to_string())) {
        Some((_, PodsState::Ready)) => PodsState::Ready,
        Some((at, state)) if at.elapsed() < PODS_RECHECK => state.clone(),
        _ => PodsState::Unknown,
    }
}

fn decide(
    ctx: &Context,
    rollout: &KubeletConfigRollout,
    nodes: &[NodeView],
    config: ConfigLookup,
) -> Plan {
    let name = rollout.name_any();
    let status = rollout.status.clone().unwrap_or_default();
    // Read under the lock (the plan is synchronous); no copy of the cache.
    let cache = ctx.pods.lock().ok();
    let revision = status.revision;
    let pods = |node: &str| {
        cache.as_deref().map_or(PodsState::Unknown, |c| {
            cached_pods(c, &name, revision, node)
        })
    };
    let others = other_rollouts(ctx, rollout);
    let uid = rollout.metadata.uid.clone();
    plan::plan(&Inputs {
        name: &name,
        uid: uid.as_deref(),
        others: &others,
        supersede: supersedes(rollout),
        generation: rollout.metadata.generation,
        spec: &rollout.spec,
        status: &status,
        acknowledged: rollout
            .annotations()
            .get(super::ACK_ANNOTATION)
            .and_then(|t| super::parse_ack(t)),
        nodes,
        now: SystemTime::now(),
        halted: !ctx.stop.state().is_empty(),
        config,
        pods: &pods,
    })
}

/// Whether the rollout is marked to take nodes from older rollouts.
fn supersedes(rollout: &KubeletConfigRollout) -> bool {
    rollout
        .annotations()
        .get(plan::owner::SUPERSEDE_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// Every other rollout as the cache has it (or as we last wrote it, if newer), for who
/// owns which node.
fn other_rollouts(ctx: &Context, me: &KubeletConfigRollout) -> Vec<OtherRollout> {
    let latest = ctx.latest.lock().ok();
    ctx.rollouts
        .state()
        .into_iter()
        .filter(|r| r.metadata.uid != me.metadata.uid)
        // One that cannot be read owns no node (it is reported on itself).
        .filter_map(|raw| {
            serde_json::to_value(&*raw)
                .ok()
                .and_then(|v| types::decode(v).ok())
                .map(Arc::new)
        })
        .map(|cached| {
            let r = latest
                .as_ref()
                .and_then(|l| l.get(&cached.name_any()).cloned())
                .filter(|w| w.metadata.uid == cached.metadata.uid)
                .unwrap_or(cached);
            let status = r.status.clone().unwrap_or_default();
            let started = plan::revision::current(&status)
                .and_then(|c| humantime::parse_rfc3339_weak(&c.started).ok());
            OtherRollout {
                name: r.name_any(),
                uid: r.metadata.uid.clone(),
                started,
                active: status.phase.owns_its_nodes(),
                supersedes: supersedes(&r),
                targets: status.batches.iter().flatten().cloned().collect(),
            }
        })
        .collect()
}

async fn touch(ctx: &Context, t: &Touch) -> Result<bool, ReconcileError> {
    if !ctx.leadership.is_valid() {
        return Err(ReconcileError::NotLeader);
    }
    let record = serde_json::to_string(&t.record).unwrap_or_default();
    let patch = json!({"metadata": {
        "resourceVersion": t.resource_version,
        "annotations": {SOURCE_ANNOTATION: t.assignment, RECORD_ANNOTATION: record},
    }});
    let api: Api<Node> = Api::all(ctx.client.clone());
    match api
        .patch(&t.node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            info!(node = %t.node, rollout = %t.record.rollout, revision = t.record.revision,
                  assignment = ?t.assignment, previous = ?t.record.previous, "changed the node's assignment");
            Ok(true)
        }
        // The node changed since the cache saw it (or is gone): decide again.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(false),
        Err(e) => Err(api_err(format!("cannot patch node {}", t.node))(e)),
    }
}

async fn write_status(
    ctx: &Context,
    rollout: &KubeletConfigRollout,
    plan: &Plan,
) -> Result<bool, ReconcileError> {
    if !ctx.leadership.is_valid() {
        return Err(ReconcileError::NotLeader);
    }
    let name = rollout.name_any();
    let api: Api<KubeletConfigRollout> = Api::all(ctx.client.clone());
    let mut obj = rollout.clone();
    obj.status = Some(plan.status.clone());
    match api
        .replace_status(&name, &PostParams::default(), &obj)
        .await
    {
        Ok(written) => {
            let old = rollout.status.clone().unwrap_or_default();
            post_events(ctx, rollout, &events::between(&old, &plan.status)).await;
            if let Ok(mut latest) = ctx.latest.lock() {
                latest.insert(name.clone(), Arc::new(written));
            }
            if let Ok(mut w) = ctx.written.lock() {
                w.insert(name, Instant::now());
            }
            Ok(true)
        }
        // Changed meanwhile (or deleted): decide again from the newer copy.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(false),
        Err(e) => Err(api_err(format!("cannot write the status of {name}"))(e)),
    }
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let result = reconcile_any(&obj, &ctx).await;
    ctx.metrics.reconciled(
        started.elapsed(),
        result.as_ref().err().map(ReconcileError::kind),
    );
    record_phase(&ctx, &obj);
    result
}

/// The rollout's phase and counts as the controller last wrote or saw them, into the
/// metrics.
fn record_phase(ctx: &Context, obj: &DynamicObject) {
    let name = obj.name_any();
    let existing = ctx.rollouts.state().iter().map(|r| r.name_any()).collect();
    let ours = ctx
        .latest
        .lock()
        .ok()
        .and_then(|l| l.get(&name).cloned())
        .filter(|w| w.metadata.uid == obj.metadata.uid);
    let seen = ours.and_then(|w| w.status.clone()).or_else(|| {
        serde_json::from_value::<types::RolloutStatus>(obj.data["status"].clone()).ok()
    });
    let (phase, counts) = seen.map_or_else(
        || (types::Phase::Pending, types::NodeCounts::default()),
        |st| (st.phase, st.counts),
    );
    let unreadable = ctx
        .invalid
        .lock()
        .is_ok_and(|reports| reports.contains_key(&name));
    let phase = if unreadable {
        types::Phase::Invalid
    } else {
        phase
    };
    ctx.metrics.rollout(&name, phase, &counts, &existing);
}

async fn reconcile_any(
    obj: &Arc<DynamicObject>,
    ctx: &Arc<Context>,
) -> Result<Action, ReconcileError> {
    let name = obj.name_any();
    let decoded = serde_json::to_value(&**obj)
        .map_err(|e| types::DecodeError {
            field: ".".to_string(),
            reason: e.to_string(),
        })
        .and_then(types::decode);
    let result = match decoded {
        Ok(rollout) => {
            if let Ok(mut reports) = ctx.invalid.lock() {
                reports.remove(&name);
            }
            reconcile_once(Arc::new(rollout), ctx.clone()).await
        }
        Err(err) => report_invalid(obj, &err, ctx).await,
    };
    if result.is_ok() {
        if let Ok(mut f) = ctx.failures.lock() {
            f.remove(&name);
        }
    }
    result
}

async fn reconcile_once(
    obj: Arc<KubeletConfigRollout>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    if !ctx.leadership.is_valid() {
        return Err(ReconcileError::NotLeader);
    }
    let rollout = newest(&ctx, obj);
    let nodes: Vec<NodeView> = ctx.nodes.state().iter().map(|n| NodeView::of(n)).collect();
    let config = lookup_config(&ctx, &rollout).await;
    let mut plan = decide(&ctx, &rollout, &nodes, config.clone());
    if !plan.pods_wanted.is_empty() {
        let status = rollout.status.clone().unwrap_or_default();
        check_pods(
            &ctx,
            &rollout.name_any(),
            status.revision,
            &plan.pods_wanted,
        )
        .await;
        plan = decide(&ctx, &rollout, &nodes, config);
    }
    let old = rollout.status.clone().unwrap_or_default();
    let structural = plan.status.revision != old.revision
        || plan.status.current_batch != old.current_batch
        || plan.status.batches != old.batches;
    let mut retry = None;
    if structural {
        // The snapshot or the batch is recorded before any node of it is changed.
        let written = write_status(&ctx, &rollout, &plan).await?;
        return Ok(Action::requeue(if written {
            Duration::ZERO
        } else {
            Duration::from_millis(100)
        }));
    }
    for t in &plan.touches {
        if ctx.node_writes.is_stale(&t.node, &t.resource_version) {
            // Already written against this copy: wait for the cache (its event wakes us).
            retry = Some(CACHE_LAG_RECHECK);
            continue;
        }
        let changed = touch(&ctx, t).await?;
        ctx.node_writes.written(&t.node, &t.resource_version);
        if !changed {
            retry = Some(Duration::from_millis(200));
        }
    }
    if plan.status != old {
        let since = ctx
            .written
            .lock()
            .ok()
            .and_then(|w| w.get(&rollout.name_any()).map(Instant::elapsed));
        match since {
            Some(elapsed) if elapsed < STATUS_MIN_INTERVAL && plan.touches.is_empty() => {
                retry = Some(STATUS_MIN_INTERVAL - elapsed);
            }
            _ => {
                if !write_status(&ctx, &rollout, &plan).await? {
                    retry = Some(Duration::from_millis(100));
                }
            }
        }
    }
    let next = match (plan.requeue, retry) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(next.map_or_else(Action::await_change, Action::requeue))
}

/// Reports a rollout that cannot be read ([`invalid`]) on itself, once per generation and
/// error: its status (raw JSON, replaced through `/status`) and a Warning Event. It is then
/// left alone until it changes; the other rollouts are not held up by it.
async fn report_invalid(
    obj: &DynamicObject,
    err: &types::DecodeError,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    let name = obj.name_any();
    let message = invalid::message(&name, err);
    let key = invalid::Key {
        uid: obj.metadata.uid.clone(),
        generation: obj.metadata.generation,
        message: message.clone(),
    };
    let known = ctx
        .invalid
        .lock()
        .ok()
        .and_then(|reports| reports.get(&name).cloned())
        .filter(|r| r.key == key);
    let mut report = match known {
        Some(report) if report.done() => return Ok(Action::await_change()),
        Some(report) => report,
        None => {
            let raw = serde_json::to_value(obj).unwrap_or_default();
            let mut report = invalid::Report::new(key);
            if invalid::already_reported(&raw, &message) {
                // Reported before a restart (or by the other replica): nothing to repeat.
                report.event_done = true;
                report.status_done = true;
            } else {
                warn!(rollout = %name, error = %err,
                      "cannot read the rollout; reporting it on the object and skipping it");
            }
            report
        }
    };
    if !ctx.leadership.is_valid() {
        return Err(ReconcileError::NotLeader);
    }
    let mut result = Ok(Action::await_change());
    if !report.status_done {
        match write_invalid_status(ctx, obj, &message).await {
            Ok(StatusWrite::Written) => report.status_done = true,
            Ok(StatusWrite::Refused) => report.status_done = true,
            Ok(StatusWrite::Stale) => result = Ok(Action::requeue(Duration::from_millis(100))),
            Err(e) => result = Err(e),
        }
    }
    if !report.event_done {
        post_invalid_event(ctx, obj, &message).await;
        report.event_done = true;
    }
    if let Ok(mut reports) = ctx.invalid.lock() {
        reports.insert(name, report);
    }
    result
}

/// Replaces the status of `obj` with the report (`status.phase: Invalid`, `Valid=False`).
async fn write_invalid_status(
    ctx: &Context,
    obj: &DynamicObject,
    message: &str,
) -> Result<StatusWrite, ReconcileError> {
    let name = obj.name_any();
    let raw = serde_json::to_value(obj).unwrap_or_default();
    let now = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    let reported = invalid::with_report(&raw, message, &now);
    let body: DynamicObject = match serde_json::from_value(reported) {
        Ok(body) => body,
        Err(e) => {
            warn!(rollout = %name, error = %e, "cannot build the status of an unreadable rollout");
            return Ok(StatusWrite::Refused);
        }
    };
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ctx.resource);
    match api
        .replace_status(&name, &PostParams::default(), &body)
        .await
    {
        Ok(_) => Ok(StatusWrite::Written),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(StatusWrite::Stale),
        Err(kube::Error::Api(s)) if s.code == 422 => {
            warn!(rollout = %name, error = %s.message,
                  "the API server refuses the status of the unreadable rollout (it validates the spec \
                   on a status write); its Event is the only report");
            Ok(StatusWrite::Refused)
        }
        Err(e) => Err(api_err(format!("cannot write the status of {name}"))(e)),
    }
}

/// The Events of what the status just written says happened (best effort: a failure is
/// logged; the status holds the same facts).
async fn post_events(ctx: &Context, rollout: &KubeletConfigRollout, happened: &[Happening]) {
    if happened.is_empty() {
        return;
    }
    let reference = rollout.object_ref(&());
    for h in happened {
        let text = h.note();
        let note = Note {
            severity: h.severity(),
            reason: h.reason(),
            action: h.action(),
            note: &text,
        };
        match ctx.recorder.post(&reference, &note).await {
            Ok(()) => {
                info!(rollout = %rollout.name_any(), reason = h.reason(), note = %text, "posted an Event")
            }
            Err(err) => {
                warn!(rollout = %rollout.name_any(), %err, "events are best effort; going on")
            }
        }
    }
}

/// A Warning Event about `obj` (best effort: a failure is logged).
async fn post_invalid_event(ctx: &Context, obj: &DynamicObject, message: &str) {
    let note = Note {
        severity: Severity::Warning,
        reason: invalid::REASON,
        action: "Decode",
        note: message,
    };
    let reference = obj.object_ref(&ctx.resource);
    if let Err(err) = ctx.recorder.post(&reference, &note).await {
        warn!(rollout = %obj.name_any(), %err, "cannot post an Event about the unreadable rollout");
    }
}

/// The wait before reconciling a rollout again after its `failures`-th
/// failure in a row: 500 ms doubling up to [`RETRY_MAX`], so that a 429 is
/// not answered with more load and an outage is not polled 2 times a second
/// for every rollout.
fn retry_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1u32 << exp).min(RETRY_MAX)
}

fn error_policy(obj: Arc<DynamicObject>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    let name = obj.name_any();
    let failures = match ctx.failures.lock() {
        Ok(mut f) => {
            let n = f.entry(name.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        }
        Err(_) => 1,
    };
    let delay = retry_delay(failures);
    // Every failure of the first minute (0.5 s doubling: 7 tries), then
    // every other one (30 s apart: one line a minute).
    if failures <= 7 || failures % 2 == 0 {
        warn!(rollout = %name, %err, failures, retry_in = ?delay, "reconcile failed; retrying");
    }
    Action::requeue(delay)
}

/// What the controller's stream yields besides successes: every error is
/// logged and the stream goes on (the reconcile errors were logged by
/// [`error_policy`] and are requeued; the watch of rollouts restarts with
/// cluster::retry's backoff, its failures logged by `outage`, the next try
/// in `retry_in`). Nothing an API server answers ends the process.
fn log_controller_error(
    err: &kube::runtime::controller::Error<ReconcileError, watcher::Error>,
    outage: &mut Outage,
    retry_in: Duration,
) {
    use kube::runtime::controller::Error as E2;
    match err {
        E2::ReconcilerFailed(..) => {}
        E2::ObjectNotFound(obj) => {
            info!(rollout = %obj.name, "rollout deleted before it was reconciled")
        }
        E2::QueueError(err) => outage.failed(err, retry::Failure::of_watch(err), retry_in),
        E2::RunnerError(err) => warn!(%err, "the controller's scheduler failed"),
    }
}

/// Runs the controller until leadership is lost (Err) or SIGTERM/SIGINT (Ok).
pub async fn run(client: Client, opts: ControllerOptions) -> Result<(), String> {
    opts.timings.check()?;
    let metrics = Arc::new(ControllerMetrics::new());
    let health = Health::new(opts.timings.lease_duration);
    if let Some(addr) = opts.metrics_address {
        serve::start(addr, metrics.clone(), health.clone())
            .await
            .map_err(|e| e.to_string())?;
    }
    let leases = Api::namespaced(client.clone(), &opts.namespace);
    let elector = Elector::new(
        leases.clone(),
        &opts.lease_name,
        &opts.identity,
        opts.timings.clone(),
    )
    .with_health(health.clone());
    info!(identity = %opts.identity, lease = %opts.lease_name, namespace = %opts.namespace,
          "waiting to lead the rollout controllers");
    let (leadership, lost) = tokio::select! {
        led = elector.lead() => led,
        _ = shutdown_signal() => return Ok(()),
    };
    metrics.set_leader(true);
    let (nodes, node_writer) = reflector::store();
    // Every watch retries with cluster::retry's backoff (reset only by a
    // success) and logs quietly: a line a try for a minute, then one a minute.
    let node_events = retry::watch(
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default()),
        "the watch of Nodes",
    )
    .map(Ok::<_, watcher::Error>)
    .modify(strip)
    .reflect(node_writer);
    let (stop, stop_writer) = reflector::store();
    let stop_cfg =
        watcher::Config::default().fields(&format!("metadata.name={}", opts.stop_configmap));
    let stop_events = retry::watch(
        watcher(
            Api::<ConfigMap>::namespaced(client.clone(), &opts.namespace),
            stop_cfg,
        ),
        format!("the watch of ConfigMap {}", opts.stop_configmap),
    )
    .map(Ok::<_, watcher::Error>)
    .reflect(stop_writer);
    // The reflectors run on their own; each change bumps a counter whose receiver
    // coalesces bursts (5,000 Nodes listed at start are one wake-up, not 5,000).
    let (changed_tx, changed_rx) = tokio::sync::watch::channel(0u64);
    let node_tx = changed_tx.clone();
    let config_watches = ConfigWatches::new(client.clone(), changed_tx.clone());
    tokio::spawn(node_events.for_each(move |_| {
        node_tx.send_modify(|n| *n += 1);
        futures::future::ready(())
    }));
    tokio::spawn(stop_events.for_each(move |_| {
        changed_tx.send_modify(|n| *n += 1);
        futures::future::ready(())
    }));
    let triggers = futures::stream::unfold(changed_rx, |mut rx| async move {
        rx.changed().await.ok()?;
        rx.borrow_and_update();
        Some(((), rx))
    });
    let resource = ApiResource::erase::<KubeletConfigRollout>(&());
    let rollouts: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let rollouts_backoff = SharedBackoff::default();
    let controller = Controller::new_with(rollouts, watcher::Config::default(), resource.clone())
        .trigger_backoff(rollouts_backoff.clone());
    let ctx = Arc::new(Context {
        client: client.clone(),
        rollouts: controller.store(),
        config_watches,
        nodes: nodes.clone(),
        stop: stop.clone(),
        leadership,
        latest: Mutex::new(HashMap::new()),
        written: Mutex::new(HashMap::new()),
        pods: Mutex::new(HashMap::new()),
        failures: Mutex::new(HashMap::new()),
        resource: resource.clone(),
        recorder: Recorder::new(client.clone(), &opts.identity),
        invalid: Mutex::new(HashMap::new()),
        node_writes: NodeWrites::default(),
        metrics: metrics.clone(),
    });
    let controller = controller
        .with_config(ControllerConfig::default().debounce(opts.debounce))
        .reconcile_all_on(triggers)
        .run(reconcile, error_policy, ctx)
        .scan(
            Outage::new("the watch of rollouts"),
            move |outage, result| {
                match &result {
                    Ok(_) => outage.ok(),
                    Err(err) => log_controller_error(err, outage, rollouts_backoff.last_wait()),
                }
                futures::future::ready(Some(()))
            },
        )
        .for_each(|()| futures::future::ready(()));
    let ready = async {
        let _ = nodes.wait_until_ready().await;
        let _ = stop.wait_until_ready().await;
    };
    tokio::select! {
        _ = ready => {}
        _ = shutdown_signal() => {
            Elector::release(&leases, &opts.lease_name, &opts.identity).await;
            return Ok(());
        }
    }
    health.set_role(Role::Leader { synced: true });
    info!(
        nodes = nodes.state().len(),
        "caches synced; reconciling rollouts"
    );
    tokio::select! {
        () = controller => Err("the controller stopped".to_string()),
        _ = lost => {
            metrics.set_leader(false);
            // Renewals failed for the whole renew deadline (or another replica
            // holds the Lease): stop acting at once; give the Lease up if the
            // API answers and it is still ours, so a standby need not wait it out.
            let _ = tokio::time::timeout(
                RELEASE_TIMEOUT,
                Elector::release(&leases, &opts.lease_name, &opts.identity),
            )
            .await;
            Err("lost the leader lease; exiting so that only one replica acts".to_string())
        }
        _ = shutdown_signal() => {
            Elector::release(&leases, &opts.lease_name, &opts.identity).await;
            info!("stopped; released the leader lease");
            Ok(())
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
