//! The alerts, their runbooks and the dashboard of `manifests/optional/monitoring/`:
//!
//! * the plain rules file and the PrometheusRule hold the same groups, and the PrometheusRule
//!   is one (apiVersion, kind, name, namespace);
//! * every alert the issue asks for exists, and every alert has a severity, a summary, a
//!   description and a `runbook_url` naming its section of `docs/runbooks.md`, which says
//!   what it means and what to do (and no section is left without its alert);
//! * `promtool check rules` passes on both files and on the dashboard's queries, and
//!   `promtool test rules` passes on `tests/*.yaml`, which fire and do not fire every alert
//!   (Debian's `prometheus` package; missing, the test fails, as for every tool the suite
//!   needs);
//! * every metric the rules and the dashboard read is exported: the names come from the
//!   `# TYPE` lines of a real supervisor's and a real rollout controller's `/metrics`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_yaml_ng::Value;
use support::command::{run, text};
use support::promql::{exported_names, metric_names};
use support::rollout::{self, CrdServer, Timings};
use support::scrape::{free_addr, request, scrape};
use support::{wait_until, Proc, Scene};

const MONITORING: &str = "manifests/optional/monitoring";
const RULES: &str = "prometheus-rules.yaml";
const PROMETHEUS_RULE: &str = "prometheusrule.yaml";
const DASHBOARD: &str = "grafana-dashboard.json";
const RUNBOOKS: &str = "docs/runbooks.md";
/// The alerts issue 32 asks for: a node without a kubelet, a config rolled back or known
/// bad, a drain stuck, a change held for replacement, a rollout paused on failures, the
/// global stop on for a day, a supervisor not scraped.
const REQUIRED: &[&str] = &[
    "KubeletPivotNodeWithoutKubelet",
    "KubeletPivotConfigRolledBack",
    "KubeletPivotDrainStuck",
    "KubeletPivotChangeHeld",
    "KubeletPivotRolloutPausedOnFailures",
    "KubeletPivotGlobalStopLong",
    "KubeletPivotSupervisorDown",
    "KubeletPivotSupervisorsAbsent",
];
const SEVERITIES: &[&str] = &["critical", "warning", "info"];
/// Prometheus' own series the rules may read.
const PROMETHEUS_OWN: &[&str] = &["up"];
const PROMTOOL_INSTALL: &str =
    "apt-get install prometheus (Debian's package has promtool; scripts/deps.sh installs it)";
const DEADLINE: Duration = Duration::from_secs(10);
/// A scrape asking for the text format 0.0.4 (`_total` in the counters' TYPE lines, as
/// Prometheus names their samples).
const TEXT_FORMAT_GET: &str =
    "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn monitoring(file: &str) -> PathBuf {
    root().join(MONITORING).join(file)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

fn yaml(path: &Path) -> Value {
    serde_yaml_ng::from_str(&read(path))
        .unwrap_or_else(|err| panic!("{} is not YAML: {err}", path.display()))
}

fn groups() -> Value {
    yaml(&monitoring(RULES))["groups"].clone()
}

/// Every rule of `groups` (alerting or recording).
fn rules(groups: &Value) -> Vec<Value> {
    groups
        .as_sequence()
        .expect("groups is a list")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .collect()
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// The problems of a PrometheusRule whose groups should be `want`.
fn prometheus_rule_problems(doc: &Value, want: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, expected) in [
        ("apiVersion", "monitoring.coreos.com/v1"),
        ("kind", "PrometheusRule"),
    ] {
        if str_at(doc, key) != expected {
            problems.push(format!("{key} is {:?}, not {expected}", doc[key]));
        }
    }
    for key in ["name", "namespace"] {
        if str_at(&doc["metadata"], key).is_empty() {
            problems.push(format!("metadata.{key} is missing"));
        }
    }
    if &doc["spec"]["groups"] != want {
        problems.push(format!(
            "spec.groups differs from {RULES}'s groups: change both (one is a copy of the other)"
        ));
    }
    problems
}

