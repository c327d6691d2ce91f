//! The Kubernetes API sync end to end: the real `kubelet-pivot` binary talks real HTTP to the
//! strict fake API server (the `testkit` crate) with the node's credentials (Node authorizer,
//! NodeRestriction and the RBAC of the shipped manifests; every test checks that nothing it
//! did not deny on purpose was refused), runs the stand-in kubelet and keeps its checkpoint
//! store on disk. Every wait is on an observable fact (a kubelet's `start` line,
//! the Node object on the server, the store, the server's request log); the few bounded sleeps
//! check that something does NOT happen and say so.
//!
//! Build the stand-in first: `cargo build --examples && cargo test --test it api_sync::`.

use crate::support;

use crate::support::scrape;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::api_node::{
    condition_of, ApiNode, CONDITION, NODE, NS, SOURCE_ANNOTATION, STATUS_ANNOTATION,
};
use support::kubectl::Kubectl;
use support::lock_state::status_json;
use support::{kubelet_config, wait_until, Proc};
use testkit::rbac::Policy;
use testkit::RequestRecord;

/// A stand-in kubelet whose --config contains this crashes 50 ms after start.
const CRASH_MARK: &str = "crashme.example";
/// Deadline for anything the product should do promptly.
const DEADLINE: Duration = Duration::from_secs(8);
/// Window of a "does NOT happen" check (a bounded sleep by design).
const QUIET_WINDOW: Duration = Duration::from_millis(1500);
/// The v1.11 prefix, then the validator's own words.
const VALIDATE_FAILED: &str =
    "failed to validate config: port (70000) must be between 1 and 65535, inclusive";
const SYNC_FAILED_PREFIX: &str = "failed to sync, desired config unclear, cause:";

// ------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------

/// One node: a scene, a fake API server with the Node registered, and a kubeconfig with the
/// node's credentials (as the bootstrap and the DaemonSet use: the server authorizes them with
/// its Node authorizer, NodeRestriction and the RBAC of the top-level `manifests/*.yaml`).
/// Dropped at the end of a test that did not panic, it checks that the server refused the
/// supervisor nothing (403), unless the test made it refuse ([`Cluster::expect_forbidden`]).
struct Cluster {
    node: ApiNode,
    forbidden_expected: Cell<bool>,
}

impl Deref for Cluster {
    type Target = ApiNode;

    fn deref(&self) -> &ApiNode {
        &self.node
    }
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            node: ApiNode::new(),
            forbidden_expected: Cell::new(false),
        }
    }

    /// The test makes the server refuse requests (403) on purpose.
    fn expect_forbidden(&self) {
        self.forbidden_expected.set(true);
    }

    /// `kubelet-pivot <role..> --kubeconfig .. --node-name NODE --stop-timeout 2s <extra..>`,
    /// with the stand-in crashing on [`CRASH_MARK`].
    fn supervisor(&self, role: &[&str], extra: &[&str]) -> Proc {
        let mut args = self.node_args(role);
        args.extend_from_slice(extra);
        self.scene.spawn(
            self.scene
                .pivot(&args, &[], &[("STANDIN_CRASH_ON_CONFIG", CRASH_MARK)]),
        )
    }

    fn bootstrap(&self) -> Proc {
        self.supervisor(&["bootstrap"], &[])
    }

    /// Creates ConfigMap `name` in [`NS`] with key `kubelet` = `kubelet_config(extra)`;
    /// returns its uid.
    fn configmap(&self, name: &str, extra: &str, immutable: bool) -> String {
        let cm = self
            .server
            .create_configmap(NS, name, payload(extra), immutable);
        string_at(&cm, &["metadata", "uid"])
    }

    /// Points the node's config-source annotation at `NS/name` (`None` removes it).
    fn assign(&self, name: Option<&str>) {
        self.set_source(name);
    }

    /// Waits for a KubeletConfigOK condition that satisfies `accept`.
    fn wait_condition(&self, what: &str, accept: impl Fn(&Value) -> bool) -> Value {
        wait_until(DEADLINE, what, || self.condition().filter(|c| accept(c)))
    }

    /// Waits for KubeletConfigOK True whose message contains `needle` (a UID, a
    /// resourceVersion).
    fn wait_true_with(&self, what: &str, needle: &str) -> Value {
        self.wait_condition(what, |cond| {
            cond["status"] == "True" && field(cond, "message").contains(needle)
        })
    }

    /// The node's config-status annotation, parsed.
    fn status_annotation(&self) -> Option<Value> {
        let node = self.server.node(NODE);
        let text = node["metadata"]["annotations"][STATUS_ANNOTATION].as_str()?;
        Some(
            serde_json::from_str(text)
                .unwrap_or_else(|err| panic!("{STATUS_ANNOTATION} is not JSON ({err}): {text}")),
        )
    }

    /// Waits for a config-status annotation that satisfies `accept` (it is a PATCH of its own,
    /// sent after the condition's).
    fn wait_annotation(&self, what: &str, accept: impl Fn(&Value) -> bool) -> Value {
        wait_until(DEADLINE, what, || {
            self.status_annotation().filter(|a| accept(a))
        })
    }

    /// Requests whose path contains `needle`.
    fn requests_to(&self, needle: &str) -> Vec<RequestRecord> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| r.path.contains(needle))
            .collect()
    }

    /// `kubelet-pivot status -o json`.
    fn status(&self) -> Value {
        status_json(&self.scene)
    }

    /// The single running kubelet and the content of its --config file.
    fn running_config(&self) -> (i32, String) {
        let pid = wait_until(DEADLINE, "a running kubelet", || {
            match self.scene.running_kubelets().as_slice() {
                [pid] => Some(*pid),
                _ => None,
            }
        });
        (pid, self.scene.config_of(pid))
    }

    /// Starts a bootstrap, waits for its kubelet, assigns `configmap` and waits for the kubelet
    /// restarted with `needle` in its config. Returns the bootstrap and that kubelet's pid.
    fn bootstrap_then_assign(&self, configmap: &str, needle: &str) -> (Proc, i32) {
        let bootstrap = self.bootstrap();
        let (first, _) = self.running_config();
        self.assign(Some(configmap));
        (bootstrap, self.wait_kubelet_with(needle, Some(first)))
    }

    /// Waits for a running kubelet other than `old` whose config contains `needle`.
    fn wait_kubelet_with(&self, needle: &str, old: Option<i32>) -> i32 {
        wait_until(
            DEADLINE,
            &format!("a (re)started kubelet whose config contains {needle}"),
            || {
                let (pid, content) = self.running_config();
                (Some(pid) != old && content.contains(needle)).then_some(pid)
            },
        )
    }

    /// Waits for a running kubelet started by `parent` whose config contains `needle`.
    fn wait_kubelet_of(&self, parent: &Proc, needle: &str) -> i32 {
        let ppid = i128::from(parent.pid());
        wait_until(
            DEADLINE,
            &format!("a kubelet of pid {ppid} whose config contains {needle}"),
            || {
                let (pid, content) = self.running_config();
                let start = self.scene.start_of(pid)?;
                (start.num("ppid") == ppid && content.contains(needle)).then_some(pid)
            },
        )
    }

    /// Asserts for [`QUIET_WINDOW`] that `pid` stays the only running kubelet.
    fn assert_kubelet_untouched(&self, pid: i32, why: &str) {
        // A bounded sleep on purpose: this checks that a restart does NOT happen.
        let until = Instant::now() + QUIET_WINDOW;
        while Instant::now() < until {
            assert_eq!(
                self.scene.running_kubelets(),
                vec![pid],
                "the kubelet was restarted or stopped ({why})"
            );
            std::thread::sleep(support::POLL_INTERVAL);
        }
        assert!(support::pid_alive(pid), "kubelet pid {pid} is gone ({why})");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() || self.forbidden_expected.get() {
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
            "the server refused the supervisor's requests with the node's credentials (Node \
             authorizer, NodeRestriction, RBAC of manifests/*.yaml): {refused:#?}"
        );
    }
}

