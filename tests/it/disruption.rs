//! Disruptive kubelet config changes end to end: the real `kubelet-pivot` binary, the stand-in
//! kubelet (with its CPU/memory manager checkpoints under a temp `--root-dir` and its healthz
//! server on a free port) and the strict test API server, which authenticates the supervisor
//! with the *node's* credentials (node authorizer + NodeRestriction: no PDB or DaemonSet reads,
//! no taint changes, evictions only of the node's own pods).
//!
//! Every wait is on an observable fact (a kubelet `start` line, the Node, the server's request
//! log, the store); the few bounded sleeps check that something does NOT happen and say so.

use crate::support;

use crate::support::scrape;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use kp_node::cluster::drain::{MAX_IN_FLIGHT, THROTTLE_PAUSE};
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use support::api_node::{ApiNode, NODE};
use support::lock_state::status_json;
use support::{wait_until, Proc};
use testkit::RequestRecord;

const APP_NS: &str = "default";
const OVERRIDE_ANNOTATION: &str = "kubelet-pivot.io/disruption-actions";
const ROLL_LABEL: &str = "kubelet-pivot.io/roll-required";
const DEADLINE: Duration = Duration::from_secs(15);
/// Window of a "does NOT happen" check (a bounded sleep by design).
const QUIET_WINDOW: Duration = Duration::from_millis(1500);
/// What the eviction subresource answers (500) for a pod that several PDBs select.
const SEVERAL_PDBS: &str =
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

support::api_node::node_type! {
    /// One node: [`ApiNode`] (scene, API server with the Node, node credentials, kubelet root dir,
    /// healthz port) with the supervisor and the looks of these tests.
    Node
}

impl Node {
    fn new() -> Node {
        Node(ApiNode::new())
    }

    /// The bootstrap supervisor with node credentials, its kubelet serving healthz on our port.
    fn supervisor_with(&self, extra: &[&str], env: &[(&str, &str)]) -> Proc {
        let root = self.root_str();
        let mut args = self.node_args(&["bootstrap"]);
        args.extend_from_slice(&["--kubelet-root-dir", root, "--drain-retry", "1h"]);
        args.extend_from_slice(extra);
        // A config that contains the crash mark crashes its kubelet 50 ms after start.
        let mut all_env = vec![
            ("STANDIN_HEALTHZ", "1"),
            ("STANDIN_CRASH_ON_CONFIG", "crashme.example"),
        ];
        all_env.extend_from_slice(env);
        self.scene
            .spawn(self.scene.pivot(&args, &["--root-dir", root], &all_env))
    }

    fn supervisor(&self, extra: &[&str]) -> Proc {
        self.supervisor_with(extra, &[])
    }

    /// The node's local config (`--init-config`): [`ApiNode::config`]`(extra)` in a file; its path.
    fn init_config(&self, extra: &str) -> String {
        let path = self.scene.path().join("init.yaml");
        std::fs::write(&path, self.config(extra)).expect("write the init config");
        path.to_str().expect("utf-8").to_string()
    }

    /// ConfigMap `name` with [`ApiNode::config`]`(extra)`; returns its uid.
    fn configmap(&self, name: &str, extra: &str) -> String {
        self.0.configmap(name, self.config(extra))
    }

    /// Waits for one running kubelet, not `old`, whose config contains `needle`.
    fn wait_kubelet_with(&self, needle: &str, old: Option<i32>) -> i32 {
        wait_until(
            DEADLINE,
            &format!("a kubelet running with {needle}"),
            || {
                let (pid, content) = self.running()?;
                (Some(pid) != old && content.contains(needle)).then_some(pid)
            },
        )
    }

    fn wait_condition(&self, what: &str, accept: impl Fn(&Value) -> bool) -> Value {
        wait_until(DEADLINE, what, || self.condition().filter(|c| accept(c)))
    }

    fn wait_reason(&self, reason: &str) -> Value {
        self.wait_condition(&format!("condition reason {reason}"), |c| {
            c["reason"] == reason
        })
    }

    fn wait_true(&self, needle: &str) -> Value {
        self.wait_condition(&format!("condition True with {needle}"), |c| {
            c["status"] == "True" && c["message"].as_str().unwrap_or("").contains(needle)
        })
    }

    fn unschedulable(&self) -> bool {
        self.server.node(NODE)["spec"]["unschedulable"] == json!(true)
    }

