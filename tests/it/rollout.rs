//! The fleet rollout controller end to end against the strict test API server: the real
//! `kubelet-pivot rollout-controller` binary (leader election through a real Lease), the real
//! CLI (`kubelet-pivot rollout ...`, also run as `kubectl-pivot` and through kubectl's plugin
//! mechanism when kubectl is installed), and simulated nodes (`testkit::NodeSim`) that follow
//! kubelet-pivot's status contract with scripted failures. tests/it/rollout_e2e.rs does the same
//! with real supervisors and stand-in kubelets.
//!
//! Every wait is on an observable fact (the rollout's status, a node's annotations, the
//! server's request log, a controller's log line).

use crate::support;

use crate::support::scrape;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use support::rollout::{self, generated_crd, paused_reason, CrdServer, Timings};
use support::{pivot_bin, wait_until, Proc};
use testkit::rbac::{Grant, Policy, Request, User};
use testkit::{ApiServer, NodeSim, RequestRecord, Script, SimOptions};

const NS: &str = "kubelet-config";
const SOURCE: &str = "kubelet-pivot.io/config-source";
const RECORD: &str = "kubelet-pivot.io/rollout";
const DEADLINE: Duration = Duration::from_secs(30);

/// The test server with the CRD installed, ConfigMaps cfg-a and cfg-b, and a temp dir.
pub(super) struct Cluster {
    pub(super) server: ApiServer,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

/// The CRD as manifests/ ships it.
fn manifest_crd() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/40-rollout-crd.yaml");
    let text = std::fs::read_to_string(&path).expect("read the CRD manifest");
    serde_yaml_ng::from_str(&text).expect("the CRD manifest is YAML")
}

/// The CRD before issue 22 item 2: `batch` nullable, no maximum on integers.
fn loose_crd() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rollout-crd-loose.yaml");
    let text = std::fs::read_to_string(&path).expect("read the loose CRD");
    serde_yaml_ng::from_str(&text).expect("the loose CRD is YAML")
}

impl Cluster {
    pub(super) fn new() -> Cluster {
        Cluster::with_crd(generated_crd().expect("the CRD"))
    }

    fn with_crd(crd: Value) -> Cluster {
        let CrdServer {
            server,
            dir,
            kubeconfig,
        } = CrdServer::with_crd(crd);
        for name in ["cfg-a", "cfg-b", "cfg-c"] {
            let data = BTreeMap::from([(
                "kubelet".to_string(),
                kubelet_payload(&format!("# {name}\n")),
            )]);
            server.create_configmap(NS, name, data, true);
        }
        Cluster {
            server,
            dir,
            kubeconfig,
        }
    }

    pub(super) fn sim(&self, n: usize) -> NodeSim {
        let sim = NodeSim::start(
            &self.server,
            SimOptions {
                react_after: Duration::from_millis(20),
                ..SimOptions::default()
            },
        );
        sim.add_nodes(n, "node-", |_| BTreeMap::new());
        for i in 0..n {
            self.server
                .set_node_annotation(&node(i), SOURCE, Some(&format!("{NS}/cfg-a:kubelet")));
        }
        sim
    }

    /// A controller with short lease timings; its log goes to `DIR/<identity>.log`.
    pub(super) fn controller(&self, identity: &str) -> Proc {
        self.controller_with(
            identity,
            Timings {
                lease_duration: "2s",
                renew_deadline: "1500ms",
                retry_period: "250ms",
                debounce: "50ms",
            },
        )
    }

    /// A controller whose Lease outlives a 10 s outage (30 s, renewed within 20 s).
    fn patient_controller(&self, identity: &str) -> Proc {
        self.controller_with(
            identity,
            Timings {
                lease_duration: "30s",
                renew_deadline: "20s",
                retry_period: "1s",
                debounce: "50ms",
            },
        )
    }

    fn controller_with(&self, identity: &str, timings: Timings) -> Proc {
        self.controller_args(identity, timings, &[])
    }

    fn controller_args(&self, identity: &str, timings: Timings, extra: &[&str]) -> Proc {
        let log = std::fs::File::create(self.log_path(identity)).expect("controller log");
        support::rollout::controller(&self.kubeconfig, identity, &timings, extra, log)
    }

    /// A controller serving /metrics, /healthz and /readyz on a port of its choosing
    /// (`127.0.0.1:0`), and that address, read from its log.
    fn serving_controller(&self, identity: &str) -> (Proc, SocketAddr) {
        let ctl = self.controller_args(
            identity,
            Timings {
                lease_duration: "2s",
                renew_deadline: "1500ms",
                retry_period: "250ms",
                debounce: "50ms",
            },
            &["--metrics-address", "127.0.0.1:0"],
        );
        let addr = wait_until(DEADLINE, &format!("{identity} serves"), || {
            let log = self.log(identity);
            let line = log.lines().find(|l| l.contains("serving /metrics"))?;
            let (_, rest) = line.split_once("address=")?;
            rest.split_whitespace().next()?.parse().ok()
        });
        (ctl, addr)
    }

    /// Successful PATCHes of each node's object, by node.
    fn node_patches_ok(&self) -> BTreeMap<String, usize> {
        self.patches_by_node(|r| r.status < 300)
    }

    /// PATCHes of each node's object that `accept` takes, by node.
    fn patches_by_node(&self, accept: impl Fn(&RequestRecord) -> bool) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for r in self.server.requests() {
            if r.method == "PATCH" && accept(&r) {
                if let Some(name) = r.path.strip_prefix("/api/v1/nodes/") {
                    if !name.contains('/') {
                        *out.entry(name.to_string()).or_default() += 1;
                    }
                }
            }
        }
        out
    }

    fn log_path(&self, identity: &str) -> PathBuf {
        self.dir.path().join(format!("{identity}.log"))
    }

    pub(super) fn log(&self, identity: &str) -> String {
        std::fs::read_to_string(self.log_path(identity)).unwrap_or_default()
    }

    /// `kubelet-pivot rollout ARGS --kubeconfig K`.
    pub(super) fn cli(&self, args: &[&str]) -> Output {
        rollout::cli(&self.kubeconfig, args)
    }

    pub(super) fn cli_ok(&self, args: &[&str]) -> String {
        rollout::cli_ok(&self.kubeconfig, args)
    }

    pub(super) fn start(&self, name: &str, config: &str, extra: &[&str]) {
        let cfg = format!("{NS}/{config}");
        let mut args = vec!["start", name, "--config", &cfg, "--no-pods-gate"];
        // No trial window unless the test asks for one (the default is the config's own
        // configTrialDuration, and these ConfigMaps hold no full KubeletConfiguration).
        if !extra.contains(&"--no-fallback-for") {
            args.extend_from_slice(&["--no-fallback-for", "0s"]);
        }
        args.extend_from_slice(extra);
        self.cli_ok(&args);
    }

    fn status(&self, name: &str) -> Value {
        let out = self.cli_ok(&["status", name, "-o", "json"]);
        serde_json::from_str(&out).expect("status -o json is JSON")
    }

    pub(super) fn wait_phase(&self, name: &str, phase: &str) -> Value {
        wait_until(
            DEADLINE,
            &format!("rollout {name} in phase {phase}"),
            || {
                let out = self.cli(&["status", name, "-o", "json"]);
                let r: Value = serde_json::from_slice(&out.stdout).ok()?;
                (r["status"]["phase"] == phase
                    && r["status"]["observedGeneration"] == r["metadata"]["generation"])
                    .then_some(r)
            },
        )
    }

    pub(super) fn assignment(&self, node: &str) -> Option<String> {
        self.server.node(node)["metadata"]["annotations"][SOURCE]
            .as_str()
            .map(str::to_string)
    }

    /// PATCH requests on each node's object, by node.
    fn node_patches(&self) -> BTreeMap<String, usize> {
        self.patches_by_node(|_| true)
    }
}

