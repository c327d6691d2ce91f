//! Undoing a revision: every node it changed pointed back at its previous assignment.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::budget::Budget;
use super::conditions::{set_condition, ConditionType, PauseReason};
use super::gates::{self, GateResult, PodsState};
use super::owner;
use super::report::set_counts;
use super::{current_mut, revision, Decider, Touch, MAX_REQUEUE};
use crate::nodeview::{assignment_ref, NodeRecord, NodeView};
use kp_contract::rollout::{NodeCounts, Phase};

/// The reason of the Paused (False) and Complete (False) conditions while undoing.
pub const UNDO_REASON: &str = "Undo";

/// Points every node this revision changed back at the assignment it had before, within
/// the unavailability budget; done when all show it active.
pub(super) fn undo(d: &mut Decider, matching: &BTreeMap<&str, &NodeView>) {
    let me = d.me();
    let mut waiting = 0u32;
    let mut in_flight: BTreeSet<&str> = BTreeSet::new();
    let mut to_undo: Vec<(usize, &NodeView)> = Vec::new();
    let mut per_batch = vec![NodeCounts::default(); d.st.batches.len()];
    let mut soonest = MAX_REQUEUE;
    // Later batches first: the newest changes are the least proven.
    for (b, batch) in d.st.batches.iter().enumerate().rev() {
        let counts = &mut per_batch[b];
        for node in batch {
            let Some(view) = matching.get(node.as_str()).copied() else {
                continue;
            };
            let Some(record) = view.record.as_ref().filter(|r| owner::is_mine(r, &me)) else {
                continue;
            };
            counts.total += 1;
            if !record.undone {
                counts.pending += 1;
                to_undo.push((b, view));
                continue;
            }
            let previous = assignment_ref(record.previous.as_deref());
            let since = gates::changed_at(record, d.inp.now);
            let change = gates::Change {
                target: previous.as_ref(),
                uid: None,
                since,
                full: false,
            };
            match gates::evaluate(view, &change, d.inp.now, &d.settings, &PodsState::Ready) {
                GateResult::Passed => counts.done += 1,
                GateResult::Waiting { after, .. } => {
                    waiting += 1;
                    counts.in_progress += 1;
                    in_flight.insert(view.name.as_str());
                    soonest = soonest.min(after);
                }
                // An undo that does not take is reported, not retried.
                GateResult::Failed { .. } => counts.done += 1,
            }
        }
    }
    if waiting > 0 {
        d.wake_after(soonest);
    }
    // Nothing left to point back: undone, whatever the stop switch says (finished is final).
    let finished = to_undo.is_empty() && waiting == 0;
    let halted = d.inp.halted && !finished;
    if !halted {
        revert(d, &to_undo, &in_flight, &mut per_batch);
    }
    let now = d.now.clone();
    set_counts(&mut d.st, per_batch);
    // An undo is no batch: no soak ends it.
    d.st.soak_until = None;
    if halted {
        d.st.phase = Phase::Halted;
        set_condition(
            &mut d.st,
            ConditionType::Paused,
            true,
            PauseReason::GlobalStop.as_str(),
            "the global stop switch is on",
            &now,
        );
    } else {
        // The undo acts: whatever paused the rollout (a failed canary, `spec.paused`) no
        // longer holds it, and the revision records when the undo began (once; not on a
        // revision undone already, by a build that kept no such record).
        set_condition(
            &mut d.st,
            ConditionType::Paused,
            false,
            UNDO_REASON,
            "not paused: the changed nodes are pointed back at their previous configs",
            &now,
        );
        if let Some(h) = current_mut(&mut d.st) {
            if h.undo_started.is_none() && h.result.as_deref() != Some(revision::UNDONE) {
                h.undo_started = Some(now.clone());
            }
        }
        if finished {
            d.st.phase = Phase::Undone;
            if let Some(h) = current_mut(&mut d.st) {
                if h.result.as_deref() != Some(revision::UNDONE) {
                    h.result = Some(revision::UNDONE.to_string());
                    h.finished = Some(now.clone());
                }
            }
        } else {
            d.st.phase = Phase::Undoing;
        }
    }
    set_condition(
        &mut d.st,
        ConditionType::Complete,
        false,
        UNDO_REASON,
        "the revision is being undone",
        &now,
    );
    d.st.batch_text = Some(
        if d.st.phase == Phase::Undone {
            "undone"
        } else {
            "undo"
        }
        .to_string(),
    );
}

/// Points the nodes of `to_undo` back, within the budget. The nodes it reverts that are
/// unavailable or still on their way to the undone config hold their domain's share
/// already and take no more of it ([`Budget::take`]): they are the unavailable ones.
fn revert(
    d: &mut Decider,
    to_undo: &[(usize, &NodeView)],
    in_flight: &BTreeSet<&str>,
    per_batch: &mut [NodeCounts],
) {
    let mut budget = Budget::new(&d.settings, d.inp.nodes, in_flight, d.inp.now);
    let mut out_of_budget = false;
    for (b, view) in to_undo {
        let Some(record) = view.record.clone() else {
            continue;
        };
        if !budget.take(view) {
            out_of_budget = true;
            continue;
        }
        per_batch[*b].pending -= 1;
        per_batch[*b].in_progress += 1;
        d.touches.push(Touch {
            node: view.name.clone(),
            resource_version: view.resource_version.clone(),
            assignment: record.previous.clone(),
            record: NodeRecord {
                at: d.now.clone(),
                undone: true,
                ..record
            },
        });
    }
    if out_of_budget {
        d.wake_after(Duration::from_secs(5));
    }
}