    fn requests(&self, pred: impl Fn(&RequestRecord) -> bool) -> Vec<RequestRecord> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| pred(r))
            .collect()
    }

    fn evictions(&self) -> Vec<RequestRecord> {
        self.requests(|r| r.method == "POST" && r.path.ends_with("/eviction"))
    }

    /// PATCHes of the Node that touch spec.unschedulable.
    fn cordon_patches(&self) -> Vec<RequestRecord> {
        self.requests(|r| {
            r.method == "PATCH"
                && r.path.ends_with(&format!("/nodes/{NODE}"))
                && r.body.contains("unschedulable")
        })
    }

    fn forbidden(&self) -> Vec<RequestRecord> {
        self.requests(|r| r.status == 403)
    }

    fn status(&self) -> Value {
        status_json(&self.scene)
    }

    fn status_text(&self) -> String {
        let out = Command::new(support::pivot_bin())
            .arg("status")
            .env("KUBELET_PIVOT_ENV_FILE", "")
            .arg("--lock-file")
            .arg(self.scene.lock())
            .arg("--dynamic-config-dir")
            .arg(self.scene.config_dir())
            .output()
            .expect("run status");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn record(&self) -> Option<Value> {
        let text =
            std::fs::read_to_string(self.scene.config_dir().join("v1/disruption.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// A pod of a ReplicaSet bound to the node, labelled `app=web`.
    fn web_pod(&self, name: &str) {
        self.server.create_pod(
            APP_NS,
            name,
            NODE,
            json!({"app": "web"}),
            Some("ReplicaSet"),
            json!({}),
        );
    }

    /// POSTs `body` to `path` as the server's admin; returns the HTTP status and body.
    fn post(&self, path: &str, body: &Value) -> (u16, String) {
        let body = body.to_string();
        let raw = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.server.token(),
            body.len()
        );
        let addr = SocketAddr::from(([127, 0, 0, 1], self.server.port()));
        let (code, _, text) = scrape::request(addr, &raw).expect("POST to the test API server");
        (code, text)
    }

    /// A (Pending) pod bound to the node with these ownerReferences, which
    /// [`testkit::ApiServer::create_pod`] cannot express.
    fn pod_owned_by(&self, name: &str, owners: Value) {
        let (code, text) = self.post(
            &format!("/api/v1/namespaces/{APP_NS}/pods"),
            &json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": APP_NS, "ownerReferences": owners},
                "spec": {"nodeName": NODE,
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
            }),
        );
        assert_eq!(code, 201, "create pod {name}: {text}");
    }

    /// The eviction requests for pod `name`, by answer.
    fn evictions_of(&self, name: &str) -> Vec<u16> {
        self.evictions()
            .iter()
            .filter(|r| r.path.ends_with(&format!("/pods/{name}/eviction")))
            .map(|r| r.status)
            .collect()
    }

    fn pods_left(&self) -> Vec<String> {
        self.server
            .pods_on(NODE)
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect()
    }

    fn moved_state_files(&self) -> Vec<String> {
        let dir = self.scene.config_dir().join("state-files");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Asserts for [`QUIET_WINDOW`] that `pid` stays the only running kubelet.
    fn assert_untouched(&self, pid: i32, why: &str) {
        // A bounded sleep on purpose: this checks that a restart does NOT happen.
        let until = Instant::now() + QUIET_WINDOW;
        while Instant::now() < until {
            assert_eq!(self.scene.running_kubelets(), vec![pid], "{why}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A running supervisor, its kubelet on config `cfg-a` (`extra`), settled: the first
    /// start runs the local config until the assignment is read, and the change to `cfg-a` is
    /// applied (drained for, on an empty node, if its class says so). The request log is
    /// cleared afterwards.
    fn running_on_a(&self, extra: &str, flags: &[&str]) -> (Proc, i32) {
        let uid = self.configmap("cfg-a", extra);
        self.assign("cfg-a");
        let init = self.init_config(extra);
        let mut all = vec!["--init-config", init.as_str()];
        all.extend_from_slice(flags);
        let p = self.supervisor(&all);
        let pid = self.settle_on(&uid);
        (p, pid)
    }

    /// Waits until the kubelet runs config `uid`, the condition is True, the node is not
    /// cordoned by us and no disruption record is left; clears the request log.
    fn settle_on(&self, uid: &str) -> i32 {
        self.wait_true(uid);
        wait_until(DEADLINE, "no disruption pending", || {
            self.record().is_none().then_some(())
        });
        let pid = wait_until(DEADLINE, "one running kubelet", || {
            self.running().map(|r| r.0)
        });
        self.server.clear_requests();
        pid
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.scene.output());
            return;
        }
        // Every request of every drain and status report is allowed to the node's credentials
        // (Node authorizer, NodeRestriction and the RBAC of the top-level manifests/*.yaml).
        let refused: Vec<String> = self
            .forbidden()
            .iter()
            .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
            .collect();
        assert!(
            refused.is_empty(),
            "the server refused the supervisor with the node's credentials: {refused:#?}"
        );
    }
}

#[test]
fn in_place_change_restarts_without_a_drain() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("eventBurst: 10\n", &[]);
    n.web_pod("web-1");
    n.configmap("cfg-b", "eventBurst: 20\n");
    n.assign("cfg-b");
    n.wait_kubelet_with("\"eventBurst\":20", Some(first));
    n.wait_true("using current");
    assert!(
        n.evictions().is_empty(),
        "an in-place change evicts nothing"
    );
    assert!(
        n.cordon_patches().is_empty(),
        "an in-place change cordons nothing"
    );
    assert_eq!(n.pods_left(), vec!["web-1"]);
    assert!(n.forbidden().is_empty(), "{:?}", n.forbidden());
}

#[test]
fn allocatable_change_drains_restarts_gates_and_uncordons_with_node_credentials() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("kubeReserved:\n  memory: 1Gi\n", &[]);
    n.web_pod("web-1");
    n.web_pod("web-2");
    n.server.create_pod(
        APP_NS,
        "agent-x",
        NODE,
        json!({"app": "agent"}),
        Some("DaemonSet"),
        json!({}),
    );
    n.server.create_pod(
        "kube-system",
        "etcd-node-a",
        NODE,
        json!({}),
        None,
        json!({"kubernetes.io/config.mirror": "abc"}),
    );
    n.server.create_pod(
        APP_NS,
        "elsewhere",
        "node-b",
        json!({"app": "web"}),
        Some("ReplicaSet"),
        json!({}),
    );
    n.configmap("cfg-b", "kubeReserved:\n  memory: 2Gi\n");
    n.assign("cfg-b");
    let second = n.wait_kubelet_with("\"memory\":\"2Gi\"", Some(first));
    // The restart came after the drain: both web pods were evicted first.
    let evicted: Vec<String> = n.evictions().iter().map(|r| r.path.clone()).collect();
    assert_eq!(evicted.len(), 2, "{evicted:?}");
    assert!(
        evicted.iter().all(|p| p.contains("/pods/web-")),
        "{evicted:?}"
    );
    let mut left = n.pods_left();
    left.sort();
    assert_eq!(
        left,
        vec!["agent-x", "etcd-node-a"],
        "DaemonSet and mirror pods stay"
    );
    // Gate: the new kubelet's healthz, then uncordon; condition back to True.
    n.wait_true("using current");
    wait_until(DEADLINE, "the node uncordoned", || {
        (!n.unschedulable()).then_some(())
    });
    let patches = n.cordon_patches();
    assert_eq!(patches.len(), 2, "one cordon and one uncordon: {patches:?}");
    assert!(patches[0].body.contains("true"), "{}", patches[0].body);
    assert!(
        !patches.iter().any(|p| p.body.contains("taints")),
        "never touches taints"
    );
    assert!(
        n.forbidden().is_empty(),
        "the node's credentials suffice: {:?}",
        n.forbidden()
    );
    assert!(
        n.record().is_none(),
        "the record is cleared: {:?}",
        n.record()
    );
    assert_eq!(n.scene.running_kubelets(), vec![second]);
    let reasons: Vec<String> = n
        .server
        .events()
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect();
    for step in [
        "Draining",
        "DrainStarted",
        "Cordoned",
        "Drained",
        "Uncordoned",
    ] {
        assert!(
            reasons.iter().any(|r| r == step),
            "no {step} event in {reasons:?}"
        );
    }
}

#[test]
fn a_blocking_pdb_holds_the_drain_until_it_allows() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("maxPods: 100\n", &[]);
    n.web_pod("web-1");
    n.server.create_pdb(APP_NS, "web", json!({"app": "web"}), 0);
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    let cond = n.wait_reason("Draining");
    assert_eq!(cond["status"], "False");
    assert!(
        cond["message"].as_str().unwrap_or("").contains("maxPods"),
        "{cond}"
    );
    wait_until(DEADLINE, "a 429 from the PDB, then a retry", || {
        let refused = n.evictions().iter().filter(|r| r.status == 429).count();
        (refused >= 2).then_some(())
    });
    assert!(n.unschedulable(), "cordoned while draining");
    n.assert_untouched(first, "no restart while the PDB blocks the drain");
    let status = wait_until(DEADLINE, "a BLOCKED line in status", || {
        let s = n.status_text();
        s.contains("BLOCKED").then_some(s)
    });
    assert!(
        status.contains("PENDING CHANGE   allocatable change, action drain, evicting"),
        "{status}"
    );
    assert!(
        status.contains(
            "1 pod(s) to leave the node (0 evicted in this attempt; 1 blocked by a PodDisruptionBudget)"
        ),
        "{status}"
    );
    // The budget's reason, with the server's words (message and cause).
    assert!(
        status.contains("BLOCKED   1 pod(s) blocked by a PodDisruptionBudget, asked again with backoff; last: default/web-1, HTTP 429: Cannot evict pod as it would violate the pod's disruption budget. (The disruption budget web needs"),
        "{status}"
    );
    assert!(!status.contains("server errors"), "{status}");
    n.server.set_pdb_disruptions_allowed(APP_NS, "web", 1);
    n.wait_kubelet_with("\"maxPods\":90", Some(first));
    n.wait_true("using current");
    wait_until(DEADLINE, "uncordoned", || {
        (!n.unschedulable()).then_some(())
    });
    assert!(n.pods_left().is_empty());
}

