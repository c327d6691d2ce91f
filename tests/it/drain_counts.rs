//! What a drain tells the cluster, with tens of thousands of pods bound to the node (issue 32,
//! items 7 and 9): the count of pods left is exact once the listing is complete and says
//! "at least N ..., listing not finished" before; and the KEP-5683 Node lifecycle conditions
//! (`DrainInProgress`, `Drained`) follow the drain and are cleared after it.
//!
//! The real `kubelet-pivot` binary with the node's credentials against the strict test API
//! server, the stand-in kubelet serving healthz. Every wait is on an observable fact (the
//! Node, the server's request log, the store).

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::api_node::{condition_of, ApiNode, NODE};
use support::{wait_until, Proc};

const APP_NS: &str = "default";
const DEADLINE: Duration = Duration::from_secs(20);
/// Pods bound to the node in the count test's first attempt (two list pages): all
/// Terminating, never finishing.
const FIRST: usize = 1_000;
/// Pods bound to the node from the count test's second attempt on.
const PODS: usize = 20_000;
/// `--drain-timeout` of the count test: longer than the list of [`FIRST`] pods takes at full
/// speed, shorter than the list of [`PODS`] with [`SLOW_RESPONSES`].
const DRAIN_TIMEOUT: &str = "4s";
/// How long the count test waits for an attempt cut short while listing: the second, or the
/// third (1 + 4 + 2 + 4 s) should the second have listed [`FIRST`] pods before the server
/// was slowed down.
const LATER_ATTEMPT: Duration = Duration::from_secs(40);
/// Every response of the server delayed by this from the second attempt on: the 40 list
/// pages of [`PODS`] take at least 40 × this, more than [`DRAIN_TIMEOUT`].
const SLOW_RESPONSES: Duration = Duration::from_millis(250);

support::api_node::node_type! {
    /// One node with the supervisor and the looks of these tests.
    Node
}

impl Node {
    /// The bootstrap supervisor with node credentials on config `cfg-a` (`extra`), settled.
    fn running_on_a(&self, extra: &str, flags: &[&str]) -> Proc {
        let uid = self.configmap("cfg-a", self.config(extra));
        self.assign("cfg-a");
        let init = self.scene.path().join("init.yaml");
        std::fs::write(&init, self.config(extra)).expect("write the init config");
        let init = init.to_str().expect("utf-8").to_string();
        let root = self.root_str();
        let mut args = self.node_args(&["bootstrap"]);
        args.extend_from_slice(&["--kubelet-root-dir", root, "--init-config", &init]);
        args.extend_from_slice(flags);
        let p = self.scene.spawn(self.scene.pivot(
            &args,
            &["--root-dir", root],
            &[("STANDIN_HEALTHZ", "1")],
        ));
        self.wait_condition("the first config running", |c| {
            c["status"] == "True" && c["message"].as_str().unwrap_or("").contains(&uid)
        });
        wait_until(DEADLINE, "no disruption pending", || {
            self.record().is_none().then_some(())
        });
        self.server.clear_requests();
        p
    }

    fn wait_condition(&self, what: &str, accept: impl Fn(&Value) -> bool) -> Value {
        wait_until(DEADLINE, what, || self.condition().filter(|c| accept(c)))
    }

    /// The Node's condition `kind`, if any.
    fn lifecycle(&self, kind: &str) -> Option<Value> {
        condition_of(&self.server.node(NODE), kind)
    }

