//! Kubernetes API sync: watch this node's config assignment, download and
//! checkpoint the ConfigMap it names, and report the config status back on
//! the Node. Runs only in the lock holder (only the holder writes the store)
//! and never blocks the kubelet: with the API server unreachable the node
//! keeps running from its checkpoints.
//!
//! This module holds the [`Syncer`] and its event loop; the rest is split by
//! job (the API client itself is in [`crate::cluster::api`]): watch and patch backoff
//! (`backoff`), downloading and checkpointing the assigned ConfigMap
//! (`download`), and status reporting and Events (`report`).

pub(crate) mod backoff;
mod download;
mod report;

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::cluster::api::{self, CredentialHint};
use crate::config::store::{ConfigSource, Store};
use crate::metrics::Metrics;
use kp_contract::node_config::{self, Assignment, ConfigReport};
use kp_contract::time::now_rfc3339;
use kp_kubelet_config::disruption::{Overrides, NODE_OVERRIDE_ANNOTATION};
use kp_runtime::events::{self, EventType, NodeEvent};
use kp_runtime::retry::{self, Retry};

/// The syncer of one holder tenure.
pub struct Syncer {
    client: Client,
    /// Told when the API server refuses our credentials.
    hint: CredentialHint,
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
    /// When a failed download is tried again.
    retry_at: Option<tokio::time::Instant>,
    download_retry: Retry,
    /// When a failed status report is tried again.
    report_retry_at: Option<tokio::time::Instant>,
    report_retry: Retry,
    metrics: Arc<Metrics>,
    /// The Node's override annotation as last copied (`Some(None)`: absent;
    /// `None`: not copied yet in this tenure).
    overrides_seen: Option<Option<String>>,
}

impl Syncer {
    pub fn new(
        client: Client,
        hint: CredentialHint,
        node: String,
        store: Store,
        reports: watch::Receiver<Option<ConfigReport>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Syncer {
            client,
            hint,
            node,
            store,
            reports,
            acted_on: None,
            checkpointed: None,
            sync_error: None,
            last_node: None,
            last_uid: None,
            retry_at: None,
            download_retry: Retry::new("downloading the assigned config"),
            report_retry_at: None,
            report_retry: Retry::new("reporting the config status on the Node"),
            metrics,
            overrides_seen: None,
        }
    }

    /// Runs until the task is aborted (when this supervisor stops holding).
    pub async fn run(mut self) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", self.node));
        // Each watch retries with its own backoff and logs quietly (cluster::retry);
        // the kubelet keeps its current config meanwhile.
        let mut node_events = retry::watch(
            hinted(watcher::watcher(nodes, cfg), self.hint.clone()),
            "the watch of this node (the kubelet keeps its current config)",
        );
        let mut cm_events: Option<BoxStream<'static, Event<ConfigMap>>> = None;
        info!(node = %self.node, "watching this node's config assignment");
        // Nothing is reported before the Node has been read: a report compares
        // with what the Node shows (a restart with nothing changed patches
        // nothing and moves no lastTransitionTime). The Node's first listing
        // triggers the first report.
        loop {
            tokio::select! {
                ev = node_events.next() => match ev {
                    Some(Event::Apply(node) | Event::InitApply(node)) => {
                        let assignment = node_config::assignment_of(&node);
                        self.sync_overrides(&node).await;
                        self.observe_node(node);
                        if self.acted_on.as_ref() != Some(&assignment) {
                            cm_events = self.reconcile(assignment).await;
                        }
                        // Also puts back what someone removed, and reports on
                        // a re-created Node (new UID, no condition).
                        self.report().await;
                    }
                    Some(Event::Delete(_)) => {
                        warn!(node = %self.node, "this node's Node object was deleted; keeping the current config (the status is reported again when it is re-created)");
                        self.last_node = None;
                        self.report_retry_at = None;
                    }
                    // A fresh listing (first start, or after the API server
                    // came back): report if the Node does not show our state.
                    // A download or a report that failed (the server was
                    // away) is tried again now rather than after its backoff.
                    Some(Event::InitDone) => {
                        if self.retry_at.is_some() {
                            self.retry_at = Some(tokio::time::Instant::now());
                        }
                        self.report().await;
                    }
                    // The start of a list try: nothing succeeded yet.
                    Some(Event::Init) => {}
                    None => return,
                },
                ev = next_opt(&mut cm_events) => match ev {
                    Some(Event::Apply(cm) | Event::InitApply(cm)) => {
                        self.on_configmap_update(cm).await;
                    }
                    Some(Event::Delete(cm)) => {
                        warn!(name = cm.metadata.name.as_deref(), "assigned ConfigMap was deleted; the node keeps its checkpoint");
                    }
                    Some(_) => {}
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
                    }
                }
            }
        }
    }
}

impl Syncer {
    /// Copies the Node's per-class action override (annotation
    /// [`NODE_OVERRIDE_ANNOTATION`]) into the store, where the supervisor
    /// reads it (also before the Node can be read, after a restart). An
    /// invalid or over-long annotation ([`MAX_OVERRIDES_BYTES`](kp_kubelet_config::disruption::MAX_OVERRIDES_BYTES), the cap the
    /// store reads with) is refused once per value: one bounded log line, a
    /// Warning Event, and the previous record removed, so that the
    /// supervisor's actions apply, visibly. Removing the annotation removes
    /// the record.
    async fn sync_overrides(&mut self, node: &Node) {
        let text = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NODE_OVERRIDE_ANNOTATION))
            .cloned();
        if self.overrides_seen.as_ref() == Some(&text) {
            return;
        }
        self.overrides_seen = Some(text.clone());
        let valid = match &text {
            Some(t) => match t.parse::<Overrides>() {
                Ok(o) => {
                    info!(overrides = %o, "this node overrides the actions of config change classes");
                    Some(t.clone())
                }
                Err(err) => {
                    warn!(annotation = NODE_OVERRIDE_ANNOTATION, %err, "refusing the node's disruption-action annotation; the supervisor's actions apply until it is fixed or removed");
                    let message = format!(
                        "annotation {NODE_OVERRIDE_ANNOTATION} refused: {err}; the supervisor's actions apply until it is fixed or removed"
                    );
                    let ev = NodeEvent {
                        type_: EventType::Warning,
                        reason: "InvalidDisruptionActions",
                        message: &message,
                        action: "Sync",
                    };
                    let uid = node.metadata.uid.clone();
                    events::post(&self.client, &self.node, uid, &ev, &now_rfc3339()).await;
                    None
                }
            },
            None => None,
        };
        let store = self.store.clone();
        let res = tokio::task::spawn_blocking(move || {
            let _g = store.lock()?;
            store.set_node_overrides(valid.as_deref())
        })
        .await;
        if let Ok(Err(err)) = res {
            warn!(%err, "cannot record the node's disruption-action override in the store");
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

/// A watch whose credential failures (a 401, a failed TLS handshake) wake the
/// credential follower, which reads the kubeconfig's files again.
pub(super) fn hinted<T, S>(
    stream: S,
    hint: CredentialHint,
) -> impl futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static
where
    T: Send + 'static,
    S: futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static,
{
    stream.inspect(move |item| {
        if let Err(err) = item {
            if api::is_credential_failure(err) {
                hint.rejected();
            }
        }
    })
}
