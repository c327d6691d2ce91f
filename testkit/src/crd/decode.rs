//! The fields of a CustomResourceDefinition the strict decoder knows, and the type checks of
//! its body.

use serde_json::Value;

use crate::decode::{go_type, Shape, OBJECT_META};

static JSON_SCHEMA_PROPS: Shape = Shape::Fields(&[
    ("id", Shape::Any),
    ("$schema", Shape::Any),
    ("$ref", Shape::Any),
    ("description", Shape::Any),
    ("type", Shape::Any),
    ("format", Shape::Any),
    ("title", Shape::Any),
    ("default", Shape::Any),
    ("maximum", Shape::Any),
    ("exclusiveMaximum", Shape::Any),
    ("minimum", Shape::Any),
    ("exclusiveMinimum", Shape::Any),
    ("maxLength", Shape::Any),
    ("minLength", Shape::Any),
    ("pattern", Shape::Any),
    ("maxItems", Shape::Any),
    ("minItems", Shape::Any),
    ("uniqueItems", Shape::Any),
    ("multipleOf", Shape::Any),
    ("enum", Shape::Any),
    ("maxProperties", Shape::Any),
    ("minProperties", Shape::Any),
    ("required", Shape::Any),
    ("items", Shape::Nested(&JSON_SCHEMA_PROPS)),
    ("allOf", Shape::ListOf(&JSON_SCHEMA_PROPS)),
    ("oneOf", Shape::ListOf(&JSON_SCHEMA_PROPS)),
    ("anyOf", Shape::ListOf(&JSON_SCHEMA_PROPS)),
    ("not", Shape::Nested(&JSON_SCHEMA_PROPS)),
    ("properties", Shape::MapOf(&JSON_SCHEMA_PROPS)),
    ("additionalProperties", Shape::Nested(&JSON_SCHEMA_PROPS)),
    ("patternProperties", Shape::MapOf(&JSON_SCHEMA_PROPS)),
    ("dependencies", Shape::Any),
    ("additionalItems", Shape::Nested(&JSON_SCHEMA_PROPS)),
    ("definitions", Shape::MapOf(&JSON_SCHEMA_PROPS)),
    ("externalDocs", Shape::Any),
    ("example", Shape::Any),
    ("nullable", Shape::Any),
    ("x-kubernetes-preserve-unknown-fields", Shape::Any),
    ("x-kubernetes-embedded-resource", Shape::Any),
    ("x-kubernetes-int-or-string", Shape::Any),
    ("x-kubernetes-list-map-keys", Shape::Any),
    ("x-kubernetes-list-type", Shape::Any),
    ("x-kubernetes-map-type", Shape::Any),
    ("x-kubernetes-validations", Shape::Any),
]);

static NAMES: Shape = Shape::Fields(&[
    ("plural", Shape::Any),
    ("singular", Shape::Any),
    ("shortNames", Shape::Any),
    ("kind", Shape::Any),
    ("listKind", Shape::Any),
    ("categories", Shape::Any),
]);

static VALIDATION: Shape = Shape::Fields(&[("openAPIV3Schema", Shape::Nested(&JSON_SCHEMA_PROPS))]);

static SUBRESOURCES: Shape = Shape::Fields(&[("status", Shape::Any), ("scale", Shape::Any)]);

static VERSION: Shape = Shape::Fields(&[
    ("name", Shape::Any),
    ("served", Shape::Any),
    ("storage", Shape::Any),
    ("deprecated", Shape::Any),
    ("deprecationWarning", Shape::Any),
    ("schema", Shape::Nested(&VALIDATION)),
    ("subresources", Shape::Nested(&SUBRESOURCES)),
    ("additionalPrinterColumns", Shape::Any),
    ("selectableFields", Shape::Any),
]);

static SPEC: Shape = Shape::Fields(&[
    ("group", Shape::Any),
    ("names", Shape::Nested(&NAMES)),
    ("scope", Shape::Any),
    ("versions", Shape::ListOf(&VERSION)),
    ("conversion", Shape::Any),
    ("preserveUnknownFields", Shape::Any),
]);

static STATUS: Shape = Shape::Fields(&[
    ("conditions", Shape::Any),
    ("acceptedNames", Shape::Nested(&NAMES)),
    ("storedVersions", Shape::Any),
]);

pub(crate) static CRD: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("spec", Shape::Nested(&SPEC)),
    ("status", Shape::Nested(&STATUS)),
]);

