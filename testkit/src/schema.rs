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

use serde_json::{Map, Value};

use crate::errors::{FieldError, FieldErrorKind};

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

// ------------------------------------------------------------------------------------------
// The schema of a CustomResourceDefinition version
// ------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------
// Custom objects: pruning, defaulting, validation
// ------------------------------------------------------------------------------------------

/// Removes the fields `schema` does not specify from `value` (at `path`; `root` is the
/// object itself, whose apiVersion, kind and metadata are not the schema's), recording
/// their paths.
pub(crate) fn prune(
    value: &mut Value,
    schema: &Value,
    path: &str,
    root: bool,
    unknown: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => {
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
            let props = properties(schema);
            let extra = schema.get("additionalProperties");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let key_path = child(path, &key);
                if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(&key)) {
                    if let Some(child_value) = map.get_mut(&key) {
                        prune(child_value, sub, &key_path, false, unknown);
                    }
                } else if let Some(sub) = extra.filter(|e| e.is_object()) {
                    if let Some(child_value) = map.get_mut(&key) {
                        prune(child_value, sub, &key_path, false, unknown);
                    }
                } else if extra == Some(&Value::Bool(true)) || preserve {
                    // Kept as it is.
                } else {
                    map.remove(&key);
                    unknown.push(key_path);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item, sub, &format!("{path}[{i}]"), false, unknown);
                }
            }
        }
        _ => {}
    }
}

/// Structural defaulting: in every object, a property that is null without being nullable
/// is dropped, or set to its default if it has one; a missing property with a default gets
/// it; then the same inside properties, map values and list items.
pub(crate) fn default(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = properties(schema) {
                for (key, sub) in props {
                    let nullable = flag(sub, "nullable");
                    let default_value = sub.get("default");
                    match (map.get(key), default_value) {
                        (Some(Value::Null), Some(default)) if !nullable => {
                            map.insert(key.clone(), default.clone());
                        }
                        (Some(Value::Null), None) if !nullable => {
                            map.remove(key);
                        }
                        (None, Some(default)) => {
                            map.insert(key.clone(), default.clone());
                        }
                        _ => {}
                    }
                    if let Some(child_value) = map.get_mut(key) {
                        default(child_value, sub);
                    }
                }
            }
            if let Some(extra) = additional(schema) {
                let known = properties(schema);
                for (key, child_value) in map.iter_mut() {
                    if known.is_none_or(|p| !p.contains_key(key)) {
                        default(child_value, extra);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items").filter(|i| i.is_object()) {
                for item in items {
                    default(item, sub);
                }
            }
        }
        _ => {}
    }
}

/// Where errors are reported: the field path of an error is `field_prefix` joined with the
/// value's name (the defaults of a schema are checked with the `default` field as prefix).
struct Place<'a> {
    field_prefix: &'a str,
}

impl Place<'_> {
    fn field(&self, name: &str) -> String {
        match (self.field_prefix.is_empty(), name.is_empty()) {
            (true, _) => name.to_string(),
            (false, true) => self.field_prefix.to_string(),
            (false, false) => format!("{}.{name}", self.field_prefix),
        }
    }
}

/// Validates a custom object against its version's schema.
pub(crate) fn validate(value: &Value, schema: &Value, errors: &mut Vec<FieldError>) {
    validate_at(value, schema, &Place { field_prefix: "" }, "", errors);
}

