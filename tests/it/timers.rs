//! Every timer of an idle holder fires with nothing else happening (issue 29, item 4).
//!
//! The idle work (issue 23) moved the holder's periodic look to timers at the moments the
//! store names: a drain's retry (`retryAt` in `v1/disruption.json`), a trial's end (promotion
//! to last-known-good), and the settle check a second after each kubelet start (which arms the
//! trial's timer). Each test here uses short durations, then makes NO event on the node (no file
//! written, no API object changed) and waits for the moment: what must happen then happens,
//! not before it, and within [`LATE`] of it (generous: these tests also run under
//! `/work/shared/tools/under-load`). The measured lateness is printed (`--nocapture`).
//!
//! The real binary, the stand-in kubelet and the strict test API server (node credentials),
//! as in tests/it/disruption.rs.

use crate::support;

use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;
use serde_json::{json, Value};
use support::api_node::{ApiNode, NODE};
use support::lock_state::{blocked_on, claim_pids};
use support::{kubelet_config, poll_until, wait_until, Proc, Scene};
use testkit::RequestRecord;

const APP_NS: &str = "default";
const DEADLINE: Duration = Duration::from_secs(20);
/// How late a timer's action may come, under load included.
const LATE: Duration = Duration::from_millis(500);
/// The test's own look at the request log and the store.
const LOOK: Duration = Duration::from_millis(5);

support::api_node::node_type! {
    /// [`ApiNode`] with the supervisor and the looks of these tests.
    Node
}

impl Node {
    fn new() -> Node {
        Node(ApiNode::new())
    }

    /// The bootstrap supervisor with node credentials, the local config `extra` and `flags`.
    fn supervisor(&self, extra: &str, flags: &[&str]) -> Proc {
        self.supervisor_with(extra, flags, &[])
    }

    /// [`Node::supervisor`] with the stand-in's `env`.
    fn supervisor_with(&self, extra: &str, flags: &[&str], env: &[(&str, &str)]) -> Proc {
        let init = self.scene.path().join("init.yaml");
        std::fs::write(&init, kubelet_config(extra)).expect("write the init config");
        let root = self.root_str();
        let init = init.to_str().expect("utf-8 path");
        let mut args = self.node_args(&["bootstrap"]);
        args.extend_from_slice(&["--kubelet-root-dir", root, "--init-config", init]);
        args.extend_from_slice(flags);
        self.scene
            .spawn(self.scene.pivot(&args, &["--root-dir", root], env))
    }

    /// ConfigMap `name` with the config `extra`; returns its uid.
    fn configmap(&self, name: &str, extra: &str) -> String {
        self.0.configmap(name, kubelet_config(extra))
    }

    fn wait_kubelet_with(&self, needle: &str) -> i32 {
        wait_until(
            DEADLINE,
            &format!("a kubelet running with {needle}"),
            || {
                let (pid, content) = self.running()?;
                content.contains(needle).then_some(pid)
            },
        )
    }

    fn store_json(&self, rel: &str) -> Option<Value> {
        let text = std::fs::read_to_string(self.scene.config_dir().join(rel)).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn cordons(&self) -> Vec<RequestRecord> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| {
                r.method == "PATCH"
                    && r.path.ends_with(&format!("/nodes/{NODE}"))
                    && r.body.contains("\"unschedulable\":true")
            })
            .collect()
    }

    fn evictions(&self) -> usize {
        self.server
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
            .count()
    }

    /// A store file's modification time (the moment of the write that made it).
    fn mtime(&self, rel: &str) -> Option<SystemTime> {
        std::fs::metadata(self.scene.config_dir().join(rel))
            .and_then(|m| m.modified())
            .ok()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.scene.output());
        }
    }
}

fn parse_time(t: &str) -> SystemTime {
    humantime::parse_rfc3339_weak(t).unwrap_or_else(|err| panic!("RFC 3339 {t:?}: {err}"))
}

/// `at` came at or after `due` and at most [`LATE`] after it; returns how late.
fn assert_on_time(what: &str, due: SystemTime, at: SystemTime) -> Duration {
    let late = at
        .duration_since(due)
        .unwrap_or_else(|e| panic!("{what} came {:?} before its moment", e.duration()));
    assert!(late <= LATE, "{what} came {late:?} after its moment");
    eprintln!("TIMER {what}: {late:?} after its moment");
    late
}

