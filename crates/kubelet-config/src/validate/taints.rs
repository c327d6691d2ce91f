//! `registerWithTaints`: each taint as upstream's `CheckTaintValidation`
//! checks it (a qualified-name key, a label-value value, a known effect),
//! and no `timeAdded` (the kubelet's validation refuses one being set).

use serde_json::{Map, Value};

use super::raw::{self, child};
use super::Checker;

const FIELD: &str = "registerWithTaints";
/// The taint effects of core/v1.
pub(super) const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
const NAME_MAX: usize = 63;
const DNS_SUBDOMAIN_MAX: usize = 253;

pub(super) fn validate_taints(effective: &Map<String, Value>, c: &mut Checker) {
    let Some(items) = raw::list(effective.get(FIELD), FIELD, c) else {
        return;
    };
    let empty = Map::new();
    for (index, item) in items.iter().enumerate() {
        let path = format!("{FIELD}[{index}]");
        let Some(taint) = raw::item(item, &path, &empty, c) else {
            continue;
        };
        let key = raw::string(taint, "key", &path, c).unwrap_or("");
        if let Err(why) = check_qualified_name(key) {
            c.push(
                &child(&path, "key"),
                format_args!("({key:?}) is not a valid taint key: {why}"),
            );
        }
        if let Some(value) = raw::string(taint, "value", &path, c) {
            if let Err(why) = check_label_value(value) {
                c.push(
                    &child(&path, "value"),
                    format_args!("({value:?}) is not a valid taint value: {why}"),
                );
            }
        }
        if let Some(effect) = raw::string(taint, "effect", &path, c) {
            if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
                c.push(
                    &child(&path, "effect"),
                    format_args!("({effect:?}) must be one of: {}", TAINT_EFFECTS.join(", ")),
                );
            }
        }
        if taint.get("timeAdded").is_some_and(|t| !t.is_null()) {
            c.push(
                &child(&path, "timeAdded"),
                "must not be set: the kubelet refuses a registration taint with a time",
            );
        }
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, the name part of a qualified
/// name and a non-empty label value.
fn is_name_part(text: &str) -> bool {
    let bytes = text.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: dot-separated lower-case labels of `[a-z0-9-]`
/// that start and end with an alphanumeric, at most 253 characters.
pub(super) fn is_dns_subdomain(text: &str) -> bool {
    let label = |part: &str| {
        let bytes = part.as_bytes();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
                alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
            }
            _ => false,
        }
    };
    text.len() <= DNS_SUBDOMAIN_MAX && text.split('.').all(label)
}

/// `IsQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name
/// of at most 63 characters.
pub fn check_qualified_name(text: &str) -> Result<(), String> {
    let name = match text.split_once('/') {
        None => text,
        Some((prefix, name)) => {
            if prefix.is_empty() {
                return Err("the prefix before \"/\" must be non-empty".to_owned());
            }
            if name.contains('/') {
                return Err("a qualified name has at most one \"/\"".to_owned());
            }
            if !is_dns_subdomain(prefix) {
                return Err(format!(
                    "the prefix {prefix:?} must be a DNS subdomain (lower-case \
                     alphanumerics, '-' and '.', at most {DNS_SUBDOMAIN_MAX} characters)"
                ));
            }
            name
        }
    };
    if name.is_empty() {
        return Err("the name part must be non-empty".to_owned());
    }
    if name.len() > NAME_MAX {
        return Err(format!(
            "the name part must be no more than {NAME_MAX} characters"
        ));
    }
    if !is_name_part(name) {
        return Err(
            "the name part must consist of alphanumeric characters, '-', '_' or '.', \
             and must start and end with an alphanumeric character"
                .to_owned(),
        );
    }
    Ok(())
}

/// `IsValidLabelValue` for a non-empty value.
pub fn check_label_value(text: &str) -> Result<(), String> {
    if text.len() > NAME_MAX {
        return Err(format!("must be no more than {NAME_MAX} characters"));
    }
    if !text.is_empty() && !is_name_part(text) {
        return Err("must consist of alphanumeric characters, '-', '_' or '.', \
             and must start and end with an alphanumeric character"
            .to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        for good in [
            "a",
            "dedicated",
            "example.com/gpu",
            "node.kubernetes.io/x_y.z-1",
            "A1",
        ] {
            assert!(check_qualified_name(good).is_ok(), "{good}");
        }
        let long = "a".repeat(64);
        let long_prefix = format!("{}/a", "a".repeat(254));
        for bad in [
            "",
            "/a",
            "a/",
            "a/b/c",
            "-a",
            "a-",
            "Example.com/a",
            "a b",
            &long,
            &long_prefix,
        ] {
            assert!(check_qualified_name(bad).is_err(), "{bad}");
        }
        assert!(check_label_value(&"v".repeat(63)).is_ok());
        assert!(check_label_value(&"v".repeat(64)).is_err());
        assert!(check_label_value("a/b").is_err());
    }
}
