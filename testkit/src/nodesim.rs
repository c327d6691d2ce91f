//! An in-process simulator of nodes that follow kubelet-pivot's status contract (see
//! `src/cluster/nodeconfig.rs`), fast enough for thousands of nodes.
//!
//! The simulated nodes write straight into the server's state: their writes are not HTTP
//! requests (they do not appear in [`ApiServer::requests`]) but they are ordinary writes
//! (new resourceVersions, watch events, the server's validation). A node sees its
//! assignment through a commit hook on the state (no polling), and reacts after
//! [`SimOptions::react_after`] on a background thread with a timer queue:
//!
//! - assignment: the Node annotation `kubelet-pivot.io/config-source` =
//!   `NAMESPACE/NAME[:KEY]` (KEY `kubelet` by default); absent or empty is the local config;
//! - report: the Node annotation `kubelet-pivot.io/config-status` (JSON
//!   `{"active", "assigned", "lastKnownGood", "error"}`, sources as
//!   `{"configMap": {namespace, name, uid, resourceVersion, kubeletConfigKey}}` of the
//!   ConfigMap read) and the `KubeletConfigOK` condition (through `nodes/NAME/status`,
//!   merged by type): `True` / `passing all checks` / `using current (UID: U,
//!   ResourceVersion: RV)` (or `(init)` for the local config); `Unknown` / `failed to sync,
//!   desired config unclear, cause: configmaps "NAME" not found` while the ConfigMap is
//!   missing (the node reacts again when it appears or changes);
//! - [`Script`]s make a node misbehave for one assignment (`on`), or for every remote one
//!   (`on: None`): roll back after a crash loop, never become Ready, be deleted, drain
//!   first, or never report.
//!
//! A healthy node keeps its `Ready` condition `True` (`KubeletReady`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::clock::now_rfc3339;
use crate::patch::PatchKind;
use crate::resource::{Resource, Target};
use crate::server::Shared;
use crate::store::{EventType, Opts, State};
use crate::ApiServer;

/// The Node annotation that assigns a config.
pub const SOURCE_ANNOTATION: &str = "kubelet-pivot.io/config-source";
/// The Node annotation a node reports its config status in.
pub const STATUS_ANNOTATION: &str = "kubelet-pivot.io/config-status";
/// The Node condition a node reports its config in.
pub const CONDITION_TYPE: &str = "KubeletConfigOK";
/// The key of an assignment that names none.
const DEFAULT_KEY: &str = "kubelet";
/// The error of a config that crash-looped in its trial.
pub const KNOWN_BAD: &str = "assigned config is known bad (crash loop: kubelet exited 3 times within the trial period), see Kubelet log for details";
/// Zones of the default `topology.kubernetes.io/zone` labels, round robin.
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// Writes done under one hold of the state lock before HTTP requests get a turn.
const BATCH: usize = 200;
/// Longest the simulator sleeps before checking whether the server is gone.
const IDLE_POLL: Duration = Duration::from_millis(200);

/// How the simulated nodes behave in time.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// From seeing an assignment to reporting on it (a kubelet restart's worth).
    pub react_after: Duration,
    /// How long a new config runs before it becomes the last-known-good one (zero: at once).
    pub trial: Duration,
    /// How long a config that crash-loops stays active before the fallback, unless the
    /// script says otherwise.
    pub rollback_after: Duration,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            react_after: Duration::from_millis(20),
            trial: Duration::ZERO,
            rollback_after: Duration::from_millis(50),
        }
    }
}

/// How a node handles an assignment. `on` names the config (`NAMESPACE/NAME[:KEY]`) the
/// script applies to; `None` means every remote config. Other assignments are handled as
/// [`Script::Healthy`] does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Script {
    /// Applies every config and reports it.
    Healthy,
    /// The config starts (reported active, on trial), crash-loops, and after `after`
    /// ([`SimOptions::rollback_after`] if `None`) the node falls back to its last-known-good
    /// config and reports the assigned one as known bad.
    RollsBack {
        on: Option<String>,
        after: Option<Duration>,
    },
    /// The config is applied and reported, but the node's `Ready` condition turns `False`
    /// until it is assigned another config.
    NeverReady { on: Option<String> },
    /// The node is deleted (as a node-replacing controller would) when assigned the config.
    DeletedOnAssignment { on: Option<String> },
    /// A disruptive change: the node is cordoned (`spec.unschedulable`) and reports
    /// `KubeletConfigOK` `False` / `Draining` for `drain`, then applies the config,
    /// uncordons and reports it.
    Drains { on: Option<String>, drain: Duration },
    /// The node never reports on the config (a stuck node).
    Ignores { on: Option<String> },
}

