//! Typed views of a document: its fields checked against the [schema]
//! (unknown fields with their path, values of the wrong type, the type meta)
//! and the [`FieldValue`]s of the modelled ones, by path.
//!
//! [schema]: super::schema

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::duration::GoDuration;
use super::error::ConfigError;
use super::hash::sorted_entries;
use super::schema::{Field, Kind, TYPE_META};
use super::{API_VERSION, KIND};

/// The typed value of a modelled field.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// A boolean.
    Bool(bool),
    /// An integer (int32 or int64 field).
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A Go duration.
    Duration(GoDuration),
    /// A list of strings.
    StrList(Vec<String>),
    /// A map of strings to strings.
    StrMap(BTreeMap<String, String>),
    /// A map of strings to booleans.
    BoolMap(BTreeMap<String, bool>),
    /// A list of structs: the number of items (each item's fields have their
    /// own entries, `name[i].field`).
    Items(usize),
}

/// Typed values of the modelled fields that are set, by path.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Views(BTreeMap<String, FieldValue>);

impl Views {
    /// The typed value at `path`, if set.
    pub(super) fn get(&self, path: &str) -> Option<&FieldValue> {
        self.0.get(path)
    }

    pub(super) fn int(&self, path: &str) -> Option<i64> {
        match self.0.get(path) {
            Some(FieldValue::Int(v)) => Some(*v),
            _ => None,
        }
    }

    pub(super) fn float(&self, path: &str) -> Option<f64> {
        match self.0.get(path) {
            Some(FieldValue::Float(v)) => Some(*v),
            Some(FieldValue::Int(v)) => Some(*v as f64),
            _ => None,
        }
    }

    pub(super) fn boolean(&self, path: &str) -> Option<bool> {
        match self.0.get(path) {
            Some(FieldValue::Bool(v)) => Some(*v),
            _ => None,
        }
    }

    pub(super) fn string(&self, path: &str) -> Option<&str> {
        match self.0.get(path) {
            Some(FieldValue::Str(v)) => Some(v),
            _ => None,
        }
    }

    pub(super) fn duration(&self, path: &str) -> Option<GoDuration> {
        match self.0.get(path) {
            Some(FieldValue::Duration(v)) => Some(*v),
            _ => None,
        }
    }

    pub(super) fn list(&self, path: &str) -> &[String] {
        match self.0.get(path) {
            Some(FieldValue::StrList(v)) => v,
            _ => &[],
        }
    }

    pub(super) fn map(&self, path: &str) -> Option<&BTreeMap<String, String>> {
        match self.0.get(path) {
            Some(FieldValue::StrMap(v)) => Some(v),
            _ => None,
        }
    }

    pub(super) fn items(&self, path: &str) -> usize {
        match self.0.get(path) {
            Some(FieldValue::Items(n)) => *n,
            _ => 0,
        }
    }
}

fn join_path(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => {
            let shown: String = s.chars().take(64).collect();
            if shown.len() < s.len() {
                format!("string {shown:?}...")
            } else {
                format!("string {s:?}")
            }
        }
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "a mapping".to_owned(),
    }
}

/// Checks every field of `map` against `fields` (unknown fields and types)
/// and records the typed values of the modelled ones.
pub(super) fn check_object(
    map: &Map<String, Value>,
    fields: &[Field],
    prefix: &str,
    views: &mut Views,
) -> Result<(), ConfigError> {
    for (name, value) in sorted_entries(map) {
        if prefix.is_empty() && TYPE_META.contains(&name.as_str()) {
            continue;
        }
        let path = join_path(prefix, name);
        let Some(field) = fields.iter().find(|f| f.name == name) else {
            return Err(ConfigError::UnknownField { path });
        };
        check_value(value, field.kind, &path, views)?;
    }
    Ok(())
}

