//! Watches for the ConfigMaps that rollouts wait for: a rollout whose ConfigMap (or key) is
//! missing starts within moments of its creation instead of on the next 30 s look. One
//! watch per missing ConfigMap (a field selector on its name, in its namespace), at most
//! [`MAX_WATCHES`]; each event wakes every rollout, as a Node change does. A watch ends
//! when its ConfigMap is found, and with the controller.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use kp_runtime::retry::{self, Retry};

/// Missing ConfigMaps watched at once; beyond it a rollout looks again every 30 s.
pub const MAX_WATCHES: usize = 64;

/// The running watches, by (namespace, name).
pub struct ConfigWatches {
    client: Client,
    wake: watch::Sender<u64>,
    running: Mutex<HashMap<(String, String), JoinHandle<()>>>,
}

impl ConfigWatches {
    pub fn new(client: Client, wake: watch::Sender<u64>) -> ConfigWatches {
        ConfigWatches {
            client,
            wake,
            running: Mutex::new(HashMap::new()),
        }
    }

    /// A rollout waits for `namespace/name`: watch it (once).
    pub fn missing(&self, namespace: &str, name: &str) {
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        let key = (namespace.to_string(), name.to_string());
        if running.contains_key(&key) {
            return;
        }
        if running.len() >= MAX_WATCHES {
            warn!(
                namespace,
                name,
                limit = MAX_WATCHES,
                "too many missing ConfigMaps to watch; this one is looked for every 30 s"
            );
            return;
        }
        debug!(namespace, name, "watching for a missing ConfigMap");
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let wake = self.wake.clone();
        // Failures at debug level: the rollout says what it waits for.
        let what = format!("the watch of missing ConfigMap {namespace}/{name}");
        let task = tokio::spawn(async move {
            let mut events = retry::watch_with(watcher(api, cfg), Retry::quiet(what.clone()), what);
            while events.next().await.is_some() {
                wake.send_modify(|n| *n = n.wrapping_add(1));
            }
        });
        running.insert(key, task);
    }

    /// `namespace/name` was found: its watch is not needed any more.
    pub fn found(&self, namespace: &str, name: &str) {
        if let Ok(mut running) = self.running.lock() {
            if let Some(task) = running.remove(&(namespace.to_string(), name.to_string())) {
                task.abort();
            }
        }
    }

    /// How many watches run (for tests and metrics).
    pub fn len(&self) -> usize {
        self.running.lock().map_or(0, |r| r.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for ConfigWatches {
    fn drop(&mut self) {
        if let Ok(running) = self.running.get_mut() {
            for (_, task) in running.drain() {
                task.abort();
            }
        }
    }
}