impl Script {
    fn on(&self) -> Option<&Option<String>> {
        match self {
            Script::Healthy => None,
            Script::RollsBack { on, .. }
            | Script::NeverReady { on }
            | Script::DeletedOnAssignment { on }
            | Script::Drains { on, .. }
            | Script::Ignores { on } => Some(on),
        }
    }

    /// The script that applies to `assignment`.
    fn for_assignment(&self, assignment: &Assignment) -> Script {
        let Assignment::Remote(assigned) = assignment else {
            return Script::Healthy;
        };
        match self.on() {
            Some(None) => self.clone(),
            Some(Some(on)) if parse_source(on).ok().as_ref() == Some(assigned) => self.clone(),
            _ => Script::Healthy,
        }
    }
}

/// A ConfigMap key a node is assigned.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ConfigRef {
    namespace: String,
    name: String,
    key: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Assignment {
    Local,
    Remote(ConfigRef),
    Invalid(String),
}

fn parse_source(value: &str) -> Result<ConfigRef, String> {
    let value = value.trim();
    let invalid =
        || format!("invalid {SOURCE_ANNOTATION} {value:?}: expected NAMESPACE/NAME[:KEY]");
    let (namespace, rest) = value.split_once('/').ok_or_else(invalid)?;
    let (name, key) = rest.split_once(':').unwrap_or((rest, DEFAULT_KEY));
    if namespace.is_empty() || name.is_empty() || key.is_empty() || name.contains('/') {
        return Err(invalid());
    }
    Ok(ConfigRef {
        namespace: namespace.to_string(),
        name: name.to_string(),
        key: key.to_string(),
    })
}

fn assignment_of(value: &str) -> Assignment {
    if value.trim().is_empty() {
        return Assignment::Local;
    }
    match parse_source(value) {
        Ok(source) => Assignment::Remote(source),
        Err(why) => Assignment::Invalid(why),
    }
}

fn source_annotation(node: &Value) -> String {
    node["metadata"]["annotations"][SOURCE_ANNOTATION]
        .as_str()
        .unwrap_or("")
        .to_string()
}

// ------------------------------------------------------------------------------------------
// State of the simulator
// ------------------------------------------------------------------------------------------

/// What the commit hook tells the simulator thread.
enum Change {
    Assigned { node: String, value: String },
    ConfigMap { namespace: String, name: String },
}

#[derive(Default)]
struct Queue {
    changes: Vec<Change>,
    stop: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    React,
    Fallback,
    TrialEnd,
    DrainDone,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at: Instant,
    seq: u64,
    node: String,
    epoch: u64,
    action: Action,
}

/// A simulated node's memory.
struct SimNode {
    script: Script,
    assignments: Vec<String>,
    /// Bumped by every assignment; older timers are stale.
    epoch: u64,
    /// The source running (`None`: the local config).
    active: Option<Value>,
    assigned: Option<Value>,
    last_known_good: Option<Value>,
    /// The source on trial, drain or fallback (set when the timer is scheduled).
    next: Option<Value>,
    gone: bool,
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

struct Inner {
    shared: Arc<Shared>,
    options: SimOptions,
    queue: Mutex<Queue>,
    wake: Condvar,
    nodes: Mutex<HashMap<String, SimNode>>,
    reacted: AtomicU64,
    reacted_lock: Mutex<()>,
    reacted_changed: Condvar,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
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

fn condition(status: &str, reason: &str, message: &str) -> Value {
    json!({
        "type": CONDITION_TYPE, "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339(),
    })
}

fn ready(status: bool) -> Value {
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

// ------------------------------------------------------------------------------------------
// The simulator thread
// ------------------------------------------------------------------------------------------

struct Runner {
    inner: Arc<Inner>,
    timers: BinaryHeap<Reverse<Timer>>,
    seq: u64,
}

fn run(inner: Arc<Inner>) {
    let mut runner = Runner {
        inner,
        timers: BinaryHeap::new(),
        seq: 0,
    };
    loop {
        let changes = {
            let mut queue = lock(&runner.inner.queue);
            loop {
                if queue.stop || runner.inner.shared.closed.load(Ordering::SeqCst) {
                    return;
                }
                if !queue.changes.is_empty() {
                    break std::mem::take(&mut queue.changes);
                }
                let now = Instant::now();
                let wait = match runner.timers.peek() {
                    Some(Reverse(timer)) if timer.at <= now => break Vec::new(),
                    Some(Reverse(timer)) => (timer.at - now).min(IDLE_POLL),
                    None => IDLE_POLL,
                };
                queue = runner
                    .inner
                    .wake
                    .wait_timeout(queue, wait)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|poison| poison.into_inner().0);
            }
        };
        runner.apply(changes);
        runner.fire_due();
    }
}

impl Runner {
    fn schedule(&mut self, node: &str, epoch: u64, after: Duration, action: Action) {
        self.seq += 1;
        self.timers.push(Reverse(Timer {
            at: Instant::now() + after,
            seq: self.seq,
            node: node.to_string(),
            epoch,
            action,
        }));
    }

