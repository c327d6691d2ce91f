//! A config as the *units* that [`classify`](super::classify) compares and
//! the V2 hashes hash: the effective config with
//!
//! - every duration in Go's canonical form (`"60s"` is `"1m0s"`);
//! - quantities by value (`"1Gi"` is `"1024Mi"`), eviction thresholds by
//!   value (a percentage never equals a quantity);
//! - the eviction maps split per key (`evictionHard.memory.available`);
//! - `enforceNodeAllocatable` as a set (`[none]` is `[]`);
//! - the sum rule: unless a reserved cgroup is enforced, kubeReserved and
//!   systemReserved count through their per-resource sum (one unit
//!   `kubeReserved+systemReserved.RESOURCE`, absent when zero), else per key.
//!
//! [`normalized_document`] is what `HashAlgorithm::V2` hashes.
//! [`class_documents`] splits the units by class for the class hashes, and
//! adds to the state-bound one, while a manager's static policy is on, what
//! that manager's checkpoint depends on ([`Normalized::static_unit`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::table::{class_of, static_rules};
use super::value::{self, Exact};
use super::{Class, StateFile};
use crate::KubeletConfig;

/// How the values of a map compared per key are read.
#[derive(Debug, Clone, Copy)]
enum Entries {
    Thresholds,
    Durations,
}

/// Map-valued fields compared per key (besides the reservations).
const PER_KEY: &[(&str, Entries)] = &[
    ("evictionHard", Entries::Thresholds),
    ("evictionSoft", Entries::Thresholds),
    ("evictionMinimumReclaim", Entries::Thresholds),
    ("evictionSoftGracePeriod", Entries::Durations),
];

/// The two reservations of the sum rule.
pub(super) const RESERVATIONS: [&str; 2] = ["kubeReserved", "systemReserved"];

/// The unit name of a summed reservation: `kubeReserved+systemReserved.cpu`.
const SUM_PREFIX: &str = "kubeReserved+systemReserved";

const ENFORCE_FIELD: &str = "enforceNodeAllocatable";

/// `enforceNodeAllocatable` values that enforce a reservation on its own
/// cgroup: then each reservation is that cgroup's limit, not a share of a sum.
const RESERVED_CGROUPS: &[&str] = &[
    "kube-reserved",
    "system-reserved",
    "kube-reserved-compressible",
    "system-reserved-compressible",
];

/// `enforceNodeAllocatable: [none]` enforces nothing, as `[]` does.
const ENFORCE_NONE: &str = "none";

/// String fields holding one quantity.
const QUANTITY_FIELDS: &[&str] = &["containerLogMaxSize"];

/// `reservedMemory: [{numaNode, limits: {RESOURCE: QUANTITY}}]`.
const RESERVED_MEMORY_FIELD: &str = "reservedMemory";

/// How the reservations compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reservations {
    /// Per resource through the sum of the two (zero is the same as unset).
    Summed,
    /// Each entry on its own: a reserved cgroup is enforced.
    Separate,
}

/// A reservation amount.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Amount {
    Exact(Exact),
    Unparsed(String),
}

impl Amount {
    fn read(value: &Value) -> Amount {
        let text = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        Exact::parse(&text).map_or(Amount::Unparsed(text), Amount::Exact)
    }
}