fn payload(extra: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("kubelet".to_owned(), kubelet_config(extra))])
}

fn string_at(value: &Value, path: &[&str]) -> String {
    path.iter()
        .fold(value, |v, key| &v[*key])
        .as_str()
        .unwrap_or_else(|| panic!("no string at {path:?} in {value}"))
        .to_owned()
}

fn field(cond: &Value, key: &str) -> String {
    cond[key].as_str().unwrap_or_default().to_owned()
}

/// `"eventBurst":N` as it appears in the effective (JSON) config file.
fn event_burst(n: u32) -> String {
    format!("\"eventBurst\":{n}")
}

/// Names in a directory, sorted.
fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("failed to list {}: {err}", dir.display()))
        .map(|entry| {
            let entry =
                entry.unwrap_or_else(|err| panic!("failed to list {}: {err}", dir.display()));
            entry.file_name().to_string_lossy().into_owned()
        })
        .collect();
    names.sort();
    names
}

fn read_json(path: &Path) -> Option<Value> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

// ------------------------------------------------------------------------------------------
// Tests
// ------------------------------------------------------------------------------------------

/// 1. An assignment restarts the kubelet with the ConfigMap's content, and the node reports
///    it: condition True naming the UID, the status annotation, an Event.
#[test]
fn assignment_restarts_kubelet_and_reports_condition_annotation_and_event() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-a", "eventBurst: 42\n", true);
    let _p = c.bootstrap();
    let (first, content) = c.running_config();
    assert!(!content.contains(&event_burst(42)), "{content}");

    c.assign(Some("cfg-a"));
    let second = c.wait_kubelet_with(&event_burst(42), Some(first));

    let cond = c.wait_true_with("KubeletConfigOK True naming the ConfigMap's UID", &uid);
    assert_eq!(cond["reason"], "passing all checks", "{cond}");
    let annotation = c.wait_annotation("the status annotation naming the UID", |a| {
        a["active"]["configMap"]["uid"] == uid.as_str()
    });
    assert_eq!(
        annotation["assigned"]["configMap"]["uid"],
        uid.as_str(),
        "{annotation}"
    );
    assert!(annotation["error"].is_null(), "{annotation}");
    // The Event is posted after both patches.
    let event = wait_until(
        DEADLINE,
        "an Event about the new config on the Node",
        || {
            c.server.events().into_iter().find(|e| {
                e["involvedObject"]["kind"] == "Node"
                    && e["involvedObject"]["name"] == NODE
                    && field(e, "message").contains(&uid)
            })
        },
    );
    assert_eq!(event["metadata"]["namespace"], "default", "{event}");
    assert_eq!(event["type"], "Normal", "{event}");
    assert_eq!(c.scene.running_kubelets(), vec![second]);
    c.scene.assert_no_overlap();
}

/// 2. An invalid assigned config never reaches a kubelet: the running one stays, and the node
///    reports False with the v1.11 validation text and the validator's words.
#[test]
fn invalid_config_is_reported_false_and_never_started() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-bad", "port: 70000\n", true);
    let _p = c.bootstrap();
    let (first, _) = c.running_config();
    c.wait_condition("the initial KubeletConfigOK True", |c| {
        c["status"] == "True"
    });

    c.assign(Some("cfg-bad"));
    let cond = c.wait_condition("KubeletConfigOK False", |c| c["status"] == "False");
    assert_eq!(cond["reason"], VALIDATE_FAILED, "{cond}");
    assert_eq!(cond["message"], "using last-known-good (default)", "{cond}");
    let st = c.status();
    assert!(st["config"]["badConfigs"].get(&uid).is_some(), "{st}");
    c.assert_kubelet_untouched(first, "an invalid config was assigned");
    // The effective config file is rewritten before every start: one start in all, and the
    // file still without the invalid port, means no kubelet ever got it.
    let starts = c.scene.starts();
    assert_eq!(starts.len(), 1, "a kubelet was (re)started: {starts:#?}");
    let (_, content) = c.running_config();
    assert!(!content.contains("70000"), "{content}");
}

