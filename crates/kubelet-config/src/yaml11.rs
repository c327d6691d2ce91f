//! Plain YAML scalars as the kubelet reads them.
//!
//! The kubelet decodes its config with sigs.k8s.io/yaml, that is go-yaml v2,
//! whose resolver is YAML 1.1's: an unquoted `yes`, `no`, `on`, `off`, `y`,
//! `n` (and their capitalised forms) is a boolean, `0755` is octal 493,
//! `1_000` is 1000, `0X1F` is 31, `08` is 8. serde_yaml_ng resolves plain
//! scalars as YAML 1.2's core schema, where all of those are strings. A
//! *quoted* scalar is a string in both, and so is a block scalar or a plain
//! scalar with an explicit tag. Where the two agree (`true`, `~`, `null`,
//! `0x1F`, `0o17`, `.inf`, `1e3`, ...) nothing happens here; go-yaml v2 does
//! not resolve base-60 (`1:30`) at all, and keeps timestamps as strings.
//!
//! Decoding reads every diverging plain scalar with the kubelet's meaning
//! and records a [`Yaml11Reading`]; after the schema has typed the document,
//! [`judge`] keeps each one where the field is modelled with that type (a
//! [`YamlWarning`] says what to write instead) and refuses it anywhere else:
//! the kubelet refuses a boolean or a number in a string field, and a field
//! kubelet-pivot does not type is refused rather than guessed.

use std::fmt;

use serde_json::{Number, Value};

use super::error::{ConfigError, Format};
use super::fields::{FieldValue, Views};

/// A plain scalar that YAML 1.2 reads as a string and the kubelet as
/// something else, recorded while decoding.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Yaml11Reading {
    pub(crate) path: String,
    /// The scalar as written (at most [`SHOWN_CHARS`] characters).
    pub(crate) written: String,
    /// The kubelet's value, which the decoded document holds.
    pub(crate) value: Value,
}

/// A plain scalar kept with the kubelet's (YAML 1.1) meaning, which YAML 1.2
/// tools read as a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlWarning {
    /// Path of the field, e.g. `serializeImagePulls`.
    pub path: String,
    /// The scalar as written, e.g. `no`.
    pub written: String,
    /// What the kubelet reads, in the form to write instead, e.g. `false`.
    pub read_as: String,
}

impl fmt::Display for YamlWarning {
    /// One line; control characters of the path (a quoted key may hold any)
    /// are escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path: String = self.path.chars().flat_map(char::escape_debug).collect();
        write!(
            f,
            "{}: the unquoted {} is read as {}, as the kubelet reads it; write {} \
             (YAML 1.1 reads {} as {}; YAML 1.2 as the string {:?})",
            path,
            self.written,
            self.read_as,
            self.read_as,
            self.written,
            self.read_as,
            self.written
        )
    }
}

/// How much of a scalar a message shows.
const SHOWN_CHARS: usize = 64;

fn shown(text: &str) -> String {
    let mut out: String = text.chars().take(SHOWN_CHARS).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

impl Yaml11Reading {
    pub(crate) fn new(path: String, written: &str, value: Value) -> Self {
        Yaml11Reading {
            path,
            written: shown(written),
            value,
        }
    }

    fn warning(&self) -> YamlWarning {
        YamlWarning {
            path: self.path.clone(),
            written: self.written.clone(),
            read_as: self.value.to_string(),
        }
    }

    fn what(&self) -> &'static str {
        match self.value {
            Value::Bool(_) => "boolean",
            _ => "number",
        }
    }

    /// Where the reading sits under `path` (the field itself, or an item or
    /// entry of it).
    fn is_under(&self, path: &str) -> bool {
        self.path
            .strip_prefix(path)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    }
}

/// go-yaml v2's YAML 1.1 booleans that YAML 1.2 reads as strings.
const YAML11_BOOLEANS: &[(&str, bool)] = &[
    ("y", true),
    ("Y", true),
    ("yes", true),
    ("Yes", true),
    ("YES", true),
    ("on", true),
    ("On", true),
    ("ON", true),
    ("n", false),
    ("N", false),
    ("no", false),
    ("No", false),
    ("NO", false),
    ("off", false),
    ("Off", false),
    ("OFF", false),
];

/// What go-yaml v2 makes of a plain, untagged scalar that serde_yaml_ng read
/// as the string `text`, when that is not a string.
pub(crate) fn kubelet_reading(text: &str) -> Option<Value> {
    if let Some((_, b)) = YAML11_BOOLEANS.iter().find(|(word, _)| *word == text) {
        return Some(Value::Bool(*b));
    }
    // go-yaml tries numbers only for a scalar that starts with a digit or a
    // sign (a leading '.' is a float both read alike), after removing every
    // underscore.
    if !text.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-') {
        return None;
    }
    let plain: String = text.chars().filter(|c| *c != '_').collect();
    if let Some(int) = go_int(&plain) {
        return Some(int);
    }
    if yaml_style_float(&plain) {
        let float: f64 = plain.parse().ok()?;
        return json_number(float);
    }
    None
}