fn check_value(
    value: &Value,
    kind: Kind,
    path: &str,
    views: &mut Views,
) -> Result<(), ConfigError> {
    let wrong = || ConfigError::WrongType {
        path: path.to_owned(),
        expected: kind.expected(),
        found: describe(value),
    };
    // Null is "not set" for every field: the kubelet keeps (and defaults)
    // the zero value, and the effective config drops nulls of modelled
    // fields.
    if value.is_null() {
        return Ok(());
    }
    let typed = match kind {
        Kind::Any => return Ok(()),
        Kind::Bool => FieldValue::Bool(value.as_bool().ok_or_else(wrong)?),
        Kind::Int32 => {
            let v = value.as_i64().ok_or_else(wrong)?;
            i32::try_from(v).map_err(|_| wrong())?;
            FieldValue::Int(v)
        }
        Kind::Int64 => FieldValue::Int(value.as_i64().ok_or_else(wrong)?),
        Kind::Float => FieldValue::Float(value.as_f64().ok_or_else(wrong)?),
        Kind::Str => FieldValue::Str(value.as_str().ok_or_else(wrong)?.to_owned()),
        Kind::Duration => {
            let text = value.as_str().ok_or_else(wrong)?;
            let duration = GoDuration::parse(text).map_err(|e| ConfigError::WrongType {
                path: path.to_owned(),
                expected: kind.expected(),
                found: format!("{} ({e})", describe(value)),
            })?;
            FieldValue::Duration(duration)
        }
        Kind::StrList => {
            let items = value.as_array().ok_or_else(wrong)?;
            let mut list = Vec::with_capacity(items.len());
            for item in items {
                list.push(item.as_str().ok_or_else(wrong)?.to_owned());
            }
            FieldValue::StrList(list)
        }
        Kind::StrMap => {
            let map = value.as_object().ok_or_else(wrong)?;
            let mut out = BTreeMap::new();
            for (key, item) in map {
                let text = item.as_str().ok_or_else(|| ConfigError::WrongType {
                    path: join_path(path, key),
                    expected: "a string (quote numbers, e.g. \"1000\")",
                    found: describe(item),
                })?;
                out.insert(key.clone(), text.to_owned());
            }
            FieldValue::StrMap(out)
        }
        Kind::BoolMap => {
            let map = value.as_object().ok_or_else(wrong)?;
            let mut out = BTreeMap::new();
            for (key, item) in map {
                let flag = item.as_bool().ok_or_else(|| ConfigError::WrongType {
                    path: join_path(path, key),
                    expected: "a boolean",
                    found: describe(item),
                })?;
                out.insert(key.clone(), flag);
            }
            FieldValue::BoolMap(out)
        }
        Kind::Object(fields) => {
            let map = value.as_object().ok_or_else(wrong)?;
            return check_object(map, fields, path, views);
        }
        Kind::ObjectList(fields) => {
            let items = value.as_array().ok_or_else(wrong)?;
            for (index, item) in items.iter().enumerate() {
                let item_path = format!("{path}[{index}]");
                let map = item.as_object().ok_or_else(|| ConfigError::WrongType {
                    path: item_path.clone(),
                    expected: "a mapping",
                    found: describe(item),
                })?;
                check_object(map, fields, &item_path, views)?;
            }
            FieldValue::Items(items.len())
        }
    };
    views.0.insert(path.to_owned(), typed);
    Ok(())
}