/// kube-openapi's `NAME in body` (just `in body` for the value itself).
fn subject(name: &str) -> String {
    if name.is_empty() {
        "in body".to_string()
    } else {
        format!("{name} in body")
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn invalid(place: &Place<'_>, name: &str, value: &Value, detail: String) -> FieldError {
    FieldError {
        field: place.field(name),
        kind: FieldErrorKind::InvalidGo(go_value(value)),
        detail,
    }
}

fn validate_at(
    value: &Value,
    schema: &Value,
    place: &Place<'_>,
    name: &str,
    errors: &mut Vec<FieldError>,
) {
    if !schema.is_object() {
        return;
    }
    let types: Vec<&str> = if flag(schema, "x-kubernetes-int-or-string") {
        vec!["integer", "string"]
    } else {
        match type_of(schema) {
            "" => Vec::new(),
            ty => vec![ty],
        }
    };
    let actual = json_type(value);
    if value.is_null() {
        if !types.is_empty() && !flag(schema, "nullable") {
            errors.push(type_error(place, name, &types, "null"));
        }
        return;
    }
    let integral = value.as_f64().is_some_and(|f| f.fract() == 0.0);
    let type_ok = types.is_empty()
        || types.contains(&actual)
        || (actual == "integer" && types.contains(&"number"))
        || (actual == "number" && integral && types.contains(&"integer"));
    if !type_ok {
        errors.push(type_error(place, name, &types, actual));
    }
    if let Some(Value::Array(allowed)) = schema.get("enum") {
        if !allowed.iter().any(|candidate| same_value(candidate, value)) {
            let supported: Vec<String> = allowed
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            let supported: Vec<&str> = supported.iter().map(String::as_str).collect();
            errors.push(FieldError::not_supported(
                &place.field(name),
                value.clone(),
                &supported,
            ));
        }
    }
    match value {
        Value::String(text) => validate_string(text, value, schema, place, name, errors),
        Value::Number(_) => validate_number(value, schema, place, name, errors),
        Value::Array(items) => {
            let limits = ("maxItems", "minItems", "items");
            check_count(items.len(), schema, limits, place, name, errors);
            if let Some(sub) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    validate_at(item, sub, place, &format!("{name}[{i}]"), errors);
                }
            }
        }
        Value::Object(map) => {
            for key in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(key) {
                    errors.push(FieldError::required(&place.field(&child(name, key)), ""));
                }
            }
            let limits = ("maxProperties", "minProperties", "properties");
            check_count(map.len(), schema, limits, place, name, errors);
            let props = properties(schema);
            for (key, child_value) in map {
                let child_name = child(name, key);
                if let Some(sub) = props.and_then(|p| p.get(key)) {
                    validate_at(child_value, sub, place, &child_name, errors);
                } else if let Some(sub) = additional(schema) {
                    validate_at(child_value, sub, place, &child_name, errors);
                }
            }
        }
        _ => {}
    }
}

/// maxItems/minItems or maxProperties/minProperties (`limits`: the two keywords and what
/// the minimum's message counts).
fn check_count(
    count: usize,
    schema: &Value,
    (max_key, min_key, what): (&str, &str, &str),
    place: &Place<'_>,
    name: &str,
    errors: &mut Vec<FieldError>,
) {
    let count = count as u64;
    if let Some(max) = schema.get(max_key).and_then(Value::as_u64) {
        if count > max {
            errors.push(FieldError {
                field: place.field(name),
                kind: FieldErrorKind::TooMany(Value::from(count)),
                detail: format!("must have at most {max} items"),
            });
        }
    }
    if let Some(min) = schema.get(min_key).and_then(Value::as_u64) {
        if count < min {
            errors.push(invalid(
                place,
                name,
                &Value::from(count),
                format!("{} should have at least {min} {what}", subject(name)),
            ));
        }
    }
}

fn type_error(place: &Place<'_>, name: &str, types: &[&str], actual: &str) -> FieldError {
    FieldError {
        field: place.field(name),
        kind: FieldErrorKind::TypeInvalid(Value::String(actual.to_string())),
        detail: format!(
            "{} must be of type {}: {actual:?}",
            subject(name),
            types.join(",")
        ),
    }
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn validate_string(
    text: &str,
    value: &Value,
    schema: &Value,
    place: &Place<'_>,
    name: &str,
    errors: &mut Vec<FieldError>,
) {
    let chars = text.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
        if chars > max {
            errors.push(FieldError {
                field: place.field(name),
                kind: FieldErrorKind::TooLong,
                detail: format!("may not be longer than {max}"),
            });
        }
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
        if chars < min {
            errors.push(invalid(
                place,
                name,
                value,
                format!("{} should be at least {min} chars long", subject(name)),
            ));
        }
    }
    let format = schema.get("format").and_then(Value::as_str).unwrap_or("");
    if matches!(format, "date-time" | "datetime") && !is_date_time(text) {
        errors.push(FieldError {
            field: place.field(name),
            kind: FieldErrorKind::TypeInvalid(value.clone()),
            detail: format!("{} must be of type date-time: {text:?}", subject(name)),
        });
    }
}

