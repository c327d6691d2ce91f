//! kube-openapi's validation of a custom object, as field errors.

use serde_json::Value;

use crate::errors::{FieldError, FieldErrorKind};

use super::go::{go_float, go_value};
use super::{additional, child, flag, properties, type_of};

/// Where errors are reported: the field path of an error is `field_prefix` joined with the
/// value's name (the defaults of a schema are checked with the `default` field as prefix).
pub(super) struct Place<'a> {
    pub(super) field_prefix: &'a str,
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

pub(super) fn validate_at(
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
