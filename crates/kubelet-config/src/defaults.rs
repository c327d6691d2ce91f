//! v1beta1 defaulting: fills in the defaults of unset modelled fields to
//! make the effective config.

use serde_json::{Map, Value};

use super::duration::GoDuration;
use super::schema::{Def, Field, Kind};

impl Def {
    fn value(self, original: &Map<String, Value>) -> Value {
        match self {
            Def::Bool(b) => Value::Bool(b),
            Def::Int(i) => Value::from(i),
            Def::Str(s) => Value::from(s),
            Def::Strs(list) => Value::Array(list.iter().map(|s| Value::from(*s)).collect()),
            Def::Pairs(pairs) => Value::Object(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
                    .collect(),
            ),
            Def::NodeStatusReportFrequency => match original.get("nodeStatusUpdateFrequency") {
                Some(given @ Value::String(text))
                    if GoDuration::parse(text).is_ok_and(|d| d != GoDuration::ZERO) =>
                {
                    given.clone()
                }
                _ => Value::from("5m0s"),
            },
            Def::SerializeImagePulls => {
                let parallel = original
                    .get("maxParallelImagePulls")
                    .and_then(Value::as_i64);
                Value::Bool(parallel.is_none_or(|n| n < 2))
            }
        }
    }
}

fn is_zero(value: &Value, kind: Kind) -> bool {
    match kind {
        Kind::Int32 | Kind::Int64 => value.as_i64() == Some(0),
        Kind::Float => value.as_f64() == Some(0.0),
        Kind::Str => value.as_str() == Some(""),
        Kind::Bool => value.as_bool() == Some(false),
        Kind::Duration => value
            .as_str()
            .is_some_and(|s| GoDuration::parse(s) == Ok(GoDuration::ZERO)),
        _ => false,
    }
}

