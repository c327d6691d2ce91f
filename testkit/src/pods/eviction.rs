//! The `pods/NAME/eviction` subresource (pkg/registry/core/pod/storage/eviction.go).

use serde_json::{json, Map, Value};

use crate::clock::now_rfc3339;
use crate::conditions::set_condition;
use crate::decode::{check_types as check_common_types, go_type, strip_unknown};
use crate::errors::{ApiError, FieldError};
use crate::resource::{Resource, Target};
use crate::store::{is_deleting, EventType, FieldValidation, Opts, Outcome, State};

use super::pdb::{pod_labels, selector_matches, set_disruption_allowed_condition};
use super::pod::{is_pod_ready, is_terminal, phase};
use super::shapes::EVICTION;
use super::termination::success_status;

impl State {
    /// `POST pods/NAME/eviction` (EvictionREST.Create).
    pub(crate) fn evict(
        &mut self,
        target: &Target,
        body: Value,
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        let (eviction, warnings) = decode_eviction(body, opts)?;
        let namespace = target.namespace.clone().unwrap_or_default();
        if let Some(ns) = eviction["metadata"]["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
        {
            if ns != namespace {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        if let Some(node) = &opts.node {
            crate::nodeauth::admit_eviction(self, node, target)?;
        }
        let name = target.name().to_string();
        if eviction["metadata"]["name"].as_str().unwrap_or("") != name {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
        let options = eviction
            .get("deleteOptions")
            .filter(|o| o.is_object())
            .cloned()
            .unwrap_or_else(|| json!({}));
        let dry_run = propagate_dry_run(&options, opts.dry_run)?;
        let pod_target = Target::object(Resource::Pods, Some(&namespace), &name);
        let pod = self.existing(&pod_target)?;
        let outcome = |_| Outcome {
            code: 201,
            body: success_status(),
            warnings: warnings.clone(),
        };
        // canIgnorePDB: terminal, pending and terminating pods are deleted directly.
        if is_terminal(&pod) || phase(&pod) == "Pending" || is_deleting(&pod) {
            return self
                .evict_pod(&pod_target, pod, &options, dry_run)
                .map(outcome);
        }
        let pdbs: Vec<Value> = self
            .objects(Resource::PodDisruptionBudgets)
            .iter()
            .filter(|((ns, _), _)| *ns == namespace)
            .filter(|(_, pdb)| {
                selector_matches(&pdb["spec"]["selector"], &pod_labels(&pod)) == Some(true)
            })
            .map(|(_, pdb)| pdb.clone())
            .collect();
        match pdbs.as_slice() {
            [] => {}
            [pdb] => {
                let status = &pdb["status"];
                let current = status["currentHealthy"].as_i64().unwrap_or(0);
                let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
                let always_allow =
                    pdb["spec"]["unhealthyPodEvictionPolicy"].as_str() == Some("AlwaysAllow");
                // An unready pod does not count as healthy: deleting it disrupts nothing.
                let unhealthy_ok =
                    !is_pod_ready(&pod) && (always_allow || (current >= desired && desired > 0));
                if !unhealthy_ok {
                    self.check_and_decrement(pdb.clone(), &name, dry_run)?;
                }
            }
            _ => {
                return Err(ApiError::new(
                    500,
                    "",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ))
            }
        }
        self.evict_pod(&pod_target, pod, &options, dry_run)
            .map(outcome)
    }

    /// checkAndDecrement: 429 unless the budget allows a disruption, then records it.
    fn check_and_decrement(
        &mut self,
        mut pdb: Value,
        pod: &str,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let name = pdb["metadata"]["name"].as_str().unwrap_or("").to_string();
        let status = pdb["status"].clone();
        let generation = pdb["metadata"]["generation"].as_i64().unwrap_or(0);
        let too_many = |cause: String, retry: u32| {
            let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
            if retry > 0 {
                details["retryAfterSeconds"] = json!(retry);
            }
            let mut err = ApiError::new(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
            .with_details(details);
            err.retry_after = (retry > 0).then_some(retry);
            err
        };
        let forbidden = |why: &str| {
            ApiError::new(
                403,
                "Forbidden",
                format!("poddisruptionbudget.policy \"{name}\" is forbidden: {why}"),
            )
            .with_details(json!({"name": name, "group": "policy", "kind": "poddisruptionbudget"}))
        };
        if status["observedGeneration"].as_i64().unwrap_or(0) < generation {
            return Err(too_many(
                format!("The disruption budget {name} is still being processed by the server."),
                10,
            ));
        }
        let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
        if allowed < 0 {
            return Err(forbidden("pdb disruptions allowed is negative"));
        }
        if status["disruptedPods"].as_object().map_or(0, Map::len) > 2000 {
            return Err(forbidden(
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            ));
        }
        if allowed == 0 {
            return Err(too_many(
                format!(
                    "The disruption budget {name} needs {} healthy pods and has {} currently",
                    status["desiredHealthy"].as_i64().unwrap_or(0),
                    status["currentHealthy"].as_i64().unwrap_or(0)
                ),
                0,
            ));
        }
        if dry_run {
            return Ok(());
        }
        let old = pdb.clone();
        pdb["status"]["disruptionsAllowed"] = json!(allowed - 1);
        if allowed == 1 {
            set_disruption_allowed_condition(&mut pdb);
        }
        if !pdb["status"]["disruptedPods"].is_object() {
            pdb["status"]["disruptedPods"] = json!({});
        }
        pdb["status"]["disruptedPods"][pod] = json!(now_rfc3339());
        self.commit(
            Resource::PodDisruptionBudgets,
            EventType::Modified,
            pdb,
            Some(old),
        );
        Ok(())
    }

    /// addConditionAndDeletePod: the client's preconditions, the DisruptionTarget
    /// condition, then the delete.
    fn evict_pod(
        &mut self,
        target: &Target,
        pod: Value,
        options: &Value,
        dry_run: bool,
    ) -> Result<Outcome, ApiError> {
        let name = target.name();
        let conflict = |why: String| {
            ApiError::new(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on Pod \"{name}\": {why}"),
            )
            .with_details(json!({"name": name, "kind": "Pod"}))
        };
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let rv = pod["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let pre = &options["preconditions"];
        if let Some(want) = pre["uid"].as_str().filter(|u| !u.is_empty()) {
            if want != uid {
                return Err(conflict(format!(
                    "the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
                )));
            }
        }
        if let Some(want) = pre["resourceVersion"].as_str().filter(|r| !r.is_empty()) {
            if want != rv {
                return Err(conflict(format!(
                    "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rv}). The object might have been modified"
                )));
            }
        }
        let opts = Opts {
            dry_run,
            ..Opts::default()
        };
        if dry_run {
            return Ok(self.delete_pod(target, pod, Some(options), &opts));
        }
        let mut updated = pod.clone();
        let mut conditions = pod["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let condition = json!({
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": now_rfc3339(),
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        });
        // podutil.UpdatePodCondition: the transition time changes with the status only.
        set_condition(&mut conditions, condition, &["reason", "message"]);
        updated["status"]["conditions"] = json!(conditions);
        let pod = if updated != pod {
            self.commit(Resource::Pods, EventType::Modified, updated, Some(pod))
        } else {
            pod
        };
        Ok(self.delete_pod(target, pod, Some(options), &opts))
    }
}

/// Decodes a policy/v1 (or v1beta1) Eviction.
fn decode_eviction(body: Value, opts: &Opts) -> Result<(Value, Vec<String>), ApiError> {
    let cannot = |why: String| {
        ApiError::bad_request(format!(
            "Eviction in version \"v1\" cannot be handled as a Eviction: {why}"
        ))
    };
    if !body.is_object() {
        return Err(cannot(format!(
            "json: cannot unmarshal {} into Go value of type v1.Eviction",
            go_type(&body)
        )));
    }
    let api_version = body["apiVersion"].as_str().unwrap_or("");
    if !["", "policy/v1", "policy/v1beta1"].contains(&api_version) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version (policy/v1)"
        )));
    }
    let kind = body["kind"].as_str().unwrap_or("");
    if !kind.is_empty() && kind != "Eviction" {
        let version = if api_version.is_empty() {
            "policy/v1"
        } else {
            api_version
        };
        return Err(ApiError::bad_request(format!(
            "no kind \"{kind}\" is registered for version \"{version}\" in scheme \"pkg/api/legacyscheme/scheme.go:30\""
        )));
    }
    check_common_types(&body, "Eviction").map_err(cannot)?;
    if let Some(bad) = body
        .get("deleteOptions")
        .filter(|v| !v.is_null() && !v.is_object())
    {
        return Err(cannot(format!(
            "json: cannot unmarshal {} into Go struct field Eviction.deleteOptions of type v1.DeleteOptions",
            go_type(bad)
        )));
    }
    let mut obj = body;
    let mut unknown = Vec::new();
    strip_unknown(&mut obj, &EVICTION, "", &mut unknown);
    let list: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    let warnings = match opts.validation {
        FieldValidation::Strict if !list.is_empty() => {
            return Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                list.join(", ")
            )))
        }
        FieldValidation::Warn => list,
        _ => Vec::new(),
    };
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    Ok((obj, warnings))
}

/// propagateDryRun: the query's dryRun and the delete options' must agree.
fn propagate_dry_run(options: &Value, query_dry_run: bool) -> Result<bool, ApiError> {
    let body: Vec<String> = options["dryRun"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    if body.is_empty() {
        return Ok(query_dry_run);
    }
    if let Some(bad) = body.iter().find(|v| *v != "All") {
        return Err(ApiError::invalid(
            "DeleteOptions",
            "meta.k8s.io",
            "",
            &[FieldError::not_supported("dryRun", json!(bad), &["All"])],
        ));
    }
    // Only "All" exists, so the two cannot disagree.
    Ok(true)
}
