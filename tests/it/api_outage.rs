//! Quiet, bounded retries against a dead API server (issue 29, item 3), end to end: the real
//! `kubelet-pivot` binary and the stand-in kubelet as processes, the strict test API server
//! (`testkit`) in this process, down for a minute.
//!
//! Measured here, and printed (`--nocapture`): the log lines the supervisor writes during that
//! minute (at most 60 required: a line per failed try for the first minute, about ten with a
//! backoff of 0.5 s doubling to 10 s), and the time from the server's return to the Node
//! showing the assigned config (at most the cap of 10 s plus 15 s). The kubelet runs
//! throughout, untouched. The minute itself is a bounded sleep by design (the outage); every
//! other wait polls with a deadline.
//!
//! Build the stand-in first: `cargo build --examples && cargo test --test it api_outage::`.

use crate::support;

use std::time::{Duration, Instant};

use support::api_node::{condition_of, ApiNode, CONDITION, NODE};
use support::{kubelet_config, wait_until, Proc};

/// How long the API server is away.
const OUTAGE: Duration = Duration::from_secs(60);
/// The bound on the supervisor's log lines during [`OUTAGE`].
const MAX_LINES: usize = 60;
/// The longest wait between two tries while the server does not answer (src/cluster/retry).
const CAP: Duration = Duration::from_secs(10);
/// The bound: in sync at most the cap plus this after the server is back.
const SYNC_SLACK: Duration = Duration::from_secs(15);
/// Deadline for anything the product should do promptly.
const DEADLINE: Duration = Duration::from_secs(8);

support::api_node::node_type! {
    /// [`ApiNode`] with the supervisor and the looks of these tests.
    Node
}

impl Node {
    fn new() -> Node {
        Node(ApiNode::new())
    }

    /// Creates an immutable ConfigMap `name` with `eventBurst: burst`; returns its uid.
    fn configmap(&self, name: &str, burst: u32) -> String {
        self.0
            .configmap(name, kubelet_config(&format!("eventBurst: {burst}\n")))
    }

    fn bootstrap(&self) -> Proc {
        self.scene
            .spawn(self.scene.pivot(&self.node_args(&["bootstrap"]), &[], &[]))
    }

    /// The single running kubelet.
    fn kubelet(&self, deadline: Duration) -> i32 {
        wait_until(deadline, "a single running kubelet", || {
            match self.scene.running_kubelets().as_slice() {
                [pid] => Some(*pid),
                _ => None,
            }
        })
    }

    /// Whether the Node reports the config `uid` (KubeletConfigOK True naming it).
    fn reports(&self, uid: &str) -> bool {
        self.server
            .try_node(NODE)
            .and_then(|node| condition_of(&node, CONDITION))
            .is_some_and(|c| {
                c["status"] == "True" && c["message"].as_str().unwrap_or("").contains(uid)
            })
    }

    /// The bytes the supervisor has written so far.
    fn output_len(&self) -> usize {
        self.scene.output().len()
    }

    /// Sleeps through the outage, checking every second that `kubelet` runs and is the only
    /// kubelet; returns the supervisor's lines written during it.
    fn sit_out_the_outage(&self, kubelet: i32) -> Vec<String> {
        let from = self.output_len();
        let end = Instant::now() + OUTAGE;
        while Instant::now() < end {
            std::thread::sleep(Duration::from_secs(1).min(end - Instant::now()));
            assert_eq!(
                self.scene.running_kubelets(),
                vec![kubelet],
                "the kubelet was touched during the outage\n{}",
                self.scene.output()
            );
        }
        let out = self.scene.output();
        out[from..].lines().map(str::to_owned).collect()
    }
}

fn event_burst(n: u32) -> String {
    format!("\"eventBurst\":{n}")
}

/// The lines of a quiet outage: a few per-try lines, none of kube-client's own.
fn check_quiet(what: &str, lines: &[String]) {
    eprintln!(
        "{what}: {} log lines in {OUTAGE:?} (at most {MAX_LINES}):\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert!(
        lines.len() <= MAX_LINES,
        "{what}: {} lines in {OUTAGE:?}:\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("kube_client::client::builder") || l.contains("failed with error")),
        "{what}: kube-client's per-request lines are not filtered:\n{}",
        lines.join("\n")
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("the watch of this node") && l.contains("failed (try ")),
        "{what}: no line says the watch fails:\n{}",
        lines.join("\n")
    );
}

