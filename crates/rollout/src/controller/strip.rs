//! What the controller keeps of a Node: only what the plan reads.

use k8s_openapi::api::core::v1::Node;

use kp_contract::node_config::CONDITION_TYPE;
use kp_contract::rollout::GROUP;

/// Keeps only what the plan reads of a Node: a cache of 5,000 full Nodes (images, volumes,
/// addresses) would be tens of MiB.
pub(super) fn strip(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(spec) = node.spec.as_mut() {
        spec.taints = None;
        spec.pod_cidrs = None;
    }
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.addresses = None;
        status.node_info = None;
        status.capacity = None;
        status.allocatable = None;
        status.daemon_endpoints = None;
        status.config = None;
        if let Some(conditions) = status.conditions.as_mut() {
            conditions.retain(|c| c.type_ == "Ready" || c.type_ == CONDITION_TYPE);
        }
    }
    if let Some(annotations) = node.metadata.annotations.as_mut() {
        annotations.retain(|k, _| k.starts_with(GROUP));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_what_the_plan_reads_and_drops_the_rest() {
        let mut node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": "n1",
                "resourceVersion": "7",
                "labels": {"topology.kubernetes.io/zone": "a"},
                "annotations": {
                    "kubelet-pivot.io/config-source": "kc/cfg:kubelet",
                    "other.io/big": "x",
                },
                "managedFields": [{"manager": "kubelet"}],
            },
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}],
                     "podCIDRs": ["10.0.0.0/24"]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": CONDITION_TYPE, "status": "True"},
                    {"type": "MemoryPressure", "status": "False"},
                ],
                "images": [{"names": ["busybox"]}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "capacity": {"cpu": "4"},
                "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                             "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                             "kubeProxyVersion": "", "operatingSystem": "", "architecture": ""},
            },
        }))
        .expect("a Node");
        strip(&mut node);
        assert_eq!(node.metadata.managed_fields, None);
        assert_eq!(node.metadata.resource_version.as_deref(), Some("7"));
        assert!(node.metadata.labels.as_ref().is_some_and(|l| l.len() == 1));
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["kubelet-pivot.io/config-source"]
        );
        let spec = node.spec.clone().unwrap_or_default();
        assert_eq!(spec.unschedulable, Some(true), "cordoned is read");
        assert_eq!((spec.taints, spec.pod_cidrs), (None, None));
        let status = node.status.clone().unwrap_or_default();
        let kept: Vec<String> = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.type_)
            .collect();
        assert_eq!(kept, ["Ready", CONDITION_TYPE]);
        assert_eq!(status.images, None);
        assert_eq!(status.addresses, None);
        assert_eq!(status.capacity, None);
        assert_eq!(status.node_info, None);
    }
}