/// A drain that timed out is tried again at `retryAt` (cordon and evictions again) with no
/// other event; the wait doubles (2 s, then 4 s after the give-up) and is stamped in ms.
#[test]
fn a_drain_that_timed_out_is_tried_again_at_retry_at() {
    let n = Node::new();
    n.configmap("cfg-a", "maxPods: 100\n");
    n.assign("cfg-a");
    let _p = n.supervisor(
        "maxPods: 100\n",
        &["--drain-timeout", "1s", "--drain-retry", "2s"],
    );
    n.wait_kubelet_with("\"maxPods\":100");
    n.server.create_pod(
        APP_NS,
        "web-1",
        NODE,
        json!({"app": "web"}),
        Some("ReplicaSet"),
        json!({}),
    );
    n.server.create_pdb(APP_NS, "web", json!({"app": "web"}), 0);
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    // From here on, nothing happens on the node but what the supervisor does.
    for (attempt, wait) in [(1u64, 2u64), (2, 4)] {
        let record = poll_until(DEADLINE, LOOK, "the drain to back off", || {
            n.store_json("v1/disruption.json")
                .filter(|r| r["phase"] == "backing-off" && r["attempts"] == json!(attempt))
        });
        let written = n.mtime("v1/disruption.json").expect("record mtime");
        let stamp = record["retryAt"].as_str().expect("retryAt");
        assert!(stamp.contains('.'), "milliseconds in {stamp}");
        let retry_at = parse_time(stamp);
        let wait_of = retry_at
            .duration_since(written)
            .unwrap_or_else(|e| panic!("retryAt before the write by {:?}", e.duration()));
        let want = Duration::from_secs(wait);
        // The record is written just after retryAt is computed; file times are coarse
        // (the kernel's tick), so the write may look a few ms early.
        assert!(
            wait_of <= want + Duration::from_millis(50)
                && wait_of + Duration::from_millis(200) >= want,
            "attempt {attempt}: retryAt {wait_of:?} after the write, want {want:?}"
        );
        let cordons = n.cordons().len();
        let evictions = n.evictions();
        let seen = poll_until(DEADLINE, LOOK, "the node cordoned again", || {
            (n.cordons().len() > cordons).then(SystemTime::now)
        });
        assert_on_time(&format!("drain retry {attempt} ({wait}s)"), retry_at, seen);
        poll_until(DEADLINE, LOOK, "evictions of the retry", || {
            (n.evictions() > evictions).then_some(())
        });
    }
    assert_eq!(
        n.running().map(|r| r.1.contains("\"maxPods\":100")),
        Some(true),
        "the old config runs while the drain is blocked"
    );
}

/// A drain's evictions pause for a second after API priority and fairness's 429 (no
/// Retry-After the client can read: `THROTTLE_PAUSE`), though the refused pod's own backoff
/// (0.5 s) ends first; nothing else happens meanwhile, and the pod is asked again at the end
/// of the pause, not before and not at the next progress report.
#[test]
fn evictions_resume_when_the_throttling_pause_ends() {
    use kp_node::cluster::drain::THROTTLE_PAUSE;
    let n = Node::new();
    n.configmap("cfg-a", "maxPods: 100\n");
    n.assign("cfg-a");
    let _p = n.supervisor("maxPods: 100\n", &["--drain-retry", "1h"]);
    n.wait_kubelet_with("\"maxPods\":100");
    n.server.create_pod(
        APP_NS,
        "web-1",
        NODE,
        json!({"app": "web"}),
        Some("ReplicaSet"),
        json!({}),
    );
    n.server.throttle_next_evictions(1);
    n.configmap("cfg-b", "maxPods: 90\n");
    n.assign("cfg-b");
    let evictions = || -> Vec<RequestRecord> {
        n.server
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
            .collect()
    };
    let throttled = poll_until(DEADLINE, LOOK, "the throttled eviction", || {
        evictions().into_iter().find(|r| r.status == 429)
    });
    // From here on, nothing happens on the node but what the supervisor does.
    let asked_again = poll_until(DEADLINE, LOOK, "the eviction asked again", || {
        evictions().into_iter().find(|r| r.status == 201)
    });
    let due = throttled.answered + THROTTLE_PAUSE;
    let late = asked_again
        .received
        .checked_duration_since(due)
        .unwrap_or_else(|| {
            panic!(
                "asked again {:?} before the pause ended",
                due - asked_again.received
            )
        });
    assert!(late <= LATE, "asked again {late:?} after the pause ended");
    eprintln!("TIMER throttling pause (1 s): {late:?} after its moment");
    assert_eq!(evictions().len(), 2);
}