/// The canary (the first node of the first zone) falls back 200 ms after it runs cfg-b.
fn canary_falls_back(sim: &NodeSim) {
    sim.script(
        &node(0),
        Script::RollsBack {
            on: Some(format!("{NS}/cfg-b")),
            after: Some(Duration::from_millis(200)),
        },
    );
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(super) fn node(i: usize) -> String {
    format!("node-{i:05}")
}

fn batches(r: &Value) -> Vec<Vec<String>> {
    serde_json::from_value(r["status"]["batches"].clone()).unwrap_or_default()
}

#[test]
fn the_generated_crd_is_the_one_in_manifests() {
    assert_eq!(
        generated_crd().expect("the CRD"),
        manifest_crd(),
        "manifests/40-rollout-crd.yaml is stale: regenerate it with `kubelet-pivot rollout crd`"
    );
}

#[test]
fn a_canary_failure_stops_the_rollout_before_the_first_batch() {
    let c = Cluster::new();
    let sim = c.sim(9);
    // The canary is the first node of the first zone.
    canary_falls_back(&sim);
    let _ctl = c.controller("ctl-a");
    // The canary must run the config 1 s without falling back (its crash loop shows after
    // 200 ms) before the first batch may start.
    c.start(
        "r1",
        "cfg-b",
        &["--canary", "1", "--batch", "4", "--no-fallback-for", "1s"],
    );
    let r = c.wait_phase("r1", "Paused");
    assert_eq!(batches(&r)[0], vec![node(0)]);
    assert_eq!(paused_reason(&r), "True=CanaryFailed", "{r:#}");
    assert_eq!(r["status"]["failures"][0]["node"], node(0));
    assert_eq!(r["status"]["failures"][0]["reason"], "Fallback");
    assert_eq!(r["status"]["currentBatch"], 0);
    for i in 1..9 {
        assert_eq!(
            c.assignment(&node(i)).as_deref(),
            Some("kubelet-config/cfg-a:kubelet"),
            "{} was changed",
            node(i)
        );
    }
    // The plugin's status exits 3: the rollout paused because a node failed.
    let out = c.cli(&["status", "r1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    let shown = text(&out.stdout);
    assert!(shown.contains("Paused: CanaryFailed"), "{shown}");
    assert!(
        shown.contains(&format!("{} [canary] Fallback", node(0))),
        "{shown}"
    );
}

#[test]
fn max_failures_pauses_by_itself_and_resume_goes_on_without_the_failed_nodes() {
    let c = Cluster::new();
    let sim = c.sim(9);
    let _ctl = c.controller("ctl-a");
    // Two nodes of the first batch never report the new config.
    let order_probe = ["node-00001", "node-00002"];
    for n in order_probe {
        sim.script(
            n,
            Script::Ignores {
                on: Some(format!("{NS}/cfg-b")),
            },
        );
    }
    c.start(
        "r1",
        "cfg-b",
        &[
            "--canary",
            "0",
            "--batch",
            "5",
            "--max-failures",
            "1",
            "--config-active-timeout",
            "2s",
            "--max-unavailable",
            "5",
        ],
    );
    let r = c.wait_phase("r1", "Paused");
    assert_eq!(paused_reason(&r), "True=MaxFailuresExceeded", "{r:#}");
    let failed: Vec<&str> = r["status"]["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["node"].as_str().unwrap())
        .collect();
    assert_eq!(failed.len(), 2, "{r:#}");
    for f in r["status"]["failures"].as_array().unwrap() {
        assert_eq!(f["reason"], "ConfigNotActive");
    }
    assert_eq!(c.cli(&["status", "r1"]).status.code(), Some(3));
    // Nothing of the second batch was touched.
    for n in &batches(&r)[1] {
        assert_eq!(
            c.assignment(n).as_deref(),
            Some("kubelet-config/cfg-a:kubelet")
        );
    }
    let out = c.cli_ok(&["resume", "r1"]);
    assert!(out.contains("2 failed nodes are acknowledged"), "{out}");
    // Not "Completed": two targets do not run the config (issue 22 item 4).
    let r = c.wait_phase("r1", "CompletedWithFailures");
    assert_eq!(r["status"]["counts"]["failed"], 2);
    assert_eq!(r["status"]["counts"]["done"], 7);
    assert_eq!(r["status"]["acknowledgedFailures"], 2);
    let complete = r["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Complete")
        .unwrap();
    assert_eq!(complete["status"], "False", "{complete}");
    assert_eq!(complete["reason"], "NodesFailed", "{complete}");
    let message = complete["message"].as_str().unwrap();
    for n in &failed {
        assert!(message.contains(n), "{message}");
    }
    assert_eq!(c.cli(&["status", "r1"]).status.code(), Some(3));
    // The failed nodes were changed once and never again.
    let patches = c.node_patches();
    for n in failed {
        assert_eq!(patches.get(n), Some(&1), "{n}: {patches:?}");
    }
}

#[test]
fn undo_points_each_changed_node_back_at_its_own_previous_config() {
    let c = Cluster::new();
    let _sim = c.sim(6);
    // One node ran its local config, another cfg-c.
    c.server.set_node_annotation(&node(4), SOURCE, None);
    c.server
        .set_node_annotation(&node(5), SOURCE, Some("kubelet-config/cfg-c:kubelet"));
    let _ctl = c.controller("ctl-a");
    c.start(
        "r1",
        "cfg-b",
        &["--canary", "1", "--batch", "50%", "--max-unavailable", "3"],
    );
    c.wait_phase("r1", "Completed");
    for i in 0..6 {
        assert_eq!(
            c.assignment(&node(i)).as_deref(),
            Some("kubelet-config/cfg-b:kubelet")
        );
    }
    let out = c.cli_ok(&["undo", "r1"]);
    assert!(out.contains("undoing"), "{out}");
    let r = c.wait_phase("r1", "Undone");
    for i in 0..4 {
        assert_eq!(
            c.assignment(&node(i)).as_deref(),
            Some("kubelet-config/cfg-a:kubelet")
        );
    }
    assert_eq!(c.assignment(&node(4)), None, "back to the local config");
    assert_eq!(
        c.assignment(&node(5)).as_deref(),
        Some("kubelet-config/cfg-c:kubelet")
    );
    let record: Value = serde_json::from_str(
        c.server.node(&node(5))["metadata"]["annotations"][RECORD]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(record["undone"], true);
    assert_eq!(r["status"]["history"][0]["result"], "Undone");
    let history = c.cli_ok(&["history", "r1"]);
    assert!(history.contains("Undone"), "{history}");
    // Starting again rolls a new revision.
    c.start("r1", "cfg-b", &[]);
    let r = c.wait_phase("r1", "Completed");
    assert_eq!(r["status"]["revision"], 2);
    // The same config once more is no new revision, and the CLI says so.
    let out = c.cli_ok(&["start", "r1", "--config", "kubelet-config/cfg-b"]);
    assert!(
        out.contains("already rolls kubelet-config/cfg-b (revision 2, Completed)"),
        "{out}"
    );
}

#[test]
fn a_controller_killed_mid_batch_resumes_without_touching_done_nodes_again() {
    let c = Cluster::new();
    let _sim = c.sim(8);
    let mut ctl = c.controller("ctl-a");
    // Each node must run the config 2 s without falling back: batches take a while.
    c.start(
        "r1",
        "cfg-b",
        &[
            "--canary",
            "1",
            "--batch",
            "3",
            "--no-fallback-for",
            "2s",
            "--max-unavailable",
            "3",
        ],
    );
    wait_until(
        DEADLINE,
        "the first batch after the canary in progress",
        || {
            let r = c.status("r1");
            (r["status"]["currentBatch"] == 1
                && r["status"]["counts"]["inProgress"].as_u64() > Some(0))
            .then_some(())
        },
    );
    ctl.signal(Signal::SIGKILL);
    ctl.wait_exit(DEADLINE);
    let _ctl2 = c.controller("ctl-b");
    let r = c.wait_phase("r1", "Completed");
    assert_eq!(r["status"]["counts"]["done"], 8);
    let patches = c.node_patches();
    assert_eq!(patches.len(), 8, "{patches:?}");
    for (n, count) in &patches {
        // The simulator's own writes are not requests; only the controller's patch is.
        assert_eq!(*count, 1, "{n} was patched {count} times: {patches:?}");
    }
    assert!(c
        .log("ctl-b")
        .contains("became the rollout controller leader"));
}

#[test]
fn of_two_controllers_exactly_one_acts_and_the_other_takes_over() {
    let c = Cluster::new();
    let _sim = c.sim(6);
    let mut a = c.controller("ctl-a");
    wait_until(DEADLINE, "ctl-a leads", || {
        c.log("ctl-a")
            .contains("became the rollout controller leader")
            .then_some(())
    });
    let mut b = c.controller("ctl-b");
    c.start(
        "r1",
        "cfg-b",
        &["--canary", "1", "--batch", "50%", "--max-unavailable", "3"],
    );
    c.wait_phase("r1", "Completed");
    assert!(c.log("ctl-a").contains("changed the node's assignment"));
    assert!(
        !c.log("ctl-b")
            .contains("became the rollout controller leader"),
        "{}",
        c.log("ctl-b")
    );
    assert!(!c.log("ctl-b").contains("changed the node's assignment"));
    assert!(c.node_patches().values().all(|n| *n == 1));
    // The leader goes away (SIGTERM releases the Lease): the other one takes over.
    a.signal(Signal::SIGTERM);
    assert!(a.wait_exit(DEADLINE).success());
    wait_until(DEADLINE, "ctl-b leads", || {
        c.log("ctl-b")
            .contains("became the rollout controller leader")
            .then_some(())
    });
    c.start("r1", "cfg-c", &[]);
    c.wait_phase("r1", "Completed");
    assert!(c.log("ctl-b").contains("changed the node's assignment"));
    b.signal(Signal::SIGTERM);
    assert!(b.wait_exit(DEADLINE).success());
}

const LEASE_PATH: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kubelet-pivot/leases/kubelet-pivot-rollout-controller";

#[test]
fn each_lease_renewal_is_one_update_and_a_refused_one_reads_the_lease_once() {
    let c = Cluster::new();
    let count = |method: &str| {
        c.server
            .requests()
            .iter()
            .filter(|r| r.path == LEASE_PATH && r.method == method)
            .count()
    };
    let _ctl = c.controller("ctl-a");
    // Acquired by a GET (404) and a create; every renewal after that is one PUT.
    wait_until(DEADLINE, "8 renewals", || (count("PUT") >= 8).then_some(()));
    assert_eq!(count("GET"), 1, "a renewal read the Lease");
    assert!(c
        .server
        .requests()
        .iter()
        .filter(|r| r.path == LEASE_PATH && r.method == "PUT")
        .all(|r| r.status == 200));
    // A renewal refused (the Lease changed meanwhile): read once, renewed, one PUT again.
    c.server.fail_next_matching(1, 409, "PUT", LEASE_PATH);
    let puts = count("PUT");
    wait_until(DEADLINE, "renewals after a 409", || {
        (count("PUT") >= puts + 6).then_some(())
    });
    assert_eq!(count("GET"), 2, "one read after the refused renewal");
    assert!(
        !c.log("ctl-a").contains("another replica holds"),
        "{}",
        c.log("ctl-a")
    );
}

#[test]
fn a_node_that_joins_converges_and_a_node_that_leaves_is_dropped() {
    let c = Cluster::new();
    let sim = c.sim(5);
    let _ctl = c.controller("ctl-a");
    c.start(
        "r1",
        "cfg-b",
        &[
            "--canary",
            "0",
            "--batch",
            "5",
            "--max-unavailable",
            "5",
            "--selector",
            "pool=a",
            // No node matches yet: refused without it.
            "--force",
        ],
    );
    // No node has the label yet: nothing to do.
    let r = c.wait_phase("r1", "Completed");
    assert_eq!(r["status"]["counts"]["total"], 0);
    for i in 0..4 {
        c.server
            .patch_node(
                &node(i),
                serde_json::json!({"metadata": {"labels": {"pool": "a"}}}),
                false,
            )
            .unwrap();
    }
    wait_until(DEADLINE, "4 nodes done", || {
        (c.status("r1")["status"]["counts"]["done"] == 4).then_some(())
    });
    // A new node joins with the label.
    sim.add_node(
        "late-node",
        BTreeMap::from([("pool".to_string(), "a".to_string())]),
    );
    wait_until(DEADLINE, "the new node converges", || {
        (c.assignment("late-node").as_deref() == Some("kubelet-config/cfg-b:kubelet")).then_some(())
    });
    let r = c.wait_phase("r1", "Completed");
    assert_eq!(r["status"]["counts"]["total"], 5);
    assert_eq!(r["status"]["counts"]["done"], 5);
    // A node is deleted: dropped from the plan and the counts.
    c.server.delete_node(&node(0));
    wait_until(DEADLINE, "the deleted node is dropped", || {
        let r = c.status("r1");
        (r["status"]["counts"]["total"] == 4
            && !batches(&r).iter().flatten().any(|n| n == &node(0)))
        .then_some(())
    });
    // Untouched node 4 (no label) was never changed.
    assert_eq!(
        c.assignment(&node(4)).as_deref(),
        Some("kubelet-config/cfg-a:kubelet")
    );
}

#[test]
fn the_global_stop_halts_every_rollout_and_a_drain_counts_as_unavailable() {
    let c = Cluster::new();
    let sim = c.sim(4);
    let _ctl = c.controller("ctl-a");
    let out = c.cli_ok(&["global-stop", "on"]);
    assert!(out.contains("ON"), "{out}");
    c.start(
        "r1",
        "cfg-b",
        &["--canary", "0", "--batch", "4", "--max-unavailable", "1"],
    );
    let r = c.wait_phase("r1", "Halted");
    assert_eq!(paused_reason(&r), "True=GlobalStop");
    assert!(c.node_patches().is_empty());
    // Each node drains for its change: with maxUnavailable 1 per zone and 3 zones, at most
    // one node per zone is changed at a time.
    for i in 0..4 {
        sim.script(
            &node(i),
            Script::Drains {
                on: Some(format!("{NS}/cfg-b")),
                drain: Duration::from_millis(300),
            },
        );
    }
    c.cli_ok(&["global-stop", "off"]);
    // Sample the nodes until the rollout completes: a node is unavailable from its change
    // until it reports the config active (it drains in between); never two in one zone.
    let zone = |i: usize| i % 3;
    let mut most_in_a_zone = 0;
    wait_until(DEADLINE, "the rollout completes", || {
        let mut busy = [0usize; 3];
        for i in 0..4 {
            let n = c.server.node(&node(i));
            let changed = n["metadata"]["annotations"][SOURCE] == "kubelet-config/cfg-b:kubelet";
            let status = n["metadata"]["annotations"]["kubelet-pivot.io/config-status"]
                .as_str()
                .unwrap_or("");
            let active = status.contains(
                "\"active\":{\"configMap\":{\"kubeletConfigKey\":\"kubelet\",\"name\":\"cfg-b\"",
            ) && n["spec"]["unschedulable"] != true;
            if changed && !active {
                busy[zone(i)] += 1;
            }
        }
        most_in_a_zone = most_in_a_zone.max(*busy.iter().max().unwrap());
        let r = c.status("r1");
        (r["status"]["phase"] == "Completed").then_some(())
    });
    assert_eq!(most_in_a_zone, 1, "maxUnavailable 1 per zone was exceeded");
    assert_eq!(c.node_patches().len(), 4);
}

#[test]
fn the_plugin_answers_as_kubectl_pivot_with_bars_and_json() {
    let c = Cluster::new();
    let _sim = c.sim(4);
    let _ctl = c.controller("ctl-a");
    c.start(
        "r1",
        "cfg-b",
        &["--canary", "1", "--batch", "2", "--max-unavailable", "2"],
    );
    c.wait_phase("r1", "Completed");
    // As kubectl would run it: the binary named kubectl-pivot on PATH.
    let bin_dir = c.dir.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(pivot_bin(), bin_dir.join("kubectl-pivot")).unwrap();
    let out = Command::new(bin_dir.join("kubectl-pivot"))
        .args(["rollout", "status", "r1"])
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    for want in [
        "ROLLOUT  r1",
        "CONFIG   kubelet-config/cfg-b:kubelet",
        "PHASE    Completed",
        "canary",
        "batch 1/2",
        "[##############################]",
        "4 done, 0 in progress, 0 failed, 0 pending of 4",
    ] {
        assert!(shown.contains(want), "missing {want:?} in:\n{shown}");
    }
    let json = Command::new(bin_dir.join("kubectl-pivot"))
        .args(["rollout", "status", "r1", "-o", "json"])
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&json.stdout).expect("-o json");
    assert_eq!(r["status"]["phase"], "Completed");
    // --watch on a settled rollout prints it once (one line: stdout is not a terminal)
    // and exits.
    let watch = Command::new(bin_dir.join("kubectl-pivot"))
        .args(["rollout", "status", "r1", "--watch"])
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .unwrap();
    assert!(watch.status.success());
    assert_eq!(
        text(&watch.stdout),
        "rollout r1: Completed, revision 1: 4 done, 0 in progress, 0 failed, 0 pending of 4\n"
    );
    // Through kubectl's plugin mechanism, when kubectl is installed.
    if let Some(kubectl) = support::kubectl::kubectl_binary() {
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new(kubectl)
            .args(["pivot", "rollout", "history", "r1"])
            .env("PATH", path)
            .env("KUBECONFIG", &c.kubeconfig)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("kubelet-config/cfg-b:kubelet"),
            "{}",
            text(&out.stdout)
        );
        assert!(text(&out.stdout).contains("Completed"));
    }
}

/// (verb, API group, resource with subresource, namespace) of a request, as RBAC sees it.
fn rbac_request(r: &testkit::RequestRecord) -> (String, String, String, Option<String>) {
    let segments: Vec<&str> = r.path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), rest.to_vec()),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest.to_vec()),
        _ => panic!("unexpected path {}", r.path),
    };
    let (namespace, rest) = match rest.as_slice() {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest.to_vec()),
        _ => (None, rest),
    };
    let (resource, named) = match rest.as_slice() {
        [plural] => (plural.to_string(), false),
        [plural, _name] => (plural.to_string(), true),
        [plural, _name, sub] => (format!("{plural}/{sub}"), true),
        _ => panic!("unexpected path {}", r.path),
    };
    let verb = match (r.method.as_str(), named, r.watch) {
        ("GET", _, true) => "watch",
        ("GET", true, false) => "get",
        ("GET", false, false) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", _, _) => "delete",
        (m, _, _) => panic!("unexpected method {m}"),
    };
    (verb.to_string(), group, resource, namespace)
}

