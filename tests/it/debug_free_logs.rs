//! Issue 34 item 5: no Rust Debug formatting in a log line. A real bootstrap supervisor
//! (plain lines) and a real self-hosted one (JSON lines) run stand-in kubelets on the strict
//! test API server through a config assignment, a handoff, a rollout the real controller
//! drives (the API server answering 429 and 500 on the way, then away for a moment), and
//! the handoff back; every line the three processes log, at debug level for
//! kubelet-pivot's own crates, is searched for what Debug prints: `Some(`, `None`, a
//! struct's ` { `, an enum's bare variant name where a value belongs.
//!
//! The rule (docs/development.md, "Log lines"): fields are Display (`%x`) or plain numbers,
//! booleans and strings; an absent value is left out; durations print as the flags take
//! them (`30s`). tests/it/architecture.rs checks the source for the `?` sigil.

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::api_node::{ApiNode, NS};
use crate::support::lock_state::status_json;
use crate::support::rollout::{self, controller, generated_crd};
use crate::support::{poll_until, Proc};

const DEADLINE: Duration = Duration::from_secs(40);
const POLL: Duration = Duration::from_millis(20);
/// Debug for kubelet-pivot's own crates; the libraries' debug lines are theirs.
const RUST_LOG: &str = "info,kubelet_pivot=debug,kp_node=debug,kp_rollout=debug,kp_runtime=debug";

/// What Rust's Debug prints and a Display never should, with why.
const DEBUG_MARKS: &[(&str, &str)] = &[
    ("Some(", "an Option"),
    ("None", "an Option"),
    (" { ", "a struct"),
    ("Status {", "a kube Status"),
    ("ApiError:", "kube's Display of an API error"),
    ("=Inotify", "an enum"),
    ("=Poll", "an enum"),
    ("\":\"Inotify\"", "an enum"),
    ("\":\"Poll\"", "an enum"),
    ("Instant {", "an Instant"),
];

/// The Debug marks found in `line`.
fn debug_marks(line: &str) -> Vec<&'static str> {
    DEBUG_MARKS
        .iter()
        .filter(|(mark, _)| line.contains(mark))
        .map(|(_, what)| *what)
        .collect()
}

fn phase(node: &ApiNode) -> String {
    rollout::stored(&node.server, "r1")
        .and_then(|r| r["status"]["phase"].as_str().map(str::to_string))
        .unwrap_or_default()
}

fn holder_role(node: &ApiNode) -> Value {
    status_json(&node.scene)["lock"]["holder"]["role"].clone()
}

fn wait_config(node: &ApiNode, burst: &str, what: &str) {
    poll_until(DEADLINE, POLL, what, || {
        node.running()
            .filter(|(_, config)| config.contains(burst))
            .map(|_| ())
    });
}

#[test]
fn no_log_line_carries_rust_debug_formatting() {
    let node = ApiNode::new();
    node.server.create_crd(generated_crd().expect("the CRD"));
    node.configmap("cfg-a", node.config("eventBurst: 11\n"));
    node.configmap("cfg-b", node.config("eventBurst: 22\n"));
    let supervisor = |role: &[&str], format: &str| -> Proc {
        let mut args = node.node_args(role);
        args.extend_from_slice(&[
            "--kubelet-root-dir",
            node.root_str(),
            "--log-format",
            format,
        ]);
        node.scene
            .spawn(node.scene.pivot(&args, &[], &[("RUST_LOG", RUST_LOG)]))
    };

    // A config assignment on the bootstrap (plain lines).
    let _boot = supervisor(&["bootstrap"], "plain");
    poll_until(DEADLINE, POLL, "the bootstrap's kubelet", || node.running());
    node.assign("cfg-a");
    wait_config(&node, "\"eventBurst\":11", "the kubelet on cfg-a");

    // The handoff to a self-hosted supervisor (JSON lines).
    let mut hosted = supervisor(&["self-hosted", "--generation", "1"], "json");
    poll_until(DEADLINE, POLL, "the self-hosted holder", || {
        (holder_role(&node) == "self-hosted").then_some(())
    });
    wait_config(
        &node,
        "\"eventBurst\":11",
        "the self-hosted kubelet on cfg-a",
    );

    // A rollout of cfg-b, driven by the real controller.
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = node.server.kubeconfig_in(dir.path());
    let controller_log = dir.path().join("controller.log");
    let log = std::fs::File::create(&controller_log).expect("controller log");
    let mut ctl = controller(&kubeconfig, "logs", &rollout::SHORT, &[], log);
    let cfg_b = format!("{NS}/cfg-b");
    rollout::cli_ok(
        &kubeconfig,
        &[
            "start",
            "r1",
            "--config",
            &cfg_b,
            "--canary",
            "0",
            "--batch",
            "100%",
            "--soak",
            "0s",
            "--no-pods-gate",
            "--no-fallback-for",
            "1s",
        ],
    );
    // API errors on the way: the controller and the node agent log what the server said.
    node.server.fail_next(3, 500);
    node.server.fail_next(2, 429);
    wait_config(&node, "\"eventBurst\":22", "the kubelet on cfg-b");
    poll_until(DEADLINE, POLL, "the rollout completed", || {
        (phase(&node) == "Completed").then_some(())
    });

    // The API server away for a moment: the refused connections are logged in kubectl's
    // words.
    let refused = format!(
        "The connection to the server 127.0.0.1:{} was refused",
        node.server.port()
    );
    node.server.stop();
    poll_until(DEADLINE, POLL, "a refused connection logged", || {
        let logs =
            node.scene.output() + &std::fs::read_to_string(&controller_log).unwrap_or_default();
        logs.contains(&refused).then_some(())
    });
    node.server.restart_on_same_port();

    // The handoff back: the self-hosted supervisor stops, the bootstrap takes over.
    hosted.signal(Signal::SIGTERM);
    hosted.wait_exit(DEADLINE);
    poll_until(DEADLINE, POLL, "the bootstrap holds again", || {
        (holder_role(&node) == "bootstrap").then_some(())
    });
    ctl.signal(Signal::SIGTERM);
    ctl.wait_exit(DEADLINE);

    let controller_text = std::fs::read_to_string(&controller_log).expect("controller log");
    let supervisors = node.scene.output();
    let mut found = Vec::new();
    let mut lines = 0;
    for line in supervisors.lines().chain(controller_text.lines()) {
        lines += 1;
        let marks = debug_marks(line);
        if !marks.is_empty() {
            found.push(format!("{marks:?}: {line}"));
        }
    }
    assert!(
        lines > 30,
        "too few log lines to mean anything:\n{supervisors}"
    );
    assert!(
        supervisors.contains("\"fields\":{") && supervisors.contains(" INFO "),
        "both formats were to be checked:\n{supervisors}"
    );
    assert!(
        found.is_empty(),
        "{} log lines with Rust Debug formatting:\n{}",
        found.len(),
        found.join("\n")
    );
}
