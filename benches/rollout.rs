//! Fleet rollout at scale: the real `kubelet-pivot rollout-controller` binary rolls a config
//! across 5,000 simulated nodes (`testkit::NodeSim`, in-process, reacting 20 ms after an
//! assignment) on the in-process test API server (real HTTP on loopback), with a canary of
//! 1, batches of 10%, no soak, the pods gate on (the simulated nodes have no pods: one list
//! each) and `noFallbackFor` 0s. Baseline, in the same process: the same rollout over 500
//! nodes, so that the cost per node shows how it scales.
//!
//!     cargo bench --bench rollout
//!     ROLLOUT_NODES=N ROLLOUT_BASELINE=M ROLLOUT_REACT_MS=R cargo bench --bench rollout
//!
//! `cargo bench` builds the controller in the bench (release) profile and runs that binary
//! (`CARGO_BIN_EXE_kubelet-pivot`); no example is needed. A full run takes about a minute.
//!
//! Reported per run: the wall time from `kubelet-pivot rollout start` (the CLI creating the
//! rollout) to the rollout in phase Completed with every node done; the controller's peak
//! memory (VmHWM of /proc/PID/status) and CPU time (utime+stime of /proc/PID/stat), read
//! just before it is stopped, so they include its start (Lease, listing 5,000 Nodes); and
//! the API requests the server saw from the controller's start on (the controller's and the
//! one CLI call's; the simulated nodes write into the server's state directly, so none of
//! theirs), by verb and resource. The bench fails (exit 2) unless the controller patched
//! every node exactly once.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::bench::fail;
use support::rollout::{generated_crd, request_kind, Timings};
use support::{pivot_bin, Proc};
use testkit::{ApiServer, NodeSim, SimOptions};

const NS: &str = "kubelet-config";
const SOURCE: &str = "kubelet-pivot.io/config-source";
const ROLLOUT: &str = "r1";
/// Longest a rollout may take before the bench gives up.
const DEADLINE: Duration = Duration::from_secs(180);
/// How often the rollout object is read (in-process: no request).
const POLL: Duration = Duration::from_millis(20);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Clock ticks per second of /proc/PID/stat's utime and stime.
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime+stime of `pid`, in seconds.
fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|err| fail(&format!("cannot read /proc/{pid}/stat: {err}")));
    // `pid (comm) state ...`: fields after the comm; utime and stime are fields 14 and 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        fail(&format!("malformed /proc/{pid}/stat: {stat}"));
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> f64 {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or_else(|| fail(&format!("no field {i} in /proc/{pid}/stat: {stat}")))
    };
    // fields[0] is the state (field 3), so field N is fields[N - 3].
    (tick(14 - 3) + tick(15 - 3)) / clock_ticks()
}

/// VmHWM of `pid`, in KiB.
fn peak_rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|err| fail(&format!("cannot read /proc/{pid}/status: {err}")));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| fail(&format!("no VmHWM in /proc/{pid}/status")))
}

/// What one rollout cost.
struct Run {
    nodes: usize,
    wall: Duration,
    /// CPU time once it leads with its caches synced, and in all.
    cpu_start_s: f64,
    cpu_s: f64,
    peak_kib: u64,
    requests: BTreeMap<String, usize>,
    total_requests: usize,
    batches: usize,
}

fn start_controller(kubeconfig: &Path, log: &Path) -> Proc {
    let log_file = std::fs::File::create(log)
        .unwrap_or_else(|err| fail(&format!("cannot create {}: {err}", log.display())));
    let timings = Timings {
        lease_duration: "3s",
        renew_deadline: "2s",
        retry_period: "500ms",
        debounce: "100ms",
    };
    support::rollout::controller(kubeconfig, "bench", &timings, &[], log_file)
}