/// A normalized effective config.
#[derive(Debug, Clone)]
pub(super) struct Normalized {
    /// Every field but the per-key maps and the reservations, by name.
    fields: BTreeMap<String, Value>,
    /// The entries of the [`PER_KEY`] maps, by `field.key`.
    entries: BTreeMap<String, Value>,
    /// The reservations, by field and resource.
    reserved: BTreeMap<(&'static str, String), Amount>,
}

/// Takes the map-valued field `name` out of `fields` (a value of another
/// type, which parsing refuses anyway, stays a plain field).
fn take_map(fields: &mut Map<String, Value>, name: &str) -> Map<String, Value> {
    match fields.remove(name) {
        Some(Value::Object(map)) => map,
        Some(other) => {
            fields.insert(name.to_owned(), other);
            Map::new()
        }
        None => Map::new(),
    }
}

fn normalize_fields(fields: &mut Map<String, Value>) {
    if let Some(Value::Array(items)) = fields.get_mut(ENFORCE_FIELD) {
        let set: BTreeSet<String> = items
            .drain(..)
            .filter(|v| v.as_str() != Some(ENFORCE_NONE))
            .map(|v| v.as_str().map_or(v.to_string(), str::to_owned))
            .collect();
        items.extend(set.into_iter().map(Value::String));
    }
    for name in QUANTITY_FIELDS {
        if let Some(Value::String(text)) = fields.get(*name) {
            let canonical = value::quantity(text);
            fields.insert((*name).to_owned(), canonical);
        }
    }
    if let Some(Value::Array(items)) = fields.get_mut(RESERVED_MEMORY_FIELD) {
        let limits = items
            .iter_mut()
            .filter_map(|item| item.get_mut("limits"))
            .filter_map(Value::as_object_mut);
        for limit in limits.flat_map(|l| l.values_mut()) {
            if let Value::String(text) = limit {
                *limit = value::quantity(text);
            }
        }
    }
}

impl Normalized {
    pub(super) fn of(config: &KubeletConfig) -> Normalized {
        let mut fields = config.effective_canonical();
        normalize_fields(&mut fields);
        let mut entries = BTreeMap::new();
        for (name, kind) in PER_KEY {
            for (key, item) in take_map(&mut fields, name) {
                let canonical = match (kind, &item) {
                    (Entries::Thresholds, Value::String(text)) => value::threshold(text),
                    (Entries::Durations, Value::String(text)) => value::duration(text),
                    _ => item,
                };
                entries.insert(format!("{name}.{key}"), canonical);
            }
        }
        let mut reserved = BTreeMap::new();
        for name in RESERVATIONS {
            for (resource, amount) in take_map(&mut fields, name) {
                reserved.insert((name, resource), Amount::read(&amount));
            }
        }
        Normalized {
            fields: fields.into_iter().collect(),
            entries,
            reserved,
        }
    }

    pub(super) fn fields(&self) -> &BTreeMap<String, Value> {
        &self.fields
    }

    pub(super) fn entries(&self) -> &BTreeMap<String, Value> {
        &self.entries
    }

    /// How this config's reservations count (see [`Reservations`]).
    pub(super) fn reservations(&self) -> Reservations {
        let enforced = self.fields.get(ENFORCE_FIELD).and_then(Value::as_array);
        let separate = enforced
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(|v| RESERVED_CGROUPS.contains(&v));
        if separate {
            Reservations::Separate
        } else {
            Reservations::Summed
        }
    }

    /// Whether `file`'s manager runs its static policy.
    pub(super) fn is_static(&self, file: StateFile) -> bool {
        self.fields.get(file.policy_field()).and_then(Value::as_str) == Some(file.static_policy())
    }

    /// The reserved resources.
    pub(super) fn resources(&self) -> BTreeSet<&str> {
        self.reserved.keys().map(|(_, r)| r.as_str()).collect()
    }

    /// One reservation, canonical; when summed, zero is unset.
    pub(super) fn amount(&self, field: &str, resource: &str, mode: Reservations) -> Option<Value> {
        let key = RESERVATIONS
            .into_iter()
            .find(|f| *f == field)
            .map(|f| (f, resource.to_owned()))?;
        match self.reserved.get(&key)? {
            Amount::Exact(e) if e.is_zero() && mode == Reservations::Summed => None,
            Amount::Exact(e) => Some(Value::String(e.to_text())),
            Amount::Unparsed(text) => Some(value::unparsed(text)),
        }
    }

