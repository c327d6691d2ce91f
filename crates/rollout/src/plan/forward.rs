//! Rolling forward: the gates of the changed nodes, the failures that pause the rollout,
//! the pending nodes changed within the budget, and the advance past a finished batch.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::budget::Budget;
use super::conditions::PauseReason;
use super::gates::{self, GateResult};
use super::owner::{self, NodeStanding};
use super::report::{report_owners, set_counts, set_phase};
use super::{revision, rfc3339, Decider, Touch};
use crate::nodeview::{NodeRecord, NodeView};
use kp_contract::rollout::{FailureReason, NodeCounts, NodeFailure};

fn acknowledged(d: &Decider) -> usize {
    match d.inp.acknowledged {
        Some((rev, n)) if rev == d.st.revision => (n as usize).min(d.st.failures.len()),
        _ => 0,
    }
}

/// Why the rollout must not change more nodes on its own account, if it must not.
fn auto_pause(d: &Decider) -> Option<(PauseReason, String)> {
    let unacked = &d.st.failures[acknowledged(d)..];
    if d.st.has_canary {
        if let Some(f) = unacked.iter().find(|f| f.batch == 0) {
            return Some((
                PauseReason::CanaryFailed,
                format!(
                    "canary node {} failed ({}): {}",
                    f.node,
                    f.reason.as_str(),
                    f.message
                ),
            ));
        }
    }
    if let Some(f) = unacked.iter().find(|f| f.reason == FailureReason::Fallback) {
        return Some((
            PauseReason::Fallback,
            format!(
                "node {} fell back to its last-known-good config: {}",
                f.node, f.message
            ),
        ));
    }
    if unacked.len() > d.inp.spec.max_failures as usize {
        return Some((
            PauseReason::MaxFailures,
            format!(
                "{} failed, more than maxFailures {}",
                kp_contract::text::count(unacked.len(), "node"),
                d.inp.spec.max_failures
            ),
        ));
    }
    None
}

pub(super) fn forward(d: &mut Decider, matching: &BTreeMap<&str, &NodeView>) {
    let joined = revision::reconcile_membership(&mut d.st, matching);
    if let Some(last) = super::current_mut(&mut d.st) {
        if joined > 0 {
            last.result = None;
            last.finished = None;
        }
        // `undo` was cleared before the undo finished: the revision rolls forward again.
        last.undo_started = None;
    }
    let rev = d.st.revision;
    let target = d.settings.target.clone();
    let uid = revision::current(&d.st).and_then(|r| r.config_uid.clone());
    let failed: BTreeSet<String> = d.st.failures.iter().map(|f| f.node.clone()).collect();
    let current = d.st.current_batch as usize;
    let mut pending: Vec<(usize, &NodeView)> = Vec::new();
    let mut in_flight: BTreeSet<&str> = BTreeSet::new();
    let mut changed = 0u32;
    let mut soonest: Option<Duration> = None;
    let mut new_failures = Vec::new();
    let mut batch_open = false;
    let mut per_batch = vec![NodeCounts::default(); d.st.batches.len()];
    let me = d.me();
    let mut blocked: Vec<(&str, String)> = Vec::new();
    let mut superseded: Vec<(&str, String)> = Vec::new();
    for (b, batch) in d.st.batches.iter().enumerate() {
        let counts = &mut per_batch[b];
        for name in batch {
            let Some(view) = matching.get(name.as_str()).copied() else {
                continue;
            };
            let record = match owner::claim(view, &me, d.inp.others, d.inp.supersede) {
                NodeStanding::Superseded { by } => {
                    // Not this revision's target any more: a newer rollout changed it.
                    superseded.push((view.name.as_str(), by));
                    continue;
                }
                NodeStanding::Ours(record) => Some(record),
                NodeStanding::Free => None,
                NodeStanding::Blocked { by } => {
                    counts.total += 1;
                    counts.pending += 1;
                    if b <= current {
                        blocked.push((view.name.as_str(), by));
                        batch_open = true;
                    }
                    continue;
                }
            };
            counts.total += 1;
            if failed.contains(name) {
                changed += 1;
                counts.failed += 1;
                continue;
            }
            let Some(record) = record else {
                counts.pending += 1;
                if b <= current {
                    pending.push((b, view));
                    batch_open |= b == current;
                }
                continue;
            };
            changed += 1;
            if view.fell_back_from(&target) {
                counts.failed += 1;
                new_failures.push(failure(
                    view,
                    FailureReason::Fallback,
                    view.describe(),
                    b,
                    &d.now,
                ));
                continue;
            }
            if b < current {
                counts.done += 1;
                continue;
            }
            let since = gates::changed_at(record, d.inp.now);
            let pods = (d.inp.pods)(name);
            let change = gates::Change {
                target: Some(&target),
                uid: uid.as_deref(),
                since,
                full: true,
            };
            match gates::evaluate(view, &change, d.inp.now, &d.settings, &pods) {
                GateResult::Passed => counts.done += 1,
                GateResult::Failed { reason, message } => {
                    counts.failed += 1;
                    new_failures.push(failure(view, reason, message, b, &d.now))
                }
                GateResult::Waiting { after, wants_pods } => {
                    counts.in_progress += 1;
                    in_flight.insert(view.name.as_str());
                    batch_open |= b == current;
                    if wants_pods {
                        d.pods_wanted.push(name.clone());
                    }
                    soonest = Some(soonest.map_or(after, |s| s.min(after)));
                }
            }
        }
    }
    if let Some(after) = soonest {
        d.wake_after(after);
    }
    report_owners(d, &blocked, &superseded);
    d.st.failures.extend(new_failures);
    d.st.acknowledged_failures = acknowledged(d) as u32;
    // Nothing left to change or to watch: the global stop has nothing to halt.
    let finished = current >= d.st.batches.len()
        && pending.is_empty()
        && blocked.is_empty()
        && in_flight.is_empty();
    let pause = pause_reason(d, finished);
    let window = crate::window::open_at(&d.settings.windows, d.inp.now);
    let blocked = pause.is_some() || window.is_err();
    // Change the pending nodes of the current batch (and any left behind) within budget.
    if !blocked {
        let mut budget = Budget::new(&d.settings, d.inp.nodes, &in_flight, d.inp.now);
        for (b, view) in &pending {
            if !budget.take(view) {
                continue;
            }
            per_batch[*b].pending -= 1;
            per_batch[*b].in_progress += 1;
            d.touches.push(Touch {
                node: view.name.clone(),
                resource_version: view.resource_version.clone(),
                assignment: Some(d.inp.spec.config.annotation()),
                record: NodeRecord {
                    rollout: d.inp.name.to_string(),
                    revision: rev,
                    previous: view.assignment.clone(),
                    at: d.now.clone(),
                    undone: false,
                    uid: d.inp.uid.map(str::to_string),
                    started: revision::current(&d.st).map(|r| r.started.clone()),
                },
            });
        }
        if d.touches.len() < pending.len() {
            // Budget exhausted: wait for nodes to come back (their changes wake us too).
            d.wake_after(Duration::from_secs(5));
        }
    }
    let touched = d.touches.len() as u32;
    let failed_count = d.st.failures.len() as u32;
    set_counts(&mut d.st, per_batch);
    if let Some(h) = d.st.history.last_mut() {
        h.changed = changed + touched;
        h.failed = failed_count;
    }
    // Advance past a batch whose nodes are all done or failed, after the soak.
    if !blocked && !batch_open && d.touches.is_empty() {
        advance(d);
    }
    set_phase(d, pause, window.err());
}

