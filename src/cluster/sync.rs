//! Kubernetes API sync: watch this node's config assignment, download and
//! checkpoint the ConfigMap it names, and report the config status back on
//! the Node. Runs only in the lock holder (only the holder writes the store)
//! and never blocks the kubelet: with the API server unreachable the node
//! keeps running from its checkpoints.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::cluster::nodeconfig::{self, Assignment, ConfigRef, ConfigReport};
use crate::config::kubeconfig::{ConfigError, KubeletConfig};
use crate::config::store::{ConfigSource, Store, StoreError, MAX_PAYLOAD};
use crate::observe::metrics::Metrics;
use crate::pivot::role::now_rfc3339;

/// Component name in Events.
const COMPONENT: &str = "kubelet-pivot";
/// Namespace of Node events (as the kubelet does).
const EVENT_NAMESPACE: &str = "default";
/// Retries of a status patch on conflict / throttling / server errors.
const PATCH_ATTEMPTS: u32 = 5;
/// First retry delay of a failed download (doubles up to DOWNLOAD_BACKOFF_MAX).
const DOWNLOAD_BACKOFF: Duration = Duration::from_secs(1);
const DOWNLOAD_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// Longest wait before a failed status report is tried again: a watch that
/// resumes after an outage (no re-list) gives no event to report on, so the
/// retry is what brings a status from the outage to the Node.
const REPORT_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// First delay after a failed watch or list; it doubles up to
/// WATCH_BACKOFF_MAX after a connection failure (the node is then at most
/// about a second behind an API server that is back) and up to
/// WATCH_BACKOFF_API_MAX after an answer with an error status (403, 429,
/// 5xx: the server is up and asked us to wait), plus up to 25 % jitter. An
/// expired resourceVersion (410) is no failure: the re-list goes out at once.
const WATCH_BACKOFF: Duration = Duration::from_millis(100);
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(1);
const WATCH_BACKOFF_API_MAX: Duration = Duration::from_secs(10);

/// The backoff of one watch: failures delay the next poll of its stream;
/// any event and any 410 reset it.
struct WatchBackoff {
    delay: Duration,
    /// The stream is not polled before this.
    until: Option<tokio::time::Instant>,
}

impl WatchBackoff {
    fn new() -> Self {
        WatchBackoff {
            delay: WATCH_BACKOFF,
            until: None,
        }
    }

    fn ok(&mut self) {
        self.delay = WATCH_BACKOFF;
        self.until = None;
    }

    /// Records a failure; returns the wait before the next try (zero after
    /// a 410, which the watcher answers with a fresh list).
    fn failed(&mut self, err: &watcher::Error) -> Duration {
        if is_gone(err) {
            self.ok();
            return Duration::ZERO;
        }
        let cap = if is_api_error(err) {
            WATCH_BACKOFF_API_MAX
        } else {
            WATCH_BACKOFF_MAX
        };
        let base = self.delay.min(cap);
        let nanos = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let wait = base + base * (nanos % 250) / 1000;
        self.until = Some(tokio::time::Instant::now() + wait);
        self.delay = (base * 2).min(cap);
        wait
    }
}

/// Whether the server answered with an error status (rather than not at all).
fn is_api_error(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchError(_) => true,
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => api_code(e).is_some(),
        watcher::Error::NoResourceVersion => true,
    }
}

/// Whether a watch failed because its resourceVersion expired (410 Gone),
/// as an ERROR event in the stream or as the answer to the watch request.
fn is_gone(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => api_code(e) == Some(410),
        watcher::Error::NoResourceVersion => false,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read --kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("refusing --kubeconfig: {0}")]
    Unsafe(#[source] crate::safefs::fsutil::ReadError),
    #[error("refusing --kubeconfig {path}: {source}")]
    TooDeep {
        path: PathBuf,
        #[source]
        source: crate::config::kubeconfig::ConfigError,
    },
    #[error("cannot use --kubeconfig {path}: {source}")]
    Config {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot build the API client: {0}")]
    Client(#[source] kube::Error),
}

/// Builds the API client: `--kubeconfig`, else in-cluster config when the
/// pod environment provides it, else `None` (local-only mode).
pub async fn client(kubeconfig: Option<&PathBuf>) -> Result<Option<Client>, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            check_kubeconfig(path)?;
            let kc =
                kube::config::Kubeconfig::read_from(path).map_err(|e| ClientError::Kubeconfig {
                    path: path.clone(),
                    source: e,
                })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| ClientError::Config {
                    path: path.clone(),
                    source: e,
                })?
        }
        None => match kube::Config::incluster() {
            Ok(c) => c,
            Err(_) => return Ok(None),
        },
    };
    Client::try_from(config)
        .map(Some)
        .map_err(ClientError::Client)
}

