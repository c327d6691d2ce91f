//! Undoing a revision: every node it changed pointed back at its previous assignment.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::budget::Budget;
use super::conditions::{set_condition, ConditionType, PauseReason};
use super::gates::{self, GateResult, PodsState};
use super::owner;
use super::{revision, Decider, Touch, MAX_REQUEUE};
use crate::nodeview::{assignment_ref, NodeRecord, NodeView};
use kp_contract::rollout::{NodeCounts, Phase};

/// Points every node this revision changed back at the assignment it had before, within
/// the unavailability budget; done when all show it active.
pub(super) fn undo(d: &mut Decider, matching: &BTreeMap<&str, &NodeView>) {
    let me = d.me();
    let mut waiting = 0u32;
    let mut back = 0u32;
    let mut in_flight: BTreeSet<&str> = BTreeSet::new();
    let mut to_undo: Vec<&NodeView> = Vec::new();
    let mut soonest = MAX_REQUEUE;
    // Later batches first: the newest changes are the least proven.
    for batch in d.st.batches.iter().rev() {
        for node in batch {
            let Some(view) = matching.get(node.as_str()).copied() else {
                continue;
            };
            let Some(record) = view.record.as_ref().filter(|r| owner::is_mine(r, &me)) else {
                continue;
            };
            if !record.undone {
                to_undo.push(view);
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
                GateResult::Passed => back += 1,
                GateResult::Waiting { after, .. } => {
                    waiting += 1;
                    in_flight.insert(view.name.as_str());
                    soonest = soonest.min(after);
                }
                // An undo that does not take is reported, not retried.
                GateResult::Failed { .. } => back += 1,
            }
        }
    }
    if waiting > 0 {
        d.wake_after(soonest);
    }
    let halted = d.inp.halted;
    if !halted {
        let mut budget = Budget::new(&d.settings, d.inp.nodes, &in_flight, d.inp.now);
        let mut out_of_budget = false;
        for view in &to_undo {
            let Some(record) = view.record.clone() else {
                continue;
            };
            if !budget.take(view) {
                out_of_budget = true;
                continue;
            }
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
    let now = d.now.clone();
    let left = to_undo.len() as u32 - d.touches.len() as u32;
    d.st.counts = NodeCounts {
        total: back + waiting + to_undo.len() as u32,
        pending: left,
        in_progress: waiting + d.touches.len() as u32,
        done: back,
        failed: 0,
    };
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
    } else if left == 0 && waiting == 0 && d.touches.is_empty() {
        d.st.phase = Phase::Undone;
        set_condition(
            &mut d.st,
            ConditionType::Paused,
            false,
            "Running",
            "not paused",
            &now,
        );
        if let Some(h) = d.st.history.last_mut() {
            if h.result.as_deref() != Some(revision::UNDONE) {
                h.result = Some(revision::UNDONE.to_string());
                h.finished = Some(now.clone());
            }
        }
    } else {
        d.st.phase = Phase::Undoing;
    }
    set_condition(
        &mut d.st,
        ConditionType::Complete,
        false,
        "Undo",
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
