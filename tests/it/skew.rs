//! Version skew (issue 24): this build beside the pinned earlier one (`compat/baseline`), both
//! real binaries on one node, with real processes, real flock and the stand-in kubelet: who
//! holds the lock, the claims, the holder record, the checkpoint store and the Node's status
//! are shared between them exactly as between a host bootstrap and a DaemonSet of another
//! release.
//!
//! The earlier build is found through `KUBELET_PIVOT_BASELINE_BIN` (scripts/test.sh builds it
//! with scripts/build-baseline.sh and sets it), else at `target/baseline/kubelet-pivot-COMMIT`
//! where that script leaves it. When it is missing every test here fails and says how to
//! build it: a skew test that skips would pass in CI without having run.
//!
//! Every wait is on an observable fact (stand-in log lines, the holder record, `status`, the
//! API server's objects and request log); the only sleep is a bounded window that checks that
//! nothing is PATCHed, and says so.

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{json, Value};
use support::api_node::{ApiNode, NODE, STATUS_ANNOTATION};
use support::lock_state::{checked_holder_record, status_by};
use support::{now_ns, ns_between, pivot_bin, wait_until, Proc, Scene};
use testkit::RequestRecord;

/// Where scripts/test.sh says the baseline binary is.
const BASELINE_ENV: &str = "KUBELET_PIVOT_BASELINE_BIN";
/// Deadline for anything either build should do promptly (generous: two builds, a loaded CI).
const DEADLINE: Duration = Duration::from_secs(15);
/// The design's availability bound (I2) plus a margin for the stand-in's own start.
const TAKEOVER_BOUND: Duration = Duration::from_millis(1500);
/// Window of the "nothing is PATCHed" checks (a bounded sleep by design).
const QUIET_WINDOW: Duration = Duration::from_millis(1500);
/// A stand-in kubelet whose --config contains this crashes 50 ms after start.
const CRASH_MARK: &str = "crashme.example";
/// The first release that records its build in the holder record and the claims.
const FIRST_RECORDED: &str = "0.5.0";
const APP_NS: &str = "default";

/// One of the two builds on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Build {
    /// The commit in `compat/baseline`.
    Old,
    /// This checkout.
    New,
}

use Build::{New, Old};

impl Build {
    fn bin(self) -> PathBuf {
        match self {
            Old => baseline_bin(),
            New => pivot_bin(),
        }
    }

    /// What `status -o json` of [`New`] says of a record this build wrote.
    fn recorded_version(self) -> Value {
        match self {
            Old => Value::Null,
            New => json!(env!("CARGO_PKG_VERSION")),
        }
    }

    /// Whether this build's supervisor sent a request (its User-Agent is
    /// `kubelet-pivot/VERSION (supervisor)`, and the baseline's version is an earlier one).
    fn sent(self, request: &RequestRecord) -> bool {
        let ours = format!("kubelet-pivot/{} (supervisor)", env!("CARGO_PKG_VERSION"));
        match (self, request.user_agent.as_deref()) {
            (New, Some(agent)) => agent == ours,
            (Old, Some(agent)) => agent.starts_with("kubelet-pivot/") && agent != ours,
            (_, None) => false,
        }
    }
}

/// The commit `compat/baseline` names (its last line that is not a comment).
fn baseline_commit() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat/baseline");
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("failed to read {}: {err}", path.display()));
    let commit = text
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty() && !line.starts_with('#'))
        .unwrap_or_else(|| panic!("{} names no commit", path.display()))
        .to_string();
    assert!(
        commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{} must end with a full commit hash, found {commit:?}",
        path.display()
    );
    commit
}

/// The baseline binary; panics (never skips) when it is missing.
fn baseline_bin() -> PathBuf {
    let commit = baseline_commit();
    let (bin, from) = match std::env::var_os(BASELINE_ENV) {
        Some(path) => (PathBuf::from(path), format!("${BASELINE_ENV}")),
        None => {
            // target/debug/kubelet-pivot -> target/baseline/kubelet-pivot-COMMIT
            let pivot = pivot_bin();
            let target = pivot
                .parent()
                .and_then(Path::parent)
                .unwrap_or_else(|| panic!("{} has no target dir", pivot.display()));
            (
                target
                    .join("baseline")
                    .join(format!("kubelet-pivot-{commit}")),
                "the default path".to_string(),
            )
        }
    };
    assert!(
        bin.is_file(),
        "the baseline build of {commit} (compat/baseline) is missing at {} ({from}): build it \
         with scripts/build-baseline.sh (scripts/test.sh does, and sets ${BASELINE_ENV}); \
         the skew test does not run without it",
        bin.display()
    );
    bin
}