/// What manifests/50-rollout-controller.yaml binds to the controller's ServiceAccount, as
/// the API server's RBAC evaluates it (testkit::rbac): a grant's namespace None = a
/// ClusterRoleBinding.
fn controller_grants() -> Vec<Grant> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/50-rollout-controller.yaml");
    let policy = Policy::from_files(&[path]).expect("the controller manifest's RBAC");
    policy.grants(&User::service_account(
        "kubelet-pivot",
        "rollout-controller",
    ))
}

/// The index of the grant that allows `(verb, group, resource, ns)`, if one does.
fn granted_by(
    grants: &[Grant],
    (verb, group, resource, ns): &(String, String, String, Option<String>),
) -> Option<usize> {
    let request = Request::new(verb, resource)
        .group(group)
        .namespace(ns.as_deref().unwrap_or(""));
    grants.iter().position(|grant| {
        grant
            .namespace
            .as_ref()
            .is_none_or(|scope| Some(scope) == ns.as_ref())
            && grant.rule.matches(&request)
    })
}

#[test]
fn the_controller_needs_exactly_the_rbac_its_manifest_grants() {
    let grants = controller_grants();
    assert!(
        !grants.is_empty(),
        "nothing is bound to the controller's ServiceAccount"
    );
    let c = Cluster::new();
    let sim = c.sim(6);
    sim.script(
        &node(1),
        Script::RollsBack {
            on: Some(format!("{NS}/cfg-b")),
            after: None,
        },
    );
    // With the pods gate (a pod list per node).
    let cfg = format!("{NS}/cfg-b");
    c.cli_ok(&[
        "start",
        "r1",
        "--config",
        &cfg,
        "--canary",
        "0",
        "--batch",
        "3",
        "--max-unavailable",
        "3",
        "--no-fallback-for",
        "0s",
    ]);
    // Waits for its ConfigMap: watched by name in kubelet-config.
    c.start("r2", "cfg-later", &["--selector", "pool=none", "--force"]);
    c.server.clear_requests();
    let _ctl = c.controller("ctl-a");
    c.wait_phase("r1", "Paused");
    c.cli_ok(&["undo", "r1"]);
    c.wait_phase("r1", "Undone");
    wait_until(DEADLINE, "the Undone Event", || {
        events_about(&c, "r1")
            .iter()
            .any(|e| e["reason"] == "Undone")
            .then_some(())
    });
    let mut used = std::collections::BTreeSet::new();
    let agent = format!(
        "kubelet-pivot/{} (rollout-controller)",
        env!("CARGO_PKG_VERSION")
    );
    let requests = c.server.requests();
    let ours: Vec<_> = requests
        .iter()
        .filter(|r| r.user_agent.as_deref() == Some(agent.as_str()))
        .collect();
    assert!(ours.len() > 10, "{} requests of the controller", ours.len());
    for r in ours {
        let request = rbac_request(r);
        let (verb, group, resource, ns) = request.clone();
        let Some(i) = granted_by(&grants, &request) else {
            panic!("the controller did {verb} {group}/{resource} in {ns:?}, which its RBAC does not grant");
        };
        used.insert((i, verb));
    }
    // Every verb granted was used.
    for (i, grant) in grants.iter().enumerate() {
        for verb in &grant.rule.verbs {
            assert!(
                used.contains(&(i, verb.clone())),
                "granted but never used: {verb} {:?} in {:?}",
                grant.rule.resources,
                grant.namespace
            );
        }
    }
}

