//! What a definition's `openAPIV3Schema` must be: ValidateCustomResourceDefinitionOpenAPISchema,
//! specStandardValidatorV3, ValidateStructural and ValidateDefaults.

use serde_json::{Map, Value};

use crate::errors::{FieldError, FieldErrorKind};

use super::prune::default;
use super::validate::{validate_at, Place};
use super::{additional, flag, list, properties, type_of};

const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// The JSONSchemaProps fields allowed at the root when the status subresource is enabled
/// (their Go names, as the message lists them, and their JSON names).
const ROOT_FIELDS_WITH_STATUS: [(&str, &str); 22] = [
    ("Description", "description"),
    ("Type", "type"),
    ("Format", "format"),
    ("Title", "title"),
    ("Maximum", "maximum"),
    ("ExclusiveMaximum", "exclusiveMaximum"),
    ("Minimum", "minimum"),
    ("ExclusiveMinimum", "exclusiveMinimum"),
    ("MaxLength", "maxLength"),
    ("MinLength", "minLength"),
    ("Pattern", "pattern"),
    ("MaxItems", "maxItems"),
    ("MinItems", "minItems"),
    ("UniqueItems", "uniqueItems"),
    ("MultipleOf", "multipleOf"),
    ("Required", "required"),
    ("Items", "items"),
    ("Properties", "properties"),
    ("ExternalDocs", "externalDocs"),
    ("Example", "example"),
    (
        "XPreserveUnknownFields",
        "x-kubernetes-preserve-unknown-fields",
    ),
    ("XValidations", "x-kubernetes-validations"),
];

/// Keywords JSONSchemaProps has but CRDs do not support.
const UNSUPPORTED: [(&str, &str); 6] = [
    ("id", "id is not supported"),
    ("additionalItems", "additionalItems is not supported"),
    ("patternProperties", "patternProperties is not supported"),
    ("definitions", "definitions is not supported"),
    ("dependencies", "dependencies is not supported"),
    ("$ref", "$ref is not supported"),
];

/// Checks a version's `openAPIV3Schema` at `path` (`spec.versions[0].schema.openAPIV3Schema`).
pub(crate) fn check_definition(
    schema: &Value,
    path: &str,
    status_enabled: bool,
    errors: &mut Vec<FieldError>,
) {
    if !schema.is_object() {
        errors.push(FieldError::invalid(
            path,
            schema.clone(),
            "must be a JSON schema object",
        ));
        return;
    }
    if status_enabled {
        check_root_with_status(schema, path, errors);
    }
    if flag(schema, "nullable") {
        errors.push(FieldError::forbidden(
            &format!("{path}.nullable"),
            "nullable cannot be true at the root",
        ));
    }
    let before = errors.len();
    check_generic(schema, path, true, errors);
    let mut structural = Vec::new();
    check_structural(schema, path, Level::Root, &mut structural);
    structural.sort_by_key(|err| err.to_string());
    let structural_ok = structural.is_empty();
    errors.extend(structural);
    if structural_ok && errors.len() == before {
        check_defaults(schema, path, errors);
    }
}

fn check_root_with_status(schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(map) = schema.as_object() else {
        return;
    };
    if let Some(ty) = map.get("type").and_then(Value::as_str) {
        if ty != "object" {
            errors.push(FieldError::invalid(
                &format!("{path}.type"),
                Value::String(ty.to_string()),
                "only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
            ));
            return;
        }
    }
    let allowed = |key: &str| ROOT_FIELDS_WITH_STATUS.iter().any(|(_, json)| *json == key);
    if map.keys().any(|key| !allowed(key)) {
        let names: Vec<&str> = ROOT_FIELDS_WITH_STATUS.iter().map(|(go, _)| *go).collect();
        errors.push(FieldError {
            field: path.to_string(),
            kind: FieldErrorKind::InvalidGo("apiextensions.JSONSchemaProps{...}".to_string()),
            detail: format!(
                "only [{}] fields are allowed at the root of the schema if the status subresource is enabled",
                names.join(" ")
            ),
        });
    }
}