/// 2b. Issue 32 item 1: the reason reaches the cluster. The condition, the Event and the
///     config-status annotation carry the validator's or the decoder's own words after the
///     v1.11 prefix (`kubectl describe node` alone says what to fix); a hostile field name
///     thousands of characters long, with terminal escapes and a right-to-left override, is
///     escaped and cut, and the Event stays within the API's limit.
#[test]
fn the_validators_words_reach_the_condition_the_event_and_the_status_bounded() {
    const UNKNOWN_FIELD: &str = "failed to load config: unknown field \"maxPodz\"";
    let c = Cluster::new();
    c.configmap("cfg-port", "port: 70000\n", true);
    c.configmap("cfg-typo", "maxPodz: 3\n", true);
    // An explicit YAML key (a plain one may not be longer than 1,024 characters), in
    // double-quoted escapes: ESC, then U+202E, then 5,000 characters.
    let hostile = format!("? \"\\e[31m\\u202e{}\"\n: 1\n", "x".repeat(5000));
    c.configmap("cfg-hostile", &hostile, true);
    let _p = c.bootstrap();
    let (first, _) = c.running_config();
    c.wait_condition("the initial KubeletConfigOK True", |c| {
        c["status"] == "True"
    });

    for (configmap, words) in [("cfg-port", VALIDATE_FAILED), ("cfg-typo", UNKNOWN_FIELD)] {
        c.assign(Some(configmap));
        let cond = c.wait_condition(&format!("KubeletConfigOK False for {configmap}"), |c| {
            c["status"] == "False" && c["reason"] == words
        });
        assert_eq!(cond["message"], "using last-known-good (default)", "{cond}");
        c.wait_annotation(&format!("the annotation's error for {configmap}"), |a| {
            a["error"] == words
        });
        let event = wait_until(DEADLINE, &format!("the Event for {configmap}"), || {
            node_events(&c)
                .into_iter()
                .find(|e| field(e, "message").ends_with(words))
        });
        assert_eq!(event["type"], "Warning", "{event}");
        // Refused, not rolled back: the config never reached a kubelet.
        assert_eq!(event["reason"], "KubeletConfigRefused", "{event}");
        assert_eq!(
            field(&event, "message"),
            format!("using last-known-good (default): {words}")
        );
    }

    c.assign(Some("cfg-hostile"));
    let prefix = "failed to load config: unknown field \"\\u{1b}[31m\\u{202e}xxx";
    let cond = c.wait_condition("KubeletConfigOK False for the hostile field", |c| {
        c["status"] == "False" && c["reason"] != UNKNOWN_FIELD
    });
    let reason = field(&cond, "reason");
    assert!(reason.starts_with(prefix), "{reason}");
    assert!(reason.len() <= 768, "reason of {} bytes", reason.len());
    assert!(reason.ends_with("more bytes)"), "{reason}");
    let clean = |text: &str| !text.chars().any(|ch| ch.is_control() || ch == '\u{202e}');
    assert!(clean(&reason), "{reason:?}");
    let annotation = c.wait_annotation("the annotation's error for the hostile field", |a| {
        a["error"].as_str().is_some_and(|e| e.starts_with(prefix))
    });
    assert_eq!(annotation["error"], reason.as_str());
    let event = wait_until(DEADLINE, "the Event for the hostile field", || {
        node_events(&c)
            .into_iter()
            .find(|e| field(e, "message").contains(prefix))
    });
    let message = field(&event, "message");
    assert!(
        message.len() <= 1024,
        "Event message of {} bytes",
        message.len()
    );
    assert!(clean(&message), "{message:?}");
    let refused: Vec<RequestRecord> = c
        .requests_to("/events")
        .into_iter()
        .filter(|r| r.status == 422)
        .collect();
    assert!(refused.is_empty(), "Events refused: {refused:#?}");
    // `status` on the node says the same, and no kubelet ever ran any of them.
    assert_eq!(c.status()["config"]["error"], reason.as_str());
    // One Event per refusal: the config recorded bad reports the text of its refusal.
    for words in [VALIDATE_FAILED, UNKNOWN_FIELD, reason.as_str()] {
        let posted = node_events(&c)
            .iter()
            .filter(|e| field(e, "message").ends_with(words))
            .count();
        assert_eq!(posted, 1, "Events ending in {words}");
    }
    // A ConfigMap that does not exist: the server's own words.
    c.assign(Some("cfg-missing"));
    let cond = c.wait_condition("KubeletConfigOK Unknown for a missing ConfigMap", |c| {
        c["status"] == "Unknown"
    });
    assert_eq!(
        field(&cond, "reason"),
        format!("{SYNC_FAILED_PREFIX} failed to sync: failed to download config: configmaps \"cfg-missing\" not found (404)")
    );
    assert_eq!(c.scene.running_kubelets(), vec![first]);
    assert_eq!(c.scene.starts().len(), 1, "a kubelet was (re)started");
}

/// 3. A config that crash-loops the kubelet is marked bad, the node rolls back to
///    last-known-good and reports False, all within the config's trial period.
#[test]
fn crash_looping_config_is_marked_bad_and_rolled_back_within_the_trial() {
    const TRIAL_SECS: u64 = 10;
    let c = Cluster::new();
    let good = c.configmap(
        "cfg-good",
        "eventBurst: 55\nconfigTrialDuration: 500ms\n",
        true,
    );
    let bad = c.configmap(
        "cfg-crash",
        &format!("eventBurst: 66\nstaticPodURL: http://{CRASH_MARK}/\ncrashLoopThreshold: 1\nconfigTrialDuration: {TRIAL_SECS}s\n"),
        true,
    );
    // With --metrics-address, so that the metrics of a rollback are checked too.
    let metrics = scrape::free_addr();
    let _p = c.supervisor(&["bootstrap"], &["--metrics-address", &metrics.to_string()]);
    let (first, _) = c.running_config();
    c.assign(Some("cfg-good"));
    c.wait_kubelet_with(&event_burst(55), Some(first));
    wait_until(
        DEADLINE,
        "the good config to become last-known-good",
        || (c.status()["config"]["lastKnownGood"]["uid"] == good.as_str()).then_some(()),
    );

    let assigned_at = Instant::now();
    c.assign(Some("cfg-crash"));
    let cond = c.wait_condition("KubeletConfigOK False after the crash loop", |c| {
        c["status"] == "False"
    });
    let reported_after = assigned_at.elapsed();
    assert!(
        reported_after < Duration::from_secs(TRIAL_SECS),
        "reported after the {TRIAL_SECS} s trial period: {reported_after:?}"
    );
    assert!(
        field(&cond, "message").contains(&format!("using last-known-good (UID: {good}")),
        "{cond}"
    );
    assert!(field(&cond, "reason").contains("crash loop"), "{cond}");
    let st = c.status();
    let reason = st["config"]["badConfigs"][&bad]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("crash loop"), "{st}");
    let crashes = c.scene.events("crash").len();
    assert!(
        crashes >= 2,
        "expected > crashLoopThreshold (1) crashes, saw {crashes}"
    );
    let lkg = c.wait_kubelet_with(&event_burst(55), None);
    let annotation = c.wait_annotation("the status annotation of the rollback", |a| {
        !a["error"].is_null()
    });
    assert_eq!(annotation["active"]["configMap"]["uid"], good.as_str());
    assert_eq!(annotation["assigned"]["configMap"]["uid"], bad.as_str());
    c.assert_kubelet_untouched(lkg, "last-known-good must stay up");
    c.scene.assert_no_overlap();

    let m = wait_until(DEADLINE, "metrics of the rollback", || {
        scrape::scrape(metrics).ok().filter(|m| {
            m.get("kubelet_pivot_bad_configs") == Some(1.0)
                && m.get("kubelet_pivot_sync_error") == Some(0.0)
        })
    });
    let info = format!(
        "kubelet_pivot_config_info{{origin=\"last-known-good\",uid=\"{good}\",resource_version=\"{}\",status=\"False\"}}",
        string_at(&c.status()["config"]["lastKnownGood"], &["resourceVersion"])
    );
    assert_eq!(m.value(&info), 1.0);
    assert!(m.value("kubelet_pivot_kubelet_restarts_total{reason=\"exited\"}") >= 1.0);
    assert!(m.value("kubelet_pivot_kubelet_restarts_total{reason=\"config_changed\"}") >= 2.0);
    let synced = m.value("kubelet_pivot_last_sync_timestamp_seconds");
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    assert!(
        synced > now - 60.0 && synced <= now + 1.0,
        "last sync {synced} is not recent (now {now})"
    );
}