#[test]
fn the_prometheus_rule_holds_the_rules_file_groups() {
    let doc = yaml(&monitoring(PROMETHEUS_RULE));
    let problems = prometheus_rule_problems(&doc, &groups());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // And the check sees a difference.
    let mut broken = doc.clone();
    broken["spec"]["groups"][0]["rules"][0]["for"] = Value::from("2m");
    broken["kind"] = Value::from("ConfigMap");
    assert_eq!(prometheus_rule_problems(&broken, &groups()).len(), 2);
}

/// The `## Heading` sections of the runbooks, by heading, with their text.
fn runbook_sections() -> BTreeMap<String, String> {
    let text = read(&root().join(RUNBOOKS));
    let mut sections = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            sections.extend(current.take());
            current = Some((title.trim().to_string(), String::new()));
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    sections.extend(current);
    sections
}

/// The problems of the alerts of `groups` against the runbooks' `sections`.
fn alert_problems(groups: &Value, sections: &BTreeMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    let alerts: Vec<Value> = rules(groups)
        .into_iter()
        .filter(|r| !str_at(r, "alert").is_empty())
        .collect();
    let names: BTreeSet<&str> = alerts.iter().map(|a| str_at(a, "alert")).collect();
    for required in REQUIRED {
        if !names.contains(required) {
            problems.push(format!("no alert {required}"));
        }
    }
    for a in &alerts {
        let name = str_at(a, "alert");
        if !SEVERITIES.contains(&str_at(&a["labels"], "severity")) {
            problems.push(format!("{name}: severity not one of {SEVERITIES:?}"));
        }
        for key in ["summary", "description"] {
            if str_at(&a["annotations"], key).trim().is_empty() {
                problems.push(format!("{name}: no {key}"));
            }
        }
        let want = format!("{RUNBOOKS}#{}", name.to_ascii_lowercase());
        if str_at(&a["annotations"], "runbook_url") != want {
            problems.push(format!("{name}: runbook_url is not {want}"));
        }
        match sections.get(name) {
            None => problems.push(format!("{name}: no section \"## {name}\" in {RUNBOOKS}")),
            Some(body) => {
                for part in ["**Means.**", "**Do.**"] {
                    if !body.contains(part) {
                        problems.push(format!("{name}: its runbook lacks {part}"));
                    }
                }
            }
        }
    }
    for title in sections.keys().filter(|t| t.starts_with("KubeletPivot")) {
        if !names.contains(title.as_str()) {
            problems.push(format!("{RUNBOOKS}: section {title} has no alert"));
        }
    }
    problems
}

#[test]
fn every_alert_has_severity_summary_description_and_a_runbook() {
    let sections = runbook_sections();
    let problems = alert_problems(&groups(), &sections);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // And the check fails where it should: no severity, a wrong link, a missing alert.
    let mut broken = groups();
    broken[0]["rules"][0]["labels"]["severity"] = Value::from("page");
    broken[0]["rules"][1]["annotations"]["runbook_url"] = Value::from("docs/runbooks.md#x");
    broken[0]["rules"][2]["alert"] = Value::from("Renamed");
    let problems = alert_problems(&broken, &sections);
    assert!(problems.len() >= 4, "{problems:#?}");
}

/// promtool (`PROMTOOL` or the one on PATH); fails the test when it is missing, as every
/// tool the suite needs does (scripts/deps.sh installs it).
fn promtool() -> PathBuf {
    let tool =
        std::env::var_os("PROMTOOL").map_or_else(|| PathBuf::from("promtool"), PathBuf::from);
    let found = Command::new(&tool).arg("--version").output();
    if found.as_ref().is_ok_and(|out| out.status.success()) {
        return tool;
    }
    let why = match found {
        Ok(out) => format!("{} --version failed: {}", tool.display(), text(&out)),
        Err(err) => format!("{} not found: {err}", tool.display()),
    };
    panic!("{why}; the alert rules must be checked: {PROMTOOL_INSTALL}");
}

/// Runs promtool with `args`; panics with its output unless it succeeds. Returns its output.
fn promtool_ok(tool: &Path, args: &[&str], files: &[PathBuf]) -> String {
    let mut cmd = Command::new(tool);
    cmd.args(args).args(files);
    let out = run(cmd);
    let said = text(&out);
    assert!(
        out.status.success(),
        "promtool {args:?} {files:?} failed:\n{said}"
    );
    eprintln!("promtool {}:\n{said}", args.join(" "));
    said
}

