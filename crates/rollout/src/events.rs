//! What a rollout's progress tells `kubectl describe kcr` and `kubectl get events`: the
//! changes between the status a rollout had and the status the controller just wrote,
//! as typed [`Happening`]s, one Kubernetes Event each.
//!
//! Events are derived from two statuses, not from the plan's steps: the controller posts
//! them only after the new status is stored, so a write that is refused (409) or never
//! made posts nothing, and a controller that restarts, or the replica that takes over,
//! compares against the stored status and does not post them again.

use super::plan::conditions::ConditionType;
use super::plan::revision;
pub use super::recorder::Severity;
use kp_contract::rollout::{NodeFailure, Phase, RolloutCondition, RolloutStatus};

/// One thing that happened to a rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Happening {
    /// Batch `batch` (0-based; the canary when `canary`) of `revision` starts.
    BatchStarted {
        revision: u32,
        batch: u32,
        canary: bool,
        nodes: usize,
    },
    /// A node of the current revision failed.
    NodeFailed(NodeFailure),
    /// The rollout stopped changing nodes (reason: the Paused condition's).
    Paused { reason: String, message: String },
    /// It goes on after a pause.
    Resumed,
    /// `spec.undo`: the changed nodes are pointed back at their previous configs.
    UndoStarted,
    /// Every changed node is back.
    Undone,
    /// Every target runs the config.
    Completed,
    /// Every target was changed, some failed.
    CompletedWithFailures { failed: u32, total: u32 },
}

impl Happening {
    /// The Event's reason (CamelCase, what `kubectl get events` shows).
    pub fn reason(&self) -> &'static str {
        match self {
            Happening::BatchStarted { .. } => "BatchStarted",
            Happening::NodeFailed(_) => "NodeFailed",
            Happening::Paused { .. } => "Paused",
            Happening::Resumed => "Resumed",
            Happening::UndoStarted => "UndoStarted",
            Happening::Undone => "Undone",
            Happening::Completed => "Completed",
            Happening::CompletedWithFailures { .. } => "CompletedWithFailures",
        }
    }

    /// The Event's action (what the controller did).
    pub fn action(&self) -> &'static str {
        match self {
            Happening::BatchStarted { .. } => "StartBatch",
            Happening::NodeFailed(_) => "GateNode",
            Happening::Paused { .. } => "Pause",
            Happening::Resumed => "Resume",
            Happening::UndoStarted | Happening::Undone => "Undo",
            Happening::Completed | Happening::CompletedWithFailures { .. } => "Complete",
        }
    }

    pub fn severity(&self) -> Severity {
        match self {
            Happening::NodeFailed(_) | Happening::CompletedWithFailures { .. } => Severity::Warning,
            Happening::Paused { reason, .. }
                if super::plan::conditions::PauseReason::is_failure(reason) =>
            {
                Severity::Warning
            }
            _ => Severity::Normal,
        }
    }

    /// The Event's note (the recorder cuts it to what the API server takes).
    pub fn note(&self) -> String {
        match self {
            Happening::BatchStarted {
                revision,
                batch,
                canary: true,
                nodes,
            } => format!(
                "revision {revision}: the canary ({}, batch {batch}) starts",
                kp_contract::text::count(*nodes, "node")
            ),
            Happening::BatchStarted {
                revision,
                batch,
                nodes,
                ..
            } => format!(
                "revision {revision}: batch {batch} ({}) starts",
                kp_contract::text::count(*nodes, "node")
            ),
            Happening::NodeFailed(f) => format!(
                "node {} (batch {}) failed: {}: {}",
                f.node,
                f.batch,
                f.reason.as_str(),
                f.message
            ),
            Happening::Paused { reason, message } => format!("paused ({reason}): {message}"),
            Happening::Resumed => "resumed: changing nodes again".to_string(),
            Happening::UndoStarted => {
                "undo: pointing the changed nodes back at their previous configs".to_string()
            }
            Happening::Undone => "every changed node is back on its previous config".to_string(),
            Happening::Completed => "every target runs the config".to_string(),
            Happening::CompletedWithFailures { failed, total } => {
                format!(
                    "every target was changed; {failed} of {total} failed (see status.failures)"
                )
            }
        }
    }
}

fn undoing(phase: Phase) -> bool {
    matches!(phase, Phase::Undoing | Phase::Undone)
}

/// Whether the status's Paused condition is True: the rollout changes no nodes because it
/// is held (`spec.paused`, the global stop, or by itself on failures).
fn paused(st: &RolloutStatus) -> bool {
    paused_condition(st).is_some_and(|c| c.status == "True")
}