/// Go's `strconv.ParseInt(s, 0, 64)`, falling back to `ParseUint`: a sign,
/// then `0x`/`0X`, `0o`/`0O`, `0b`/`0B`, a leading `0` (octal) or decimal.
fn go_int(text: &str) -> Option<Value> {
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, text.get(1..)?),
        Some(b'+') => (false, text.get(1..)?),
        _ => (false, text),
    };
    let lower = unsigned.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if negative {
        // ParseInt's range: down to i64::MIN.
        let value = 0i128 - i128::from(magnitude);
        return i64::try_from(value).ok().map(Value::from);
    }
    Some(Value::from(magnitude))
}

/// go-yaml's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn yaml_style_float(text: &str) -> bool {
    fn digits(s: &[u8]) -> usize {
        s.iter().take_while(|c| c.is_ascii_digit()).count()
    }
    let mut s = text.as_bytes();
    if let [b'+' | b'-', rest @ ..] = s {
        s = rest;
    }
    if let [b'.', rest @ ..] = s {
        let n = digits(rest);
        if n == 0 {
            return false;
        }
        s = &rest[n..];
    } else {
        let n = digits(s);
        if n == 0 {
            return false;
        }
        s = &s[n..];
        if let [b'.', rest @ ..] = s {
            s = &rest[digits(rest)..];
        }
    }
    if let [b'e' | b'E', rest @ ..] = s {
        let rest = match rest {
            [b'+' | b'-', r @ ..] => r,
            r => r,
        };
        let n = digits(rest);
        if n == 0 {
            return false;
        }
        s = &rest[n..];
    }
    s.is_empty()
}

/// A float as the kubelet's JSON step writes it: a whole number below 1e21
/// prints without a fraction (so it fills an integer field), anything else
/// stays a float. Non-finite values are refused by the decoder anyway.
fn json_number(float: f64) -> Option<Value> {
    if float.fract() == 0.0 && float.abs() < 1e21 {
        // In range: the cast is exact for whole numbers below 2^63.
        #[allow(clippy::cast_possible_truncation)]
        let whole = float as i64;
        if whole as f64 == float {
            return Some(Value::from(whole));
        }
    }
    Number::from_f64(float).map(Value::Number)
}

/// How far back [`is_tagged`] looks for a tag: bounded, so that an alias
/// expanded many times costs little each time. A longer tag and anchor
/// before a scalar is not seen (the scalar is then read as plain).
const TAG_LOOKBACK: usize = 256;

