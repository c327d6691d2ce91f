//! The Events the controller posts on rollouts (best effort: a failure is logged; the
//! status holds the same facts).

use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::Context;
use crate::events::Happening;
use crate::invalid;
use crate::recorder::{Note, Severity};
use kp_contract::rollout::KubeletConfigRollout;

/// The Events of what the status just written says happened.
pub(super) async fn post_events(
    ctx: &Context,
    rollout: &KubeletConfigRollout,
    happened: &[Happening],
) {
    if happened.is_empty() {
        return;
    }
    let reference = rollout.object_ref(&());
    for h in happened {
        let text = h.note();
        let note = Note {
            severity: h.severity(),
            reason: h.reason(),
            action: h.action(),
            note: &text,
        };
        match ctx.recorder.post(&reference, &note).await {
            Ok(()) => {
                info!(rollout = %rollout.name_any(), reason = h.reason(), note = %text, "posted an Event")
            }
            Err(err) => {
                warn!(rollout = %rollout.name_any(), %err, "events are best effort; going on")
            }
        }
    }
}

/// A Warning Event about `obj`, a rollout that cannot be read.
pub(super) async fn post_invalid_event(ctx: &Context, obj: &DynamicObject, message: &str) {
    let note = Note {
        severity: Severity::Warning,
        reason: invalid::REASON,
        action: "Decode",
        note: message,
    };
    let reference = obj.object_ref(&ctx.resource);
    if let Err(err) = ctx.recorder.post(&reference, &note).await {
        warn!(rollout = %obj.name_any(), %err, "cannot post an Event about the unreadable rollout");
    }
}