/// A config on trial becomes last-known-good when its trial ends, with no other event: the
/// settle check a second after the start arms the trial's timer.
#[test]
fn a_trial_ends_with_nothing_else_happening() {
    let n = Node::new();
    let uid = n.configmap("cfg-a", "eventBurst: 42\nconfigTrialDuration: 3s\n");
    n.assign("cfg-a");
    let _p = n.supervisor("eventBurst: 7\n", &[]);
    n.wait_kubelet_with("\"eventBurst\":42");
    let trial = wait_until(DEADLINE, "cfg-a on trial", || {
        n.store_json("v1/trial.json").filter(|t| {
            t["source"]["configMap"]["uid"] == uid.as_str() || t.to_string().contains(&uid)
        })
    });
    let ends = parse_time(trial["since"].as_str().expect("since")) + Duration::from_secs(3);
    assert!(
        n.mtime("meta/last-known-good").is_none(),
        "promoted before the trial ended"
    );
    // Nothing happens on the node until the promotion.
    wait_until(DEADLINE, "cfg-a to become last-known-good", || {
        std::fs::read_to_string(n.scene.config_dir().join("meta/last-known-good"))
            .ok()
            .filter(|s| s.contains(&uid))
    });
    let promoted = n
        .mtime("meta/last-known-good")
        .expect("last-known-good mtime");
    assert_on_time("trial end", ends, promoted);
    // The promotion writes last-known-good first and then ends the trial (a crash in
    // between leaves a trial of a config already known good, which the next start ends
    // again), so the trial record may outlive the promotion by a moment.
    wait_until(
        DEADLINE,
        "the trial record to end with the promotion",
        || {
            n.store_json("v1/trial.json")
                .is_none_or(|t| t.is_null())
                .then_some(())
        },
    );
}

/// `--drain-retry 0s` is refused at start with a clear error: a drain refused at once would
/// be tried again in a loop against the API server.
#[test]
fn drain_retry_zero_is_refused_with_a_clear_error() {
    let n = Node::new();
    for value in ["0s", "500ms"] {
        let mut p = n.scene.spawn(n.scene.pivot(
            &["bootstrap", "--node-name", NODE, "--drain-retry", value],
            &[],
            &[],
        ));
        let status = p.wait_exit(DEADLINE);
        let err = n.scene.output();
        assert_eq!(status.code(), Some(2), "{value}: {err}");
        assert!(
            err.contains(&format!("'{value}' for '--drain-retry"))
                && err.contains("too short")
                && err.contains("at least 1s"),
            "{value}: {err}"
        );
        assert!(n.scene.running_kubelets().is_empty(), "no kubelet started");
    }
}