/// 4a. An immutable ConfigMap is fetched exactly once and never watched (nor listed).
#[test]
fn immutable_configmap_is_fetched_once_and_never_watched() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-imm", "eventBurst: 43\n", true);
    let (_p, _) = c.bootstrap_then_assign("cfg-imm", &event_burst(43));
    c.wait_true_with("KubeletConfigOK True", &uid);
    // Bounded sleep: a watch or re-fetch would be issued right after the first GET.
    std::thread::sleep(QUIET_WINDOW);
    let requests = c.requests_to("configmaps");
    assert_eq!(
        requests.len(),
        1,
        "expected exactly one request on configmaps: {requests:#?}"
    );
    let get = &requests[0];
    assert_eq!(get.method, "GET");
    assert_eq!(
        get.path,
        format!("/api/v1/namespaces/{NS}/configmaps/cfg-imm")
    );
    assert!(!get.watch);
    assert_eq!(c.server.open_watches("/api/v1/namespaces"), 0);
}

/// 4b. A mutable ConfigMap is watched; a change of its data is a new checkpoint (new
///     resourceVersion) and the kubelet restarts with the new content.
#[test]
fn mutable_configmap_is_watched_and_a_change_is_a_new_checkpoint() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-mut", "eventBurst: 44\n", false);
    let (_p, second) = c.bootstrap_then_assign("cfg-mut", &event_burst(44));
    wait_until(DEADLINE, "a watch on the assigned ConfigMap", || {
        c.requests_to("configmaps")
            .iter()
            .any(|r| r.watch && r.path == format!("/api/v1/namespaces/{NS}/configmaps"))
            .then_some(())
    });
    let rv1 = string_at(
        &read_json(&c.scene.config_dir().join("meta/assigned")).expect("meta/assigned"),
        &["resourceVersion"],
    );

    let updated = c
        .server
        .update_configmap_data(NS, "cfg-mut", payload("eventBurst: 45\n"))
        .expect("update a mutable ConfigMap");
    let rv2 = string_at(&updated, &["metadata", "resourceVersion"]);
    assert_ne!(rv1, rv2);
    c.wait_kubelet_with(&event_burst(45), Some(second));
    let checkpoints = c.scene.config_dir().join("checkpoints").join(&uid);
    assert!(checkpoints.join(&rv1).is_dir(), "old checkpoint kept");
    assert!(checkpoints.join(&rv2).is_dir(), "new checkpoint written");
    let assigned = read_json(&c.scene.config_dir().join("meta/assigned")).expect("meta/assigned");
    assert_eq!(assigned["uid"], uid.as_str(), "{assigned}");
    assert_eq!(assigned["resourceVersion"], rv2.as_str(), "{assigned}");
    c.wait_true_with(
        "KubeletConfigOK True for the new resourceVersion",
        &format!("ResourceVersion: {rv2}"),
    );
    c.scene.assert_no_overlap();
}

/// Runs a bootstrap with the server up until `cfg-a` (eventBurst 42) runs and is reported, then
/// stops it. Returns the ConfigMap's uid.
fn checkpoint_in_a_previous_run(c: &Cluster) -> String {
    let uid = c.configmap("cfg-a", "eventBurst: 42\n", true);
    c.assign(Some("cfg-a"));
    let mut p = c.bootstrap();
    c.wait_kubelet_with(&event_burst(42), None);
    c.wait_true_with("KubeletConfigOK True in the first run", &uid);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(DEADLINE).success(), "{}", c.scene.output());
    uid
}

/// 5a. With the API server down at start, the kubelet starts promptly from the checkpoints of
///     a previous run.
#[test]
fn api_server_down_at_start_runs_from_checkpoints() {
    let c = Cluster::new();
    checkpoint_in_a_previous_run(&c);
    c.server.stop();
    let started = Instant::now();
    let _p = c.bootstrap();
    c.wait_kubelet_with(&event_burst(42), None);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the kubelet waited for the API server: {took:?}"
    );
}

/// 5b. A holder that started while the API server was down reports its status once the
///     server is back, when the Node does not show it (here: the condition and the status
///     annotation were removed during the outage).
#[test]
fn api_server_back_after_an_outage_at_start_gets_the_status() {
    let c = Cluster::new();
    let uid = checkpoint_in_a_previous_run(&c);
    c.server.stop();
    // The stored Node loses our condition and annotation (a restore, another writer).
    c.server
        .patch_node(
            NODE,
            serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            true,
        )
        .expect("reset the conditions");
    c.server.set_node_annotation(NODE, STATUS_ANNOTATION, None);
    let _p = c.bootstrap();
    c.wait_kubelet_with(&event_burst(42), None);
    let back_at = SystemTime::now();
    c.server.clear_requests();
    c.server.restart_on_same_port();
    wait_until(
        DEADLINE,
        "a status PATCH after the server came back",
        || {
            c.requests_to(&format!("/api/v1/nodes/{NODE}/status"))
                .iter()
                .any(|r| r.method == "PATCH" && r.status == 200)
                .then_some(())
        },
    );
    let cond = c.wait_condition("KubeletConfigOK True with a fresh heartbeat", |c| {
        let heartbeat = humantime::parse_rfc3339_weak(&field(c, "lastHeartbeatTime"));
        // RFC 3339 in the condition has whole seconds.
        heartbeat.is_ok_and(|t| t + Duration::from_secs(1) >= back_at)
    });
    assert_eq!(cond["status"], "True", "{cond}");
    assert!(field(&cond, "message").contains(&uid), "{cond}");
    c.wait_annotation("the status annotation back", |a| {
        a["active"]["configMap"]["uid"] == uid.as_str()
    });
}

/// 5c. An API outage while the kubelet runs leaves the kubelet alone; after it the node still
///     follows its assignment.
#[test]
fn api_server_outage_mid_run_leaves_the_kubelet_alone() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-a", "eventBurst: 42\n", true);
    c.configmap("cfg-b", "eventBurst: 46\n", true);
    let (_p, running) = c.bootstrap_then_assign("cfg-a", &event_burst(42));
    c.wait_true_with("KubeletConfigOK True", &uid);
    c.server.stop();
    c.assert_kubelet_untouched(running, "the API server is down");
    c.server.restart_on_same_port();
    let back = Instant::now();
    // The node watch resumes (from its resourceVersion, the history is kept) and a later
    // assignment is applied.
    c.assign(Some("cfg-b"));
    c.wait_kubelet_with(&event_burst(46), Some(running));
    eprintln!(
        "after an outage of {QUIET_WINDOW:?} and a restart with history kept: change applied after {:?}",
        back.elapsed()
    );
    c.scene.assert_no_overlap();
}