/// ValidateCustomResourceDefinitionOpenAPISchema with specStandardValidatorV3.
fn check_generic(schema: &Value, path: &str, root: bool, errors: &mut Vec<FieldError>) {
    let Some(map) = schema.as_object() else {
        return;
    };
    if let Some(ty) = map.get("type").and_then(Value::as_str) {
        if !ty.is_empty() && !TYPES.contains(&ty) {
            errors.push(FieldError::not_supported(
                &format!("{path}.type"),
                Value::String(ty.to_string()),
                &TYPES,
            ));
        }
        if ty == "null" {
            errors.push(FieldError::forbidden(
                &format!("{path}.type"),
                "type cannot be set to null, use nullable as an alternative",
            ));
        }
    }
    for (key, message) in UNSUPPORTED {
        if map.get(key).is_some_and(|v| !v.is_null()) {
            errors.push(FieldError::forbidden(&format!("{path}.{key}"), message));
        }
    }
    if map.get("items").is_some_and(Value::is_array) {
        errors.push(FieldError::forbidden(
            &format!("{path}.items"),
            "items must be a schema object and not an array",
        ));
    }
    if flag(schema, "uniqueItems") {
        errors.push(FieldError::forbidden(
            &format!("{path}.uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(extra) = map.get("additionalProperties") {
        let has_properties = properties(schema).is_some_and(|p| !p.is_empty());
        if has_properties && (extra == &Value::Bool(false) || extra.is_object()) {
            errors.push(FieldError::forbidden(
                &format!("{path}.additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        check_generic(
            extra,
            &format!("{path}.additionalProperties"),
            false,
            errors,
        );
    }
    if let Some(props) = properties(schema) {
        for (key, sub) in props {
            let sub_path = format!("{path}.properties[{key}]");
            let meta = root && matches!(key.as_str(), "metadata" | "kind" | "apiVersion");
            if meta && sub.get("default").is_some() {
                errors.push(FieldError::forbidden(
                    &format!("{sub_path}.default"),
                    &format!("must not be set in top-level {key}"),
                ));
            }
            check_generic(sub, &sub_path, false, errors);
        }
    }
    if let Some(not) = map.get("not") {
        check_generic(not, &format!("{path}.not"), false, errors);
    }
    for junctor in ["allOf", "oneOf", "anyOf"] {
        for (i, sub) in list(map, junctor).iter().enumerate() {
            check_generic(sub, &format!("{path}.{junctor}[{i}]"), false, errors);
        }
    }
    if let Some(items) = map.get("items").filter(|v| v.is_object()) {
        check_generic(items, &format!("{path}.items"), false, errors);
    }
    if map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        errors.push(FieldError::invalid(
            &format!("{path}.x-kubernetes-preserve-unknown-fields"),
            Value::Bool(false),
            "must be true or undefined",
        ));
    }
    if let Some(list_type) = map.get("x-kubernetes-list-type").and_then(Value::as_str) {
        let ty = type_of(schema);
        if ty != "array" {
            let field = format!("{path}.type");
            let detail = "must be array if x-kubernetes-list-type is specified";
            errors.push(if ty.is_empty() {
                FieldError::required(&field, detail)
            } else {
                FieldError::invalid(&field, Value::String(ty.to_string()), detail)
            });
        }
        if !["atomic", "set", "map"].contains(&list_type) {
            errors.push(FieldError::not_supported(
                &format!("{path}.x-kubernetes-list-type"),
                Value::String(list_type.to_string()),
                &["atomic", "set", "map"],
            ));
        }
    }
    if let Some(map_type) = map.get("x-kubernetes-map-type").and_then(Value::as_str) {
        if !["atomic", "granular"].contains(&map_type) {
            errors.push(FieldError::not_supported(
                &format!("{path}.x-kubernetes-map-type"),
                Value::String(map_type.to_string()),
                &["atomic", "granular"],
            ));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// The int-or-string exception of value validations: `anyOf: [{type: integer}, {type: string}]`.
fn is_int_or_string_any_of(any_of: Option<&Value>) -> bool {
    let Some(Value::Array(items)) = any_of else {
        return false;
    };
    let types: Vec<Option<&Map<String, Value>>> = items.iter().map(Value::as_object).collect();
    matches!(types.as_slice(), [Some(a), Some(b)]
        if a.len() == 1 && b.len() == 1
            && a.get("type") == Some(&Value::from("integer"))
            && b.get("type") == Some(&Value::from("string")))
}

/// ValidateStructural's invariants.
fn check_structural(schema: &Value, path: &str, level: Level, errors: &mut Vec<FieldError>) {
    let Some(map) = schema.as_object() else {
        return;
    };
    let ty = type_of(schema);
    if ty == "array" && !map.get("items").is_some_and(Value::is_object) {
        errors.push(FieldError::required(
            &format!("{path}.items"),
            "must be specified",
        ));
    }
    if let Some(items) = map.get("items").filter(|v| v.is_object()) {
        check_structural(items, &format!("{path}.items"), Level::Item, errors);
    }
    if let Some(props) = properties(schema) {
        for (key, sub) in props {
            check_structural(
                sub,
                &format!("{path}.properties[{key}]"),
                Level::Field,
                errors,
            );
        }
    }
    if let Some(extra) = additional(schema) {
        if level == Level::Root {
            errors.push(FieldError::forbidden(
                &format!("{path}.additionalProperties"),
                "must not be used at the root",
            ));
        }
        check_structural(
            extra,
            &format!("{path}.additionalProperties"),
            Level::Field,
            errors,
        );
    }
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(schema, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errors.push(FieldError::invalid(
            &format!("{path}.x-kubernetes-preserve-unknown-fields"),
            Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errors.push(FieldError::invalid(
            &format!("{path}.x-kubernetes-embedded-resource"),
            Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let skip_any_of = is_int_or_string_any_of(map.get("anyOf"));
    let skip_first_all_of = map
        .get("allOf")
        .and_then(Value::as_array)
        .and_then(|all| all.first())
        .is_some_and(|first| is_int_or_string_any_of(first.get("anyOf")));
    check_value_validations(map, path, skip_any_of, skip_first_all_of, errors);
    if embedded && ty != "object" {
        let field = format!("{path}.type");
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        errors.push(if ty.is_empty() {
            FieldError::required(&field, detail)
        } else {
            FieldError::invalid(&field, Value::String(ty.to_string()), detail)
        });
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errors.push(FieldError::required(&format!("{path}.type"), detail));
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        errors.push(FieldError::invalid(
            &format!("{path}.type"),
            Value::String(ty.to_string()),
            "must be object at the root",
        ));
    }
    let check_metadata = level == Level::Root || embedded;
    if let (true, Some(props)) = (check_metadata, properties(schema)) {
        for (key, want) in [
            ("kind", "string"),
            ("apiVersion", "string"),
            ("metadata", "object"),
        ] {
            if let Some(sub) = props.get(key) {
                let found = type_of(sub);
                if found != want {
                    errors.push(FieldError::invalid(
                        &format!("{path}.properties[{key}].type"),
                        Value::String(found.to_string()),
                        &format!("must be {want}"),
                    ));
                }
            }
        }
        if let (Level::Root, Some(metadata)) = (level, props.get("metadata")) {
            let only_names = metadata.as_object().is_some_and(|m| {
                m.iter().all(|(k, v)| match k.as_str() {
                    "type" | "default" => true,
                    "properties" => v.as_object().is_some_and(|p| {
                        p.keys()
                            .all(|name| name == "name" || name == "generateName")
                    }),
                    _ => false,
                })
            });
            if !only_names {
                errors.push(FieldError::forbidden(
                    &format!("{path}.properties[metadata]"),
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
        }
    }
    if embedded && !preserve && properties(schema).is_none_or(Map::is_empty) {
        errors.push(FieldError::required(
            &format!("{path}.properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

fn check_value_validations(
    map: &Map<String, Value>,
    path: &str,
    skip_any_of: bool,
    skip_first_all_of: bool,
    errors: &mut Vec<FieldError>,
) {
    for junctor in ["anyOf", "allOf", "oneOf"] {
        if junctor == "anyOf" && skip_any_of {
            continue;
        }
        for (i, sub) in list(map, junctor).iter().enumerate() {
            let skip = junctor == "allOf" && i == 0 && skip_first_all_of;
            check_nested(sub, &format!("{path}.{junctor}[{i}]"), skip, errors);
        }
    }
    if let Some(not) = map.get("not") {
        check_nested(not, &format!("{path}.not"), false, errors);
    }
}

/// validateNestedValueValidation: what a schema under a logic junctor may not say.
fn check_nested(schema: &Value, path: &str, skip_any_of: bool, errors: &mut Vec<FieldError>) {
    let Some(map) = schema.as_object() else {
        return;
    };
    check_value_validations(map, path, skip_any_of, false, errors);
    if let Some(items) = map.get("items") {
        check_nested(items, &format!("{path}.items"), false, errors);
    }
    if let Some(props) = properties(schema) {
        for (key, sub) in props {
            check_nested(sub, &format!("{path}.properties[{key}]"), false, errors);
        }
        if props.contains_key("metadata") {
            errors.push(FieldError::forbidden(
                &format!("{path}.properties[metadata]"),
                "must not be specified in a nested context",
            ));
        }
    }
    let forbidden: [(&str, &str); 10] = [
        ("type", "must be empty to be structural"),
        ("additionalProperties", "must be undefined to be structural"),
        ("default", "must be undefined to be structural"),
        ("title", "must be empty to be structural"),
        ("description", "must be empty to be structural"),
        ("nullable", "must be false to be structural"),
        (
            "x-kubernetes-preserve-unknown-fields",
            "must be false to be structural",
        ),
        (
            "x-kubernetes-embedded-resource",
            "must be false to be structural",
        ),
        (
            "x-kubernetes-int-or-string",
            "must be false to be structural",
        ),
        (
            "x-kubernetes-list-type",
            "must be undefined to be structural",
        ),
    ];
    for (key, detail) in forbidden {
        let set = match map.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::String(text)) => !text.is_empty(),
            Some(_) => true,
        };
        if set {
            errors.push(FieldError::forbidden(&format!("{path}.{key}"), detail));
        }
    }
}

/// ValidateDefaults: every `default` is valid against its schema (defaults inside it applied
/// first).
fn check_defaults(schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(map) = schema.as_object() else {
        return;
    };
    if let Some(value) = map.get("default") {
        let mut value = value.clone();
        default(&mut value, schema);
        validate_at(
            &value,
            schema,
            &Place {
                field_prefix: &format!("{path}.default"),
            },
            "",
            errors,
        );
    }
    if let Some(props) = properties(schema) {
        for (key, sub) in props {
            check_defaults(sub, &format!("{path}.properties[{key}]"), errors);
        }
    }
    if let Some(items) = map.get("items") {
        check_defaults(items, &format!("{path}.items"), errors);
    }
    if let Some(extra) = additional(schema) {
        check_defaults(extra, &format!("{path}.additionalProperties"), errors);
    }
}
