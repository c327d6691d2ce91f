//! The Node condition `KubeletLockFile`: False while a supervisor of this node
//! refuses to start because it was given another lock file than the node's
//! (or a self-hosted pod misses the host's paths), True again once a
//! supervisor starts with the node's lock file after such a refusal. The
//! config condition (`KubeletConfigOK`) is the holder's; this one is written
//! by a supervisor that holds nothing, so it is a condition of its own.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;
use tracing::{info, warn};

use kp_contract::time::now_rfc3339;

pub const CONDITION_TYPE: &str = "KubeletLockFile";
/// Reason while a supervisor refuses.
pub const REASON_MISMATCH: &str = "LockFileMismatch";
/// Reason once a supervisor started with the node's lock file again.
pub const REASON_AGREED: &str = "LockFileAgreed";
/// A refusing supervisor exits after this at the latest: the report must
/// not hold up the exit that makes systemd or the DaemonSet show it failing.
const REPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the node's lock file is agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockCondition {
    Mismatch,
    Agreed,
}

impl LockCondition {
    /// The condition's status: `True` when agreed.
    pub fn status(self) -> &'static str {
        match self {
            LockCondition::Mismatch => "False",
            LockCondition::Agreed => "True",
        }
    }

    fn reason(self) -> &'static str {
        match self {
            LockCondition::Mismatch => REASON_MISMATCH,
            LockCondition::Agreed => REASON_AGREED,
        }
    }
}

/// The strategic merge patch of the condition.
pub fn patch(condition: LockCondition, message: &str, now: &str) -> serde_json::Value {
    let (status, reason) = (condition.status(), condition.reason());
    json!({"status": {"conditions": [{
        "type": CONDITION_TYPE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }]}})
}

/// Patches the condition on `node`, one try bounded by a few seconds; a
/// failure is logged (the log line and `status` say the same).
pub async fn report(client: kube::Client, node: &str, condition: LockCondition, message: &str) {
    let nodes: Api<Node> = Api::all(client);
    let body = Patch::Strategic(patch(condition, message, &now_rfc3339()));
    let pp = PatchParams::default();
    match tokio::time::timeout(REPORT_TIMEOUT, nodes.patch_status(node, &pp, &body)).await {
        Ok(Ok(_)) => info!(
            node,
            condition = CONDITION_TYPE,
            status = condition.status(),
            "reported on the Node"
        ),
        Ok(Err(err)) => {
            warn!(node, err = %kp_runtime::api_error::shown(&err), "cannot report the {CONDITION_TYPE} condition on the Node")
        }
        Err(_) => warn!(
            node,
            "cannot report the {CONDITION_TYPE} condition on the Node: no answer in {}",
            humantime::format_duration(REPORT_TIMEOUT)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_is_one_condition_by_type() {
        let p = patch(
            LockCondition::Mismatch,
            "two lock files",
            "2026-01-01T00:00:00Z",
        );
        let c = &p["status"]["conditions"][0];
        assert_eq!(c["type"], CONDITION_TYPE);
        assert_eq!(c["status"], "False");
        assert_eq!(c["reason"], REASON_MISMATCH);
        assert_eq!(c["message"], "two lock files");
        let p = patch(LockCondition::Agreed, "ok", "t");
        assert_eq!(p["status"]["conditions"][0]["status"], "True");
    }
}