/// 5d. A status change during an API outage (here: the assigned config survives its trial
///     and becomes last-known-good) reaches the Node once the server is back.
#[test]
fn status_change_during_an_outage_is_reported_when_the_server_is_back() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-a", "eventBurst: 42\nconfigTrialDuration: 2s\n", true);
    let (_p, running) = c.bootstrap_then_assign("cfg-a", &event_burst(42));
    c.wait_annotation("the status annotation of cfg-a on trial", |a| {
        a["active"]["configMap"]["uid"] == uid.as_str() && a["lastKnownGood"].is_null()
    });
    c.server.stop();
    wait_until(DEADLINE, "cfg-a to become last-known-good", || {
        (c.status()["config"]["lastKnownGood"]["uid"] == uid.as_str()).then_some(())
    });
    // Let the report of the promotion fail (it is then retried with backoff) before the
    // server is back.
    wait_until(DEADLINE, "the failed status report to be logged", || {
        c.scene
            .output()
            .contains("reporting the config status on the Node: failed")
            .then_some(())
    });
    c.server.restart_on_same_port();
    c.wait_annotation(
        "the status annotation naming the new last-known-good",
        |a| a["lastKnownGood"]["configMap"]["uid"] == uid.as_str(),
    );
    assert_eq!(c.scene.running_kubelets(), vec![running]);
}

/// 6. After the server drops every watch, the sync re-watches and applies a later change.
#[test]
fn dropped_watch_is_resumed_and_a_later_change_is_applied() {
    let c = Cluster::new();
    c.configmap("cfg-a", "eventBurst: 42\n", true);
    c.configmap("cfg-b", "eventBurst: 47\n", true);
    let (_p, running) = c.bootstrap_then_assign("cfg-a", &event_burst(42));
    let node_watches = || {
        c.requests_to("/api/v1/nodes")
            .iter()
            .filter(|r| r.watch)
            .count()
    };
    wait_until(DEADLINE, "an open watch on the node", || {
        (c.server.open_watches("/api/v1/nodes") > 0).then_some(())
    });
    let before = node_watches();
    c.server.drop_watches();
    wait_until(DEADLINE, "the node watch to be renewed", || {
        (node_watches() > before && c.server.open_watches("/api/v1/nodes") > 0).then_some(())
    });
    c.assign(Some("cfg-b"));
    c.wait_kubelet_with(&event_burst(47), Some(running));
    c.scene.assert_no_overlap();
}

/// 7. Removing the annotation goes back to the local (init) config.
#[test]
fn removing_the_annotation_resets_to_the_local_config() {
    let c = Cluster::new();
    let init = c.scene.kubelet_config_file("init.yaml", "eventBurst: 77\n");
    c.configmap("cfg-a", "eventBurst: 42\n", true);
    let _p = c.supervisor(&["bootstrap"], &["--init-config", init.to_str().unwrap()]);
    let (first, content) = c.running_config();
    assert!(content.contains(&event_burst(77)), "{content}");
    c.assign(Some("cfg-a"));
    let assigned = c.wait_kubelet_with(&event_burst(42), Some(first));

    c.assign(None);
    c.wait_kubelet_with(&event_burst(77), Some(assigned));
    wait_until(DEADLINE, "meta/assigned to be cleared", || {
        (!c.scene.config_dir().join("meta/assigned").exists()).then_some(())
    });
    let cond = c.wait_condition("KubeletConfigOK for the local config", |c| {
        c["status"] == "True" && c["message"] == "using current (init)"
    });
    assert_eq!(cond["reason"], "passing all checks");
    c.wait_annotation("the status annotation of the local config", |a| {
        a["active"].is_null() && a["assigned"].is_null() && a["error"].is_null()
    });
    c.scene.assert_no_overlap();
}

/// 8. An annotation that is no reference at all is reported Unknown and changes nothing.
#[test]
fn invalid_reference_is_reported_unknown_and_the_kubelet_is_untouched() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-a", "eventBurst: 42\n", true);
    let (_p, running) = c.bootstrap_then_assign("cfg-a", &event_burst(42));

    c.server
        .set_node_annotation(NODE, SOURCE_ANNOTATION, Some("nonsense"));
    let cond = c.wait_condition("KubeletConfigOK Unknown", |c| c["status"] == "Unknown");
    assert!(
        field(&cond, "reason").starts_with(SYNC_FAILED_PREFIX),
        "{cond}"
    );
    assert!(field(&cond, "message").contains(&uid), "{cond}");
    c.assert_kubelet_untouched(running, "the assignment is invalid");
    let assigned = read_json(&c.scene.config_dir().join("meta/assigned")).expect("meta/assigned");
    assert_eq!(assigned["uid"], uid.as_str(), "{assigned}");
}

/// 9. A 403 on the ConfigMap is reported as forbidden, naming the namespace and the verb.
#[test]
fn rbac_forbidden_is_reported_as_such() {
    let c = Cluster::new();
    c.expect_forbidden();
    c.configmap("cfg-a", "eventBurst: 42\n", true);
    // manifests/10-rbac.yaml not applied: the Node authorizer alone refuses the read.
    c.server.set_rbac(Policy::empty());
    let _p = c.bootstrap();
    let (first, _) = c.running_config();
    c.assign(Some("cfg-a"));
    let cond = c.wait_condition("KubeletConfigOK Unknown", |c| c["status"] == "Unknown");
    let reason = field(&cond, "reason");
    assert!(reason.starts_with(SYNC_FAILED_PREFIX), "{cond}");
    assert!(reason.contains("forbidden"), "{cond}");
    assert!(reason.contains(NS), "{cond}");
    assert!(reason.contains("get"), "{cond}");
    assert!(!reason.contains("download"), "{cond}");
    c.wait_annotation("the status annotation with the 403", |a| {
        a["error"].as_str().is_some_and(|e| e.contains("forbidden"))
    });
    assert_eq!(c.scene.running_kubelets(), vec![first]);
}

