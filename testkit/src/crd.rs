//! CustomResourceDefinitions (apiextensions.k8s.io/v1) and the serving of their resources.
//!
//! A definition is validated as pkg/apis/apiextensions/validation does for v1 (name
//! `<plural>.<group>`, group, scope, names, versions with exactly one storage version, a
//! structural `openAPIV3Schema` for every version (module `schema`), conversion strategy,
//! immutable group and plural, immutable scope and kind once established, stored versions,
//! API approval of protected groups), defaulted (singular, listKind, conversion `None`) and
//! given `status.storedVersions`. The controllers' work is done at once, after the write:
//! the naming and establishing controllers set `acceptedNames` and the `NamesAccepted` and
//! `Established` conditions (a second write, as on a real server, so the create answer has
//! neither), and a delete marks the definition (deletionTimestamp, the
//! `customresourcecleanup.apiextensions.k8s.io` finalizer, `Terminating`), deletes every
//! object of the resource and removes it.
//!
//! While a definition is established, its resource is served at
//! `/apis/GROUP/VERSION/[namespaces/NS/]PLURAL[/NAME[/status]]` for every served version
//! (module `custom` has the objects' strategy) and listed by discovery. Deviations: names
//! conflicts between definitions are not detected, webhook conversion is accepted but not
//! performed (every version is served as stored, with its apiVersion), watches of a
//! resource end when its definition changes kind, scope, names or storage version or is
//! deleted, without the DELETED events of the cleanup.

use std::sync::Mutex;

use serde_json::{json, Map, Value};

use crate::clock::now_rfc3339;
use crate::decode::{go_type, with_type_meta, Shape, OBJECT_META};
use crate::discovery::{group_versions_entry, VERBS};
use crate::errors::{ApiError, FieldError, FieldErrorKind};
use crate::resource::{ApiGroup, Resource, Target};
use crate::store::{copy_field, is_deleting, EventType, Opts, Outcome, State};
use crate::validation::{dns1123_subdomain, regex_error};
use crate::watch::History;
use crate::{schema, store, ApiServer};

/// The finalizer a delete adds; removed once the objects are gone.
const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
/// The annotation protected groups (`*.k8s.io`, `*.kubernetes.io`) must carry.
const APPROVAL_ANNOTATION: &str = "api-approved.kubernetes.io";

// ------------------------------------------------------------------------------------------
// Served types: interned, so that `Resource` and `ApiGroup` stay `Copy`
// ------------------------------------------------------------------------------------------

/// The identity of a served custom resource: what a definition says about it. A change of
/// any of these moves the stored objects to the new identity.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct CustomType {
    pub(crate) group: &'static str,
    pub(crate) plural: &'static str,
    pub(crate) singular: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) list_kind: &'static str,
    pub(crate) namespaced: bool,
    /// The storage version (objects are stored with its apiVersion).
    pub(crate) storage: &'static GroupVersion,
}

/// A version of a group (`kubelet-pivot.io/v1alpha1`).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupVersion {
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
    pub(crate) api_version: &'static str,
}

static TYPES: Mutex<Vec<&'static CustomType>> = Mutex::new(Vec::new());
static VERSIONS: Mutex<Vec<&'static GroupVersion>> = Mutex::new(Vec::new());
static STRINGS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// Interned strings: the few names of the definitions tests create, kept for the process.
fn leak(text: &str) -> &'static str {
    let mut strings = STRINGS.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some(found) = strings.iter().find(|s| **s == text) {
        return found;
    }
    let leaked: &'static str = Box::leak(text.to_string().into_boxed_str());
    strings.push(leaked);
    leaked
}

fn intern<T: PartialEq + 'static>(pool: &Mutex<Vec<&'static T>>, value: T) -> &'static T {
    let mut pool = pool.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some(found) = pool.iter().find(|known| ***known == value) {
        return found;
    }
    let leaked: &'static T = Box::leak(Box::new(value));
    pool.push(leaked);
    leaked
}