#[test]
fn several_pdbs_fail_the_round_at_once_with_the_servers_message() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("maxPods: 100\n", &[]);
    n.web_pod("web-1");
    // Each budget alone would allow the eviction; together the server refuses it.
    n.server
        .create_pdb(APP_NS, "web-a", json!({"app": "web"}), 1);
    n.server
        .create_pdb(APP_NS, "web-b", json!({"app": "web"}), 1);
    n.configmap("cfg-b", "maxPods: 90\n");
    let assigned = Instant::now();
    n.assign("cfg-b");
    let cond = n.wait_reason("DrainFailed");
    let took = assigned.elapsed();
    assert_eq!(cond["status"], "False");
    let message = cond["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&format!("cannot evict pod default/web-1: {SEVERAL_PDBS}")),
        "{cond}"
    );
    // At once: one request, not a retry until --drain-timeout (10m).
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(n.evictions_of("web-1"), vec![500]);
    assert!(!n.unschedulable(), "uncordoned when the round failed");
    n.assert_untouched(first, "the old kubelet keeps running after a failed drain");
    assert_eq!(n.evictions_of("web-1"), vec![500], "not asked again");
    assert_eq!(n.pods_left(), vec!["web-1"]);
    let record = n.record().expect("a disruption record");
    assert_eq!(record["phase"], "backing-off", "{record}");
    assert_eq!(record["failure"], "multiple-budgets", "{record}");
    let status = n.status_text();
    assert!(
        status.contains(&format!(
            "LAST TRY  failed (multiple PodDisruptionBudgets): cannot evict pod default/web-1: {SEVERAL_PDBS}"
        )),
        "{status}"
    );
    assert!(!status.contains("BLOCKED"), "{status}");
    let reasons: Vec<String> = n
        .server
        .events()
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect();
    assert!(reasons.iter().any(|r| r == "DrainFailed"), "{reasons:?}");
    assert!(!reasons.iter().any(|r| r == "DrainTimeout"), "{reasons:?}");
}