/// Whether the plain scalar starting at `offset` of `source` carries an
/// explicit tag (`!!str yes`, `!custom on`): go-yaml then does not resolve
/// it. Looks back over blanks and anchors to the previous token, at most
/// [`TAG_LOOKBACK`] bytes.
pub(crate) fn is_tagged(source: &[u8], offset: usize) -> bool {
    let offset = offset.min(source.len());
    let source = &source[offset.saturating_sub(TAG_LOOKBACK)..offset];
    let mut end = source.len();
    loop {
        while end > 0 && source[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        let mut start = end;
        while start > 0 && !source[start - 1].is_ascii_whitespace() {
            start -= 1;
        }
        let token = &source[start..end];
        let token = token
            .iter()
            .position(|c| !matches!(c, b'[' | b'{' | b','))
            .map_or(&token[token.len()..], |i| &token[i..]);
        match token.first() {
            Some(b'!') => return true,
            Some(b'&') if start > 0 => end = start,
            _ => return false,
        }
    }
}

/// Keeps the readings whose field is modelled with the type the kubelet
/// reads (a warning each); refuses the first one anywhere else.
pub(crate) fn judge(
    readings: &[Yaml11Reading],
    views: &Views,
) -> Result<Vec<YamlWarning>, ConfigError> {
    let mut warnings = Vec::with_capacity(readings.len());
    for reading in readings {
        let parent = reading.path.rsplit_once('.').map(|(p, _)| p);
        let typed = match (views.get(&reading.path), &reading.value) {
            (Some(FieldValue::Bool(_)), Value::Bool(_)) => true,
            (Some(FieldValue::Int(_) | FieldValue::Float(_)), Value::Number(_)) => true,
            _ => matches!(
                (parent.and_then(|p| views.get(p)), &reading.value),
                (Some(FieldValue::BoolMap(_)), Value::Bool(_))
            ),
        };
        if !typed {
            return Err(untyped(reading));
        }
        warnings.push(reading.warning());
    }
    Ok(warnings)
}

/// The refusal of a reading in a field kubelet-pivot does not type.
fn untyped(reading: &Yaml11Reading) -> ConfigError {
    ConfigError::Parse {
        format: Format::Yaml,
        line: None,
        column: None,
        message: format!(
            "{}: the unquoted {} is the {} {} to the kubelet (YAML 1.1) and the string {:?} \
             to YAML 1.2; kubelet-pivot does not check this field's type, so write what you \
             mean: {} for the {}, or {:?} quoted for the string",
            reading.path,
            reading.written,
            reading.what(),
            reading.value,
            reading.written,
            reading.value,
            reading.what(),
            reading.written
        ),
    }
}

/// A type error at a reading's field says why the kubelet sees a boolean or
/// a number there, and how to write the string.
pub(crate) fn explain(err: ConfigError, readings: &[Yaml11Reading]) -> ConfigError {
    let ConfigError::WrongType {
        path,
        expected,
        found,
    } = err
    else {
        return err;
    };
    let Some(reading) = readings.iter().find(|r| r.is_under(&path)) else {
        return ConfigError::WrongType {
            path,
            expected,
            found,
        };
    };
    let found = format!(
        "{found}: the kubelet reads YAML 1.1, where the unquoted {} is the {} {}, and \
         refuses it here; quote it: {:?}",
        reading.written,
        reading.what(),
        reading.value,
        reading.written
    );
    ConfigError::WrongType {
        path,
        expected,
        found,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn yaml11_booleans_are_go_yaml_v2s() {
        for word in ["y", "Y", "yes", "Yes", "YES", "on", "On", "ON"] {
            assert_eq!(kubelet_reading(word), Some(json!(true)), "{word}");
        }
        for word in ["n", "N", "no", "No", "NO", "off", "Off", "OFF"] {
            assert_eq!(kubelet_reading(word), Some(json!(false)), "{word}");
        }
        // Other spellings are strings to go-yaml v2 as well.
        for word in ["yEs", "oN", "nO", "OfF", "ye", "onn", "t", "f", "enabled"] {
            assert_eq!(kubelet_reading(word), None, "{word}");
        }
    }

    #[test]
    fn numbers_follow_go_yaml_v2() {
        for (text, value) in [
            ("0755", json!(493)),
            ("-010", json!(-8)),
            ("1_000", json!(1000)),
            ("0X1F", json!(31)),
            ("0B101", json!(5)),
            ("0O17", json!(15)),
            ("0x_1f", json!(31)),
            ("08", json!(8)),
            ("09.5", json!(9.5)),
            ("1_000.5", json!(1000.5)),
            ("18446744073709551615", json!(u64::MAX)),
        ] {
            assert_eq!(kubelet_reading(text), Some(value), "{text}");
        }
        // Strings to go-yaml v2 too: base 60 is not resolved, timestamps
        // stay strings in an untyped decode, and the rest is not a number.
        for text in [
            "1:30",
            "190:20:30",
            "2001-12-14",
            "0x",
            "1.2.3",
            "10Gi",
            "+-1",
            "0x+1",
            "e5",
            "1e",
            "",
        ] {
            assert_eq!(kubelet_reading(text), None, "{text}");
        }
    }

    #[test]
    fn the_float_pattern_is_go_yamls() {
        for text in ["1.", ".5", "-1.5e+3", "1e5", "+2E-2", "0.0"] {
            assert!(yaml_style_float(text), "{text}");
        }
        for text in [".", "1.e", "e1", "1e+", "--1", "1.5.", "inf", ".inf"] {
            assert!(!yaml_style_float(text), "{text}");
        }
    }

    #[test]
    fn tags_are_seen_before_a_scalar() {
        let tagged = |doc: &str, scalar: &str| {
            let at = doc.rfind(scalar).expect("scalar in doc");
            is_tagged(doc.as_bytes(), at)
        };
        assert!(tagged("a: !!str yes", "yes"));
        assert!(tagged("a: !!str &x yes", "yes"));
        assert!(tagged("a: [!!str yes]", "yes"));
        assert!(tagged("a:\n  !custom\n  on", "on"));
        assert!(!tagged("a: yes", "yes"));
        assert!(!tagged("a: &x yes", "yes"));
        assert!(!tagged("yes", "yes"));
        assert!(!tagged("- [a, on]", "on"));
        // The look-back is bounded.
        let far = format!("a: !!str {}yes", " ".repeat(TAG_LOOKBACK));
        assert!(!tagged(&far, "yes"));
    }

    #[test]
    fn warnings_say_what_to_write() {
        let reading = Yaml11Reading::new("serializeImagePulls".into(), "no", json!(false));
        assert_eq!(
            reading.warning().to_string(),
            "serializeImagePulls: the unquoted no is read as false, as the kubelet reads it; \
             write false (YAML 1.1 reads no as false; YAML 1.2 as the string \"no\")"
        );
        let hostile = YamlWarning {
            path: "featureGates.\u{1b}[31mX".into(),
            written: "on".into(),
            read_as: "true".into(),
        };
        assert!(hostile
            .to_string()
            .starts_with("featureGates.\\u{1b}[31mX: "));
        let long = "1".repeat(100);
        let reading = Yaml11Reading::new("x".into(), &long, json!(1));
        assert_eq!(reading.written.chars().count(), SHOWN_CHARS + 1);
        assert!(reading.is_under("x"));
        let item = Yaml11Reading::new("a[0].value".into(), "on", json!(true));
        assert!(item.is_under("a") && item.is_under("a[0]") && !item.is_under("a[0].v"));
    }
}