/// A cold cluster: the API server is down (every connection closed without an answer) when
/// the node starts and for a minute after. The kubelet starts at once from the init config
/// and runs throughout; the supervisor logs at most 60 lines; when the server is back, the
/// node follows its assignment and reports it within the cap plus 15 s.
#[test]
fn cold_start_with_the_api_server_down_for_a_minute_is_quiet_and_syncs_within_the_cap() {
    let n = Node::new();
    let uid = n.configmap("cfg-a", 42);
    n.assign("cfg-a");
    n.server.begin_outage();
    n.server.clear_requests();
    let _p = n.bootstrap();
    let started = Instant::now();
    let kubelet = n.kubelet(DEADLINE);
    eprintln!("cold start: kubelet running after {:?}", started.elapsed());
    let lines = n.sit_out_the_outage(kubelet);
    let tries = n.server.requests().iter().filter(|r| r.outage).count();
    eprintln!("cold start: {tries} requests reached the server during the outage");
    assert!(tries <= MAX_LINES, "{tries} tries in {OUTAGE:?}");
    check_quiet("cold start", &lines);

    n.server.end_outage();
    let back = Instant::now();
    let synced = wait_until(CAP + SYNC_SLACK, "the Node to report cfg-a", || {
        n.reports(&uid).then(|| back.elapsed())
    });
    eprintln!("cold start: the Node reports the assigned config {synced:?} after the server came back (at most {:?})", CAP + SYNC_SLACK);
    let running = n.kubelet(DEADLINE);
    assert_ne!(running, kubelet);
    assert!(
        n.scene.config_of(running).contains(&event_burst(42)),
        "the kubelet does not run the assigned config"
    );
    assert!(
        n.scene.output().contains("API server back after"),
        "{}",
        n.scene.output()
    );
    n.scene.assert_no_overlap();
}

/// The API server stops (connections refused) while the node runs its assignment, for a
/// minute: the kubelet is left alone, the supervisor logs at most 60 lines, and a change
/// assigned right after the server is back is applied and reported within the cap plus 15 s.
#[test]
fn api_server_stopped_for_a_minute_after_start_is_quiet_and_resumes_within_the_cap() {
    let n = Node::new();
    let uid_a = n.configmap("cfg-a", 42);
    let uid_b = n.configmap("cfg-b", 43);
    let _p = n.bootstrap();
    let first = n.kubelet(DEADLINE);
    n.assign("cfg-a");
    wait_until(DEADLINE, "the Node to report cfg-a", || {
        n.reports(&uid_a).then_some(())
    });
    let kubelet = n.kubelet(DEADLINE);
    assert_ne!(kubelet, first);
    wait_until(DEADLINE, "an open watch on the node", || {
        (n.server.open_watches("/api/v1/nodes") > 0).then_some(())
    });
    n.server.stop();
    let lines = n.sit_out_the_outage(kubelet);
    check_quiet("stopped after start", &lines);

    n.server.restart_on_same_port();
    let back = Instant::now();
    n.assign("cfg-b");
    let synced = wait_until(CAP + SYNC_SLACK, "the Node to report cfg-b", || {
        n.reports(&uid_b).then(|| back.elapsed())
    });
    eprintln!("stopped after start: a change assigned when the server came back was reported {synced:?} later (at most {:?})", CAP + SYNC_SLACK);
    let running = n.kubelet(DEADLINE);
    assert!(n.scene.config_of(running).contains(&event_burst(43)));
    n.scene.assert_no_overlap();
}

/// After the first minute of the same failure, one summary line a minute, and one line when
/// the server is back. Slow (2.5 minutes): `cargo test --test it api_outage:: -- --ignored`.
#[test]
#[ignore]
fn a_long_outage_is_summed_up_once_a_minute() {
    let n = Node::new();
    let _p = n.bootstrap();
    let kubelet = n.kubelet(DEADLINE);
    wait_until(DEADLINE, "an open watch on the node", || {
        (n.server.open_watches("/api/v1/nodes") > 0).then_some(())
    });
    n.server.stop();
    let first = n.sit_out_the_outage(kubelet);
    let second = n.sit_out_the_outage(kubelet);
    let third = n.sit_out_the_outage(kubelet);
    eprintln!(
        "a long outage: {} lines in the first minute, {} in the second, {} in the third",
        first.len(),
        second.len(),
        third.len()
    );
    for (minute, lines) in [(1, &second), (2, &third)] {
        let summaries: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("the watch of this node"))
            .collect();
        assert_eq!(summaries.len(), 1, "{}", lines.join("\n"));
        assert!(
            summaries[0].contains(&format!("API server unreachable for {minute}m (")),
            "{}",
            summaries[0]
        );
        assert!(summaries[0].contains("tries), last error: "));
    }
    n.server.restart_on_same_port();
    wait_until(
        CAP + SYNC_SLACK,
        "the line saying the server is back",
        || {
            n.scene
                .output()
                .lines()
                .any(|l| {
                    l.contains("the watch of this node") && l.contains("API server back after 3m")
                })
                .then_some(())
        },
    );
}
