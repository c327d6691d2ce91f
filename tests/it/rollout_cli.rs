//! Issue 32 items 2 and 3, with the real binary against the strict test API server:
//! `rollout start` refuses what a node would refuse (a missing ConfigMap, a payload the
//! node's validator refuses, a selector that matches no node) and warns on a mutable
//! ConfigMap; `--dry-run` prints per node the class and action from the config the node
//! reports active; `config check`'s exit codes; `rollout status` prints a False
//! condition; `status --watch` off a terminal prints one line per change, and on one
//! (util-linux `script`) redraws in place.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use testkit::{ApiServer, NodeSim, SimOptions};

use crate::support::rollout::{self, CrdServer, Timings};
use crate::support::{pivot_bin, wait_until, Proc};

const NS: &str = "kubelet-config";
const STATUS: &str = "kubelet-pivot.io/config-status";
const DEADLINE: Duration = Duration::from_secs(30);

fn payload(extra: &str) -> String {
    format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{extra}")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

struct Cluster {
    server: ApiServer,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Cluster {
    fn new() -> Cluster {
        let CrdServer {
            server,
            dir,
            kubeconfig,
        } = CrdServer::start();
        Cluster {
            server,
            dir,
            kubeconfig,
        }
    }

    /// A ConfigMap with `body` as its `kubelet` key; returns (uid, resourceVersion).
    fn configmap(&self, name: &str, body: &str, immutable: bool) -> (String, String) {
        let data = BTreeMap::from([("kubelet".to_string(), body.to_string())]);
        let cm = self.server.create_configmap(NS, name, data, immutable);
        let field = |k: &str| cm["metadata"][k].as_str().expect(k).to_string();
        (field("uid"), field("resourceVersion"))
    }

    /// A node labelled pool=a, reporting `active` in its config-status annotation (None:
    /// no annotation), with `extra` annotations.
    fn node(&self, name: &str, active: Option<Value>, extra: &[(&str, &str)]) {
        let mut annotations: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(active) = active {
            let status =
                json!({"active": active, "assigned": active, "lastKnownGood": null, "error": null});
            annotations.push((STATUS.to_string(), status.to_string()));
        }
        self.server.create_node(name, annotations);
        self.server
            .patch_node(name, json!({"metadata": {"labels": {"pool": "a"}}}), false)
            .expect("label the node");
    }

    /// A rollout controller with short timings, logging to ctl.log.
    fn controller(&self) -> Proc {
        let log = std::fs::File::create(self.dir.path().join("ctl.log")).expect("log");
        rollout::controller(
            &self.kubeconfig,
            "ctl-a",
            &Timings {
                lease_duration: "2s",
                renew_deadline: "1500ms",
                retry_period: "250ms",
                debounce: "50ms",
            },
            &[],
            log,
        )
    }

    fn cli(&self, args: &[&str]) -> Output {
        rollout::cli(&self.kubeconfig, args)
    }

    fn stored(&self, name: &str) -> Option<Value> {
        rollout::stored(&self.server, name)
    }
}

fn remote(name: &str, (uid, rv): &(String, String)) -> Value {
    json!({"configMap": {"namespace": NS, "name": name, "uid": uid,
        "resourceVersion": rv, "kubeletConfigKey": "kubelet"}})
}

#[test]
fn start_refuses_what_a_node_would_refuse_and_warns_on_a_mutable_configmap() {
    let c = Cluster::new();
    c.configmap("good", &payload("maxPods: 50\n"), true);
    c.configmap("typo", &payload("maxPodz: 50\n"), true);
    c.configmap("mutable", &payload("maxPods: 60\n"), false);
    c.node("n1", None, &[]);
    let start = |name: &str, config: &str, extra: &[&str]| {
        let cfg = format!("{NS}/{config}");
        let mut args = vec!["start", name, "--config", &cfg];
        args.extend_from_slice(extra);
        c.cli(&args)
    };

    let out = start("r-missing", "nope", &[]);
    println!("{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("configmap kubelet-config/nope not found"),
        "{}",
        text(&out.stderr)
    );
    assert!(c.stored("r-missing").is_none());

    let out = start("r-typo", "typo", &[]);
    println!("{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("configmap kubelet-config/typo: unknown field \"maxPodz\"")
            && err.contains("--force"),
        "{err}"
    );
    assert!(c.stored("r-typo").is_none());
    let out = start("r-typo", "typo", &["--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("warning: configmap kubelet-config/typo: unknown field"),
        "{}",
        text(&out.stderr)
    );
    assert!(c.stored("r-typo").is_some());

    let out = start("r-mutable", "mutable", &[]);
    println!("{}{}", text(&out.stderr), text(&out.stdout));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("warning: configmap kubelet-config/mutable is mutable"),
        "{}",
        text(&out.stderr)
    );

    let out = start("r-ghost", "good", &["-l", "pool=zzz"]);
    println!("{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no node matches the selector pool=zzz"),
        "{}",
        text(&out.stderr)
    );
    assert!(c.stored("r-ghost").is_none());
    let out = start("r-ghost", "good", &["-l", "pool=zzz", "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("warning: no node matches the selector pool=zzz yet"),
        "{}",
        text(&out.stderr)
    );

    // All well: no warning at all.
    let out = start("r-good", "good", &["-l", "pool=a"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    assert!(c.stored("r-good").is_some());
}

#[test]
fn dry_run_shows_each_nodes_class_and_action_from_what_it_runs_now() {
    let c = Cluster::new();
    let v2 = c.configmap("v2", &payload("maxPods: 50\neventBurst: 20\n"), true);
    let events = c.configmap("v1-events", &payload("maxPods: 50\n"), true);
    let pods = c.configmap("v1-pods", &payload("maxPods: 110\neventBurst: 20\n"), true);
    let cgroup = c.configmap(
        "v1-cgroup",
        &payload("maxPods: 50\neventBurst: 20\ncgroupDriver: systemd\n"),
        true,
    );
    let edited = c.configmap("v1-edited", &payload("maxPods: 50\n"), false);
    c.server
        .update_configmap_data(
            NS,
            "v1-edited",
            BTreeMap::from([("kubelet".to_string(), payload("maxPods: 70\n"))]),
        )
        .expect("edit the ConfigMap");
    c.node("n-a-restart", Some(remote("v1-events", &events)), &[]);
    c.node("n-b-drain", Some(remote("v1-pods", &pods)), &[]);
    c.node(
        "n-c-own-actions",
        Some(remote("v1-pods", &pods)),
        &[("kubelet-pivot.io/disruption-actions", "allocatable=restart")],
    );
    c.node("n-d-held", Some(remote("v1-cgroup", &cgroup)), &[]);
    c.node("n-e-local", Some(Value::Null), &[]);
    c.node("n-f-edited", Some(remote("v1-edited", &edited)), &[]);
    c.node("n-g-same", Some(remote("v2", &v2)), &[]);
    c.node("n-h-silent", None, &[]);
    let before = c.server.requests().len();

    let out = c.cli(&["start", "r1", "--config", &format!("{NS}/v2"), "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    println!("{shown}");
    let line = |node: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(node))
            .unwrap_or_else(|| panic!("no line for {node} in:\n{shown}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        line("n-a-restart")[2..5],
        ["in-place", "restart", "eventBurst"]
    );
    assert_eq!(line("n-b-drain")[2..5], ["allocatable", "drain", "maxPods"]);
    assert_eq!(line("n-c-own-actions")[2..4], ["allocatable", "restart"]);
    assert_eq!(
        line("n-d-held")[2..5],
        ["node-replacing", "hold", "cgroupDriver"]
    );
    assert_eq!(line("n-e-local")[1..4], ["local", "unknown", "-"]);
    assert!(line("n-e-local")
        .join(" ")
        .contains("runs its local config"));
    assert_eq!(line("n-f-edited")[2], "unknown");
    assert!(line("n-f-edited")
        .join(" ")
        .contains("changed since the node loaded it"));
    assert_eq!(line("n-g-same")[2..4], ["-", "none"]);
    assert_eq!(line("n-h-silent")[2], "unknown");
    assert!(
        shown.contains("\n2 restart, 1 drain, 1 held, 1 unchanged, 3 unknown\n"),
        "{shown}"
    );
    assert!(c.stored("r1").is_none(), "a dry run creates nothing");
    let writes: Vec<_> = c.server.requests()[before..]
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "a dry run writes nothing: {writes:?}");

    let out = c.cli(&[
        "start",
        "r1",
        "--config",
        &format!("{NS}/v2"),
        "--dry-run",
        "-o",
        "json",
    ]);
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        r["totals"],
        json!({"restart": 2, "drain": 1, "held": 1, "unchanged": 1, "unknown": 3})
    );
    let held = r["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["node"] == "n-d-held")
        .expect("n-d-held");
    assert_eq!(held["class"], "node-replacing");
    assert_eq!(held["action"], "hold");
}

#[test]
fn config_check_exit_codes_say_what_a_pipeline_needs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, body).expect("write");
        path.display().to_string()
    };
    let old = file("old.yaml", &payload("maxPods: 110\n"));
    let events = file("events.yaml", &payload("maxPods: 110\neventBurst: 20\n"));
    let pods = file("pods.yaml", &payload("maxPods: 50\n"));
    let cgroup = file(
        "cgroup.yaml",
        &payload("maxPods: 110\ncgroupDriver: systemd\n"),
    );
    let bad = file("bad.yaml", &payload("port: 70000\nmaxPodz: 1\n"));
    let invalid = file("invalid.yaml", &payload("port: 70000\n"));
    let check = |args: &[&str]| {
        let out = Command::new(pivot_bin())
            .args(["config", "check"])
            .args(args)
            .output()
            .expect("run config check");
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    assert_eq!(check(&[&old]).0, Some(0));
    let (code, out, _) = check(&[&invalid]);
    assert_eq!(code, Some(1));
    assert!(
        out.contains("port (70000) must be between 1 and 65535"),
        "{out}"
    );
    let (code, out, _) = check(&[&bad, "-o", "json"]);
    assert_eq!(code, Some(1));
    let r: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(r["problems"][0]["field"], "maxPodz");
    assert_eq!(check(&[&events, "--against", &old]).0, Some(0));
    let (code, out, _) = check(&[&pods, "--against", &old]);
    assert_eq!(code, Some(4));
    assert!(out.contains("allocatable change: drain"), "{out}");
    assert_eq!(
        check(&[
            &pods,
            "--against",
            &old,
            "--disruption-action",
            "allocatable=restart"
        ])
        .0,
        Some(0)
    );
    assert_eq!(check(&[&cgroup, "--against", &old]).0, Some(5));
    assert_eq!(check(&[&old, "--against", &bad]).0, Some(3));
    let (code, _, err) = check(&[&dir.path().join("none.yaml").display().to_string()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("cannot read"), "{err}");
    let (_, help, _) = check(&["--help"]);
    assert!(help.contains("4 the change needs a drain"), "{help}");
}

#[test]
fn status_shows_a_false_condition_and_watch_prints_one_line_per_change() {
    let c = Cluster::new();
    let sim = NodeSim::start(
        &c.server,
        SimOptions {
            react_after: Duration::from_millis(20),
            ..SimOptions::default()
        },
    );
    sim.add_nodes(2, "node-", |_| BTreeMap::new());
    let _ctl = c.controller();
    let out = c.cli(&[
        "start",
        "r1",
        "--config",
        &format!("{NS}/later"),
        "--force",
        "--canary",
        "0",
        "--batch",
        "1",
        "--no-pods-gate",
        "--no-fallback-for",
        "0s",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = wait_until(DEADLINE, "status shows ConfigFound=False", || {
        let out = c.cli(&["status", "r1"]);
        let shown = text(&out.stdout);
        shown.contains("ConfigFound=False").then_some(shown)
    });
    assert!(
        shown.contains(
            "ConfigFound=False: ConfigMissing (cannot start a revision of kubelet-config/later:kubelet: "
        ) && shown.contains("not found"),
        "{shown}"
    );

    // --watch, stdout a file: one line per change until the rollout completes.
    let watched = c.dir.path().join("watch.out");
    let mut cmd = Command::new(pivot_bin());
    cmd.args(["rollout", "status", "r1", "--watch", "--kubeconfig"])
        .arg(&c.kubeconfig)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&watched).expect("watch output"))
        .stderr(Stdio::null());
    let mut watch = Proc::spawn(&mut cmd);
    // The same on a terminal (util-linux `script` gives it one): redrawn in place.
    let on_tty = c.dir.path().join("tty.out");
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c"])
        .arg(format!(
            "{} rollout status r1 --watch --kubeconfig {}",
            pivot_bin().display(),
            c.kubeconfig.display()
        ))
        .arg("/dev/null")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&on_tty).expect("tty output"))
        .stderr(Stdio::null());
    let mut tty_watch = Proc::spawn(&mut cmd);
    for file in [&watched, &on_tty] {
        wait_until(DEADLINE, "the watch's first lines", || {
            let out = std::fs::read_to_string(file).ok()?;
            out.contains("ConfigFound=False").then_some(())
        });
    }
    c.configmap("later", &payload("maxPods: 50\n"), true);
    let status = watch.wait_exit(DEADLINE);
    assert!(status.success(), "{status:?}");
    let status = tty_watch.wait_exit(DEADLINE);
    assert!(status.success(), "{status:?}");
    let drawn = std::fs::read_to_string(&on_tty).expect("tty output");
    let redraws = drawn.matches("\u{1b}[J").count();
    assert!(redraws >= 1, "redrawn in place: {drawn:?}");
    assert_eq!(
        drawn.matches("ROLLOUT  r1").count(),
        redraws + 1,
        "{drawn:?}"
    );
    let last = drawn.rsplit("\u{1b}[J").next().unwrap_or_default();
    assert!(last.contains("PHASE    Completed"), "{drawn:?}");
    assert!(!last.contains("ConfigFound=False"), "{drawn:?}");
    let out = std::fs::read_to_string(&watched).expect("watch output");
    println!("{shown}\n{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() >= 3, "{out}");
    assert!(lines.iter().all(|l| l.starts_with("rollout r1: ")), "{out}");
    assert!(
        !out.contains('\u{1b}'),
        "no terminal control off a terminal: {out:?}"
    );
    assert!(
        lines.windows(2).all(|w| w[0] != w[1]),
        "a line per change: {out}"
    );
    assert!(
        lines[0].contains("; ConfigFound=False: ConfigMissing ("),
        "{out}"
    );
    let last = lines.last().copied().unwrap_or_default();
    assert_eq!(
        last, "rollout r1: Completed, revision 1: 2 done, 0 in progress, 0 failed, 0 pending of 2",
        "{out}"
    );
}

/// Issue 34 item 6: `-o json` indented as `status -o json` is, `-o yaml` as kubectl
/// prints it, for the object (`start`, `status`) and the history.
#[test]
fn json_and_yaml_output_print_as_kubectl_does() {
    let c = Cluster::new();
    c.node("node-a", None, &[]);
    let later = format!("{NS}/later");
    let out = c.cli(&["start", "r1", "--config", &later, "--force", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json = text(&out.stdout);
    assert!(json.starts_with("{\n  \"apiVersion\": "), "{json}");
    let started: Value = serde_json::from_str(&json).expect("start -o json is JSON");
    assert_eq!(started["metadata"]["name"], "r1");

    let out = c.cli(&["status", "r1", "-o", "yaml"]);
    assert!(
        out.status.success() || out.status.code() == Some(3),
        "{out:?}"
    );
    let yaml = text(&out.stdout);
    assert!(
        yaml.starts_with("apiVersion: kubelet-pivot.io/v1alpha1\nkind: KubeletConfigRollout\n"),
        "{yaml}"
    );
    let shown: Value = serde_yaml_ng::from_str(&yaml).expect("status -o yaml is YAML");
    assert_eq!(shown["metadata"]["name"], "r1", "{yaml}");

    let out = c.cli(&["history", "r1", "-o", "yaml"]);
    assert!(out.status.success(), "{out:?}");
    let history: Value = serde_yaml_ng::from_str(&text(&out.stdout)).expect("history -o yaml");
    assert!(history.is_array(), "{history}");
}

/// Issue 34: `-l` takes what `kubectl get nodes -l` takes. The set-based parts reach the
/// spec as `nodeSelectorExpressions`; the dry run, the server's list and the controller
/// pick the same nodes; a new `-l` replaces the old selector whole; a bad one is refused
/// with the place before any request.
#[test]
fn set_based_selectors_pick_the_nodes_kubectl_would() {
    let c = Cluster::new();
    c.configmap("good", &payload("maxPods: 50\n"), true);
    let sim = NodeSim::start(
        &c.server,
        SimOptions {
            react_after: Duration::from_millis(20),
            ..SimOptions::default()
        },
    );
    // 0: pool=a, 1: pool=b, 2: pool=c, 3: pool=a + spot, 4: no labels.
    let names = sim.add_nodes(5, "node-", |i| {
        let mut labels = BTreeMap::new();
        if i < 4 {
            labels.insert("pool".to_string(), ["a", "b", "c", "a"][i].to_string());
        }
        if i == 3 {
            labels.insert("spot".to_string(), "true".to_string());
        }
        labels
    });
    let chosen = [names[0].clone(), names[1].clone()];
    let selector = "pool in (a,b),!spot";
    let cfg = format!("{NS}/good");

    let before = c.server.requests().len();
    for (bad, want) in [
        (
            "pool in (a,b",
            "--selector \"pool in (a,b\": expected \",\" or \")\"",
        ),
        ("pool>1", "not in a label selector"),
        ("pool=a,pool=b", "pool=a and pool=b can never both hold"),
    ] {
        let out = c.cli(&["start", "r1", "--config", &cfg, "-l", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(
            text(&out.stderr).contains(want),
            "{bad}: {}",
            text(&out.stderr)
        );
    }
    assert_eq!(
        c.server.requests().len(),
        before,
        "a bad selector is refused before any request"
    );

    let out = c.cli(&["start", "r1", "--config", &cfg, "-l", selector, "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let listed: Vec<&str> = names
        .iter()
        .filter(|n| shown.lines().any(|l| l.starts_with(n.as_str())))
        .map(String::as_str)
        .collect();
    assert_eq!(listed, chosen, "{shown}");

    let _ctl = c.controller();
    let out = c.cli(&[
        "start",
        "r1",
        "--config",
        &cfg,
        "-l",
        selector,
        "--canary",
        "0",
        "--batch",
        "100%",
        "--no-pods-gate",
        "--no-fallback-for",
        "0s",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let spec = c.stored("r1").expect("created")["spec"].clone();
    assert_eq!(
        spec["nodeSelectorExpressions"],
        json!([
            {"key": "pool", "operator": "In", "values": ["a", "b"]},
            {"key": "spot", "operator": "DoesNotExist"}
        ])
    );
    let status = wait_until(DEADLINE, "the rollout completes", || {
        let r = c.stored("r1")?;
        (r["status"]["phase"] == "Completed").then(|| r["status"].clone())
    });
    assert_eq!(status["counts"]["total"], 2, "{status}");
    let assigned: Vec<&str> = names
        .iter()
        .filter(|n| {
            c.server.node(n)["metadata"]["annotations"]
                .get("kubelet-pivot.io/config-source")
                .is_some()
        })
        .map(String::as_str)
        .collect();
    assert_eq!(
        assigned, chosen,
        "the controller picked what the dry run showed"
    );

    // A new -l replaces the old selector whole: no label or expression left over.
    let reselect = |sel: &str| {
        let out = c.cli(&["start", "r1", "--config", &cfg, "-l", sel, "--force"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        c.stored("r1").expect("kept")["spec"].clone()
    };
    let spec = reselect("pool=c");
    assert_eq!(spec["nodeSelector"], json!({"pool": "c"}), "{spec}");
    let no_expressions = spec
        .get("nodeSelectorExpressions")
        .is_none_or(|e| e == &json!([]));
    assert!(no_expressions, "{spec}");
    let spec = reselect("zone notin (z1)");
    let no_labels = spec.get("nodeSelector").is_none_or(|s| s == &json!({}));
    assert!(no_labels, "{spec}");
}