/// (reason, type, note, times) of each Event about rollout `name`, checking that each
/// regards it; `times` counts a repeated Event's series.
pub(super) fn rollout_events(c: &Cluster, name: &str) -> Vec<(String, String, String, u64)> {
    let uid = stored_rollout(c, name)["metadata"]["uid"].clone();
    events_about(c, name)
        .into_iter()
        .map(|e| {
            let about = &e["involvedObject"];
            assert_eq!(about["kind"], "KubeletConfigRollout", "{e:#}");
            assert_eq!(about["apiVersion"], "kubelet-pivot.io/v1alpha1", "{e:#}");
            assert_eq!(about["uid"], uid, "{e:#}");
            assert_eq!(
                e["reportingComponent"], "kubelet-pivot-rollout-controller",
                "{e:#}"
            );
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            let times = [e["series"]["count"].as_u64(), e["count"].as_u64(), Some(1)]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(1);
            (text("reason"), text("type"), text("message"), times)
        })
        .collect()
}

/// How many Events of `reason` were posted (a repeated one counts as its series count).
pub(super) fn count_reason(events: &[(String, String, String, u64)], reason: &str) -> u64 {
    events
        .iter()
        .filter(|(r, ..)| r == reason)
        .map(|(.., times)| times)
        .sum()
}

#[test]
fn every_batch_failure_pause_resume_undo_and_completion_is_an_event_on_the_rollout() {
    let c = Cluster::new();
    let sim = c.sim(6);
    // The canary (the first node of the first zone) falls back 200 ms after it runs the
    // config, within the 1 s it must run it: the rollout pauses before batch 1.
    canary_falls_back(&sim);
    let _ctl = c.controller("ctl-a");
    let canary = [
        "--canary",
        "1",
        "--batch",
        "3",
        "--max-unavailable",
        "3",
        "--no-fallback-for",
        "1s",
    ];
    c.start("r1", "cfg-b", &canary);
    let r = c.wait_phase("r1", "Paused");
    let events = wait_until(DEADLINE, "the pause's Events", || {
        let e = rollout_events(&c, "r1");
        (count_reason(&e, "Paused") == 1).then_some(e)
    });
    assert_eq!(
        count_reason(&events, "BatchStarted"),
        1,
        "{events:#?}\n{}",
        c.log("ctl-a")
    );
    let failed: Vec<_> = events.iter().filter(|(r, ..)| r == "NodeFailed").collect();
    assert_eq!(failed.len(), 1, "{events:#?}");
    assert_eq!(failed[0].1, "Warning");
    assert!(failed[0].2.contains(&node(0)), "{events:#?}");
    assert!(
        events
            .iter()
            .any(|(r, _, note, _)| r == "BatchStarted" && note.contains("canary")),
        "{events:#?}"
    );
    assert!(failed[0].2.contains("Fallback"), "{events:#?}");
    let paused = events.iter().find(|(r, ..)| r == "Paused").unwrap();
    assert!(paused.2.contains(&paused_reason(&r)[5..]), "{paused:?}");
    c.cli_ok(&["resume", "r1"]);
    c.wait_phase("r1", "CompletedWithFailures");
    let events = wait_until(DEADLINE, "the completion's Event", || {
        let e = rollout_events(&c, "r1");
        (count_reason(&e, "CompletedWithFailures") == 1).then_some(e)
    });
    assert_eq!(count_reason(&events, "Resumed"), 1, "{events:#?}");
    assert_eq!(count_reason(&events, "BatchStarted"), 3, "{events:#?}");
    c.cli_ok(&["undo", "r1"]);
    c.wait_phase("r1", "Undone");
    let events = wait_until(DEADLINE, "the undo's Events", || {
        let e = rollout_events(&c, "r1");
        (count_reason(&e, "Undone") == 1).then_some(e)
    });
    assert_eq!(count_reason(&events, "UndoStarted"), 1, "{events:#?}");
    c.start("r1", "cfg-c", &canary[..6]);
    c.wait_phase("r1", "Completed");
    let events = wait_until(DEADLINE, "the second revision's Events", || {
        let e = rollout_events(&c, "r1");
        (count_reason(&e, "Completed") == 1).then_some(e)
    });
    // Each happened once: nothing was posted twice.
    for (reason, n) in [
        ("NodeFailed", 1),
        ("Paused", 1),
        ("Resumed", 1),
        ("UndoStarted", 1),
        ("Undone", 1),
        ("CompletedWithFailures", 1),
        ("Completed", 1),
    ] {
        assert_eq!(count_reason(&events, reason), n, "{reason}: {events:#?}");
    }
    let batches: Vec<_> = events
        .iter()
        .filter(|(r, ..)| r == "BatchStarted")
        .map(|(_, _, note, _)| note.clone())
        .collect();
    assert_eq!(
        batches.len(),
        6,
        "three batches of each revision: {batches:#?}"
    );
    assert!(
        batches
            .iter()
            .filter(|n| n.starts_with("revision 2:"))
            .count()
            == 3,
        "{batches:#?}\n{}",
        c.log("ctl-a")
    );
}

/// The status code of `GET path` on `addr`.
fn probe(addr: SocketAddr, path: &str) -> u16 {
    let raw = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    scrape::request(addr, &raw)
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
        .0
}

/// Scrapes `addr` until `accept` takes what it serves.
fn metrics_until(
    addr: SocketAddr,
    what: &str,
    accept: impl Fn(&scrape::Exposition) -> bool,
) -> scrape::Exposition {
    wait_until(DEADLINE, what, || {
        scrape::scrape_openmetrics(addr).ok().filter(|m| accept(m))
    })
}

const LEADER: &str = "kubelet_pivot_rollout_controller_leader";
const RECONCILES: &str = "kubelet_pivot_rollout_reconciles_total";
const COMPLETED: &str = "kubelet_pivot_rollouts{phase=\"Completed\"}";

