//! One reconcile of one rollout: decode it (an unreadable one is reported on itself), plan
//! from the caches, then write what the plan asks for in the order that keeps a restart
//! safe (a new snapshot or batch before any node of it, then the nodes, then the counts).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::ResourceExt;
use tracing::warn;

use super::error::ReconcileError;
use super::failures::{logged, retry_delay};
use super::inputs::{decide, lookup_config};
use super::unreadable::report_invalid;
use super::writes::{touch, write_status};
use super::Context;
use crate::metrics::paused_reason;
use crate::nodeview::NodeView;
use kp_contract::rollout::{self as types, KubeletConfigRollout, NodeCounts, Phase, RolloutStatus};

/// How soon a rollout waiting for the cache to catch up with its own node writes is looked
/// at again if no Node event comes first.
const CACHE_LAG_RECHECK: Duration = Duration::from_secs(2);
/// How soon to look again after a status write found the rollout changed meanwhile.
const STALE_STATUS_RECHECK: Duration = Duration::from_millis(100);
/// How soon to look again after a node patch found the node changed meanwhile.
const STALE_NODE_RECHECK: Duration = Duration::from_millis(200);

/// The controller's reconcile: one rollout, timed into the metrics.
pub(super) async fn reconcile(
    obj: Arc<DynamicObject>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let result = reconcile_any(&obj, &ctx).await;
    ctx.metrics.reconciled(
        started.elapsed(),
        result.as_ref().err().map(ReconcileError::kind),
    );
    record_phase(&ctx, &obj);
    result
}

/// The controller's error policy: back off per rollout, log quietly.
pub(super) fn error_policy(
    obj: Arc<DynamicObject>,
    err: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    let name = obj.name_any();
    let failures = ctx.failures.failed(&name);
    let delay = retry_delay(failures);
    if logged(failures) {
        warn!(rollout = %name, %err, failures, retry_in = %humantime::format_duration(delay), "reconcile failed; retrying");
    }
    Action::requeue(delay)
}

/// The rollout's phase and counts as the controller last wrote or saw them, into the
/// metrics.
fn record_phase(ctx: &Context, obj: &DynamicObject) {
    let name = obj.name_any();
    let existing = ctx.rollouts.state().iter().map(|r| r.name_any()).collect();
    let ours = ctx.latest.ours(&name, obj.metadata.uid.as_deref());
    let seen = ours
        .and_then(|w| w.status.clone())
        .or_else(|| serde_json::from_value::<RolloutStatus>(obj.data["status"].clone()).ok());
    let (phase, counts, paused) = seen.map_or_else(
        || (Phase::Pending, NodeCounts::default(), None),
        |st| (st.phase, st.counts, paused_reason(&st.conditions)),
    );
    let phase = if ctx.invalid.contains(&name) {
        Phase::Invalid
    } else {
        phase
    };
    ctx.metrics
        .rollout(&name, phase, &counts, paused, &existing);
}

async fn reconcile_any(
    obj: &Arc<DynamicObject>,
    ctx: &Arc<Context>,
) -> Result<Action, ReconcileError> {
    let name = obj.name_any();
    let decoded = serde_json::to_value(&**obj)
        .map_err(|e| types::DecodeError {
            field: ".".to_string(),
            reason: e.to_string(),
        })
        .and_then(types::decode);
    let result = match decoded {
        Ok(rollout) => {
            ctx.invalid.forget(&name);
            reconcile_once(Arc::new(rollout), ctx.clone()).await
        }
        Err(err) => report_invalid(obj, &err, ctx).await,
    };
    if result.is_ok() {
        ctx.failures.succeeded(&name);
    }
    result
}

async fn reconcile_once(
    obj: Arc<KubeletConfigRollout>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    if !ctx.leadership.is_valid() {
        return Err(ReconcileError::NotLeader);
    }
    let rollout = ctx.latest.newest(obj);
    let nodes: Vec<NodeView> = ctx.nodes.state().iter().map(|n| NodeView::of(n)).collect();
    let config = lookup_config(&ctx, &rollout).await;
    let mut plan = decide(&ctx, &rollout, &nodes, config.clone());
    if !plan.pods_wanted.is_empty() {
        let status = rollout.status.clone().unwrap_or_default();
        ctx.pods
            .check(
                &ctx.client,
                &rollout.name_any(),
                status.revision,
                &plan.pods_wanted,
            )
            .await;
        plan = decide(&ctx, &rollout, &nodes, config);
    }
    let old = rollout.status.clone().unwrap_or_default();
    let mut retry = None;
    if structural(&old, &plan.status) {
        // The snapshot or the batch is recorded before any node of it is changed.
        let written = write_status(&ctx, &rollout, &plan).await?;
        return Ok(Action::requeue(if written {
            Duration::ZERO
        } else {
            STALE_STATUS_RECHECK
        }));
    }
    for t in &plan.touches {
        if ctx.node_writes.is_stale(&t.node, &t.resource_version) {
            // Already written against this copy: wait for the cache (its event wakes us).
            retry = Some(CACHE_LAG_RECHECK);
            continue;
        }
        let changed = touch(&ctx, t).await?;
        ctx.node_writes.written(&t.node, &t.resource_version);
        if !changed {
            retry = Some(STALE_NODE_RECHECK);
        }
    }
    if plan.status != old {
        match ctx
            .pacing
            .hold_back(&rollout.name_any(), !plan.touches.is_empty())
        {
            Some(wait) => retry = Some(wait),
            None => {
                if !write_status(&ctx, &rollout, &plan).await? {
                    retry = Some(STALE_STATUS_RECHECK);
                }
            }
        }
    }
    Ok(sooner(plan.requeue, retry).map_or_else(Action::await_change, Action::requeue))
}

/// Whether the plan starts a revision or moves to another batch: that is written before
/// any node of it is changed.
fn structural(old: &RolloutStatus, new: &RolloutStatus) -> bool {
    new.revision != old.revision
        || new.current_batch != old.current_batch
        || new.batches != old.batches
}

/// The sooner of two optional waits.
fn sooner(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_revision_or_batch_is_structural_counts_are_not() {
        let old = RolloutStatus {
            revision: 1,
            batches: vec![vec!["n1".into()], vec!["n2".into()]],
            ..RolloutStatus::default()
        };
        let mut counts = old.clone();
        counts.counts.done = 1;
        counts.phase = Phase::Soaking;
        assert!(!structural(&old, &counts));
        let mut batch = old.clone();
        batch.current_batch = 1;
        assert!(structural(&old, &batch));
        let mut revision = old.clone();
        revision.revision = 2;
        assert!(structural(&old, &revision));
        let mut joined = old.clone();
        joined.batches[1].push("n3".into());
        assert!(structural(&old, &joined));
    }

    #[test]
    fn the_sooner_wait_wins() {
        let s = Duration::from_secs;
        assert_eq!(sooner(None, None), None);
        assert_eq!(sooner(Some(s(3)), None), Some(s(3)));
        assert_eq!(sooner(None, Some(s(2))), Some(s(2)));
        assert_eq!(sooner(Some(s(3)), Some(s(2))), Some(s(2)));
    }
}
