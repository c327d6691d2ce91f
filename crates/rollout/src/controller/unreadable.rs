//! A rollout that cannot be read ([`invalid`]), reported on itself once per generation
//! and error: its status (raw JSON, replaced through `/status`) and a Warning Event.

use std::time::{Duration, SystemTime};

use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use tracing::warn;

use super::error::{api_err, ReconcileError};
use super::{post, Context};
use crate::invalid::{self, StatusWrite};
use kp_contract::rollout::DecodeError;

/// Reports `obj` on itself; it is then left alone until it changes, and the other rollouts
/// are not held up by it.
pub(super) async fn report_invalid(
    obj: &DynamicObject,
    err: &DecodeError,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    let name = obj.name_any();
    let message = invalid::message(&name, err);
    let key = invalid::Key {
        uid: obj.metadata.uid.clone(),
        generation: obj.metadata.generation,
        message: message.clone(),
    };
    let mut report = match ctx.invalid.of(&name, &key) {
        Some(report) if report.done() => return Ok(Action::await_change()),
        Some(report) => report,
        None => {
            let raw = serde_json::to_value(obj).unwrap_or_default();
            let mut report = invalid::Report::new(key);
            if invalid::already_reported(&raw, &message) {
                // Reported before a restart (or by the other replica): nothing to repeat.
                report.event_done = true;
                report.status_done = true;
            } else {
                warn!(rollout = %name, error = %err,
                      "cannot read the rollout; reporting it on the object and skipping it");
            }
            report
        }
    };
    if !ctx.leadership.is_valid() {
        return Err(ReconcileError::NotLeader);
    }
    let mut result = Ok(Action::await_change());
    if !report.status_done {
        match write_invalid_status(ctx, obj, &message).await {
            Ok(StatusWrite::Written) => report.status_done = true,
            Ok(StatusWrite::Refused) => report.status_done = true,
            Ok(StatusWrite::Stale) => result = Ok(Action::requeue(Duration::from_millis(100))),
            Err(e) => result = Err(e),
        }
    }
    if !report.event_done {
        post::post_invalid_event(ctx, obj, &message).await;
        report.event_done = true;
    }
    ctx.invalid.update(name, report);
    result
}

/// Replaces the status of `obj` with the report (`status.phase: Invalid`, `Valid=False`).
async fn write_invalid_status(
    ctx: &Context,
    obj: &DynamicObject,
    message: &str,
) -> Result<StatusWrite, ReconcileError> {
    let name = obj.name_any();
    let raw = serde_json::to_value(obj).unwrap_or_default();
    let now = kp_contract::time::rfc3339(SystemTime::now());
    let reported = invalid::with_report(&raw, message, &now);
    let body: DynamicObject = match serde_json::from_value(reported) {
        Ok(body) => body,
        Err(e) => {
            warn!(rollout = %name, error = %e, "cannot build the status of an unreadable rollout");
            return Ok(StatusWrite::Refused);
        }
    };
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ctx.resource);
    match api
        .replace_status(&name, &PostParams::default(), &body)
        .await
    {
        Ok(_) => Ok(StatusWrite::Written),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(StatusWrite::Stale),
        Err(kube::Error::Api(s)) if s.code == 422 => {
            warn!(rollout = %name, error = %s.message,
                  "the API server refuses the status of the unreadable rollout (it validates the spec \
                   on a status write); its Event is the only report");
            Ok(StatusWrite::Refused)
        }
        Err(e) => Err(api_err(format!("cannot write the status of {name}"))(e)),
    }
}