pub(crate) fn group_version(group: &str, version: &str) -> &'static GroupVersion {
    intern(
        &VERSIONS,
        GroupVersion {
            group: leak(group),
            version: leak(version),
            api_version: leak(&format!("{group}/{version}")),
        },
    )
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn versions(crd: &Value) -> &[Value] {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn storage_version(crd: &Value) -> Option<&str> {
    versions(crd)
        .iter()
        .find(|v| v["storage"] == Value::Bool(true))
        .and_then(|v| v["name"].as_str())
}

/// The served identity of a (valid, stored) definition.
pub(crate) fn custom_type(crd: &Value) -> Option<&'static CustomType> {
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    let kind = text(crd, "/spec/names/kind");
    let storage = storage_version(crd)?;
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return None;
    }
    Some(intern(
        &TYPES,
        CustomType {
            group: leak(group),
            plural: leak(plural),
            singular: leak(text(crd, "/spec/names/singular")),
            kind: leak(kind),
            list_kind: leak(text(crd, "/spec/names/listKind")),
            namespaced: text(crd, "/spec/scope") == "Namespaced",
            storage: group_version(group, storage),
        },
    ))
}

fn condition_true(crd: &Value, kind: &str) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

// ------------------------------------------------------------------------------------------
// Decoding
// ------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------
// Strategy and validation
// ------------------------------------------------------------------------------------------

/// The v1 defaults (SetDefaults_CustomResourceDefinitionSpec).
fn set_defaults(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if names
            .get("singular")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if !kind.is_empty()
            && names
                .get("listKind")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    if spec.get("conversion").is_none_or(Value::is_null) {
        spec.insert("conversion".into(), json!({"strategy": "None"}));
    }
}

/// PrepareForCreate / PrepareForUpdate (and the status strategy's).
pub(crate) fn prepare(target: &Target, obj: &mut Value, old: Option<&Value>) {
    set_defaults(obj);
    let storage = storage_version(obj).map(str::to_string);
    match old {
        None => {
            obj["status"] = json!({
                "acceptedNames": {"kind": "", "plural": ""},
                "storedVersions": storage.into_iter().collect::<Vec<_>>(),
            });
            obj["metadata"]["generation"] = json!(1);
        }
        Some(old) => {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            if target.is_status() {
                copy_field(obj, old, "spec");
                for field in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    match old["metadata"].get(field) {
                        Some(value) => obj["metadata"][field] = value.clone(),
                        None => {
                            if let Some(meta) = obj["metadata"].as_object_mut() {
                                meta.remove(field);
                            }
                        }
                    }
                }
                obj["metadata"]["generation"] = json!(generation);
            } else {
                copy_field(obj, old, "status");
                let changed = obj["spec"] != old["spec"];
                obj["metadata"]["generation"] = json!(generation + i64::from(changed));
                if let Some(storage) = storage {
                    let stored = obj
                        .pointer_mut("/status/storedVersions")
                        .and_then(Value::as_array_mut);
                    match stored {
                        Some(list) if !list.iter().any(|v| v == storage.as_str()) => {
                            list.push(json!(storage))
                        }
                        Some(_) => {}
                        None => obj["status"]["storedVersions"] = json!([storage]),
                    }
                }
            }
        }
    }
}

/// IsDNS1035Label.
fn dns1035_label(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if text.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let bytes = text.as_bytes();
    let valid = !bytes.is_empty()
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[bytes.len() - 1] != b'-';
    if !valid {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// Go's `%#v` of a slice of versions, shortened: the message's value is not the point.
fn versions_shown() -> FieldErrorKind {
    FieldErrorKind::InvalidGo("[]apiextensions.CustomResourceDefinitionVersion{...}".to_string())
}

fn validate_names(names: &Value, path: &str, errors: &mut Vec<FieldError>) {
    for field in ["plural", "singular"] {
        let value = names[field].as_str().unwrap_or("");
        let errs = dns1035_label(value);
        if !value.is_empty() && !errs.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{path}.{field}"),
                json!(value),
                &errs.join(","),
            ));
        }
    }
    for field in ["kind", "listKind"] {
        let value = names[field].as_str().unwrap_or("");
        let errs = dns1035_label(&value.to_lowercase());
        if !value.is_empty() && !errs.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{path}.{field}"),
                json!(value),
                &format!(
                    "may have mixed case, but should otherwise match: {}",
                    errs.join(",")
                ),
            ));
        }
    }
    for list in ["shortNames", "categories"] {
        for (i, item) in names[list].as_array().into_iter().flatten().enumerate() {
            let value = item.as_str().unwrap_or("");
            let errs = dns1035_label(value);
            if !errs.is_empty() {
                errors.push(FieldError::invalid(
                    &format!("{path}.{list}[{i}]"),
                    json!(value),
                    &errs.join(","),
                ));
            }
        }
    }
    let kind = names["kind"].as_str().unwrap_or("");
    if !kind.is_empty() && names["listKind"].as_str() == Some(kind) {
        errors.push(FieldError::invalid(
            &format!("{path}.listKind"),
            json!(kind),
            "kind and listKind may not be the same",
        ));
    }
}

