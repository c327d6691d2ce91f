//! The effective config's canonical JSON (keys sorted at every level, no
//! whitespace) and its versioned SHA-256 hash.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Version of the effective-config hash algorithm, stored beside every hash.
pub const HASH_ALGORITHM: &str = "sha256-canonical-json-v1";

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
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::config::kubeconfig::test_support::valid;
    use crate::config::kubeconfig::validate::RESERVABLE_RESOURCES;
    use crate::config::kubeconfig::{
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
        assert_eq!(HASH_ALGORITHM, "sha256-canonical-json-v1");
        let changed = yaml.replace("500Mi", "600Mi");
        assert_ne!(
            KubeletConfig::parse(changed.as_bytes())
                .expect("config")
                .hash(),
            hashes[0]
        );
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
                    "[1-9][0-9]{0,3}(m|Mi|Gi)?",
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
        )
            .prop_map(
                |(
                    (port, read_only, sync, eviction, reserved, static_path),
                    (gates, logging, throttling, threshold, trial, fail_swap),
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
