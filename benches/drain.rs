//! Drain benchmark: the time to empty a node of 100 and of 1,000 pods, kubelet-pivot's drain
//! and the real `kubectl drain` side by side, in the same process, against the same test API
//! server (real HTTP on loopback) and node, each pod deleted 0.2 s after its eviction (the
//! server's pod termination delay, standing in for a kubelet that stops the pod).
//!
//!     cargo build --release --examples
//!     cargo bench --bench drain                       # 100 and 1,000 pods, 3 rounds each
//!     DRAIN_PODS=100 DRAIN_ROUNDS=5 cargo bench --bench drain
//!     DRAIN_KUBECTL_MAX_PODS=100 cargo bench --bench drain   # kubectl at 100 pods only
//!     DRAIN_EVICTION_MS=20 cargo bench --bench drain  # each eviction held 20 ms by the server
//!
//! kubelet-pivot: an allocatable config change (maxPods) with the node's own credentials (the
//! bootstrap supervisor and the stand-in kubelet); timed from the assignment PATCH to the
//! moment no pod is bound to the node ("emptied"), and to the node settled: condition True for
//! the new config, uncordoned, no drain record ("settled": the restart and healthz gate too).
//! `kubectl drain NODE --ignore-daemonsets --delete-emptydir-data --force` (`$KUBECTL` or
//! `kubectl` on PATH; skipped, with the reason, when it cannot run) with the server's admin
//! token: timed from its start to no pod bound to the node, and to its exit; then
//! `kubectl uncordon`. `DRAIN_EVICTION_MS` holds each eviction request that long before the
//! server serves it (a real server's admission, budget check and etcd write take some
//! milliseconds; the test server on loopback well under one); also printed: the most
//! evictions the server had in flight at once.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::bench::{env_usize, fail, stand_in, stats, DrainNode};
use support::kubectl::kubectl_binary;
use testkit::RequestRecord;

/// How long the server takes to delete an evicted pod.
const TERMINATION: Duration = Duration::from_millis(200);
/// Longest a kubectl drain may take.
const KUBECTL_DEADLINE: Duration = Duration::from_secs(1200);

/// Requests by `METHOD resource` (the path with names and namespaces folded).
fn by_kind(requests: &[RequestRecord]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in requests {
        let kind = if r.path.ends_with("/eviction") {
            "pods/eviction"
        } else if r.path.contains("/pods") {
            "pods"
        } else if r.path.contains("/events") {
            "events"
        } else if r.path.ends_with("/status") {
            "nodes/status"
        } else if r.path.contains("/nodes") {
            "nodes"
        } else if r.path.contains("/configmaps") {
            "configmaps"
        } else {
            "other"
        };
        let verb = if r.watch { "WATCH" } else { r.method.as_str() };
        *out.entry(format!("{verb} {kind}")).or_insert(0) += 1;
    }
    out
}

/// The pod counts to drain: `DRAIN_PODS` (comma-separated), else 100 and 1,000.
fn sizes() -> Vec<usize> {
    match std::env::var("DRAIN_PODS") {
        Ok(v) => v
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .unwrap_or_else(|_| fail(&format!("DRAIN_PODS={v:?}: not a list of numbers")))
            })
            .collect(),
        Err(_) => vec![100, 1000],
    }
}

