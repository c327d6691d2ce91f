//! Decoding a config document (JSON or YAML) into a JSON value, strictly:
//! size limit, nesting limit (checked by a byte pre-scan before any parser
//! runs, see `nesting`), duplicate keys, bounded alias expansion, exact JSON
//! floats, and plain YAML scalars read as the kubelet reads them (YAML 1.1,
//! see `yaml11`).

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::error::{ConfigError, Format};
use super::fields::describe;
use super::nesting::{check_nesting, MAX_NESTING_DEPTH};
use super::yaml11::{self, Yaml11Reading};
use super::MAX_CONFIG_BYTES;

/// How much a document may weigh once decoded (one unit per value plus one
/// per byte of every string and key). A document without YAML aliases
/// weighs at most about twice its size; the limit stops alias "bombs".
const MAX_DOCUMENT_WEIGHT: usize = 4 * MAX_CONFIG_BYTES;

/// Decodes a JSON (first non-whitespace byte `{`) or YAML document of at
/// most [`MAX_CONFIG_BYTES`], nested at most [`MAX_NESTING_DEPTH`] levels,
/// whose top level is a mapping.
pub(super) fn decode_document(bytes: &[u8]) -> Result<Decoded, ConfigError> {
    check_bounds(bytes)?;
    let (format, value, readings) = decode(bytes)?;
    let document = match value {
        Value::Object(document) => document,
        other => {
            return Err(ConfigError::Parse {
                format,
                line: None,
                column: None,
                message: format!(
                    "expected a mapping at the top level, found {}",
                    describe(&other)
                ),
            })
        }
    };
    Ok(Decoded { document, readings })
}

/// A decoded document and the plain scalars in it read with the kubelet's
/// YAML 1.1 meaning (to be judged once the schema has typed the document).
pub(super) struct Decoded {
    pub(super) document: Map<String, Value>,
    pub(super) readings: Vec<Yaml11Reading>,
}

/// The format a document is read as: JSON when its first non-whitespace
/// byte is `{`.
fn format_of(bytes: &[u8]) -> Format {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Format::Json,
        _ => Format::Yaml,
    }
}

/// The cheap checks that run before any parser sees the bytes: size, then
/// nesting depth (linear time; the YAML scanner is quadratic in depth).
pub(super) fn check_bounds(bytes: &[u8]) -> Result<(), ConfigError> {
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            size: bytes.len(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    check_nesting(bytes, format_of(bytes)).map_err(|at| ConfigError::TooDeep {
        limit: MAX_NESTING_DEPTH,
        line: at.line,
        column: at.column,
    })
}

/// Where a value sits in the document, built lazily for error messages.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(Path::Root, key) => f.write_str(key),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

struct DecodeCtx<'a> {
    format: Format,
    /// JSON only: the number literals of the document, in order, and how many
    /// have been decoded (see [`json_number_literals`]).
    json_numbers: Vec<&'a [u8]>,
    numbers_seen: Cell<usize>,
    /// Weight left before the document counts as too large.
    budget: Cell<usize>,
    /// Path of a duplicate key, when that is what failed.
    duplicate: RefCell<Option<String>>,
    /// The document, to see where a scalar the parser lends sits in it.
    source: &'a [u8],
    /// Plain scalars read with the kubelet's YAML 1.1 meaning.
    readings: RefCell<Vec<Yaml11Reading>>,
}