#[test]
fn server_errors_are_asked_again_with_backoff_and_never_called_a_pdb() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("maxPods: 100\n", &[]);
    n.web_pod("web-1");
    let eviction = format!("/api/v1/namespaces/{APP_NS}/pods/web-1/eviction");
    // API priority and fairness (429 without a budget's cause), then 503s.
    n.server.fail_next_matching(1, 429, "POST", &eviction);
    n.server.fail_next_matching(3, 503, "POST", &eviction);
    n.configmap("cfg-b", "maxPods: 90\n");
    let assigned = Instant::now();
    n.assign("cfg-b");
    let status = wait_until(DEADLINE, "a BLOCKED line for server errors", || {
        let s = n.status_text();
        s.contains("HTTP 503").then_some(s)
    });
    assert!(
        status.contains("BLOCKED   1 pod(s) refused by API server errors, asked again with backoff; last: default/web-1, HTTP 503: the server is currently unable to handle the request"),
        "{status}"
    );
    assert!(
        status.contains("(0 evicted in this attempt; 1 refused by API server errors)"),
        "{status}"
    );
    assert!(!status.contains("PodDisruptionBudget"), "{status}");
    n.wait_kubelet_with("\"maxPods\":90", Some(first));
    // 0.5 + 1 + 2 + 4 s of backoff before the fifth request.
    assert!(
        assigned.elapsed() >= Duration::from_secs(7),
        "{:?}",
        assigned.elapsed()
    );
    assert_eq!(n.evictions_of("web-1"), vec![429, 503, 503, 503, 201]);
    n.wait_true("using current");
    assert!(n.pods_left().is_empty());
    let reasons: Vec<String> = n
        .server
        .events()
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect();
    assert!(
        !reasons
            .iter()
            .any(|r| r == "DrainFailed" || r == "DrainTimeout"),
        "{reasons:?}"
    );
}

/// Evictions go out several at once, never more than `MAX_IN_FLIGHT`: the server holds each
/// for 200 ms and counts those in flight; 40 of them one after another would take 8 s.
#[test]
fn evictions_go_out_several_at_once_within_the_bound() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("maxPods: 100\n", &[]);
    for i in 0..40 {
        n.web_pod(&format!("web-{i}"));
    }
    n.server.set_eviction_hold(Duration::from_millis(200));
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    n.wait_kubelet_with("\"maxPods\":90", Some(first));
    let evictions = n.evictions();
    assert_eq!(evictions.len(), 40, "{evictions:?}");
    assert!(evictions.iter().all(|r| r.status == 201), "{evictions:?}");
    assert_eq!(n.server.max_evictions_in_flight(), MAX_IN_FLIGHT);
    let start = evictions
        .iter()
        .map(|r| r.received)
        .min()
        .expect("evictions");
    let end = evictions
        .iter()
        .map(|r| r.answered)
        .max()
        .expect("evictions");
    assert!(
        end - start < Duration::from_secs(4),
        "40 evictions of 200 ms took {:?}",
        end - start
    );
    assert!(n.pods_left().is_empty());
}

/// A 429 without a PodDisruptionBudget's cause (API priority and fairness, text/plain, as the
/// real filter answers) halves the evictions in flight and pauses them for a second; the
/// answers of the requests sent since grow the window by one per window's worth.
#[test]
fn a_throttling_429_halves_the_evictions_in_flight_and_pauses_them() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("maxPods: 100\n", &[]);
    for i in 0..48 {
        n.web_pod(&format!("web-{i}"));
    }
    n.server.set_eviction_hold(Duration::from_millis(300));
    n.server.throttle_next_evictions(1);
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    n.wait_kubelet_with("\"maxPods\":90", Some(first));
    let evictions = n.evictions();
    let throttled: Vec<&RequestRecord> = evictions.iter().filter(|r| r.status == 429).collect();
    assert_eq!(throttled.len(), 1, "{evictions:?}");
    let at = throttled[0].answered;
    assert_eq!(
        evictions.iter().filter(|r| r.status == 201).count(),
        48,
        "{evictions:?}"
    );
    // The first burst: the whole window (the throttled one is answered at once).
    let before = evictions
        .iter()
        .filter(|r| r.received <= at + Duration::from_millis(100))
        .map(|r| r.evictions_in_flight)
        .max()
        .unwrap_or(0);
    assert!(before >= MAX_IN_FLIGHT - 1, "{before}: {evictions:?}");
    // Nothing during the pause (1 s, the filter's Retry-After; some slack for the answer to
    // reach the drain).
    let during: Vec<&RequestRecord> = evictions
        .iter()
        .filter(|r| {
            r.received > at + Duration::from_millis(200)
                && r.received < at + THROTTLE_PAUSE - Duration::from_millis(50)
        })
        .collect();
    assert!(during.is_empty(), "sent during the pause: {during:?}");
    // Then half the window, growing by one for each window's worth of answers: 8, 9, 10 and
    // 11 for the 33 pods left.
    let after = evictions
        .iter()
        .filter(|r| r.received >= at + THROTTLE_PAUSE - Duration::from_millis(50))
        .map(|r| r.evictions_in_flight)
        .max()
        .unwrap_or(0);
    assert!(
        (2..=MAX_IN_FLIGHT / 2 + 3).contains(&after),
        "{after} in flight after the 429: {evictions:?}"
    );
    let first_after: Vec<usize> = {
        let mut later: Vec<&RequestRecord> = evictions
            .iter()
            .filter(|r| r.received >= at + THROTTLE_PAUSE - Duration::from_millis(50))
            .collect();
        later.sort_by_key(|r| r.received);
        later
            .iter()
            .take(8)
            .map(|r| r.evictions_in_flight)
            .collect()
    };
    assert!(
        first_after.iter().all(|&k| k <= MAX_IN_FLIGHT / 2),
        "{first_after:?}"
    );
    assert!(n.pods_left().is_empty());
}