    fn apply(&mut self, changes: Vec<Change>) {
        if changes.is_empty() {
            return;
        }
        let react_after = self.inner.options.react_after;
        let mut due = Vec::new();
        {
            let mut nodes = lock(&self.inner.nodes);
            for change in changes {
                match change {
                    Change::Assigned { node, value } => {
                        let Some(sim) = nodes.get_mut(&node) else {
                            continue;
                        };
                        sim.assignments.push(value);
                        sim.epoch += 1;
                        due.push((node, sim.epoch));
                    }
                    Change::ConfigMap { namespace, name } => {
                        // Nodes assigned the ConfigMap download it again.
                        let state = self.inner.shared.lock();
                        for (node_name, sim) in nodes.iter_mut() {
                            if sim.gone {
                                continue;
                            }
                            let target = Target::object(Resource::Nodes, None, node_name);
                            let Some(node) = state.stored(&target) else {
                                continue;
                            };
                            let assigned = matches!(
                                assignment_of(&source_annotation(node)),
                                Assignment::Remote(r) if r.namespace == namespace && r.name == name
                            );
                            if assigned {
                                sim.epoch += 1;
                                due.push((node_name.clone(), sim.epoch));
                            }
                        }
                    }
                }
            }
        }
        for (node, epoch) in due {
            self.schedule(&node, epoch, react_after, Action::React);
        }
    }

    /// Carries out the due timers, a batch per hold of the state lock.
    fn fire_due(&mut self) {
        loop {
            let now = Instant::now();
            let mut batch = Vec::new();
            while batch.len() < BATCH {
                match self.timers.peek() {
                    Some(Reverse(timer)) if timer.at <= now => {
                        if let Some(Reverse(timer)) = self.timers.pop() {
                            batch.push(timer);
                        }
                    }
                    _ => break,
                }
            }
            if batch.is_empty() {
                return;
            }
            let mut later = Vec::new();
            let mut done = 0;
            {
                let inner = Arc::clone(&self.inner);
                let mut nodes = lock(&inner.nodes);
                let mut state = inner.shared.lock();
                for timer in batch {
                    let Some(sim) = nodes.get_mut(&timer.node) else {
                        continue;
                    };
                    if sim.gone || sim.epoch != timer.epoch {
                        continue;
                    }
                    let ctx = Ctx {
                        state: &mut state,
                        name: &timer.node,
                        options: &inner.options,
                    };
                    let outcome = ctx.act(sim, timer.action);
                    if outcome.reacted {
                        done += 1;
                    }
                    if let Some((after, action)) = outcome.then {
                        later.push((timer.node.clone(), timer.epoch, after, action));
                    }
                }
            }
            self.inner.shared.changed.notify_all();
            for (node, epoch, after, action) in later {
                self.schedule(&node, epoch, after, action);
            }
            if done > 0 {
                self.inner.reacted.fetch_add(done, Ordering::SeqCst);
                let _guard = lock(&self.inner.reacted_lock);
                self.inner.reacted_changed.notify_all();
            }
        }
    }
}

/// What an action led to: whether it counts as a reaction, and the next timer.
struct Outcome {
    reacted: bool,
    then: Option<(Duration, Action)>,
}

impl Outcome {
    fn done() -> Outcome {
        Outcome {
            reacted: true,
            then: None,
        }
    }
}

/// One node acting on the state.
struct Ctx<'a> {
    state: &'a mut State,
    name: &'a str,
    options: &'a SimOptions,
}

fn describe(source: &Option<Value>) -> String {
    match source {
        Some(src) => format!(
            "UID: {}, ResourceVersion: {}",
            src["configMap"]["uid"].as_str().unwrap_or(""),
            src["configMap"]["resourceVersion"].as_str().unwrap_or("")
        ),
        None => "init".to_string(),
    }
}

/// The condition message of a node running its active config.
fn current(sim: &SimNode) -> String {
    format!("using current ({})", describe(&sim.active))
}

impl Ctx<'_> {
    fn node(&self) -> Option<&Value> {
        self.state
            .stored(&Target::object(Resource::Nodes, None, self.name))
    }