fn validate_number(
    value: &Value,
    schema: &Value,
    place: &Place<'_>,
    name: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(number) = value.as_f64() else {
        return;
    };
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    if let Some(max) = bound("maximum") {
        let exclusive = flag(schema, "exclusiveMaximum");
        if exclusive && number >= max {
            errors.push(invalid(
                place,
                name,
                value,
                format!("{} should be less than {}", subject(name), go_float(max)),
            ));
        } else if !exclusive && number > max {
            errors.push(invalid(
                place,
                name,
                value,
                format!(
                    "{} should be less than or equal to {}",
                    subject(name),
                    go_float(max)
                ),
            ));
        }
    }
    if let Some(min) = bound("minimum") {
        let exclusive = flag(schema, "exclusiveMinimum");
        if exclusive && number <= min {
            errors.push(invalid(
                place,
                name,
                value,
                format!("{} should be greater than {}", subject(name), go_float(min)),
            ));
        } else if !exclusive && number < min {
            errors.push(invalid(
                place,
                name,
                value,
                format!(
                    "{} should be greater than or equal to {}",
                    subject(name),
                    go_float(min)
                ),
            ));
        }
    }
    if let Some(factor) = bound("multipleOf").filter(|f| *f > 0.0) {
        let ratio = number / factor;
        if (ratio - ratio.round()).abs() > 1e-9 {
            errors.push(invalid(
                place,
                name,
                value,
                format!(
                    "{} should be a multiple of {}",
                    subject(name),
                    go_float(factor)
                ),
            ));
        }
    }
}

/// strfmt's date-time: RFC 3339 with optional fractional seconds, `T` or `t` or a space
/// between date and time, `Z` or an offset.
fn is_date_time(text: &str) -> bool {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        bytes
            .get(range)
            .is_some_and(|b| b.iter().all(u8::is_ascii_digit))
    };
    if bytes.len() < 20
        || !digits(0..4)
        || bytes[4] != b'-'
        || !digits(5..7)
        || bytes[7] != b'-'
        || !digits(8..10)
        || !matches!(bytes[10], b'T' | b't' | b' ')
        || !digits(11..13)
        || bytes[13] != b':'
        || !digits(14..16)
        || bytes[16] != b':'
        || !digits(17..19)
    {
        return false;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let n = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &fraction[n..];
    }
    match rest.as_bytes() {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|b| b.is_ascii_digit()),
        _ => false,
    }
}

/// A float64 as Go's `%v` prints it (`%g` with the shortest representation: exponent form
/// below 1e-4 and from 1e21... and from 1e+06 on, as strconv's 'g' with precision -1 does).
pub(crate) fn go_float(value: f64) -> String {
    if value == 0.0 {
        return "0".to_string();
    }
    if !value.is_finite() {
        return if value.is_nan() {
            "NaN".to_string()
        } else if value > 0.0 {
            "+Inf".to_string()
        } else {
            "-Inf".to_string()
        };
    }
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..6).contains(&exponent) {
        let text = format!("{value}");
        return text;
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

/// A decoded JSON value as Go's `%#v`/`%v` shows it in a field error (strings quoted,
/// numbers plain, maps and slices as Go literals).
pub(crate) fn go_value(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => go_float(n.as_f64().unwrap_or(0.0)),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) | Value::Object(_) => go_literal(value),
    }
}

fn go_literal(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => go_float(n.as_f64().unwrap_or(0.0)),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => format!(
            "[]interface {{}}{{{}}}",
            items.iter().map(go_literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let entries: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k:?}:{}", go_literal(&map[k])))
                .collect();
            format!("map[string]interface {{}}{{{}}}", entries.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