pub(super) fn check_type_meta(document: &Map<String, Value>) -> Result<(), ConfigError> {
    let found = |value: Option<&Value>| match value {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    };
    let kind = document.get("kind");
    if kind.and_then(Value::as_str) != Some(KIND) {
        return Err(ConfigError::WrongKind { found: found(kind) });
    }
    let api_version = document.get("apiVersion");
    if api_version.and_then(Value::as_str) != Some(API_VERSION) {
        return Err(ConfigError::WrongApiVersion {
            found: found(api_version),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::test_support::parse_error;
    use crate::KubeletConfig;

    use super::*;

    #[test]
    fn unknown_top_level_field_is_rejected() {
        let err = parse_error("fooBar: 1");
        assert!(
            matches!(&err, ConfigError::UnknownField { path } if path == "fooBar"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "unknown field \"fooBar\"");
    }

    #[test]
    fn unknown_nested_fields_are_rejected_with_their_path() {
        for (body, expected) in [
            (
                "authentication:\n  webhook:\n    enabled: true\n    fooBar: 1",
                "authentication.webhook.fooBar",
            ),
            ("authorization:\n  rbac: {}", "authorization.rbac"),
            ("memorySwap:\n  swapLimit: 1Gi", "memorySwap.swapLimit"),
            (
                "shutdownGracePeriodByPodPriority:\n- priority: 1\n  gracePeriod: 10",
                "shutdownGracePeriodByPodPriority[0].gracePeriod",
            ),
        ] {
            match parse_error(body) {
                ConfigError::UnknownField { path } => assert_eq!(path, expected),
                other => panic!("{body:?}: unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn wrong_or_missing_kind_is_rejected() {
        let cases: [(&str, Option<&str>); 4] = [
            (
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n",
                Some("KubeProxyConfiguration"),
            ),
            ("apiVersion: v1\nkind: ConfigMap\n", Some("ConfigMap")),
            (
                "apiVersion: kubelet.config.k8s.io/v1beta1\nport: 10250\n",
                None,
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: 5\n",
                Some("5"),
            ),
        ];
        for (doc, expected) in cases {
            match KubeletConfig::parse(doc.as_bytes()) {
                Err(ConfigError::WrongKind { found }) => assert_eq!(found.as_deref(), expected),
                other => panic!("{doc:?}: unexpected {other:?}"),
            }
        }
        let err = KubeletConfig::parse(b"kind: Foo\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "kind must be \"KubeletConfiguration\", found \"Foo\""
        );
    }

    #[test]
    fn wrong_or_missing_api_version_is_rejected() {
        for (doc, expected) in [
            (
                "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
                Some("kubelet.config.k8s.io/v1alpha1"),
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
                Some("kubelet.config.k8s.io/v1"),
            ),
            ("kind: KubeletConfiguration\n", None),
        ] {
            match KubeletConfig::parse(doc.as_bytes()) {
                Err(ConfigError::WrongApiVersion { found }) => {
                    assert_eq!(found.as_deref(), expected)
                }
                other => panic!("{doc:?}: unexpected {other:?}"),
            }
        }
        let err = KubeletConfig::parse(b"kind: KubeletConfiguration\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "apiVersion is missing, it must be \"kubelet.config.k8s.io/v1beta1\""
        );
    }

    #[test]
    fn values_of_the_wrong_type_are_rejected() {
        for (body, expected_path) in [
            ("port: \"10250\"", "port"),
            ("port: 10250.5", "port"),
            ("port: 3000000000", "port"),
            ("maxOpenFiles: 1.0e3", "maxOpenFiles"),
            ("syncFrequency: 60", "syncFrequency"),
            ("syncFrequency: 1x", "syncFrequency"),
            ("syncFrequency: 1", "syncFrequency"),
            ("failSwapOn: \"true\"", "failSwapOn"),
            ("address: 0", "address"),
            ("featureGates:\n  Foo: \"true\"", "featureGates.Foo"),
            (
                "evictionHard:\n  memory.available: 100",
                "evictionHard.memory.available",
            ),
            ("tlsCipherSuites: [1]", "tlsCipherSuites"),
            ("clusterDNS: 10.96.0.10", "clusterDNS"),
            ("authentication: []", "authentication"),
            (
                "authentication:\n  webhook:\n    cacheTTL: 2 minutes",
                "authentication.webhook.cacheTTL",
            ),
            (
                "shutdownGracePeriodByPodPriority: [5]",
                "shutdownGracePeriodByPodPriority[0]",
            ),
            ("crashLoopThreshold: three", "crashLoopThreshold"),
            ("configTrialDuration: 10", "configTrialDuration"),
        ] {
            match parse_error(body) {
                ConfigError::WrongType { path, .. } => assert_eq!(path, expected_path, "{body:?}"),
                other => panic!("{body:?}: unexpected {other:?}"),
            }
        }
        let err = parse_error("syncFrequency: 1x");
        assert!(err.to_string().contains("unknown unit \"x\""), "{err}");
    }
}