fn wait_for(what: &str, deadline: Duration, mut f: impl FnMut() -> bool, log: &Path) {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > deadline {
            fail(&format!(
                "timed out after {deadline:?} waiting for {what}; controller log:\n{}",
                tail(log)
            ));
        }
        std::thread::sleep(POLL);
    }
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// One full rollout over `n` simulated nodes with a fresh server and controller.
fn run(n: usize, react_after: Duration) -> Run {
    let dir = tempfile::tempdir().unwrap_or_else(|err| fail(&format!("temp dir: {err}")));
    let server = ApiServer::start();
    server.create_crd(generated_crd().unwrap_or_else(|err| fail(&err)));
    for (name, burst) in [("cfg-a", 11), ("cfg-b", 22)] {
        let data = BTreeMap::from([(
            "kubelet".to_string(),
            support::kubelet_config(&format!("eventBurst: {burst}\n")),
        )]);
        server.create_configmap(NS, name, data, true);
    }
    let sim = NodeSim::start(
        &server,
        SimOptions {
            react_after,
            ..SimOptions::default()
        },
    );
    let names = sim.add_nodes(n, "node-", |_| BTreeMap::new());
    // The fleet runs cfg-a.
    let before = sim.reacted();
    for name in &names {
        server.set_node_annotation(name, SOURCE, Some(&format!("{NS}/cfg-a:kubelet")));
    }
    if !sim.wait_reacted(before + n as u64, Duration::from_secs(60)) {
        fail("the simulated nodes did not all report cfg-a");
    }
    let kubeconfig: PathBuf = server.kubeconfig_in(dir.path());
    let log = dir.path().join("controller.log");
    server.clear_requests();
    let mut controller = start_controller(&kubeconfig, &log);
    wait_for(
        "the controller to lead and sync its caches",
        Duration::from_secs(60),
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("caches synced")
        },
        &log,
    );

    let cpu_start_s = cpu_seconds(controller.pid());
    let started = Instant::now();
    let out = Command::new(pivot_bin())
        .args(["rollout", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "start",
            ROLLOUT,
            "--config",
            &format!("{NS}/cfg-b"),
            "--canary",
            "1",
            "--batch",
            "10%",
            "--soak",
            "0s",
            "--max-unavailable",
            "20%",
            "--no-fallback-for",
            "0s",
        ])
        .output()
        .unwrap_or_else(|err| fail(&format!("cannot run rollout start: {err}")));
    if !out.status.success() {
        fail(&format!(
            "rollout start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let rollout = || {
        server
            .custom_object(
                "kubelet-pivot.io/v1alpha1",
                "kubeletconfigrollouts",
                None,
                ROLLOUT,
            )
            .unwrap_or(Value::Null)
    };
    wait_for(
        &format!("rollout {ROLLOUT} over {n} nodes in phase Completed"),
        DEADLINE,
        || {
            let r = rollout();
            r["status"]["phase"] == "Completed" && r["status"]["counts"]["done"] == n
        },
        &log,
    );
    let wall = started.elapsed();
    let pid = controller.pid();
    let cpu_s = cpu_seconds(pid);
    let peak_kib = peak_rss_kib(pid);
    controller.signal(Signal::SIGTERM);
    if !controller.wait_exit(Duration::from_secs(20)).success() {
        fail(&format!(
            "the controller did not stop cleanly:\n{}",
            tail(&log)
        ));
    }
    let requests = server.requests();
    let r = rollout();
    let batches = r["status"]["batches"].as_array().map_or(0, Vec::len);

    // Every node was changed exactly once, and runs cfg-b.
    let mut patched: BTreeMap<String, usize> = BTreeMap::new();
    for req in &requests {
        if req.method == "PATCH" {
            if let Some(node) = req.path.strip_prefix("/api/v1/nodes/") {
                *patched.entry(node.to_string()).or_default() += 1;
            }
        }
    }
    if patched.len() != n || patched.values().any(|c| *c != 1) {
        let odd: Vec<_> = patched.iter().filter(|(_, c)| **c != 1).take(10).collect();
        fail(&format!(
            "expected one PATCH of each of the {n} nodes, saw {} nodes patched, e.g. {odd:?}",
            patched.len()
        ));
    }
    let want = format!("{NS}/cfg-b:kubelet");
    if let Some(name) = names.iter().find(|name| {
        server.node(name)["metadata"]["annotations"][SOURCE].as_str() != Some(want.as_str())
    }) {
        fail(&format!("{name} does not carry {want}"));
    }
    let mut by_kind = BTreeMap::new();
    for req in &requests {
        *by_kind.entry(request_kind(req)).or_default() += 1;
    }
    sim.stop();
    Run {
        nodes: n,
        wall,
        cpu_start_s,
        cpu_s,
        peak_kib,
        requests: by_kind,
        total_requests: requests.len(),
        batches,
    }
}

fn main() {
    let big = env_usize("ROLLOUT_NODES", 5000);
    let small = env_usize("ROLLOUT_BASELINE", 500);
    let react = Duration::from_millis(env_usize("ROLLOUT_REACT_MS", 20) as u64);
    if small >= big {
        fail(&format!(
            "ROLLOUT_BASELINE ({small}) must be below ROLLOUT_NODES ({big})"
        ));
    }
    println!(
        "rollout: kubelet-pivot {}; simulated nodes react after {react:?}; canary 1, batch 10%, \
         soak 0s, maxUnavailable 20% per zone, pods gate on, noFallbackFor 0s",
        pivot_bin().display()
    );
    let base = run(small, react);
    println!(
        "  baseline: {small} nodes in {:.2} s",
        base.wall.as_secs_f64()
    );
    let full = run(big, react);
    println!(
        "  full:     {big} nodes in {:.2} s",
        full.wall.as_secs_f64()
    );
    report(&base, &full);
}

/// The two runs side by side: totals, per node, and the marginal cost of a node (the
/// difference between the runs over the difference in nodes, which leaves out what does
/// not grow with the fleet).
fn report(b: &Run, f: &Run) {
    println!();
    println!(
        "{:<40} {:>11} {:>11} {:>10} {:>10} {:>10}",
        "",
        format!("{} nodes", b.nodes),
        format!("{} nodes", f.nodes),
        "per node",
        "per node",
        "marginal"
    );
    let extra = (f.nodes - b.nodes) as f64;
    let row = |label: &str, bv: f64, fv: f64, scale: f64, unit: &str| {
        let bp = bv / b.nodes as f64 * scale;
        let fp = fv / f.nodes as f64 * scale;
        let marginal = (fv - bv) / extra * scale;
        // Counts are whole numbers.
        let whole = if unit == "requests/node" { 0 } else { 2 };
        println!(
            "{label:<40} {bv:>11.whole$} {fv:>11.whole$} {bp:>10.3} {fp:>10.3} {marginal:>10.3}  {unit}"
        );
    };
    println!(
        "{:<40} {:>11} {:>11}",
        "batches (canary included)", b.batches, f.batches
    );
    row(
        "wall time, start -> Completed (s)",
        b.wall.as_secs_f64(),
        f.wall.as_secs_f64(),
        1000.0,
        "ms/node",
    );
    row(
        "controller CPU, until caches synced (s)",
        b.cpu_start_s,
        f.cpu_start_s,
        1000.0,
        "ms/node",
    );
    row(
        "controller CPU, in all (s)",
        b.cpu_s,
        f.cpu_s,
        1000.0,
        "ms/node",
    );
    row(
        "controller peak RSS, VmHWM (MiB)",
        b.peak_kib as f64 / 1024.0,
        f.peak_kib as f64 / 1024.0,
        1024.0,
        "KiB/node",
    );
    row(
        "API requests, all",
        b.total_requests as f64,
        f.total_requests as f64,
        1.0,
        "requests/node",
    );
    println!();
    println!(
        "API requests by verb and resource (the controller from its start, plus one `rollout start`):"
    );
    let mut kinds: Vec<&String> = b.requests.keys().chain(f.requests.keys()).collect();
    kinds.sort();
    kinds.dedup();
    for kind in kinds {
        let bv = b.requests.get(kind).copied().unwrap_or(0) as f64;
        let fv = f.requests.get(kind).copied().unwrap_or(0) as f64;
        row(&format!("  {kind}"), bv, fv, 1.0, "requests/node");
    }
    println!();
    println!(
        "node PATCHes: {} for {} nodes, {} for {} nodes (exactly one per node, checked)",
        b.requests.get("PATCH nodes").copied().unwrap_or(0),
        b.nodes,
        f.requests.get("PATCH nodes").copied().unwrap_or(0),
        f.nodes
    );
}
