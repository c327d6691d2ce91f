//! [`classify`]: the changed fields between two effective configs, each with
//! its class from THE table.

use std::collections::BTreeMap;

use serde_json::Value;

use super::normalize::{Normalized, Reservations, RESERVATIONS};
use super::table::{rule_for, static_rules, Rule, DEFAULT_REASON};
use super::{Change, Class, FieldChange, StateFile};
use crate::KubeletConfig;

impl FieldChange {
    fn new(field: &str, rule: Option<&Rule>) -> FieldChange {
        FieldChange {
            field: field.to_owned(),
            class: rule.map_or(Class::InPlace, |r| r.class),
            state_file: rule.and_then(|r| r.state_file),
            reason: rule.map_or(DEFAULT_REASON, |r| r.reason).to_owned(),
        }
    }
}

/// The keys whose values differ (or are present on one side only).
fn differing<'a>(
    old: &'a BTreeMap<String, Value>,
    new: &'a BTreeMap<String, Value>,
) -> impl Iterator<Item = &'a String> {
    let only_new = new.keys().filter(|k| !old.contains_key(*k));
    old.keys()
        .filter(|k| old.get(*k) != new.get(*k))
        .chain(only_new)
}

/// The reservations: through their sums (a move between kubeReserved and
/// systemReserved with an equal sum is no change), or each on its own when
/// either config enforces a reserved cgroup.
fn reservations(old: &Normalized, new: &Normalized, out: &mut Vec<FieldChange>) {
    let separate = [old, new]
        .iter()
        .any(|n| n.reservations() == Reservations::Separate);
    let mode = if separate {
        Reservations::Separate
    } else {
        Reservations::Summed
    };
    for resource in old.resources().union(&new.resources()) {
        if mode == Reservations::Summed && old.sum(resource) == new.sum(resource) {
            continue;
        }
        for field in RESERVATIONS {
            if old.amount(field, resource, mode) != new.amount(field, resource, mode) {
                let path = format!("{field}.{resource}");
                out.push(FieldChange::new(&path, rule_for(&path)));
            }
        }
    }
}

/// While `file`'s static policy is on in either config: the fields its
/// checkpoint depends on, if what it reads of them changed.
fn static_policy(file: StateFile, old: &Normalized, new: &Normalized, out: &mut Vec<FieldChange>) {
    if !(old.is_static(file) || new.is_static(file))
        || old.static_unit(file) == new.static_unit(file)
    {
        return;
    }
    for rule in static_rules(file) {
        let mode = Reservations::Summed;
        if old.component(rule.field, mode) != new.component(rule.field, mode) {
            out.push(FieldChange::new(rule.field, Some(rule)));
        }
    }
}