    /// The sum of both reservations of `resource` (unset when zero); if one
    /// does not parse or is negative, the two amounts instead.
    pub(super) fn sum(&self, resource: &str) -> Option<Value> {
        let total = RESERVATIONS
            .into_iter()
            .try_fold(Exact::zero(), |acc, field| {
                match self.reserved.get(&(field, resource.to_owned())) {
                    None => Some(acc),
                    Some(Amount::Exact(e)) => acc.checked_add(e),
                    Some(Amount::Unparsed(_)) => None,
                }
            });
        match total {
            Some(sum) if sum.is_zero() => None,
            Some(sum) => Some(Value::String(sum.to_text())),
            None => {
                let amounts: Map<String, Value> = RESERVATIONS
                    .into_iter()
                    .filter_map(|f| {
                        Some((
                            f.to_owned(),
                            self.amount(f, resource, Reservations::Summed)?,
                        ))
                    })
                    .collect();
                Some(Value::Object(amounts))
            }
        }
    }

    /// The value of a field or map key (`maxPods`, `evictionHard.memory.available`,
    /// `kubeReserved.cpu` read as `mode` says).
    pub(super) fn component(&self, path: &str, mode: Reservations) -> Option<Value> {
        match path.split_once('.') {
            Some((field, resource)) if RESERVATIONS.contains(&field) => {
                self.amount(field, resource, mode)
            }
            Some(_) => self.entries.get(path).cloned(),
            None => self.fields.get(path).cloned(),
        }
    }

    /// What `file`'s checkpoint depends on among the table's
    /// [`Condition::StaticPolicy`](super::Condition::StaticPolicy) fields:
    /// reservations through their sums, other fields as they are.
    pub(super) fn static_unit(&self, file: StateFile) -> Value {
        let mut unit = Map::new();
        for rule in static_rules(file) {
            let (key, part) = match rule.field.split_once('.') {
                Some((field, resource)) if RESERVATIONS.contains(&field) => {
                    (format!("{SUM_PREFIX}.{resource}"), self.sum(resource))
                }
                _ => (
                    rule.field.to_owned(),
                    self.component(rule.field, Reservations::Summed),
                ),
            };
            unit.insert(key, part.unwrap_or(Value::Null));
        }
        Value::Object(unit)
    }