#[test]
fn metrics_and_probes_follow_the_rollouts_and_the_leadership() {
    let c = Cluster::new();
    let _sim = c.sim(6);
    let (mut a, addr_a) = c.serving_controller("ctl-a");
    // ctl-a leads once its caches synced: leader 1, ready.
    metrics_until(addr_a, "ctl-a leads", |m| m.get(LEADER) == Some(1.0));
    wait_until(DEADLINE, "ctl-a ready", || {
        (probe(addr_a, "/readyz") == 200).then_some(())
    });
    assert_eq!(probe(addr_a, "/healthz"), 200);
    let (_b, addr_b) = c.serving_controller("ctl-b");
    // ctl-b stands by: leader 0, alive, and ready while it reads the Lease.
    wait_until(DEADLINE, "ctl-b ready", || {
        (probe(addr_b, "/readyz") == 200).then_some(())
    });
    assert_eq!(probe(addr_b, "/healthz"), 200);
    let m = scrape::scrape_openmetrics(addr_b).expect("scrape ctl-b");
    assert_eq!(m.value(LEADER), 0.0);
    assert_eq!(m.value(RECONCILES), 0.0, "a standby reconciles nothing");
    // It cannot read the Lease any more: alive, not ready; then ready again.
    c.server.deny("get", "leases", Some("kubelet-pivot"));
    wait_until(DEADLINE, "ctl-b not ready", || {
        (probe(addr_b, "/readyz") == 503).then_some(())
    });
    assert_eq!(probe(addr_b, "/healthz"), 200);
    assert_eq!(
        probe(addr_a, "/readyz"),
        200,
        "the leader renews without a read"
    );
    c.server.allow_all();
    wait_until(DEADLINE, "ctl-b ready again", || {
        (probe(addr_b, "/readyz") == 200).then_some(())
    });
    let before = scrape::scrape_openmetrics(addr_a).expect("scrape ctl-a");
    assert_eq!(before.value(COMPLETED), 0.0);
    // One status write fails: a reconcile error.
    c.server.fail_next_matching(
        1,
        500,
        "PUT",
        "/apis/kubelet-pivot.io/v1alpha1/kubeletconfigrollouts/r1/status",
    );
    c.start(
        "r1",
        "cfg-b",
        &["--canary", "1", "--batch", "50%", "--max-unavailable", "3"],
    );
    c.wait_phase("r1", "Completed");
    let m = metrics_until(addr_a, "r1 Completed in ctl-a's metrics", |m| {
        m.get(COMPLETED) == Some(1.0)
    });
    assert_eq!(
        m.value("kubelet_pivot_rollout_nodes{rollout=\"r1\",state=\"done\"}"),
        6.0
    );
    assert_eq!(
        m.value("kubelet_pivot_rollout_nodes{rollout=\"r1\",state=\"pending\"}"),
        0.0
    );
    assert_eq!(
        m.value("kubelet_pivot_rollouts{phase=\"Progressing\"}"),
        0.0
    );
    let reconciles = m.value(RECONCILES);
    assert!(reconciles > before.value(RECONCILES) + 3.0, "{}", m.text);
    assert_eq!(
        m.value("kubelet_pivot_rollout_reconcile_duration_seconds_count"),
        reconciles
    );
    assert_eq!(
        m.value("kubelet_pivot_rollout_reconcile_errors_total{error=\"api\"}"),
        1.0,
        "{}",
        m.text
    );
    // The standby saw none of it.
    let m = scrape::scrape_openmetrics(addr_b).expect("scrape ctl-b");
    assert_eq!(m.value(COMPLETED), 0.0);
    assert_eq!(m.value(LEADER), 0.0);
    // The leader goes: ctl-b leads and counts the rollout.
    a.signal(Signal::SIGTERM);
    assert!(a.wait_exit(DEADLINE).success());
    metrics_until(addr_b, "ctl-b leads and sees r1", |m| {
        m.get(LEADER) == Some(1.0) && m.get(COMPLETED) == Some(1.0)
    });
    assert_eq!(probe(addr_b, "/readyz"), 200);
    assert_eq!(probe(addr_b, "/nope"), 404);
}

