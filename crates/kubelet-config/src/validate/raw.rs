//! Typed reads of the sections kubelet-pivot carries untouched (`logging`,
//! `tracing`, `registerWithTaints`, `reservedMemory`): the kubelet decodes
//! them into typed structs, so a value of the wrong type is refused here too,
//! with its path. A null is "not set", as the kubelet's decoder reads it.

use serde_json::{Map, Value};

use super::super::fields::describe;
use super::super::quantity::Quantity;
use super::Checker;

/// `prefix.key`.
pub(super) fn child(prefix: &str, key: &str) -> String {
    format!("{prefix}.{key}")
}

fn wrong(c: &mut Checker, path: &str, expected: &str, found: &Value) {
    c.push(
        path,
        format_args!("must be {expected}, found {}", describe(found)),
    );
}

/// The mapping at `path`; `None` when unset (absent or null) or of the wrong
/// type (refused).
pub(super) fn object<'a>(
    value: Option<&'a Value>,
    path: &str,
    c: &mut Checker,
) -> Option<&'a Map<String, Value>> {
    match value? {
        Value::Null => None,
        Value::Object(map) => Some(map),
        other => {
            wrong(c, path, "a mapping", other);
            None
        }
    }
}

/// A list item that decodes into a struct: a null item is a struct with
/// every field unset (`empty`); `None` when of the wrong type (refused).
pub(super) fn item<'a>(
    value: &'a Value,
    path: &str,
    empty: &'a Map<String, Value>,
    c: &mut Checker,
) -> Option<&'a Map<String, Value>> {
    if value.is_null() {
        Some(empty)
    } else {
        object(Some(value), path, c)
    }
}

/// The list at `path`; `None` when unset or of the wrong type (refused).
pub(super) fn list<'a>(
    value: Option<&'a Value>,
    path: &str,
    c: &mut Checker,
) -> Option<&'a [Value]> {
    match value? {
        Value::Null => None,
        Value::Array(items) => Some(items),
        other => {
            wrong(c, path, "a list", other);
            None
        }
    }
}

/// The string `key` of `map`; `None` when unset or of the wrong type.
pub(super) fn string<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    prefix: &str,
    c: &mut Checker,
) -> Option<&'a str> {
    match map.get(key)? {
        Value::Null => None,
        Value::String(text) => Some(text),
        other => {
            wrong(c, &child(prefix, key), "a string", other);
            None
        }
    }
}

/// The boolean `key` of `map`; `None` when unset or of the wrong type.
pub(super) fn boolean(
    map: &Map<String, Value>,
    key: &str,
    prefix: &str,
    c: &mut Checker,
) -> Option<bool> {
    match map.get(key)? {
        Value::Null => None,
        Value::Bool(flag) => Some(*flag),
        other => {
            wrong(c, &child(prefix, key), "a boolean", other);
            None
        }
    }
}

/// Integer widths of the kubelet's Go fields.
#[derive(Debug, Clone, Copy)]
pub(super) enum Width {
    Int32,
    Uint32,
}

impl Width {
    fn bounds(self) -> (i64, i64, &'static str) {
        match self {
            Width::Int32 => (i64::from(i32::MIN), i64::from(i32::MAX), "a 32-bit integer"),
            Width::Uint32 => (0, i64::from(u32::MAX), "an unsigned 32-bit integer"),
        }
    }
}

/// The integer `key` of `map`, which must fit `width`; `None` when unset or
/// not such an integer (refused: the kubelet fails to decode it).
pub(super) fn integer(
    map: &Map<String, Value>,
    key: &str,
    prefix: &str,
    width: Width,
    c: &mut Checker,
) -> Option<i64> {
    let value = map.get(key)?;
    if value.is_null() {
        return None;
    }
    let (low, high, expected) = width.bounds();
    match value.as_i64().filter(|v| (low..=high).contains(v)) {
        Some(v) => Some(v),
        None => {
            wrong(c, &child(prefix, key), expected, value);
            None
        }
    }
}

/// A `resource.Quantity` as the kubelet decodes one: a string, or a JSON
/// number read as its text; null is zero. `Err` says why it is not one.
pub(super) fn quantity(value: &Value) -> Result<Quantity, String> {
    match value {
        Value::Null => Quantity::parse("0").map_err(|e| e.to_string()),
        Value::String(text) => Quantity::parse(text).map_err(|e| e.to_string()),
        Value::Number(number) => Quantity::parse(&number.to_string()).map_err(|e| e.to_string()),
        other => Err(format!("must be a quantity, found {}", describe(other))),
    }
}