/// A crashed kubelet is started again when its backoff ends (100 ms, doubling), with nothing
/// else happening: the restart comes from the backoff timer alone.
#[test]
fn a_crashed_kubelet_is_restarted_when_its_backoff_ends() {
    let scene = Scene::new();
    let _p = scene.spawn(scene.pivot(&["bootstrap"], &[], &[("STANDIN_CRASH_AFTER_MS", "150")]));
    let delays = [100u64, 200, 400, 800, 1600];
    let log = wait_until(DEADLINE, "six kubelet starts", || {
        let starts = scene.starts();
        (starts.len() > delays.len()).then(|| scene.read_log())
    });
    let mut crash_at = None;
    let mut restarts = 0;
    for line in &log {
        match line.event.as_str() {
            "crash" => crash_at = Some(line.t_ns),
            "start" => {
                if let Some(crashed) = crash_at.take() {
                    let delay = Duration::from_millis(delays[restarts]);
                    let gap = support::ns_between(crashed, line.t_ns);
                    let late = gap.checked_sub(delay).unwrap_or_else(|| {
                        panic!(
                            "restart {} came {gap:?} after the crash, before its backoff {delay:?}",
                            restarts + 1
                        )
                    });
                    assert!(
                        late <= LATE,
                        "restart {} came {late:?} after its backoff {delay:?}",
                        restarts + 1
                    );
                    eprintln!("TIMER backoff {delay:?}: {late:?} after its moment");
                    restarts += 1;
                    if restarts == delays.len() {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    assert_eq!(restarts, delays.len(), "{log:#?}");
}

/// A kubelet that ignores SIGTERM is killed when `--stop-timeout` ends, with nothing else
/// happening.
#[test]
fn a_kubelet_that_ignores_sigterm_is_killed_at_the_stop_timeout() {
    let scene = Scene::new();
    let mut p = scene.spawn(scene.pivot(
        &["bootstrap", "--stop-timeout", "1s"],
        &[],
        &[("STANDIN_IGNORE_TERM", "1")],
    ));
    let kubelet = wait_until(DEADLINE, "a running kubelet", || {
        scene.running_kubelets().first().copied()
    });
    assert!(p.signal(nix::sys::signal::Signal::SIGTERM));
    let term = wait_until(DEADLINE, "the kubelet to see SIGTERM", || {
        scene.events("term").into_iter().find(|l| l.pid == kubelet)
    });
    let gone = poll_until(DEADLINE, LOOK, "the kubelet to be killed", || {
        (!support::pid_alive(kubelet)).then(support::now_ns)
    });
    let stop_timeout = Duration::from_secs(1);
    let took = support::ns_between(term.t_ns, gone);
    let late = took
        .checked_sub(stop_timeout)
        .unwrap_or_else(|| panic!("killed {took:?} after SIGTERM, before --stop-timeout 1s"));
    // SIGTERM was sent a moment before the kubelet logged it.
    assert!(late <= LATE, "killed {late:?} after --stop-timeout");
    eprintln!("TIMER stop timeout 1s: {late:?} after its moment");
    p.wait_exit(DEADLINE);
}

/// The settle check a second after each start clears the kubelet's crash count: a config
/// kept running while a drain waits survives kubelet exits that each came after its settle
/// check (no other event in between), and is given up after three in a row before it.
#[test]
fn the_settle_check_keeps_a_pinned_config_through_spaced_crashes() {
    let n = Node::new();
    let trial = "configTrialDuration: 1s\n";
    let a = n.configmap("cfg-a", &format!("maxPods: 100\n{trial}"));
    n.assign("cfg-a");
    let _p = n.supervisor(
        &format!("maxPods: 100\n{trial}"),
        &["--drain-timeout", "1s", "--drain-retry", "1h"],
    );
    // cfg-a is last-known-good (its crashes count against no trial).
    wait_until(DEADLINE, "cfg-a to become last-known-good", || {
        std::fs::read_to_string(n.scene.config_dir().join("meta/last-known-good"))
            .ok()
            .filter(|s| s.contains(&a))
    });
    n.server.create_pod(
        APP_NS,
        "web-1",
        NODE,
        json!({"app": "web"}),
        Some("ReplicaSet"),
        json!({}),
    );
    n.server.create_pdb(APP_NS, "web", json!({"app": "web"}), 0);
    n.configmap("cfg-b", &format!("maxPods: 90\n{trial}"));
    n.assign("cfg-b");
    wait_until(DEADLINE, "the drain to back off", || {
        n.store_json("v1/disruption.json")
            .filter(|r| r["phase"] == "backing-off")
    });
    // Kills the next kubelet (not `old`) `min_run` after its start; returns its pid.
    let kill_after = |old: i32, min_run: Duration| -> i32 {
        let pid = wait_until(DEADLINE, "a new kubelet with maxPods 100", || {
            let (pid, content) = n.running()?;
            (pid != old && content.contains("\"maxPods\":100")).then_some(pid)
        });
        let start = n.scene.start_of(pid).expect("start line");
        poll_until(DEADLINE, LOOK, "the kubelet to run long enough", || {
            (support::ns_between(start.t_ns, support::now_ns()) >= min_run).then_some(())
        });
        assert!(support::signal_pid(pid, nix::sys::signal::Signal::SIGKILL));
        pid
    };
    // Three exits, each 1.5 s after its start: the settle check came before each.
    let mut last = 0;
    for _ in 0..3 {
        last = kill_after(last, Duration::from_millis(1500));
    }
    let after = wait_until(DEADLINE, "a kubelet after the third exit", || {
        let (pid, content) = n.running()?;
        (pid != last).then_some(content)
    });
    assert!(
        after.contains("\"maxPods\":100"),
        "the pinned config was given up though every kubelet ran past its settle check"
    );
    // The third exit counts (no check since); two more right after their starts make three
    // in a row with no settle check in between: the pinned config is given up.
    for _ in 0..2 {
        last = kill_after(last, Duration::ZERO);
    }
    wait_until(DEADLINE, "the new config after three quick exits", || {
        let (pid, content) = n.running()?;
        (pid != last && content.contains("\"maxPods\":90")).then_some(())
    });
}

/// How often a holder looks at a higher claimant that may not be yielded to now (stopped):
/// `OUTRANKED_RECHECK` in src/supervisor/mod.rs.
const OUTRANKED_RECHECK: Duration = Duration::from_secs(1);

/// Waits until supervisor `pid` has its claim and is blocked in flock on the lock.
fn wait_standing_by(scene: &Scene, pid: i32) {
    wait_until(DEADLINE, &format!("supervisor {pid} to stand by"), || {
        (claim_pids(&scene.state_dir()).contains(&pid) && blocked_on(&scene.lock()).contains(&pid))
            .then_some(())
    });
}

/// A pending handoff's look: the holder does not yield to a higher generation that is
/// stopped; once it is thawed (which makes no event: it resumes its flock), the holder's timed
/// look sees it blocked and hands over within `OUTRANKED_RECHECK`.
#[test]
fn a_thawed_higher_generation_is_handed_the_node_by_the_timed_look() {
    use std::os::unix::fs::OpenOptionsExt;
    let scene = Scene::new();
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(scene.lock())
        .expect("create the lock file");
    fs2::FileExt::try_lock_exclusive(&held).expect("flock the lock file");
    let holder = scene.spawn(scene.pivot(&["bootstrap"], &[], &[]));
    wait_standing_by(&scene, holder.pid());
    let mut contender = scene.spawn(scene.pivot(&["self-hosted", "--generation", "2"], &[], &[]));
    wait_standing_by(&scene, contender.pid());
    assert!(contender.signal(Signal::SIGSTOP));
    wait_until(DEADLINE, "the contender to be stopped", || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", contender.pid())).ok()?;
        let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
        (state == 'T' || state == 't').then_some(())
    });
    drop(held);
    let kubelet = wait_until(DEADLINE, "the bootstrap's kubelet", || {
        scene.kubelet_of(holder.pid())
    });
    // Idle past a look or two: the holder keeps its kubelet (a stopped process is not
    // yielded to). A bounded sleep on purpose: nothing may happen meanwhile.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        scene.events("term").is_empty(),
        "yielded to a stopped contender"
    );
    let thawed = support::now_ns();
    assert!(contender.signal(Signal::SIGCONT));
    let term = wait_until(
        DEADLINE,
        "the bootstrap's kubelet to be stopped for the handoff",
        || scene.events("term").into_iter().find(|l| l.pid == kubelet),
    );
    let took = support::ns_between(thawed, term.t_ns);
    assert!(
        took <= OUTRANKED_RECHECK + LATE,
        "handed over {took:?} after the thaw (the look comes every {OUTRANKED_RECHECK:?})"
    );
    eprintln!("TIMER outranked look (every 1s): handoff began {took:?} after the thaw");
    wait_until(DEADLINE, "the contender's kubelet", || {
        scene.kubelet_of(contender.pid())
    });
}
