//! The effective config's canonical JSON (keys sorted at every level, no
//! whitespace) and its versioned SHA-256 hashes ([`HashAlgorithm`]).
//!
//! - V1 (`sha256-canonical-json-v1`) hashes the effective config's
//!   canonical JSON as written: `"1Gi"` and `"1024Mi"` differ. Kept
//!   unchanged for records written with it.
//! - V2 (`sha256-normalized-json-v2`) hashes the normalized effective config
//!   that [`classify`](crate::disruption::classify) compares
//!   (quantities and durations by value, the reservation sum rule): two
//!   configs have one V2 hash exactly when `classify` finds no change.
//!   V2 also has one hash per disruption class
//!   ([`KubeletConfig::class_hashes`]).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::duration::GoDuration;
use super::schema::{Field, Kind};
use super::KubeletConfig;
use crate::disruption::{self, Class};

/// A version of the effective-config hash, stored beside every hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgorithm {
    /// SHA-256 of the canonical JSON of the effective config.
    V1,
    /// SHA-256 of the canonical JSON of the normalized effective config.
    V2,
}

impl HashAlgorithm {
    /// The algorithm of [`KubeletConfig::hash`].
    pub const CURRENT: HashAlgorithm = HashAlgorithm::V2;
    /// Every algorithm, oldest first.
    pub const ALL: [HashAlgorithm; 2] = [HashAlgorithm::V1, HashAlgorithm::V2];