/// The JSON types of a JSONSchemaProps' scalar fields.
const SCHEMA_FIELD_TYPES: [(&str, &str); 16] = [
    ("type", "string"),
    ("format", "string"),
    ("description", "string"),
    ("title", "string"),
    ("pattern", "string"),
    ("nullable", "bool"),
    ("uniqueItems", "bool"),
    ("x-kubernetes-preserve-unknown-fields", "bool"),
    ("x-kubernetes-int-or-string", "bool"),
    ("x-kubernetes-embedded-resource", "bool"),
    ("maxLength", "int64"),
    ("minLength", "int64"),
    ("maxItems", "int64"),
    ("minItems", "int64"),
    ("maximum", "float64"),
    ("minimum", "float64"),
];

fn unmarshal(value: &Value, field: &str, want: &str) -> Result<(), String> {
    Err(format!(
        "json: cannot unmarshal {} into Go struct field {field} of type {want}",
        go_type(value)
    ))
}

fn expect(value: Option<&Value>, field: &str, want: &str) -> Result<(), String> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let ok = match want {
        "string" => value.is_string(),
        "bool" => value.is_boolean(),
        "int64" => value.is_i64() || value.is_u64(),
        "float64" => value.is_number(),
        "[]string" => value
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string)),
        _ => value.is_object(),
    };
    if ok {
        Ok(())
    } else {
        unmarshal(value, field, want)
    }
}

fn check_schema_types(schema: &Value, path: &str) -> Result<(), String> {
    let Some(map) = schema.as_object() else {
        return unmarshal(schema, path, "v1.JSONSchemaProps");
    };
    for (key, want) in SCHEMA_FIELD_TYPES {
        expect(map.get(key), &format!("JSONSchemaProps.{path}.{key}"), want)?;
    }
    expect(
        map.get("required"),
        &format!("JSONSchemaProps.{path}.required"),
        "[]string",
    )?;
    if let Some(props) = map.get("properties").filter(|v| !v.is_null()) {
        let Some(props) = props.as_object() else {
            return unmarshal(
                props,
                &format!("JSONSchemaProps.{path}.properties"),
                "map[string]v1.JSONSchemaProps",
            );
        };
        for sub in props.values() {
            check_schema_types(sub, &format!("{path}.properties"))?;
        }
    }
    for key in ["items", "not"] {
        if let Some(sub) = map.get(key).filter(|v| v.is_object()) {
            check_schema_types(sub, &format!("{path}.{key}"))?;
        }
    }
    if let Some(extra) = map.get("additionalProperties").filter(|v| v.is_object()) {
        check_schema_types(extra, &format!("{path}.additionalProperties"))?;
    }
    Ok(())
}

/// The Go decoder's type errors for a CustomResourceDefinition body.
pub(crate) fn check_types(obj: &Value) -> Result<(), String> {
    let spec = match obj.get("spec") {
        None | Some(Value::Null) => return Ok(()),
        Some(spec @ Value::Object(_)) => spec,
        Some(other) => {
            return unmarshal(
                other,
                "CustomResourceDefinition.spec",
                "v1.CustomResourceDefinitionSpec",
            )
        }
    };
    let spec_field = |name: &str| format!("CustomResourceDefinitionSpec.spec.{name}");
    expect(spec.get("group"), &spec_field("group"), "string")?;
    expect(spec.get("scope"), &spec_field("scope"), "string")?;
    expect(
        spec.get("preserveUnknownFields"),
        &spec_field("preserveUnknownFields"),
        "bool",
    )?;
    expect(spec.get("names"), &spec_field("names"), "object")?;
    for name in ["plural", "singular", "kind", "listKind"] {
        expect(
            spec.pointer(&format!("/names/{name}")),
            &format!("CustomResourceDefinitionNames.spec.names.{name}"),
            "string",
        )?;
    }
    for name in ["shortNames", "categories"] {
        expect(
            spec.pointer(&format!("/names/{name}")),
            &format!("CustomResourceDefinitionNames.spec.names.{name}"),
            "[]string",
        )?;
    }
    match spec.get("versions") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for version in items {
                if !version.is_object() {
                    return unmarshal(
                        version,
                        &spec_field("versions"),
                        "v1.CustomResourceDefinitionVersion",
                    );
                }
                let field =
                    |name: &str| format!("CustomResourceDefinitionVersion.spec.versions.{name}");
                expect(version.get("name"), &field("name"), "string")?;
                for name in ["served", "storage", "deprecated"] {
                    expect(version.get(name), &field(name), "bool")?;
                }
                expect(
                    version.get("subresources"),
                    &field("subresources"),
                    "object",
                )?;
                expect(version.get("schema"), &field("schema"), "object")?;
                if let Some(schema) = version
                    .pointer("/schema/openAPIV3Schema")
                    .filter(|v| !v.is_null())
                {
                    check_schema_types(schema, "spec.versions.schema.openAPIV3Schema")?;
                }
            }
        }
        Some(other) => {
            return unmarshal(
                other,
                &spec_field("versions"),
                "[]v1.CustomResourceDefinitionVersion",
            )
        }
    }
    Ok(())
}
