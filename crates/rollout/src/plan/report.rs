//! What the status says about the decision: the phase, the Paused, Complete, Conflict and
//! Superseded conditions, the counts and the batch text.

use std::time::Duration;

use super::conditions::{set_condition, ConditionType, PauseReason};
use super::{owner, Decider};
use kp_contract::rollout::{NodeCounts, Phase, RolloutStatus};

/// `a, b, c (+N more)`.
fn some_names<'n>(names: impl Iterator<Item = &'n str>) -> String {
    let names: Vec<&str> = names.collect();
    let shown = names.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    match names.len() {
        n if n > 5 => format!("{shown} (+{} more)", n - 5),
        _ => shown,
    }
}

/// The Conflict condition (nodes an older, unfinished rollout owns: this one waits) and the
/// Superseded condition (nodes a newer rollout changed: no longer this one's targets).
pub(super) fn report_owners(
    d: &mut Decider,
    blocked: &[(&str, String)],
    superseded: &[(&str, String)],
) {
    let now = d.now.clone();
    let by = |list: &[(&str, String)]| {
        let mut owners: Vec<&str> = list.iter().map(|(_, o)| o.as_str()).collect();
        owners.sort_unstable();
        owners.dedup();
        owners.join(", ")
    };
    if blocked.is_empty() {
        set_condition(
            &mut d.st,
            ConditionType::Conflict,
            false,
            "NoConflict",
            "no node of the current batch is owned by another rollout",
            &now,
        );
    } else {
        let msg = format!(
            "waiting for rollout {} (older, not finished) on {} node(s) of the batches so far (later batches not checked yet): {}; annotate this rollout {}=true to take them now",
            by(blocked),
            blocked.len(),
            some_names(blocked.iter().map(|(n, _)| *n)),
            owner::SUPERSEDE_ANNOTATION
        );
        set_condition(
            &mut d.st,
            ConditionType::Conflict,
            true,
            "NodesOwnedByAnotherRollout",
            &msg,
            &now,
        );
        d.wake_after(Duration::from_secs(5));
    }
    if superseded.is_empty() {
        set_condition(
            &mut d.st,
            ConditionType::Superseded,
            false,
            "NotSuperseded",
            "no target was changed by a newer rollout",
            &now,
        );
    } else {
        let msg = format!(
            "{} the newer rollout {} now and {}: {}",
            match superseded.len() {
                1 => "1 node follows".to_string(),
                n => format!("{n} nodes follow"),
            },
            by(superseded),
            if superseded.len() == 1 {
                "is no longer a target"
            } else {
                "are no longer targets"
            },
            some_names(superseded.iter().map(|(n, _)| *n))
        );
        set_condition(
            &mut d.st,
            ConditionType::Superseded,
            true,
            "NewerRollout",
            &msg,
            &now,
        );
    }
}

pub(super) fn set_phase(
    d: &mut Decider,
    pause: Option<(PauseReason, String)>,
    window: Option<Duration>,
) {
    let complete = d.st.current_batch as usize >= d.st.batches.len();
    d.st.phase = match (&pause, window) {
        (Some((PauseReason::GlobalStop, _)), _) => Phase::Halted,
        (Some(_), _) => Phase::Paused,
        (None, _) if complete && d.st.counts.in_progress == 0 && d.st.counts.failed > 0 => {
            Phase::CompletedWithFailures
        }
        (None, _) if complete && d.st.counts.in_progress == 0 => Phase::Completed,
        (None, Some(_)) => Phase::Waiting,
        (None, None) if d.st.soak_until.is_some() => Phase::Soaking,
        (None, None) => Phase::Progressing,
    };
    if let Some(wait) = window {
        if d.st.phase == Phase::Waiting {
            d.wake_after(wait);
        }
    }
    match &pause {
        Some((reason, message)) => set_condition(
            &mut d.st,
            ConditionType::Paused,
            true,
            reason.as_str(),
            message,
            &d.now.clone(),
        ),
        None => set_condition(
            &mut d.st,
            ConditionType::Paused,
            false,
            "Running",
            "not paused",
            &d.now.clone(),
        ),
    }
    let now = d.now.clone();
    if matches!(d.st.phase, Phase::Completed | Phase::CompletedWithFailures) {
        let config = d.inp.spec.config.annotation();
        let (ok, reason, msg) = if d.st.phase == Phase::Completed {
            (true, "AllNodesDone", format!("every target runs {config}"))
        } else {
            let failed: Vec<String> =
                d.st.failures
                    .iter()
                    .map(|f| format!("{} ({}: {})", f.node, f.reason.as_str(), f.message))
                    .collect();
            let shown = failed
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            let more = failed.len().saturating_sub(5);
            let more = if more > 0 {
                format!("; +{more} more")
            } else {
                String::new()
            };
            (
                false,
                "NodesFailed",
                format!(
                    "{} of {} targets do not run {config}: {shown}{more}",
                    d.st.counts.failed, d.st.counts.total
                ),
            )
        };
        set_condition(&mut d.st, ConditionType::Complete, ok, reason, &msg, &now);
        if let Some(h) = d.st.history.last_mut() {
            if h.result.is_none() {
                h.result = Some(d.st.phase.as_str().to_string());
                h.finished = Some(now.clone());
            }
        }
    } else {
        set_condition(
            &mut d.st,
            ConditionType::Complete,
            false,
            "InProgress",
            "nodes remain",
            &now,
        );
    }
    d.st.batch_text = Some(batch_text(&d.st));
}

fn batch_text(st: &RolloutStatus) -> String {
    let total = st.batches.len() as u32;
    let regular = total - u32::from(st.has_canary);
    if st.current_batch >= total {
        "done".to_string()
    } else if st.has_canary && st.current_batch == 0 {
        "canary".to_string()
    } else {
        let n = st.current_batch + 1 - u32::from(st.has_canary);
        format!("{n}/{regular}")
    }
}

/// The per-batch counts, and the rollout's counts as their sum.
pub(super) fn set_counts(st: &mut RolloutStatus, per_batch: Vec<NodeCounts>) {
    st.counts = per_batch
        .iter()
        .fold(NodeCounts::default(), |sum, c| NodeCounts {
            total: sum.total + c.total,
            pending: sum.pending + c.pending,
            in_progress: sum.in_progress + c.in_progress,
            done: sum.done + c.done,
            failed: sum.failed + c.failed,
        });
    st.batch_counts = per_batch;
}