/// Largest kubeconfig accepted (a node's is a few KiB).
const MAX_KUBECONFIG_BYTES: u64 = 1024 * 1024;

/// Checks `--kubeconfig` the way every other input is checked before kube
/// reads it: a regular file (never a FIFO or a device, so nothing hangs), at
/// most 1 MiB, nested no deeper than a config may be.
fn check_kubeconfig(path: &std::path::Path) -> Result<(), ClientError> {
    let policy = crate::safefs::fsutil::ReadPolicy {
        what: "kubeconfig",
        max_len: MAX_KUBECONFIG_BYTES,
        owner: crate::safefs::fsutil::Owner::Any,
        private: false,
    };
    let bytes = crate::safefs::fsutil::read_bounded(path, &policy)
        .map_err(ClientError::Unsafe)?
        .unwrap_or_default();
    // The same size and nesting bounds as a KubeletConfiguration.
    crate::config::kubeconfig::KubeletConfig::check_bounds(&bytes).map_err(|source| {
        ClientError::TooDeep {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// The node name: `--node-name`, else the hostname.
pub fn node_name(flag: Option<String>) -> String {
    flag.or_else(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
    })
    .unwrap_or_else(|| "localhost".to_string())
}

fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The status error text for a failed download: a 403 says what RBAC is
/// missing; everything else uses the v1.11 text (details in the log).
fn download_error(r: &ConfigRef, err: &kube::Error) -> String {
    match api_code(err) {
        Some(403) => format!(
            "failed to sync: forbidden: cannot get configmaps in namespace {} (grant get/list/watch on configmaps there to group system:nodes, see manifests/10-rbac.yaml)",
            r.namespace
        ),
        _ => "failed to sync: failed to download config, see Kubelet log for details".to_string(),
    }
}

/// Why a downloaded ConfigMap was not checkpointed.
#[derive(Debug, thiserror::Error)]
enum CheckpointError {
    /// The payload breaks the bounds every config input has (size, nesting):
    /// it is never stored.
    #[error("payload of {size} bytes exceeds the {MAX_PAYLOAD}-byte limit")]
    TooLarge { size: usize },
    #[error("key {key:?}: {source}")]
    OutOfBounds {
        key: String,
        #[source]
        source: ConfigError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The bounds a payload must keep before it is stored: at most
/// [`MAX_PAYLOAD`] bytes in all, and the config key within the size and
/// nesting limits of the config parser (checked by a linear pre-scan; the
/// full parse and validation happen when the config is resolved, and a
/// config that fails them is recorded as bad). CPU work: call it from a
/// blocking task, never on the event loop.
fn check_payload(files: &BTreeMap<String, Vec<u8>>, key: &str) -> Result<(), CheckpointError> {
    let size: usize = files.values().map(Vec::len).sum();
    if size > MAX_PAYLOAD {
        return Err(CheckpointError::TooLarge { size });
    }
    if let Some(body) = files.get(key) {
        KubeletConfig::check_bounds(body).map_err(|source| CheckpointError::OutOfBounds {
            key: key.to_string(),
            source,
        })?;
    }
    Ok(())
}

fn payload(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for (k, v) in cm.data.iter().flatten() {
        files.insert(k.clone(), v.as_bytes().to_vec());
    }
    for (k, v) in cm.binary_data.iter().flatten() {
        files.insert(k.clone(), v.0.clone());
    }
    files
}

/// The syncer of one holder tenure.
pub struct Syncer {
    client: Client,
    node: String,
    store: Store,
    reports: watch::Receiver<Option<ConfigReport>>,
    /// What the node asks for, as last acted on.
    acted_on: Option<Assignment>,
    /// The checkpointed ConfigMap version of the current assignment.
    checkpointed: Option<ConfigSource>,
    sync_error: Option<String>,
    /// The freshest copy of this node's Node object (from the watch or from our own patch
    /// responses); `None` until it has been read, and while it is deleted. Reports compare
    /// against it: nothing is patched, and no Event posted, when the Node already shows it.
    last_node: Option<Node>,
    /// The UID of the Node last seen (kept while it is deleted).
    last_uid: Option<String>,
    retry_at: Option<tokio::time::Instant>,
    retry_delay: Duration,
    /// When a failed status report is tried again.
    report_retry_at: Option<tokio::time::Instant>,
    report_retry_delay: Duration,
    metrics: Arc<Metrics>,
}

impl Syncer {
    pub fn new(
        client: Client,
        node: String,
        store: Store,
        reports: watch::Receiver<Option<ConfigReport>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Syncer {
            client,
            node,
            store,
            reports,
            acted_on: None,
            checkpointed: None,
            sync_error: None,
            last_node: None,
            last_uid: None,
            retry_at: None,
            retry_delay: DOWNLOAD_BACKOFF,
            report_retry_at: None,
            report_retry_delay: DOWNLOAD_BACKOFF,
            metrics,
        }
    }

    /// Runs until the task is aborted (when this supervisor stops holding).
    pub async fn run(mut self) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", self.node));
        let mut node_events = watcher::watcher(nodes, cfg).boxed();
        let mut node_backoff = WatchBackoff::new();
        let mut cm_backoff = WatchBackoff::new();
        let mut cm_events: Option<BoxStream<'static, Result<Event<ConfigMap>, watcher::Error>>> =
            None;
        info!(node = %self.node, "watching this node's config assignment");
        // Nothing is reported before the Node has been read: a report compares
        // with what the Node shows (a restart with nothing changed patches
        // nothing and moves no lastTransitionTime). The Node's first listing
        // triggers the first report.
        loop {
            tokio::select! {
                _ = sleep_until_opt(node_backoff.until), if node_backoff.until.is_some() => {
                    node_backoff.until = None;
                }
                _ = sleep_until_opt(cm_backoff.until), if cm_backoff.until.is_some() => {
                    cm_backoff.until = None;
                }
                ev = node_events.next(), if node_backoff.until.is_none() => match ev {
                    Some(Ok(Event::Apply(node) | Event::InitApply(node))) => {
                        node_backoff.ok();
                        let assignment = nodeconfig::assignment_of(&node);
                        self.observe_node(node);
                        if self.acted_on.as_ref() != Some(&assignment) {
                            cm_events = self.reconcile(assignment).await;
                            cm_backoff.ok();
                        }
                        // Also puts back what someone removed, and reports on
                        // a re-created Node (new UID, no condition).
                        self.report().await;
                    }
                    Some(Ok(Event::Delete(_))) => {
                        warn!(node = %self.node, "this node's Node object was deleted; keeping the current config (the status is reported again when it is re-created)");
                        self.last_node = None;
                        self.report_retry_at = None;
                    }
                    // A fresh listing (first start, or after the API server
                    // came back): report if the Node does not show our state.
                    // A download that failed (the server was away) is tried
                    // again now rather than after its backoff.
                    Some(Ok(Event::InitDone)) => {
                        node_backoff.ok();
                        if self.retry_at.is_some() {
                            self.retry_at = Some(tokio::time::Instant::now());
                        }
                        self.report().await;
                    }
                    Some(Ok(Event::Init)) => node_backoff.ok(),
                    Some(Err(err)) => {
                        let wait = node_backoff.failed(&err);
                        if wait.is_zero() {
                            info!(%err, "the watch of this node expired (410 Gone); re-listing now");
                        } else {
                            warn!(%err, retry_in = ?wait, "watch of this node failed; retrying with backoff (the kubelet keeps its current config)");
                        }
                    }
                    None => return,
                },
                ev = next_opt(&mut cm_events), if cm_backoff.until.is_none() => match ev {
                    Some(Ok(Event::Apply(cm) | Event::InitApply(cm))) => {
                        cm_backoff.ok();
                        self.on_configmap_update(cm).await;
                    }
                    Some(Ok(Event::Delete(cm))) => {
                        cm_backoff.ok();
                        warn!(name = ?cm.metadata.name, "assigned ConfigMap was deleted; the node keeps its checkpoint");
                    }
                    Some(Ok(_)) => cm_backoff.ok(),
                    Some(Err(err)) => {
                        let wait = cm_backoff.failed(&err);
                        if wait.is_zero() {
                            info!(%err, "the watch of the assigned ConfigMap expired (410 Gone); re-listing now");
                        } else {
                            warn!(%err, retry_in = ?wait, "watch of the assigned ConfigMap failed; retrying with backoff");
                        }
                    }
                    None => cm_events = None,
                },
                changed = self.reports.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.report().await;
                }
                _ = sleep_until_opt(self.report_retry_at) => {
                    self.report_retry_at = None;
                    self.report().await;
                }
                _ = sleep_until_opt(self.retry_at) => {
                    self.retry_at = None;
                    if let Some(a) = self.acted_on.take() {
                        cm_events = self.reconcile(a).await;
                        cm_backoff.ok();
                    }
                }
            }
        }
    }

    /// Acts on a new assignment. Returns the ConfigMap watch to follow, if
    /// the assigned ConfigMap is mutable.
    async fn reconcile(
        &mut self,
        assignment: Assignment,
    ) -> Option<BoxStream<'static, Result<Event<ConfigMap>, watcher::Error>>> {
        self.acted_on = Some(assignment.clone());
        match assignment {
            Assignment::Local => {
                self.sync_error = None;
                self.checkpointed = None;
                let store = self.store.clone();
                let res = tokio::task::spawn_blocking(move || {
                    let _g = store.lock()?;
                    if store.assigned()?.is_some() {
                        store.set_assigned(None)?;
                        return Ok::<bool, crate::config::store::StoreError>(true);
                    }
                    Ok(false)
                })
                .await;
                match res {
                    Ok(Ok(true)) => info!(
                        "config assignment removed from the node; resetting to the local config"
                    ),
                    Ok(Ok(false)) => {}
                    Ok(Err(err)) => {
                        warn!(%err, "cannot clear the assignment in the checkpoint store")
                    }
                    Err(err) => warn!(%err, "store task failed"),
                }
                self.report().await;
                None
            }
            Assignment::Invalid(why) => {
                warn!(reason = %why, "the node's config assignment is invalid; not applying it, the kubelet keeps its current config");
                self.sync_error = Some(why);
                self.report().await;
                None
            }
            Assignment::Remote(r) => {
                let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), &r.namespace);
                match cms.get(&r.name).await {
                    Ok(cm) => {
                        self.retry_delay = DOWNLOAD_BACKOFF;
                        let immutable = cm.immutable == Some(true);
                        if !self.checkpoint(&r, &cm).await {
                            return None;
                        }
                        if immutable {
                            debug!(configmap = %r, "immutable ConfigMap: fetched once, not watched");
                            None
                        } else {
                            warn!(configmap = %r, "the assigned ConfigMap is mutable: it is watched and every change is a new checkpoint; prefer immutable ConfigMaps with a content hash in the name");
                            let cfg = watcher::Config::default()
                                .fields(&format!("metadata.name={}", r.name));
                            Some(watcher::watcher(cms, cfg).boxed())
                        }
                    }
                    Err(err) => {
                        warn!(configmap = %r, %err, retry_in = ?self.retry_delay, "failed to download the assigned config");
                        self.sync_error = Some(download_error(&r, &err));
                        self.retry_at = Some(tokio::time::Instant::now() + self.retry_delay);
                        self.retry_delay = (self.retry_delay * 2).min(DOWNLOAD_BACKOFF_MAX);
                        self.report().await;
                        None
                    }
                }
            }
        }
    }

    async fn on_configmap_update(&mut self, cm: ConfigMap) {
        let Some(Assignment::Remote(r)) = self.acted_on.clone() else {
            return;
        };
        let rv = cm.metadata.resource_version.clone().unwrap_or_default();
        if self
            .checkpointed
            .as_ref()
            .is_some_and(|c| c.resource_version == rv)
        {
            return;
        }
        info!(configmap = %r, resource_version = %rv, "assigned ConfigMap changed: new checkpoint");
        self.checkpoint(&r, &cm).await;
    }

    /// Checkpoints the ConfigMap and assigns it. Returns false on failure
    /// (reported as a sync error).
    async fn checkpoint(&mut self, r: &ConfigRef, cm: &ConfigMap) -> bool {
        let files = payload(cm);
        if !files.contains_key(&r.key) {
            warn!(configmap = %r, keys = ?files.keys().collect::<Vec<_>>(), "the assigned ConfigMap has no such key");
            self.sync_error = Some(format!(
                "failed to sync: failed to download config, ConfigMap {}/{} has no key {:?}",
                r.namespace, r.name, r.key
            ));
            self.report().await;
            return false;
        }
        let source = ConfigSource {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: cm.metadata.uid.clone().unwrap_or_default(),
            resource_version: cm.metadata.resource_version.clone().unwrap_or_default(),
            kubelet_config_key: r.key.clone(),
        };
        let store = self.store.clone();
        let src = source.clone();
        let key = r.key.clone();
        // Checked and stored off the event loop: the runtime has one thread,
        // and a signal must be acted on while a payload is looked at.
        let res = tokio::task::spawn_blocking(move || {
            check_payload(&files, &key)?;
            let _g = store.lock()?;
            store.save_checkpoint(&src, &files)?;
            if store.assigned()?.as_ref() != Some(&src) {
                store.set_assigned(Some(&src))?;
            }
            Ok::<(), CheckpointError>(())
        })
        .await;
        match res {
            Ok(Ok(())) => {
                info!(source = %source, "checkpointed and assigned");
                self.checkpointed = Some(source);
                self.sync_error = None;
                self.metrics.sync_error(None);
                self.metrics.synced(SystemTime::now());
                true
            }
            Ok(Err(
                err @ (CheckpointError::TooLarge { .. } | CheckpointError::OutOfBounds { .. }),
            )) => {
                warn!(configmap = %r, %err, "the assigned ConfigMap is refused and not checkpointed; the kubelet keeps its current config");
                self.sync_error = Some(format!(
                    "failed to sync: failed to download config, ConfigMap {}/{} is refused: {err}",
                    r.namespace, r.name
                ));
                self.report().await;
                false
            }
            Ok(Err(err)) => {
                warn!(%err, "cannot checkpoint the assigned config");
                self.sync_error = Some(format!(
                    "failed to sync: internal failure, see Kubelet log for details ({err})"
                ));
                self.report().await;
                false
            }
            Err(err) => {
                warn!(%err, "store task failed");
                false
            }
        }
    }

    /// Keeps `node` as the freshest copy of the Node unless an older version
    /// of the same Node arrives after a newer one (a watch event queued
    /// behind our own patch's response). A new UID (a re-created Node)
    /// always replaces it.
    fn observe_node(&mut self, node: Node) {
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
    async fn report(&mut self) {
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

/// Retries an API call on 409/429/5xx and transport errors with a short
/// exponential backoff.
async fn retry<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(err) => {
                let retryable = match api_code(&err) {
                    Some(code) => code == 409 || code == 429 || code >= 500,
                    None => true,
                };
                if !retryable || attempt >= PATCH_ATTEMPTS {
                    return Err(err);
                }
                debug!(%err, attempt, "retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
        }
    }
}

async fn next_opt<S: futures::Stream + Unpin>(s: &mut Option<S>) -> Option<S::Item> {
    match s.as_mut() {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(key: &str, body: &[u8]) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([(key.to_string(), body.to_vec())])
    }

    fn status(code: u16) -> Box<kube::core::Status> {
        Box::new(serde_json::from_value(serde_json::json!({"code": code})).unwrap())
    }

    #[tokio::test]
    async fn watch_backoff_is_short_for_connection_failures_and_none_after_a_410() {
        let mut b = WatchBackoff::new();
        let refused = || {
            watcher::Error::WatchStartFailed(kube::Error::Service(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            ))))
        };
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            last = b.failed(&refused());
            assert!(last <= WATCH_BACKOFF_MAX * 5 / 4, "{last:?}");
        }
        assert!(last >= WATCH_BACKOFF_MAX, "{last:?}");
        // However long the outage was: an expired resourceVersion re-lists at once.
        let gone = watcher::Error::WatchError(status(410));
        assert!(is_gone(&gone));
        assert_eq!(b.failed(&gone), Duration::ZERO);
        assert!(b.until.is_none());
        assert!(is_gone(&watcher::Error::WatchStartFailed(
            kube::Error::Api(status(410))
        )));
        // A server that answers with errors is given more room.
        let mut api = Duration::ZERO;
        for _ in 0..20 {
            api = b.failed(&watcher::Error::InitialListFailed(kube::Error::Api(
                status(503),
            )));
        }
        assert!(api >= WATCH_BACKOFF_API_MAX, "{api:?}");
        // A connection failure after them waits no more than its own cap.
        assert!(b.failed(&refused()) <= WATCH_BACKOFF_MAX * 5 / 4);
        b.ok();
        assert!(b.failed(&refused()) <= WATCH_BACKOFF * 5 / 4);
    }

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

    #[test]
    fn payloads_out_of_bounds_are_refused_before_they_are_stored() {
        let deep = format!("a: {}", "[".repeat(200_000));
        let err = check_payload(&files("kubelet", deep.as_bytes()), "kubelet").unwrap_err();
        assert!(matches!(err, CheckpointError::OutOfBounds { .. }), "{err}");
        assert!(err.to_string().contains("deeper than"), "{err}");
        let big = vec![b' '; MAX_PAYLOAD + 1];
        assert!(matches!(
            check_payload(&files("other", &big), "kubelet"),
            Err(CheckpointError::TooLarge { .. })
        ));
        // Invalid but bounded: stored, the lifecycle records it as bad.
        check_payload(&files("kubelet", b"port: 70000\n"), "kubelet").expect("bounded");
    }
}
