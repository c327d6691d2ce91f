//! Drain-and-restart benchmark: the wall time and the API requests of an allocatable config
//! change on a node running 100 pods (cordon, 100 evictions through policy/v1, wait until the
//! pods are gone, restart the kubelet, healthz gate, uncordon), against the test API server
//! (real HTTP on loopback, the node's own credentials) and the stand-in kubelet. Baseline, in
//! the same process and on the same node: an in-place change (restart only).
//!
//!     cargo build --release --examples
//!     cargo bench --bench drain                 # 5 rounds of each
//!     DRAIN_ROUNDS=N DRAIN_PODS=M cargo bench --bench drain
//!
//! Each sample runs from the node annotation PATCH (the assignment) to the moment the node shows
//! the condition True for the new config with the node uncordoned and no drain record left.
//! Pods leave at once when evicted (the test server has no kubelet to wait for).

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::collections::BTreeMap;

use support::bench::{env_usize, fail, stand_in, stats, DrainNode};
use testkit::RequestRecord;

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

fn main() {
    stand_in();
    let rounds = env_usize("DRAIN_ROUNDS", 5);
    let pods = env_usize("DRAIN_PODS", 100);
    println!(
        "drain: kubelet-pivot {}, {rounds} rounds, {pods} pods per drain",
        support::pivot_bin().display()
    );
    let mut b = DrainNode::start();
    let mut drain = Vec::new();
    let mut in_place = Vec::new();
    let mut drain_requests = Vec::new();
    let mut in_place_requests = Vec::new();
    for round in 0..rounds {
        // Baseline: an in-place change (eventBurst), the same pods on the node.
        b.pods(pods, round);
        b.server.clear_requests();
        let max_pods = 110 + round;
        in_place.push(
            b.change(&format!(
                "maxPods: {max_pods}\neventBurst: {}\n",
                10 + round
            ))
            .as_secs_f64(),
        );
        in_place_requests.push(b.server.requests());
        // The drain: an allocatable change (maxPods).
        b.server.clear_requests();
        drain.push(
            b.change(&format!(
                "maxPods: {}\neventBurst: {}\n",
                max_pods + 1,
                10 + round
            ))
            .as_secs_f64(),
        );
        let reqs = b.server.requests();
        let evictions = reqs
            .iter()
            .filter(|r| r.path.ends_with("/eviction"))
            .count();
        if evictions != pods {
            fail(&format!("expected {pods} evictions, saw {evictions}"));
        }
        drain_requests.push(reqs);
    }
    let d = stats(&drain);
    let i = stats(&in_place);
    let mean =
        |v: &[Vec<RequestRecord>]| v.iter().map(Vec::len).sum::<usize>() as f64 / v.len() as f64;
    println!();
    println!("drain-and-restart of a node with {pods} pods (wall time, assignment PATCH to uncordoned and True):");
    println!(
        "  p50 {:.3} s  min {:.3} s  max {:.3} s  mean {:.3} s",
        d.p50, d.min, d.max, d.mean
    );
    println!("in-place restart, same node (baseline):");
    println!(
        "  p50 {:.3} s  min {:.3} s  max {:.3} s  mean {:.3} s",
        i.p50, i.min, i.max, i.mean
    );
    println!("ratio drain / in-place (p50): {:.2}x", d.p50 / i.p50);
    println!();
    println!(
        "API requests per change: drain {:.1}, in-place {:.1} (ratio {:.2}x)",
        mean(&drain_requests),
        mean(&in_place_requests),
        mean(&drain_requests) / mean(&in_place_requests)
    );
    if let Some(last) = drain_requests.last() {
        println!("  drain, by kind (last round):");
        for (kind, n) in by_kind(last) {
            println!("    {kind:<24} {n}");
        }
    }
    if let Some(last) = in_place_requests.last() {
        println!("  in-place, by kind (last round):");
        for (kind, n) in by_kind(last) {
            println!("    {kind:<24} {n}");
        }
    }
}