/// 10. A bootstrap -> self-hosted pivot in the middle of a config change: the new holder runs
///     the config assigned to the node (the same ConfigMap UID) and the store holds one
///     consistent assignment; never two kubelets.
#[test]
fn pivot_in_the_middle_of_a_config_change_keeps_one_consistent_assignment() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-b", "eventBurst: 48\n", true);
    let _boot = c.bootstrap();
    let (first, _) = c.running_config();
    c.wait_condition("the bootstrap's sync to be up", |c| c["status"] == "True");

    c.assign(Some("cfg-b"));
    let hosted = c.supervisor(&["self-hosted", "--generation", "1"], &[]);
    let pid = c.wait_kubelet_of(&hosted, &event_burst(48));
    assert_ne!(pid, first);
    // The holder record is written right after the spawn: the kubelet can be seen first.
    let st = wait_until(DEADLINE, "the self-hosted holder record", || {
        let st = c.status();
        (st["lock"]["holder"]["role"] == "self-hosted").then_some(st)
    });
    assert_eq!(st["config"]["assigned"]["uid"], uid.as_str(), "{st}");
    assert_eq!(
        st["config"]["active"]["source"]["uid"],
        uid.as_str(),
        "{st}"
    );
    let checkpoints = c.scene.config_dir().join("checkpoints");
    assert_eq!(dir_names(&checkpoints), vec![uid.clone()], "only cfg-b");
    let versions = dir_names(&checkpoints.join(&uid));
    assert_eq!(versions.len(), 1, "one checkpoint of cfg-b: {versions:?}");
    // Whether the Node then names cfg-b depends on whether the bootstrap reported it before it
    // yielded (see the next test for the product bug when it did not).
    assert_eq!(c.scene.running_kubelets(), vec![pid]);
    c.scene.assert_no_overlap();
}

/// 10b. After a pivot, the new holder reports the config it runs, also when the old holder's
///      report of it never reached the server.
#[test]
fn new_holder_after_a_pivot_reports_the_config_it_runs() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-b", "eventBurst: 48\n", true);
    // The bootstrap's status reports are refused (an RBAC gap or an outage while it applies).
    c.expect_forbidden();
    c.server.deny("patch", "nodes/status", None);
    let refused = || {
        c.requests_to(&format!("/api/v1/nodes/{NODE}/status"))
            .iter()
            .filter(|r| r.method == "PATCH" && r.status == 403)
            .count()
    };
    let _boot = c.bootstrap();
    let (first, _) = c.running_config();
    wait_until(DEADLINE, "the refused report of the local config", || {
        (refused() >= 1).then_some(())
    });
    c.assign(Some("cfg-b"));
    c.wait_kubelet_with(&event_burst(48), Some(first));
    wait_until(DEADLINE, "the refused report of cfg-b", || {
        (refused() >= 2).then_some(())
    });
    c.server.allow_all();

    let hosted = c.supervisor(&["self-hosted", "--generation", "1"], &[]);
    c.wait_kubelet_of(&hosted, &event_burst(48));
    c.wait_true_with("KubeletConfigOK True for cfg-b from the new holder", &uid);
    c.scene.assert_no_overlap();
}

// ------------------------------------------------------------------------------------------
// kubectl
// ------------------------------------------------------------------------------------------

/// 11. The documented operator workflow with real kubectl.
#[test]
fn kubectl_workflow_assigns_a_config_and_shows_the_condition() {
    let c = Cluster::new();
    let Some(kubectl) = Kubectl::new(|path| c.server.write_kubeconfig(path)) else {
        return;
    };
    let _p = c.bootstrap();
    let (first, _) = c.running_config();
    let file = c.scene.kubelet_config_file("kubelet", "eventBurst: 50\n");
    let from_file = format!("--from-file=kubelet={}", file.display());
    kubectl.ok(&[
        "create",
        "configmap",
        "my-node-config",
        &from_file,
        "-n",
        NS,
    ]);
    let uid = string_at(
        &c.server
            .configmap(NS, "my-node-config")
            .expect("kubectl created the ConfigMap"),
        &["metadata", "uid"],
    );
    kubectl.ok(&[
        "annotate",
        "node",
        NODE,
        &format!("{SOURCE_ANNOTATION}={NS}/my-node-config"),
    ]);
    c.wait_kubelet_with(&event_burst(50), Some(first));
    let node = wait_until(DEADLINE, "kubectl to show KubeletConfigOK True", || {
        let text = kubectl.ok(&["get", "node", NODE, "-o", "json"]);
        let node: Value = serde_json::from_str(&text).expect("kubectl get -o json prints JSON");
        condition_of(&node, CONDITION)
            .is_some_and(|c| c["status"] == "True" && field(&c, "message").contains(&uid))
            .then_some(node)
    });
    let text = node["metadata"]["annotations"][STATUS_ANNOTATION]
        .as_str()
        .expect("status annotation via kubectl");
    assert!(text.contains(&uid), "{text}");
    c.scene.assert_no_overlap();
}

// ------------------------------------------------------------------------------------------
// The status through the API's whole lifecycle (issue 12)
// ------------------------------------------------------------------------------------------

/// Events on the Node that kubelet-pivot posted.
fn node_events(c: &Cluster) -> Vec<Value> {
    c.server
        .events()
        .into_iter()
        .filter(|e| e["involvedObject"]["kind"] == "Node" && e["involvedObject"]["name"] == NODE)
        .collect()
}

/// 12a. A 1,500-character garbage assignment: the Event is within the API's limits (the strict
///      server would answer 422), and the condition and the status annotation quote the value
///      only as a bounded, escaped excerpt.
#[test]
fn garbage_assignment_of_1500_characters_stays_within_the_api_limits() {
    let c = Cluster::new();
    let _p = c.bootstrap();
    c.running_config();
    c.wait_condition("the initial KubeletConfigOK True", |c| {
        c["status"] == "True"
    });
    let garbage: String = "\u{1b}[7m\"NS na me\"\n\t\u{7f}é:"
        .chars()
        .cycle()
        .take(1500)
        .collect();
    c.server
        .set_node_annotation(NODE, SOURCE_ANNOTATION, Some(&garbage));
    let cond = c.wait_condition("KubeletConfigOK Unknown", |c| c["status"] == "Unknown");
    let reason = field(&cond, "reason");
    assert!(reason.starts_with(SYNC_FAILED_PREFIX), "{cond}");
    assert!(reason.len() <= 1024, "reason of {} bytes", reason.len());
    assert!(reason.contains("more bytes)"), "{reason}");
    assert!(!reason.chars().any(char::is_control), "{reason:?}");
    let annotation = c.wait_annotation("the status annotation with the error", |a| {
        !a["error"].is_null()
    });
    let error = annotation["error"].as_str().unwrap_or_default();
    assert!(
        error.len() <= 1024,
        "annotation error of {} bytes",
        error.len()
    );
    assert!(!error.chars().any(char::is_control), "{error:?}");
    let event = wait_until(DEADLINE, "the Warning Event of the bad assignment", || {
        node_events(&c).into_iter().find(|e| e["type"] == "Warning")
    });
    let message = field(&event, "message");
    assert!(
        message.len() <= 1024,
        "Event message of {} bytes",
        message.len()
    );
    assert!(field(&event, "reason").len() <= 128, "{event}");
    let refused: Vec<RequestRecord> = c
        .requests_to("/events")
        .into_iter()
        .filter(|r| r.status == 422)
        .collect();
    assert!(refused.is_empty(), "Events refused: {refused:#?}");
}

