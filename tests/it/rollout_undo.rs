//! Issue 32 items 4 and 5 against the real `rollout-controller` binary, the strict test API
//! server and simulated nodes (`testkit::NodeSim`), with the helpers of tests/it/rollout.rs:
//!
//! - undo and resume act at once: a failed canary is back on its previous config within
//!   30 s of `rollout undo` although `configActiveTimeout` is 10m, and a rollout resumed
//!   after a fallback goes on with the whole next batch right after its soak;
//! - finished is final: the global stop turned on and off, and an invalid field set and
//!   fixed, leave a Completed and an Undone rollout in their phase and post no Event again
//!   (counted on the server).
//!
//! Every wait polls an observable fact with a deadline.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::{NodeSim, Script};

use super::rollout::{condition, count_reason, http, node, rollout_events, Cluster};
use crate::support::rollout::{paused_reason, stored};
use crate::support::wait_until;

const NS: &str = "kubelet-config";
const CFG_A: &str = "kubelet-config/cfg-a:kubelet";
const CFG_B: &str = "kubelet-config/cfg-b:kubelet";
const ROLLOUTS: &str = "/apis/kubelet-pivot.io/v1alpha1/kubeletconfigrollouts";
/// What issue 32 promises: a failed canary back on its previous config within this long
/// of `rollout undo`.
const UNDO_PROMISE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(30);
/// The flags of both scenarios of item 4: a canary, batches of 3 (of 9 nodes in 3 zones:
/// one node of each zone per batch), one node per zone unavailable at a time, and the
/// default 10 minutes for a changed node to show its config active. Each node must run
/// the config 1 s without falling back (the scripted fallbacks come after 200 ms).
const FLAGS: [&str; 10] = [
    "--canary",
    "1",
    "--batch",
    "3",
    "--max-unavailable",
    "1",
    "--config-active-timeout",
    "10m",
    "--no-fallback-for",
    "1s",
];

/// `node` falls back to its last-known-good config 200 ms after it runs cfg-b (and stays
/// Ready on it).
fn falls_back(sim: &NodeSim, node: &str) {
    sim.script(
        node,
        Script::RollsBack {
            on: Some(format!("{NS}/cfg-b")),
            after: Some(Duration::from_millis(200)),
        },
    );
}

/// The rollout as stored, once its status is up to date with its spec and `accept` takes it.
fn wait_for(c: &Cluster, name: &str, what: &str, accept: impl Fn(&Value) -> bool) -> Value {
    wait_until(DEADLINE, &format!("rollout {name}: {what}"), || {
        let r = stored(&c.server, name)?;
        (r["status"]["observedGeneration"] == r["metadata"]["generation"] && accept(&r))
            .then_some(r)
    })
}

fn phase_is(r: &Value, phase: &str) -> bool {
    r["status"]["phase"] == phase
}

/// The Node's config-status annotation, parsed (Null without one).
fn config_status(node: &Value) -> Value {
    node["metadata"]["annotations"]["kubelet-pivot.io/config-status"]
        .as_str()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

/// Whether the node reports the ConfigMap `name` active, with KubeletConfigOK=True.
fn runs(c: &Cluster, node: &str, name: &str) -> bool {
    let n = c.server.node(node);
    let status = config_status(&n);
    let ok = n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "KubeletConfigOK" && c["status"] == "True");
    status["active"]["configMap"]["name"] == name && status["error"].is_null() && ok
}