/// Fills in defaults for unset modelled fields and drops their nulls;
/// unmodelled fields are left alone. `original` is the top-level document as
/// given (computed defaults look at it).
pub(super) fn apply_defaults(
    map: &mut Map<String, Value>,
    fields: &[Field],
    original: &Map<String, Value>,
) {
    for field in fields {
        if let Kind::Any = field.kind {
            continue;
        }
        if let Kind::Object(nested) = field.kind {
            let (mut inner, given) = match map.remove(field.name) {
                Some(Value::Object(inner)) => (inner, true),
                _ => (Map::new(), false),
            };
            apply_defaults(&mut inner, nested, original);
            if given || !inner.is_empty() {
                map.insert(field.name.to_owned(), Value::Object(inner));
            }
            continue;
        }
        let unset = match map.get(field.name) {
            None | Some(Value::Null) => true,
            Some(value) => field.zero_is_unset && is_zero(value, field.kind),
        };
        if unset {
            map.remove(field.name);
            if let Some(default) = field.default {
                map.insert(field.name.to_owned(), default.value(original));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::test_support::{valid, HEADER};
    use crate::{KubeletConfig, API_VERSION, KIND};

    use super::*;

    #[test]
    fn defaults_are_valid_and_complete() {
        let defaults = KubeletConfig::defaults();
        defaults.validate().expect("defaults are valid");
        assert_eq!(defaults.crash_loop_threshold(), 10);
        assert_eq!(defaults.config_trial_duration(), Duration::from_secs(600));
        let effective = defaults.effective();
        for (name, value) in [
            ("apiVersion", serde_json::json!(API_VERSION)),
            ("kind", serde_json::json!(KIND)),
            ("port", serde_json::json!(10250)),
            ("address", serde_json::json!("0.0.0.0")),
            ("healthzPort", serde_json::json!(10248)),
            ("syncFrequency", serde_json::json!("1m0s")),
            (
                "streamingConnectionIdleTimeout",
                serde_json::json!("4h0m0s"),
            ),
            ("nodeStatusReportFrequency", serde_json::json!("5m0s")),
            ("kubeAPIQPS", serde_json::json!(50)),
            ("maxPods", serde_json::json!(110)),
            ("podPidsLimit", serde_json::json!(-1)),
            ("oomScoreAdj", serde_json::json!(-999)),
            ("cgroupDriver", serde_json::json!("cgroupfs")),
            ("cpuManagerPolicy", serde_json::json!("none")),
            ("memoryManagerPolicy", serde_json::json!("None")),
            ("topologyManagerPolicy", serde_json::json!("none")),
            ("topologyManagerScope", serde_json::json!("container")),
            ("serializeImagePulls", serde_json::json!(true)),
            ("enforceNodeAllocatable", serde_json::json!(["pods"])),
            (
                "evictionHard",
                serde_json::json!({"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%"}),
            ),
            (
                "authentication",
                serde_json::json!({"anonymous": {"enabled": false}, "webhook": {"enabled": true, "cacheTTL": "2m0s"}}),
            ),
            (
                "authorization",
                serde_json::json!({"mode": "Webhook", "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"}}),
            ),
        ] {
            assert_eq!(effective.get(name), Some(&value), "{name}");
        }
        for absent in [
            "readOnlyPort",
            "memorySwap",
            "evictionSoft",
            "logging",
            "crashLoopThreshold",
        ] {
            assert!(effective.get(absent).is_none(), "{absent}");
        }
        let minimal = KubeletConfig::parse(HEADER.as_bytes()).expect("header only");
        assert_eq!(minimal.hash(), defaults.hash());
        assert_eq!(minimal, defaults);
    }

    #[test]
    fn zero_values_of_go_value_fields_get_defaults() {
        let config = valid("port: 0\naddress: \"\"\nsyncFrequency: 0s\nmaxPods: 0\ncgroupDriver: \"\"\nimageMinimumGCAge: \"0\"\nauthorization:\n  mode: \"\"");
        let effective = config.effective();
        assert_eq!(effective["port"], 10250);
        assert_eq!(effective["address"], "0.0.0.0");
        assert_eq!(effective["syncFrequency"], "1m0s");
        assert_eq!(effective["maxPods"], 110);
        assert_eq!(effective["cgroupDriver"], "cgroupfs");
        assert_eq!(effective["imageMinimumGCAge"], "2m0s");
        assert_eq!(effective["authorization"]["mode"], "Webhook");
    }

    #[test]
    fn zero_values_of_go_pointer_fields_are_kept() {
        let config = valid("healthzPort: 0\nregistryPullQPS: 0\nimageGCLowThresholdPercent: 0\ncgroupsPerQOS: false\nenforceNodeAllocatable: []\nevictionHard: {}\nauthentication:\n  webhook:\n    enabled: false");
        let effective = config.effective();
        assert_eq!(effective["healthzPort"], 0);
        assert_eq!(effective["registryPullQPS"], 0);
        assert_eq!(effective["imageGCLowThresholdPercent"], 0);
        assert_eq!(effective["cgroupsPerQOS"], false);
        assert_eq!(effective["enforceNodeAllocatable"], serde_json::json!([]));
        assert_eq!(effective["evictionHard"], serde_json::json!({}));
        assert_eq!(effective["authentication"]["webhook"]["enabled"], false);
        assert_eq!(effective["authentication"]["webhook"]["cacheTTL"], "2m0s");
    }

    #[test]
    fn nulls_mean_unset() {
        let config =
            valid("port: null\nshutdownGracePeriod: ~\nauthentication: null\nlogging: null");
        let effective = config.effective();
        assert_eq!(effective["port"], 10250);
        assert!(effective.get("shutdownGracePeriod").is_none());
        assert_eq!(effective["authentication"]["anonymous"]["enabled"], false);
        // Unmodelled: untouched, the kubelet decides.
        assert_eq!(effective["logging"], Value::Null);
        assert_eq!(config.field("port"), None);
    }

    #[test]
    fn computed_defaults_follow_the_kubelet() {
        let config = valid("nodeStatusUpdateFrequency: 20s");
        assert_eq!(config.effective()["nodeStatusReportFrequency"], "20s");
        let config = valid("nodeStatusUpdateFrequency: 20s\nnodeStatusReportFrequency: 1m");
        assert_eq!(config.effective()["nodeStatusReportFrequency"], "1m");
        let config = valid("maxParallelImagePulls: 3");
        assert_eq!(config.effective()["serializeImagePulls"], false);
        let config = valid("maxParallelImagePulls: 1");
        assert_eq!(config.effective()["serializeImagePulls"], true);
    }
}