/// The alerts each promtool test file expects to fire (`exp_alerts` not empty) and not to.
fn tested_alerts(files: &[PathBuf]) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut firing, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for file in files {
        let doc = yaml(file);
        for test in doc["tests"].as_sequence().cloned().unwrap_or_default() {
            for case in test["alert_rule_test"]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
            {
                let name = str_at(&case, "alertname").to_string();
                let fires = case["exp_alerts"]
                    .as_sequence()
                    .is_some_and(|a| !a.is_empty());
                if fires {
                    firing.insert(name);
                } else {
                    quiet.insert(name);
                }
            }
        }
    }
    (firing, quiet)
}

fn test_files() -> Vec<PathBuf> {
    let dir = monitoring("tests");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("list {}: {err}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no promtool tests in {}", dir.display());
    files
}

/// The dashboard's PromQL expressions.
fn dashboard_exprs() -> Vec<String> {
    let path = monitoring(DASHBOARD);
    let dash: serde_json::Value = serde_json::from_str(&read(&path))
        .unwrap_or_else(|err| panic!("{} is not JSON: {err}", path.display()));
    let mut exprs = Vec::new();
    let mut panels: Vec<serde_json::Value> = dash["panels"].as_array().cloned().unwrap_or_default();
    while let Some(p) = panels.pop() {
        panels.extend(p["panels"].as_array().cloned().unwrap_or_default());
        for t in p["targets"].as_array().cloned().unwrap_or_default() {
            exprs.extend(t["expr"].as_str().map(str::to_string));
        }
    }
    assert!(!exprs.is_empty(), "no queries in {}", path.display());
    exprs
}

#[test]
fn promtool_checks_and_tests_the_rules() {
    let tests = test_files();
    // Every alert fires in a test, and is shown not firing in one.
    let alerts: BTreeSet<String> = rules(&groups())
        .iter()
        .map(|r| str_at(r, "alert").to_string())
        .filter(|a| !a.is_empty())
        .collect();
    let (firing, quiet) = tested_alerts(&tests);
    let untested: Vec<_> = alerts.difference(&firing).collect();
    let never_quiet: Vec<_> = alerts.difference(&quiet).collect();
    assert!(
        untested.is_empty() && never_quiet.is_empty(),
        "alerts never firing in {MONITORING}/tests: {untested:?}; never shown quiet: {never_quiet:?}"
    );
    let tool = promtool();
    let dir = tempfile::tempdir().expect("temp dir");
    // The PrometheusRule's spec as a rules file, and the dashboard's queries as recording
    // rules: promtool parses every expression.
    let spec = dir.path().join("prometheusrule-spec.yaml");
    let doc = yaml(&monitoring(PROMETHEUS_RULE));
    let groups_only =
        serde_yaml_ng::to_string(&BTreeMap::from([("groups", &doc["spec"]["groups"])]))
            .expect("YAML");
    fs::write(&spec, groups_only).expect("write the spec");
    let dash = dir.path().join("dashboard-queries.yaml");
    let recording: Vec<Value> = dashboard_exprs()
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut rule = serde_yaml_ng::Mapping::new();
            rule.insert("record".into(), format!("dashboard:query{i}").into());
            rule.insert("expr".into(), e.as_str().into());
            Value::Mapping(rule)
        })
        .collect();
    let dash_rules = serde_yaml_ng::to_string(&BTreeMap::from([(
        "groups",
        vec![BTreeMap::from([
            ("name", Value::from("dashboard")),
            ("rules", Value::Sequence(recording)),
        ])],
    )]))
    .expect("YAML");
    fs::write(&dash, dash_rules).expect("write the dashboard's queries");
    let checked = promtool_ok(&tool, &["check", "rules"], &[monitoring(RULES), spec, dash]);
    assert_eq!(checked.matches("SUCCESS").count(), 3, "{checked}");
    let tested = promtool_ok(&tool, &["test", "rules"], &tests);
    assert_eq!(tested.matches("SUCCESS").count(), tests.len(), "{tested}");
    // And promtool does fail a test whose expectation is wrong.
    let wrong = dir.path().join("wrong.yaml");
    let rules_path = monitoring(RULES);
    fs::write(
        &wrong,
        format!(
            "rule_files: [{rules:?}]\ntests:\n  - interval: 1m\n    input_series:\n      - series: kubelet_pivot_node_kubelet_running{{node=\"n\"}}\n        values: 1x10\n    alert_rule_test:\n      - eval_time: 5m\n        alertname: KubeletPivotNodeWithoutKubelet\n        exp_alerts: [{{exp_labels: {{node: n, severity: critical}}}}]\n",
            rules = rules_path.display().to_string()
        ),
    )
    .expect("write the wrong test");
    let out = run({
        let mut cmd = Command::new(&tool);
        cmd.args(["test", "rules"]).arg(&wrong);
        cmd
    });
    assert!(
        !out.status.success(),
        "a wrong expectation passed:\n{}",
        text(&out)
    );
}