#[test]
fn a_failed_canary_is_back_on_its_previous_config_within_30s_of_undo() {
    let c = Cluster::new();
    let sim = c.sim(9);
    falls_back(&sim, &node(0));
    let _ctl = c.controller("ctl-a");
    c.start("r1", "cfg-b", &FLAGS);
    let r = c.wait_phase("r1", "Paused");
    assert_eq!(paused_reason(&r), "True=CanaryFailed", "{r:#}");
    assert_eq!(r["status"]["batches"][0][0], node(0));
    wait_until(
        DEADLINE,
        "the canary back on cfg-a (its last-known-good)",
        || runs_fallback(&c, &node(0)).then_some(()),
    );

    let asked = Instant::now();
    let out = c.cli_ok(&["undo", "r1"]);
    assert!(out.contains("undoing"), "{out}");
    // The pause and the soak are gone from the status from the first write of the undo on.
    let first = wait_for(&c, "r1", "undoing", |r| {
        phase_is(r, "Undoing") || phase_is(r, "Undone")
    });
    assert_ne!(paused_reason(&first), "True=CanaryFailed", "{first:#}");
    assert!(first["status"]["soakUntil"].is_null(), "{first:#}");
    let back = wait_until(UNDO_PROMISE, "the canary back on cfg-a, undone", || {
        let r = stored(&c.server, "r1")?;
        (c.assignment(&node(0)).as_deref() == Some(CFG_A)
            && runs(&c, &node(0), "cfg-a")
            && phase_is(&r, "Undone"))
        .then_some(r)
    });
    let took = asked.elapsed();
    assert!(took < UNDO_PROMISE, "{took:?}");
    assert_eq!(paused_reason(&back), "False=Undo", "{back:#}");
    let shown = c.cli_ok(&["status", "r1"]);
    eprintln!("rollout status r1, undone:\n{shown}");
    assert!(!shown.contains("CanaryFailed"), "{shown}");
    assert!(!shown.contains("SOAK"), "{shown}");
    // No other node was ever changed.
    for i in 1..9 {
        assert_eq!(
            c.assignment(&node(i)).as_deref(),
            Some(CFG_A),
            "{}",
            node(i)
        );
    }
    let events = wait_until(DEADLINE, "the undo's Events", || {
        let e = rollout_events(&c, "r1");
        (count_reason(&e, "Undone") == 1).then_some(e)
    });
    assert_eq!(count_reason(&events, "UndoStarted"), 1, "{events:#?}");
    assert_eq!(count_reason(&events, "Resumed"), 0, "{events:#?}");
    eprintln!("undo of a failed canary: back on cfg-a and Undone {took:.1?} after `rollout undo` (configActiveTimeout 10m)");
}

/// Whether the node fell back: cfg-b assigned, cfg-a active, an error reported.
fn runs_fallback(c: &Cluster, node: &str) -> bool {
    let status = config_status(&c.server.node(node));
    status["assigned"]["configMap"]["name"] == "cfg-b"
        && status["active"]["configMap"]["name"] == "cfg-a"
        && !status["error"].is_null()
}

#[test]
fn a_rollout_resumed_after_a_fallback_goes_on_with_the_whole_next_batch_after_its_soak() {
    let c = Cluster::new();
    let sim = c.sim(9);
    // Rollout order: node 0 (the canary), then batches [1, 2, 3], [4, 5, 6], [7, 8]; nodes
    // 0, 3 and 6 are zone-a. Node 3 falls back in batch 1 and stays Ready on cfg-a.
    falls_back(&sim, &node(3));
    let _ctl = c.controller("ctl-a");
    let mut flags = FLAGS.to_vec();
    flags.extend(["--soak", "2s"]);
    c.start("r1", "cfg-b", &flags);
    let r = c.wait_phase("r1", "Paused");
    assert_eq!(paused_reason(&r), "True=Fallback", "{r:#}");
    let batches: Vec<Vec<String>> =
        serde_json::from_value(r["status"]["batches"].clone()).expect("batches");
    assert_eq!(batches[1], vec![node(1), node(2), node(3)]);
    assert_eq!(batches[2], vec![node(4), node(5), node(6)]);
    for n in &batches[2] {
        assert_eq!(c.assignment(n).as_deref(), Some(CFG_A), "{n}");
    }

    let resumed = Instant::now();
    let out = c.cli_ok(&["resume", "r1"]);
    assert!(out.contains("its failed node is acknowledged"), "{out}");
    // The soak of batch 1 (2 s), then all of batch 2 at once: node 3, Ready on its
    // last-known-good, holds no place of zone-a.
    wait_until(DEADLINE, "every node of batch 2 assigned cfg-b", || {
        batches[2]
            .iter()
            .all(|n| c.assignment(n).as_deref() == Some(CFG_B))
            .then_some(())
    });
    let next_batch = resumed.elapsed();
    let r = c.wait_phase("r1", "CompletedWithFailures");
    let completed = resumed.elapsed();
    assert_eq!(r["status"]["counts"]["done"], 8, "{r:#}");
    assert_eq!(r["status"]["counts"]["failed"], 1, "{r:#}");
    assert!(runs_fallback(&c, &node(3)), "node 3 keeps its fallback");
    eprintln!(
        "resume after a fallback (soak 2s, configActiveTimeout 10m): batch 2 wholly assigned \
         {next_batch:.1?} after `resume`, CompletedWithFailures after {completed:.1?}"
    );
}

/// Sets `spec` fields of rollout `name` with a merge patch, as `kubectl patch` does.
fn patch_spec(c: &Cluster, name: &str, spec: Value) {
    let (code, answer) = http(
        &c.server,
        "PATCH",
        &format!("{ROLLOUTS}/{name}"),
        "application/merge-patch+json",
        &json!({ "spec": spec }),
    );
    assert_eq!(code, 200, "{answer:#}");
}