/// PATCHes of this node (status and metadata) the server saw.
fn node_patches(c: &Cluster) -> Vec<RequestRecord> {
    c.requests_to(&format!("/api/v1/nodes/{NODE}"))
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .collect()
}

/// 12b. A restart of kubelet-pivot with nothing changed: the new holder reads the Node first,
///      finds it showing its status, and patches nothing; lastTransitionTime stays and no
///      Event is posted.
#[test]
fn restart_with_unchanged_status_keeps_the_transition_time_and_posts_no_event() {
    let c = Cluster::new();
    let uid = c.configmap(
        "cfg-a",
        "eventBurst: 42\nconfigTrialDuration: 500ms\n",
        true,
    );
    c.assign(Some("cfg-a"));
    let mut p = c.bootstrap();
    c.wait_kubelet_with(&event_burst(42), None);
    // Settled: cfg-a ran through its trial and is last-known-good on the Node.
    c.wait_annotation("cfg-a reported as last-known-good", |a| {
        a["lastKnownGood"]["configMap"]["uid"] == uid.as_str()
    });
    let before = c.wait_true_with("KubeletConfigOK True for cfg-a", &uid);
    let transition = field(&before, "lastTransitionTime");
    wait_until(DEADLINE, "the Event of cfg-a", || {
        node_events(&c)
            .iter()
            .any(|e| field(e, "message").contains(&uid))
            .then_some(())
    });
    let events = node_events(&c).len();
    // lastTransitionTime has whole seconds: let the clock pass it, so that a move shows.
    let at = humantime::parse_rfc3339_weak(&transition).expect("RFC 3339 transition time");
    wait_until(DEADLINE, "the clock to pass the transition time", || {
        (SystemTime::now() > at + Duration::from_millis(1100)).then_some(())
    });
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(DEADLINE).success(), "{}", c.scene.output());
    c.server.clear_requests();

    let _p = c.bootstrap();
    c.wait_kubelet_with(&event_burst(42), None);
    // The new syncer has listed the Node (and made its first report decision) once its watch
    // is open.
    wait_until(DEADLINE, "the new holder's watch on the Node", || {
        (c.server.open_watches("/api/v1/nodes") > 0).then_some(())
    });
    // A bounded sleep on purpose: checks that no report goes out.
    std::thread::sleep(QUIET_WINDOW);
    let patches = node_patches(&c);
    eprintln!(
        "restart with unchanged status: {} PATCH request(s) on the Node at start",
        patches.len()
    );
    assert!(patches.is_empty(), "patched at start: {patches:#?}");
    let after = c.condition().expect("KubeletConfigOK still there");
    assert_eq!(field(&after, "lastTransitionTime"), transition, "{after}");
    assert_eq!(after["status"], "True", "{after}");
    assert_eq!(
        node_events(&c).len(),
        events,
        "an Event was posted at restart"
    );
}

/// 12c. A Node deleted and re-created (new UID) with the same assignment gets the condition
///      and the status annotation back within a second, without a kubelet restart.
#[test]
fn recreated_node_gets_the_condition_and_annotation_back_within_a_second() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-a", "eventBurst: 42\n", true);
    let (_p, running) = c.bootstrap_then_assign("cfg-a", &event_burst(42));
    c.wait_true_with("KubeletConfigOK True for cfg-a", &uid);
    c.wait_annotation("the status annotation of cfg-a", |a| {
        a["active"]["configMap"]["uid"] == uid.as_str()
    });
    let old_uid = string_at(&c.server.node(NODE), &["metadata", "uid"]);

    c.server.delete_node(NODE);
    let source = format!("{NS}/cfg-a");
    let recreated_at = Instant::now();
    let node = c
        .server
        .create_node(NODE, [(SOURCE_ANNOTATION, source.as_str())]);
    let new_uid = string_at(&node, &["metadata", "uid"]);
    assert_ne!(new_uid, old_uid, "a re-created Node has a new UID");
    wait_until(
        Duration::from_secs(1),
        "the condition and the annotation on the re-created Node",
        || {
            let node = c.server.node(NODE);
            let cond = condition_of(&node, CONDITION)?;
            let text = node["metadata"]["annotations"][STATUS_ANNOTATION].as_str()?;
            (cond["status"] == "True"
                && field(&cond, "message").contains(&uid)
                && text.contains(&uid))
            .then_some(())
        },
    );
    eprintln!(
        "re-created Node: condition and annotation back after {:?}",
        recreated_at.elapsed()
    );
    let event = wait_until(DEADLINE, "an Event on the re-created Node", || {
        node_events(&c)
            .into_iter()
            .find(|e| e["involvedObject"]["uid"] == new_uid.as_str())
    });
    assert_eq!(event["type"], "Normal", "{event}");
    assert!(
        c.scene.output().contains("was re-created"),
        "the re-creation is not logged"
    );
    c.assert_kubelet_untouched(running, "only the Node object was re-created");
}

/// 12d. An API server outage, then a restart that lost the watch history (410 for the old
///      resourceVersion): the node's next try comes at most the backoff cap for a server that
///      does not answer (10 s, src/cluster/retry) after the restart, and the 410 it gets then
///      re-lists at once (an expired resourceVersion is no failure, no backoff): a change made
///      right after the restart is applied and reported within the cap plus 2 s.
#[test]
fn change_right_after_a_server_restart_with_history_lost_is_applied_within_the_cap() {
    /// How long the API server is away (the measurement used 10 s; the backoff of
    /// the connection failures builds up over it). A bounded sleep: the outage itself.
    const OUTAGE: Duration = Duration::from_secs(10);
    /// The longest wait between two tries while the server does not answer.
    const CAP: Duration = Duration::from_secs(10);
    let c = Cluster::new();
    c.configmap("cfg-a", "eventBurst: 42\n", true);
    let uid_b = c.configmap("cfg-b", "eventBurst: 49\n", true);
    let (_p, running) = c.bootstrap_then_assign("cfg-a", &event_burst(42));
    c.wait_condition("KubeletConfigOK True for cfg-a", |c| c["status"] == "True");
    wait_until(DEADLINE, "an open watch on the node", || {
        (c.server.open_watches("/api/v1/nodes") > 0).then_some(())
    });
    c.server.stop();
    std::thread::sleep(OUTAGE);
    c.server.restart_losing_history();
    let back = Instant::now();
    c.assign(Some("cfg-b"));
    let running_b = wait_until(CAP + DEADLINE, "a kubelet with cfg-b", || {
        let (pid, content) = c.running_config();
        (pid != running && content.contains(&event_burst(49))).then_some(pid)
    });
    let applied = back.elapsed();
    let cond = wait_until(DEADLINE, "KubeletConfigOK True for cfg-b", || {
        c.condition()
            .filter(|c| c["status"] == "True" && field(c, "message").contains(&uid_b))
    });
    let reported = back.elapsed();
    eprintln!(
        "after a {OUTAGE:?} outage and a restart with history lost: change applied (kubelet restarted) after {applied:?}, reported on the Node after {reported:?}"
    );
    assert!(
        reported < CAP + Duration::from_secs(2),
        "the change took {reported:?} to be reflected: {cond}"
    );
    assert_ne!(running_b, running);
    assert!(
        c.scene.output().contains("410 Gone"),
        "no 410 was seen (the restart did not lose the watch history?)"
    );
    c.scene.assert_no_overlap();
}