    /// The name stored beside a hash.
    pub const fn as_str(self) -> &'static str {
        match self {
            HashAlgorithm::V1 => "sha256-canonical-json-v1",
            HashAlgorithm::V2 => "sha256-normalized-json-v2",
        }
    }

    /// The algorithm of a stored name.
    pub fn parse(name: &str) -> Option<HashAlgorithm> {
        HashAlgorithm::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl fmt::Display for HashAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Name of the current effective-config hash algorithm, stored beside every
/// hash.
pub const HASH_ALGORITHM: &str = HashAlgorithm::CURRENT.as_str();

/// The entries of `map` with keys sorted bytewise.
pub(super) fn sorted_entries(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

fn write_json_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// JSON with keys sorted (bytewise) at every level and no whitespace.
pub(super) fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (index, (key, item)) in sorted_entries(map).into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_json_string(key, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn canonical_sha256(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    sha256_hex(out.as_bytes())
}

/// Rewrites the durations of the schema's fields (nested ones too) in Go's
/// canonical form (`"60s"` becomes `"1m0s"`); one that does not parse stays
/// as written (it can never equal a canonical one, which parses).
pub(super) fn canonical_durations(map: &mut Map<String, Value>, fields: &[Field]) {
    for field in fields {
        match (field.kind, map.get_mut(field.name)) {
            (Kind::Duration, Some(Value::String(text))) => {
                if let Ok(duration) = GoDuration::parse(text) {
                    *text = duration.to_string();
                }
            }
            (Kind::Object(nested), Some(Value::Object(inner))) => {
                canonical_durations(inner, nested);
            }
            (Kind::ObjectList(nested), Some(Value::Array(items))) => {
                for item in items.iter_mut().filter_map(Value::as_object_mut) {
                    canonical_durations(item, nested);
                }
            }
            _ => {}
        }
    }
}

/// The hash of `config` with `algorithm`.
pub(super) fn config_hash(config: &KubeletConfig, algorithm: HashAlgorithm) -> String {
    match algorithm {
        HashAlgorithm::V1 => sha256_hex(&config.effective_bytes()),
        HashAlgorithm::V2 => canonical_sha256(&disruption::normalized_document(config)),
    }
}

/// One V2 hash per class, over the normalized units of that class (named by
/// the class, so that two empty classes do not share a hash).
pub(super) fn class_hashes(config: &KubeletConfig) -> BTreeMap<Class, String> {
    disruption::class_documents(config)
        .into_iter()
        .map(|(class, units)| {
            let mut named = Map::new();
            named.insert(class.as_str().to_owned(), units);
            (class, canonical_sha256(&Value::Object(named)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    use crate::disruption::{classify, Class};

    use crate::test_support::valid;
    use crate::validate::RESERVABLE_RESOURCES;
    use crate::{
        GoDuration, KubeletConfig, API_VERSION, CONFIG_TRIAL_DURATION_FIELD,
        CRASH_LOOP_THRESHOLD_FIELD, EVICTION_SIGNALS, KIND,
    };

    use super::*;

    #[test]
    fn hash_ignores_key_order_formatting_and_syntax() {
        let yaml = "kind: KubeletConfiguration\nevictionHard:\n  nodefs.available: 10%\n  memory.available: 500Mi\nport: 10251\napiVersion: kubelet.config.k8s.io/v1beta1\nkubeReserved: {memory: 1Gi, cpu: 200m}\n";
        let json_compact = r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","port":10251,"kubeReserved":{"cpu":"200m","memory":"1Gi"},"evictionHard":{"memory.available":"500Mi","nodefs.available":"10%"}}"#;
        let json_pretty = "\n  {\n \"port\" : 10251,\n \"evictionHard\": {\"nodefs.available\": \"10%\",\n  \"memory.available\": \"500Mi\"},\n \"kubeReserved\": {\"memory\": \"1Gi\", \"cpu\": \"200m\"},\n \"kind\": \"KubeletConfiguration\", \"apiVersion\": \"kubelet.config.k8s.io/v1beta1\"}\n";
        let hashes: Vec<String> = [yaml, json_compact, json_pretty]
            .iter()
            .map(|doc| {
                KubeletConfig::parse_and_validate(doc.as_bytes())
                    .expect("valid")
                    .hash()
            })
            .collect();
        assert_eq!(hashes[0], hashes[1]);
        assert_eq!(hashes[1], hashes[2]);
        assert_eq!(hashes[0].len(), 64);
        assert!(hashes[0]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(HASH_ALGORITHM, "sha256-normalized-json-v2");
        let changed = yaml.replace("500Mi", "600Mi");
        assert_ne!(
            KubeletConfig::parse(changed.as_bytes())
                .expect("config")
                .hash(),
            hashes[0]
        );
    }

    /// Records written with V1 keep their meaning: these values must never
    /// change (computed before V2 existed).
    #[test]
    fn v1_hashes_are_pinned() {
        let config = valid("port: 10251\nsyncFrequency: 60s\nkubeReserved:\n  memory: 1Gi\n  cpu: 500m\nsystemReserved:\n  memory: 512Mi\nevictionHard:\n  memory.available: 200Mi\n  nodefs.available: 10%\ncpuManagerPolicy: static\nlogging:\n  format: json");
        assert_eq!(
            config.hash_with(HashAlgorithm::V1),
            "af247f7a77ff62aeb6cb37c3bd6f2175f427a3950f4ff962664a6932f63e1db0"
        );
        assert_eq!(
            KubeletConfig::defaults().hash_with(HashAlgorithm::V1),
            "5824117dc61162814b9f264e184f92902e3b5e5d6d346a645636bd5880b43bd4"
        );
        assert_eq!(
            config.hash_with(HashAlgorithm::V1),
            sha256_hex(&config.effective_bytes())
        );
        assert_ne!(config.hash(), config.hash_with(HashAlgorithm::V1));
        assert_eq!(config.hash(), config.hash_with(HashAlgorithm::V2));
    }

    #[test]
    fn algorithms_are_named() {
        assert_eq!(HashAlgorithm::V1.as_str(), "sha256-canonical-json-v1");
        assert_eq!(HashAlgorithm::V2.to_string(), "sha256-normalized-json-v2");
        assert_eq!(HashAlgorithm::CURRENT, HashAlgorithm::V2);
        assert_eq!(HASH_ALGORITHM, HashAlgorithm::CURRENT.as_str());
        for algorithm in HashAlgorithm::ALL {
            assert_eq!(HashAlgorithm::parse(algorithm.as_str()), Some(algorithm));
        }
        assert_eq!(HashAlgorithm::parse("sha256-canonical-json-v3"), None);
        assert_eq!(HashAlgorithm::parse(""), None);
    }

    #[test]
    fn v2_hashes_values_not_spellings() {
        let a = valid("kubeReserved: {memory: 1Gi}\nsyncFrequency: 60s\nevictionHard: {memory.available: 10%}");
        let b = valid("kubeReserved: {memory: 1024Mi}\nsyncFrequency: 1m0s\nevictionHard: {memory.available: 10.0%}");
        assert_ne!(
            a.hash_with(HashAlgorithm::V1),
            b.hash_with(HashAlgorithm::V1)
        );
        assert_eq!(a.hash(), b.hash());
        assert_eq!(a.class_hashes(), b.class_hashes());
        let hashes = KubeletConfig::defaults().class_hashes();
        assert_eq!(hashes.keys().copied().collect::<Vec<_>>(), Class::ALL);
        let distinct: BTreeSet<&String> = hashes.values().collect();
        assert_eq!(distinct.len(), 4, "classes are named in their hashes");
    }

    #[test]
    fn spelling_out_a_default_does_not_change_the_hash() {
        let implicit = valid("");
        let explicit = valid("port: 10250\nsyncFrequency: 1m0s\nevictionHard:\n  memory.available: 100Mi\n  nodefs.available: 10%\n  nodefs.inodesFree: 5%\n  imagefs.available: 15%");
        assert_eq!(implicit.hash(), explicit.hash());
        assert!(implicit.changed_fields(&explicit).is_empty());
    }

    #[test]
    fn effective_bytes_are_canonical_json() {
        let config = valid("port: 10251\nstaticPodPath: \"/etc/k8s \\\"manifests\\\"\\n\"");
        let bytes = config.effective_bytes();
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert!(text.starts_with("{\"address\":\"0.0.0.0\",\"apiVersion\":\"kubelet.config.k8s.io/v1beta1\",\"authentication\":{\"anonymous\":{\"enabled\":false},\"webhook\":{\"cacheTTL\":\"2m0s\",\"enabled\":true}},"), "{text}");
        assert!(
            text.contains("\"staticPodPath\":\"/etc/k8s \\\"manifests\\\"\\n\""),
            "{text}"
        );
        assert!(!text.contains('\n') && !text.contains(": ") && !text.contains(", "));
        let reparsed: Value = serde_json::from_slice(&bytes).expect("valid JSON");
        assert_eq!(reparsed, config.effective());
        let mut expected = String::new();
        write_canonical(&reparsed, &mut expected);
        assert_eq!(expected.into_bytes(), bytes);
    }

    fn arb_threshold() -> impl Strategy<Value = String> {
        prop_oneof![
            "[1-9][0-9]{0,3}(Ki|Mi|Gi|k|M|G)?",
            (0u32..=100).prop_map(|p| format!("{p}%")),
            (0u32..=1000).prop_map(|p| format!("{}.{}%", p / 10, p % 10)),
        ]
    }

    /// Reservation amounts, with several spellings of a few values so that
    /// equal sums and equal values are frequent.
    fn arb_amount() -> BoxedStrategy<String> {
        prop_oneof![
            "[1-9][0-9]{0,3}(m|Mi|Gi)?",
            prop::sample::select(EQUIVALENT_AMOUNTS.concat()).prop_map(str::to_owned),
        ]
        .boxed()
    }

    /// Groups of spellings of one value.
    const EQUIVALENT_AMOUNTS: &[&[&str]] = &[
        &["512Mi", "0.5Gi", "524288Ki"],
        &["1Gi", "1024Mi", "1.0Gi"],
        &["500m", "0.5", "0.50"],
        &["1", "1000m", "1e0"],
        &["0", "0m", "0Gi"],
        &["100Mi", "102400Ki"],
    ];

    /// Another spelling of the same value, if `text` is in
    /// [`EQUIVALENT_AMOUNTS`].
    fn respelled(text: &str, which: usize) -> Option<&'static str> {
        let group = EQUIVALENT_AMOUNTS.iter().find(|g| g.contains(&text))?;
        group.get(which % group.len()).copied()
    }

    #[derive(Debug, Clone)]
    enum Edit {
        /// The field takes the other config's value (or is removed).
        Replace(prop::sample::Index),
        /// Every amount and threshold respelled (same values).
        Respell(usize),
        /// One reservation moved from kubeReserved to systemReserved when
        /// the latter has none of that resource (same sum).
        Move(prop::sample::Index),
    }

    fn apply(edit: &Edit, doc: &mut Map<String, Value>, other: &Map<String, Value>) {
        match edit {
            Edit::Replace(index) => {
                let names: Vec<String> = doc
                    .keys()
                    .chain(other.keys())
                    .filter(|n| *n != "apiVersion" && *n != "kind")
                    .cloned()
                    .collect();
                if names.is_empty() {
                    return;
                }
                let name = index.get(&names).clone();
                match other.get(&name) {
                    Some(value) => doc.insert(name, value.clone()),
                    None => doc.remove(&name),
                };
            }
            Edit::Respell(which) => {
                for field in ["kubeReserved", "systemReserved", "evictionHard"] {
                    let Some(Value::Object(map)) = doc.get_mut(field) else {
                        continue;
                    };
                    for value in map.values_mut() {
                        if let Some(new) = value.as_str().and_then(|t| respelled(t, *which)) {
                            *value = Value::from(new);
                        }
                    }
                }
            }
            Edit::Move(index) => {
                let Some(Value::Object(kube)) = doc.get("kubeReserved") else {
                    return;
                };
                let resources: Vec<String> = kube.keys().cloned().collect();
                if resources.is_empty() {
                    return;
                }
                let resource = index.get(&resources).clone();
                let system = doc.get("systemReserved").and_then(Value::as_object);
                if system.is_some_and(|s| s.contains_key(&resource)) {
                    return;
                }
                let Some(amount) = doc
                    .get_mut("kubeReserved")
                    .and_then(Value::as_object_mut)
                    .and_then(|k| k.remove(&resource))
                else {
                    return;
                };
                let system = doc
                    .entry("systemReserved")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(system) = system.as_object_mut() {
                    system.insert(resource, amount);
                }
            }
        }
    }

    /// A config and a few edits of it.
    fn arb_pair() -> impl Strategy<Value = (Map<String, Value>, Map<String, Value>)> {
        let edit = prop_oneof![
            3 => any::<prop::sample::Index>().prop_map(Edit::Replace),
            1 => any::<usize>().prop_map(Edit::Respell),
            1 => any::<prop::sample::Index>().prop_map(Edit::Move),
        ];
        (
            arb_config(),
            arb_config(),
            prop::collection::vec(edit, 0..4),
        )
            .prop_map(|(old, other, edits)| {
                let mut new = old.clone();
                for edit in &edits {
                    apply(edit, &mut new, &other);
                }
                (old, new)
            })
    }

    fn parse_doc(doc: &Map<String, Value>) -> KubeletConfig {
        let bytes = serde_json::to_vec(doc).expect("serializes");
        KubeletConfig::parse(&bytes).expect("generated configs parse")
    }

    /// The classes whose class hashes differ.
    fn differing_classes(a: &KubeletConfig, b: &KubeletConfig) -> BTreeSet<Class> {
        let (ha, hb) = (a.class_hashes(), b.class_hashes());
        Class::ALL
            .into_iter()
            .filter(|c| ha.get(c) != hb.get(c))
            .collect()
    }

    #[test]
    fn the_pair_generator_makes_equal_and_unequal_pairs() {
        // The key property below is only worth something if both sides of
        // it occur, including V2-equal pairs whose V1 hashes differ.
        let mut runner = TestRunner::deterministic();
        let (mut same, mut respelled, mut changed) = (0, 0, 0);
        for _ in 0..512 {
            let (a, b) = arb_pair().new_tree(&mut runner).expect("tree").current();
            let (a, b) = (parse_doc(&a), parse_doc(&b));
            if !classify(&a, &b).is_empty() {
                changed += 1;
            } else if a.hash_with(HashAlgorithm::V1) != b.hash_with(HashAlgorithm::V1) {
                respelled += 1;
            } else {
                same += 1;
            }
        }
        assert!(
            same > 20 && respelled > 20 && changed > 100,
            "{same} {respelled} {changed}"
        );
    }

    fn arb_duration_text() -> impl Strategy<Value = String> {
        (0i64..10_000_000_000_000).prop_map(|n| GoDuration::from_nanos(n).to_string())
    }

    /// Random configs of the right types (not necessarily valid).
    fn arb_config() -> impl Strategy<Value = Map<String, Value>> {
        (
            (
                prop::option::of(1i64..=65535),
                prop::option::of(0i64..=65535),
                prop::option::of(arb_duration_text()),
                prop::option::of(prop::collection::btree_map(
                    prop::sample::select(EVICTION_SIGNALS.to_vec()),
                    arb_threshold(),
                    0..4,
                )),
                prop::option::of(prop::collection::btree_map(
                    prop::sample::select(RESERVABLE_RESOURCES.to_vec()),
                    arb_amount(),
                    0..4,
                )),
                prop::option::of("/[a-z]{1,8}(/[a-z]{1,8}){0,2}"),
            ),
            (
                prop::option::of(prop::collection::btree_map(
                    "[A-Z][a-zA-Z]{1,12}",
                    any::<bool>(),
                    0..3,
                )),
                prop::option::of((prop::sample::select(vec!["text", "json"]), 0u8..10)),
                prop::option::of(0.01f64..=1.0),
                prop::option::of(0i64..=10),
                prop::option::of(arb_duration_text()),
                prop::option::of(any::<bool>()),
            ),
            (
                prop::option::of(prop::collection::btree_map(
                    prop::sample::select(RESERVABLE_RESOURCES.to_vec()),
                    arb_amount(),
                    0..4,
                )),
                prop::option::of(prop::collection::vec(
                    prop::sample::select(vec![
                        "pods",
                        "kube-reserved",
                        "system-reserved",
                        "system-reserved-compressible",
                        "none",
                    ]),
                    0..3,
                )),
                prop::option::of(prop::sample::select(vec!["none", "static", ""])),
                prop::option::of(prop::sample::select(vec!["None", "Static", ""])),
            ),
        )
            .prop_map(
                |(
                    (port, read_only, sync, eviction, reserved, static_path),
                    (gates, logging, throttling, threshold, trial, fail_swap),
                    (system_reserved, enforce, cpu_policy, memory_policy),
                )| {
                    let mut doc = Map::new();
                    doc.insert("apiVersion".into(), API_VERSION.into());
                    doc.insert("kind".into(), KIND.into());
                    let mut put = |name: &str, value: Option<Value>| {
                        if let Some(value) = value {
                            doc.insert(name.to_owned(), value);
                        }
                    };
                    put("port", port.map(Value::from));
                    put("readOnlyPort", read_only.map(Value::from));
                    put("syncFrequency", sync.map(Value::from));
                    put("evictionHard", eviction.map(|m| serde_json::json!(m)));
                    put("kubeReserved", reserved.map(|m| serde_json::json!(m)));
                    put("staticPodPath", static_path.map(Value::from));
                    put("featureGates", gates.map(|m| serde_json::json!(m)));
                    put(
                        "logging",
                        logging.map(|(f, v)| serde_json::json!({"format": f, "verbosity": v})),
                    );
                    put("memoryThrottlingFactor", throttling.map(Value::from));
                    put(CRASH_LOOP_THRESHOLD_FIELD, threshold.map(Value::from));
                    put(CONFIG_TRIAL_DURATION_FIELD, trial.map(Value::from));
                    put("failSwapOn", fail_swap.map(Value::from));
                    put(
                        "systemReserved",
                        system_reserved.map(|m| serde_json::json!(m)),
                    );
                    put(
                        "enforceNodeAllocatable",
                        enforce.map(|l| serde_json::json!(l)),
                    );
                    put("cpuManagerPolicy", cpu_policy.map(Value::from));
                    put("memoryManagerPolicy", memory_policy.map(Value::from));
                    doc
                },
            )
    }

    proptest! {
        #[test]
        fn prop_effective_bytes_reparse_to_the_same_hash(doc in arb_config()) {
            let bytes = serde_json::to_vec(&Value::Object(doc)).expect("serializes");
            let config = KubeletConfig::parse(&bytes).expect("generated configs parse");
            let again = KubeletConfig::parse(&config.effective_bytes()).expect("effective parses");
            prop_assert_eq!(again.hash(), config.hash());
            prop_assert_eq!(again.effective(), config.effective());
            prop_assert_eq!(again.validate().is_ok(), config.validate().is_ok());
        }

        /// V2 hashes are equal exactly when classify finds no change, and
        /// the class hashes differ exactly for the classes it finds.
        #[test]
        fn prop_v2_hashes_agree_with_classify((old, new) in arb_pair()) {
            let (a, b) = (parse_doc(&old), parse_doc(&new));
            let change = classify(&a, &b);
            prop_assert_eq!(
                change.is_empty(),
                a.hash_with(HashAlgorithm::V2) == b.hash_with(HashAlgorithm::V2),
                "{:?}", change
            );
            let classes: BTreeSet<Class> = change.fields.iter().map(|f| f.class).collect();
            prop_assert_eq!(differing_classes(&a, &b), classes, "{:?}", change);
            prop_assert_eq!(&classify(&b, &a), &change);
            prop_assert!(classify(&a, &a).is_empty());
            if a.hash_with(HashAlgorithm::V1) == b.hash_with(HashAlgorithm::V1) {
                prop_assert!(change.is_empty());
            }
        }

        #[test]
        fn prop_yaml_and_json_of_one_document_hash_alike(doc in arb_config()) {
            let value = Value::Object(doc);
            let json = serde_json::to_vec_pretty(&value).expect("json");
            let yaml = serde_yaml_ng::to_string(&value).expect("yaml");
            let from_json = KubeletConfig::parse(&json).expect("json parses");
            let from_yaml = KubeletConfig::parse(yaml.as_bytes())
                .unwrap_or_else(|e| panic!("{yaml}: {e}"));
            prop_assert_eq!(from_json.hash(), from_yaml.hash());
            prop_assert_eq!(&from_json, &from_yaml);
            prop_assert!(from_json.changed_fields(&from_yaml).is_empty());
        }
    }
}