/// Labels nodes `from..to` `pool=POOL`.
fn label(c: &Cluster, range: std::ops::Range<usize>, pool: &str) {
    for i in range {
        c.server
            .patch_node(
                &node(i),
                json!({"metadata": {"labels": {"pool": pool}}}),
                false,
            )
            .expect("label the node");
    }
}

/// An invalid field set and fixed on the finished rollout `name`: Invalid, then `phase`
/// again, each written for the generation it was decided on.
fn invalid_and_fixed(c: &Cluster, name: &str, phase: &str) {
    patch_spec(c, name, json!({"soak": "soon"}));
    let r = wait_for(c, name, "Invalid", |r| phase_is(r, "Invalid"));
    assert_eq!(condition(&r, "Valid").expect("Valid")["status"], "False");
    patch_spec(c, name, json!({"soak": "0s"}));
    wait_for(c, name, phase, |r| phase_is(r, phase));
}

#[test]
fn the_global_stop_and_a_fixed_field_leave_finished_rollouts_and_their_events_alone() {
    let c = Cluster::new();
    let _sim = c.sim(9);
    label(&c, 0..3, "a");
    label(&c, 3..6, "b");
    label(&c, 6..9, "c");
    let _ctl = c.controller("ctl-a");
    let one_batch = ["--canary", "0", "--batch", "3", "--max-unavailable", "3"];
    let with = |pool: &'static str| {
        let mut flags = one_batch.to_vec();
        flags.extend(["--selector", pool]);
        flags
    };
    c.start("done", "cfg-b", &with("pool=a"));
    c.wait_phase("done", "Completed");
    c.start("undone", "cfg-b", &with("pool=b"));
    c.wait_phase("undone", "Completed");
    c.cli_ok(&["undo", "undone"]);
    c.wait_phase("undone", "Undone");
    let mut paused = with("pool=c");
    paused.push("--paused");
    c.start("live", "cfg-b", &paused);
    c.wait_phase("live", "Paused");
    let expected: [(&str, &[(&str, u64)]); 3] = [
        ("done", &[("BatchStarted", 1), ("Completed", 1)]),
        (
            "undone",
            &[
                ("BatchStarted", 1),
                ("Completed", 1),
                ("UndoStarted", 1),
                ("Undone", 1),
            ],
        ),
        ("live", &[("BatchStarted", 1), ("Paused", 1)]),
    ];
    let tally = |name: &str| {
        let mut seen: Vec<(String, u64)> = Vec::new();
        for (reason, ..) in rollout_events(&c, name) {
            if !seen.iter().any(|(r, _)| *r == reason) {
                let n = count_reason(&rollout_events(&c, name), &reason);
                seen.push((reason, n));
            }
        }
        seen.sort();
        seen
    };
    let want = |list: &[(&str, u64)]| {
        let mut v: Vec<(String, u64)> = list.iter().map(|(r, n)| (r.to_string(), *n)).collect();
        v.sort();
        v
    };
    for (name, list) in &expected {
        wait_until(DEADLINE, &format!("the Events of {name}: {list:?}"), || {
            (tally(name) == want(list)).then_some(())
        });
    }

    // The stop halts the paused rollout, and only it.
    c.cli_ok(&["global-stop", "on"]);
    wait_for(&c, "live", "Halted", |r| phase_is(r, "Halted"));
    // Every reconcile from now on sees the stop: the finished rollouts, changed and
    // reconciled now, keep their phase; an invalid field set and fixed posts nothing.
    invalid_and_fixed(&c, "done", "Completed");
    invalid_and_fixed(&c, "undone", "Undone");
    c.cli_ok(&["global-stop", "off"]);
    let live = wait_for(&c, "live", "Paused", |r| phase_is(r, "Paused"));
    assert_eq!(paused_reason(&live), "True=Manual", "{live:#}");
    invalid_and_fixed(&c, "done", "Completed");
    invalid_and_fixed(&c, "undone", "Undone");
    // A last change of each: its status write comes after every Event of the writes before
    // (a rollout's reconciles run one at a time, each posting after its own write).
    for name in ["done", "undone", "live"] {
        patch_spec(&c, name, json!({"maxFailures": 7}));
        wait_for(&c, name, "the last change", |_| true);
    }
    for (name, list) in &expected {
        assert_eq!(
            tally(name),
            want(list),
            "{name}: {:#?}",
            rollout_events(&c, name)
        );
    }
    for (name, phase) in [("done", "Completed"), ("undone", "Undone")] {
        let r = stored(&c.server, name).expect("stored");
        assert!(phase_is(&r, phase), "{r:#}");
    }
}