#[test]
fn the_cli_reads_kubeconfig_and_context_as_kubectl_does() {
    let c = Cluster::new();
    // A kubeconfig whose current context points at a closed port, and a good context.
    let good = std::fs::read_to_string(&c.kubeconfig).unwrap();
    let two = good
        .replace("current-context: fake", "current-context: broken")
        .replace(
            "contexts:\n",
            "contexts:\n- name: broken\n  context:\n    cluster: nowhere\n    user: fake\n",
        )
        .replace(
            "clusters:\n",
            "clusters:\n- name: nowhere\n  cluster:\n    server: http://127.0.0.1:1\n",
        );
    let path = c.dir.path().join("two-contexts");
    std::fs::write(&path, two).unwrap();
    let run = |args: &[&str]| {
        Command::new(pivot_bin())
            .args(["rollout", "global-stop", "status"])
            .args(args)
            .env("KUBECONFIG", &path)
            .output()
            .unwrap()
    };
    let broken = run(&[]);
    assert!(
        !broken.status.success(),
        "the current context is unreachable"
    );
    assert!(
        text(&broken.stderr).contains("kubelet-pivot"),
        "{}",
        text(&broken.stderr)
    );
    let ok = run(&["--context", "fake"]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert!(
        text(&ok.stdout).contains("global stop is off"),
        "{}",
        text(&ok.stdout)
    );
    let missing = run(&["--context", "nope"]);
    assert!(!missing.status.success());
    assert!(
        text(&missing.stderr).contains("nope"),
        "{}",
        text(&missing.stderr)
    );
}

/// Issue 22 item 1: a 429 on a node PATCH, a 500 on a status write and a 10 s outage of the
/// API server during a rollout: the controller retries with backoff, the rollouts complete,
/// every node is patched exactly once per rollout, and the controller never exits.
#[test]
fn api_errors_and_an_outage_never_end_the_controller() {
    let c = Cluster::new();
    let _sim = c.sim(6);
    let mut ctl = c.patient_controller("ctl-a");
    wait_until(DEADLINE, "ctl-a leads", || {
        c.log("ctl-a")
            .contains("became the rollout controller leader")
            .then_some(())
    });
    c.server
        .fail_next_matching(1, 429, "PATCH", "/api/v1/nodes/");
    c.server.fail_next_matching(
        1,
        500,
        "PUT",
        "/apis/kubelet-pivot.io/v1alpha1/kubeletconfigrollouts/",
    );
    c.start(
        "r1",
        "cfg-b",
        &["--canary", "1", "--batch", "50%", "--max-unavailable", "3"],
    );
    c.wait_phase("r1", "Completed");
    let failed: Vec<(String, String, u16)> = c
        .server
        .requests()
        .into_iter()
        .filter(|r| r.status == 429 || r.status == 500)
        .map(|r| (r.method, r.path, r.status))
        .collect();
    assert_eq!(failed.len(), 2, "both faults were served: {failed:?}");
    let patches = c.node_patches_ok();
    assert_eq!(patches.len(), 6, "{patches:?}");
    assert!(patches.values().all(|n| *n == 1), "{patches:?}");
    assert!(
        ctl.is_running(),
        "the controller exited:\n{}",
        c.log("ctl-a")
    );

    c.server.clear_requests();
    c.start(
        "r1",
        "cfg-c",
        &[
            "--canary",
            "1",
            "--batch",
            "1",
            "--no-fallback-for",
            "1s",
            "--max-unavailable",
            "1",
        ],
    );
    wait_until(DEADLINE, "the rollout to cfg-c under way", || {
        (!c.node_patches_ok().is_empty()).then_some(())
    });
    c.server.stop();
    // The outage itself: a deliberate 10 s without an API server.
    std::thread::sleep(Duration::from_secs(10));
    assert!(
        ctl.is_running(),
        "the controller exited during the outage:\n{}",
        c.log("ctl-a")
    );
    c.server.restart_on_same_port();
    let r = wait_until(
        Duration::from_secs(60),
        "rollout r1 to cfg-c Completed after the outage",
        || {
            let out = c.cli(&["status", "r1", "-o", "json"]);
            let r: Value = serde_json::from_slice(&out.stdout).ok()?;
            (r["status"]["phase"] == "Completed"
                && r["status"]["observedGeneration"] == r["metadata"]["generation"])
                .then_some(r)
        },
    );
    assert_eq!(r["status"]["counts"]["done"], 6, "{r}");
    let patches = c.node_patches_ok();
    assert_eq!(patches.len(), 6, "{patches:?}");
    assert!(patches.values().all(|n| *n == 1), "{patches:?}");
    assert!(
        ctl.is_running(),
        "the controller exited:\n{}",
        c.log("ctl-a")
    );
    let log = c.log("ctl-a");
    assert!(!log.contains("the controller failed"), "{log}");
    assert!(log.contains("reconcile failed; retrying"), "{log}");
    ctl.signal(Signal::SIGTERM);
    assert!(ctl.wait_exit(DEADLINE).success());
}

/// A KubeletConfiguration payload with `extra` fields (the supervisors' parser reads it).
fn kubelet_payload(extra: &str) -> String {
    format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{extra}")
}

/// When the controller changed `node`, from its record there.
fn changed_at(c: &Cluster, node: &str) -> Option<std::time::SystemTime> {
    let record = c.server.node(node)["metadata"]["annotations"][RECORD].clone();
    let record: Value = serde_json::from_str(record.as_str()?).ok()?;
    humantime::parse_rfc3339_weak(record["at"].as_str()?).ok()
}

/// Issue 22 item 8: without `noFallbackFor`, a node counts as done (and the next batch
/// starts) only once the config's own `configTrialDuration`, read from the ConfigMap, has
/// passed since the node was changed; the revision records the value and where it came
/// from, and `status` and `history` show it. A payload whose trial cannot be read starts
/// nothing and says why.
#[test]
fn by_default_a_node_is_done_only_once_the_configs_trial_has_passed() {
    const TRIAL: Duration = Duration::from_secs(3);
    let c = Cluster::new();
    let _sim = c.sim(2);
    let mut ctl = c.controller("ctl-a");
    for (name, extra) in [
        ("cfg-trial", "eventBurst: 33\nconfigTrialDuration: 3s\n"),
        ("cfg-soon", "eventBurst: 44\nconfigTrialDuration: soon\n"),
    ] {
        let data = BTreeMap::from([("kubelet".to_string(), kubelet_payload(extra))]);
        c.server.create_configmap(NS, name, data, true);
    }
    // No --no-fallback-for: the default applies.
    c.cli_ok(&[
        "start",
        "r1",
        "--config",
        &format!("{NS}/cfg-trial"),
        "--canary",
        "1",
        "--batch",
        "1",
        "--no-pods-gate",
    ]);
    let canary = wait_until(DEADLINE, "the canary changed", || {
        let r = c.status("r1");
        let first = r["status"]["batches"][0][0].as_str()?.to_string();
        changed_at(&c, &first).map(|_| first)
    });
    let canary_at = changed_at(&c, &canary).expect("the canary's record");
    let r = c.status("r1");
    let rev = &r["status"]["history"][0];
    assert_eq!(rev["noFallbackFor"], "3s", "{r:#}");
    assert_eq!(rev["noFallbackSource"], "ConfigTrialDuration", "{r:#}");
    // The canary reports the config active at once (the simulator reacts in 20 ms), yet it
    // is done only when the trial has passed: seen done no earlier than 3 s after its change.
    let done_seen = wait_until(DEADLINE, "the canary done", || {
        let r = c.status("r1");
        let seen = std::time::SystemTime::now();
        (r["status"]["batchCounts"][0]["done"] == 1).then_some(seen)
    });
    let waited = done_seen.duration_since(canary_at).unwrap_or_default();
    assert!(waited >= TRIAL, "done {waited:?} after the change");
    let r = c.wait_phase("r1", "Completed");
    let second = r["status"]["batches"][1][0]
        .as_str()
        .expect("batch 1")
        .to_string();
    let second_at = changed_at(&c, &second).expect("the second node's record");
    let gap = second_at.duration_since(canary_at).unwrap_or_default();
    assert!(
        gap >= TRIAL,
        "the next batch started {gap:?} after the canary's change"
    );
    let shown = c.cli_ok(&["status", "r1"]);
    assert!(
        shown.contains("GATE     no fallback for 3s (ConfigTrialDuration)"),
        "{shown}"
    );
    let history = c.cli_ok(&["history", "r1"]);
    assert!(history.contains("NO-FALLBACK-FOR"), "{history}");
    assert!(history.contains("3s (ConfigTrialDuration)"), "{history}");

    // A trial the controller cannot read: no revision, a condition that says why. `start`
    // refuses the payload first (the node's validator does); --force gets it past.
    let refused = c.cli(&["start", "r2", "--config", &format!("{NS}/cfg-soon")]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("configTrialDuration"),
        "{}",
        text(&refused.stderr)
    );
    c.cli_ok(&[
        "start",
        "r2",
        "--config",
        &format!("{NS}/cfg-soon"),
        "--no-pods-gate",
        "--force",
    ]);
    let r = wait_until(DEADLINE, "r2 reports the unreadable trial", || {
        let r = c.status("r2");
        let found = r["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "ConfigFound")?
            .clone();
        (found["reason"] == "TrialDurationUnreadable").then_some(found)
    });
    assert_eq!(r["status"], "False");
    let message = r["message"].as_str().unwrap_or_default();
    assert!(message.contains("configTrialDuration"), "{message}");
    assert!(
        message.contains("set healthGates.noFallbackFor"),
        "{message}"
    );
    assert_eq!(c.status("r2")["status"]["revision"], 0);
    assert!(ctl.is_running(), "{}", c.log("ctl-a"));
    ctl.signal(Signal::SIGTERM);
    assert!(ctl.wait_exit(DEADLINE).success());
}

/// Issue 22 items 3 and 4: a completed rollout and a newer one over the same nodes do not
/// fight (each node changed once by each, then never again), the older one says its nodes
/// were superseded; a rollout deleted and created again under the same name is a new owner
/// and changes the nodes again.
#[test]
fn rollouts_over_the_same_nodes_never_fight_and_a_re_created_one_is_a_new_owner() {
    let c = Cluster::new();
    let _sim = c.sim(4);
    let _ctl = c.controller("ctl-a");
    let fast = ["--canary", "1", "--batch", "50%", "--max-unavailable", "2"];
    c.start("r1", "cfg-b", &fast);
    c.wait_phase("r1", "Completed");
    c.start("r2", "cfg-c", &fast);
    c.wait_phase("r2", "Completed");
    // A bounded sleep on purpose: it checks that no rollout takes the nodes back.
    std::thread::sleep(Duration::from_secs(3));
    let patches = c.node_patches_ok();
    assert_eq!(patches.len(), 4, "{patches:?}");
    assert!(patches.values().all(|n| *n == 2), "{patches:?}");
    for i in 0..4 {
        assert_eq!(
            c.assignment(&node(i)).as_deref(),
            Some("kubelet-config/cfg-c:kubelet")
        );
    }
    let r1 = c.status("r1");
    let superseded = r1["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Superseded")
        .cloned()
        .unwrap_or_default();
    assert_eq!(superseded["status"], "True", "{r1:#}");
    assert!(
        superseded["message"]
            .as_str()
            .unwrap_or_default()
            .contains("r2"),
        "{superseded}"
    );

    let Some(kubectl) = support::kubectl::Kubectl::new(|p| c.server.write_kubeconfig(p)) else {
        return;
    };
    kubectl.ok(&["delete", "kubeletconfigrollouts.kubelet-pivot.io", "r2"]);
    c.start("r2", "cfg-b", &fast);
    c.wait_phase("r2", "Completed");
    let patches = c.node_patches_ok();
    assert!(patches.values().all(|n| *n == 3), "{patches:?}");
    for i in 0..4 {
        assert_eq!(
            c.assignment(&node(i)).as_deref(),
            Some("kubelet-config/cfg-b:kubelet")
        );
    }
}

/// Issue 22 item 6: the ConfigMap a rollout waits for is watched, not polled every 30 s;
/// `status --watch --timeout` gives up when the time passes.
#[test]
fn a_rollout_waiting_for_its_configmap_starts_when_it_is_created() {
    let c = Cluster::new();
    let _sim = c.sim(3);
    let _ctl = c.controller("ctl-a");
    // --force: the ConfigMap does not exist yet (without it, start refuses).
    c.start(
        "r1",
        "cfg-late",
        &["--canary", "0", "--batch", "100%", "--force"],
    );
    wait_until(DEADLINE, "ConfigFound=False", || {
        let r = c.status("r1");
        r["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "ConfigFound" && c["status"] == "False")
            .then_some(())
    });
    let started = std::time::Instant::now();
    let out = c.cli(&["status", "r1", "--watch", "--timeout", "1s"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("did not settle within 1s"));
    assert!(started.elapsed() < Duration::from_secs(5));
    // Give the controller's watch a moment to be open before the ConfigMap appears: the
    // point is the watch, not the initial lookup.
    wait_until(DEADLINE, "the watch of the missing ConfigMap", || {
        (c.server
            .open_watches("/api/v1/namespaces/kubelet-config/configmaps")
            > 0)
        .then_some(())
    });
    let created = std::time::Instant::now();
    c.server.create_configmap(
        NS,
        "cfg-late",
        BTreeMap::from([("kubelet".to_string(), kubelet_payload("# late\n"))]),
        true,
    );
    // The 30 s look would take 30 s; the watch takes a moment.
    wait_until(Duration::from_secs(5), "revision 1 started", || {
        (c.status("r1")["status"]["revision"] == 1).then_some(())
    });
    let took = created.elapsed();
    eprintln!("revision started {took:?} after the ConfigMap was created");
    c.wait_phase("r1", "Completed");
    wait_until(
        DEADLINE,
        "the watch closed once the ConfigMap was found",
        || {
            (c.server
                .open_watches("/api/v1/namespaces/kubelet-config/configmaps")
                == 0)
                .then_some(())
        },
    );
}

// ------------------------------------------------------------------------------------------
// Objects the controller cannot read (issue 22 item 2)
// ------------------------------------------------------------------------------------------

const ROLLOUTS: &str = "/apis/kubelet-pivot.io/v1alpha1/kubeletconfigrollouts";
const CRD_NAME: &str = "kubeletconfigrollouts.kubelet-pivot.io";

/// One request to the test server with no client library in between: what any client (or
/// an old CRD's server) may send. Returns the HTTP status and the answered JSON.
pub(super) fn http(
    server: &ApiServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Value) {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    let body = body.to_string();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
         Content-Type: {content_type}\r\nAccept: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.token(),
        body.len()
    )
    .expect("send the request");
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("status line");
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("an HTTP status");
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().expect("Content-Length");
            }
        }
    }
    let mut answer = vec![0u8; length];
    reader.read_exact(&mut answer).expect("body");
    (
        status,
        serde_json::from_slice(&answer).unwrap_or(Value::Null),
    )
}