fn validate_versions(spec: &Value, require_schemas: bool, errors: &mut Vec<FieldError>) {
    let versions = spec["versions"].as_array().map_or(&[][..], Vec::as_slice);
    if require_schemas {
        for (i, version) in versions.iter().enumerate() {
            if version
                .pointer("/schema/openAPIV3Schema")
                .is_none_or(Value::is_null)
            {
                errors.push(FieldError::required(
                    &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                    "schemas are required",
                ));
            }
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut unique = true;
    for (i, version) in versions.iter().enumerate() {
        let name = version["name"].as_str().unwrap_or("");
        if seen.contains(&name) {
            unique = false;
        }
        seen.push(name);
        let errs = dns1035_label(name);
        if !errs.is_empty() {
            errors.push(FieldError::invalid(
                &format!("spec.versions[{i}].name"),
                json!(name),
                &errs.join(","),
            ));
        }
        if version["deprecated"] != Value::Bool(true)
            && version
                .get("deprecationWarning")
                .is_some_and(|w| !w.is_null())
        {
            errors.push(FieldError::invalid(
                &format!("spec.versions[{i}].deprecationWarning"),
                version["deprecationWarning"].clone(),
                "can only be set for deprecated versions",
            ));
        }
        let status_enabled = version
            .pointer("/subresources/status")
            .is_some_and(|s| !s.is_null());
        if let Some(schema) = version
            .pointer("/schema/openAPIV3Schema")
            .filter(|s| !s.is_null())
        {
            schema::check_definition(
                schema,
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                status_enabled,
                errors,
            );
        }
    }
    if !unique {
        errors.push(FieldError {
            field: "spec.versions".into(),
            kind: versions_shown(),
            detail: "must contain unique version names".into(),
        });
    }
    let storage = versions
        .iter()
        .filter(|v| v["storage"] == Value::Bool(true))
        .count();
    if storage != 1 {
        errors.push(FieldError {
            field: "spec.versions".into(),
            kind: versions_shown(),
            detail: "must have exactly one version marked as storage version".into(),
        });
    }
}

fn validate_conversion(spec: &Value, errors: &mut Vec<FieldError>) {
    let conversion = &spec["conversion"];
    if conversion.is_null() {
        return;
    }
    match conversion["strategy"].as_str().unwrap_or("") {
        "" => errors.push(FieldError::required("spec.conversion.strategy", "")),
        "None" => {
            if conversion
                .get("webhook")
                .or_else(|| conversion.get("webhookClientConfig"))
                .is_some_and(|w| !w.is_null())
            {
                errors.push(FieldError::forbidden(
                    "spec.conversion.webhookClientConfig",
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        "Webhook" => {
            if conversion
                .pointer("/webhook/clientConfig")
                .is_none_or(Value::is_null)
            {
                errors.push(FieldError::required(
                    "spec.conversion.webhookClientConfig",
                    "required when strategy is set to Webhook",
                ));
            }
        }
        other => errors.push(FieldError::not_supported(
            "spec.conversion.strategy",
            json!(other),
            &["None", "Webhook"],
        )),
    }
}

/// Whether `group` needs the API approval annotation (apihelpers.IsProtectedCommunityGroup).
fn is_protected_group(group: &str) -> bool {
    group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io")
}

/// ValidateCustomResourceDefinition / ValidateCustomResourceDefinitionUpdate (the object
/// metadata is the server's common validation).
pub(crate) fn validate(obj: &Value, old: Option<&Value>, errors: &mut Vec<FieldError>) {
    let spec = &obj["spec"];
    let names = &spec["names"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = names["plural"].as_str().unwrap_or("");
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if old.is_none() && name != format!("{plural}.{group}") {
        errors.push(FieldError::invalid(
            "metadata.name",
            json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        errors.push(FieldError::required("spec.group", ""));
    } else if !dns1123_subdomain(group).is_empty() {
        errors.push(FieldError::invalid(
            "spec.group",
            json!(group),
            &dns1123_subdomain(group).join(","),
        ));
    } else if !group.contains('.') {
        errors.push(FieldError::invalid(
            "spec.group",
            json!(group),
            "should be a domain with at least one dot",
        ));
    }
    match spec["scope"].as_str().unwrap_or("") {
        "" => errors.push(FieldError::required("spec.scope", "")),
        "Cluster" | "Namespaced" => {}
        other => errors.push(FieldError::not_supported(
            "spec.scope",
            json!(other),
            &["Cluster", "Namespaced"],
        )),
    }
    // An update does not tighten the schema requirement on a stored definition without one.
    let require_schemas = old.is_none_or(|old| {
        versions(old).iter().all(|v| {
            v.pointer("/schema/openAPIV3Schema")
                .is_some_and(|s| !s.is_null())
        })
    });
    validate_versions(spec, require_schemas, errors);
    for field in ["plural", "singular", "kind", "listKind"] {
        if names[field].as_str().unwrap_or("").is_empty() {
            errors.push(FieldError::required(&format!("spec.names.{field}"), ""));
        }
    }
    validate_names(names, "spec.names", errors);
    validate_conversion(spec, errors);
    if let Some(old) = old {
        let old_spec = &old["spec"];
        let mut immutable = vec![
            ("spec.group", "/group"),
            ("spec.names.plural", "/names/plural"),
        ];
        if condition_true(old, "Established") {
            immutable.push(("spec.scope", "/scope"));
            immutable.push(("spec.names.kind", "/names/kind"));
        }
        for (field, pointer) in immutable {
            let new_value = spec.pointer(pointer).cloned().unwrap_or(json!(""));
            if Some(&new_value) != old_spec.pointer(pointer) {
                errors.push(FieldError::invalid(field, new_value, "field is immutable"));
            }
        }
    }
    validate_names(
        &obj["status"]["acceptedNames"],
        "status.acceptedNames",
        errors,
    );
    let declared: Vec<&str> = versions(obj)
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for (i, stored) in obj
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let stored = stored.as_str().unwrap_or("");
        if !declared.contains(&stored) {
            errors.push(FieldError::invalid(
                &format!("status.storedVersions[{i}]"),
                json!(stored),
                "must appear in spec.versions",
            ));
        }
    }
    let approval = obj["metadata"]["annotations"][APPROVAL_ANNOTATION].as_str();
    let old_approval = old.map(|o| o["metadata"]["annotations"][APPROVAL_ANNOTATION].as_str());
    if is_protected_group(group) && approval.is_none() && old_approval != Some(approval) {
        errors.push(FieldError::required(
            &format!("metadata.annotations[{APPROVAL_ANNOTATION}]"),
            &format!("protected groups must have approval annotation \"{APPROVAL_ANNOTATION}\", see https://github.com/kubernetes/enhancements/pull/1111"),
        ));
    }
    if spec["preserveUnknownFields"] == Value::Bool(true) {
        errors.push(FieldError::invalid(
            "spec.preserveUnknownFields",
            json!(true),
            "cannot set to true, set x-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }
}

// ------------------------------------------------------------------------------------------
// The controllers: names, establishing, serving, cleanup
// ------------------------------------------------------------------------------------------

/// The status the naming and establishing controllers give a definition.
fn established_status(crd: &Value) -> Value {
    let mut status = crd["status"].as_object().cloned().unwrap_or_default();
    let names = &crd["spec"]["names"];
    let mut accepted = Map::new();
    for field in [
        "plural",
        "singular",
        "shortNames",
        "kind",
        "listKind",
        "categories",
    ] {
        match &names[field] {
            Value::Null => {}
            Value::Array(items) if items.is_empty() => {}
            value => {
                accepted.insert(field.to_string(), value.clone());
            }
        }
    }
    status.insert("acceptedNames".into(), Value::Object(accepted));
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (kind, reason, message) in [
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        (
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ] {
        let existing = conditions.iter_mut().find(|c| c["type"] == kind);
        let fresh = json!({
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        });
        match existing {
            Some(condition) if condition["status"] == "True" => {}
            Some(condition) => *condition = fresh,
            None => conditions.push(fresh),
        }
    }
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// Called by `State::commit` after every write of a definition (`prev` is the served type
/// of the definition before the write).
pub(crate) fn on_commit(
    state: &mut State,
    kind: EventType,
    crd: &Value,
    prev: Option<&'static CustomType>,
) {
    let current = custom_type(crd);
    if kind == EventType::Deleted {
        if let Some(gone) = current.or(prev) {
            state.store.remove(&Resource::Custom(gone));
            state.histories.remove(&Resource::Custom(gone));
        }
        return;
    }
    if let (Some(old), Some(new)) = (prev, current) {
        if old != new {
            // The storage is rebuilt for the new identity; watches of the old one end.
            let objects = state
                .store
                .remove(&Resource::Custom(old))
                .unwrap_or_default();
            state.store.insert(Resource::Custom(new), objects);
            state.histories.remove(&Resource::Custom(old));
            state
                .histories
                .insert(Resource::Custom(new), History::new(state.rv));
        }
    }
    if is_deleting(crd) {
        if store::finalizers(crd)
            .iter()
            .any(|f| f == CLEANUP_FINALIZER)
        {
            clean_up(state, crd, current);
        }
        return;
    }
    let status = established_status(crd);
    if crd["status"] != status {
        let mut updated = crd.clone();
        updated["status"] = status;
        state.commit(
            Resource::CustomResourceDefinitions,
            EventType::Modified,
            updated,
            Some(crd.clone()),
        );
        return;
    }
    if let Some(served) = current {
        let rv = state.rv;
        state.store.entry(Resource::Custom(served)).or_default();
        state
            .histories
            .entry(Resource::Custom(served))
            .or_insert_with(|| History::new(rv));
    }
}

/// The cleanup controller: every object of the resource deleted, then the finalizer removed.
fn clean_up(state: &mut State, crd: &Value, served: Option<&'static CustomType>) {
    if let Some(served) = served {
        let resource = Resource::Custom(served);
        let objects: Vec<Value> = state.objects(resource).values().cloned().collect();
        for obj in objects {
            state.commit(resource, EventType::Deleted, obj.clone(), Some(obj));
        }
    }
    let mut updated = crd.clone();
    let remaining: Vec<Value> = store::finalizers(crd)
        .into_iter()
        .filter(|f| f != CLEANUP_FINALIZER)
        .collect();
    if let Some(conditions) = updated
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for condition in conditions.iter_mut() {
            if condition["type"] == "Terminating" {
                condition["reason"] = json!("InstanceDeletionCompleted");
                condition["message"] = json!("removed all instances");
                condition["status"] = json!("False");
            }
        }
    }
    let kind = if remaining.is_empty() {
        EventType::Deleted
    } else {
        EventType::Modified
    };
    updated["metadata"]["finalizers"] = Value::Array(remaining);
    state.commit(
        Resource::CustomResourceDefinitions,
        kind,
        updated,
        Some(crd.clone()),
    );
}

/// The REST Delete of definitions: the first delete marks the definition (deletionTimestamp,
/// the cleanup finalizer, `Terminating`) and answers with it; the cleanup follows at once.
pub(crate) fn delete(state: &mut State, target: &Target, old: Value) -> Outcome {
    if is_deleting(&old) {
        return Outcome::ok(with_type_meta(old, target.resource, target.group));
    }
    let mut obj = old.clone();
    obj["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
    obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    let mut finalizers = store::finalizers(&obj);
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        finalizers.push(json!(CLEANUP_FINALIZER));
    }
    obj["metadata"]["finalizers"] = Value::Array(finalizers);
    let terminating = json!({
        "type": "Terminating",
        "status": "True",
        "reason": "InstanceDeletionPending",
        "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
        "lastTransitionTime": now_rfc3339(),
    });
    match obj
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        Some(conditions) => {
            conditions.retain(|c| c["type"] != "Terminating");
            conditions.push(terminating);
        }
        None => obj["status"]["conditions"] = json!([terminating]),
    }
    let stored = state.commit(target.resource, EventType::Modified, obj, Some(old));
    Outcome::ok(with_type_meta(stored, target.resource, target.group))
}

// ------------------------------------------------------------------------------------------
// Serving
// ------------------------------------------------------------------------------------------

/// What a request to a custom resource needs of its definition.
pub(crate) struct Served<'a> {
    /// The version's `openAPIV3Schema`.
    pub(crate) schema: Option<&'a Value>,
    pub(crate) status_enabled: bool,
    /// The definition is being deleted: no new objects.
    pub(crate) terminating: bool,
}

/// The established definition of `group` serving `version` of `plural`, and that version.
fn find<'a>(
    state: &'a State,
    group: &str,
    version: &str,
    plural: &str,
) -> Option<(&'a Value, &'a Value)> {
    state
        .objects(Resource::CustomResourceDefinitions)
        .values()
        .filter(|crd| {
            text(crd, "/spec/group") == group
                && text(crd, "/status/acceptedNames/plural") == plural
                && condition_true(crd, "Established")
        })
        .find_map(|crd| {
            versions(crd)
                .iter()
                .find(|v| v["name"] == version && v["served"] == Value::Bool(true))
                .map(|v| (crd, v))
        })
}

fn status_enabled(version: &Value) -> bool {
    version
        .pointer("/subresources/status")
        .is_some_and(|s| !s.is_null())
}

/// The definition behind a custom resource target (`None` if it is no longer served).
pub(crate) fn served<'a>(state: &'a State, target: &Target) -> Option<Served<'a>> {
    let (Resource::Custom(custom), ApiGroup::Custom(gv)) = (target.resource, target.group) else {
        return None;
    };
    let (crd, version) = find(state, custom.group, gv.version, custom.plural)?;
    Some(Served {
        schema: version
            .pointer("/schema/openAPIV3Schema")
            .filter(|s| !s.is_null()),
        status_enabled: status_enabled(version),
        terminating: is_deleting(crd),
    })
}

/// Parses `/apis/GROUP/VERSION/[namespaces/NS/]PLURAL[/NAME[/status]]` for a served custom
/// resource.
pub(crate) fn parse_target(state: &State, path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let ["apis", group, version, rest @ ..] = segments.as_slice() else {
        return None;
    };
    let (namespace, plural, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] => (Some(*ns), *plural, tail),
        [plural, tail @ ..] => (None, *plural, tail),
        [] => return None,
    };
    let (crd, served_version) = find(state, group, version, plural)?;
    let custom = custom_type(crd)?;
    if namespace.is_some() && !custom.namespaced {
        return None;
    }
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some(name.to_string()), None),
        [name, "status"] if status_enabled(served_version) => {
            (Some(name.to_string()), Some("status".to_string()))
        }
        _ => return None,
    };
    if custom.namespaced && namespace.is_none() && name.is_some() {
        return None;
    }
    Some(Target {
        group: ApiGroup::Custom(group_version(group, version)),
        resource: Resource::Custom(custom),
        namespace: namespace.map(str::to_string),
        name,
        subresource,
    })
}

/// Kube-aware version priority: GA before beta before alpha, higher numbers first, others
/// last by name.
fn version_order(version: &str) -> (u8, i64, i64, String) {
    let parse = || -> Option<(u8, i64, i64)> {
        let rest = version.strip_prefix('v')?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let major: i64 = rest.get(..digits)?.parse().ok()?;
        let rest = &rest[digits..];
        if rest.is_empty() {
            return Some((3, major, 0));
        }
        let (class, minor) = if let Some(minor) = rest.strip_prefix("beta") {
            (2, minor)
        } else if let Some(minor) = rest.strip_prefix("alpha") {
            (1, minor)
        } else {
            return None;
        };
        Some((class, major, minor.parse().ok()?))
    };
    match parse() {
        Some((class, major, minor)) => (3 - class, -major, -minor, String::new()),
        None => (4, 0, 0, version.to_string()),
    }
}

/// The served versions of each custom group, in priority order.
fn custom_groups(state: &State) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for crd in state.objects(Resource::CustomResourceDefinitions).values() {
        if !condition_true(crd, "Established") {
            continue;
        }
        let group = text(crd, "/spec/group").to_string();
        let served = versions(crd)
            .iter()
            .filter(|v| v["served"] == Value::Bool(true))
            .filter_map(|v| v["name"].as_str().map(str::to_string));
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, list)) => list.extend(served),
            None => groups.push((group, served.collect())),
        }
    }
    for (_, list) in &mut groups {
        list.sort_by_key(|v| version_order(v));
        list.dedup();
    }
    groups.retain(|(_, list)| !list.is_empty());
    groups
}

