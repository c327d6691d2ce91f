//! The CustomResourceDefinition generated from the types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

use super::KubeletConfigRollout;

/// The CRD could not be generated (a bug: the derived one always serializes).
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("cannot render the derived CRD: {0}")]
    Render(#[source] serde_json::Error),
    #[error("cannot rebuild the CRD: {0}")]
    Rebuild(#[source] serde_json::Error),
}

/// The CustomResourceDefinition, as `kubelet-pivot rollout crd` prints it and
/// `manifests/40-rollout-crd.yaml` holds it: the derived one without any `nullable`.
///
/// kube's derive marks optional fields, and int-or-strings that are not required,
/// `nullable`: the API server then stores an explicit `null`, which the controller reads
/// back as the field's value (a `null` batch is no count nor percentage). Without
/// `nullable`, the server drops a `null` or puts the field's default in its place, so
/// that what it stores is what the types decode.
pub fn crd() -> Result<CustomResourceDefinition, CrdError> {
    let mut value = serde_json::to_value(KubeletConfigRollout::crd()).map_err(CrdError::Render)?;
    if let Some(versions) = value
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        for version in versions {
            if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
                drop_nullable(schema);
            }
        }
    }
    serde_json::from_value(value).map_err(CrdError::Rebuild)
}

/// Removes every `nullable` keyword (a boolean; a property so named would be an object).
fn drop_nullable(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.get("nullable").is_some_and(Value::is_boolean) {
                map.remove("nullable");
            }
            map.values_mut().for_each(drop_nullable);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nullable),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MAX_COUNT, MAX_GENERATION, PERCENT_PATTERN};
    use super::*;

    /// Every schema node of the generated CRD, with its path.
    fn nodes(schema: &Value, path: String, out: &mut Vec<(String, Value)>) {
        out.push((path.clone(), schema.clone()));
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                nodes(v, format!("{path}.{k}"), out);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(sub) = schema.get(key).filter(|v| v.is_object()) {
                nodes(sub, format!("{path}[{key}]"), out);
            }
        }
    }

    fn crd_nodes() -> Vec<(String, Value)> {
        let crd = serde_json::to_value(crd().expect("the CRD")).expect("JSON");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut out = Vec::new();
        nodes(schema, String::new(), &mut out);
        out
    }

    #[test]
    fn the_crd_bounds_every_integer_and_has_no_nullable() {
        let all = crd_nodes();
        assert!(all.len() > 50, "{}", all.len());
        for (path, node) in &all {
            assert!(node.get("nullable").is_none(), "{path} is nullable");
            let int_or_string = node["x-kubernetes-int-or-string"] == true;
            if node["type"] == "integer" || int_or_string {
                let min = node["minimum"].as_f64();
                let max = node["maximum"].as_f64();
                assert!(
                    min.is_some() && max.is_some(),
                    "{path} is not bounded: {node}"
                );
                // Within what the types decode.
                assert!(min >= Some(0.0), "{path}");
                let limit = if path.ends_with("observedGeneration") {
                    MAX_GENERATION as f64
                } else {
                    f64::from(u32::MAX)
                };
                assert!(max <= Some(limit), "{path}");
            }
            if int_or_string {
                assert_eq!(node["pattern"], PERCENT_PATTERN, "{path}");
                assert_eq!(node["minimum"], 1.0, "{path}");
            }
        }
        let spec_counts: Vec<&str> = all
            .iter()
            .filter(|(p, n)| p.starts_with(".spec") && n["maximum"] == f64::from(MAX_COUNT))
            .map(|(p, _)| p.as_str())
            .collect();
        assert_eq!(
            spec_counts,
            [
                ".spec.batch",
                ".spec.canary",
                ".spec.maxFailures",
                ".spec.maxUnavailable.value"
            ]
        );
    }
}