/// 12e. The first start on a Node that shows nothing yet: one report (one status PATCH, one
///      annotation PATCH, one Event), not a burst of duplicates.
#[test]
fn first_start_on_a_fresh_node_reports_once() {
    let c = Cluster::new();
    let _p = c.bootstrap();
    c.running_config();
    c.wait_condition("the initial KubeletConfigOK True", |c| {
        c["status"] == "True"
    });
    c.wait_annotation("the initial status annotation", |a| a["error"].is_null());
    // A bounded sleep on purpose: checks that no duplicate report follows.
    std::thread::sleep(QUIET_WINDOW);
    let patches = node_patches(&c);
    let status = patches
        .iter()
        .filter(|r| r.path.ends_with("/status"))
        .count();
    eprintln!(
        "first start: {} PATCH request(s) on the Node ({status} of nodes/status)",
        patches.len()
    );
    assert_eq!(status, 1, "{patches:#?}");
    assert_eq!(patches.len(), 2, "{patches:#?}");
    assert_eq!(node_events(&c).len(), 1, "{:#?}", node_events(&c));
}

/// 12f. A report whose annotation patch is refused: the condition and its Event go out once;
///      the retries bring the annotation once it is allowed, without a second Event.
#[test]
fn refused_annotation_patch_is_retried_without_a_second_event() {
    let c = Cluster::new();
    let uid = c.configmap("cfg-a", "eventBurst: 42\n", true);
    let (_p, _) = c.bootstrap_then_assign("cfg-a", &event_burst(42));
    c.wait_annotation("the status annotation of cfg-a", |a| {
        a["active"]["configMap"]["uid"] == uid.as_str()
    });
    c.expect_forbidden();
    c.server.deny("patch", "nodes", None);
    c.server
        .set_node_annotation(NODE, SOURCE_ANNOTATION, Some("nonsense"));
    c.wait_condition("KubeletConfigOK Unknown", |c| c["status"] == "Unknown");
    let warnings = || {
        node_events(&c)
            .iter()
            .filter(|e| e["type"] == "Warning")
            .count()
    };
    wait_until(DEADLINE, "the Warning Event", || {
        (warnings() == 1).then_some(())
    });
    wait_until(DEADLINE, "a refused annotation patch", || {
        c.requests_to(&format!("/api/v1/nodes/{NODE}"))
            .iter()
            .any(|r| r.method == "PATCH" && r.status == 403)
            .then_some(())
    });
    c.server.allow_all();
    c.wait_annotation("the status annotation with the error", |a| {
        !a["error"].is_null()
    });
    assert_eq!(warnings(), 1, "{:#?}", node_events(&c));
}

const OVERRIDE_ANNOTATION: &str = "kubelet-pivot.io/disruption-actions";

/// 12d. The per-class action override is node-writable input: an over-long value (200,000
///      bytes of valid items) and an invalid one are refused where they enter, with one bounded
///      log line and a Warning Event each; the previous record is removed (the defaults apply),
///      a later valid value is recorded again, and removing the annotation removes the record.
#[test]
fn node_overrides_annotation_is_bounded_where_it_enters() {
    let c = Cluster::new();
    let _p = c.bootstrap();
    c.running_config();
    c.wait_condition("the initial KubeletConfigOK True", |c| {
        c["status"] == "True"
    });
    let record = c.scene.config_dir().join("meta").join("node-overrides");
    let recorded = || std::fs::read_to_string(&record).ok();
    let wait_record = |what: &str, want: Option<&str>| {
        wait_until(DEADLINE, what, || {
            (recorded().as_deref() == want).then_some(())
        })
    };
    let refusals = || {
        node_events(&c)
            .into_iter()
            .filter(|e| e["reason"] == "InvalidDisruptionActions")
            .collect::<Vec<_>>()
    };

    c.server
        .set_node_annotation(NODE, OVERRIDE_ANNOTATION, Some("allocatable=restart"));
    wait_record("the override recorded", Some("allocatable=restart"));

    let huge: String = "allocatable=restart ".repeat(10_000);
    assert_eq!(huge.len(), 200_000);
    c.server
        .set_node_annotation(NODE, OVERRIDE_ANNOTATION, Some(&huge));
    wait_record("the previous record removed", None);
    let event = wait_until(DEADLINE, "the Warning Event of the long value", || {
        refusals().into_iter().next()
    });
    let message = field(&event, "message");
    assert_eq!(event["type"], "Warning", "{event}");
    assert!(message.len() <= 1024, "Event of {} bytes", message.len());
    assert!(message.contains("200000 bytes"), "{message}");

    c.server
        .set_node_annotation(NODE, OVERRIDE_ANNOTATION, Some("state-bound=restart"));
    wait_record("a later valid value recorded", Some("state-bound=restart"));

    let bad: String = "allocatable=explode\u{1b}[7m\n"
        .chars()
        .cycle()
        .take(100_019)
        .collect();
    c.server
        .set_node_annotation(NODE, OVERRIDE_ANNOTATION, Some(&bad));
    wait_record("the record removed after an invalid value", None);
    wait_until(DEADLINE, "the second Warning Event", || {
        (refusals().len() == 2).then_some(())
    });
    for event in refusals() {
        let message = field(&event, "message");
        assert!(message.len() <= 1024, "Event of {} bytes", message.len());
        assert!(!message.chars().any(char::is_control), "{message:?}");
    }

    c.server
        .set_node_annotation(NODE, OVERRIDE_ANNOTATION, Some("allocatable=hold"));
    wait_record("the valid value recorded", Some("allocatable=hold"));
    c.server
        .set_node_annotation(NODE, OVERRIDE_ANNOTATION, None);
    wait_record("the record removed with the annotation", None);

    let agent = format!("kubelet-pivot/{} (supervisor)", env!("CARGO_PKG_VERSION"));
    for r in c.server.requests() {
        assert_eq!(
            r.user_agent.as_deref(),
            Some(agent.as_str()),
            "{} {}",
            r.method,
            r.path
        );
    }
    let longest = c.scene.output().lines().map(str::len).max().unwrap_or(0);
    assert!(
        longest <= 4096,
        "a log line of {longest} bytes carries a node-supplied value"
    );
}