impl DecodeCtx<'_> {
    /// A float as the document wrote it. serde_json's default float parser
    /// is not correctly rounded (its `float_roundtrip` feature is off), so a
    /// JSON literal is read again with the standard library's parser, which
    /// is; YAML floats are parsed that way already. Without this, the same
    /// document hashes differently as JSON and as YAML.
    fn exact_float(&self, parsed: f64) -> f64 {
        if self.format != Format::Json {
            return parsed;
        }
        let literal = self
            .json_numbers
            .get(self.numbers_seen.get().wrapping_sub(1));
        literal
            .and_then(|text| std::str::from_utf8(text).ok())
            .and_then(|text| text.parse::<f64>().ok())
            .filter(|exact| exact.is_finite())
            .unwrap_or(parsed)
    }

    fn count_number(&self) {
        self.numbers_seen.set(self.numbers_seen.get() + 1);
    }

    fn charge<E: de::Error>(&self, weight: usize) -> Result<(), E> {
        let left = self.budget.get();
        if weight > left {
            return Err(E::custom(format!(
                "document expands to more than {MAX_DOCUMENT_WEIGHT} values and characters \
                 (YAML aliases?)"
            )));
        }
        self.budget.set(left - weight);
        Ok(())
    }

    /// A string the parser found. A plain (unquoted, untagged) YAML scalar
    /// that the kubelet's YAML 1.1 reads as something else than a string
    /// becomes the kubelet's value, and is recorded (see [`yaml11`]).
    ///
    /// serde_yaml_ng hands a scalar over as a slice of the document
    /// (`visit_borrowed_str`) exactly when its value is its text: a
    /// single-line plain scalar, or a quoted one without escapes, whose
    /// quotes sit just outside the slice. Anything else (escapes, folded
    /// lines, block scalars) is never read as a YAML 1.1 boolean or number.
    fn string<E: de::Error>(
        &self,
        path: &Path<'_>,
        text: &str,
        borrowed: bool,
    ) -> Result<Value, E> {
        self.charge(1 + text.len())?;
        if self.format == Format::Yaml && borrowed {
            if let Some(value) = yaml11::kubelet_reading(text).filter(|_| self.is_plain(text)) {
                // Each reading keeps its path: it weighs as much (aliases
                // of a long-named anchor must not multiply it unbounded).
                let path = path.to_string();
                self.charge(path.len())?;
                self.readings
                    .borrow_mut()
                    .push(Yaml11Reading::new(path, text, value.clone()));
                return Ok(value);
            }
        }
        Ok(Value::String(text.to_owned()))
    }

    /// Whether `text`, a slice of the document, is a plain untagged scalar.
    fn is_plain(&self, text: &str) -> bool {
        let start = (text.as_ptr() as usize).wrapping_sub(self.source.as_ptr() as usize);
        let end = start.wrapping_add(text.len());
        if start > self.source.len() || end > self.source.len() || end < start {
            return false;
        }
        let before = start.checked_sub(1).and_then(|i| self.source.get(i));
        let quoted = matches!(before, Some(q @ (b'"' | b'\'')) if self.source.get(end) == Some(q));
        !quoted && !yaml11::is_tagged(self.source, start)
    }
}

