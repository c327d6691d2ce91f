//! `kubelet-pivot rollout-controller`: the kube-runtime controller around [`plan`](super::plan).
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

mod error;
mod failures;
mod inputs;
mod latest;
mod pacing;
mod pods;
mod post;
mod reconcile;
mod reports;
mod strip;
mod unreadable;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tracing::{info, warn};

use super::configwatch::ConfigWatches;
use super::health::{Health, ReplicaRole};
use super::lease::{Elector, Leadership, LeaseTimings};
use super::metrics::ControllerMetrics;
use super::nodewrites::NodeWrites;
use super::recorder::Recorder;
use super::serve;
use failures::Failures;
use kp_contract::rollout::KubeletConfigRollout;
use kp_runtime::retry::{self, Outage, SharedBackoff};
use latest::LatestWrites;
use pacing::StatusPacing;
use pods::PodsCache;
use reconcile::{error_policy, reconcile};
use reports::InvalidReports;
use strip::strip;

pub use error::{ReconcileError, RunError};

/// How long a leader that lost its Lease tries to give it up before exiting.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

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

/// What every reconcile shares: the client, the caches and what the controller remembers
/// between reconciles (each in a type of its own).
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
    latest: LatestWrites,
    /// When each rollout's status was last written.
    pacing: StatusPacing,
    /// The pods gate's results.
    pods: PodsCache,
    /// Failed reconciles in a row, per rollout (reset by a success).
    failures: Failures,
    /// The rollouts' API resource (they are watched untyped).
    resource: ApiResource,
    recorder: Recorder,
    /// Rollouts that cannot be read, and how far their report got.
    invalid: InvalidReports,
    /// Cached Nodes already written against (module [`nodewrites`](super::nodewrites)).
    node_writes: NodeWrites,
    metrics: Arc<ControllerMetrics>,
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
        E2::QueueError(err) => outage.failed(
            &kp_runtime::api_error::shown_watch(err, None),
            retry::Failure::of_watch(err),
            retry_in,
        ),
        E2::RunnerError(err) => warn!(%err, "the controller's scheduler failed"),
    }
}

/// Runs the controller until leadership is lost (Err) or SIGTERM/SIGINT (Ok).
pub async fn run(client: Client, opts: ControllerOptions) -> Result<(), RunError> {
    opts.timings.check()?;
    let metrics = Arc::new(ControllerMetrics::new());
    let health = Health::new(opts.timings.lease_duration);
    if let Some(addr) = opts.metrics_address {
        serve::start(addr, metrics.clone(), health.clone()).await?;
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
    let (stop_seen, stop_metrics) = (stop.clone(), metrics.clone());
    tokio::spawn(stop_events.for_each(move |_| {
        stop_metrics.global_stop(stop_since(&stop_seen));
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
        latest: LatestWrites::default(),
        pacing: StatusPacing::default(),
        pods: PodsCache::default(),
        failures: Failures::default(),
        resource: resource.clone(),
        recorder: Recorder::new(client.clone(), &opts.identity),
        invalid: InvalidReports::default(),
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
    health.set_role(ReplicaRole::Leader { synced: true });
    info!(
        nodes = nodes.state().len(),
        "caches synced; reconciling rollouts"
    );
    tokio::select! {
        () = controller => Err(RunError::Stopped),
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
            Err(RunError::LostLease)
        }
        _ = shutdown_signal() => {
            Elector::release(&leases, &opts.lease_name, &opts.identity).await;
            info!("stopped; released the leader lease");
            Ok(())
        }
    }
}

/// When the global stop switch in `stop` was turned on (its creation, in Unix seconds; 0
/// when the server did not say), or `None` while it is off.
fn stop_since(stop: &Store<ConfigMap>) -> Option<i64> {
    stop.state().first().map(|cm| {
        cm.metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second())
    })
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
