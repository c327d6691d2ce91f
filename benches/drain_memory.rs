//! Peak memory of a supervisor draining a node with many pods bound to it (issue 21: whoever
//! may create pods with `spec.nodeName` decides how many there are). For each pod count: a
//! fresh test API server and bootstrap supervisor (release build, node credentials, stand-in
//! kubelet), the pods created (ReplicaSet-owned, bound to the node), then an allocatable config
//! change that drains them all; the supervisor's VmHWM (peak resident set, /proc/PID/status)
//! before the pods exist, after they exist (idle: nothing lists them) and after the drain.
//!
//!     cargo build --release --examples
//!     cargo bench --bench drain_memory                       # 100 and 50,000 pods
//!     DRAIN_MEMORY_PODS=100,1000 cargo bench --bench drain_memory
//!
//! Also printed: the pod requests of each drain (list pages with their `limit`, watches,
//! evictions), which show the list-then-watch pattern, and the supervisor's log lines about
//! listing and watching the pods (warnings; `DRAIN_SUPERVISOR_LOG=info` shows re-lists too).

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::fs;
use std::time::{Duration, Instant};

use support::bench::{fail, stand_in, DrainNode};
use testkit::RequestRecord;

/// The target for the supervisor's peak while draining.
const TARGET_KIB: u64 = 32 * 1024;

/// A /proc/PID/status field in kB.
fn status_kib(pid: i32, key: &str) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|err| fail(&format!("read /proc/{pid}/status: {err}")));
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(':')))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| fail(&format!("no {key} in /proc/{pid}/status")))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Pod requests of a drain by kind: list pages (by `limit`), watches, evictions.
fn pod_requests(requests: &[RequestRecord]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in requests.iter().filter(|r| r.path.ends_with("/pods")) {
        let kind = if r.watch {
            "watch".to_string()
        } else {
            let limit = r.query_param("limit").unwrap_or_else(|| "none".into());
            let cont = if r.query_param("continue").is_some() {
                ", continue"
            } else {
                ""
            };
            format!("list (limit {limit}{cont})")
        };
        *out.entry(kind).or_insert(0) += 1;
    }
    let evictions = requests
        .iter()
        .filter(|r| r.path.ends_with("/eviction"))
        .count();
    out.insert("eviction".into(), evictions);
    out
}

struct Sample {
    pods: usize,
    idle_kib: u64,
    with_pods_kib: u64,
    peak_kib: u64,
    drain: Duration,
    create: Duration,
    requests: BTreeMap<String, usize>,
    /// The supervisor's log lines about the pods' list and watch.
    watch_log: Vec<String>,
}

fn measure(pods: usize) -> Sample {
    let mut node = DrainNode::start();
    // Evictions one at a time against the in-process server: allow for 50,000 of them.
    node.deadline = Duration::from_secs(600);
    let pid = node.supervisor();
    let idle_kib = status_kib(pid, "VmHWM");
    let t = Instant::now();
    node.pods(pods, 0);
    let create = t.elapsed();
    let with_pods_kib = status_kib(pid, "VmHWM");
    node.server.clear_requests();
    let drain = node.change("maxPods: 100\neventBurst: 100\n");
    let peak_kib = status_kib(pid, "VmHWM");
    let requests = pod_requests(&node.server.requests());
    let watch_log = node
        .scene
        .output()
        .lines()
        .filter(|l| l.contains("pods bound to this node"))
        .map(str::to_string)
        .collect();
    if requests.get("eviction") != Some(&pods) {
        fail(&format!("expected {pods} evictions: {requests:?}"));
    }
    Sample {
        pods,
        idle_kib,
        with_pods_kib,
        peak_kib,
        drain,
        create,
        requests,
        watch_log,
    }
}

fn main() {
    stand_in();
    let counts: Vec<usize> = std::env::var("DRAIN_MEMORY_PODS")
        .unwrap_or_else(|_| "100,50000".into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .unwrap_or_else(|_| fail(&format!("DRAIN_MEMORY_PODS: not a number: {c:?}")))
        })
        .collect();
    println!(
        "drain_memory: kubelet-pivot {}, pod counts {counts:?}",
        support::pivot_bin().display()
    );
    let samples: Vec<Sample> = counts.iter().map(|&n| measure(n)).collect();
    println!();
    println!("supervisor peak resident memory (VmHWM), MiB:");
    println!(
        "  {:>7}  {:>10}  {:>10}  {:>12}  {:>8}  {:>10}",
        "pods", "idle", "pods there", "after drain", "drain s", "create s"
    );
    for s in &samples {
        println!(
            "  {:>7}  {:>10.1}  {:>10.1}  {:>12.1}  {:>8.1}  {:>10.1}",
            s.pods,
            mib(s.idle_kib),
            mib(s.with_pods_kib),
            mib(s.peak_kib),
            s.drain.as_secs_f64(),
            s.create.as_secs_f64()
        );
    }
    for s in &samples {
        println!("  pod requests of the drain with {} pods:", s.pods);
        for (kind, n) in &s.requests {
            println!("    {kind:<28} {n}");
        }
        println!(
            "  supervisor log lines about the pods' list and watch: {}",
            s.watch_log.len()
        );
        for line in s.watch_log.iter().take(10) {
            println!("    {line}");
        }
    }
    let worst = samples.iter().map(|s| s.peak_kib).max().unwrap_or(0);
    println!();
    println!(
        "target: peak <= {:.0} MiB while draining: {}",
        mib(TARGET_KIB),
        if worst <= TARGET_KIB { "met" } else { "MISSED" }
    );
}