#[test]
fn daemonset_pods_are_known_by_their_controller_reference() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("maxPods: 100\n", &[]);
    let owner = |kind: &str, controller: Option<bool>| {
        let mut o = json!({"apiVersion": "apps/v1", "kind": kind, "name": "x",
                           "uid": format!("uid-{kind}-{controller:?}")});
        if let Some(c) = controller {
            o["controller"] = json!(c);
        }
        o
    };
    // The DaemonSet's own pod: skipped, as kubectl drain --ignore-daemonsets does.
    n.server.create_pod(
        APP_NS,
        "agent-x",
        NODE,
        json!({"app": "agent"}),
        Some("DaemonSet"),
        json!({}),
    );
    // A finished one of its pods: evicted, as kubectl drain does.
    n.server.create_pod(
        APP_NS,
        "agent-done",
        NODE,
        json!({"app": "agent"}),
        Some("DaemonSet"),
        json!({}),
    );
    n.server.set_pod_phase(APP_NS, "agent-done", "Succeeded");
    // A DaemonSet reference that is not the controller: evicted.
    n.pod_owned_by("not-controller", json!([owner("DaemonSet", Some(false))]));
    n.pod_owned_by("no-controller-field", json!([owner("DaemonSet", None)]));
    n.pod_owned_by(
        "replicaset-controlled",
        json!([owner("DaemonSet", None), owner("ReplicaSet", Some(true))]),
    );
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    n.wait_kubelet_with("\"maxPods\":90", Some(first));
    let mut evicted: Vec<String> = n
        .evictions()
        .iter()
        .filter(|r| r.status == 201)
        .filter_map(|r| r.path.rsplit('/').nth(1).map(str::to_string))
        .collect();
    evicted.sort();
    assert_eq!(
        evicted,
        vec![
            "agent-done",
            "no-controller-field",
            "not-controller",
            "replicaset-controlled"
        ]
    );
    assert!(n.evictions_of("agent-x").is_empty());
    assert_eq!(n.pods_left(), vec!["agent-x"]);
    assert!(n.forbidden().is_empty(), "{:?}", n.forbidden());
}

#[test]
fn pods_are_listed_in_pages_then_followed_by_a_watch_not_relisted() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("maxPods: 100\n", &[]);
    // 1,050 DaemonSet pods (listed, left alone) and one web pod a PDB protects: the drain
    // lists 1,051 pods in pages of 500 and keeps running.
    for i in 0..1050 {
        n.server.create_pod(
            APP_NS,
            &format!("agent-{i:04}"),
            NODE,
            json!({"app": "agent"}),
            Some("DaemonSet"),
            json!({}),
        );
    }
    n.web_pod("web-1");
    n.server.create_pdb(APP_NS, "web", json!({"app": "web"}), 0);
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    wait_until(DEADLINE, "the PDB's 429, asked again", || {
        (n.evictions_of("web-1").len() >= 2).then_some(())
    });
    let pod_lists = || n.server.list_requests("/api/v1/pods");
    let pages = pod_lists();
    let selector = format!("spec.nodeName={NODE}");
    assert!(pages.len() >= 3, "{pages:?}");
    for (i, page) in pages.iter().enumerate() {
        assert_eq!(
            page.query_param("limit").as_deref(),
            Some("500"),
            "{page:?}"
        );
        assert_eq!(page.query_param("fieldSelector"), Some(selector.clone()));
        assert_eq!(page.query_param("continue").is_some(), i > 0, "{page:?}");
        assert!(page.items.unwrap_or(0) <= 500, "{page:?}");
    }
    let listed: usize = pages.iter().filter_map(|p| p.items).sum();
    assert_eq!(listed, 1051);
    let watches = || n.requests(|r| r.watch && r.path == "/api/v1/pods");
    let watch = wait_until(DEADLINE, "a watch of the node's pods", || {
        watches().first().cloned()
    });
    assert_eq!(watch.query_param("fieldSelector"), Some(selector));
    let rv = watch.query_param("resourceVersion").unwrap_or_default();
    assert!(rv.parse::<u64>().is_ok_and(|v| v > 0), "{watch:?}");
    // While the PDB blocks the drain, for 3 s: no list again (the first drain listed every
    // 0.5 s, six times in that window).
    for _ in 0..2 {
        n.assert_untouched(first, "no restart while the PDB blocks the drain");
    }
    assert_eq!(
        pod_lists().len(),
        pages.len(),
        "re-listed: {:?}",
        pod_lists()
    );
    // A pod bound to the node meanwhile is seen on the watch and evicted.
    n.server.create_pod(
        APP_NS,
        "late-1",
        NODE,
        json!({"app": "late"}),
        Some("ReplicaSet"),
        json!({}),
    );
    wait_until(DEADLINE, "the late pod evicted", || {
        (n.evictions_of("late-1") == vec![201]).then_some(())
    });
    n.server.set_pdb_disruptions_allowed(APP_NS, "web", 1);
    n.wait_kubelet_with("\"maxPods\":90", Some(first));
    assert_eq!(
        pod_lists().len(),
        pages.len(),
        "re-listed: {:?}",
        pod_lists()
    );
    assert_eq!(watches().len(), 1, "{:?}", watches());
    assert_eq!(n.pods_left().len(), 1050, "the DaemonSet pods stay");
    assert!(n.forbidden().is_empty(), "{:?}", n.forbidden());
}