/// Compares the effective configs `old` (running) and `new` field by field,
/// after decoding, defaults and normalization (quantities and durations by
/// value, the reservation sum rule), and sorts every changed field (or map
/// key, e.g. `kubeReserved.memory`) into its class. Empty when the kubelet
/// would run the same config. kubelet-pivot's own fields
/// (`crashLoopThreshold`, `configTrialDuration`) are not the kubelet's and
/// are not compared.
pub fn classify(old: &KubeletConfig, new: &KubeletConfig) -> Change {
    let (a, b) = (Normalized::of(old), Normalized::of(new));
    let mut fields: Vec<FieldChange> = differing(a.fields(), b.fields())
        .chain(differing(a.entries(), b.entries()))
        .map(|name| FieldChange::new(name, rule_for(name)))
        .collect();
    reservations(&a, &b, &mut fields);
    for file in StateFile::ALL {
        static_policy(file, &a, &b, &mut fields);
    }
    fields.sort_by(|x, y| (&x.field, x.class).cmp(&(&y.field, y.class)));
    fields.dedup();
    Change { fields }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HashAlgorithm, API_VERSION, KIND};

    fn config(body: &str) -> KubeletConfig {
        let doc = format!("apiVersion: {API_VERSION}\nkind: {KIND}\n{body}\n");
        KubeletConfig::parse_and_validate(doc.as_bytes()).unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    fn changes(old: &str, new: &str) -> Vec<(String, Class, Option<StateFile>)> {
        let change = classify(&config(old), &config(new));
        let reverse = classify(&config(new), &config(old));
        assert_eq!(change, reverse, "classify is symmetric");
        change
            .fields
            .into_iter()
            .map(|f| (f.field, f.class, f.state_file))
            .collect()
    }

    fn c(field: &str, class: Class) -> (String, Class, Option<StateFile>) {
        (field.to_owned(), class, None)
    }

    fn sb(field: &str, file: StateFile) -> (String, Class, Option<StateFile>) {
        (field.to_owned(), Class::StateBound, Some(file))
    }

    /// Same V2 hash exactly when classify finds nothing.
    fn assert_same(old: &str, new: &str) {
        let (a, b) = (config(old), config(new));
        assert!(
            classify(&a, &b).is_empty(),
            "{old} -> {new}: {:?}",
            classify(&a, &b)
        );
        assert_eq!(
            a.hash_with(HashAlgorithm::V2),
            b.hash_with(HashAlgorithm::V2)
        );
        assert_eq!(a.class_hashes(), b.class_hashes());
    }

    #[test]
    fn each_class() {
        assert_eq!(
            changes("", "eventRecordQPS: 7\nlogging: {verbosity: 4}"),
            [
                c("eventRecordQPS", Class::InPlace),
                c("logging", Class::InPlace)
            ]
        );
        assert_eq!(
            changes("", "maxPods: 50\nevictionHard: {memory.available: 200Mi}"),
            [
                c("evictionHard.imagefs.available", Class::Allocatable),
                c("evictionHard.memory.available", Class::Allocatable),
                c("evictionHard.nodefs.available", Class::Allocatable),
                c("evictionHard.nodefs.inodesFree", Class::Allocatable),
                c("maxPods", Class::Allocatable),
            ]
        );
        assert_eq!(
            changes(
                "",
                "memoryManagerPolicy: Static\nreservedSystemCPUs: \"0-1\""
            ),
            [
                sb("memoryManagerPolicy", StateFile::MemoryManager),
                sb("reservedSystemCPUs", StateFile::CpuManager),
            ]
        );
        assert_eq!(
            changes(
                "",
                "cgroupDriver: systemd\nregisterWithTaints: [{key: a, effect: NoSchedule}]"
            ),
            [
                c("cgroupDriver", Class::NodeReplacing),
                c("registerWithTaints", Class::NodeReplacing)
            ]
        );
        let change = classify(&config(""), &config("cgroupDriver: systemd\nmaxPods: 50"));
        assert_eq!(change.class(), Some(Class::NodeReplacing));
        assert!(change.fields.iter().all(|f| !f.reason.is_empty()));
    }

    #[test]
    fn a_move_between_reservations_with_an_equal_sum_is_no_change() {
        let old = "kubeReserved: {memory: 1Gi, cpu: 500m}\nsystemReserved: {memory: 512Mi}";
        let new = "kubeReserved: {memory: 512Mi, cpu: 500m}\nsystemReserved: {memory: 1Gi}";
        assert_same(old, new);
        assert_ne!(
            config(old).hash_with(HashAlgorithm::V1),
            config(new).hash_with(HashAlgorithm::V1)
        );
        // A different sum is an allocatable change of the moved amounts.
        assert_eq!(
            changes(
                old,
                "kubeReserved: {memory: 1Gi, cpu: 500m}\nsystemReserved: {memory: 1Gi}"
            ),
            [c("systemReserved.memory", Class::Allocatable)]
        );
        // Zero is the same as unset in a sum.
        assert_same("kubeReserved: {memory: \"0\"}", "");
    }

    #[test]
    fn an_enforced_reserved_cgroup_makes_a_move_a_change() {
        let enforce =
            "kubeReservedCgroup: /kube.slice\nenforceNodeAllocatable: [pods, kube-reserved]";
        let old =
            format!("{enforce}\nkubeReserved: {{memory: 1Gi}}\nsystemReserved: {{memory: 512Mi}}");
        let new =
            format!("{enforce}\nkubeReserved: {{memory: 512Mi}}\nsystemReserved: {{memory: 1Gi}}");
        assert_eq!(
            changes(&old, &new),
            [
                c("kubeReserved.memory", Class::Allocatable),
                c("systemReserved.memory", Class::Allocatable),
            ]
        );
        // Enforced on one side only: compared per key as well.
        let unenforced = "kubeReserved: {memory: 512Mi}\nsystemReserved: {memory: 1Gi}\nkubeReservedCgroup: /kube.slice";
        assert_eq!(
            changes(&old, unenforced),
            [
                c("enforceNodeAllocatable", Class::Allocatable),
                c("kubeReserved.memory", Class::Allocatable),
                c("systemReserved.memory", Class::Allocatable),
            ]
        );
        assert_same(
            &old,
            &old.replace("[pods, kube-reserved]", "[kube-reserved, pods]"),
        );
    }

    #[test]
    fn the_static_cpu_policy_makes_reserved_cpu_state_bound() {
        let old = "cpuManagerPolicy: static\nkubeReserved: {cpu: \"1\", memory: 1Gi}";
        let new = "cpuManagerPolicy: static\nkubeReserved: {cpu: \"2\", memory: 2Gi}";
        assert_eq!(
            changes(old, new),
            [
                c("kubeReserved.cpu", Class::Allocatable),
                sb("kubeReserved.cpu", StateFile::CpuManager),
                c("kubeReserved.memory", Class::Allocatable),
            ]
        );
        // Static on one side is enough.
        let none = "kubeReserved: {cpu: \"2\", memory: 1Gi}";
        assert_eq!(
            changes(old, none),
            [
                sb("cpuManagerPolicy", StateFile::CpuManager),
                c("kubeReserved.cpu", Class::Allocatable),
                sb("kubeReserved.cpu", StateFile::CpuManager),
            ]
        );
        // Without it, a cpu reservation is only allocatable.
        assert_eq!(
            changes("kubeReserved: {cpu: \"1\"}", "kubeReserved: {cpu: 1500m}"),
            [c("kubeReserved.cpu", Class::Allocatable)]
        );
        // The checkpoint reads the sum: an equal sum keeps it valid.
        assert_same(
            "cpuManagerPolicy: static\nkubeReserved: {cpu: \"1\"}",
            "cpuManagerPolicy: static\nkubeReserved: {cpu: 500m}\nsystemReserved: {cpu: \"0.5\"}",
        );
    }

    #[test]
    fn the_static_memory_policy_makes_memory_reservations_state_bound() {
        let old = "memoryManagerPolicy: Static\nsystemReserved: {memory: 1Gi}";
        let new = "memoryManagerPolicy: Static\nsystemReserved: {memory: 2Gi}\nevictionHard: {memory.available: 200Mi}";
        assert_eq!(
            changes(old, new),
            [
                c("evictionHard.imagefs.available", Class::Allocatable),
                c("evictionHard.memory.available", Class::Allocatable),
                sb("evictionHard.memory.available", StateFile::MemoryManager),
                c("evictionHard.nodefs.available", Class::Allocatable),
                c("evictionHard.nodefs.inodesFree", Class::Allocatable),
                c("systemReserved.memory", Class::Allocatable),
                sb("systemReserved.memory", StateFile::MemoryManager),
            ]
        );
        let change = classify(&config(old), &config(new));
        assert_eq!(change.state_files(), [StateFile::MemoryManager].into());
        // cpu is not the memory manager's.
        assert_eq!(
            changes(old, &format!("{old}\nkubeReserved: {{cpu: \"1\"}}")),
            [c("kubeReserved.cpu", Class::Allocatable)]
        );
    }

    #[test]
    fn defaults_and_spellings_are_no_change() {
        // A default spelled out.
        assert_same("", "maxPods: 110\ncpuManagerPolicy: none\nenforceNodeAllocatable: [pods]\nevictionHard: {memory.available: 100Mi, nodefs.available: 10%, nodefs.inodesFree: 5%, imagefs.available: 15%}");
        // A Go zero value of a defaulted field means the default.
        assert_same("syncFrequency: 1m", "syncFrequency: 0s");
        // Values by value.
        assert_same(
            "kubeReserved: {memory: 1Gi}",
            "kubeReserved: {memory: 1024Mi}",
        );
        assert_same("kubeReserved: {cpu: 500m}", "kubeReserved: {cpu: \"0.5\"}");
        assert_same(
            "evictionHard: {memory.available: 1Gi, nodefs.available: 10%}",
            "evictionHard: {memory.available: 1024Mi, nodefs.available: 10.0%}",
        );
        assert_same("syncFrequency: 60s\nevictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 90s}", "syncFrequency: 1m0s\nevictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m30s}");
        assert_same(
            "enforceNodeAllocatable: []",
            "enforceNodeAllocatable: [none]",
        );
        assert_same("crashLoopThreshold: 3", "configTrialDuration: 1m");
        // A percentage is not a quantity.
        assert_eq!(
            changes(
                "evictionHard: {memory.available: 10%}",
                "evictionHard: {memory.available: 10Mi}"
            ),
            [c("evictionHard.memory.available", Class::Allocatable)]
        );
    }
}