    fn patch(&mut self, status: bool, kind: PatchKind, patch: Value) {
        let mut target = Target::object(Resource::Nodes, None, self.name);
        if status {
            target.subresource = Some("status".to_string());
        }
        let bytes = patch.to_string().into_bytes();
        // A node deleted meanwhile is no error worth reporting.
        let _ = self.state.patch(&target, kind, &bytes, &Opts::default());
    }

    /// Writes the status annotation (and `spec.unschedulable`, if given), then the
    /// conditions; the condition's transition time moves only with status or reason.
    fn report(
        &mut self,
        sim: &SimNode,
        error: Option<&str>,
        condition_fields: (&str, &str, String),
        unschedulable: Option<bool>,
        ready_status: Option<bool>,
    ) {
        let config = json!({
            "active": sim.active,
            "assigned": sim.assigned,
            "lastKnownGood": sim.last_known_good,
            "error": error,
        });
        let mut meta_patch =
            json!({"metadata": {"annotations": {STATUS_ANNOTATION: config.to_string()}}});
        if let Some(cordon) = unschedulable {
            meta_patch["spec"] =
                json!({"unschedulable": if cordon { json!(true) } else { Value::Null }});
        }
        self.patch(false, PatchKind::Merge, meta_patch);
        let (status, reason, message) = condition_fields;
        let mut fresh = condition(status, reason, &message);
        if let Some(existing) = self.existing_condition(CONDITION_TYPE) {
            if existing["status"] == status && existing["reason"] == reason {
                fresh["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
        }
        let mut conditions = vec![fresh];
        if let Some(ready_now) = ready_status {
            let shown = self
                .existing_condition("Ready")
                .is_some_and(|c| c["status"] == if ready_now { "True" } else { "False" });
            if !shown {
                conditions.push(ready(ready_now));
            }
        }
        self.patch(
            true,
            PatchKind::Strategic,
            json!({"status": {"conditions": conditions}}),
        );
    }

    /// The running config is good: `True` / `passing all checks` / `using current (...)`.
    fn report_current(&mut self, sim: &SimNode, unschedulable: Option<bool>, ready: Option<bool>) {
        let fields = ("True", "passing all checks", current(sim));
        self.report(sim, None, fields, unschedulable, ready);
    }

    fn existing_condition(&self, kind: &str) -> Option<Value> {
        self.node()?["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind)
            .cloned()
    }

    fn act(mut self, sim: &mut SimNode, action: Action) -> Outcome {
        if self.node().is_none() {
            sim.gone = true;
            return Outcome {
                reacted: false,
                then: None,
            };
        }
        match action {
            Action::React => self.react(sim),
            Action::Fallback => {
                sim.active = sim.last_known_good.clone();
                let message = format!("using last-known-good ({})", describe(&sim.active));
                self.report(
                    sim,
                    Some(KNOWN_BAD),
                    ("False", KNOWN_BAD, message),
                    None,
                    Some(true),
                );
                Outcome::done()
            }
            Action::TrialEnd => {
                sim.last_known_good = sim.next.take();
                self.report_current(sim, None, None);
                Outcome::done()
            }
            Action::DrainDone => {
                let source = sim.next.take();
                self.apply_good(sim, source, Some(false), true)
            }
        }
    }

    fn react(&mut self, sim: &mut SimNode) -> Outcome {
        let value = self.node().map(source_annotation).unwrap_or_default();
        let assignment = assignment_of(&value);
        let script = sim.script.for_assignment(&assignment);
        match (&assignment, &script) {
            (_, Script::Ignores { .. }) => {
                return Outcome {
                    reacted: false,
                    then: None,
                }
            }
            (_, Script::DeletedOnAssignment { .. }) => {
                let target = Target::object(Resource::Nodes, None, self.name);
                let _ = self.state.delete(&target, None, &Opts::default());
                sim.gone = true;
                return Outcome::done();
            }
            _ => {}
        }
        let source = match assignment {
            Assignment::Local => {
                sim.active = None;
                sim.assigned = None;
                sim.last_known_good = None;
                self.report_current(sim, None, Some(true));
                return Outcome::done();
            }
            Assignment::Invalid(why) => {
                self.report(sim, Some(&why), ("False", &why, current(sim)), None, None);
                return Outcome::done();
            }
            Assignment::Remote(source) => source,
        };
        let target = Target::object(Resource::ConfigMaps, Some(&source.namespace), &source.name);
        let Some(config_map) = self.state.stored(&target) else {
            let cause = format!("configmaps \"{}\" not found", source.name);
            let reason = format!("failed to sync, desired config unclear, cause: {cause}");
            self.report(
                sim,
                Some(&cause),
                ("Unknown", &reason, current(sim)),
                None,
                None,
            );
            return Outcome::done();
        };
        let src = json!({"configMap": {
            "namespace": source.namespace,
            "name": source.name,
            "uid": config_map["metadata"]["uid"],
            "resourceVersion": config_map["metadata"]["resourceVersion"],
            "kubeletConfigKey": source.key,
        }});
        match script {
            Script::RollsBack { after, .. } => {
                sim.active = Some(src.clone());
                sim.assigned = Some(src);
                self.report_current(sim, None, Some(true));
                let after = after.unwrap_or(self.options.rollback_after);
                Outcome {
                    reacted: true,
                    then: Some((after, Action::Fallback)),
                }
            }
            Script::Drains { drain, .. } => {
                sim.assigned = Some(src.clone());
                sim.next = Some(src);
                let message = format!(
                    "{}; draining the node for a disruptive config change",
                    current(sim)
                );
                self.report(sim, None, ("False", "Draining", message), Some(true), None);
                Outcome {
                    reacted: true,
                    then: Some((drain, Action::DrainDone)),
                }
            }
            Script::NeverReady { .. } => self.apply_good(sim, Some(src), None, false),
            _ => self.apply_good(sim, Some(src), None, true),
        }
    }

    /// The config runs: reported active (and last-known-good, unless on trial).
    fn apply_good(
        &mut self,
        sim: &mut SimNode,
        source: Option<Value>,
        unschedulable: Option<bool>,
        ready_now: bool,
    ) -> Outcome {
        sim.active = source.clone();
        sim.assigned = source.clone();
        let on_trial = !self.options.trial.is_zero();
        if on_trial {
            sim.next = source;
        } else {
            sim.last_known_good = source;
        }
        self.report_current(sim, unschedulable, Some(ready_now));
        Outcome {
            reacted: true,
            then: on_trial.then_some((self.options.trial, Action::TrialEnd)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_parse_like_the_node() {
        assert_eq!(assignment_of(""), Assignment::Local);
        assert_eq!(assignment_of("  "), Assignment::Local);
        assert_eq!(
            assignment_of("kubelet-config/cfg-b"),
            Assignment::Remote(ConfigRef {
                namespace: "kubelet-config".into(),
                name: "cfg-b".into(),
                key: "kubelet".into()
            })
        );
        assert!(matches!(assignment_of("nonsense"), Assignment::Invalid(_)));
        let script = Script::RollsBack {
            on: Some("kubelet-config/cfg-b".into()),
            after: None,
        };
        assert_eq!(
            script.for_assignment(&assignment_of("kubelet-config/cfg-b:kubelet")),
            script
        );
        assert_eq!(
            script.for_assignment(&assignment_of("kubelet-config/cfg-a")),
            Script::Healthy
        );
    }
}