    fn record(&self) -> Option<Value> {
        let text =
            std::fs::read_to_string(self.scene.config_dir().join("v1/disruption.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The reasons of the lifecycle patches of the Node's status, in order.
    fn lifecycle_patches(&self) -> Vec<String> {
        self.server
            .requests()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/nodes/{NODE}/status")))
            .filter_map(|r| {
                let body: Value = serde_json::from_str(&r.body).ok()?;
                body["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "DrainInProgress")
                    .and_then(|c| c["reason"].as_str().map(str::to_string))
            })
            .collect()
    }

    /// `status` as the operator runs it.
    fn status_text(&self) -> String {
        let out = std::process::Command::new(support::pivot_bin())
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
}

/// The statuses of `DrainInProgress` and `Drained` and their (common) reason.
fn lifecycle_of(n: &Node) -> (String, String, String) {
    let get = |kind: &str| n.lifecycle(kind).unwrap_or(Value::Null);
    let (a, b) = (get("DrainInProgress"), get("Drained"));
    let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
    (text(&a["status"]), text(&b["status"]), text(&a["reason"]))
}

/// Pods bound to the node, all Terminating and never finishing (a finalizer nobody removes),
/// so that every drain attempt times out. The first attempt lists 1,000 of them to the end:
/// its timeout gives the exact count. Then 19,000 more come and the server slows down: a
/// later attempt's `--drain-timeout` comes while 20,000 pods are still listed, and the
/// condition, its Event, the record, `status` and the lifecycle conditions say "at least N
/// ..., listing not finished" with N below 20,000.
#[test]
fn a_drain_timeout_gives_the_exact_count_after_the_listing_and_at_least_during_it() {
    let started = Instant::now();
    let n = Node(ApiNode::new());
    let _p = n.running_on_a(
        "maxPods: 100\n",
        &["--drain-timeout", DRAIN_TIMEOUT, "--drain-retry", "1s"],
    );
    n.server
        .create_stuck_terminating_pods(APP_NS, "web", NODE, FIRST);
    n.configmap("cfg-b", n.config("maxPods: 90\n"));
    n.assign("cfg-b");
    let t = Instant::now();
    let exact = format!("{FIRST} pod(s) to leave the node (0 evicted in this attempt)");
    let first = n.wait_condition("the first DrainTimeout", |c| c["reason"] == "DrainTimeout");
    let first_attempt = t.elapsed();
    let message = first["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&exact) && !message.contains("at least"),
        "a complete listing gives the exact count: {message}"
    );
    let record = n.record().expect("a disruption record");
    assert!(
        record["lastError"]
            .as_str()
            .is_some_and(|e| e.starts_with(&exact)),
        "{record}"
    );
    let status = n.status_text();
    assert!(
        status.contains(&format!("LAST TRY  failed (timeout): {exact}")),
        "{status}"
    );
    let failed = n.lifecycle("DrainInProgress").expect("DrainInProgress");
    assert_eq!(failed["status"], "False", "{failed}");
    assert_eq!(failed["reason"], "KubeletPivotDrainFailed", "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("attempt 1 of the drain") && m.contains(&exact)),
        "{failed}"
    );

    // 19,000 more, and every answer slowed down: whenever the next attempt starts (it waits
    // for the server while the pods are made), its list cannot end before its timeout.
    n.server.set_delay(SLOW_RESPONSES);
    let t = Instant::now();
    n.server
        .create_stuck_terminating_pods(APP_NS, "more", NODE, PODS - FIRST);
    let created = t.elapsed();
    assert_eq!(n.server.pod_count_on(NODE), PODS);
    let t = Instant::now();
    let cut = support::poll_until(
        LATER_ATTEMPT,
        Duration::from_millis(20),
        "a DrainTimeout while listing",
        || {
            n.condition().filter(|c| {
                c["reason"] == "DrainTimeout"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("listing not finished"))
            })
        },
    );
    let later_attempt = t.elapsed();
    let message = cut["message"].as_str().unwrap_or_default().to_string();
    let shown = at_least(&message)
        .unwrap_or_else(|| panic!("no 'at least N pod(s)' in the condition: {message}"));
    assert!(
        message.contains(&format!(
            "at least {shown} pod(s) to leave the node, listing not finished (0 evicted in this attempt)"
        )) && shown < PODS,
        "a count of a listing cut short says so: {message}"
    );
    assert!(
        message.len() <= 4 * kp_contract::node_config::MAX_MESSAGE_BYTES,
        "{} bytes",
        message.len()
    );
    let gave_up = n.lifecycle("DrainInProgress").expect("DrainInProgress");
    assert!(
        gave_up["message"]
            .as_str()
            .is_some_and(|m| m.contains("listing not finished")),
        "{gave_up}"
    );
    let status = n.status_text();
    assert!(status.contains("listing not finished"), "{status}");
    // The condition's Event follows its patch (each answer 250 ms late).
    let timeouts = || -> Vec<String> {
        n.server
            .events()
            .iter()
            .filter(|e| e["reason"] == "DrainTimeout")
            .filter_map(|e| e["message"].as_str().map(str::to_string))
            .collect()
    };
    wait_until(
        DEADLINE,
        "the DrainTimeout Event of the cut listing",
        || {
            timeouts()
                .iter()
                .any(|m| m.contains("listing not finished"))
                .then_some(())
        },
    );
    assert!(
        timeouts().iter().any(|m| m.contains(&exact)),
        "{:#?}",
        timeouts()
    );
    n.server.set_delay(Duration::ZERO);
    assert_eq!(n.server.pod_count_on(NODE), PODS, "nothing forced");
    assert!(
        n.server
            .requests()
            .iter()
            .all(|r| !r.path.ends_with("/eviction")),
        "terminating pods are only waited for"
    );
    eprintln!(
        "drain_counts: first attempt ({FIRST} pods listed to the end) {:.1} s; {} more pods \
         created in {:.1} s; a later attempt (slowed, cut at {shown} of {PODS} listed) {:.1} s; \
         test {:.1} s",
        first_attempt.as_secs_f64(),
        PODS - FIRST,
        created.as_secs_f64(),
        later_attempt.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// N in "at least N pod(s)".
fn at_least(message: &str) -> Option<usize> {
    let rest = &message[message.find("at least ")? + "at least ".len()..];
    rest.split(' ').next()?.parse().ok()
}

/// `DrainInProgress` True while a PodDisruptionBudget holds the drain, `Drained` True once the
/// pods are gone, both False (`KubeletPivotDrainEnded`) once the new kubelet is healthy and the
/// node uncordoned; written with the node's own credentials (the Drop of every test here
/// would see a 403 in `forbidden`).
#[test]
fn the_lifecycle_conditions_follow_the_drain_and_are_cleared_after() {
    let n = Node(ApiNode::new());
    let _p = n.running_on_a("maxPods: 100\n", &[]);
    n.server.create_pod(
        APP_NS,
        "web-1",
        NODE,
        json!({"app": "web"}),
        Some("ReplicaSet"),
        json!({}),
    );
    n.server.create_pdb(APP_NS, "web", json!({"app": "web"}), 0);
    n.configmap("cfg-b", n.config("maxPods: 90\n"));
    n.assign("cfg-b");
    wait_until(DEADLINE, "DrainInProgress True", || {
        let (a, b, reason) = lifecycle_of(&n);
        (a == "True" && b == "False" && reason == "KubeletPivotDrainStarted").then_some(())
    });
    let started = n.lifecycle("DrainInProgress").expect("DrainInProgress");
    assert!(
        started["message"]
            .as_str()
            .is_some_and(|m| m.contains("allocatable change (maxPods)") && m.contains("attempt 1")),
        "{started}"
    );
    assert!(started["lastTransitionTime"].is_string(), "{started}");
    n.server.set_pdb_disruptions_allowed(APP_NS, "web", 1);
    wait_until(DEADLINE, "the lifecycle conditions cleared", || {
        let (a, b, reason) = lifecycle_of(&n);
        (a == "False" && b == "False" && reason == "KubeletPivotDrainEnded").then_some(())
    });
    assert_eq!(
        n.server.node(NODE)["spec"]["unschedulable"],
        Value::Null,
        "uncordoned"
    );
    // The server records a request once it has answered it: wait for the last one's record.
    wait_until(DEADLINE, "the server's record of the Ended patch", || {
        n.lifecycle_patches()
            .last()
            .is_some_and(|r| r == "KubeletPivotDrainEnded")
            .then_some(())
    });
    assert_eq!(
        n.lifecycle_patches(),
        [
            "KubeletPivotDrainStarted",
            "KubeletPivotDrainCompleted",
            "KubeletPivotDrainEnded"
        ],
        "one patch a transition"
    );
    let drained = n.lifecycle("Drained").expect("Drained");
    assert!(
        drained["message"]
            .as_str()
            .is_some_and(|m| m.contains("back in service")),
        "{drained}"
    );
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.scene.output());
            return;
        }
        let refused: Vec<String> = self
            .server
            .requests()
            .iter()
            .filter(|r| r.status == 403)
            .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
            .collect();
        assert!(
            refused.is_empty(),
            "the server refused the supervisor with the node's credentials: {refused:#?}"
        );
    }
}