#[test]
fn an_expired_pod_watch_is_followed_by_one_relist() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("maxPods: 100\n", &[]);
    n.web_pod("web-1");
    n.server.create_pdb(APP_NS, "web", json!({"app": "web"}), 0);
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    let pod_lists = || n.server.list_requests("/api/v1/pods");
    let watches = || n.requests(|r| r.watch && r.path == "/api/v1/pods");
    wait_until(DEADLINE, "the pods listed and watched", || {
        (pod_lists().len() == 1 && !watches().is_empty()).then_some(())
    });
    // The watch cache forgets its history: the watch's resourceVersion is too old (410).
    n.server.restart_losing_history();
    wait_until(DEADLINE, "a re-list after the 410", || {
        (pod_lists().len() == 2).then_some(())
    });
    wait_until(DEADLINE, "the PDB's 429 after the re-list", || {
        (n.evictions_of("web-1")
            .iter()
            .filter(|c| **c == 429)
            .count()
            >= 3)
            .then_some(())
    });
    n.assert_untouched(first, "no restart while the PDB blocks the drain");
    assert_eq!(pod_lists().len(), 2, "one re-list only: {:?}", pod_lists());
    assert!(
        n.scene.output().contains(
            "the watch of the pods bound to this node expired (410 Gone); re-listing them"
        ),
        "{}",
        n.scene.output()
    );
    n.server.set_pdb_disruptions_allowed(APP_NS, "web", 1);
    n.wait_kubelet_with("\"maxPods\":90", Some(first));
    assert!(n.pods_left().is_empty());
}

#[test]
fn drain_timeout_uncordons_leaves_everything_running_and_backs_off() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("maxPods: 100\n", &["--drain-timeout", "2s"]);
    n.web_pod("web-1");
    n.server.create_pdb(APP_NS, "web", json!({"app": "web"}), 0);
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    let cond = n.wait_reason("DrainTimeout");
    assert_eq!(cond["status"], "False");
    assert!(!n.unschedulable(), "uncordoned after the timeout");
    assert_eq!(n.pods_left(), vec!["web-1"], "nothing forced");
    n.assert_untouched(first, "the old kubelet keeps running after a drain timeout");
    let record = n.record().expect("a disruption record");
    assert_eq!(record["phase"], "backing-off", "{record}");
    assert_eq!(record["cordonedByUs"], false, "{record}");
    assert!(record["retryAt"].is_string(), "{record}");
    let status = n.status_text();
    assert!(
        status.contains("backing-off") && status.contains("RETRY AT"),
        "{status}"
    );
}

#[test]
fn a_node_cordoned_by_someone_else_stays_cordoned() {
    let n = Node::new();
    n.server
        .patch_node(NODE, json!({"spec": {"unschedulable": true}}), false)
        .expect("cordon by hand");
    let (_p, first) = n.running_on_a("maxPods: 100\n", &[]);
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    n.wait_kubelet_with("\"maxPods\":90", Some(first));
    n.wait_true("using current");
    assert!(
        n.unschedulable(),
        "an operator's cordon is not ours to lift"
    );
    assert!(n.cordon_patches().is_empty(), "{:?}", n.cordon_patches());
}

#[test]
fn kill_9_mid_drain_resumes_and_never_strands_a_cordoned_node() {
    let n = Node::new();
    let (mut p, first) = n.running_on_a("maxPods: 100\n", &[]);
    n.web_pod("web-1");
    n.server.create_pdb(APP_NS, "web", json!({"app": "web"}), 0);
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    n.wait_reason("Draining");
    wait_until(DEADLINE, "the record says we cordoned", || {
        n.record().filter(|r| r["cordonedByUs"] == true).map(|_| ())
    });
    p.signal(Signal::SIGKILL);
    p.wait_exit(DEADLINE);
    wait_until(DEADLINE, "the old kubelet gone with its supervisor", || {
        n.scene.running_kubelets().is_empty().then_some(())
    });
    assert!(n.unschedulable(), "still cordoned while nobody runs");
    // A new supervisor starts the config that ran (the drain is not done) and resumes.
    let _q = n.supervisor(&[]);
    let resumed = n.wait_kubelet_with("\"maxPods\":100", Some(first));
    wait_until(DEADLINE, "the resumed drain asks again", || {
        (n.evictions().iter().filter(|r| r.status == 429).count() >= 3).then_some(())
    });
    n.server.set_pdb_disruptions_allowed(APP_NS, "web", 1);
    n.wait_kubelet_with("\"maxPods\":90", Some(resumed));
    wait_until(DEADLINE, "uncordoned after the resumed drain", || {
        (!n.unschedulable()).then_some(())
    });
    n.wait_true("using current");
    assert!(n.record().is_none());
}

#[test]
fn state_bound_change_and_its_rollback_both_start_cleanly() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("configTrialDuration: 1s\n", &[]);
    let state = n.root_dir.join("cpu_manager_state");
    assert!(std::fs::read_to_string(&state)
        .unwrap_or_default()
        .contains("\"none\""));
    // Wait until cfg-a is last-known-good (trial 1 s).
    wait_until(DEADLINE, "cfg-a last-known-good", || {
        let text =
            std::fs::read_to_string(n.scene.config_dir().join("meta/last-known-good")).ok()?;
        text.contains("cfg-a").then_some(())
    });
    // static policy: state-bound. Its kubelet starts (state moved aside), then crash-loops
    // (the crash mark), so it is rolled back to cfg-a across the same state-bound change.
    n.configmap(
        "cfg-b",
        "cpuManagerPolicy: static\nkubeReserved:\n  cpu: 500m\nstaticPodURL: http://crashme.example/\ncrashLoopThreshold: 1\nconfigTrialDuration: 5m\n",
    );
    n.assign("cfg-b");
    let _ = n.wait_condition("rolled back", |c| {
        c["status"] == "False"
            && c["message"]
                .as_str()
                .unwrap_or("")
                .contains("last-known-good")
    });
    let back = n.wait_kubelet_with("\"cpuManagerPolicy\":\"none\"", Some(first));
    n.assert_untouched(back, "last-known-good runs steadily after the rollback");
    // The static kubelet started (past its checkpoint check) and crashed on the mark only.
    let marked = n
        .scene
        .events("crash")
        .into_iter()
        .filter(|l| l.field("reason") == Some("config"))
        .count();
    assert!(
        marked >= 1,
        "the static config's kubelet started and ran into the crash mark"
    );
    let refused = n
        .scene
        .events("crash")
        .into_iter()
        .filter(|l| l.field("reason") == Some("cpu-manager-state"))
        .count();
    assert_eq!(
        refused, 0,
        "the kubelet never refused a checkpoint of another policy"
    );
    let moved = n.moved_state_files();
    assert!(moved.len() >= 2, "moved forward and back: {moved:?}");
    assert!(
        moved.iter().all(|m| m.starts_with("cpu_manager_state.")),
        "{moved:?}"
    );
    assert!(std::fs::read_to_string(&state)
        .unwrap_or_default()
        .contains("\"none\""));
}

