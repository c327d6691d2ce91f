//! `rollout start` with a spec an older controller would misread: set-based selectors
//! (`nodeSelectorExpressions`), which a controller of an earlier release ignores, rolling
//! to every node `nodeSelector` alone matches. The controller holding the Lease says
//! what it follows ([`ControllerFeatures`]); a holder that does not say so is refused
//! unless `--force`.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::Client;

use crate::controller_defaults::{LEASE_NAME, NAMESPACE};
use kp_contract::rollout::{
    ControllerFeatures, RolloutSpec, CONTROLLER_FEATURES_ANNOTATION, FEATURE_SELECTOR_EXPRESSIONS,
};

/// A controller that would misread the spec holds the Lease.
#[derive(Debug, thiserror::Error)]
#[error(
    "the rollout controller holding lease {NAMESPACE}/{LEASE_NAME} ({holder}) is of an earlier \
     release: it ignores set-based selectors (nodeSelectorExpressions) and would roll to every \
     node the KEY=VALUE part alone matches; upgrade the controller first, select with KEY=VALUE \
     only, or start with --force"
)]
pub struct OlderController {
    pub holder: String,
}

/// Checks the controller against what `spec` relies on; `Ok` carries the warnings
/// (the Lease could not be read, or `--force` passed an older controller).
pub async fn check(
    client: &Client,
    spec: &RolloutSpec,
    force: bool,
) -> Result<Vec<String>, OlderController> {
    if spec.node_selector_expressions.is_empty() {
        return Ok(Vec::new());
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease = match leases.get_opt(LEASE_NAME).await {
        Ok(lease) => lease,
        Err(err) => {
            return Ok(vec![format!(
                "cannot read the rollout controller's lease {NAMESPACE}/{LEASE_NAME} ({}): make \
                 sure the controller is of this release; an earlier one ignores set-based selectors",
                kp_runtime::api_error::shown(&err)
            )])
        }
    };
    // No Lease, or nobody holds it: no controller acts now.
    let Some(holder) = lease
        .as_ref()
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty())
    else {
        return Ok(Vec::new());
    };
    let annotation = lease
        .as_ref()
        .and_then(|l| l.metadata.annotations.as_ref())
        .and_then(|a| a.get(CONTROLLER_FEATURES_ANNOTATION))
        .map(String::as_str);
    if ControllerFeatures::holder_follows(annotation, &holder, FEATURE_SELECTOR_EXPRESSIONS) {
        return Ok(Vec::new());
    }
    let older = OlderController { holder };
    if force {
        Ok(vec![format!("{older} (passed over: --force)")])
    } else {
        Err(older)
    }
}
