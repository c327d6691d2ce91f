//! `openAPIV3Schema`s of CustomResourceDefinitions, as apiextensions-apiserver treats them:
//!
//! - [`check_definition`]: what a CRD's schema must be (ValidateCustomResourceDefinitionOpenAPISchema,
//!   specStandardValidatorV3, ValidateStructural and ValidateDefaults, the parts that matter
//!   for hand-written and kube-rs-generated schemas), with the real field paths
//!   (`spec.versions[0].schema.openAPIV3Schema.properties[spec].type`) and texts;
//! - [`prune`]: structural pruning of unknown fields (honouring
//!   `x-kubernetes-preserve-unknown-fields` and `x-kubernetes-embedded-resource`), returning
//!   the pruned paths (`spec.foo`, `spec.list[0].bar`) for field validation;
//! - [`default`]: structural defaulting (nulls of non-nullable fields dropped, then `default`s
//!   of missing properties applied, nested);
//! - [`validate`]: kube-openapi's validation of a value, converted to field errors as
//!   `kubeOpenAPIResultToFieldErrors` does (type, nullable, enum, required, minimum/maximum
//!   and their exclusive forms, multipleOf, minLength/maxLength, minItems/maxItems,
//!   minProperties/maxProperties, items, properties, additionalProperties,
//!   x-kubernetes-int-or-string, `format: date-time`).
//!
//! `pattern` is not checked (testkit has no regular expression engine), nor are the other
//! string formats, `x-kubernetes-validations` (CEL), list types or the completeness rule of
//! structural schemas.
//!
//! Layout: `definition` (the schema a definition must have), `prune` (pruning and defaulting),
//! `validate` (a value against a schema) and `go` (values as Go prints them).

mod definition;
mod go;
mod prune;
mod validate;

pub(crate) use definition::check_definition;
pub(crate) use prune::{default, prune};
pub(crate) use validate::validate;

use serde_json::{Map, Value};

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn type_of(schema: &Value) -> &str {
    schema.get("type").and_then(Value::as_str).unwrap_or("")
}

fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// `additionalProperties` as a schema (`true` is a schema allowing anything).
fn additional(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|v| v.is_object())
}

/// The schemas of a junctor (`allOf`, `anyOf`, `oneOf`), none if absent.
fn list<'a>(map: &'a Map<String, Value>, key: &str) -> &'a [Value] {
    map.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use super::go::go_float;
    use crate::errors::FieldError;

    fn errors_of(value: Value, schema: Value) -> Vec<String> {
        let mut errors = Vec::new();
        validate(&value, &schema, &mut errors);
        errors.iter().map(FieldError::to_string).collect()
    }

    #[test]
    fn go_formats_floats_like_percent_v() {
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(100000.0), "100000");
        assert_eq!(go_float(1000000.0), "1e+06");
        assert_eq!(go_float(4294967295.0), "4.294967295e+09");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
    }

    #[test]
    fn values_are_checked_with_the_real_messages() {
        let schema = json!({"type": "object", "required": ["spec"], "properties": {"spec": {
            "type": "object",
            "required": ["mode"],
            "properties": {
                "canary": {"type": "integer", "minimum": 0, "maximum": 100},
                "mode": {"type": "string", "enum": ["Fast", "Slow"]},
                "name": {"type": "string", "maxLength": 3, "minLength": 2},
                "list": {"type": "array", "maxItems": 1, "items": {"type": "string"}},
                "at": {"type": "string", "format": "date-time"},
                "surge": {"x-kubernetes-int-or-string": true},
                "ratio": {"type": "number", "exclusiveMinimum": true, "minimum": 0},
            },
        }}});
        assert_eq!(
            errors_of(json!({}), schema.clone()),
            ["spec: Required value"]
        );
        let errors = errors_of(
            json!({"spec": {"canary": "x", "mode": "Medium", "name": "abcd", "list": ["a", 1],
                "at": "yesterday", "surge": true, "ratio": 0}}),
            schema.clone(),
        );
        assert_eq!(
            errors,
            [
                "spec.at: Invalid value: \"yesterday\": spec.at in body must be of type date-time: \"yesterday\"",
                "spec.canary: Invalid value: \"string\": spec.canary in body must be of type integer: \"string\"",
                "spec.list: Too many: 2: must have at most 1 items",
                "spec.list[1]: Invalid value: \"integer\": spec.list[1] in body must be of type string: \"integer\"",
                "spec.mode: Unsupported value: \"Medium\": supported values: \"Fast\", \"Slow\"",
                "spec.name: Too long: may not be longer than 3",
                "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
                "spec.surge: Invalid value: \"boolean\": spec.surge in body must be of type integer,string: \"boolean\"",
            ]
        );
        let errors = errors_of(json!({"spec": {"mode": "Fast", "canary": -1}}), schema);
        assert_eq!(
            errors,
            ["spec.canary: Invalid value: -1: spec.canary in body should be greater than or equal to 0"]
        );
    }

    #[test]
    fn pruning_and_defaulting_follow_the_schema() {
        let schema = json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "default": 3},
                "b": {"type": "string", "nullable": true},
                "c": {"type": "string"},
                "nested": {"type": "object", "default": {}, "properties": {
                    "d": {"type": "boolean", "default": true}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "map": {"type": "object", "additionalProperties": {"type": "object",
                    "properties": {"e": {"type": "string"}}}},
            },
        }}});
        let mut value = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"},
            "spec": {"b": null, "c": null, "zz": 1, "free": {"any": {"thing": 1}},
                "map": {"k": {"e": "x", "f": 2}}}, "extra": true});
        let mut unknown = Vec::new();
        prune(&mut value, &schema, "", true, &mut unknown);
        assert_eq!(unknown, ["extra", "spec.map.k.f", "spec.zz"]);
        default(&mut value, &schema);
        assert_eq!(
            value["spec"],
            json!({"a": 3, "b": null, "nested": {"d": true}, "free": {"any": {"thing": 1}},
                "map": {"k": {"e": "x"}}})
        );
    }

    #[test]
    fn definitions_must_be_structural() {
        let mut errors = Vec::new();
        let schema = json!({"type": "object", "properties": {
            "spec": {"properties": {"x": {"type": "array"}}},
            "status": {"type": "object", "additionalProperties": {"type": "string"},
                "properties": {"y": {"type": "string"}}},
            "bad": {"type": "integer", "default": "seven"},
        }});
        check_definition(
            &schema,
            "spec.versions[0].schema.openAPIV3Schema",
            true,
            &mut errors,
        );
        let texts: Vec<String> = errors.iter().map(FieldError::to_string).collect();
        let p = "spec.versions[0].schema.openAPIV3Schema";
        assert_eq!(
            texts,
            [
                format!("{p}.properties[status].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"),
                format!("{p}.properties[spec].properties[x].items: Required value: must be specified"),
                format!("{p}.properties[spec].type: Required value: must not be empty for specified object fields"),
            ]
        );
        let mut errors = Vec::new();
        let schema = json!({"type": "object", "properties": {
            "bad": {"type": "integer", "default": "seven"}}});
        check_definition(&schema, p, false, &mut errors);
        let texts: Vec<String> = errors.iter().map(FieldError::to_string).collect();
        assert_eq!(
            texts,
            [format!("{p}.properties[bad].default: Invalid value: \"string\": in body must be of type integer: \"string\"")]
        );
    }
}