struct ValueSeed<'c, 'p> {
    ctx: &'c DecodeCtx<'c>,
    path: Path<'p>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-compatible value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.ctx.charge(1)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.ctx.charge(1)?;
        self.ctx.count_number();
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.ctx.charge(1)?;
        self.ctx.count_number();
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        match i64::try_from(v) {
            Ok(v) => self.visit_i64(v),
            Err(_) => Err(E::custom(format!(
                "integer {v} at {} is out of range",
                self.path
            ))),
        }
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format!(
                "integer {v} at {} is out of range",
                self.path
            ))),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.ctx.charge(1)?;
        self.ctx.count_number();
        let v = self.ctx.exact_float(v);
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} at {} is not a finite number", self.path)))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Value, E> {
        self.ctx.string(&self.path, v, true)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.ctx.string(&self.path, v, false)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.ctx.charge(1)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.ctx.charge(1)?;
        let mut items = Vec::new();
        loop {
            let seed = ValueSeed {
                ctx: self.ctx,
                path: Path::Index(&self.path, items.len()),
            };
            match seq.next_element_seed(seed)? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.ctx.charge(1)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.ctx.charge(key.len())?;
            if out.contains_key(&key) {
                let path = Path::Key(&self.path, &key).to_string();
                let message = format!("duplicate key {path:?}");
                *self.ctx.duplicate.borrow_mut() = Some(path);
                return Err(de::Error::custom(message));
            }
            let value = map.next_value_seed(ValueSeed {
                ctx: self.ctx,
                path: Path::Key(&self.path, &key),
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// The number literals of a JSON document in document order (the order in
/// which serde_json hands numbers to a visitor). Anything that is not inside
/// a string and starts with '-' or a digit is a number; on malformed input
/// serde_json fails anyway.
fn json_number_literals(bytes: &[u8]) -> Vec<&[u8]> {
    let mut literals = Vec::new();
    let mut at = 0;
    let mut in_string = false;
    while let Some(&c) = bytes.get(at) {
        if in_string {
            match c {
                b'\\' => at += 2,
                b'"' => {
                    in_string = false;
                    at += 1;
                }
                _ => at += 1,
            }
            continue;
        }
        match c {
            b'"' => {
                in_string = true;
                at += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                while bytes
                    .get(at)
                    .is_some_and(|c| matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                {
                    at += 1;
                }
                literals.push(bytes.get(start..at).unwrap_or_default());
            }
            _ => at += 1,
        }
    }
    literals
}

fn decode(bytes: &[u8]) -> Result<(Format, Value, Vec<Yaml11Reading>), ConfigError> {
    let format = format_of(bytes);
    let ctx = DecodeCtx {
        json_numbers: match format {
            Format::Json => json_number_literals(bytes),
            Format::Yaml => Vec::new(),
        },
        numbers_seen: Cell::new(0),
        format,
        budget: Cell::new(MAX_DOCUMENT_WEIGHT),
        duplicate: RefCell::new(None),
        source: bytes,
        readings: RefCell::new(Vec::new()),
    };
    let seed = || ValueSeed {
        ctx: &ctx,
        path: Path::Root,
    };
    let result = match format {
        Format::Json => {
            let mut deserializer = serde_json::Deserializer::from_slice(bytes);
            seed()
                .deserialize(&mut deserializer)
                .and_then(|value| deserializer.end().map(|()| value))
                .map_err(|e| {
                    let known = |n: usize| (n > 0).then_some(n);
                    (e.to_string(), known(e.line()), known(e.column()))
                })
        }
        Format::Yaml => seed()
            .deserialize(serde_yaml_ng::Deserializer::from_slice(bytes))
            .map_err(|e| {
                let at = e.location();
                (
                    e.to_string(),
                    at.as_ref().map(|l| l.line()),
                    at.as_ref().map(|l| l.column()),
                )
            }),
    };
    match result {
        Ok(value) => Ok((format, value, ctx.readings.into_inner())),
        Err((message, line, column)) => Err(match ctx.duplicate.into_inner() {
            // serde_yaml_ng places errors raised while visiting a mapping at
            // the start of that mapping, not at the repeated key: say nothing
            // rather than point at the wrong line.
            Some(path) if format == Format::Yaml => ConfigError::DuplicateKey {
                path,
                line: None,
                column: None,
            },
            Some(path) => ConfigError::DuplicateKey { path, line, column },
            None => ConfigError::Parse {
                format,
                line,
                column,
                message,
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{parse_error, valid, yaml_doc};
    use crate::{FieldValue, KubeletConfig};

    use super::*;

    #[test]
    fn json_duplicate_keys_are_rejected() {
        let cases = [
            (
                r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","port":10250,"port":10251}"#,
                "port",
            ),
            (
                r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","evictionHard":{"memory.available":"100Mi","memory.available":"1Gi"}}"#,
                "evictionHard.memory.available",
            ),
            // The same key once escaped: still the same key.
            (
                r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","port":1,"po\u0072t":2}"#,
                "port",
            ),
            (
                r#"{"kind":"KubeletConfiguration","kind":"KubeletConfiguration"}"#,
                "kind",
            ),
        ];
        for (doc, expected) in cases {
            match KubeletConfig::parse(doc.as_bytes()) {
                Err(ConfigError::DuplicateKey { path, line, column }) => {
                    assert_eq!(path, expected);
                    assert_eq!(line, Some(1));
                    assert!(column.is_some());
                }
                other => panic!("{doc}: unexpected {other:?}"),
            }
        }
        let err = KubeletConfig::parse(cases[0].0.as_bytes()).unwrap_err();
        assert!(
            err.to_string().starts_with("duplicate key \"port\""),
            "{err}"
        );
    }

    #[test]
    fn yaml_duplicate_keys_are_rejected() {
        for (body, expected) in [
            ("port: 10250\nport: 10251", "port"),
            (
                "evictionHard:\n  memory.available: 100Mi\n  memory.available: 1Gi",
                "evictionHard.memory.available",
            ),
            ("logging:\n  format: text\n  format: json", "logging.format"),
        ] {
            match parse_error(body) {
                ConfigError::DuplicateKey { path, line, column } => {
                    assert_eq!(path, expected);
                    assert_eq!((line, column), (None, None), "{body:?}");
                }
                other => panic!("{body:?}: unexpected {other:?}"),
            }
        }
        let doc = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nkind: KubeletConfiguration\n";
        assert!(matches!(
            KubeletConfig::parse(doc.as_bytes()),
            Err(ConfigError::DuplicateKey { path, .. }) if path == "kind"
        ));
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let json = b"{\n  \"kind\": \"KubeletConfiguration\",\n  \"port\": ,\n}";
        match KubeletConfig::parse(json) {
            Err(ConfigError::Parse {
                format,
                line,
                column,
                ..
            }) => {
                assert_eq!(format, Format::Json);
                assert_eq!(line, Some(3));
                assert!(column.is_some());
            }
            other => panic!("unexpected {other:?}"),
        }
        let yaml = b"kind: KubeletConfiguration\nevictionHard: [\n  a: b\nport: 1\n";
        match KubeletConfig::parse(yaml) {
            Err(ConfigError::Parse { format, line, .. }) => {
                assert_eq!(format, Format::Yaml);
                assert!(line.is_some());
            }
            other => panic!("unexpected {other:?}"),
        }
        // Trailing garbage after a JSON document.
        let trailing =
            br#"{"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1"} x"#;
        assert!(matches!(
            KubeletConfig::parse(trailing),
            Err(ConfigError::Parse { .. })
        ));
    }

    #[test]
    fn documents_that_are_not_one_mapping_are_rejected() {
        for doc in [
            &b""[..],
            b"   \n",
            b"# only a comment\n",
            b"[1, 2]",
            b"42",
            b"\"KubeletConfiguration\"",
            b"kind: KubeletConfiguration\n---\nkind: KubeletConfiguration\n",
        ] {
            assert!(
                matches!(KubeletConfig::parse(doc), Err(ConfigError::Parse { .. })),
                "{:?}",
                String::from_utf8_lossy(doc)
            );
        }
    }

    #[test]
    fn documents_over_one_mebibyte_are_rejected() {
        let mut doc = yaml_doc("staticPodPath: /etc/kubernetes/manifests");
        doc.push(b'#');
        doc.resize(MAX_CONFIG_BYTES, b'x');
        doc.push(b'\n');
        match KubeletConfig::parse(&doc) {
            Err(ConfigError::TooLarge { size, limit }) => {
                assert_eq!(size, MAX_CONFIG_BYTES + 1);
                assert_eq!(limit, MAX_CONFIG_BYTES);
            }
            other => panic!("unexpected {other:?}"),
        }
        doc.truncate(MAX_CONFIG_BYTES);
        KubeletConfig::parse_and_validate(&doc).expect("exactly the limit is accepted");
    }

    #[test]
    fn yaml_alias_expansion_is_bounded() {
        let item = "x".repeat(100);
        let items = vec![item; 1000].join(", ");
        let aliases = vec!["*a"; 5000].join(", ");
        let body = format!("logging:\n  a: &a [{items}]\n  b: [{aliases}]");
        match parse_error(&body) {
            ConfigError::Parse { message, .. } => {
                assert!(message.contains("YAML aliases"), "{message}")
            }
            other => panic!("unexpected {other:?}"),
        }
        // Small aliases are fine.
        valid("logging:\n  a: &v 1\n  b: *v");
    }

    fn warnings_of(body: &str) -> Vec<String> {
        valid(body)
            .warnings()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn quoted_scalars_are_strings() {
        for body in [
            "staticPodPath: \"0755\"",
            "staticPodPath: '0755'",
            "clusterDomain: \"yes\"",
            "clusterDomain: 'on'",
            "clusterDomain: \"y\"",
            "clusterDNS: [\"on\", 'off', \"1_000\"]",
            "clusterDomain: \"y\\u0065s\"",
            "clusterDomain: !!str yes",
            "clusterDomain: |\n  yes",
            "clusterDomain: 1:30",
        ] {
            let config = valid(body);
            assert!(config.warnings().is_empty(), "{body:?}");
        }
        let config = valid("clusterDomain: \"yes\"\nclusterDNS: ['on', \"n\"]");
        assert_eq!(
            config.field("clusterDomain"),
            Some(&FieldValue::Str("yes".into()))
        );
        assert_eq!(
            config.field("clusterDNS"),
            Some(&FieldValue::StrList(vec!["on".into(), "n".into()]))
        );
    }

    #[test]
    fn plain_yaml_1_1_scalars_take_the_kubelets_meaning_in_typed_fields() {
        let config = valid(
            "serializeImagePulls: no\nfailSwapOn: Off\nmaxPods: 0110\nfeatureGates: {CPUManagerPolicyAlphaOptions: Y}",
        );
        assert_eq!(
            config.field("serializeImagePulls"),
            Some(&FieldValue::Bool(false))
        );
        assert_eq!(config.field("failSwapOn"), Some(&FieldValue::Bool(false)));
        assert_eq!(config.field("maxPods"), Some(&FieldValue::Int(72)));
        let warnings = warnings_of("serializeImagePulls: no");
        assert_eq!(
            warnings,
            [
                "serializeImagePulls: the unquoted no is read as false, as the kubelet reads it; \
              write false (YAML 1.1 reads no as false; YAML 1.2 as the string \"no\")"
            ]
        );
        assert_eq!(warnings_of("maxPods: 1_10\nfailSwapOn: yes").len(), 2);
        // The same document as JSON has no such reading.
        let json = br#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","clusterDomain":"yes"}"#;
        let config = KubeletConfig::parse_and_validate(json).expect("JSON strings are strings");
        assert!(config.warnings().is_empty());
    }

    #[test]
    fn plain_yaml_1_1_scalars_elsewhere_are_refused_with_what_to_write() {
        for (body, path, says) in [
            ("staticPodPath: yes", "staticPodPath", "quote it: \"yes\""),
            ("clusterDNS: [on]", "clusterDNS", "quote it: \"on\""),
            (
                "evictionHard:\n  memory.available: 0755",
                "evictionHard.memory.available",
                "quote it: \"0755\"",
            ),
            ("maxPods: yes", "maxPods", "the boolean true"),
        ] {
            match parse_error(body) {
                err @ ConfigError::WrongType { .. } => {
                    let message = err.to_string();
                    assert!(
                        message.contains(path) && message.contains(says),
                        "{message}"
                    );
                }
                other => panic!("{body:?}: unexpected {other:?}"),
            }
        }
        for (body, says) in [
            (
                "registerWithTaints:\n- key: a\n  value: on\n  effect: NoSchedule",
                "registerWithTaints[0].value: the unquoted on is the boolean true to the kubelet",
            ),
            (
                "logging:\n  verbosity: 1_000",
                "write what you mean: 1000 for the number, or \"1_000\" quoted",
            ),
        ] {
            match parse_error(body) {
                ConfigError::Parse {
                    format: Format::Yaml,
                    message,
                    ..
                } => assert!(message.contains(says), "{message}"),
                other => panic!("{body:?}: unexpected {other:?}"),
            }
        }
    }

    /// A YAML 1.1 reading keeps its path: aliases under a long key weigh
    /// that much each, so they cannot make a megabyte of paths.
    #[test]
    fn yaml_1_1_readings_under_aliases_are_bounded() {
        let key = "k".repeat(100_000);
        let aliases = vec!["*a"; 100_000].join(", ");
        let body = format!("logging:\n  a: &a no\n  ? {key}\n  : [{aliases}]");
        let started = std::time::Instant::now();
        match parse_error(&body) {
            ConfigError::Parse { message, .. } => {
                assert!(message.contains("YAML aliases"), "{message}")
            }
            other => panic!("unexpected {other:?}"),
        }
        eprintln!("refused in {:?}", started.elapsed());
    }

    #[test]
    fn json_floats_are_read_exactly() {
        // serde_json's default parser reads this one ULP off.
        let json = br#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","memoryThrottlingFactor":0.9012025876704827,"logging":{"x":[1,-2.5e-3,"3.5",{"y":1e2}]}}"#;
        let config = KubeletConfig::parse(json).expect("parses");
        assert_eq!(
            config.field("memoryThrottlingFactor"),
            Some(&FieldValue::Float(
                "0.9012025876704827".parse().expect("float")
            ))
        );
        assert_eq!(
            config.effective()["logging"]["x"][1],
            serde_json::json!(-0.0025)
        );
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryThrottlingFactor: 0.9012025876704827\nlogging:\n  x: [1, -2.5e-3, \"3.5\", {y: 1e2}]\n";
        assert_eq!(
            KubeletConfig::parse(yaml.as_bytes())
                .expect("parses")
                .hash(),
            config.hash()
        );
        let literals: Vec<&[u8]> =
            json_number_literals(br#"{"a":"1\"2","b":[-1,2.5e+3],"c":true}"#);
        assert_eq!(literals, vec![&b"-1"[..], &b"2.5e+3"[..]]);
    }

    #[test]
    fn non_finite_and_oversized_numbers_are_rejected() {
        for body in [
            "memoryThrottlingFactor: .nan",
            "memoryThrottlingFactor: .inf",
            "maxOpenFiles: 99999999999999999999999",
        ] {
            assert!(
                matches!(parse_error(body), ConfigError::Parse { .. }),
                "{body:?}"
            );
        }
    }

    /// 1 MiB of nesting in each style is refused by the pre-scan, before the
    /// YAML scanner (quadratic in depth) sees it, with an actionable error.
    #[test]
    fn a_megabyte_of_nesting_is_refused_before_parsing() {
        let fill = |unit: &str, prefix: &str| {
            let mut doc = prefix.to_owned();
            while doc.len() + unit.len() <= MAX_CONFIG_BYTES {
                doc.push_str(unit);
            }
            doc.into_bytes()
        };
        let mut block = String::new();
        for level in 0.. {
            let line = format!("{}a:\n", " ".repeat(level % 2000));
            if block.len() + line.len() > MAX_CONFIG_BYTES {
                break;
            }
            block.push_str(&line);
        }
        for (what, doc) in [
            ("[", fill("[", "a: ")),
            ("{a: ", fill("{a: ", "a: ")),
            ("json", fill("[", "{\"a\": ")),
            ("- ", fill("- ", "")),
            ("block", block.into_bytes()),
        ] {
            let started = std::time::Instant::now();
            match KubeletConfig::parse(&doc) {
                Err(err @ ConfigError::TooDeep { .. }) => {
                    let message = err.to_string();
                    assert!(
                        message.contains(&format!("deeper than {MAX_NESTING_DEPTH} levels")),
                        "{message}"
                    );
                    eprintln!(
                        "{what}: {} bytes refused in {:?}",
                        doc.len(),
                        started.elapsed()
                    );
                }
                other => panic!("{what}: unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn realistic_configs_are_not_too_deep() {
        let doc = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
            logging:\n  format: json\n  options:\n    json:\n      infoBufferSize: \"0\"\n\
            reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\n\
            evictionHard: {memory.available: \"100Mi\"}\n\
            shutdownGracePeriodByPodPriority:\n  - priority: 1\n    shutdownGracePeriodSeconds: 10\n";
        KubeletConfig::check_bounds(doc.as_bytes()).expect("realistic nesting passes");
    }
}
