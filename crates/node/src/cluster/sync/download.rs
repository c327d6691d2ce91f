//! Downloading the assigned ConfigMap and checkpointing it: acting on a
//! new assignment, following a mutable ConfigMap, the payload bounds checked
//! before anything is stored, and the sync error texts of a failed download.

use std::collections::BTreeMap;
use std::time::SystemTime;

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::{self, Event};
use kube::Api;
use tracing::{debug, info, warn};

use super::backoff::api_code;
use super::Syncer;
use crate::config::store::{ConfigSource, StoreError, MAX_PAYLOAD};
use kp_contract::node_config::{Assignment, ConfigRef};
use kp_kubelet_config::{ConfigError, KubeletConfig};
use kp_runtime::retry;

/// The status error text for a failed download: a 403 says what RBAC is
/// missing; another answer of the server is quoted after the v1.11 prefix
/// (`failed to sync: failed to download config: configmaps "nope" not
/// found`, escaped and bounded); no answer at all uses the v1.11 text
/// (details in the log).
fn download_error(r: &ConfigRef, err: &kube::Error) -> String {
    match err {
        _ if api_code(err) == Some(403) => format!(
            "failed to sync: forbidden: cannot get configmaps in namespace {} (grant get/list/watch on configmaps there to group system:nodes, see manifests/10-rbac.yaml)",
            r.namespace
        ),
        kube::Error::Api(status) => format!(
            "failed to sync: failed to download config: {} ({})",
            kp_contract::node_config::detail(&status.message),
            status.code
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

impl Syncer {
    /// Acts on a new assignment. Returns the ConfigMap watch to follow, if
    /// the assigned ConfigMap is mutable.
    pub(super) async fn reconcile(
        &mut self,
        assignment: Assignment,
    ) -> Option<BoxStream<'static, Event<ConfigMap>>> {
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
                match self.download_retry.call(cms.get(&r.name)).await {
                    Ok(cm) => {
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
                            Some(retry::watch(
                                super::hinted(watcher::watcher(cms, cfg), self.hint.clone()),
                                format!("the watch of the assigned ConfigMap {r}"),
                            ))
                        }
                    }
                    // Logged by download_retry (quiet after the first minute).
                    Err(failed) => {
                        self.sync_error = Some(download_error(&r, &failed.error));
                        self.retry_at = Some(tokio::time::Instant::now() + failed.retry_in);
                        self.report().await;
                        None
                    }
                }
            }
        }
    }

    pub(super) async fn on_configmap_update(&mut self, cm: ConfigMap) {
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
            warn!(configmap = %r, keys = %files.keys().map(String::as_str).collect::<Vec<_>>().join(", "), "the assigned ConfigMap has no such key");
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(key: &str, body: &[u8]) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([(key.to_string(), body.to_vec())])
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
