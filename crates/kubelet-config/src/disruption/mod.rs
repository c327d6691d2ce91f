//! How disruptive a kubelet config change is: the running effective config
//! and a new one are compared field by field *after decoding and defaults*
//! ([`KubeletConfig::effective`], values normalized: quantities and
//! durations by value, the reservation sum rule), and every changed field is
//! sorted into a [`Class`] by THE table, [`RULES`], which also says why.
//!
//! - `table`: [`RULES`], [`DEFAULT_REASON`], [`markdown_table`];
//! - `value`: canonical quantities, thresholds and durations;
//! - `normalize`: a config as the units that are compared and hashed
//!   (`KubeletConfig::hash_with(HashAlgorithm::V2)` and
//!   `KubeletConfig::class_hashes` hash them);
//! - `classify`: [`classify`], the comparison;
//! - `policy`: what each class does on this node ([`Policy`], [`Overrides`]).
//!
//! Pure: no I/O.
//!
//! [`KubeletConfig::effective`]: crate::KubeletConfig::effective

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

mod classify;
mod normalize;
mod policy;
mod table;
mod value;

pub use classify::classify;
pub(crate) use normalize::{class_documents, normalized_document};
pub use policy::{Action, Overrides, Policy, MAX_OVERRIDES_BYTES, NODE_OVERRIDE_ANNOTATION};
pub use table::{markdown_table, Condition, Rule, DEFAULT_REASON, RULES};

/// How disruptive a change is, from least to most severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// A kubelet restart applies it; running pods are untouched.
    InPlace,
    /// Node allocatable (or pod admission) changes: running pods may be
    /// evicted or refused readmission after a restart.
    Allocatable,
    /// A kubelet checkpoint no longer matches: the kubelet refuses to start
    /// until the node is drained and the state file removed.
    StateBound,
    /// Fixed for a node's life: apply it with a new node.
    NodeReplacing,
}

impl Class {
    /// Every class, from least to most severe.
    pub const ALL: [Class; 4] = [
        Class::InPlace,
        Class::Allocatable,
        Class::StateBound,
        Class::NodeReplacing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::InPlace => "in-place",
            Class::Allocatable => "allocatable",
            Class::StateBound => "state-bound",
            Class::NodeReplacing => "node-replacing",
        }
    }
}

/// The valid names of `items`, for error messages.
fn names<T: Copy>(items: &[T], name: impl Fn(T) -> &'static str) -> String {
    items
        .iter()
        .map(|&i| name(i))
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Class {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Class::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown disruption class {}; expected one of {}",
                    kp_contract::node_config::excerpt(s),
                    names(&Class::ALL, Class::as_str)
                )
            })
    }
}

/// A kubelet checkpoint that a state-bound change invalidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateFile {
    /// `cpu_manager_state`, the CPU manager's checkpoint.
    CpuManager,
    /// `memory_manager_state`, the memory manager's checkpoint.
    MemoryManager,
}

impl StateFile {
    /// Both state files.
    pub const ALL: [StateFile; 2] = [StateFile::CpuManager, StateFile::MemoryManager];

    /// The file's name in the kubelet's root directory.
    pub fn file_name(self) -> &'static str {
        match self {
            StateFile::CpuManager => "cpu_manager_state",
            StateFile::MemoryManager => "memory_manager_state",
        }
    }

    /// The config field choosing the manager's policy.
    pub fn policy_field(self) -> &'static str {
        match self {
            StateFile::CpuManager => "cpuManagerPolicy",
            StateFile::MemoryManager => "memoryManagerPolicy",
        }
    }

    /// The policy value that pins resources in the checkpoint (the kubelet
    /// spells the two differently).
    pub fn static_policy(self) -> &'static str {
        match self {
            StateFile::CpuManager => "static",
            StateFile::MemoryManager => "Static",
        }
    }
}

/// One changed field (or map key) and its class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldChange {
    /// E.g. `kubeReserved.memory`, `cpuManagerPolicy`.
    pub field: String,
    pub class: Class,
    pub state_file: Option<StateFile>,
    pub reason: String,
}

/// Every changed field between two effective configs. A field can appear
/// twice with two classes: `kubeReserved.cpu` under the static CPU policy
/// changes both allocatable and `cpu_manager_state`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub fields: Vec<FieldChange>,
}

impl Change {
    /// No field changed: nothing to restart.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The most severe class among the changes.
    pub fn class(&self) -> Option<Class> {
        self.fields.iter().map(|f| f.class).max()
    }

    /// The kubelet checkpoints the change invalidates.
    pub fn state_files(&self) -> BTreeSet<StateFile> {
        self.fields.iter().filter_map(|f| f.state_file).collect()
    }

    /// The changed fields, sorted, each once.
    pub fn field_names(&self) -> Vec<String> {
        let names: BTreeSet<&String> = self.fields.iter().map(|f| &f.field).collect();
        names.into_iter().cloned().collect()
    }

    /// The fields changed in `class`, sorted, each once.
    pub fn fields_of(&self, class: Class) -> Vec<String> {
        let names: BTreeSet<&String> = self
            .fields
            .iter()
            .filter(|f| f.class == class)
            .map(|f| &f.field)
            .collect();
        names.into_iter().cloned().collect()
    }