    /// Every unit with its class: the fields, the map entries, and the
    /// reservations as this config counts them.
    fn units(&self) -> BTreeMap<String, (Class, Value)> {
        let mut units: BTreeMap<String, (Class, Value)> = self
            .fields
            .iter()
            .chain(&self.entries)
            .map(|(name, v)| (name.clone(), (class_of(name), v.clone())))
            .collect();
        let mode = self.reservations();
        for resource in self.resources() {
            let paths = RESERVATIONS.map(|f| format!("{f}.{resource}"));
            if mode == Reservations::Separate {
                for path in paths {
                    if let Some(v) = self.component(&path, mode) {
                        units.insert(path.clone(), (class_of(&path), v));
                    }
                }
            } else if let Some(sum) = self.sum(resource) {
                let class = paths.iter().map(|p| class_of(p)).max();
                let class = class.unwrap_or(Class::InPlace);
                units.insert(format!("{SUM_PREFIX}.{resource}"), (class, sum));
            }
        }
        units
    }
}

/// The normalized effective config that `HashAlgorithm::V2` hashes: every
/// unit by name (fields by their own name, map entries as `field.key`,
/// summed reservations as `kubeReserved+systemReserved.RESOURCE`).
pub(crate) fn normalized_document(config: &KubeletConfig) -> Value {
    let units = Normalized::of(config).units();
    Value::Object(units.into_iter().map(|(k, (_, v))| (k, v)).collect())
}

/// The units of each class, for the class hashes (every class present).
/// The state-bound one also holds, while a manager's static policy is on,
/// [`Normalized::static_unit`] under `static:FILE_NAME`.
pub(crate) fn class_documents(config: &KubeletConfig) -> BTreeMap<Class, Value> {
    let normalized = Normalized::of(config);
    let mut documents: BTreeMap<Class, Map<String, Value>> =
        Class::ALL.into_iter().map(|c| (c, Map::new())).collect();
    for (name, (class, v)) in normalized.units() {
        documents.entry(class).or_default().insert(name, v);
    }
    for file in StateFile::ALL {
        if normalized.is_static(file) {
            documents.entry(Class::StateBound).or_default().insert(
                format!("static:{}", file.file_name()),
                normalized.static_unit(file),
            );
        }
    }
    documents
        .into_iter()
        .map(|(class, doc)| (class, Value::Object(doc)))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{API_VERSION, KIND};

    fn config(body: &str) -> KubeletConfig {
        let doc = format!("apiVersion: {API_VERSION}\nkind: {KIND}\n{body}\n");
        KubeletConfig::parse_and_validate(doc.as_bytes()).unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    #[test]
    fn the_document_is_normalized() {
        let doc = normalized_document(&config(
            "syncFrequency: 60s\nkubeReserved: {memory: 1Gi, cpu: 500m}\nsystemReserved: {memory: 512Mi}\nevictionHard: {memory.available: 100Mi, nodefs.available: 10.0%}\nenforceNodeAllocatable: [pods]\ncontainerLogMaxSize: 10240Ki\nevictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 90s}",
        ));
        assert_eq!(doc["syncFrequency"], "1m0s");
        assert_eq!(doc["kubeReserved+systemReserved.memory"], "1610612736");
        assert_eq!(doc["kubeReserved+systemReserved.cpu"], "0.5");
        assert_eq!(doc["evictionHard.memory.available"], "104857600");
        assert_eq!(doc["evictionHard.nodefs.available"], "10%");
        assert_eq!(doc["evictionSoftGracePeriod.memory.available"], "1m30s");
        assert_eq!(doc["enforceNodeAllocatable"], json!(["pods"]));
        assert_eq!(doc["containerLogMaxSize"], "10485760");
        for absent in [
            "kubeReserved",
            "systemReserved",
            "evictionHard",
            "kubeReserved.memory",
        ] {
            assert!(doc.get(absent).is_none(), "{absent}");
        }
    }

    #[test]
    fn enforced_reservations_stay_separate() {
        let doc = normalized_document(&config(
            "kubeReserved: {memory: 1Gi, cpu: \"0\"}\nkubeReservedCgroup: /kube.slice\nenforceNodeAllocatable: [pods, kube-reserved]",
        ));
        assert_eq!(doc["kubeReserved.memory"], "1073741824");
        assert_eq!(doc["kubeReserved.cpu"], "0");
        assert!(doc.get("kubeReserved+systemReserved.memory").is_none());
        let none = normalized_document(&config("enforceNodeAllocatable: [none]"));
        assert_eq!(none["enforceNodeAllocatable"], json!([]));
    }

    #[test]
    fn class_documents_split_units_by_class() {
        let docs = class_documents(&config(
            "cpuManagerPolicy: static\nkubeReserved: {cpu: \"1\", memory: 1Gi}\nmaxPods: 50\ncgroupDriver: systemd",
        ));
        assert_eq!(docs.len(), 4);
        assert_eq!(docs[&Class::Allocatable]["maxPods"], 50);
        assert_eq!(
            docs[&Class::Allocatable]["kubeReserved+systemReserved.cpu"],
            "1"
        );
        assert_eq!(docs[&Class::NodeReplacing]["cgroupDriver"], "systemd");
        assert_eq!(docs[&Class::StateBound]["cpuManagerPolicy"], "static");
        assert_eq!(
            docs[&Class::StateBound]["static:cpu_manager_state"],
            json!({"kubeReserved+systemReserved.cpu": "1"})
        );
        assert!(docs[&Class::StateBound]
            .get("static:memory_manager_state")
            .is_none());
        assert_eq!(docs[&Class::InPlace]["kind"], KIND);
    }

    #[test]
    fn unparsable_reservations_are_compared_as_written() {
        // Not valid, but classify must not panic on an unvalidated config.
        let doc = KubeletConfig::parse(
            format!("apiVersion: {API_VERSION}\nkind: {KIND}\nkubeReserved: {{memory: lots}}\nsystemReserved: {{memory: 1Gi}}").as_bytes(),
        )
        .expect("parses");
        let normalized = Normalized::of(&doc);
        assert_eq!(
            normalized.sum("memory"),
            Some(json!({"kubeReserved": {"unparsed": "lots"}, "systemReserved": "1073741824"}))
        );
    }
}