/// The metric names each expression of the rules and the dashboard reads, by where.
fn used_names() -> BTreeMap<String, BTreeSet<String>> {
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let exprs = rules(&groups())
        .iter()
        .map(|r| {
            (
                format!("{RULES} {}", str_at(r, "alert")),
                str_at(r, "expr").to_string(),
            )
        })
        .chain(
            dashboard_exprs()
                .into_iter()
                .map(|e| (DASHBOARD.to_string(), e)),
        )
        .collect::<Vec<_>>();
    for (place, expr) in exprs {
        for name in metric_names(&expr) {
            used.entry(name).or_default().insert(place.clone());
        }
    }
    used
}

/// A bootstrap supervisor (no API server) serving `/metrics` at `addr`.
fn supervisor(scene: &Scene, addr: SocketAddr) -> Proc {
    let addr = addr.to_string();
    let args = [
        "bootstrap",
        "--stop-timeout",
        "2s",
        "--metrics-address",
        &addr,
    ];
    scene.spawn(scene.pivot(&args, &[], &[]))
}

/// A supervisor's `/metrics` (bootstrap, no API server) as the text format.
fn supervisor_metrics(scene: &Scene, addr: SocketAddr) -> String {
    let _boot = supervisor(scene, addr);
    // Its kubelet runs, and the node-wide family says so (the node's holder record).
    wait_until(DEADLINE, "the supervisor's /metrics", || {
        scrape(addr).ok().filter(|m| {
            m.get("kubelet_pivot_kubelet_running") == Some(1.0)
                && m.series_of("kubelet_pivot_node_kubelet_running")
                    .iter()
                    .any(|(series, v)| series.contains("node=\"") && *v == 1.0)
        })
    })
    .text
}

/// A rollout controller's `/metrics`, against the test API server.
fn controller_metrics() -> String {
    let CrdServer {
        server,
        dir,
        kubeconfig,
    } = CrdServer::start();
    // A rollout created paused: its per-rollout families (targets by state, the pause
    // and its reason) exist only while there is one.
    let config = BTreeMap::from([(
        "kubelet".to_string(),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n".to_string(),
    )]);
    server.create_configmap("kubelet-config", "cfg", config, true);
    server.create_node("node-a", Vec::<(String, String)>::new());
    rollout::cli_ok(
        &kubeconfig,
        &[
            "start",
            "r",
            "--config",
            "kubelet-config/cfg",
            "--paused",
            "--no-pods-gate",
        ],
    );
    // And the global stop on, for its gauges.
    rollout::cli_ok(&kubeconfig, &["global-stop", "on"]);
    let log_path = dir.path().join("controller.log");
    let log = fs::File::create(&log_path).expect("controller log");
    let timings = Timings {
        lease_duration: "2s",
        renew_deadline: "1500ms",
        retry_period: "250ms",
        debounce: "50ms",
    };
    let _ctl = rollout::controller(
        &kubeconfig,
        "alerts",
        &timings,
        &["--metrics-address", "127.0.0.1:0"],
        log,
    );
    let addr: SocketAddr = wait_until(DEADLINE, "the controller serves /metrics", || {
        let log = fs::read_to_string(&log_path).ok()?;
        let line = log.lines().find(|l| l.contains("serving /metrics"))?;
        let (_, rest) = line.split_once("address=")?;
        rest.split_whitespace().next()?.parse().ok()
    });
    // The raw text: support::scrape's strict parser knows no histograms.
    wait_until(
        DEADLINE,
        "the controller's /metrics with the paused rollout",
        || {
            request(addr, TEXT_FORMAT_GET)
                .ok()
                .filter(|(code, _, body)| {
                    *code == 200
                        && body.contains("kubelet_pivot_rollout_paused{")
                        && body.contains("\nkubelet_pivot_global_stop 1\n")
                })
                .map(|(_, _, body)| body)
        },
    )
}

