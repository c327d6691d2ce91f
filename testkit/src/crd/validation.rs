//! The strategy of definitions: defaults and the validation of v1
//! (pkg/apis/apiextensions/validation).

use serde_json::{json, Value};

use crate::errors::{FieldError, FieldErrorKind};
use crate::resource::Target;
use crate::schema;
use crate::store::copy_field;
use crate::validation::{dns1123_subdomain, regex_error};

use super::types::{condition_true, storage_version, versions};
use super::APPROVAL_ANNOTATION;

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
