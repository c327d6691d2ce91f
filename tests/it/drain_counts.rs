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
/// Pods bound to the node in the count test: all Terminating, never finishing.
const PODS: usize = 20_000;
/// Pods still Terminating in the count test's second attempt (two list pages).
const KEPT: usize = 1_000;
/// `--drain-timeout` of the count test: longer than the list of [`KEPT`] pods takes at full
/// speed, shorter than the list of [`PODS`] with [`SLOW_RESPONSES`].
const DRAIN_TIMEOUT: &str = "4s";
/// `--drain-retry` of the count test: the first wait after an attempt gave up, longer than
/// releasing the pods takes.
const DRAIN_RETRY: &str = "6s";
/// How long the count test waits for an attempt that started after the release to give up:
/// the third attempt, should the second have started during the release (6 + 12 s + 4 s).
const LATER_ATTEMPT: Duration = Duration::from_secs(40);
/// Every response of the server delayed by this in the first attempt: the 40 list pages take
/// at least 40 × this, more than [`DRAIN_TIMEOUT`].
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

/// 20,000 pods bound to the node, all Terminating and never finishing (a finalizer nobody
/// removes), the server slowed down: `--drain-timeout` comes while the pods are still listed,
/// and the condition, its Event, the record, `status` and the lifecycle conditions say "at
/// least N ..., listing not finished" with N below 20,000. Then all but [`KEPT`] pods finish
/// and the server is fast again: the next attempt lists them to the end and its timeout
/// gives the exact count.
#[test]
fn a_drain_timeout_says_at_least_while_listing_and_the_exact_count_after() {
    let started = Instant::now();
    let n = Node(ApiNode::new());
    let _p = n.running_on_a(
        "maxPods: 100\n",
        &[
            "--drain-timeout",
            DRAIN_TIMEOUT,
            "--drain-retry",
            DRAIN_RETRY,
        ],
    );
    let t = Instant::now();
    n.server
        .create_stuck_terminating_pods(APP_NS, "web", NODE, PODS);
    let created = t.elapsed();
    assert_eq!(n.server.pod_count_on(NODE), PODS);
    n.server.set_delay(SLOW_RESPONSES);
    n.configmap("cfg-b", n.config("maxPods: 90\n"));
    n.assign("cfg-b");
    let t = Instant::now();
    let first = n.wait_condition("the first DrainTimeout", |c| c["reason"] == "DrainTimeout");
    let first_attempt = t.elapsed();
    // The next attempt lists KEPT pods, at full speed.
    let t = Instant::now();
    n.server
        .release_stuck_terminating_pods(APP_NS, "web", KEPT..PODS);
    n.server.set_delay(Duration::ZERO);
    let released = t.elapsed();
    let message = first["message"].as_str().unwrap_or_default().to_string();
    let shown = at_least(&message)
        .unwrap_or_else(|| panic!("no 'at least N pod(s)' in the condition: {message}"));
    assert!(
        message
            .contains("pod(s) to leave the node, listing not finished (0 evicted in this attempt)")
            && shown < PODS,
        "a count of a listing cut short says so: {message}"
    );
    let failed = n.lifecycle("DrainInProgress").expect("DrainInProgress");
    assert_eq!(failed["status"], "False", "{failed}");
    assert_eq!(failed["reason"], "KubeletPivotDrainFailed", "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .is_some_and(|m| m.contains("listing not finished")),
        "{failed}"
    );

    // The next attempt that starts after the release (normally the second, `--drain-retry`
    // after the first gave up; the third if the second started while the pods were released).
    let t = Instant::now();
    let before = n
        .record()
        .and_then(|r| r["attempts"].as_u64())
        .expect("the record's attempts");
    let exact = format!("{KEPT} pod(s) to leave the node (0 evicted in this attempt)");
    let gave_up = support::poll_until(
        LATER_ATTEMPT,
        Duration::from_millis(20),
        "an attempt started after the release to give up",
        || {
            let c = n.lifecycle("DrainInProgress")?;
            let m = c["message"].as_str()?;
            let attempt: u64 = m
                .strip_prefix("attempt ")?
                .split(' ')
                .next()?
                .parse()
                .ok()?;
            (c["reason"] == "KubeletPivotDrainFailed" && attempt > before).then(|| m.to_string())
        },
    );
    assert!(gave_up.contains(&exact), "{gave_up}");
    let second = n.wait_condition("a DrainTimeout with the exact count", |c| {
        c["reason"] == "DrainTimeout" && c["message"].as_str().unwrap_or("").contains(&exact)
    });
    let second_attempt = t.elapsed();
    let message = second["message"].as_str().unwrap_or_default();
    assert!(!message.contains("at least"), "{message}");
    assert!(
        message.len() <= 4 * kp_contract::node_config::MAX_MESSAGE_BYTES,
        "{} bytes",
        message.len()
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
    let events: Vec<String> = n
        .server
        .events()
        .iter()
        .filter(|e| e["reason"] == "DrainTimeout")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    assert!(
        events.iter().any(|m| m.contains("listing not finished"))
            && events.iter().any(|m| m.contains(&exact)),
        "{events:#?}"
    );
    assert_eq!(n.server.pod_count_on(NODE), KEPT, "nothing forced");
    assert!(
        n.server
            .requests()
            .iter()
            .all(|r| !r.path.ends_with("/eviction")),
        "terminating pods are only waited for"
    );
    eprintln!(
        "drain_counts: {PODS} pods created in {:.1} s; first attempt (slowed, cut at {shown} \
         listed) {:.1} s; {} released in {:.1} s; second attempt ({KEPT} listed to the end) \
         {:.1} s; test {:.1} s",
        created.as_secs_f64(),
        first_attempt.as_secs_f64(),
        PODS - KEPT,
        released.as_secs_f64(),
        second_attempt.as_secs_f64(),
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