/// What KubeletPivotGlobalStopLong reads: the switch's creation time, seconds ago.
fn global_stop_age(exposition: &str) -> f64 {
    let since: f64 = exposition
        .lines()
        .find_map(|l| l.strip_prefix("kubelet_pivot_global_stop_since_timestamp_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no global stop time in\n{exposition}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    now - since
}

#[test]
fn every_metric_the_rules_and_the_dashboard_read_is_exported() {
    let scene = Scene::new();
    let node = supervisor_metrics(&scene, free_addr());
    let controller = controller_metrics();
    let age = global_stop_age(&controller);
    assert!((0.0..60.0).contains(&age), "the global stop is {age} s old");
    let mut exported = exported_names(&node);
    exported.extend(exported_names(&controller));
    exported.extend(PROMETHEUS_OWN.iter().map(|s| s.to_string()));
    let used = used_names();
    let unknown: Vec<String> = used
        .iter()
        .filter(|(name, _)| !exported.contains(*name))
        .map(|(name, places)| format!("{name} (in {places:?})"))
        .collect();
    assert!(
        unknown.is_empty(),
        "metrics read but not exported:\n{}\nexported: {exported:?}",
        unknown.join("\n")
    );
    // The check is not empty: both exporters' metrics are read, histograms by their samples.
    for name in [
        "kubelet_pivot_node_kubelet_running",
        "kubelet_pivot_rollout_paused",
        "kubelet_pivot_rollout_reconcile_duration_seconds_bucket",
        "up",
    ] {
        assert!(used.contains_key(name), "{name} is not read: {used:?}");
    }
}

/// The value of the one sample of `family` on a node (any `node` label), if any.
fn node_value(m: &support::scrape::Exposition, family: &str) -> Option<f64> {
    let samples = m.series_of(family);
    match samples.as_slice() {
        [(series, v)] if series.contains("node=\"") => Some(*v),
        _ => None,
    }
}

#[test]
fn a_refused_assignment_turns_the_rolled_back_family_on() {
    let scene = Scene::new();
    let addr = free_addr();
    let _boot = supervisor(&scene, addr);
    wait_until(DEADLINE, "a kubelet and nothing bad", || {
        scrape(addr).ok().filter(|m| {
            node_value(m, "kubelet_pivot_node_kubelet_running") == Some(1.0)
                && node_value(m, "kubelet_pivot_assigned_config_bad") == Some(0.0)
        })
    });
    // What KubeletPivotConfigRolledBack reads: a config that fails validation, assigned
    // with --force, is marked bad and never runs.
    let file = scene.kubelet_config_file("bad.yaml", "port: 70000\n");
    let mut assign = Command::new(support::pivot_bin());
    assign
        .args(["checkpoint", "assign", "--force"])
        .arg(&file)
        .arg("--dynamic-config-dir")
        .arg(scene.config_dir());
    let out = run(assign);
    assert!(out.status.success(), "{}", text(&out));
    let m = wait_until(DEADLINE, "the assigned config reported bad", || {
        scrape(addr)
            .ok()
            .filter(|m| node_value(m, "kubelet_pivot_assigned_config_bad") == Some(1.0))
    });
    assert_eq!(m.value("kubelet_pivot_bad_configs"), 1.0, "{}", m.text);
    assert_eq!(
        node_value(&m, "kubelet_pivot_node_kubelet_running"),
        Some(1.0),
        "{}",
        m.text
    );
}
