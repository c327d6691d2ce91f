//! Pod field selectors and the strategic merge keys of pod lists.

use serde_json::Value;

use crate::patch::ListStrategy;

/// The field labels pods support besides metadata.name and metadata.namespace.
pub(crate) const POD_FIELD_LABELS: [&str; 9] = [
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];

/// PodToSelectableFields.
pub(crate) fn pod_field_value(pod: &Value, key: &str) -> Option<String> {
    let text = |value: &Value| Some(value.as_str().unwrap_or("").to_string());
    match key {
        "spec.nodeName" => text(&pod["spec"]["nodeName"]),
        "spec.restartPolicy" => text(&pod["spec"]["restartPolicy"]),
        "spec.schedulerName" => text(&pod["spec"]["schedulerName"]),
        "spec.serviceAccountName" => text(&pod["spec"]["serviceAccountName"]),
        "spec.hostNetwork" => Some(
            pod["spec"]["hostNetwork"]
                .as_bool()
                .unwrap_or(false)
                .to_string(),
        ),
        "status.phase" => text(&pod["status"]["phase"]),
        "status.podIP" | "status.podIPs" => text(&pod["status"]["podIPs"][0]["ip"]),
        "status.nominatedNodeName" => text(&pod["status"]["nominatedNodeName"]),
        _ => None,
    }
}

/// The `patchMergeKey`s of k8s.io/api's Pod (lists without one are replaced).
pub(crate) fn pod_list_strategy(path: &str) -> ListStrategy {
    let containers = [
        "spec.containers",
        "spec.initContainers",
        "spec.ephemeralContainers",
    ];
    let in_container = |suffix: &str| {
        containers
            .iter()
            .any(|c| path.strip_prefix(c) == Some(suffix))
    };
    match path {
        _ if containers.contains(&path) => ListStrategy::MergeKey("name"),
        "spec.volumes"
        | "spec.imagePullSecrets"
        | "spec.schedulingGates"
        | "spec.resourceClaims" => ListStrategy::MergeKey("name"),
        "spec.hostAliases" | "status.podIPs" | "status.hostIPs" => ListStrategy::MergeKey("ip"),
        "status.conditions" => ListStrategy::MergeKey("type"),
        _ if in_container(".env") => ListStrategy::MergeKey("name"),
        _ if in_container(".ports") => ListStrategy::MergeKey("containerPort"),
        _ if in_container(".volumeMounts") => ListStrategy::MergeKey("mountPath"),
        _ if in_container(".volumeDevices") => ListStrategy::MergeKey("devicePath"),
        _ => ListStrategy::Replace,
    }
}
