//! THE table: which class a changed field is in, and why. Fields not listed
//! are [`Class::InPlace`] ([`DEFAULT_REASON`]).
//!
//! A rule names a top-level v1beta1 field (`maxPods`) or one key of a
//! map-valued field (`kubeReserved.cpu`). A change of a map key falls under
//! the key's own rule if there is one, else under its field's rule.
//! [`Condition::StaticPolicy`] rules add a second, state-bound class to a
//! change while the static policy of their state file's manager is on in the
//! old or the new config.

use std::fmt::Write as _;

use super::{Class, StateFile};
use Class::{Allocatable, InPlace, NodeReplacing};
use StateFile::{CpuManager, MemoryManager};

/// When a rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Whenever the field changes.
    Always,
    /// While the static policy of the rule's state file's manager
    /// ([`StateFile::policy_field`] is [`StateFile::static_policy`]) is on
    /// in the old or the new config: the field then also changes that
    /// manager's checkpoint. Compared through the reservation sums the
    /// manager reads, so a move between kubeReserved and systemReserved
    /// with an equal sum is not such a change.
    StaticPolicy,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// A top-level v1beta1 field, optionally with a map key (`field.key`).
    pub field: &'static str,
    pub class: Class,
    /// The kubelet checkpoint the change invalidates (state-bound rules).
    pub state_file: Option<StateFile>,
    pub when: Condition,
    /// Why, for an operator.
    pub reason: &'static str,
}

/// Why a field that is not in [`RULES`] is in-place.
pub const DEFAULT_REASON: &str = "Applied by restarting the kubelet: running containers keep running (the kubelet finds them again), and pod admission, placement and limits are unchanged.";

const fn rule(field: &'static str, class: Class, reason: &'static str) -> Rule {
    Rule {
        field,
        class,
        state_file: None,
        when: Condition::Always,
        reason,
    }
}

const fn state(field: &'static str, file: StateFile, reason: &'static str) -> Rule {
    Rule {
        field,
        class: Class::StateBound,
        state_file: Some(file),
        when: Condition::Always,
        reason,
    }
}

const fn while_static(field: &'static str, file: StateFile, reason: &'static str) -> Rule {
    Rule {
        field,
        class: Class::StateBound,
        state_file: Some(file),
        when: Condition::StaticPolicy,
        reason,
    }
}

const RESERVED: &str = "Subtracted from capacity to make Node allocatable: after the restart, pods admitted under the old allocatable may be evicted or refused (kubernetes#105523, #78580). Counted through the per-resource sum of kubeReserved and systemReserved unless enforceNodeAllocatable enforces a reserved cgroup, so moving an amount between the two is no change.";
const TOPOLOGY: &str = "Pods were admitted under the old NUMA alignment; after the restart the kubelet readmits them under the new one and rejects those it cannot align (TopologyAffinityError).";
const STATIC_CPU: &str = "The static CPU policy reserves the CPUs of kubeReserved.cpu + systemReserved.cpu, recorded in cpu_manager_state: a different sum fails the checkpoint's validation and the kubelet refuses to start.";
const STATIC_MEMORY: &str = "The static memory manager requires reservedMemory to equal kubeReserved + systemReserved + evictionHard memory.available, and its checkpoint was built from the old amounts: the kubelet refuses to start.";