/// Why the rollout changes no nodes now, if it does not. The global stop halts a rollout
/// that is running or paused; one that `finished` (every batch through, nothing in flight,
/// not paused) keeps its phase: finished is final.
fn pause_reason(d: &Decider, finished: bool) -> Option<(PauseReason, String)> {
    let own = if d.inp.spec.paused {
        Some((PauseReason::Manual, "spec.paused is true".to_string()))
    } else {
        auto_pause(d)
    };
    if d.inp.halted && !(finished && own.is_none()) {
        return Some((
            PauseReason::GlobalStop,
            "the global stop switch is on".to_string(),
        ));
    }
    own
}

fn advance(d: &mut Decider) {
    let total = d.st.batches.len() as u32;
    if d.st.current_batch >= total {
        return;
    }
    let soak_until =
        d.st.soak_until
            .as_deref()
            .and_then(kp_contract::time::parse);
    match soak_until {
        None if !d.settings.soak.is_zero() && !current_batch_empty(d) => {
            let until = d.inp.now + d.settings.soak;
            d.st.soak_until = Some(rfc3339(until));
            d.wake_after(d.settings.soak);
        }
        Some(until) if until > d.inp.now => {
            d.wake_after(until.duration_since(d.inp.now).unwrap_or_default());
        }
        _ => {
            d.st.soak_until = None;
            d.st.current_batch += 1;
            // The advance is written before the next batch's nodes are changed.
            d.wake_after(Duration::ZERO);
        }
    }
}

fn current_batch_empty(d: &Decider) -> bool {
    d.st.batches
        .get(d.st.current_batch as usize)
        .is_none_or(Vec::is_empty)
}

fn failure(
    view: &NodeView,
    reason: FailureReason,
    message: String,
    batch: usize,
    now: &str,
) -> NodeFailure {
    NodeFailure {
        node: view.name.clone(),
        reason,
        message: kp_contract::node_config::bounded(&message, 512),
        batch: batch as u32,
        time: now.to_string(),
    }
}