/// `<build> <args> --dynamic-config-dir <scene's>`, run to completion.
fn run(scene: &Scene, build: Build, args: &[&str]) -> Output {
    Command::new(build.bin())
        .args(args)
        .arg("--dynamic-config-dir")
        .arg(scene.config_dir())
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("failed to run {build:?} {args:?}: {err}"))
}

/// `<build> checkpoint assign FILE`: the operator tool of that build; returns the UID.
fn assign(scene: &Scene, build: Build, file: &Path) -> String {
    let path = file.to_str().expect("utf-8 temp path");
    let out = run(scene, build, &["checkpoint", "assign", path]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{build:?} checkpoint assign failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "assigned ConfigMap local/local (UID: local-..., ResourceVersion: 1)"
    text.split("UID: ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no UID in {text:?}"))
        .to_string()
}

/// `<build> status -o json` on the scene's node: exit code and JSON.
fn status(scene: &Scene, build: Build) -> (i32, Value) {
    status_by(&build.bin(), scene)
}

/// `<build> status` (the table) on the scene's node.
fn status_table(scene: &Scene, build: Build) -> String {
    let mut cmd = Command::new(build.bin());
    cmd.arg("status");
    let out = support::node_paths(&mut cmd, &scene.lock(), &scene.config_dir())
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("failed to run {build:?} status: {err}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A supervisor of `build`: `kubelet-pivot <args> --stop-timeout 2s` running the stand-in,
/// which crashes on [`CRASH_MARK`].
fn supervisor(scene: &Scene, build: Build, args: &[&str]) -> Proc {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--stop-timeout", "2s"]);
    scene.spawn(scene.pivot_of(
        &build.bin(),
        &all,
        &[],
        &[("STANDIN_CRASH_ON_CONFIG", CRASH_MARK)],
    ))
}

fn bootstrap(scene: &Scene, build: Build, extra: &[&str]) -> Proc {
    let mut args = vec!["bootstrap"];
    args.extend_from_slice(extra);
    supervisor(scene, build, &args)
}

fn self_hosted(scene: &Scene, build: Build, generation: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["self-hosted", "--generation", generation];
    args.extend_from_slice(extra);
    supervisor(scene, build, &args)
}

/// Waits for a running kubelet of supervisor `sup`, not in `not`, whose --config contains
/// `needle`, and for the holder record naming both; returns the kubelet's pid.
fn wait_kubelet(scene: &Scene, sup: &Proc, needle: &str, not: &[i32]) -> i32 {
    let sup = sup.pid();
    let pid = wait_until(
        DEADLINE,
        &format!("a kubelet of supervisor {sup} with {needle:?}"),
        || {
            let running = scene.running_kubelets();
            scene
                .starts()
                .into_iter()
                .rev()
                .find(|line| {
                    line.ppid() == sup && !not.contains(&line.pid) && running.contains(&line.pid)
                })
                .map(|line| line.pid)
                .filter(|pid| scene.config_of(*pid).contains(needle))
        },
    );
    wait_until(
        DEADLINE,
        &format!("the holder record of {sup} with kubelet {pid}"),
        || {
            checked_holder_record(&scene.state_dir())
                .filter(|rec| rec["pid"] == sup && rec["kubeletPid"] == pid)
        },
    );
    pid
}

/// `"eventBurst":N` as it appears in the effective (JSON) config file.
fn event_burst(n: u32) -> String {
    format!("\"eventBurst\":{n}")
}

/// Asserts what `reader`'s `status` says of the lock: the live holder `holder` (written by
/// `holder_build`) and a live claim of `claimant` (written by `claimant_build`); [`New`]
/// names each one's version, or that it is older than [`FIRST_RECORDED`].
fn assert_status_of_lock(
    scene: &Scene,
    reader: Build,
    (holder, holder_build): (&Proc, Build),
    (claimant, claimant_build): (&Proc, Build),
) {
    let (code, st) = status(scene, reader);
    assert_eq!(code, 0, "{reader:?} status sees no live holder: {st}");
    let lock = &st["lock"];
    assert_eq!(lock["holder"]["pid"], holder.pid(), "{reader:?}: {st}");
    assert_eq!(lock["holder"]["stale"], false, "{reader:?}: {st}");
    let claim = lock["claims"]
        .as_array()
        .and_then(|claims| claims.iter().find(|c| c["pid"] == claimant.pid()))
        .unwrap_or_else(|| {
            panic!(
                "{reader:?} status lists no claim of {}: {st}",
                claimant.pid()
            )
        });
    let warnings = lock["warnings"].as_array().map_or(0, Vec::len);
    assert_eq!(
        warnings, 0,
        "{reader:?} status warns about the other's state: {st}"
    );
    if reader == New {
        assert_eq!(
            lock["holder"]["build"]["version"],
            holder_build.recorded_version(),
            "{st}"
        );
        assert_eq!(
            claim["build"]["version"],
            claimant_build.recorded_version(),
            "{st}"
        );
        let table = status_table(scene, New);
        let older = format!("unknown (older than {FIRST_RECORDED})");
        // The holder's VERSION line, and one per listed claim (the holder's own among them).
        let old_claims = lock["claims"].as_array().map_or(0, |claims| {
            claims.iter().filter(|c| c["build"].is_null()).count()
        });
        let expected = usize::from(holder_build == Old) + old_claims;
        assert_eq!(
            table.matches(&older).count(),
            expected,
            "the table names the old build's records:\n{table}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// The baseline itself
// ------------------------------------------------------------------------------------------

/// The baseline is another build than this one, and this one's `--version` names its
/// version, commit and protocol version.
#[test]
fn the_baseline_is_another_build_and_version_names_commit_and_protocol() {
    let version = |build: Build| {
        let out = Command::new(build.bin())
            .arg("--version")
            .output()
            .unwrap_or_else(|err| panic!("failed to run {build:?} --version: {err}"));
        assert!(out.status.success(), "{build:?} --version failed");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let new = version(New);
    let old = version(Old);
    assert_ne!(new, old, "the baseline binary is this build");
    // Builds from 0.5.0 on name their commit: a baseline that does must be the pinned one.
    if old.contains("(commit ") {
        let commit = baseline_commit();
        assert!(
            old.contains(&commit[..12]),
            "the baseline binary is not {commit}: {old}"
        );
    }
    let rest = new
        .strip_prefix(&format!(
            "kubelet-pivot {} (commit ",
            env!("CARGO_PKG_VERSION")
        ))
        .unwrap_or_else(|| panic!("--version: {new:?}"));
    let (commit, protocol) = rest
        .strip_suffix(')')
        .and_then(|r| r.split_once(", protocol "))
        .unwrap_or_else(|| panic!("--version: {new:?}"));
    assert!(
        commit == "unknown" || commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "--version commit: {new:?}"
    );
    assert!(
        protocol.parse::<u32>().is_ok(),
        "--version protocol: {new:?}"
    );
}

// ------------------------------------------------------------------------------------------
// Lock: handoff and takeback across builds
// ------------------------------------------------------------------------------------------

/// A host bootstrap of `host` runs config A; a self-hosted gen 1 of `pod` takes over with the
/// same config; `host`'s operator tool assigns B, which `pod` applies; kill -9 of the self-hosted supervisor: the
/// bootstrap takes back within the availability bound, with B. Each build's `status` reads
/// the other's holder record and claims on the way. Never two kubelets.
fn handoff_and_takeback(host: Build, pod: Build) {
    let scene = Scene::new();
    let boot = bootstrap(&scene, host, &[]);
    let local = wait_kubelet(&scene, &boot, "", &[]);
    let a = scene.kubelet_config_file("a.yaml", "eventBurst: 11\n");
    assign(&scene, host, &a);
    let ka = wait_kubelet(&scene, &boot, &event_burst(11), &[local]);

    let mut sh = self_hosted(&scene, pod, "1", &[]);
    wait_kubelet(&scene, &sh, &event_burst(11), &[]);
    assert!(
        !support::pid_alive(ka),
        "the bootstrap's kubelet {ka} still runs"
    );
    for reader in [Old, New] {
        assert_status_of_lock(&scene, reader, (&sh, pod), (&boot, host));
    }

    // The operator runs the host's binary (the one installed on the node) while the
    // DaemonSet's build holds.
    let b = scene.kubelet_config_file("b.yaml", "eventBurst: 22\n");
    assign(&scene, host, &b);
    wait_kubelet(&scene, &sh, &event_burst(22), &[]);

    let killed = now_ns();
    sh.signal(Signal::SIGKILL);
    sh.wait_exit(DEADLINE);
    let back = wait_kubelet(&scene, &boot, &event_burst(22), &[local, ka]);
    let start = scene.start_of(back).expect("the takeback's start line");
    let took = ns_between(killed, start.t_ns);
    eprintln!("{host:?} bootstrap took back from {pod:?} self-hosted in {took:?}");
    assert!(
        took <= TAKEOVER_BOUND,
        "{host:?} bootstrap took {took:?} to take back after kill -9 of {pod:?}"
    );
    assert_eq!(scene.running_kubelets(), vec![back]);
    scene.assert_no_overlap();
}

#[test]
fn old_bootstrap_hands_over_to_new_self_hosted_and_takes_back_after_kill_9() {
    handoff_and_takeback(Old, New);
}

/// The DaemonSet rolled back: a new host bootstrap beside an old self-hosted build.
#[test]
fn new_bootstrap_hands_over_to_old_self_hosted_and_takes_back_after_kill_9() {
    handoff_and_takeback(New, Old);
}

/// Self-hosted gen 1 (old) holds with a config change in flight: a node-replacing change it
/// holds (record `held` in the store, the running config kept). Gen 2 (new) takes over: it
/// starts the config that ran, keeps the change held with the same target, and both builds'
/// `status` show it.
#[test]
fn old_gen_1_hands_over_to_new_gen_2_with_a_held_change_in_flight() {
    let scene = Scene::new();
    let init = scene.kubelet_config_file("init.yaml", "eventBurst: 11\n");
    let init = init.to_str().expect("utf-8 temp path");
    let gen1 = self_hosted(&scene, Old, "1", &["--init-config", init]);
    let k1 = wait_kubelet(&scene, &gen1, &event_burst(11), &[]);
    let b = scene.kubelet_config_file("b.yaml", "eventBurst: 11\ncgroupDriver: systemd\n");
    let uid_b = assign(&scene, Old, &b);
    let held = |build: Build| {
        let (_, st) = status(&scene, build);
        let pending = &st["config"]["pendingChange"];
        (pending["phase"] == "held" && pending["target"]["uid"] == uid_b.as_str()).then_some(st)
    };
    wait_until(DEADLINE, "the old build to hold the change", || held(Old));
    assert_eq!(
        scene.running_kubelets(),
        vec![k1],
        "a held change restarted"
    );

    let gen2 = self_hosted(&scene, New, "2", &["--init-config", init]);
    let k2 = wait_kubelet(&scene, &gen2, &event_burst(11), &[k1]);
    let config = scene.config_of(k2);
    assert!(
        !config.contains("systemd"),
        "gen 2 started the held change: {config}"
    );
    for build in [Old, New] {
        let st = held(build).unwrap_or_else(|| {
            panic!(
                "{build:?} status lost the held change: {:?}",
                status(&scene, build)
            )
        });
        assert_eq!(st["config"]["assigned"]["uid"], uid_b.as_str(), "{st}");
        assert_eq!(
            st["config"]["pendingChange"]["class"], "node-replacing",
            "{st}"
        );
        assert_status_of_lock(&scene, build, (&gen2, New), (&gen1, Old));
    }
    assert_eq!(scene.running_kubelets(), vec![k2]);
    scene.assert_no_overlap();
}

// ------------------------------------------------------------------------------------------
// The checkpoint store across builds
// ------------------------------------------------------------------------------------------

/// `writer` leaves a store with an assigned config that crash-looped (bad), a last-known-good
/// one running, and stops. `reader`'s `status` and `checkpoint list` read it all; `reader`'s
/// bootstrap runs last-known-good and does not try the bad config again; `writer`'s `status`
/// reads `reader`'s holder record.
fn store_written_by_one_is_read_by_the_other(writer: Build, reader: Build) {
    let scene = Scene::new();
    let mut w = bootstrap(&scene, writer, &[]);
    wait_kubelet(&scene, &w, "", &[]);
    let good =
        scene.kubelet_config_file("good.yaml", "eventBurst: 31\nconfigTrialDuration: 500ms\n");
    let good_uid = assign(&scene, writer, &good);
    wait_until(
        DEADLINE,
        "the good config to become last-known-good",
        || {
            let (_, st) = status(&scene, writer);
            (st["config"]["lastKnownGood"]["uid"] == good_uid.as_str()).then_some(())
        },
    );
    let crashing = scene.kubelet_config_file(
        "crash.yaml",
        &format!("eventBurst: 32\nstaticPodURL: http://{CRASH_MARK}/\ncrashLoopThreshold: 0\n"),
    );
    let bad_uid = assign(&scene, writer, &crashing);
    wait_until(DEADLINE, "the crash loop to mark the config bad", || {
        let (_, st) = status(&scene, writer);
        st["config"]["badConfigs"].get(&bad_uid).map(|_| ())
    });
    wait_kubelet(&scene, &w, &event_burst(31), &[]);
    w.signal(Signal::SIGTERM);
    assert!(
        w.wait_exit(DEADLINE).success(),
        "{writer:?} bootstrap failed to stop"
    );

    let (_, st) = status(&scene, reader);
    let config = &st["config"];
    assert_eq!(config["assigned"]["uid"], bad_uid.as_str(), "{st}");
    assert_eq!(config["lastKnownGood"]["uid"], good_uid.as_str(), "{st}");
    assert_eq!(config["active"]["origin"], "last-known-good", "{st}");
    assert!(config["badConfigs"].get(&bad_uid).is_some(), "{st}");
    let warnings = st["lock"]["warnings"].as_array().map_or(0, Vec::len);
    assert_eq!(
        warnings, 0,
        "{reader:?} status warns about {writer:?}'s store: {st}"
    );
    let list = run(&scene, reader, &["checkpoint", "list"]);
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success(),
        "{reader:?} checkpoint list failed: {listed}"
    );
    for uid in [&good_uid, &bad_uid] {
        assert!(listed.contains(uid.as_str()), "{uid} not listed:\n{listed}");
    }

    let crashes = scene.events("crash").len();
    let r = bootstrap(&scene, reader, &[]);
    let k = wait_kubelet(&scene, &r, &event_burst(31), &[]);
    let (code, st) = status(&scene, writer);
    assert_eq!(code, 0, "{writer:?} status on {reader:?}'s holder: {st}");
    assert_eq!(st["lock"]["holder"]["pid"], r.pid(), "{st}");
    assert_eq!(st["lock"]["holder"]["kubeletPid"], k, "{st}");
    assert_eq!(st["config"]["active"]["origin"], "last-known-good", "{st}");
    assert_eq!(
        scene.events("crash").len(),
        crashes,
        "{reader:?} started the config {writer:?} marked bad"
    );
    scene.assert_no_overlap();
}

#[test]
fn a_store_written_by_the_old_build_is_read_by_the_new_one() {
    store_written_by_one_is_read_by_the_other(Old, New);
}

#[test]
fn a_store_written_by_the_new_build_is_read_by_the_old_one() {
    store_written_by_one_is_read_by_the_other(New, Old);
}

// ------------------------------------------------------------------------------------------
// With the API server: a pending drain and the Node's status across builds
// ------------------------------------------------------------------------------------------

support::api_node::node_type! {
    /// One node on the test API server, with the node's credentials, a kubelet root dir and a
    /// healthz port for the stand-in (the drain's health gate).
    Cluster
}

impl Cluster {
    fn new() -> Cluster {
        Cluster(ApiNode::new())
    }

    /// `<build> <role..> --kubeconfig .. --node-name NODE ..`, its kubelet serving healthz.
    fn supervisor(&self, build: Build, role: &[&str], init: &str) -> Proc {
        self.supervisor_with(build, role, init, &["--drain-retry", "1h"])
    }

    /// [`Cluster::supervisor`] with the drain flags `drain`.
    fn supervisor_with(&self, build: Build, role: &[&str], init: &str, drain: &[&str]) -> Proc {
        let root = self.root_str();
        let mut args = self.node_args(role);
        args.extend_from_slice(&["--kubelet-root-dir", root, "--init-config", init]);
        args.extend_from_slice(drain);
        self.scene.spawn(self.scene.pivot_of(
            &build.bin(),
            &args,
            &["--root-dir", root],
            &[("STANDIN_HEALTHZ", "1")],
        ))
    }

    fn configmap(&self, name: &str, extra: &str) -> String {
        self.0.configmap(name, self.config(extra))
    }

    /// Waits until KubeletConfigOK is True for `uid`, the status annotation names it active,
    /// and no drain is pending.
    fn wait_settled(&self, uid: &str) {
        wait_until(DEADLINE, &format!("KubeletConfigOK True for {uid}"), || {
            self.condition().filter(|c| {
                c["status"] == "True" && c["message"].as_str().unwrap_or("").contains(uid)
            })
        });
        wait_until(DEADLINE, &format!("the status annotation of {uid}"), || {
            let node = self.server.node(NODE);
            let text = node["metadata"]["annotations"][STATUS_ANNOTATION].as_str()?;
            text.contains(uid).then_some(())
        });
        wait_until(DEADLINE, "no disruption pending", || {
            (!self.scene.config_dir().join("v1/disruption.json").exists()).then_some(())
        });
    }

    fn unschedulable(&self) -> bool {
        self.server.node(NODE)["spec"]["unschedulable"] == true
    }

    fn node_patches(&self) -> Vec<RequestRecord> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| r.method == "PATCH" && r.path.contains(&format!("/nodes/{NODE}")))
            .collect()
    }

    /// After a handoff to `sup` (running the same config): its syncer's watch is open, and for
    /// a quiet window it PATCHes nothing on the Node.
    fn assert_no_rewrite(&self, sup: Build) {
        wait_until(DEADLINE, "the new holder's watch on the Node", || {
            self.server
                .requests()
                .iter()
                .any(|r| r.watch && r.path.starts_with("/api/v1/nodes") && sup.sent(r))
                .then_some(())
        });
        // A bounded sleep on purpose: checks that no report goes out.
        std::thread::sleep(QUIET_WINDOW);
        let patches = self.node_patches();
        assert!(
            patches.is_empty(),
            "{sup:?} rewrote the Node the other build reported, with nothing changed: {patches:#?}"
        );
    }
}

/// `first` (host bootstrap) runs cfg-a and starts a drain for cfg-b that a PDB blocks (record
/// `evicting`, cordoned by us). `second` (self-hosted gen 1) takes over, resumes that drain
/// from the record and finishes it once the PDB allows; the Node's status it reports is then
/// left alone by `first` after a takeback and by `second` after another handoff.
fn drain_and_node_status_across_builds(first: Build, second: Build) {
    let c = Cluster::new();
    let uid_a = c.configmap("cfg-a", "maxPods: 100\n");
    c.assign("cfg-a");
    let init_path = c.scene.path().join("init.yaml");
    fs::write(&init_path, c.config("maxPods: 100\n")).expect("write the init config");
    let init = init_path.to_str().expect("utf-8 path");
    let host = c.supervisor(first, &["bootstrap"], init);
    c.wait_settled(&uid_a);

    c.server.create_pod(
        APP_NS,
        "web-1",
        NODE,
        json!({"app": "web"}),
        Some("ReplicaSet"),
        json!({}),
    );
    c.server.create_pdb(APP_NS, "web", json!({"app": "web"}), 0);
    let uid_b = c.configmap("cfg-b", "maxPods: 90\n");
    c.assign("cfg-b");
    let record = || -> Option<Value> {
        let path = c.scene.config_dir().join("v1/disruption.json");
        serde_json::from_str(&fs::read_to_string(path).ok()?).ok()
    };
    wait_until(DEADLINE, "a drain blocked by the PDB", || {
        record().filter(|r| {
            r["phase"] == "evicting" && r["cordonedByUs"] == true && r["blocked"].is_array()
        })
    });
    assert!(c.unschedulable(), "cordoned while draining");
    for build in [Old, New] {
        let (_, st) = status(&c.scene, build);
        assert_eq!(
            st["config"]["pendingChange"]["phase"], "evicting",
            "{build:?}: {st}"
        );
    }

    let mut pod = c.supervisor(second, &["self-hosted", "--generation", "1"], init);
    wait_kubelet(&c.scene, &pod, "\"maxPods\":100", &[]);
    wait_until(DEADLINE, "the drain resumed by the new holder", || {
        let resumed = c
            .server
            .requests()
            .iter()
            .any(|r| r.path.ends_with("/eviction") && second.sent(r));
        (resumed && record().is_some_and(|r| r["cordonedByUs"] == true)).then_some(())
    });
    c.server.set_pdb_disruptions_allowed(APP_NS, "web", 1);
    wait_kubelet(&c.scene, &pod, "\"maxPods\":90", &[]);
    c.wait_settled(&uid_b);
    wait_until(DEADLINE, "uncordoned", || {
        (!c.unschedulable()).then_some(())
    });

    // A 0.4.0 bootstrap that yielded in the middle of a drain reports that drain again for
    // about a second when it takes back (fixed in 0.5.0: CHANGELOG, upgrade notes). Restarted
    // as systemd would, it takes back with nothing in memory, and the check below is about
    // what the two builds write, not about that known bug.
    let host = if first == Old {
        drop(host);
        let host = c.supervisor(first, &["bootstrap"], init);
        wait_until(DEADLINE, "the restarted bootstrap's claim", || {
            let (_, st) = status(&c.scene, New);
            let claims = st["lock"]["claims"].as_array().cloned().unwrap_or_default();
            claims
                .iter()
                .any(|cl| cl["pid"] == host.pid())
                .then_some(())
        });
        host
    } else {
        host
    };

    // second -> first (SIGTERM of the pod: the bootstrap takes back), nothing changed.
    c.server.clear_requests();
    pod.signal(Signal::SIGTERM);
    assert!(
        pod.wait_exit(DEADLINE).success(),
        "{second:?} failed to stop"
    );
    wait_kubelet(&c.scene, &host, "\"maxPods\":90", &[]);
    c.assert_no_rewrite(first);

    // first -> second again (a new pod), nothing changed.
    c.server.clear_requests();
    let pod = c.supervisor(second, &["self-hosted", "--generation", "2"], init);
    wait_kubelet(&c.scene, &pod, "\"maxPods\":90", &[]);
    c.assert_no_rewrite(second);
    let cond = c.condition().expect("KubeletConfigOK");
    assert_eq!(cond["status"], "True", "{cond}");
    c.scene.assert_no_overlap();
}

#[test]
fn old_bootstrap_drain_resumed_by_new_self_hosted_and_node_status_left_alone() {
    drain_and_node_status_across_builds(Old, New);
}

#[test]
fn new_bootstrap_drain_resumed_by_old_self_hosted_and_node_status_left_alone() {
    drain_and_node_status_across_builds(New, Old);
}

/// The control: the same run with this build on both sides. A failure here and in the two
/// above is the protocol's, not skew's (this one found a holder taking back after a drain
/// another holder finished reporting its own stale `Draining` on the Node).
#[test]
fn control_same_build_drain_resumed_and_node_status_left_alone() {
    drain_and_node_status_across_builds(New, New);
}

/// `first` (host bootstrap) gives a drain up (`--drain-timeout 1s`) and writes `retryAt` in
/// its format (whole seconds before issue 29, milliseconds since); `second` (self-hosted gen 1)
/// takes over before that moment and, with nothing else happening, tries the drain again at
/// it: not before, and within its timer's margin (1 s in the earlier build) plus a bound.
fn backing_off_drain_retried_across_builds(first: Build, second: Build) {
    let c = Cluster::new();
    let drain = ["--drain-timeout", "1s", "--drain-retry", "4s"];
    let uid_a = c.configmap("cfg-a", "maxPods: 100\n");
    c.assign("cfg-a");
    let init_path = c.scene.path().join("init.yaml");
    fs::write(&init_path, c.config("maxPods: 100\n")).expect("write the init config");
    let init = init_path.to_str().expect("utf-8 path");
    let _host = c.supervisor_with(first, &["bootstrap"], init, &drain);
    c.wait_settled(&uid_a);
    c.server.create_pod(
        APP_NS,
        "web-1",
        NODE,
        json!({"app": "web"}),
        Some("ReplicaSet"),
        json!({}),
    );
    c.server.create_pdb(APP_NS, "web", json!({"app": "web"}), 0);
    c.configmap("cfg-b", "maxPods: 90\n");
    c.assign("cfg-b");
    let record = wait_until(DEADLINE, "the drain to back off", || {
        let path = c.scene.config_dir().join("v1/disruption.json");
        let r: Value = serde_json::from_str(&fs::read_to_string(path).ok()?).ok()?;
        (r["phase"] == "backing-off").then_some(r)
    });
    let stamp = record["retryAt"].as_str().expect("retryAt").to_string();
    let retry_at = humantime::parse_rfc3339_weak(&stamp).expect("retryAt in RFC 3339");
    let pod = c.supervisor_with(second, &["self-hosted", "--generation", "1"], init, &drain);
    wait_kubelet(&c.scene, &pod, "\"maxPods\":100", &[]);
    assert!(
        std::time::SystemTime::now() < retry_at,
        "the handoff came after retryAt {stamp}: nothing left to test"
    );
    let seen = support::poll_until(
        Duration::from_secs(20),
        Duration::from_millis(5),
        "the new holder to cordon again at retryAt",
        || {
            c.server
                .requests()
                .iter()
                .any(|r| {
                    r.method == "PATCH"
                        && second.sent(r)
                        && r.body.contains("\"unschedulable\":true")
                })
                .then(std::time::SystemTime::now)
        },
    );
    let late = seen.duration_since(retry_at).unwrap_or_else(|e| {
        panic!(
            "{second:?} retried {:?} before retryAt {stamp}",
            e.duration()
        )
    });
    eprintln!("{first:?} -> {second:?}: retryAt {stamp}, retried {late:?} after it");
    assert!(
        late <= Duration::from_millis(2500),
        "{second:?} retried {late:?} after retryAt {stamp}"
    );
}

#[test]
fn old_bootstrap_retry_at_is_kept_by_new_self_hosted() {
    backing_off_drain_retried_across_builds(Old, New);
}

#[test]
fn new_bootstrap_retry_at_is_kept_by_old_self_hosted() {
    backing_off_drain_retried_across_builds(New, Old);
}

/// Issue 34: set-based selectors live in `spec.nodeSelectorExpressions`, which a
/// controller of the earlier release ignores: it would roll to every node the KEY=VALUE
/// part alone matches. `rollout start` reads the Lease: with the baseline's controller
/// holding it, a set-based selector is refused (nothing created), a KEY=VALUE one is
/// not; once this build's controller holds it, the set-based one starts.
#[test]
fn a_set_based_selector_is_refused_while_an_older_controller_leads() {
    use crate::support::rollout::{self, CrdServer, Timings};
    const LEASE: &str = "kubelet-pivot-rollout-controller";
    let CrdServer {
        server,
        dir,
        kubeconfig,
    } = CrdServer::start();
    let data = [(
        "kubelet".to_string(),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 50\n"
            .to_string(),
    )];
    server.create_configmap("kubelet-config", "good", data.into_iter().collect(), true);
    for (name, pool) in [("n-a", "a"), ("n-b", "b")] {
        server.create_node(name, Vec::<(String, String)>::new());
        server
            .patch_node(name, json!({"metadata": {"labels": {"pool": pool}}}), false)
            .expect("label");
    }
    let controller = |build: Build, identity: &str| {
        let log = fs::File::create(dir.path().join(format!("{identity}.log"))).expect("log");
        let t = Timings {
            lease_duration: "1s",
            renew_deadline: "800ms",
            retry_period: "100ms",
            debounce: "50ms",
        };
        let mut cmd = Command::new(build.bin());
        cmd.args(["rollout-controller", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--namespace", "kubelet-pivot", "--identity", identity])
            .args([
                "--lease-duration",
                t.lease_duration,
                "--renew-deadline",
                t.renew_deadline,
            ])
            .args(["--retry-period", t.retry_period, "--debounce", t.debounce])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        Proc::spawn(&mut cmd)
    };
    let wait_holder = |identity: &str| {
        wait_until(DEADLINE, &format!("{identity} holds the lease"), || {
            let lease = server.lease("kubelet-pivot", LEASE)?;
            (lease["spec"]["holderIdentity"] == identity).then_some(lease)
        })
    };
    let start = |name: &str, selector: &str| {
        rollout::cli(
            &kubeconfig,
            &[
                "start",
                name,
                "--config",
                "kubelet-config/good",
                "-l",
                selector,
            ],
        )
    };

    let mut old = controller(Old, "ctl-old");
    wait_holder("ctl-old");
    let out = start("r-set", "pool in (a)");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "the rollout controller holding lease kubelet-pivot/{LEASE} (ctl-old) is of an earlier release"
        )),
        "{err}"
    );
    assert!(
        rollout::stored(&server, "r-set").is_none(),
        "refused: nothing created"
    );
    let out = start("r-eq", "pool=a");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    old.signal(Signal::SIGTERM);
    assert!(old.wait_exit(DEADLINE).success());
    let _new = controller(New, "ctl-new");
    let lease = wait_holder("ctl-new");
    let features = lease["metadata"]["annotations"]["kubelet-pivot.io/controller-features"]
        .as_str()
        .expect("the features annotation")
        .to_string();
    assert!(features.contains("\"holder\":\"ctl-new\""), "{features}");
    let out = start("r-set", "pool in (a)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(rollout::stored(&server, "r-set").is_some());
}
