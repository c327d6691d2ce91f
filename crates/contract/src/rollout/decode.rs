//! Reading a rollout as the API server stored it.

use serde_json::Value;

use super::KubeletConfigRollout;

/// Why a stored object cannot be read as a [`KubeletConfigRollout`]: the field (`spec.batch`)
/// and what is wrong with its value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct DecodeError {
    pub field: String,
    pub reason: String,
}

/// Reads a rollout as the API server answered it (an object the CRD of its day accepted;
/// the current CRD refuses what this cannot read, an older one or another server may not).
pub fn decode(value: Value) -> Result<KubeletConfigRollout, DecodeError> {
    use crate::node_config::bounded;
    // Bounded: a path can hold map keys, and serde quotes the offending string.
    serde_path_to_error::deserialize(value).map_err(|err| DecodeError {
        field: bounded(&err.path().to_string(), 256),
        reason: bounded(&err.inner().to_string(), 512),
    })
}

#[cfg(test)]
mod tests {
    use super::super::IntOrPercent;
    use super::*;
    use serde_json::json;

    fn rollout(spec: Value) -> Value {
        json!({
            "apiVersion": "kubelet-pivot.io/v1alpha1",
            "kind": "KubeletConfigRollout",
            "metadata": {"name": "r1"},
            "spec": spec,
        })
    }

    fn config() -> Value {
        json!({"namespace": "kubelet-config", "name": "cfg-b"})
    }

    #[test]
    fn a_decode_error_names_the_field_and_the_value() {
        let cases = [
            (
                json!({"config": config(), "batch": null}),
                "spec.batch",
                "null",
            ),
            (
                json!({"config": config(), "canary": 4294967296u64}),
                "spec.canary",
                "4294967296",
            ),
            (json!({"config": config(), "batch": -1}), "spec.batch", "-1"),
            (
                json!({"config": config(), "batch": 2.5}),
                "spec.batch",
                "2.5",
            ),
            (
                json!({"config": config(), "maxUnavailable": {"value": true}}),
                "spec.maxUnavailable.value",
                "boolean",
            ),
            (json!({"config": {"name": "x"}}), "spec.config", "namespace"),
            (
                json!({"config": config(), "maxFailures": -3}),
                "spec.maxFailures",
                "-3",
            ),
        ];
        for (spec, field, shown) in cases {
            let err = decode(rollout(spec.clone())).expect_err(&spec.to_string());
            assert_eq!(err.field, field, "{spec}: {err}");
            assert!(err.reason.contains(shown), "{spec}: {err}");
        }
        let err = decode(rollout(json!({"config": config(), "batch": null}))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.batch: invalid type: null, expected a count from 0 to 4294967295 or a percentage like \"10%\""
        );
    }

    #[test]
    fn counts_and_percentages_decode() {
        let r = decode(rollout(json!({
            "config": config(), "batch": 3, "maxUnavailable": {"value": "25%"}, "canary": 4.0,
        })));
        // A u32 field takes no float; an int-or-string takes a whole one.
        assert_eq!(r.unwrap_err().field, "spec.canary");
        let r = decode(rollout(json!({
            "config": config(), "batch": 3.0, "maxUnavailable": {"value": "25%"},
        })))
        .expect("decodes");
        assert_eq!(r.spec.batch, IntOrPercent::Int(3));
        assert_eq!(
            r.spec.max_unavailable.value,
            IntOrPercent::Percent("25%".into())
        );
        assert_eq!(r.spec.canary, 1);
        // Serialized as the API takes it: a bare number or a string.
        assert_eq!(
            serde_json::to_value(&r.spec.batch).unwrap(),
            json!(3),
            "{:?}",
            r.spec.batch
        );
    }
}