fn paused_condition(st: &RolloutStatus) -> Option<&RolloutCondition> {
    st.conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Paused.as_str())
}

/// The Happening of a revision's result (`history[].result`).
fn ended(result: &str, st: &RolloutStatus) -> Option<Happening> {
    match result {
        r if r == revision::COMPLETED => Some(Happening::Completed),
        r if r == Phase::CompletedWithFailures.as_str() => Some(Happening::CompletedWithFailures {
            failed: st.counts.failed,
            total: st.counts.total,
        }),
        r if r == revision::UNDONE => Some(Happening::Undone),
        _ => None,
    }
}

/// What happened between `old` (as stored) and `new` (as just stored), in the order an
/// operator reads it.
///
/// Each Happening is a transition of a fact the status keeps through phases that only
/// overlay it (`Halted` under the global stop, `Invalid` while a field cannot be followed):
/// the current revision's record (its `result`, when its undo started), the Paused
/// condition, the failures, the batch. So a rollout halted and let go again, or made
/// invalid and fixed, posts nothing for it: each Event is posted once per transition.
pub fn between(old: &RolloutStatus, new: &RolloutStatus) -> Vec<Happening> {
    let mut out = Vec::new();
    let same_revision = old.revision == new.revision;
    let batch_moved = !same_revision || new.current_batch > old.current_batch;
    if batch_moved && !undoing(new.phase) && new.revision > 0 {
        if let Some(nodes) = new.batches.get(new.current_batch as usize) {
            out.push(Happening::BatchStarted {
                revision: new.revision,
                batch: new.current_batch,
                canary: new.has_canary && new.current_batch == 0,
                nodes: nodes.len(),
            });
        }
    }
    for failure in &new.failures {
        let known = same_revision && old.failures.iter().any(|f| f.node == failure.node);
        if !known {
            out.push(Happening::NodeFailed(failure.clone()));
        }
    }
    let record = revision::current(new);
    let before = revision::current(old).filter(|_| same_revision);
    let undo_started = record.is_some_and(|r| r.undo_started.is_some());
    if undo_started && before.is_none_or(|r| r.undo_started.is_none()) {
        out.push(Happening::UndoStarted);
    }
    if paused(new) && !paused(old) {
        let condition = paused_condition(new);
        out.push(Happening::Paused {
            reason: condition.map(|c| c.reason.clone()).unwrap_or_default(),
            message: condition.map(|c| c.message.clone()).unwrap_or_default(),
        });
    }
    if paused(old) && !paused(new) && !undo_started {
        out.push(Happening::Resumed);
    }
    if let Some(result) = record.and_then(|r| r.result.as_deref()) {
        if before.and_then(|r| r.result.as_deref()) != Some(result) {
            out.extend(ended(result, new));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::undo::world;
    use crate::plan::tests::World;
    use kp_contract::rollout::IntOrPercent;
    use kp_contract::rollout::{FailureReason, RevisionRecord, RolloutCondition};
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn status(phase: Phase, revision: u32, batch: u32) -> RolloutStatus {
        RolloutStatus {
            phase,
            revision,
            current_batch: batch,
            has_canary: true,
            batches: vec![vec!["a".into()], vec!["b".into(), "c".into()]],
            history: (1..=revision)
                .map(|r| {
                    serde_json::from_value::<RevisionRecord>(serde_json::json!({
                        "revision": r,
                        "config": {"namespace": "kc", "name": "cfg"},
                        "started": "t",
                    }))
                    .expect("a revision record")
                })
                .collect(),
            ..RolloutStatus::default()
        }
    }

    /// `st` with its current revision ended as `result`.
    fn ended_as(mut st: RolloutStatus, result: &str) -> RolloutStatus {
        if let Some(h) = st.history.last_mut() {
            h.result = Some(result.into());
        }
        st
    }

    fn undo_started(mut st: RolloutStatus) -> RolloutStatus {
        if let Some(h) = st.history.last_mut() {
            h.undo_started = Some("t".into());
        }
        set_paused(&mut st, "False", "Undo");
        st
    }

    fn set_paused(st: &mut RolloutStatus, status: &str, reason: &str) {
        st.conditions.retain(|c| c.type_ != "Paused");
        st.conditions.push(RolloutCondition {
            type_: "Paused".into(),
            status: status.into(),
            reason: reason.into(),
            message: format!("{reason} message"),
            last_transition_time: "t".into(),
            observed_generation: Some(1),
        });
    }

    fn failure(node: &str) -> NodeFailure {
        NodeFailure {
            node: node.into(),
            reason: FailureReason::Fallback,
            message: "crash loop".into(),
            batch: 0,
            time: "t".into(),
        }
    }

    fn reasons(old: &RolloutStatus, new: &RolloutStatus) -> Vec<&'static str> {
        between(old, new).iter().map(Happening::reason).collect()
    }

    #[test]
    fn a_new_revision_starts_its_canary_and_the_next_batch_follows() {
        let none = RolloutStatus::default();
        let canary = status(Phase::Progressing, 1, 0);
        let happened = between(&none, &canary);
        assert_eq!(
            happened,
            vec![Happening::BatchStarted {
                revision: 1,
                batch: 0,
                canary: true,
                nodes: 1
            }]
        );
        assert!(happened[0].note().contains("canary"));
        let batch = status(Phase::Progressing, 1, 1);
        assert_eq!(reasons(&canary, &batch), vec!["BatchStarted"]);
        assert!(reasons(&batch, &batch).is_empty(), "nothing twice");
        let done = ended_as(status(Phase::Completed, 1, 2), "Completed");
        assert_eq!(reasons(&batch, &done), vec!["Completed"]);
        let failed = ended_as(
            status(Phase::CompletedWithFailures, 1, 2),
            "CompletedWithFailures",
        );
        assert_eq!(reasons(&batch, &failed), vec!["CompletedWithFailures"]);
    }

    #[test]
    fn a_failure_pauses_once_and_resume_and_undo_follow() {
        let running = status(Phase::Progressing, 1, 0);
        let mut paused = status(Phase::Paused, 1, 0);
        paused.failures.push(failure("a"));
        set_paused(&mut paused, "True", "CanaryFailed");
        let happened = between(&running, &paused);
        assert_eq!(
            happened.iter().map(Happening::reason).collect::<Vec<_>>(),
            vec!["NodeFailed", "Paused"]
        );
        assert!(happened.iter().all(|h| h.severity() == Severity::Warning));
        assert!(happened[1].note().contains("CanaryFailed"));
        // The same failure, a status later: not again.
        assert!(reasons(&paused, &paused).is_empty());
        let mut resumed = paused.clone();
        resumed.phase = Phase::Progressing;
        set_paused(&mut resumed, "False", "Running");
        assert_eq!(reasons(&paused, &resumed), vec!["Resumed"]);
        // Undo drops the pause: that is no resume.
        let mut undoing = undo_started(paused.clone());
        undoing.phase = Phase::Undoing;
        assert_eq!(reasons(&paused, &undoing), vec!["UndoStarted"]);
        let mut undone = ended_as(undoing.clone(), "Undone");
        undone.phase = Phase::Undone;
        assert_eq!(reasons(&undoing, &undone), vec!["Undone"]);
        // Undone in one step from Completed: both.
        let completed = ended_as(status(Phase::Completed, 1, 2), "Completed");
        let mut undone = ended_as(undo_started(completed.clone()), "Undone");
        undone.phase = Phase::Undone;
        assert_eq!(reasons(&completed, &undone), vec!["UndoStarted", "Undone"]);
    }

    /// A revision undone by an older build (no `undoStarted`) posts nothing when this one
    /// first reconciles it, with the stop on or off.
    #[test]
    fn a_revision_undone_before_the_upgrade_posts_nothing_again() {
        for halted in [false, true] {
            let mut w = world();
            w.spec.canary = 0;
            w.spec.batch = IntOrPercent::Int(9);
            w.run_until(Phase::Completed);
            w.spec.undo = true;
            w.run_until(Phase::Undone);
            if let Some(h) = w.status.history.last_mut() {
                h.undo_started = None;
            }
            let old = w.status.clone();
            w.halted = halted;
            w.step();
            assert_eq!(w.status.phase, Phase::Undone);
            assert!(between(&old, &w.status).is_empty(), "{:?}", w.status);
        }
    }

    /// Issue 32 item 5: phases that overlay the rollout's facts (`Halted`, `Invalid`) post
    /// nothing when they come and go.
    #[test]
    fn the_global_stop_and_an_invalid_field_repost_nothing() {
        let completed = ended_as(status(Phase::Completed, 1, 2), "Completed");
        let mut undoing = undo_started(status(Phase::Undoing, 1, 1));
        let undone = {
            let mut u = ended_as(undoing.clone(), "Undone");
            u.phase = Phase::Undone;
            u
        };
        for finished in [&completed, &undone] {
            let mut invalid = finished.clone();
            invalid.phase = Phase::Invalid;
            assert!(reasons(finished, &invalid).is_empty());
            assert!(
                reasons(&invalid, finished).is_empty(),
                "fixed: nothing again"
            );
            let mut halted = finished.clone();
            halted.phase = Phase::Halted;
            assert!(reasons(&halted, finished).is_empty());
        }
        // An undo halted by the global stop, then let go: neither UndoStarted nor Resumed.
        let mut halted = undoing.clone();
        halted.phase = Phase::Halted;
        set_paused(&mut halted, "True", "GlobalStop");
        assert_eq!(reasons(&undoing, &halted), vec!["Paused"]);
        undoing.phase = Phase::Undoing;
        assert!(reasons(&halted, &undoing).is_empty());
        // A paused rollout made invalid and fixed: no second Paused.
        let mut paused = status(Phase::Paused, 1, 1);
        set_paused(&mut paused, "True", "Manual");
        let mut invalid = paused.clone();
        invalid.phase = Phase::Invalid;
        assert!(reasons(&paused, &invalid).is_empty());
        assert!(reasons(&invalid, &paused).is_empty());
    }

    /// Steps `w` once and adds the Events of what the stored status went through.
    fn step_counting(
        w: &mut World,
        events: &mut BTreeMap<&'static str, usize>,
    ) -> Vec<crate::plan::Touch> {
        let old = w.status.clone();
        let touches = w.step();
        for h in between(&old, &w.status) {
            *events.entry(h.reason()).or_default() += 1;
        }
        touches
    }

    #[test]
    fn every_event_is_posted_once_per_transition_through_stops_and_invalid_fields() {
        let mut w = world();
        let mut events = BTreeMap::new();
        for _ in 0..20 {
            step_counting(&mut w, &mut events);
            w.heal_all();
        }
        assert_eq!(w.status.phase, Phase::Completed);
        let toggle = |w: &mut World, events: &mut BTreeMap<&'static str, usize>| {
            for halted in [true, false, true, false] {
                w.halted = halted;
                step_counting(w, events);
            }
            // A field that cannot be followed, then fixed, with the stop on and off.
            for halted in [false, true] {
                w.halted = halted;
                w.spec.soak = "soon".into();
                step_counting(w, events);
                assert_eq!(w.status.phase, Phase::Invalid);
                w.spec.soak = "0s".into();
                step_counting(w, events);
            }
            w.halted = false;
        };
        toggle(&mut w, &mut events);
        assert_eq!(w.status.phase, Phase::Completed);
        w.spec.undo = true;
        for _ in 0..5 {
            step_counting(&mut w, &mut events);
            w.heal_all();
            w.now += Duration::from_secs(1);
        }
        assert_eq!(w.status.phase, Phase::Undone);
        toggle(&mut w, &mut events);
        assert_eq!(w.status.phase, Phase::Undone);
        let expected = BTreeMap::from([
            ("BatchStarted", 4),
            ("Completed", 1),
            ("UndoStarted", 1),
            ("Undone", 1),
        ]);
        assert_eq!(events, expected);
        // An undo halted midway and let go: still one UndoStarted, no Resumed.
        let mut w = world();
        let mut events = BTreeMap::new();
        w.spec.canary = 0;
        w.spec.batch = IntOrPercent::Int(9);
        w.run_until(Phase::Completed);
        w.spec.undo = true;
        step_counting(&mut w, &mut events);
        for halted in [true, false, true, false] {
            w.halted = halted;
            step_counting(&mut w, &mut events);
        }
        w.heal_all();
        for _ in 0..10 {
            w.now += Duration::from_secs(1);
            step_counting(&mut w, &mut events);
            w.heal_all();
        }
        assert_eq!(w.status.phase, Phase::Undone);
        assert_eq!(
            events,
            BTreeMap::from([("Paused", 2), ("UndoStarted", 1), ("Undone", 1)]),
            "the stop pauses the undo twice; nothing else twice"
        );
    }

    #[test]
    fn a_batch_of_one_node_is_one_node() {
        let started = |canary, nodes| Happening::BatchStarted {
            revision: 2,
            batch: 1,
            canary,
            nodes,
        };
        assert_eq!(
            started(true, 1).note(),
            "revision 2: the canary (1 node, batch 1) starts"
        );
        assert_eq!(
            started(false, 3).note(),
            "revision 2: batch 1 (3 nodes) starts"
        );
    }
}
