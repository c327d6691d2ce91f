//! Decoding a config document (JSON or YAML) into a JSON value, strictly:
//! size limit, nesting limit (checked by a byte pre-scan before any parser
//! runs, see `nesting`), duplicate keys, bounded alias expansion, exact JSON
//! floats, and no YAML 1.1 ambiguities.

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::error::{ConfigError, Format};
use super::fields::describe;
use super::nesting::{check_nesting, MAX_NESTING_DEPTH};
use super::MAX_CONFIG_BYTES;

/// How much a document may weigh once decoded (one unit per value plus one
/// per byte of every string and key). A document without YAML aliases
/// weighs at most about twice its size; the limit stops alias "bombs".
const MAX_DOCUMENT_WEIGHT: usize = 4 * MAX_CONFIG_BYTES;

/// Decodes a JSON (first non-whitespace byte `{`) or YAML document of at
/// most [`MAX_CONFIG_BYTES`], nested at most [`MAX_NESTING_DEPTH`] levels,
/// whose top level is a mapping.
pub(super) fn decode_document(bytes: &[u8]) -> Result<Map<String, Value>, ConfigError> {
    check_bounds(bytes)?;
    let (format, value) = decode(bytes)?;
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
    Ok(document)
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

    fn string<E: de::Error>(&self, path: &Path<'_>, text: &str) -> Result<(), E> {
        self.charge(1 + text.len())?;
        if self.format == Format::Yaml {
            if let Some(reading) = yaml11_reading(text) {
                return Err(E::custom(format!(
                    "the value {text:?} of {path} is ambiguous: the kubelet reads YAML 1.1, \
                     where it is {reading}, kubelet-pivot reads YAML 1.2, where it is a string; \
                     write it unambiguously (true/false, a decimal number) or use JSON"
                )));
            }
        }
        Ok(())
    }
}

/// What a plain YAML 1.1 scalar (the kubelet's sigs.k8s.io/yaml) means when
/// YAML 1.2 (serde_yaml_ng) reads it as a string; quoting is not visible
/// through serde, so quoted strings are caught too.
pub(super) fn yaml11_reading(text: &str) -> Option<&'static str> {
    const BOOLEANS: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
        "OFF",
    ];
    if BOOLEANS.contains(&text) {
        return Some("a boolean");
    }
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let is_decimal_head = |s: &str| {
        s.as_bytes().split_first().is_some_and(|(first, rest)| {
            (b'1'..=b'9').contains(first) && rest.iter().all(|c| c.is_ascii_digit() || *c == b'_')
        })
    };
    if let Some((b'0', rest)) = unsigned.as_bytes().split_first() {
        if !rest.is_empty() && rest.iter().all(|c| matches!(c, b'0'..=b'7' | b'_')) {
            return Some("an octal integer");
        }
    }
    if unsigned.contains('_') && is_decimal_head(unsigned) {
        return Some("an integer");
    }
    if let Some((head, tail)) = unsigned.split_once(':') {
        let sexagesimal_part = |part: &str| {
            let b = part.as_bytes();
            match b {
                [d] => d.is_ascii_digit(),
                [t, d] => (b'0'..=b'5').contains(t) && d.is_ascii_digit(),
                _ => false,
            }
        };
        if is_decimal_head(head) && tail.split(':').all(sexagesimal_part) {
            return Some("a base-60 integer");
        }
    }
    None
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

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.ctx.string(&self.path, v)?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.ctx.string(&self.path, &v)?;
        Ok(Value::String(v))
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

fn decode(bytes: &[u8]) -> Result<(Format, Value), ConfigError> {
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
        Ok(value) => Ok((format, value)),
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

    #[test]
    fn yaml_1_1_ambiguities_are_rejected() {
        for (body, reading) in [
            ("failSwapOn: yes", "a boolean"),
            ("cgroupsPerQOS: off", "a boolean"),
            ("staticPodPath: \"0755\"", "an octal integer"),
            ("logging:\n  verbosity: 1_000", "an integer"),
            ("clusterDomain: 1:30", "a base-60 integer"),
        ] {
            match parse_error(body) {
                ConfigError::Parse {
                    format: Format::Yaml,
                    message,
                    ..
                } => {
                    assert!(
                        message.contains("ambiguous") && message.contains(reading),
                        "{message}"
                    )
                }
                other => panic!("{body:?}: unexpected {other:?}"),
            }
        }
        // The same strings are plain strings in JSON.
        let json = br#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","clusterDomain":"yes"}"#;
        KubeletConfig::parse_and_validate(json).expect("JSON has no such ambiguity");
        valid("clusterDomain: cluster.local\nfailSwapOn: true\nreservedSystemCPUs: \"0\"");
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
