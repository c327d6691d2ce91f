//! What a rollout's progress tells `kubectl describe kcr` and `kubectl get events`: the
//! changes between the status a rollout had and the status the controller just wrote,
//! as typed [`Happening`]s, one Kubernetes Event each.
//!
//! Events are derived from two statuses, not from the plan's steps: the controller posts
//! them only after the new status is stored, so a write that is refused (409) or never
//! made posts nothing, and a controller that restarts, or the replica that takes over,
//! compares against the stored status and does not post them again.

use super::plan::conditions::ConditionType;
pub use super::recorder::Severity;
use kp_contract::rollout::{NodeFailure, Phase, RolloutStatus};

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
            } => format!("revision {revision}: the canary ({nodes} nodes, batch {batch}) starts"),
            Happening::BatchStarted {
                revision,
                batch,
                nodes,
                ..
            } => format!("revision {revision}: batch {batch} ({nodes} nodes) starts"),
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

/// Whether a rollout in `phase` changes no nodes because it is held.
fn held(phase: Phase) -> bool {
    matches!(phase, Phase::Paused | Phase::Halted)
}

fn undoing(phase: Phase) -> bool {
    matches!(phase, Phase::Undoing | Phase::Undone)
}

/// What happened between `old` (as stored) and `new` (as just stored), in the order an
/// operator reads it.
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
    if undoing(new.phase) && !undoing(old.phase) {
        out.push(Happening::UndoStarted);
    }
    if held(new.phase) && !held(old.phase) {
        let paused = new
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Paused.as_str());
        out.push(Happening::Paused {
            reason: paused.map(|c| c.reason.clone()).unwrap_or_default(),
            message: paused.map(|c| c.message.clone()).unwrap_or_default(),
        });
    }
    if held(old.phase) && !held(new.phase) && !undoing(new.phase) {
        out.push(Happening::Resumed);
    }
    if new.phase != old.phase {
        match new.phase {
            Phase::Undone => out.push(Happening::Undone),
            Phase::Completed => out.push(Happening::Completed),
            Phase::CompletedWithFailures => out.push(Happening::CompletedWithFailures {
                failed: new.counts.failed,
                total: new.counts.total,
            }),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kp_contract::rollout::{FailureReason, RolloutCondition};

    fn status(phase: Phase, revision: u32, batch: u32) -> RolloutStatus {
        RolloutStatus {
            phase,
            revision,
            current_batch: batch,
            has_canary: true,
            batches: vec![vec!["a".into()], vec!["b".into(), "c".into()]],
            ..RolloutStatus::default()
        }
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
        let mut done = status(Phase::Completed, 1, 2);
        assert_eq!(reasons(&batch, &done), vec!["Completed"]);
        done.phase = Phase::CompletedWithFailures;
        assert_eq!(reasons(&batch, &done), vec!["CompletedWithFailures"]);
    }

    #[test]
    fn a_failure_pauses_once_and_resume_and_undo_follow() {
        let running = status(Phase::Progressing, 1, 0);
        let mut paused = status(Phase::Paused, 1, 0);
        paused.failures.push(failure("a"));
        paused.conditions.push(RolloutCondition {
            type_: "Paused".into(),
            status: "True".into(),
            reason: "CanaryFailed".into(),
            message: "a fell back".into(),
            last_transition_time: "t".into(),
            observed_generation: Some(1),
        });
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
        assert_eq!(reasons(&paused, &resumed), vec!["Resumed"]);
        let mut undoing = paused.clone();
        undoing.phase = Phase::Undoing;
        assert_eq!(reasons(&paused, &undoing), vec!["UndoStarted"]);
        let mut undone = undoing.clone();
        undone.phase = Phase::Undone;
        assert_eq!(reasons(&undoing, &undone), vec!["Undone"]);
        // Undone in one step from Completed: both.
        assert_eq!(
            reasons(
                &status(Phase::Completed, 1, 2),
                &status(Phase::Undone, 1, 2)
            ),
            vec!["UndoStarted", "Undone"]
        );
    }
}