#[test]
fn node_replacing_change_is_held_labelled_and_released_when_reverted() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("cgroupDriver: systemd\n", &[]);
    n.configmap("cfg-b", "cgroupDriver: cgroupfs\n");
    n.assign("cfg-b");
    let cond = n.wait_reason("RollRequired");
    assert_eq!(cond["status"], "False");
    assert!(
        cond["message"]
            .as_str()
            .unwrap_or("")
            .contains("cgroupDriver"),
        "{cond}"
    );
    wait_until(DEADLINE, "the roll-required label", || {
        (n.server.node(NODE)["metadata"]["labels"][ROLL_LABEL] == "true").then_some(())
    });
    n.assert_untouched(first, "a held change restarts nothing");
    assert!(n
        .scene
        .config_of(first)
        .contains("\"cgroupDriver\":\"systemd\""));
    let status = n.status_text();
    assert!(
        status.contains("node-replacing change, action hold, held"),
        "{status}"
    );
    assert!(status.contains("cgroupDriver"), "{status}");
    n.assign("cfg-a");
    n.wait_true("using current");
    wait_until(DEADLINE, "the label removed", || {
        n.server.node(NODE)["metadata"]["labels"][ROLL_LABEL]
            .is_null()
            .then_some(())
    });
    assert_eq!(
        n.scene.running_kubelets(),
        vec![first],
        "reverting restarts nothing"
    );
    assert!(n.record().is_none());
}

#[test]
fn node_annotation_and_flag_override_the_actions() {
    let n = Node::new();
    n.server
        .set_node_annotation(NODE, OVERRIDE_ANNOTATION, Some("allocatable=restart"));
    let (_p, first) = n.running_on_a(
        "maxPods: 100\ncgroupDriver: systemd\n",
        &["--disruption-action", "node-replacing=restart"],
    );
    n.web_pod("web-1");
    n.configmap("cfg-b", "maxPods: 90\ncgroupDriver: systemd\n");
    n.assign("cfg-b");
    let second = n.wait_kubelet_with("\"maxPods\":90", Some(first));
    assert!(
        n.evictions().is_empty(),
        "the node's annotation says restart"
    );
    assert!(n.cordon_patches().is_empty());
    n.configmap("cfg-c", "maxPods: 90\ncgroupDriver: cgroupfs\n");
    n.assign("cfg-c");
    n.wait_kubelet_with("\"cgroupDriver\":\"cgroupfs\"", Some(second));
    n.wait_true("using current");
    assert_eq!(n.pods_left(), vec!["web-1"]);
}

#[test]
fn moving_reservation_between_kube_and_system_reserved_restarts_nothing() {
    let n = Node::new();
    let (_p, first) = n.running_on_a("kubeReserved:\n  memory: 1Gi\n", &[]);
    let uid_b = n.configmap(
        "cfg-b",
        "kubeReserved:\n  memory: 512Mi\nsystemReserved:\n  memory: 512Mi\n",
    );
    n.assign("cfg-b");
    n.wait_true(&uid_b);
    n.assert_untouched(first, "an equal sum is no change");
    assert!(n.evictions().is_empty() && n.cordon_patches().is_empty());
}

/// What an older build leaves behind: its hash algorithm and no recorded document.
fn as_an_older_build_left_it(n: &Node) {
    let path = n.scene.config_dir().join("v1/effective.json");
    let mut record: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("effective record"))
            .expect("json");
    let config = std::fs::read(n.scene.config_dir().join("effective/kubelet-config.json"))
        .expect("effective file");
    let parsed = kp_kubelet_config::KubeletConfig::parse(&config).expect("parses");
    record["hashAlgorithm"] = json!("sha256-canonical-json-v1");
    record["hash"] = json!(parsed.hash_with(kp_kubelet_config::HashAlgorithm::V1));
    let map = record.as_object_mut().expect("object");
    map.remove("classHashes");
    map.remove("inputSha256");
    std::fs::write(&path, serde_json::to_vec_pretty(&record).expect("json")).expect("write");
    let _ = std::fs::remove_file(n.scene.config_dir().join("v1/applied-input.json"));
}