/// kubectl with its own kubeconfig (the server's admin token) and cache dir.
struct Kubectl {
    binary: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(b: &DrainNode) -> Option<Kubectl> {
        let binary = kubectl_binary()?;
        let dir = tempfile::tempdir().unwrap_or_else(|err| fail(&format!("temp dir: {err}")));
        b.server.write_kubeconfig(&dir.path().join("kubeconfig"));
        Some(Kubectl { binary, dir })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.args(args)
            .arg(format!("--cache-dir={}", self.path("cache").display()))
            .env("KUBECONFIG", self.path("kubeconfig"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `kubectl drain`: (emptied, exited) from its start.
    fn drain(&self, b: &DrainNode) -> (Duration, Duration) {
        let node = b.node();
        let mut child = self
            .command(&[
                "drain",
                node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--force",
                "--timeout=1200s",
            ])
            .spawn()
            .unwrap_or_else(|err| fail(&format!("cannot run kubectl drain: {err}")));
        let start = Instant::now();
        let mut emptied = None;
        loop {
            if emptied.is_none() && b.server.pod_count_on(node) == 0 {
                emptied = Some(start.elapsed());
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    let exited = start.elapsed();
                    if !status.success() {
                        let out = child.wait_with_output().ok();
                        let err = out
                            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                            .unwrap_or_default();
                        fail(&format!("kubectl drain failed ({status}): {err}"));
                    }
                    let emptied = emptied.unwrap_or_else(|| {
                        fail(&format!(
                            "kubectl drain exited with {} pods on the node",
                            b.server.pod_count_on(node)
                        ))
                    });
                    return (emptied, exited);
                }
                Ok(None) => {}
                Err(err) => fail(&format!("waiting for kubectl drain: {err}")),
            }
            if start.elapsed() > KUBECTL_DEADLINE {
                let _ = child.kill();
                fail("kubectl drain did not finish in time");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn uncordon(&self, node: &str) {
        let out = self
            .command(&["uncordon", node])
            .output()
            .unwrap_or_else(|err| fail(&format!("cannot run kubectl uncordon: {err}")));
        if !out.status.success() {
            fail(&format!(
                "kubectl uncordon failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
}

/// One row of the side-by-side.
struct Row {
    pods: usize,
    emptied: Vec<f64>,
    settled: Vec<f64>,
    kubectl_emptied: Vec<f64>,
    kubectl_exited: Vec<f64>,
    requests: Vec<RequestRecord>,
    /// The most evictions in flight at once, kubelet-pivot's drains.
    max_in_flight: usize,
}

fn p50(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| stats(v).p50)
}

fn show(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |s| format!("{s:.3} s"))
}

fn main() {
    stand_in();
    let rounds = env_usize("DRAIN_ROUNDS", 3);
    let kubectl_max = env_usize("DRAIN_KUBECTL_MAX_PODS", usize::MAX);
    println!(
        "drain: kubelet-pivot {}, {rounds} rounds per pod count, pods deleted {} ms after their eviction",
        support::pivot_bin().display(),
        TERMINATION.as_millis()
    );
    let mut b = DrainNode::start();
    b.deadline = Duration::from_secs(600);
    b.server.set_pod_termination_delay(TERMINATION);
    let hold = Duration::from_millis(env_usize("DRAIN_EVICTION_MS", 0) as u64);
    b.server.set_eviction_hold(hold);
    if !hold.is_zero() {
        println!(
            "each eviction held {} ms by the server before it is served",
            hold.as_millis()
        );
    }
    let kubectl = Kubectl::new(&b);
    let mut made = 0;
    let mut changes = 0;
    let mut rows = Vec::new();
    for pods in sizes() {
        let mut row = Row {
            pods,
            emptied: Vec::new(),
            settled: Vec::new(),
            kubectl_emptied: Vec::new(),
            kubectl_exited: Vec::new(),
            requests: Vec::new(),
            max_in_flight: 0,
        };
        for _ in 0..rounds {
            b.pods(pods, made);
            made += 1;
            b.server.clear_requests();
            changes += 1;
            // An allocatable change (maxPods) drains; eventBurst keeps each config new.
            let t = b.change_timed(&format!(
                "maxPods: {}\neventBurst: {}\n",
                111 + changes % 2,
                10 + changes
            ));
            let reqs = b.server.requests();
            let evictions = reqs
                .iter()
                .filter(|r| r.path.ends_with("/eviction"))
                .count();
            if evictions < pods {
                fail(&format!("expected {pods} evictions, saw {evictions}"));
            }
            row.emptied.push(t.emptied.as_secs_f64());
            row.settled.push(t.settled.as_secs_f64());
            row.max_in_flight = row.max_in_flight.max(b.server.max_evictions_in_flight());
            row.requests = reqs;
            println!(
                "  {pods} pods: kubelet-pivot emptied the node in {:.3} s, settled in {:.3} s",
                t.emptied.as_secs_f64(),
                t.settled.as_secs_f64()
            );
            if let Some(k) = kubectl.as_ref().filter(|_| pods <= kubectl_max) {
                b.pods(pods, made);
                made += 1;
                let (emptied, exited) = k.drain(&b);
                k.uncordon(b.node());
                row.kubectl_emptied.push(emptied.as_secs_f64());
                row.kubectl_exited.push(exited.as_secs_f64());
                println!(
                    "  {pods} pods: kubectl drain emptied the node in {:.3} s, exited in {:.3} s",
                    emptied.as_secs_f64(),
                    exited.as_secs_f64()
                );
            }
        }
        rows.push(row);
    }
    println!();
    println!("time to empty the node, p50 (kubelet-pivot: from the assignment; kubectl drain: from its start):");
    println!(
        "  {:>6}  {:>14}  {:>14}  {:>8}  {:>20}  {:>18}",
        "pods",
        "kubelet-pivot",
        "kubectl drain",
        "ratio",
        "kubelet-pivot settled",
        "kubectl exited"
    );
    for row in &rows {
        let ours = p50(&row.emptied);
        let theirs = p50(&row.kubectl_emptied);
        let ratio = match (ours, theirs) {
            (Some(a), Some(b)) if a > 0.0 => format!("{:.1}x", b / a),
            _ => "-".to_string(),
        };
        println!(
            "  {:>6}  {:>14}  {:>14}  {:>8}  {:>20}  {:>18}",
            row.pods,
            show(ours),
            show(theirs),
            ratio,
            show(p50(&row.settled)),
            show(p50(&row.kubectl_exited))
        );
    }
    if kubectl.is_none() {
        println!("  (kubectl drain: not run, see SKIPPED above)");
    }
    for row in &rows {
        println!();
        println!(
            "kubelet-pivot's API requests, {} pods (last round), by kind; at most {} evictions in flight at once:",
            row.pods, row.max_in_flight
        );
        for (kind, n) in by_kind(&row.requests) {
            println!("    {kind:<24} {n}");
        }
    }
}
