//! The writes a plan asks for: a node's assignment (one patch guarded by the cached Node's
//! resourceVersion) and the rollout's status (a replace guarded by its own).

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;
use tracing::info;

use super::error::{api_err, ReconcileError};
use super::{post, Context};
use crate::events;
use crate::nodeview::RECORD_ANNOTATION;
use crate::plan::{Plan, Touch};
use kp_contract::node_config::SOURCE_ANNOTATION;
use kp_contract::rollout::KubeletConfigRollout;

/// Changes one node; false if it changed since the cache saw it (or is gone): decide again.
pub(super) async fn touch(ctx: &Context, t: &Touch) -> Result<bool, ReconcileError> {
    if !ctx.leadership.is_valid() {
        return Err(ReconcileError::NotLeader);
    }
    let record = serde_json::to_string(&t.record).unwrap_or_default();
    let patch = json!({"metadata": {
        "resourceVersion": t.resource_version,
        "annotations": {SOURCE_ANNOTATION: t.assignment, RECORD_ANNOTATION: record},
    }});
    let api: Api<Node> = Api::all(ctx.client.clone());
    match api
        .patch(&t.node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            info!(node = %t.node, rollout = %t.record.rollout, revision = t.record.revision,
                  assignment = t.assignment.as_deref().unwrap_or("none (removed)"), previous = t.record.previous.as_deref(), "changed the node's assignment");
            Ok(true)
        }
        // The node changed since the cache saw it (or is gone): decide again.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(false),
        Err(e) => Err(api_err(format!("cannot patch node {}", t.node))(e)),
    }
}

/// Writes the plan's status, then posts the Events of what it says happened; false if the
/// rollout changed meanwhile (or is gone): decide again from the newer copy.
pub(super) async fn write_status(
    ctx: &Context,
    rollout: &KubeletConfigRollout,
    plan: &Plan,
) -> Result<bool, ReconcileError> {
    if !ctx.leadership.is_valid() {
        return Err(ReconcileError::NotLeader);
    }
    let name = rollout.name_any();
    let api: Api<KubeletConfigRollout> = Api::all(ctx.client.clone());
    let mut obj = rollout.clone();
    obj.status = Some(plan.status.clone());
    match api
        .replace_status(&name, &PostParams::default(), &obj)
        .await
    {
        Ok(written) => {
            let old = rollout.status.clone().unwrap_or_default();
            post::post_events(ctx, rollout, &events::between(&old, &plan.status)).await;
            ctx.latest.wrote(written);
            ctx.pacing.wrote(&name);
            Ok(true)
        }
        // Changed meanwhile (or deleted): decide again from the newer copy.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(false),
        Err(e) => Err(api_err(format!("cannot write the status of {name}"))(e)),
    }
}