/// The APIGroup entries of the custom groups, for `/apis`.
pub(crate) fn discovery_groups(state: &State) -> Vec<Value> {
    custom_groups(state)
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<&str> = versions.iter().map(String::as_str).collect();
            group_versions_entry(group, &versions)
        })
        .collect()
}

/// `/apis/GROUP` and `/apis/GROUP/VERSION` of a custom group.
pub(crate) fn discovery(state: &State, path: &str) -> Option<Value> {
    let rest = path.strip_prefix("/apis/")?;
    let (group, version) = match rest.split_once('/') {
        Some((group, version)) => (group, Some(version)),
        None => (rest, None),
    };
    let (_, group_versions) = custom_groups(state).into_iter().find(|(g, _)| g == group)?;
    let Some(version) = version else {
        let listed: Vec<&str> = group_versions.iter().map(String::as_str).collect();
        let mut entry = group_versions_entry(group, &listed);
        entry["kind"] = json!("APIGroup");
        entry["apiVersion"] = json!("v1");
        return Some(entry);
    };
    if !group_versions.iter().any(|v| v == version) {
        return None;
    }
    let mut resources = Vec::new();
    for crd in state.objects(Resource::CustomResourceDefinitions).values() {
        if text(crd, "/spec/group") != group || !condition_true(crd, "Established") {
            continue;
        }
        let Some(served) = versions(crd)
            .iter()
            .find(|v| v["name"] == version && v["served"] == Value::Bool(true))
        else {
            continue;
        };
        let names = &crd["status"]["acceptedNames"];
        let namespaced = text(crd, "/spec/scope") == "Namespaced";
        let kind = names["kind"].clone();
        let mut entry = json!({
            "name": names["plural"],
            "singularName": names["singular"],
            "namespaced": namespaced,
            "kind": kind,
            "verbs": VERBS,
        });
        for list in ["shortNames", "categories"] {
            if names[list].as_array().is_some_and(|l| !l.is_empty()) {
                entry[list] = names[list].clone();
            }
        }
        resources.push(entry);
        if status_enabled(served) {
            resources.push(json!({
                "name": format!("{}/status", names["plural"].as_str().unwrap_or("")),
                "singularName": "",
                "namespaced": namespaced,
                "kind": kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{group}/{version}"),
        "resources": resources,
    }))
}

// ------------------------------------------------------------------------------------------
// Public API
// ------------------------------------------------------------------------------------------

impl ApiServer {
    /// Creates a CustomResourceDefinition (with all of the server's checks; panics if
    /// refused) and returns it as stored once established (`acceptedNames`, `NamesAccepted`
    /// and `Established`); its resource is served from then on.
    pub fn create_crd(&self, crd: Value) -> Value {
        let target = Target::cluster(Resource::CustomResourceDefinitions);
        let created = self.helper(|state| state.create(&target, crd, &Opts::default()));
        let name = created["metadata"]["name"].as_str().unwrap_or("");
        self.crd(name).unwrap_or(created)
    }

    /// The stored CustomResourceDefinition `name` (`PLURAL.GROUP`), if any.
    pub fn crd(&self, name: &str) -> Option<Value> {
        self.lock().get_served(&Target::object(
            Resource::CustomResourceDefinitions,
            None,
            name,
        ))
    }

    /// Deletes a CustomResourceDefinition and, with it, every object of its resource.
    pub fn delete_crd(&self, name: &str) {
        let target = Target::object(Resource::CustomResourceDefinitions, None, name);
        self.helper(|state| state.delete(&target, None, &Opts::default()));
    }

    /// The stored object `name` of a custom resource (`api_version` `GROUP/VERSION`,
    /// `plural`; `namespace` `None` for a cluster-scoped one), as that version serves it.
    pub fn custom_object(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let mut path = format!("/apis/{api_version}/");
        if let Some(ns) = namespace {
            path.push_str(&format!("namespaces/{ns}/"));
        }
        path.push_str(&format!("{plural}/{name}"));
        let state = self.lock();
        let target = parse_target(&state, &path)?;
        state.get_served(&target)
    }
}

/// 405 for a create while the definition is being deleted.
pub(crate) fn terminating_error() -> ApiError {
    ApiError::new(
        405,
        "MethodNotAllowed",
        "create not allowed while custom resource definition is terminating",
    )
    .with_details(json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kube() {
        let mut list = vec!["v1alpha1", "v2", "v1beta2", "foo", "v1", "v1beta1", "v10"];
        list.sort_by_key(|v| version_order(v));
        assert_eq!(
            list,
            ["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn interning_gives_one_type_per_identity() {
        let a = group_version("example.com", "v1");
        let b = group_version("example.com", "v1");
        assert!(std::ptr::eq(a, b));
        assert_eq!(a.api_version, "example.com/v1");
    }
}