fn rollout_object(name: &str, spec: Value) -> Value {
    serde_json::json!({
        "apiVersion": "kubelet-pivot.io/v1alpha1",
        "kind": "KubeletConfigRollout",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn stored_rollout(c: &Cluster, name: &str) -> Value {
    rollout::stored(&c.server, name).unwrap_or_else(|| panic!("rollout {name} is stored"))
}

pub(super) fn condition<'a>(r: &'a Value, type_: &str) -> Option<&'a Value> {
    r["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Events about the rollout `name` (events.k8s.io's `regarding`, core's `involvedObject`).
fn events_about(c: &Cluster, name: &str) -> Vec<Value> {
    c.server
        .events()
        .into_iter()
        .filter(|e| e["regarding"]["name"] == name || e["involvedObject"]["name"] == name)
        .collect()
}

#[test]
fn the_schema_refuses_what_the_controller_cannot_read() {
    let c = Cluster::new();
    let Some(kubectl) = support::kubectl::Kubectl::new(|p| c.server.write_kubeconfig(p)) else {
        return;
    };
    let apply = |name: &str, spec: &str| {
        let path = kubectl.path(&format!("{name}.yaml"));
        let doc = format!(
            "apiVersion: kubelet-pivot.io/v1alpha1\nkind: KubeletConfigRollout\nmetadata:\n  name: {name}\n\
             spec:\n  config: {{namespace: kubelet-config, name: cfg-b}}\n{spec}"
        );
        std::fs::write(&path, doc).expect("write the manifest");
        // The server judges (this one serves no OpenAPI documents for kubectl's own check).
        kubectl.run(&[
            "apply",
            "--validate=false",
            "-f",
            path.to_str().expect("UTF-8 path"),
        ])
    };
    let refused = [
        (
            "canary-too-big",
            "  canary: 4294967296\n",
            "spec.canary",
            "should be less than or equal to 100000",
        ),
        (
            "canary-negative",
            "  canary: -1\n",
            "spec.canary",
            "should be greater than or equal to 0",
        ),
        (
            "canary-text",
            "  canary: \"3\"\n",
            "spec.canary",
            "must be of type integer",
        ),
        (
            "batch-zero",
            "  batch: 0\n",
            "spec.batch",
            "should be greater than or equal to 1",
        ),
        (
            "batch-negative",
            "  batch: -2\n",
            "spec.batch",
            "should be greater than or equal to 1",
        ),
        (
            "batch-too-big",
            "  batch: 4294967296\n",
            "spec.batch",
            "should be less than or equal to 100000",
        ),
        (
            "batch-fraction",
            "  batch: 2.5\n",
            "spec.batch",
            "must be of type integer,string",
        ),
        (
            "batch-list",
            "  batch: [1]\n",
            "spec.batch",
            "must be of type integer,string",
        ),
        (
            "unavailable-zero",
            "  maxUnavailable: {value: 0}\n",
            "spec.maxUnavailable.value",
            "should be greater than or equal to 1",
        ),
        (
            "failures-too-big",
            "  maxFailures: 4294967296\n",
            "spec.maxFailures",
            "should be less than or equal to 100000",
        ),
    ];
    for (name, spec, field, why) in refused {
        let out = apply(name, spec);
        let err = text(&out.stderr);
        assert!(
            !out.status.success(),
            "{name} was accepted: {}",
            text(&out.stdout)
        );
        assert!(
            err.contains(&format!("KubeletConfigRollout \"{name}\" is invalid"))
                && err.contains(&format!("{field}: Invalid value"))
                && err.contains(why),
            "{name}: {err}"
        );
        let answered: Vec<u16> = c
            .server
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path == ROLLOUTS && r.body.contains(name))
            .map(|r| r.status)
            .collect();
        assert_eq!(answered, [422], "{name}");
        assert!(rollout::stored(&c.server, name).is_none());
    }
    // A null is not nullable any more: the server puts the default in its place.
    for (name, spec, field, default) in [
        (
            "batch-null",
            "  batch: null\n",
            "batch",
            serde_json::json!("10%"),
        ),
        (
            "canary-null",
            "  canary: null\n",
            "canary",
            serde_json::json!(1),
        ),
    ] {
        let out = apply(name, spec);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        assert_eq!(stored_rollout(&c, name)["spec"][field], default, "{name}");
    }
    // A percentage out of 1%..100%: refused by the pattern on a server that checks
    // patterns (the unit tests of crates/contract/src/rollout.rs check the pattern itself); this
    // test server checks none, and the object stays readable: the controller reports it
    // as InvalidSpec (a_rollout_the_controller_cannot_read_...).
    let out = apply("batch-percent", "  batch: 150%\n");
    if !out.status.success() {
        let err = text(&out.stderr);
        assert!(
            err.contains("spec.batch: Invalid value") && err.contains("should match"),
            "{err}"
        );
    }
    // What the server serves is what the manifest holds: the pattern and the bounds.
    let served = c.server.crd(CRD_NAME).expect("the CRD");
    let batch = &served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["batch"];
    assert_eq!(batch["pattern"], "^(100|[1-9][0-9]?)%$", "{batch}");
    assert_eq!(batch["x-kubernetes-int-or-string"], true);
    assert!(batch.get("nullable").is_none(), "{batch}");
}

#[test]
fn a_rollout_the_controller_cannot_read_is_reported_on_itself_and_the_others_go_on() {
    // The CRD of before: it lets in what the controller cannot read.
    let c = Cluster::with_crd(loose_crd());
    let _sim = c.sim(4);
    let mut ctl = c.controller("ctl-a");
    let nowhere = |extra: Value| {
        let mut spec = serde_json::json!({
            "config": {"namespace": NS, "name": "cfg-c"},
            "nodeSelector": {"pool": "none"},
        });
        if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
            spec.extend(extra);
        }
        spec
    };
    let bad = [
        (
            "bad-null",
            nowhere(serde_json::json!({"batch": null})),
            "spec.batch",
            "invalid type: null",
        ),
        (
            "bad-big",
            nowhere(serde_json::json!({"canary": 4294967296u64})),
            "spec.canary",
            "invalid value: integer `4294967296`, expected u32",
        ),
        (
            "bad-negative",
            nowhere(serde_json::json!({"maxUnavailable": {"value": -1}})),
            "spec.maxUnavailable.value",
            "invalid value: integer `-1`",
        ),
    ];
    for (name, spec, _, _) in &bad {
        let (status, answer) = http(
            &c.server,
            "POST",
            ROLLOUTS,
            "application/json",
            &rollout_object(name, spec.clone()),
        );
        assert_eq!(status, 201, "{name}: {answer}");
    }
    // Readable, but not followable: the plan's own Invalid phase.
    let (status, answer) = http(
        &c.server,
        "POST",
        ROLLOUTS,
        "application/json",
        &rollout_object("bad-percent", nowhere(serde_json::json!({"batch": "150%"}))),
    );
    assert_eq!(status, 201, "{answer}");
    c.start(
        "r1",
        "cfg-b",
        &["--canary", "1", "--batch", "1", "--max-unavailable", "1"],
    );
    let r = c.wait_phase("r1", "Completed");
    assert_eq!(r["status"]["counts"]["done"], 4, "{r}");
    let patches = c.node_patches_ok();
    assert_eq!(patches.len(), 4, "{patches:?}");
    assert!(patches.values().all(|n| *n == 1), "{patches:?}");
    for (name, _, field, why) in &bad {
        let r = wait_until(DEADLINE, &format!("{name} reported Invalid"), || {
            let r = stored_rollout(&c, name);
            (r["status"]["phase"] == "Invalid").then_some(r)
        });
        let valid = condition(&r, "Valid").unwrap_or_else(|| panic!("{name}: {r}"));
        assert_eq!(valid["status"], "False", "{r}");
        assert_eq!(valid["reason"], "Undecodable", "{r}");
        let message = valid["message"].as_str().unwrap_or("");
        assert!(
            message.contains(&format!("{field}: {why}")),
            "{name}: {message}"
        );
        assert_eq!(
            r["status"]["observedGeneration"],
            r["metadata"]["generation"]
        );
        let events = events_about(&c, name);
        assert_eq!(events.len(), 1, "{name}: {events:#?}");
        let event = &events[0];
        assert_eq!(event["type"], "Warning", "{event}");
        assert_eq!(event["reason"], "Undecodable", "{event}");
        let note = event["note"]
            .as_str()
            .or(event["message"].as_str())
            .unwrap_or("");
        assert_eq!(note, message, "{event}");
    }
    let r = c.wait_phase("bad-percent", "Invalid");
    let valid = condition(&r, "Valid").expect("Valid");
    assert_eq!(valid["reason"], "InvalidSpec", "{r}");
    assert!(
        valid["message"].as_str().unwrap_or("").contains("batch"),
        "{r}"
    );
    // One report each, not one per reconcile (every node change reconciles every rollout).
    c.server
        .set_node_annotation(&node(0), "example.com/touch", Some("1"));
    std::thread::sleep(Duration::from_millis(500));
    for (name, _, _, _) in &bad {
        assert_eq!(events_about(&c, name).len(), 1, "{name}");
    }
    assert!(
        ctl.is_running(),
        "the controller exited:\n{}",
        c.log("ctl-a")
    );
    let log = c.log("ctl-a");
    assert!(!log.contains("watching rollouts failed"), "{log}");
    assert!(
        log.contains("cannot read the rollout; reporting it on the object and skipping it"),
        "{log}"
    );
    // Every Event it posted is granted by its RBAC.
    let grants = controller_grants();
    for r in c.server.requests() {
        let request = rbac_request(&r);
        if request.2 == "events" {
            assert!(
                granted_by(&grants, &request).is_some(),
                "not granted: {request:?}"
            );
        }
    }
    // The CLI shows it as invalid, with the field, and exits 3.
    let out = c.cli(&["status", "bad-big"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let shown = text(&out.stdout);
    for want in [
        "ROLLOUT  bad-big",
        "CONFIG   kubelet-config/cfg-c:kubelet",
        "PHASE    Invalid",
        "INVALID  the object cannot be read: spec.canary: invalid value: integer `4294967296`, expected u32",
    ] {
        assert!(shown.contains(want), "missing {want:?} in:\n{shown}");
    }
    let out = c.cli(&["status", "bad-null", "-o", "json"]);
    assert_eq!(out.status.code(), Some(3));
    let raw: Value = serde_json::from_slice(&out.stdout).expect("-o json");
    assert_eq!(raw["spec"]["batch"], Value::Null);
    assert_eq!(raw["status"]["phase"], "Invalid");
    let out = c.cli(&["status", "bad-negative", "--watch"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("spec.maxUnavailable.value"));
    let out = c.cli(&["history", "bad-big"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("rollout bad-big cannot be read (spec.canary: "),
        "{}",
        text(&out.stderr)
    );

    // The CRD tightened over them: the stored objects stay as they are, a change that
    // keeps the bad field is refused naming it, a fix makes the rollout readable again.
    let mut tight = generated_crd().expect("the CRD");
    tight["metadata"]["resourceVersion"] =
        c.server.crd(CRD_NAME).expect("the CRD")["metadata"]["resourceVersion"].clone();
    let (status, answer) = http(
        &c.server,
        "PUT",
        &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"),
        "application/json",
        &tight,
    );
    assert_eq!(status, 200, "{answer}");
    let merge = "application/merge-patch+json";
    let (status, answer) = http(
        &c.server,
        "PATCH",
        &format!("{ROLLOUTS}/bad-big"),
        merge,
        &serde_json::json!({"spec": {"paused": true}}),
    );
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or("")
            .contains("spec.canary"),
        "{answer}"
    );
    let (status, answer) = http(
        &c.server,
        "PATCH",
        &format!("{ROLLOUTS}/bad-null"),
        merge,
        &serde_json::json!({"spec": {"batch": 1}}),
    );
    assert_eq!(status, 200, "{answer}");
    let r = wait_until(DEADLINE, "bad-null readable again", || {
        let r = stored_rollout(&c, "bad-null");
        (condition(&r, "Valid")?["status"] == "True"
            && r["status"]["observedGeneration"] == r["metadata"]["generation"])
            .then_some(r)
    });
    assert_ne!(r["status"]["phase"], "Invalid", "{r}");
    assert!(
        ctl.is_running(),
        "the controller exited:\n{}",
        c.log("ctl-a")
    );
    ctl.signal(Signal::SIGTERM);
    assert!(ctl.wait_exit(DEADLINE).success());
}

#[test]
fn an_unreadable_rollout_whose_status_the_server_refuses_still_gets_its_event() {
    // Stored under the old CRD, then the CRD tightened before the controller starts: this
    // server validates the whole object on a status write (as servers before CRD
    // validation ratcheting do), so the report cannot go into the status; the Event
    // carries it, the write is not retried, and the other rollouts go on.
    let c = Cluster::with_crd(loose_crd());
    let _sim = c.sim(2);
    let spec = serde_json::json!({
        "config": {"namespace": NS, "name": "cfg-c"},
        "nodeSelector": {"pool": "none"},
        "canary": 4294967296u64,
    });
    let (status, answer) = http(
        &c.server,
        "POST",
        ROLLOUTS,
        "application/json",
        &rollout_object("bad-big", spec),
    );
    assert_eq!(status, 201, "{answer}");
    let mut tight = generated_crd().expect("the CRD");
    tight["metadata"]["resourceVersion"] =
        c.server.crd(CRD_NAME).expect("the CRD")["metadata"]["resourceVersion"].clone();
    let (status, answer) = http(
        &c.server,
        "PUT",
        &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"),
        "application/json",
        &tight,
    );
    assert_eq!(status, 200, "{answer}");
    c.server.clear_requests();
    let mut ctl = c.controller("ctl-a");
    c.start(
        "r1",
        "cfg-b",
        &["--canary", "0", "--batch", "2", "--max-unavailable", "2"],
    );
    c.wait_phase("r1", "Completed");
    let events = wait_until(DEADLINE, "the Event about bad-big", || {
        let events = events_about(&c, "bad-big");
        (!events.is_empty()).then_some(events)
    });
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["reason"], "Undecodable");
    let log = c.log("ctl-a");
    assert!(
        log.contains("refuses the status of the unreadable rollout"),
        "{log}"
    );
    // One status write tried, answered 422 naming the field, never retried.
    c.server
        .set_node_annotation(&node(0), "example.com/touch", Some("1"));
    std::thread::sleep(Duration::from_millis(500));
    let writes: Vec<(u16, String)> = c
        .server
        .requests()
        .into_iter()
        .filter(|r| r.path == format!("{ROLLOUTS}/bad-big/status"))
        .map(|r| (r.status, r.method))
        .collect();
    assert_eq!(writes, [(422, "PUT".to_string())]);
    assert!(stored_rollout(&c, "bad-big")
        .get("status")
        .is_none_or(|s| s["phase"] != "Invalid"));
    assert!(
        ctl.is_running(),
        "the controller exited:\n{}",
        c.log("ctl-a")
    );
    ctl.signal(Signal::SIGTERM);
    assert!(ctl.wait_exit(DEADLINE).success());
}

/// Issue 29 item 3: the controller's watches (Nodes, rollouts, the stop ConfigMap) against an
/// API server that fails them for a minute (every list and watch answered 503, the Lease
/// still served, so the controller keeps leading): at most 60 log lines in that minute, the
/// controller keeps running, and once the server serves them again a rollout completes
/// within the backoff cap (30 s after error statuses) plus 15 s. The minute is a bounded
/// sleep by design (the outage).
#[test]
fn watches_failing_for_a_minute_are_quiet_and_resume() {
    const OUTAGE: Duration = Duration::from_secs(60);
    let c = Cluster::new();
    let _sim = c.sim(3);
    let mut ctl = c.patient_controller("ctl-a");
    wait_until(DEADLINE, "ctl-a synced its caches", || {
        c.log("ctl-a")
            .contains("caches synced; reconciling rollouts")
            .then_some(())
    });
    for path in [
        "/api/v1/nodes",
        "/apis/kubelet-pivot.io/v1alpha1/kubeletconfigrollouts",
        "/api/v1/namespaces/kubelet-pivot/configmaps",
    ] {
        c.server.fail_next_matching(100_000, 503, "GET", path);
    }
    let from = c.log("ctl-a").len();
    c.server.drop_watches();
    std::thread::sleep(OUTAGE);
    let log = c.log("ctl-a");
    let lines: Vec<&str> = log[from..].lines().collect();
    eprintln!(
        "the controller's watches failing for {OUTAGE:?}: {} log lines (at most 60)",
        lines.len()
    );
    assert!(lines.len() <= 60, "{}", lines.join("\n"));
    for what in [
        "the watch of Nodes: failed (try ",
        "the watch of rollouts: failed (try ",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(what)),
            "no `{what}`:\n{}",
            lines.join("\n")
        );
    }
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("kube_client::client::builder")),
        "{}",
        lines.join("\n")
    );
    assert!(ctl.is_running(), "the controller exited:\n{log}");

    c.server.clear_faults();
    let back = std::time::Instant::now();
    c.start("r1", "cfg-b", &["--canary", "1", "--batch", "100%"]);
    wait_until(
        Duration::from_secs(30 + 15),
        "rollout r1 Completed after the watches resumed",
        || {
            let out = c.cli(&["status", "r1", "-o", "json"]);
            let r: Value = serde_json::from_slice(&out.stdout).ok()?;
            (r["status"]["phase"] == "Completed").then_some(())
        },
    );
    eprintln!(
        "the controller's watches back: a rollout started then Completed after {:?}",
        back.elapsed()
    );
    wait_until(DEADLINE, "the line saying the Nodes' watch is back", || {
        c.log("ctl-a")
            .contains("the watch of Nodes: API server back after")
            .then_some(())
    });
    ctl.signal(Signal::SIGTERM);
    assert!(ctl.wait_exit(DEADLINE).success());
}
