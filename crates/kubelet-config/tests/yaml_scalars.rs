//! Scalars the kubelet's YAML 1.1 decoder (sigs.k8s.io/yaml, go-yaml v2)
//! and YAML 1.2 read differently, through the public
//! `KubeletConfig::parse_and_validate`: quoted forms are strings in both;
//! an unquoted YAML 1.1 boolean or number is kept with the kubelet's meaning
//! (and a warning) in a field kubelet-pivot types as such, and refused with
//! what to write anywhere else.

use kp_kubelet_config::{ConfigError, FieldValue, KubeletConfig, YamlWarning};

fn doc(body: &str) -> Vec<u8> {
    format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}\n")
        .into_bytes()
}

#[track_caller]
fn accepted(body: &str) -> KubeletConfig {
    KubeletConfig::parse_and_validate(&doc(body)).unwrap_or_else(|e| panic!("{body:?}: {e}"))
}

#[track_caller]
fn refused(body: &str) -> String {
    match KubeletConfig::parse_and_validate(&doc(body)) {
        Err(e) => e.to_string(),
        Ok(c) => panic!("{body:?} accepted: {:?}", c.warnings()),
    }
}

/// Every YAML 1.1 boolean go-yaml v2 resolves that YAML 1.2 does not.
const YAML11_BOOLEANS: &[(&str, bool)] = &[
    ("y", true),
    ("Y", true),
    ("yes", true),
    ("Yes", true),
    ("YES", true),
    ("on", true),
    ("On", true),
    ("ON", true),
    ("n", false),
    ("N", false),
    ("no", false),
    ("No", false),
    ("NO", false),
    ("off", false),
    ("Off", false),
    ("OFF", false),
];

fn taint(value: &str) -> String {
    format!("registerWithTaints:\n- key: dedicated\n  value: {value}\n  effect: NoSchedule")
}

#[test]
fn quoted_forms_are_strings() {
    for (word, _) in YAML11_BOOLEANS {
        for quoted in [format!("\"{word}\""), format!("'{word}'")] {
            let config = accepted(&format!("staticPodPath: {quoted}\nclusterDNS: [{quoted}]"));
            assert_eq!(
                config.field("staticPodPath"),
                Some(&FieldValue::Str((*word).to_owned())),
                "{quoted}"
            );
            assert!(config.warnings().is_empty(), "{quoted}");
            // A taint value (a section kubelet-pivot passes through).
            let config = accepted(&taint(&quoted));
            assert_eq!(
                config.document()["registerWithTaints"][0]["value"],
                serde_json::json!(word),
                "{quoted}"
            );
        }
    }
    for quoted in ["\"0755\"", "'1_000'", "\"0X1F\"", "'08'"] {
        let config = accepted(&format!("staticPodPath: {quoted}"));
        assert!(config.warnings().is_empty(), "{quoted}");
    }
}

#[test]
fn unquoted_yaml11_booleans_in_boolean_fields_take_the_kubelets_meaning() {
    for (word, meaning) in YAML11_BOOLEANS {
        let config = accepted(&format!(
            "serializeImagePulls: {word}\nenableDebuggingHandlers: {word}"
        ));
        assert_eq!(
            config.field("serializeImagePulls"),
            Some(&FieldValue::Bool(*meaning)),
            "{word}"
        );
        assert_eq!(
            config.effective()["serializeImagePulls"],
            serde_json::json!(meaning),
            "the kubelet gets the boolean: {word}"
        );
        let paths: Vec<&str> = config.warnings().iter().map(|w| w.path.as_str()).collect();
        assert_eq!(
            paths,
            ["serializeImagePulls", "enableDebuggingHandlers"],
            "{word}"
        );
        // A feature gate is a boolean too (parsed only: which gates exist
        // is the gate model's business).
        let config = KubeletConfig::parse(&doc(&format!("featureGates:\n  SomeGate: {word}")))
            .unwrap_or_else(|e| panic!("{word}: {e}"));
        assert_eq!(
            config.document()["featureGates"]["SomeGate"],
            serde_json::json!(meaning)
        );
        assert_eq!(config.warnings()[0].path, "featureGates.SomeGate");
    }
    let config = accepted("serializeImagePulls: no");
    assert_eq!(
        config.warnings(),
        [YamlWarning {
            path: "serializeImagePulls".into(),
            written: "no".into(),
            read_as: "false".into(),
        }]
    );
    assert_eq!(
        config.warnings()[0].to_string(),
        "serializeImagePulls: the unquoted no is read as false, as the kubelet reads it; \
         write false (YAML 1.1 reads no as false; YAML 1.2 as the string \"no\")"
    );
}

#[test]
fn unquoted_yaml11_booleans_in_string_fields_are_refused_with_the_fix() {
    // A modelled string field: the kubelet refuses a boolean there too.
    let message = refused("staticPodPath: on");
    assert!(
        message.contains("\"staticPodPath\" must be a string")
            && message.contains("the unquoted on is the boolean true")
            && message.contains("quote it: \"on\""),
        "{message}"
    );
    // A field kubelet-pivot passes through: refused, saying both fixes.
    let message = refused(&taint("on"));
    assert!(
        message.contains(
            "registerWithTaints[0].value: the unquoted on is the boolean true to the kubelet \
             (YAML 1.1) and the string \"on\" to YAML 1.2"
        ) && message.contains("write what you mean: true for the boolean, or \"on\" quoted"),
        "{message}"
    );
    assert!(matches!(
        KubeletConfig::parse(&doc(&taint("y"))),
        Err(ConfigError::Parse { .. })
    ));
}

#[test]
fn other_yaml_1_1_and_1_2_divergences() {
    // Octal, underscores and upper-case prefixes: numbers to the kubelet.
    for (written, number) in [("0110", 72), ("1_10", 110), ("0X6E", 110), ("08", 8)] {
        let config = accepted(&format!("maxPods: {written}"));
        assert_eq!(
            config.field("maxPods"),
            Some(&FieldValue::Int(number)),
            "{written}"
        );
        assert_eq!(config.warnings().len(), 1, "{written}");
    }
    let message = refused("staticPodPath: 0755");
    assert!(message.contains("quote it: \"0755\""), "{message}");
    // Read alike by both: no warning.
    for body in [
        "maxPods: 0x6E",
        "maxPods: 0o156",
        "maxPods: 110",
        "maxPods: ~",
        "maxPods: null",
        "failSwapOn: True",
        "memoryThrottlingFactor: 0.9",
        "memoryThrottlingFactor: 9e-1",
        // go-yaml v2 does not resolve base 60: a string to both.
        "staticPodPath: 1:30",
        // Timestamps stay strings in the kubelet's untyped decode.
        "staticPodPath: 2001-12-14",
    ] {
        assert!(accepted(body).warnings().is_empty(), "{body}");
    }
    // Infinity and NaN: the kubelet's JSON step refuses them, and so does
    // kubelet-pivot.
    for body in [
        "memoryThrottlingFactor: .inf",
        "memoryThrottlingFactor: .NaN",
    ] {
        refused(body);
    }
    // A key the kubelet reads as a boolean (`on:` is "true" to it) names an
    // unknown field to both.
    let message = refused("on: 1");
    assert!(message.contains("unknown field \"on\""), "{message}");
}
