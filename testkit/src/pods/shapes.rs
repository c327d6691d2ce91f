//! The fields the strict decoder knows of Pods, PodDisruptionBudgets, DeleteOptions and
//! Evictions, and the type checks of their bodies.

use serde_json::Value;

use crate::decode::{capitalize, go_type, Shape, OBJECT_META};

static CONTAINER: Shape = Shape::Fields(&[
    ("name", Shape::Any),
    ("image", Shape::Any),
    ("command", Shape::Any),
    ("args", Shape::Any),
    ("workingDir", Shape::Any),
    ("ports", Shape::Any),
    ("envFrom", Shape::Any),
    ("env", Shape::Any),
    ("resources", Shape::Any),
    ("resizePolicy", Shape::Any),
    ("restartPolicy", Shape::Any),
    ("volumeMounts", Shape::Any),
    ("volumeDevices", Shape::Any),
    ("livenessProbe", Shape::Any),
    ("readinessProbe", Shape::Any),
    ("startupProbe", Shape::Any),
    ("lifecycle", Shape::Any),
    ("terminationMessagePath", Shape::Any),
    ("terminationMessagePolicy", Shape::Any),
    ("imagePullPolicy", Shape::Any),
    ("securityContext", Shape::Any),
    ("stdin", Shape::Any),
    ("stdinOnce", Shape::Any),
    ("tty", Shape::Any),
]);

static POD_SPEC: Shape = Shape::Fields(&[
    ("volumes", Shape::Any),
    ("initContainers", Shape::ListOf(&CONTAINER)),
    ("containers", Shape::ListOf(&CONTAINER)),
    ("ephemeralContainers", Shape::Any),
    ("restartPolicy", Shape::Any),
    ("terminationGracePeriodSeconds", Shape::Any),
    ("activeDeadlineSeconds", Shape::Any),
    ("dnsPolicy", Shape::Any),
    ("nodeSelector", Shape::Any),
    ("serviceAccountName", Shape::Any),
    ("serviceAccount", Shape::Any),
    ("automountServiceAccountToken", Shape::Any),
    ("nodeName", Shape::Any),
    ("hostNetwork", Shape::Any),
    ("hostPID", Shape::Any),
    ("hostIPC", Shape::Any),
    ("shareProcessNamespace", Shape::Any),
    ("securityContext", Shape::Any),
    ("imagePullSecrets", Shape::Any),
    ("hostname", Shape::Any),
    ("subdomain", Shape::Any),
    ("affinity", Shape::Any),
    ("schedulerName", Shape::Any),
    ("tolerations", Shape::Any),
    ("hostAliases", Shape::Any),
    ("priorityClassName", Shape::Any),
    ("priority", Shape::Any),
    ("dnsConfig", Shape::Any),
    ("readinessGates", Shape::Any),
    ("runtimeClassName", Shape::Any),
    ("enableServiceLinks", Shape::Any),
    ("preemptionPolicy", Shape::Any),
    ("overhead", Shape::Any),
    ("topologySpreadConstraints", Shape::Any),
    ("setHostnameAsFQDN", Shape::Any),
    ("os", Shape::Any),
    ("hostUsers", Shape::Any),
    ("schedulingGates", Shape::Any),
    ("resourceClaims", Shape::Any),
    ("resources", Shape::Any),
]);

static POD_STATUS: Shape = Shape::Fields(&[
    ("observedGeneration", Shape::Any),
    ("phase", Shape::Any),
    ("conditions", Shape::Any),
    ("message", Shape::Any),
    ("reason", Shape::Any),
    ("nominatedNodeName", Shape::Any),
    ("hostIP", Shape::Any),
    ("hostIPs", Shape::Any),
    ("podIP", Shape::Any),
    ("podIPs", Shape::Any),
    ("startTime", Shape::Any),
    ("initContainerStatuses", Shape::Any),
    ("containerStatuses", Shape::Any),
    ("qosClass", Shape::Any),
    ("ephemeralContainerStatuses", Shape::Any),
    ("resize", Shape::Any),
    ("resourceClaimStatuses", Shape::Any),
]);