/// THE table, by class from most to least severe.
pub const RULES: &[Rule] = &[
    rule("cgroupDriver", NodeReplacing, "Must match the container runtime's driver; running pods' cgroups were made with the old driver and cannot be managed with the new one."),
    rule("cgroupRoot", NodeReplacing, "Running pods' cgroups live under the old root; the kubelet does not move them and would lose track of them."),
    rule("cgroupsPerQOS", NodeReplacing, "Turns the QoS cgroup hierarchy on or off; running pods stay in the old layout."),
    rule("kubeletCgroups", NodeReplacing, "Part of the node's provisioned cgroup layout (systemd slices); change it with a new node."),
    rule("systemCgroups", NodeReplacing, "System processes are moved into it when the kubelet starts and never moved back; part of the node's provisioned cgroup layout."),
    rule("kubeReservedCgroup", NodeReplacing, "The existing cgroup kubeReserved is enforced on, made by the node's init system; the old one keeps its limits."),
    rule("systemReservedCgroup", NodeReplacing, "The existing cgroup systemReserved is enforced on, made by the node's init system; the old one keeps its limits."),
    rule("containerRuntimeEndpoint", NodeReplacing, "Another runtime does not know the running pods' sandboxes: the kubelet would start every pod again beside orphaned containers."),
    rule("imageServiceEndpoint", NodeReplacing, "Another image service holds none of the node's images: every image is pulled again and the old store is never garbage-collected."),
    rule("providerID", NodeReplacing, "The cloud's ID of this machine; the API server does not let a Node's spec.providerID change once set."),
    rule("podCIDR", NodeReplacing, "Running pods have IPs from the old range (standalone mode; with an API server the Node's spec.podCIDR is immutable)."),
    rule("registerNode", NodeReplacing, "Only acts when the Node object is created; on a registered node a new value does nothing until the node registers anew."),
    rule("registerWithTaints", NodeReplacing, "Only applied when the Node object is created; NodeRestriction forbids a kubelet to change its own taints later."),
    rule("volumePluginDir", NodeReplacing, "FlexVolume drivers are installed there with the node; running pods' volumes could not be unmounted if their driver is no longer found."),
    rule("podLogsDir", NodeReplacing, "Running containers' logs stay in the old directory, where kubectl logs and log rotation no longer find them; usually a volume provisioned with the node."),
    state("cpuManagerPolicy", CpuManager, "The kubelet refuses to start when the policy differs from the one in cpu_manager_state (\"please drain this node and delete the CPU manager checkpoint file\")."),
    state("cpuManagerPolicyOptions", CpuManager, "CPU assignments in cpu_manager_state were made under the old options; the documented procedure is drain, delete the checkpoint, restart."),
    state("reservedSystemCPUs", CpuManager, "The reserved CPUs are part of the default CPU set in cpu_manager_state: a different set fails its validation and the kubelet refuses to start."),
    while_static("kubeReserved.cpu", CpuManager, STATIC_CPU),
    while_static("systemReserved.cpu", CpuManager, STATIC_CPU),
    state("memoryManagerPolicy", MemoryManager, "The kubelet refuses to start when the policy differs from the one in memory_manager_state."),
    state("reservedMemory", MemoryManager, "The per-NUMA reservation shapes the machine state in memory_manager_state: a different one fails its validation and the kubelet refuses to start."),
    while_static("kubeReserved.memory", MemoryManager, STATIC_MEMORY),
    while_static("systemReserved.memory", MemoryManager, STATIC_MEMORY),
    while_static("evictionHard.memory.available", MemoryManager, STATIC_MEMORY),
    rule("kubeReserved", Allocatable, RESERVED),
    rule("systemReserved", Allocatable, RESERVED),
    rule("enforceNodeAllocatable", Allocatable, "Which cgroups are capped (pods, kube-reserved, system-reserved): a new cap can OOM-kill or throttle running pods. While a reserved cgroup is enforced, kubeReserved and systemReserved count each on its own."),
    rule("evictionHard", Allocatable, "Hard thresholds are subtracted from allocatable memory and evict at once when crossed: running pods can be evicted right after the restart."),
    rule("evictionSoft", Allocatable, "A new soft threshold can evict running pods once its grace period has passed."),
    rule("evictionSoftGracePeriod", Allocatable, "A shorter grace period evicts running pods sooner under a soft threshold."),
    rule("evictionMinimumReclaim", Allocatable, "A larger minimum reclaim evicts more running pods each time a threshold is crossed."),
    rule("mergeDefaultEvictionSettings", Allocatable, "Merges the default thresholds into evictionHard and evictionSoft, which changes eviction and allocatable memory as those fields do."),
    rule("maxPods", Allocatable, "The pod capacity the node advertises: below the running count, pods over it are refused readmission after the restart (OutOfpods)."),
    rule("podsPerCore", Allocatable, "Caps pod capacity per core like maxPods: pods over the new capacity are refused readmission."),
    rule("podPidsLimit", Allocatable, "The pid limit of every pod's cgroup: running pods get the new limit, and those using more processes fail to fork."),
    rule("localStorageCapacityIsolation", Allocatable, "Turned off, ephemeral-storage leaves Node allocatable and pods' storage limits are not enforced: pods requesting ephemeral-storage are refused readmission."),
    rule("qosReserved", Allocatable, "Memory held back from Burstable and BestEffort pods: the QoS cgroups of running pods get new limits."),
    rule("topologyManagerPolicy", Allocatable, TOPOLOGY),
    rule("topologyManagerScope", Allocatable, TOPOLOGY),
    rule("topologyManagerPolicyOptions", Allocatable, TOPOLOGY),
    rule("userNamespaces", Allocatable, "Pods in user namespaces hold ID ranges of the old size (idsPerPod): drain so that no running pod holds one when the size changes."),
    rule("evictionPressureTransitionPeriod", InPlace, "Only how long a pressure condition is held after it clears; no pod is evicted or refused for it."),
    rule("memorySwap", InPlace, "swapBehavior applies to containers started after the restart; running containers keep their swap limit."),
    rule("protectKernelDefaults", InPlace, "Only checks kernel tunables at startup: a mismatch makes the kubelet fail to start, which the trial period catches and rolls back; running pods are untouched."),
    rule("resolvConf", InPlace, "Read when a pod sandbox is made: running pods keep the resolv.conf they were given."),
    rule("staticPodPath", InPlace, "Static pods are read again from the new path; those no longer found stop, as the operator who moved them intends."),
    rule("logging", InPlace, "Format and verbosity of the kubelet's own logs."),
    rule("eventRecordQPS", InPlace, "A rate limit of the kubelet's own API calls."),
    rule("imageGCHighThresholdPercent", InPlace, "When unused images are collected; running containers' images are never removed."),
    rule("syncFrequency", InPlace, "How often the kubelet syncs pods; running pods are unaffected."),
];