#[test]
fn upgrading_to_a_new_hash_algorithm_restarts_nothing_and_still_sees_a_real_change() {
    let n = Node::new();
    let (mut p, _) = n.running_on_a("maxPods: 100\n", &[]);
    n.web_pod("web-1");
    p.signal(Signal::SIGTERM);
    p.wait_exit(DEADLINE);
    as_an_older_build_left_it(&n);
    let starts_before = n.scene.starts().len();
    // The upgraded supervisor: same assignment, one kubelet start, no drain, nothing moved.
    let mut q = n.supervisor(&[]);
    let pid = n.wait_kubelet_with("\"maxPods\":100", None);
    n.wait_true("using current");
    n.assert_untouched(pid, "no restart after an upgrade with nothing changed");
    assert_eq!(n.scene.starts().len(), starts_before + 1);
    assert!(n.evictions().is_empty() && n.cordon_patches().is_empty());
    assert!(n.record().is_none());
    let record = n.status()["config"]["active"].clone();
    assert_ne!(
        record["hashAlgorithm"], "sha256-canonical-json-v1",
        "{record}"
    );
    // The same upgrade while the assignment changed for real (allocatable): detected, drained.
    q.signal(Signal::SIGTERM);
    q.wait_exit(DEADLINE);
    as_an_older_build_left_it(&n);
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    let _r = n.supervisor(&[]);
    let old = n.wait_kubelet_with("\"maxPods\":100", Some(pid));
    n.wait_kubelet_with("\"maxPods\":90", Some(old));
    assert_eq!(n.evictions().len(), 1, "the real change was drained for");
    assert!(n.pods_left().is_empty());
}

#[test]
fn self_hosted_handoff_with_no_assignment_change_hands_over_the_same_config() {
    let n = Node::new();
    let (_boot, first) = n.running_on_a("maxPods: 100\nkubeReserved:\n  memory: 1Gi\n", &[]);
    n.web_pod("web-1");
    let before = n.scene.config_of(first);
    let kubeconfig = n.kubeconfig.to_str().expect("utf-8");
    let root = n.root_dir.to_str().expect("utf-8");
    let init = n
        .scene
        .path()
        .join("init.yaml")
        .to_str()
        .expect("utf-8")
        .to_string();
    let _hosted = n.scene.spawn(n.scene.pivot(
        &[
            "self-hosted",
            "--generation",
            "1",
            "--kubeconfig",
            kubeconfig,
            "--node-name",
            NODE,
            "--kubelet-root-dir",
            root,
            "--init-config",
            &init,
        ],
        &["--root-dir", root],
        &[("STANDIN_HEALTHZ", "1")],
    ));
    let second = wait_until(DEADLINE, "the self-hosted kubelet", || {
        let (pid, _) = n.running()?;
        (pid != first).then_some(pid)
    });
    n.assert_untouched(second, "the handoff restarts nothing more");
    assert_eq!(
        n.scene.config_of(second),
        before,
        "the same effective config"
    );
    assert!(n.evictions().is_empty() && n.cordon_patches().is_empty());
    assert!(n.record().is_none());
    assert!(n.moved_state_files().is_empty());
}

#[test]
fn metrics_count_drains_evictions_and_held_changes() {
    let n = Node::new();
    let sock = scrape::free_addr();
    let addr = sock.to_string();
    let (_p, first) = n.running_on_a(
        "maxPods: 100\ncgroupDriver: systemd\n",
        &["--metrics-address", &addr],
    );
    n.web_pod("web-1");
    n.configmap("cfg-b", "maxPods: 90\ncgroupDriver: systemd\n");
    n.assign("cfg-b");
    let second = n.wait_kubelet_with("\"maxPods\":90", Some(first));
    wait_until(DEADLINE, "uncordoned", || {
        (!n.unschedulable()).then_some(())
    });
    n.configmap("cfg-c", "maxPods: 90\ncgroupDriver: cgroupfs\n");
    n.assign("cfg-c");
    n.wait_reason("RollRequired");
    let x = wait_until(DEADLINE, "metrics", || {
        let x = scrape::scrape(sock).ok()?;
        (x.get("kubelet_pivot_change_held") == Some(1.0)).then_some(x)
    });
    assert_eq!(
        x.value("kubelet_pivot_drains_total{result=\"completed\"}"),
        1.0
    );
    assert_eq!(
        x.value("kubelet_pivot_evictions_total{result=\"evicted\"}"),
        1.0
    );
    assert_eq!(x.value("kubelet_pivot_held_changes_total"), 1.0);
    assert_eq!(n.scene.running_kubelets(), vec![second]);
}

/// The watch shows the evicted pod gone before the eviction's answer comes (the server holds
/// the answer 300 ms): the drain still counts that eviction, in the metric and the Event.
#[test]
fn an_eviction_answered_after_its_pod_left_is_counted() {
    let n = Node::new();
    let sock = scrape::free_addr();
    let addr = sock.to_string();
    let (_p, first) = n.running_on_a("maxPods: 100\n", &["--metrics-address", &addr]);
    n.web_pod("web-1");
    n.server
        .set_eviction_answer_delay(Duration::from_millis(300));
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    n.wait_kubelet_with("\"maxPods\":90", Some(first));
    let drained = wait_until(DEADLINE, "the Drained Event", || {
        n.server
            .events()
            .into_iter()
            .find(|e| e["reason"] == "Drained")
    });
    let message = drained["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains("1 pod(s) evicted in attempt 1"),
        "{message}"
    );
    let x = scrape::scrape(sock).expect("scrape");
    assert_eq!(
        x.value("kubelet_pivot_evictions_total{result=\"evicted\"}"),
        1.0
    );
}

#[test]
fn readme_embeds_the_class_table_from_the_code() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference.md"))
        .expect("docs/reference.md");
    let table = kp_kubelet_config::disruption::markdown_table();
    assert!(
        readme.contains(table.trim()),
        "docs/reference.md must embed the class table of crates/kubelet-config/src/disruption (regenerate it):\n{table}"
    );
}