pub(crate) static POD: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("spec", Shape::Nested(&POD_SPEC)),
    ("status", Shape::Nested(&POD_STATUS)),
]);

static PDB_SPEC: Shape = Shape::Fields(&[
    ("minAvailable", Shape::Any),
    ("selector", Shape::Any),
    ("maxUnavailable", Shape::Any),
    ("unhealthyPodEvictionPolicy", Shape::Any),
]);

static PDB_STATUS: Shape = Shape::Fields(&[
    ("observedGeneration", Shape::Any),
    ("disruptedPods", Shape::Any),
    ("disruptionsAllowed", Shape::Any),
    ("currentHealthy", Shape::Any),
    ("desiredHealthy", Shape::Any),
    ("expectedPods", Shape::Any),
    ("conditions", Shape::Any),
]);

pub(crate) static PDB: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("spec", Shape::Nested(&PDB_SPEC)),
    ("status", Shape::Nested(&PDB_STATUS)),
]);

static DELETE_OPTIONS: Shape = Shape::Fields(&[
    ("kind", Shape::Any),
    ("apiVersion", Shape::Any),
    ("gracePeriodSeconds", Shape::Any),
    ("preconditions", Shape::Any),
    ("orphanDependents", Shape::Any),
    ("propagationPolicy", Shape::Any),
    ("dryRun", Shape::Any),
    (
        "ignoreStoreReadErrorWithClusterBreakingPotential",
        Shape::Any,
    ),
]);

pub(super) static EVICTION: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("deleteOptions", Shape::Nested(&DELETE_OPTIONS)),
]);

/// The JSON type errors of the Pod and PodDisruptionBudget fields the server looks at.
pub(crate) fn check_types(obj: &Value, kind: &str) -> Result<(), String> {
    let unmarshal = |value: &Value, field: &str, want: &str| {
        Err(format!(
            "json: cannot unmarshal {} into Go struct field {field} of type {want}",
            go_type(value)
        ))
    };
    for field in ["spec", "status"] {
        if let Some(value) = obj.get(field).filter(|v| !v.is_null() && !v.is_object()) {
            return unmarshal(
                value,
                &format!("{kind}.{field}"),
                &format!("v1.{kind}{}", capitalize(field)),
            );
        }
    }
    if kind == "Pod" {
        for list in ["containers", "initContainers"] {
            match obj["spec"].get(list) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for item in items {
                        if !item.is_object() {
                            return unmarshal(
                                item,
                                &format!("PodSpec.spec.{list}"),
                                "v1.Container",
                            );
                        }
                        for field in ["name", "image"] {
                            if let Some(bad) =
                                item.get(field).filter(|v| !v.is_null() && !v.is_string())
                            {
                                return unmarshal(
                                    bad,
                                    &format!("Container.spec.{list}.{field}"),
                                    "string",
                                );
                            }
                        }
                    }
                }
                Some(other) => {
                    return unmarshal(other, &format!("PodSpec.spec.{list}"), "[]v1.Container")
                }
            }
        }
        if let Some(bad) = obj["spec"]
            .get("nodeName")
            .filter(|v| !v.is_null() && !v.is_string())
        {
            return unmarshal(bad, "PodSpec.spec.nodeName", "string");
        }
    } else {
        for field in [
            "disruptionsAllowed",
            "currentHealthy",
            "desiredHealthy",
            "expectedPods",
            "observedGeneration",
        ] {
            if let Some(bad) = obj["status"]
                .get(field)
                .filter(|v| !v.is_null() && !v.is_i64())
            {
                let want = if field == "observedGeneration" {
                    "int64"
                } else {
                    "int32"
                };
                return unmarshal(
                    bad,
                    &format!("PodDisruptionBudgetStatus.status.{field}"),
                    want,
                );
            }
        }
        for field in ["minAvailable", "maxUnavailable"] {
            if let Some(bad) = obj["spec"]
                .get(field)
                .filter(|v| !v.is_null() && !v.is_i64() && !v.is_string())
            {
                return Err(format!(
                    "json: cannot unmarshal {} into Go value of type int32",
                    go_type(bad)
                ));
            }
        }
    }
    Ok(())
}