    /// `"allocatable: kubeReserved.memory, maxPods; in-place:
    /// eventRecordQPS"`, most severe class first, at most `max_bytes` long:
    /// fields that do not fit are counted (`" (+3 more)"`).
    pub fn summary(&self, max_bytes: usize) -> String {
        let groups: Vec<(Class, Vec<String>)> = Class::ALL
            .into_iter()
            .rev()
            .map(|c| (c, self.fields_of(c)))
            .filter(|(_, fields)| !fields.is_empty())
            .collect();
        let total: usize = groups.iter().map(|(_, f)| f.len()).sum();
        (0..=total)
            .rev()
            .map(|shown| summary_of(&groups, shown, total))
            .find(|text| text.len() <= max_bytes)
            .unwrap_or_else(|| truncated(&summary_of(&groups, 0, total), max_bytes))
    }
}

/// The summary showing the first `shown` of `total` fields.
fn summary_of(groups: &[(Class, Vec<String>)], shown: usize, total: usize) -> String {
    let mut out = String::new();
    let mut left = shown;
    for (class, fields) in groups {
        if left == 0 {
            break;
        }
        let take = fields.len().min(left);
        left -= take;
        if !out.is_empty() {
            out.push_str("; ");
        }
        out.push_str(&format!("{class}: {}", fields[..take].join(", ")));
    }
    match (shown, total - shown) {
        (_, 0) => out,
        (0, hidden) => format!("{hidden} changed fields"),
        (_, hidden) => format!("{out} (+{hidden} more)"),
    }
}

/// The longest prefix of `text` of at most `max_bytes` bytes.
fn truncated(text: &str, max_bytes: usize) -> String {
    kp_contract::text::prefix(text, max_bytes).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(fields: &[(&str, Class, Option<StateFile>)]) -> Change {
        Change {
            fields: fields
                .iter()
                .map(|(field, class, state_file)| FieldChange {
                    field: (*field).to_owned(),
                    class: *class,
                    state_file: *state_file,
                    reason: String::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn class_names_round_trip_and_order_by_severity() {
        for class in Class::ALL {
            assert_eq!(class.to_string().parse::<Class>(), Ok(class));
            let json = serde_json::to_string(&class).expect("serializes");
            assert_eq!(json, format!("\"{class}\""));
        }
        assert!(Class::ALL.windows(2).all(|w| w[0] < w[1]));
        let err = "drain".parse::<Class>().expect_err("not a class");
        assert!(
            err.contains("\"drain\"") && err.contains("node-replacing"),
            "{err}"
        );
        assert_eq!(StateFile::CpuManager.file_name(), "cpu_manager_state");
        assert_eq!(StateFile::MemoryManager.file_name(), "memory_manager_state");
        assert_eq!(
            serde_json::to_string(&StateFile::MemoryManager).expect("serializes"),
            "\"memory_manager\""
        );
    }

    #[test]
    fn change_accessors() {
        let empty = Change::default();
        assert!(empty.is_empty() && empty.class().is_none() && empty.summary(100).is_empty());
        let c = change(&[
            ("maxPods", Class::Allocatable, None),
            ("kubeReserved.cpu", Class::Allocatable, None),
            (
                "kubeReserved.cpu",
                Class::StateBound,
                Some(StateFile::CpuManager),
            ),
            ("eventRecordQPS", Class::InPlace, None),
        ]);
        assert_eq!(c.class(), Some(Class::StateBound));
        assert_eq!(c.state_files(), BTreeSet::from([StateFile::CpuManager]));
        assert_eq!(
            c.field_names(),
            ["eventRecordQPS", "kubeReserved.cpu", "maxPods"]
        );
        assert_eq!(
            c.fields_of(Class::Allocatable),
            ["kubeReserved.cpu", "maxPods"]
        );
        assert!(c.fields_of(Class::NodeReplacing).is_empty());
        assert_eq!(
            c.summary(1000),
            "state-bound: kubeReserved.cpu; allocatable: kubeReserved.cpu, maxPods; in-place: eventRecordQPS"
        );
    }

    #[test]
    fn summary_is_bounded() {
        let c = change(&[
            ("kubeReserved.memory", Class::Allocatable, None),
            ("maxPods", Class::Allocatable, None),
            ("eventRecordQPS", Class::InPlace, None),
        ]);
        let full = "allocatable: kubeReserved.memory, maxPods; in-place: eventRecordQPS";
        assert_eq!(c.summary(full.len()), full);
        assert_eq!(
            c.summary(full.len() - 1),
            "allocatable: kubeReserved.memory, maxPods (+1 more)"
        );
        assert_eq!(c.summary(42), "allocatable: kubeReserved.memory (+2 more)");
        assert_eq!(c.summary(41), "3 changed fields");
        assert_eq!(c.summary(20), "3 changed fields");
        assert_eq!(c.summary(5), "3 cha");
        assert_eq!(c.summary(0), "");
        for max in 0..100 {
            assert!(c.summary(max).len() <= max);
        }
    }
}