/// The top-level field of a rule's or change's field (`kubeReserved` of
/// `kubeReserved.cpu`).
pub(super) fn top_level(field: &str) -> &str {
    field.split_once('.').map_or(field, |(top, _)| top)
}

/// The [`Condition::Always`] rule for a changed field (or map key): the
/// key's own rule, else its field's, else none (in-place).
pub(super) fn rule_for(field: &str) -> Option<&'static Rule> {
    let always = || RULES.iter().filter(|r| r.when == Condition::Always);
    always()
        .find(|r| r.field == field)
        .or_else(|| always().find(|r| r.field == top_level(field)))
}

/// The class of a changed field (or map key) outside any condition.
pub(super) fn class_of(field: &str) -> Class {
    rule_for(field).map_or(Class::InPlace, |r| r.class)
}

/// The [`Condition::StaticPolicy`] rules of one state file.
pub(super) fn static_rules(file: StateFile) -> impl Iterator<Item = &'static Rule> {
    RULES
        .iter()
        .filter(move |r| r.when == Condition::StaticPolicy && r.state_file == Some(file))
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// [`RULES`] as a Markdown table (`| field | class | reason |`), one row per
/// rule and a last one for every other field.
pub fn markdown_table() -> String {
    let mut out = String::from("| field | class | reason |\n| --- | --- | --- |\n");
    for rule in RULES {
        let field = match (rule.when, rule.state_file) {
            (Condition::StaticPolicy, Some(file)) => format!(
                "`{}` while `{}: {}` (old or new)",
                rule.field,
                file.policy_field(),
                file.static_policy()
            ),
            _ => format!("`{}`", rule.field),
        };
        let class = match rule.state_file {
            Some(file) => format!("{} (`{}`)", rule.class, file.file_name()),
            None => rule.class.to_string(),
        };
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            cell(&field),
            class,
            cell(rule.reason)
        );
    }
    let _ = writeln!(
        out,
        "| every other field | {} | {} |",
        Class::InPlace,
        cell(DEFAULT_REASON)
    );
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::is_known_field;

    #[test]
    fn every_rule_names_a_v1beta1_field() {
        for rule in RULES {
            let top = top_level(rule.field);
            assert!(is_known_field(top), "{} is not a v1beta1 field", rule.field);
            assert!(
                ![
                    "apiVersion",
                    "kind",
                    "crashLoopThreshold",
                    "configTrialDuration"
                ]
                .contains(&top),
                "{}",
                rule.field
            );
            assert!(!rule.reason.is_empty(), "{}", rule.field);
        }
    }

    #[test]
    fn rules_are_unique_and_consistent() {
        let mut seen = BTreeSet::new();
        for rule in RULES {
            assert!(
                seen.insert((rule.field, rule.when == Condition::Always)),
                "{} twice",
                rule.field
            );
            assert_eq!(
                rule.state_file.is_some(),
                rule.class == Class::StateBound,
                "{}",
                rule.field
            );
            if rule.when == Condition::StaticPolicy {
                // A conditional rule refines a map key of a field that has
                // its own rule.
                assert!(
                    rule.field.contains('.') && rule_for(rule.field).is_some(),
                    "{}",
                    rule.field
                );
            }
        }
        // The policy fields themselves are state-bound with their file:
        // the class hashes rely on it (see `normalize`).
        for file in [StateFile::CpuManager, StateFile::MemoryManager] {
            let policy = rule_for(file.policy_field()).expect("policy rule");
            assert_eq!(
                (policy.class, policy.state_file),
                (Class::StateBound, Some(file))
            );
            assert!(static_rules(file).count() > 0);
        }
    }

    #[test]
    fn reservations_and_their_enforcement_share_a_class() {
        // The sum rule makes kubeReserved and systemReserved one comparison,
        // chosen by enforceNodeAllocatable: the class hashes need all three
        // in one class.
        for resource in ["cpu", "memory", "ephemeral-storage", "pid", "other"] {
            assert_eq!(
                class_of(&format!("kubeReserved.{resource}")),
                Class::Allocatable
            );
            assert_eq!(
                class_of(&format!("systemReserved.{resource}")),
                Class::Allocatable
            );
        }
        assert_eq!(class_of("enforceNodeAllocatable"), Class::Allocatable);
    }

    #[test]
    fn lookups_fall_back_to_the_field_then_in_place() {
        assert_eq!(
            class_of("evictionHard.memory.available"),
            Class::Allocatable
        );
        assert_eq!(class_of("kubeReserved.cpu"), Class::Allocatable);
        assert_eq!(class_of("cgroupDriver"), Class::NodeReplacing);
        assert_eq!(class_of("reservedSystemCPUs"), Class::StateBound);
        assert_eq!(class_of("eventBurst"), Class::InPlace);
        assert!(rule_for("eventBurst").is_none());
        let cpu: Vec<_> = static_rules(StateFile::CpuManager)
            .map(|r| r.field)
            .collect();
        assert_eq!(cpu, ["kubeReserved.cpu", "systemReserved.cpu"]);
    }

    #[test]
    fn markdown_table_has_every_rule() {
        let table = markdown_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), RULES.len() + 3);
        assert_eq!(lines[0], "| field | class | reason |");
        for (rule, line) in RULES.iter().zip(&lines[2..]) {
            assert!(line.starts_with(&format!("| `{}`", rule.field)), "{line}");
            assert!(line.contains(rule.class.as_str()), "{line}");
            assert!(line.contains(&cell(rule.reason)), "{line}");
            assert_eq!(line.matches(" | ").count(), 2, "{line}");
        }
        assert!(table.contains("| `kubeReserved.cpu` while `cpuManagerPolicy: static` (old or new) | state-bound (`cpu_manager_state`) |"));
        assert!(table.ends_with(&format!(
            "| every other field | in-place | {DEFAULT_REASON} |\n"
        )));
    }
}
