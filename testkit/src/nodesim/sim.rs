//! The simulator's state: [`NodeSim`], its nodes' memory, the commit hook that queues
//! changes, and the writes that create nodes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::clock::now_rfc3339;
use crate::resource::{Resource, Target};
use crate::server::Shared;
use crate::store::{EventType, Opts, State};
use crate::unpoisoned::lock;
use crate::ApiServer;

use super::runner::run;
use super::script::{source_annotation, Script, SimOptions};
use super::{BATCH, CONDITION_TYPE, IDLE_POLL, STATUS_ANNOTATION, ZONES};

/// What the commit hook tells the simulator thread.
pub(super) enum Change {
    Assigned { node: String, value: String },
    ConfigMap { namespace: String, name: String },
}

#[derive(Default)]
pub(super) struct Queue {
    pub(super) changes: Vec<Change>,
    pub(super) stop: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Action {
    React,
    Fallback,
    TrialEnd,
    DrainDone,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Timer {
    pub(super) at: Instant,
    pub(super) seq: u64,
    pub(super) node: String,
    pub(super) epoch: u64,
    pub(super) action: Action,
}

/// A simulated node's memory.
pub(super) struct SimNode {
    pub(super) script: Script,
    pub(super) assignments: Vec<String>,
    /// Bumped by every assignment; older timers are stale.
    pub(super) epoch: u64,
    /// The source running (`None`: the local config).
    pub(super) active: Option<Value>,
    pub(super) assigned: Option<Value>,
    pub(super) last_known_good: Option<Value>,
    /// The source on trial, drain or fallback (set when the timer is scheduled).
    pub(super) next: Option<Value>,
    pub(super) gone: bool,
}

impl SimNode {
    fn new() -> SimNode {
        SimNode {
            script: Script::Healthy,
            assignments: Vec::new(),
            epoch: 0,
            active: None,
            assigned: None,
            last_known_good: None,
            next: None,
            gone: false,
        }
    }
}

pub(super) struct Inner {
    pub(super) shared: Arc<Shared>,
    pub(super) options: SimOptions,
    pub(super) queue: Mutex<Queue>,
    pub(super) wake: Condvar,
    pub(super) nodes: Mutex<HashMap<String, SimNode>>,
    pub(super) reacted: AtomicU64,
    pub(super) reacted_lock: Mutex<()>,
    pub(super) reacted_changed: Condvar,
}

/// Simulated nodes on an [`ApiServer`]. Dropping it stops them (the nodes stay).
pub struct NodeSim {
    inner: Arc<Inner>,
    hook: u64,
    thread: Option<JoinHandle<()>>,
}

impl NodeSim {
    /// Starts the simulator (no nodes yet) on `server`.
    pub fn start(server: &ApiServer, options: SimOptions) -> NodeSim {
        let inner = Arc::new(Inner {
            shared: Arc::clone(&server.shared),
            options,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            nodes: Mutex::new(HashMap::new()),
            reacted: AtomicU64::new(0),
            reacted_lock: Mutex::new(()),
            reacted_changed: Condvar::new(),
        });
        let observer = Arc::clone(&inner);
        let hook = server.lock().add_commit_hook(Box::new(
            move |resource, kind, obj: &Value, prev: Option<&Value>| {
                observe(&observer, resource, kind, obj, prev);
            },
        ));
        let runner = Arc::clone(&inner);
        let thread = thread::spawn(move || run(runner));
        NodeSim {
            inner,
            hook,
            thread: Some(thread),
        }
    }

    /// Creates `n` nodes `PREFIX00000`, `PREFIX00001`, ... (Ready, labelled
    /// `kubernetes.io/hostname`, `kubernetes.io/os=linux` and
    /// `topology.kubernetes.io/zone` = `zone-a`/`zone-b`/`zone-c` round robin, plus
    /// `labels(i)`), reporting the local config; returns their names.
    pub fn add_nodes(
        &self,
        n: usize,
        prefix: &str,
        labels: impl Fn(usize) -> BTreeMap<String, String>,
    ) -> Vec<String> {
        let names: Vec<String> = (0..n).map(|i| format!("{prefix}{i:05}")).collect();
        {
            let mut nodes = lock(&self.inner.nodes);
            for name in &names {
                nodes.insert(name.clone(), SimNode::new());
            }
        }
        for (chunk_index, chunk) in names.chunks(BATCH).enumerate() {
            let mut state = self.inner.shared.lock();
            for (offset, name) in chunk.iter().enumerate() {
                let i = chunk_index * BATCH + offset;
                let mut all = BTreeMap::new();
                all.insert("kubernetes.io/hostname".to_string(), name.clone());
                all.insert("kubernetes.io/os".to_string(), "linux".to_string());
                all.insert(
                    "topology.kubernetes.io/zone".to_string(),
                    ZONES[i % ZONES.len()].to_string(),
                );
                all.extend(labels(i));
                create_node(&mut state, name, &all);
            }
            drop(state);
            self.inner.shared.changed.notify_all();
        }
        names
    }

    /// Creates one more node (a node that joins later) with these labels besides
    /// `kubernetes.io/hostname` and `kubernetes.io/os`.
    pub fn add_node(&self, name: &str, labels: BTreeMap<String, String>) {
        lock(&self.inner.nodes).insert(name.to_string(), SimNode::new());
        let mut all = BTreeMap::new();
        all.insert("kubernetes.io/hostname".to_string(), name.to_string());
        all.insert("kubernetes.io/os".to_string(), "linux".to_string());
        all.extend(labels);
        create_node(&mut self.inner.shared.lock(), name, &all);
        self.inner.shared.changed.notify_all();
    }

    /// Sets how `node` handles its assignments from now on.
    pub fn script(&self, node: &str, script: Script) {
        if let Some(sim) = lock(&self.inner.nodes).get_mut(node) {
            sim.script = script;
        }
    }

    /// Every assignment value `node` saw, in order (`""`: the annotation was removed).
    pub fn assignments(&self, node: &str) -> Vec<String> {
        lock(&self.inner.nodes)
            .get(node)
            .map(|sim| sim.assignments.clone())
            .unwrap_or_default()
    }

    /// How many reactions the nodes have carried out (reports written, nodes deleted).
    pub fn reacted(&self) -> u64 {
        self.inner.reacted.load(Ordering::SeqCst)
    }

    /// Waits until [`NodeSim::reacted`] reaches `at_least`; `false` if `timeout` passed first.
    pub fn wait_reacted(&self, at_least: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = lock(&self.inner.reacted_lock);
        loop {
            if self.reacted() >= at_least {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            guard = self
                .inner
                .reacted_changed
                .wait_timeout(guard, left.min(IDLE_POLL))
                .map(|(g, _)| g)
                .unwrap_or_else(|poison| poison.into_inner().0);
        }
    }

    /// Stops the simulator (the nodes stay as they are).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        lock(&self.inner.queue).stop = true;
        self.inner.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.inner.shared.lock().remove_commit_hook(self.hook);
    }
}

impl Drop for NodeSim {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The commit hook: runs with the state locked, so it only queues.
fn observe(inner: &Inner, resource: Resource, kind: EventType, obj: &Value, prev: Option<&Value>) {
    let change = match (resource, kind) {
        (Resource::Nodes, EventType::Added | EventType::Modified) => {
            let value = source_annotation(obj);
            let before = prev.map(source_annotation).unwrap_or_default();
            if value == before {
                return;
            }
            let node = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            Change::Assigned { node, value }
        }
        (Resource::ConfigMaps, _) => Change::ConfigMap {
            namespace: obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            name: obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
        },
        _ => return,
    };
    lock(&inner.queue).changes.push(change);
    inner.wake.notify_all();
}

fn local_status() -> Value {
    json!({"active": null, "assigned": null, "lastKnownGood": null, "error": null})
}

pub(super) fn condition(status: &str, reason: &str, message: &str) -> Value {
    json!({
        "type": CONDITION_TYPE, "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339(),
    })
}

pub(super) fn ready(status: bool) -> Value {
    let (status, reason, message) = if status {
        ("True", "KubeletReady", "kubelet is posting ready status")
    } else {
        (
            "False",
            "KubeletNotReady",
            "container runtime network not ready: the kubelet does not start with this config",
        )
    };
    json!({
        "type": "Ready", "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339(),
    })
}

fn create_node(state: &mut State, name: &str, labels: &BTreeMap<String, String>) {
    let body = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {STATUS_ANNOTATION: local_status().to_string()},
        },
        "spec": {},
        "status": {
            "conditions": [ready(true), condition("True", "passing all checks", "using current (init)")],
            "addresses": [{"type": "Hostname", "address": name}],
        },
    });
    let target = Target::cluster(Resource::Nodes);
    if let Err(err) = state.create(&target, body, &Opts::default()) {
        panic!("node simulator: failed to create node {name}: {err}");
    }
}
