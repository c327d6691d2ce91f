//! Names, labels and annotations as k8s.io/apimachinery/pkg/util/validation checks them, with
//! the real messages.

use serde_json::{json, Value};

use crate::errors::FieldError;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";

const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

pub(crate) fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}'")).collect();
    format!(
        "{msg} (e.g. {}, regex used for validation is '{fmt}')",
        examples.join(",  or ")
    )
}

fn is_dns_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

pub(crate) fn dns1123_label(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if text.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_dns_label(text) {
        errs.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

pub(crate) fn dns1123_subdomain(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if text.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if !text.split('.').all(is_dns_label) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            &format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*"),
            &["example.com"],
        ));
    }
    errs
}

fn is_qualified_name_part(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

pub(crate) fn qualified_name(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = text.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

pub(crate) fn label_value(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if text.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !text.is_empty() && !is_qualified_name_part(text) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

pub(crate) fn validate_labels_annotations(obj: &Value, errors: &mut Vec<FieldError>) {
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        for (key, value) in labels {
            for msg in qualified_name(key) {
                errors.push(FieldError::invalid("metadata.labels", json!(key), &msg));
            }
            let value = value.as_str().unwrap_or("");
            for msg in label_value(value) {
                errors.push(FieldError::invalid("metadata.labels", json!(value), &msg));
            }
        }
    }
    if let Some(annotations) = obj["metadata"]["annotations"].as_object() {
        let mut total = 0;
        for (key, value) in annotations {
            for msg in qualified_name(&key.to_lowercase()) {
                errors.push(FieldError::invalid(
                    "metadata.annotations",
                    json!(key),
                    &msg,
                ));
            }
            total += key.len() + value.as_str().map_or(0, str::len);
        }
        if total > TOTAL_ANNOTATION_SIZE_LIMIT {
            errors.push(FieldError::too_long(
                "metadata.annotations",
                TOTAL_ANNOTATION_SIZE_LIMIT,
            ));
        }
    }
}
