//! The kubelet's config file (`kubelet.config.k8s.io/v1beta1`
//! `KubeletConfiguration`): strict parsing, the kubelet's own range checks,
//! v1beta1 defaulting, and the versioned hash of the effective config.
//!
//! A [`KubeletConfig`] keeps the document as it was given (a JSON object,
//! keys as written) plus typed views of the fields this module models
//! ([`KubeletConfig::field`]). Every known top-level v1beta1 field is
//! accepted; the ones that are not modelled are carried through untouched.
//! Anything else is rejected with its path, as are duplicate keys in JSON and
//! YAML, a wrong `kind`/`apiVersion` and values of the wrong type.
//!
//! - [`KubeletConfig::parse`] rejects what the kubelet would fail to *load*
//!   (syntax, unknown fields, wrong types, bad Go durations);
//! - [`KubeletConfig::validate`] runs the kubelet's range checks (from
//!   `pkg/kubelet/apis/config/validation`, the eviction threshold parser and
//!   the node-allocatable reservation parser) on the effective config and
//!   reports every failure at once;
//! - [`KubeletConfig::effective`] is the file the kubelet reads: v1beta1
//!   defaults filled in for unset modelled fields, and kubelet-pivot's own
//!   fields (`crashLoopThreshold`, `configTrialDuration`, from the Dynamic
//!   Kubelet Configuration proposal) removed, because the kubelet does not
//!   know them;
//! - [`KubeletConfig::hash`] is the SHA-256 of the canonical JSON of the
//!   effective config ([`HASH_ALGORITHM`]): independent of key order,
//!   whitespace and of JSON versus YAML.
//!
//! When in doubt this module is stricter than the kubelet, never more
//! lenient: refusing a config the kubelet would accept leaves the node on its
//! last-known-good config, accepting one it would refuse makes it crash-loop.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

/// The only `apiVersion` accepted.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The only `kind` accepted.
pub const KIND: &str = "KubeletConfiguration";
/// Version of the effective-config hash algorithm, stored beside every hash.
pub const HASH_ALGORITHM: &str = "sha256-canonical-json-v1";
/// Kubelet restarts tolerated within the trial period (DKC proposal default).
pub const DEFAULT_CRASH_LOOP_THRESHOLD: u32 = 10;
/// Upper bound of `crashLoopThreshold` (DKC proposal: 0..=10).
pub const MAX_CRASH_LOOP_THRESHOLD: u32 = 10;
/// How long a new config is on trial (DKC proposal default: 10 minutes).
pub const DEFAULT_CONFIG_TRIAL_DURATION: Duration = Duration::from_secs(10 * 60);
/// Largest config document accepted, in bytes.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;
/// kubelet-pivot's field: restarts tolerated within the trial period.
pub const CRASH_LOOP_THRESHOLD_FIELD: &str = "crashLoopThreshold";
/// kubelet-pivot's field: length of a new config's trial period.
pub const CONFIG_TRIAL_DURATION_FIELD: &str = "configTrialDuration";

/// How much a document may weigh once decoded (one unit per value plus one
/// per byte of every string and key). A document without YAML aliases
/// weighs at most about twice its size; the limit stops alias "bombs".
const MAX_DOCUMENT_WEIGHT: usize = 4 * MAX_CONFIG_BYTES;

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// The syntax a config document was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The first non-whitespace byte was `{`.
    Json,
    /// Anything else.
    Yaml,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Json => "JSON",
            Format::Yaml => "YAML",
        })
    }
}

/// One failed validation rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FieldError {
    /// Path of the offending field, e.g. `port` or
    /// `evictionHard.memory.available`.
    pub path: String,
    /// What is wrong, in kubelet style, starting with the path:
    /// `port (70000) must be between 1 and 65535, inclusive`.
    pub message: String,
}

/// Why a config document was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The document is larger than [`MAX_CONFIG_BYTES`].
    #[error("config is {size} bytes, larger than the {limit}-byte limit")]
    TooLarge {
        /// Size of the document.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Not well-formed JSON/YAML, or not a mapping at the top level.
    #[error("failed to parse config as {format}: {message}")]
    Parse {
        /// The syntax the document was read as.
        format: Format,
        /// One-based line of the error, when the parser gives it.
        line: Option<usize>,
        /// One-based column of the error, when the parser gives it.
        column: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// A mapping has the same key twice.
    #[error("duplicate key {path:?}{}", location(.line, .column))]
    DuplicateKey {
        /// Path of the repeated key.
        path: String,
        /// One-based line (JSON only: YAML's parser does not locate the key).
        line: Option<usize>,
        /// One-based column (JSON only).
        column: Option<usize>,
    },
    /// A field that `KubeletConfiguration` v1beta1 does not have.
    #[error("unknown field {path:?}")]
    UnknownField {
        /// Path of the unknown field, e.g. `fooBar` or
        /// `authentication.webhook.fooBar`.
        path: String,
    },
    /// A value the kubelet could not decode into the field's type.
    #[error("field {path:?} must be {expected}, found {found}")]
    WrongType {
        /// Path of the field.
        path: String,
        /// What the field holds.
        expected: &'static str,
        /// What was found instead.
        found: String,
    },
    /// `kind` missing or not [`KIND`].
    #[error("{}", type_meta_message("kind", KIND, .found))]
    WrongKind {
        /// The `kind` found, if any.
        found: Option<String>,
    },
    /// `apiVersion` missing or not [`API_VERSION`].
    #[error("{}", type_meta_message("apiVersion", API_VERSION, .found))]
    WrongApiVersion {
        /// The `apiVersion` found, if any.
        found: Option<String>,
    },
    /// The document decodes but breaks the kubelet's rules; every broken
    /// rule is listed.
    #[error("{}", invalid_message(.0))]
    Invalid(Vec<FieldError>),
}

impl ConfigError {
    /// The `Node.status.config.error` text of the Dynamic Kubelet
    /// Configuration (v1.11) table for this error.
    pub fn status_message(&self) -> &'static str {
        match self {
            ConfigError::Invalid(_) => "failed to validate config, see Kubelet log for details",
            _ => "failed to load config, see Kubelet log for details",
        }
    }
}

fn location(line: &Option<usize>, column: &Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
        (Some(line), None) => format!(" at line {line}"),
        _ => String::new(),
    }
}

fn type_meta_message(field: &str, expected: &str, found: &Option<String>) -> String {
    match found {
        None => format!("{field} is missing, it must be {expected:?}"),
        Some(found) => format!("{field} must be {expected:?}, found {found:?}"),
    }
}

fn invalid_message(errors: &[FieldError]) -> String {
    if errors.is_empty() {
        return "invalid configuration".to_owned();
    }
    errors
        .iter()
        .map(|e| format!("invalid configuration: {}", e.message))
        .collect::<Vec<_>>()
        .join("; ")
}

// ---------------------------------------------------------------------------
// Go durations
// ---------------------------------------------------------------------------

const NANOS_PER_MICRO: u64 = 1_000;
const NANOS_PER_MILLI: u64 = 1_000_000;
const NANOS_PER_SECOND: u64 = 1_000_000_000;
const NANOS_PER_MINUTE: u64 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u64 = 60 * NANOS_PER_MINUTE;
/// 1 << 63: the magnitude of Go's most negative `time.Duration`.
const GO_DURATION_MAGNITUDE_LIMIT: u64 = 1 << 63;

/// A Go `time.Duration` (signed nanoseconds), as `metav1.Duration` fields of
/// the kubelet config hold them: parsed with Go's `time.ParseDuration`
/// grammar (`"1m30s"`, `"100ms"`, `"-2h"`, `"1.5h"`, `"0"`) and displayed
/// as Go's `Duration.String()` does (`"1m30s"`, `"1h0m0s"`, `"1.5µs"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration(i64);

/// A string that is not a Go duration; the text is Go's own message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DurationError(String);

impl GoDuration {
    /// The zero duration.
    pub const ZERO: GoDuration = GoDuration(0);

    /// A duration of `nanos` nanoseconds.
    pub const fn from_nanos(nanos: i64) -> Self {
        GoDuration(nanos)
    }

    /// The duration in nanoseconds.
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// Whether the duration is below zero.
    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// The duration as a `std` one; `None` when negative.
    pub fn to_std(self) -> Option<Duration> {
        u64::try_from(self.0).ok().map(Duration::from_nanos)
    }

    /// Parses Go's `time.ParseDuration` syntax, with its overflow rules.
    pub fn parse(text: &str) -> Result<GoDuration, DurationError> {
        let invalid = || DurationError(format!("time: invalid duration {text:?}"));
        let mut rest = text.as_bytes();
        let mut negative = false;
        if let Some((&sign, tail)) = rest.split_first() {
            if sign == b'-' || sign == b'+' {
                negative = sign == b'-';
                rest = tail;
            }
        }
        if rest == b"0" {
            return Ok(GoDuration::ZERO);
        }
        if rest.is_empty() {
            return Err(invalid());
        }
        let mut total: u64 = 0;
        while let Some(&first) = rest.first() {
            if !(first == b'.' || first.is_ascii_digit()) {
                return Err(invalid());
            }
            // [0-9]*
            let before = rest.len();
            let (mut value, tail) = leading_int(rest).ok_or_else(invalid)?;
            rest = tail;
            let had_integer = rest.len() != before;
            // (\.[0-9]*)?
            let mut fraction = 0u64;
            let mut scale = 1f64;
            let mut had_fraction = false;
            if let Some((b'.', tail)) = rest.split_first() {
                let before = tail.len();
                let (f, s, tail) = leading_fraction(tail);
                fraction = f;
                scale = s;
                rest = tail;
                had_fraction = rest.len() != before;
            }
            if !had_integer && !had_fraction {
                return Err(invalid());
            }
            // The unit runs up to the next digit or '.'.
            let unit_len = rest
                .iter()
                .position(|&c| c == b'.' || c.is_ascii_digit())
                .unwrap_or(rest.len());
            if unit_len == 0 {
                return Err(DurationError(format!(
                    "time: missing unit in duration {text:?}"
                )));
            }
            let (unit_text, tail) = rest.split_at(unit_len);
            rest = tail;
            let unit = duration_unit(unit_text).ok_or_else(|| {
                DurationError(format!(
                    "time: unknown unit {:?} in duration {text:?}",
                    String::from_utf8_lossy(unit_text)
                ))
            })?;
            if value > GO_DURATION_MAGNITUDE_LIMIT / unit {
                return Err(invalid());
            }
            value *= unit;
            if fraction > 0 {
                // Same float arithmetic as Go, so results agree to the
                // nanosecond (the cast truncates, as Go's conversion does).
                value += (fraction as f64 * (unit as f64 / scale)) as u64;
                if value > GO_DURATION_MAGNITUDE_LIMIT {
                    return Err(invalid());
                }
            }
            total = total.checked_add(value).ok_or_else(invalid)?;
            if total > GO_DURATION_MAGNITUDE_LIMIT {
                return Err(invalid());
            }
        }
        if negative {
            // total <= 1 << 63, so its negation fits an i64.
            let magnitude = i128::from(total);
            return i64::try_from(-magnitude)
                .map(GoDuration)
                .map_err(|_| invalid());
        }
        i64::try_from(total).map(GoDuration).map_err(|_| invalid())
    }
}

/// Go's `leadingInt`: the leading `[0-9]*` and what follows; `None` on
/// overflow.
fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut value: u64 = 0;
    let mut used = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            break;
        }
        if value > GO_DURATION_MAGNITUDE_LIMIT / 10 {
            return None;
        }
        value = value * 10 + u64::from(c - b'0');
        if value > GO_DURATION_MAGNITUDE_LIMIT {
            return None;
        }
        used += 1;
    }
    Some((value, s.get(used..).unwrap_or_default()))
}

/// Go's `leadingFraction`: the leading `[0-9]*` after a '.', as
/// (digits, 10^digits used, rest); stops gaining precision on overflow.
fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let mut value: u64 = 0;
    let mut scale = 1f64;
    let mut overflow = false;
    let mut used = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            break;
        }
        used += 1;
        if overflow {
            continue;
        }
        if value > (GO_DURATION_MAGNITUDE_LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let next = value * 10 + u64::from(c - b'0');
        if next > GO_DURATION_MAGNITUDE_LIMIT {
            overflow = true;
            continue;
        }
        value = next;
        scale *= 10.0;
    }
    (value, scale, s.get(used..).unwrap_or_default())
}

fn duration_unit(unit: &[u8]) -> Option<u64> {
    Some(match unit {
        b"ns" => 1,
        b"us" => NANOS_PER_MICRO,
        // U+00B5 micro sign and U+03BC Greek small letter mu.
        b"\xc2\xb5s" | b"\xce\xbcs" => NANOS_PER_MICRO,
        b"ms" => NANOS_PER_MILLI,
        b"s" => NANOS_PER_SECOND,
        b"m" => NANOS_PER_MINUTE,
        b"h" => NANOS_PER_HOUR,
        _ => return None,
    })
}

/// Go's `fmtFrac`: `value / 10^precision` as (".123" without trailing
/// zeros, or "" for no fraction; the integer part).
fn go_fraction(value: u64, precision: u32) -> (String, u64) {
    let divisor = 10u64.pow(precision);
    let fraction = value % divisor;
    let integer = value / divisor;
    if fraction == 0 {
        return (String::new(), integer);
    }
    let digits = format!("{fraction:0width$}", width = precision as usize);
    (format!(".{}", digits.trim_end_matches('0')), integer)
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let magnitude = self.0.unsigned_abs();
        let sign = if self.0 < 0 { "-" } else { "" };
        if magnitude == 0 {
            return f.write_str("0s");
        }
        if magnitude < NANOS_PER_SECOND {
            let (unit, precision) = if magnitude < NANOS_PER_MICRO {
                ("ns", 0)
            } else if magnitude < NANOS_PER_MILLI {
                ("µs", 3)
            } else {
                ("ms", 6)
            };
            let (fraction, integer) = go_fraction(magnitude, precision);
            return write!(f, "{sign}{integer}{fraction}{unit}");
        }
        let (fraction, seconds) = go_fraction(magnitude, 9);
        let minutes = seconds / 60;
        let hours = minutes / 60;
        if hours > 0 {
            write!(
                f,
                "{sign}{hours}h{}m{}{fraction}s",
                minutes % 60,
                seconds % 60
            )
        } else if minutes > 0 {
            write!(f, "{sign}{minutes}m{}{fraction}s", seconds % 60)
        } else {
            write!(f, "{sign}{seconds}{fraction}s")
        }
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GoDuration::parse(s)
    }
}

// ---------------------------------------------------------------------------
// Kubernetes quantities
// ---------------------------------------------------------------------------

/// The suffix of a Kubernetes quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantitySuffix {
    /// No suffix.
    None,
    /// `n` (10^-9).
    Nano,
    /// `u` (10^-6).
    Micro,
    /// `m` (10^-3).
    Milli,
    /// `k` (10^3).
    Kilo,
    /// `M` (10^6).
    Mega,
    /// `G` (10^9).
    Giga,
    /// `T` (10^12).
    Tera,
    /// `P` (10^15).
    Peta,
    /// `E` (10^18).
    Exa,
    /// `Ki` (2^10).
    Kibi,
    /// `Mi` (2^20).
    Mebi,
    /// `Gi` (2^30).
    Gibi,
    /// `Ti` (2^40).
    Tebi,
    /// `Pi` (2^50).
    Pebi,
    /// `Ei` (2^60).
    Exbi,
    /// `e<n>` / `E<n>` (10^n).
    Exponent(i32),
}

const NAMED_SUFFIXES: &[(&str, QuantitySuffix)] = &[
    ("", QuantitySuffix::None),
    ("n", QuantitySuffix::Nano),
    ("u", QuantitySuffix::Micro),
    ("m", QuantitySuffix::Milli),
    ("k", QuantitySuffix::Kilo),
    ("M", QuantitySuffix::Mega),
    ("G", QuantitySuffix::Giga),
    ("T", QuantitySuffix::Tera),
    ("P", QuantitySuffix::Peta),
    ("E", QuantitySuffix::Exa),
    ("Ki", QuantitySuffix::Kibi),
    ("Mi", QuantitySuffix::Mebi),
    ("Gi", QuantitySuffix::Gibi),
    ("Ti", QuantitySuffix::Tebi),
    ("Pi", QuantitySuffix::Pebi),
    ("Ei", QuantitySuffix::Exbi),
];

impl QuantitySuffix {
    fn parse(text: &str) -> Option<QuantitySuffix> {
        if let Some((_, suffix)) = NAMED_SUFFIXES.iter().find(|(name, _)| *name == text) {
            return Some(*suffix);
        }
        let exponent = text.strip_prefix(['e', 'E'])?;
        let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        exponent.parse::<i32>().ok().map(QuantitySuffix::Exponent)
    }
}

impl fmt::Display for QuantitySuffix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let QuantitySuffix::Exponent(exponent) = self {
            return write!(f, "e{exponent}");
        }
        let name = NAMED_SUFFIXES
            .iter()
            .find(|(_, suffix)| suffix == self)
            .map_or("", |(name, _)| *name);
        f.write_str(name)
    }
}

/// A Kubernetes resource quantity (`"100Mi"`, `"200m"`, `"1.5Gi"`, `"1e3"`),
/// parsed with the grammar of apimachinery's `resource.ParseQuantity`:
/// `[+-]? digits [. digits] suffix`, suffix one of `n u m "" k M G T P E`,
/// `Ki Mi Gi Ti Pi Ei`, or `e<int>` / `E<int>`.
///
/// Stricter than Go in two places: at least one digit is required (Go reads
/// `"-"`, `"."` and `"e3"` as zero), and the exponent must fit an i32 (Go
/// truncates it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    /// Integer digits without leading zeros ("" for zero).
    integer: String,
    /// Fraction digits as written.
    fraction: String,
    suffix: QuantitySuffix,
}

/// A string that is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QuantityError(String);

impl Quantity {
    /// Parses a quantity.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let error = |why: &str| {
            QuantityError(format!(
                "{text:?} is not a quantity ({why}); expected e.g. \"100Mi\", \"250m\" or \"1.5Gi\""
            ))
        };
        let (negative, unsigned) = match text.as_bytes().first() {
            Some(b'-') => (true, text.get(1..).unwrap_or_default()),
            Some(b'+') => (false, text.get(1..).unwrap_or_default()),
            _ => (false, text),
        };
        let integer_len = unsigned
            .bytes()
            .position(|c| !c.is_ascii_digit())
            .unwrap_or(unsigned.len());
        let (integer, rest) = unsigned.split_at(integer_len);
        let (fraction, suffix) = match rest.strip_prefix('.') {
            Some(after_dot) => {
                let fraction_len = after_dot
                    .bytes()
                    .position(|c| !c.is_ascii_digit())
                    .unwrap_or(after_dot.len());
                after_dot.split_at(fraction_len)
            }
            None => ("", rest),
        };
        if integer.is_empty() && fraction.is_empty() {
            return Err(error("no digits"));
        }
        let suffix = QuantitySuffix::parse(suffix).ok_or_else(|| error("unknown suffix"))?;
        Ok(Quantity {
            negative,
            integer: integer.trim_start_matches('0').to_owned(),
            fraction: fraction.to_owned(),
            suffix,
        })
    }

    /// Whether the value is zero (whatever the sign and suffix).
    pub fn is_zero(&self) -> bool {
        self.integer.is_empty() && self.fraction.bytes().all(|c| c == b'0')
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative && !self.is_zero()
    }

    /// Whether the value is above zero.
    pub fn is_positive(&self) -> bool {
        !self.negative && !self.is_zero()
    }

    /// The suffix.
    pub fn suffix(&self) -> QuantitySuffix {
        self.suffix
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.negative {
            f.write_str("-")?;
        }
        f.write_str(if self.integer.is_empty() {
            "0"
        } else {
            &self.integer
        })?;
        if !self.fraction.is_empty() {
            write!(f, ".{}", self.fraction)?;
        }
        write!(f, "{}", self.suffix)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

// ---------------------------------------------------------------------------
// Eviction thresholds
// ---------------------------------------------------------------------------

/// Eviction signals the kubelet accepts (`signalToResource` in
/// `pkg/kubelet/eviction/helpers.go`; `swap.available` is not among them).
pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
];

/// The value of an eviction threshold: a quantity or a percentage.
#[derive(Debug, Clone, PartialEq)]
pub enum EvictionThreshold {
    /// An absolute amount, e.g. `100Mi`.
    Quantity(Quantity),
    /// A percentage of capacity, e.g. `10%` is `10.0`.
    Percentage(f64),
}

impl EvictionThreshold {
    /// Parses `"100Mi"` or `"10%"` (syntax only; ranges are checked by
    /// validation).
    pub fn parse(text: &str) -> Result<EvictionThreshold, QuantityError> {
        match text.strip_suffix('%') {
            Some(number) => parse_decimal(number)
                .map(EvictionThreshold::Percentage)
                .ok_or_else(|| {
                    QuantityError(format!(
                        "{text:?} is not a percentage; expected e.g. \"10%\""
                    ))
                }),
            None => Quantity::parse(text).map(EvictionThreshold::Quantity),
        }
    }
}

/// A plain decimal number (`[+-]? digits [. digits] [e [+-] digits]`),
/// without Go's `inf`, `NaN` and hexadecimal forms.
fn parse_decimal(text: &str) -> Option<f64> {
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => unsigned.split_at(at),
        None => (unsigned, ""),
    };
    let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
    if (integer.is_empty() && fraction.is_empty()) || !digits(integer) || !digits(fraction) {
        return None;
    }
    if let Some(exponent) = exponent.get(1..) {
        let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        if exponent.is_empty() || !digits(exponent) {
            return None;
        }
    }
    text.parse::<f64>().ok().filter(|v| v.is_finite())
}

// ---------------------------------------------------------------------------
// Schema: every known top-level v1beta1 field, modelled or not
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Known, not modelled: carried through untouched.
    Any,
    Bool,
    Int32,
    Int64,
    Float,
    Str,
    /// A `metav1.Duration`: a string in Go duration syntax.
    Duration,
    StrList,
    StrMap,
    BoolMap,
    /// A struct whose fields are checked strictly.
    Object(&'static [Field]),
    /// A list of such structs.
    ObjectList(&'static [Field]),
}

impl Kind {
    fn expected(self) -> &'static str {
        match self {
            Kind::Any => "any value",
            Kind::Bool => "a boolean",
            Kind::Int32 => "a 32-bit integer",
            Kind::Int64 => "a 64-bit integer",
            Kind::Float => "a number",
            Kind::Str => "a string",
            Kind::Duration => "a duration string such as \"1m30s\" (Go syntax)",
            Kind::StrList => "a list of strings",
            Kind::StrMap => "a mapping of strings to strings",
            Kind::BoolMap => "a mapping of strings to booleans",
            Kind::Object(_) => "a mapping",
            Kind::ObjectList(_) => "a list of mappings",
        }
    }
}

/// A v1beta1 default.
#[derive(Debug, Clone, Copy)]
enum Def {
    Bool(bool),
    Int(i64),
    Str(&'static str),
    Strs(&'static [&'static str]),
    Pairs(&'static [(&'static str, &'static str)]),
    /// nodeStatusUpdateFrequency if that is set, else 5m.
    NodeStatusReportFrequency,
    /// false if maxParallelImagePulls >= 2, else true.
    SerializeImagePulls,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    name: &'static str,
    kind: Kind,
    default: Option<Def>,
    /// Go value field defaulted on its zero value (`if obj.Port == 0`), as
    /// opposed to a pointer field defaulted only when nil.
    zero_is_unset: bool,
}

/// Known, not modelled.
const fn unmodelled(name: &'static str) -> Field {
    Field {
        name,
        kind: Kind::Any,
        default: None,
        zero_is_unset: false,
    }
}

/// Modelled, no default inserted.
const fn plain(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        default: None,
        zero_is_unset: false,
    }
}

/// Go pointer field: defaulted when absent or null.
const fn ptr(name: &'static str, kind: Kind, default: Def) -> Field {
    Field {
        name,
        kind,
        default: Some(default),
        zero_is_unset: false,
    }
}

/// Go value field: defaulted when absent, null or the zero value.
const fn val(name: &'static str, kind: Kind, default: Def) -> Field {
    Field {
        name,
        kind,
        default: Some(default),
        zero_is_unset: true,
    }
}

const AUTHN_X509: &[Field] = &[plain("clientCAFile", Kind::Str)];
const AUTHN_WEBHOOK: &[Field] = &[
    ptr("enabled", Kind::Bool, Def::Bool(true)),
    val("cacheTTL", Kind::Duration, Def::Str("2m0s")),
];
const AUTHN_ANONYMOUS: &[Field] = &[ptr("enabled", Kind::Bool, Def::Bool(false))];
const AUTHENTICATION: &[Field] = &[
    plain("x509", Kind::Object(AUTHN_X509)),
    plain("webhook", Kind::Object(AUTHN_WEBHOOK)),
    plain("anonymous", Kind::Object(AUTHN_ANONYMOUS)),
];
const AUTHZ_WEBHOOK: &[Field] = &[
    val("cacheAuthorizedTTL", Kind::Duration, Def::Str("5m0s")),
    val("cacheUnauthorizedTTL", Kind::Duration, Def::Str("30s")),
];
const AUTHORIZATION: &[Field] = &[
    val("mode", Kind::Str, Def::Str("Webhook")),
    plain("webhook", Kind::Object(AUTHZ_WEBHOOK)),
];
const MEMORY_SWAP: &[Field] = &[plain("swapBehavior", Kind::Str)];
const CRASH_LOOP_BACK_OFF: &[Field] = &[plain("maxContainerRestartPeriod", Kind::Duration)];
const USER_NAMESPACES: &[Field] = &[plain("idsPerPod", Kind::Int64)];
const SHUTDOWN_BY_POD_PRIORITY: &[Field] = &[
    plain("priority", Kind::Int32),
    plain("shutdownGracePeriodSeconds", Kind::Int64),
];

/// `DefaultEvictionHard` of `pkg/kubelet/eviction/defaults_linux.go`.
const DEFAULT_EVICTION_HARD: &[(&str, &str)] = &[
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
];

/// Every top-level field of `kubelet.config.k8s.io/v1beta1`
/// `KubeletConfiguration` (staging/src/k8s.io/kubelet/config/v1beta1/
/// types.go) besides `apiVersion` and `kind`, plus kubelet-pivot's two.
/// Defaults follow pkg/kubelet/apis/config/v1beta1/defaults.go; fields added
/// to v1beta1 recently (or defaulted per platform or feature gate) are
/// modelled without inserting a default, so an older kubelet is not handed
/// fields it does not know.
const TOP_FIELDS: &[Field] = &[
    ptr("enableServer", Kind::Bool, Def::Bool(true)),
    plain("staticPodPath", Kind::Str),
    plain("podLogsDir", Kind::Str),
    val("syncFrequency", Kind::Duration, Def::Str("1m0s")),
    val("fileCheckFrequency", Kind::Duration, Def::Str("20s")),
    val("httpCheckFrequency", Kind::Duration, Def::Str("20s")),
    plain("staticPodURL", Kind::Str),
    unmodelled("staticPodURLHeader"),
    val("address", Kind::Str, Def::Str("0.0.0.0")),
    val("port", Kind::Int32, Def::Int(10250)),
    plain("readOnlyPort", Kind::Int32),
    plain("tlsCertFile", Kind::Str),
    plain("tlsPrivateKeyFile", Kind::Str),
    plain("tlsCipherSuites", Kind::StrList),
    unmodelled("tlsCurvePreferences"),
    plain("tlsMinVersion", Kind::Str),
    plain("rotateCertificates", Kind::Bool),
    plain("serverTLSBootstrap", Kind::Bool),
    plain("authentication", Kind::Object(AUTHENTICATION)),
    plain("authorization", Kind::Object(AUTHORIZATION)),
    ptr("registryPullQPS", Kind::Int32, Def::Int(5)),
    val("registryBurst", Kind::Int32, Def::Int(10)),
    plain("imagePullCredentialsVerificationPolicy", Kind::Str),
    plain("preloadedImagesVerificationAllowlist", Kind::StrList),
    ptr("eventRecordQPS", Kind::Int32, Def::Int(50)),
    val("eventBurst", Kind::Int32, Def::Int(100)),
    ptr("enableDebuggingHandlers", Kind::Bool, Def::Bool(true)),
    plain("enableContentionProfiling", Kind::Bool),
    ptr("healthzPort", Kind::Int32, Def::Int(10248)),
    val("healthzBindAddress", Kind::Str, Def::Str("127.0.0.1")),
    ptr("oomScoreAdj", Kind::Int32, Def::Int(-999)),
    plain("clusterDomain", Kind::Str),
    plain("clusterDNS", Kind::StrList),
    val(
        "streamingConnectionIdleTimeout",
        Kind::Duration,
        Def::Str("4h0m0s"),
    ),
    val("nodeStatusUpdateFrequency", Kind::Duration, Def::Str("10s")),
    val(
        "nodeStatusReportFrequency",
        Kind::Duration,
        Def::NodeStatusReportFrequency,
    ),
    val("nodeLeaseDurationSeconds", Kind::Int32, Def::Int(40)),
    val("imageMinimumGCAge", Kind::Duration, Def::Str("2m0s")),
    plain("imageMaximumGCAge", Kind::Duration),
    ptr("imageGCHighThresholdPercent", Kind::Int32, Def::Int(85)),
    ptr("imageGCLowThresholdPercent", Kind::Int32, Def::Int(80)),
    val("volumeStatsAggPeriod", Kind::Duration, Def::Str("1m0s")),
    plain("kubeletCgroups", Kind::Str),
    plain("systemCgroups", Kind::Str),
    plain("cgroupRoot", Kind::Str),
    ptr("cgroupsPerQOS", Kind::Bool, Def::Bool(true)),
    val("cgroupDriver", Kind::Str, Def::Str("cgroupfs")),
    val("cpuManagerPolicy", Kind::Str, Def::Str("none")),
    plain("singleProcessOOMKill", Kind::Bool),
    plain("cpuManagerPolicyOptions", Kind::StrMap),
    val("cpuManagerReconcilePeriod", Kind::Duration, Def::Str("10s")),
    plain("draManagerReconcilePeriod", Kind::Duration),
    val("memoryManagerPolicy", Kind::Str, Def::Str("None")),
    val("topologyManagerPolicy", Kind::Str, Def::Str("none")),
    val("topologyManagerScope", Kind::Str, Def::Str("container")),
    plain("topologyManagerPolicyOptions", Kind::StrMap),
    plain("qosReserved", Kind::StrMap),
    val("runtimeRequestTimeout", Kind::Duration, Def::Str("2m0s")),
    val("hairpinMode", Kind::Str, Def::Str("promiscuous-bridge")),
    val("maxPods", Kind::Int32, Def::Int(110)),
    plain("podCIDR", Kind::Str),
    ptr("podPidsLimit", Kind::Int64, Def::Int(-1)),
    ptr("resolvConf", Kind::Str, Def::Str("/etc/resolv.conf")),
    plain("runOnce", Kind::Bool),
    ptr("cpuCFSQuota", Kind::Bool, Def::Bool(true)),
    ptr("cpuCFSQuotaPeriod", Kind::Duration, Def::Str("100ms")),
    ptr("nodeStatusMaxImages", Kind::Int32, Def::Int(50)),
    val("maxOpenFiles", Kind::Int64, Def::Int(1_000_000)),
    val(
        "contentType",
        Kind::Str,
        Def::Str("application/vnd.kubernetes.protobuf"),
    ),
    ptr("kubeAPIQPS", Kind::Int32, Def::Int(50)),
    val("kubeAPIBurst", Kind::Int32, Def::Int(100)),
    ptr("serializeImagePulls", Kind::Bool, Def::SerializeImagePulls),
    plain("maxParallelImagePulls", Kind::Int32),
    ptr(
        "evictionHard",
        Kind::StrMap,
        Def::Pairs(DEFAULT_EVICTION_HARD),
    ),
    plain("evictionSoft", Kind::StrMap),
    plain("evictionSoftGracePeriod", Kind::StrMap),
    val(
        "evictionPressureTransitionPeriod",
        Kind::Duration,
        Def::Str("5m0s"),
    ),
    plain("evictionMaxPodGracePeriod", Kind::Int32),
    plain("evictionMinimumReclaim", Kind::StrMap),
    plain("mergeDefaultEvictionSettings", Kind::Bool),
    plain("podsPerCore", Kind::Int32),
    ptr("enableControllerAttachDetach", Kind::Bool, Def::Bool(true)),
    plain("protectKernelDefaults", Kind::Bool),
    ptr("makeIPTablesUtilChains", Kind::Bool, Def::Bool(true)),
    ptr("iptablesMasqueradeBit", Kind::Int32, Def::Int(14)),
    ptr("iptablesDropBit", Kind::Int32, Def::Int(15)),
    plain("featureGates", Kind::BoolMap),
    ptr("failSwapOn", Kind::Bool, Def::Bool(true)),
    plain("memorySwap", Kind::Object(MEMORY_SWAP)),
    val("containerLogMaxSize", Kind::Str, Def::Str("10Mi")),
    ptr("containerLogMaxFiles", Kind::Int32, Def::Int(5)),
    plain("containerLogMaxWorkers", Kind::Int32),
    plain("containerLogMonitorInterval", Kind::Duration),
    val(
        "configMapAndSecretChangeDetectionStrategy",
        Kind::Str,
        Def::Str("Watch"),
    ),
    plain("systemReserved", Kind::StrMap),
    plain("kubeReserved", Kind::StrMap),
    plain("reservedSystemCPUs", Kind::Str),
    plain("showHiddenMetricsForVersion", Kind::Str),
    plain("systemReservedCgroup", Kind::Str),
    plain("kubeReservedCgroup", Kind::Str),
    ptr(
        "enforceNodeAllocatable",
        Kind::StrList,
        Def::Strs(&["pods"]),
    ),
    plain("allowedUnsafeSysctls", Kind::StrList),
    val(
        "volumePluginDir",
        Kind::Str,
        Def::Str("/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"),
    ),
    plain("providerID", Kind::Str),
    plain("kernelMemcgNotification", Kind::Bool),
    unmodelled("logging"),
    ptr("enableSystemLogHandler", Kind::Bool, Def::Bool(true)),
    plain("enableSystemLogQuery", Kind::Bool),
    plain("shutdownGracePeriod", Kind::Duration),
    plain("shutdownGracePeriodCriticalPods", Kind::Duration),
    plain(
        "shutdownGracePeriodByPodPriority",
        Kind::ObjectList(SHUTDOWN_BY_POD_PRIORITY),
    ),
    plain("crashLoopBackOff", Kind::Object(CRASH_LOOP_BACK_OFF)),
    unmodelled("reservedMemory"),
    ptr("enableProfilingHandler", Kind::Bool, Def::Bool(true)),
    ptr("enableDebugFlagsHandler", Kind::Bool, Def::Bool(true)),
    ptr("seccompDefault", Kind::Bool, Def::Bool(false)),
    plain("memoryThrottlingFactor", Kind::Float),
    plain("memoryReservationPolicy", Kind::Str),
    unmodelled("registerWithTaints"),
    ptr("registerNode", Kind::Bool, Def::Bool(true)),
    unmodelled("tracing"),
    ptr("localStorageCapacityIsolation", Kind::Bool, Def::Bool(true)),
    plain("containerRuntimeEndpoint", Kind::Str),
    plain("imageServiceEndpoint", Kind::Str),
    plain("failCgroupV1", Kind::Bool),
    plain("userNamespaces", Kind::Object(USER_NAMESPACES)),
    plain("podHousekeepingPeriod", Kind::Duration),
    // kubelet-pivot's own, removed from the effective config.
    plain(CRASH_LOOP_THRESHOLD_FIELD, Kind::Int32),
    plain(CONFIG_TRIAL_DURATION_FIELD, Kind::Duration),
];

/// The type meta fields, checked separately.
const TYPE_META: [&str; 2] = ["apiVersion", "kind"];

/// Whether `name` is a top-level field of v1beta1 `KubeletConfiguration`
/// (or one of kubelet-pivot's two).
pub fn is_known_field(name: &str) -> bool {
    TYPE_META.contains(&name) || TOP_FIELDS.iter().any(|f| f.name == name)
}

// ---------------------------------------------------------------------------
// Typed views
// ---------------------------------------------------------------------------

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
struct Views(BTreeMap<String, FieldValue>);

impl Views {
    fn int(&self, path: &str) -> Option<i64> {
        match self.0.get(path) {
            Some(FieldValue::Int(v)) => Some(*v),
            _ => None,
        }
    }

    fn float(&self, path: &str) -> Option<f64> {
        match self.0.get(path) {
            Some(FieldValue::Float(v)) => Some(*v),
            Some(FieldValue::Int(v)) => Some(*v as f64),
            _ => None,
        }
    }

    fn boolean(&self, path: &str) -> Option<bool> {
        match self.0.get(path) {
            Some(FieldValue::Bool(v)) => Some(*v),
            _ => None,
        }
    }

    fn string(&self, path: &str) -> Option<&str> {
        match self.0.get(path) {
            Some(FieldValue::Str(v)) => Some(v),
            _ => None,
        }
    }

    fn duration(&self, path: &str) -> Option<GoDuration> {
        match self.0.get(path) {
            Some(FieldValue::Duration(v)) => Some(*v),
            _ => None,
        }
    }

    fn list(&self, path: &str) -> &[String] {
        match self.0.get(path) {
            Some(FieldValue::StrList(v)) => v,
            _ => &[],
        }
    }

    fn map(&self, path: &str) -> Option<&BTreeMap<String, String>> {
        match self.0.get(path) {
            Some(FieldValue::StrMap(v)) => Some(v),
            _ => None,
        }
    }

    fn items(&self, path: &str) -> usize {
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

fn describe(value: &Value) -> String {
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

fn sorted_entries(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

/// Checks every field of `map` against `fields` (unknown fields and types)
/// and records the typed values of the modelled ones.
fn check_object(
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

fn check_type_meta(document: &Map<String, Value>) -> Result<(), ConfigError> {
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

// ---------------------------------------------------------------------------
// Decoding (JSON or YAML) with duplicate-key detection
// ---------------------------------------------------------------------------

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
fn yaml11_reading(text: &str) -> Option<&'static str> {
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
    let format = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Format::Json,
        _ => Format::Yaml,
    };
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

// ---------------------------------------------------------------------------
// Defaulting and canonical JSON
// ---------------------------------------------------------------------------

impl Def {
    fn value(self, original: &Map<String, Value>) -> Value {
        match self {
            Def::Bool(b) => Value::Bool(b),
            Def::Int(i) => Value::from(i),
            Def::Str(s) => Value::from(s),
            Def::Strs(list) => Value::Array(list.iter().map(|s| Value::from(*s)).collect()),
            Def::Pairs(pairs) => Value::Object(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
                    .collect(),
            ),
            Def::NodeStatusReportFrequency => match original.get("nodeStatusUpdateFrequency") {
                Some(given @ Value::String(text))
                    if GoDuration::parse(text).is_ok_and(|d| d != GoDuration::ZERO) =>
                {
                    given.clone()
                }
                _ => Value::from("5m0s"),
            },
            Def::SerializeImagePulls => {
                let parallel = original
                    .get("maxParallelImagePulls")
                    .and_then(Value::as_i64);
                Value::Bool(parallel.is_none_or(|n| n < 2))
            }
        }
    }
}

fn is_zero(value: &Value, kind: Kind) -> bool {
    match kind {
        Kind::Int32 | Kind::Int64 => value.as_i64() == Some(0),
        Kind::Float => value.as_f64() == Some(0.0),
        Kind::Str => value.as_str() == Some(""),
        Kind::Bool => value.as_bool() == Some(false),
        Kind::Duration => value
            .as_str()
            .is_some_and(|s| GoDuration::parse(s) == Ok(GoDuration::ZERO)),
        _ => false,
    }
}

/// Fills in defaults for unset modelled fields and drops their nulls;
/// unmodelled fields are left alone. `original` is the top-level document as
/// given (computed defaults look at it).
fn apply_defaults(map: &mut Map<String, Value>, fields: &[Field], original: &Map<String, Value>) {
    for field in fields {
        if let Kind::Any = field.kind {
            continue;
        }
        if let Kind::Object(nested) = field.kind {
            let (mut inner, given) = match map.remove(field.name) {
                Some(Value::Object(inner)) => (inner, true),
                _ => (Map::new(), false),
            };
            apply_defaults(&mut inner, nested, original);
            if given || !inner.is_empty() {
                map.insert(field.name.to_owned(), Value::Object(inner));
            }
            continue;
        }
        let unset = match map.get(field.name) {
            None | Some(Value::Null) => true,
            Some(value) => field.zero_is_unset && is_zero(value, field.kind),
        };
        if unset {
            map.remove(field.name);
            if let Some(default) = field.default {
                map.insert(field.name.to_owned(), default.value(original));
            }
        }
    }
}

fn write_json_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// JSON with keys sorted (bytewise) at every level and no whitespace.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (index, (key, item)) in sorted_entries(map).into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_json_string(key, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

// ---------------------------------------------------------------------------
// The config
// ---------------------------------------------------------------------------

/// A parsed `KubeletConfiguration`: the document as given plus typed views of
/// the modelled fields.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletConfig {
    document: Map<String, Value>,
    views: Views,
}

impl KubeletConfig {
    /// Parses a JSON (first non-whitespace byte `{`) or YAML document,
    /// strictly: duplicate keys, unknown fields (with their path), values of
    /// the wrong type, and a missing or wrong `kind`/`apiVersion` are errors.
    /// Does not run the range checks: see [`KubeletConfig::validate`].
    pub fn parse(bytes: &[u8]) -> Result<KubeletConfig, ConfigError> {
        if bytes.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge {
                size: bytes.len(),
                limit: MAX_CONFIG_BYTES,
            });
        }
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
        check_type_meta(&document)?;
        let mut views = Views::default();
        check_object(&document, TOP_FIELDS, "", &mut views)?;
        Ok(KubeletConfig { document, views })
    }

    /// The built-in defaults: a document with only `apiVersion` and `kind`,
    /// whose [`effective`](KubeletConfig::effective) config is all v1beta1
    /// defaults.
    pub fn defaults() -> KubeletConfig {
        let mut document = Map::new();
        document.insert("apiVersion".to_owned(), Value::from(API_VERSION));
        document.insert("kind".to_owned(), Value::from(KIND));
        KubeletConfig {
            document,
            views: Views::default(),
        }
    }

    /// Runs the kubelet's validation on the effective config (defaults
    /// applied, as the kubelet validates after defaulting) and kubelet-pivot's
    /// checks of its own fields; [`ConfigError::Invalid`] lists every failure.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let effective = self.effective_map();
        let mut views = Views::default();
        check_object(&effective, TOP_FIELDS, "", &mut views)?;
        let mut checker = Checker::default();
        validate_network(&views, &mut checker);
        validate_limits(&views, &mut checker);
        validate_image_gc(&views, &mut checker);
        validate_policies(&views, &mut checker);
        validate_durations(&views, &mut checker);
        validate_shutdown(&views, &mut checker);
        validate_node_allocatable(&views, &mut checker);
        validate_eviction(&views, &mut checker);
        validate_reserved(&views, &mut checker);
        validate_logs(&views, &mut checker);
        validate_pivot_fields(&self.views, &mut checker);
        checker.finish()
    }

    /// [`parse`](KubeletConfig::parse), then
    /// [`validate`](KubeletConfig::validate).
    pub fn parse_and_validate(bytes: &[u8]) -> Result<KubeletConfig, ConfigError> {
        let config = KubeletConfig::parse(bytes)?;
        config.validate()?;
        Ok(config)
    }

    /// The document as given.
    pub fn document(&self) -> &Map<String, Value> {
        &self.document
    }

    /// The typed value of a modelled field that is set, by path (e.g.
    /// `port`, `authentication.webhook.cacheTTL`,
    /// `shutdownGracePeriodByPodPriority[0].priority`).
    pub fn field(&self, path: &str) -> Option<&FieldValue> {
        self.views.0.get(path)
    }

    fn effective_map(&self) -> Map<String, Value> {
        let mut effective = self.document.clone();
        effective.remove(CRASH_LOOP_THRESHOLD_FIELD);
        effective.remove(CONFIG_TRIAL_DURATION_FIELD);
        apply_defaults(&mut effective, TOP_FIELDS, &self.document);
        effective
    }

    /// The config the kubelet gets: v1beta1 defaults filled in for modelled
    /// fields that are unset (absent, null, or the zero value of a Go value
    /// field), nulls of modelled fields dropped, `crashLoopThreshold` and
    /// `configTrialDuration` removed; everything else as given.
    pub fn effective(&self) -> Value {
        Value::Object(self.effective_map())
    }

    /// Canonical JSON of [`effective`](KubeletConfig::effective) (keys sorted
    /// at every level, no whitespace): the file the kubelet reads.
    pub fn effective_bytes(&self) -> Vec<u8> {
        let mut out = String::new();
        write_canonical(&self.effective(), &mut out);
        out.into_bytes()
    }

    /// Lower-case hex SHA-256 of [`effective_bytes`](KubeletConfig::effective_bytes),
    /// computed with [`HASH_ALGORITHM`].
    pub fn hash(&self) -> String {
        let digest = Sha256::digest(self.effective_bytes());
        digest.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// `crashLoopThreshold`, or its default. Out-of-range values (only in an
    /// unvalidated config) are clamped to 0..=10.
    pub fn crash_loop_threshold(&self) -> u32 {
        match self.views.int(CRASH_LOOP_THRESHOLD_FIELD) {
            Some(n) => u32::try_from(n.clamp(0, i64::from(MAX_CRASH_LOOP_THRESHOLD))).unwrap_or(0),
            None => DEFAULT_CRASH_LOOP_THRESHOLD,
        }
    }

    /// `configTrialDuration`, or its default. A negative value (only in an
    /// unvalidated config) gives the default.
    pub fn config_trial_duration(&self) -> Duration {
        self.views
            .duration(CONFIG_TRIAL_DURATION_FIELD)
            .and_then(GoDuration::to_std)
            .unwrap_or(DEFAULT_CONFIG_TRIAL_DURATION)
    }

    /// Top-level field names whose effective values differ between the two
    /// configs, sorted; `crashLoopThreshold` and `configTrialDuration` are
    /// compared by their resolved values.
    pub fn changed_fields(&self, other: &KubeletConfig) -> Vec<String> {
        let ours = self.effective_map();
        let theirs = other.effective_map();
        let names: BTreeSet<&String> = ours.keys().chain(theirs.keys()).collect();
        let mut changed: Vec<String> = names
            .into_iter()
            .filter(|name| ours.get(*name) != theirs.get(*name))
            .cloned()
            .collect();
        if self.crash_loop_threshold() != other.crash_loop_threshold() {
            changed.push(CRASH_LOOP_THRESHOLD_FIELD.to_owned());
        }
        if self.config_trial_duration() != other.config_trial_duration() {
            changed.push(CONFIG_TRIAL_DURATION_FIELD.to_owned());
        }
        changed.sort();
        changed
    }
}

// ---------------------------------------------------------------------------
// Validation rules
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Checker {
    errors: Vec<FieldError>,
}

impl Checker {
    fn push(&mut self, path: &str, detail: impl fmt::Display) {
        self.errors.push(FieldError {
            path: path.to_owned(),
            message: format!("{path} {detail}"),
        });
    }

    fn in_range(&mut self, views: &Views, path: &str, low: i64, high: i64) {
        if let Some(value) = views.int(path) {
            if !(low..=high).contains(&value) {
                self.push(
                    path,
                    format_args!("({value}) must be between {low} and {high}, inclusive"),
                );
            }
        }
    }

    fn non_negative(&mut self, views: &Views, path: &str) {
        if let Some(value) = views.int(path) {
            if value < 0 {
                self.push(
                    path,
                    format_args!("({value}) must not be a negative number"),
                );
            }
        }
    }

    fn one_of(&mut self, views: &Views, path: &str, allowed: &[&str]) {
        if let Some(value) = views.string(path) {
            if !allowed.contains(&value) {
                let allowed: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
                self.push(
                    path,
                    format_args!("({value:?}) must be one of: {}", allowed.join(", ")),
                );
            }
        }
    }

    fn finish(self) -> Result<(), ConfigError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(self.errors))
        }
    }
}

const MAX_PORT: i64 = 65535;

fn validate_network(views: &Views, c: &mut Checker) {
    c.in_range(views, "port", 1, MAX_PORT);
    for (path, low) in [("readOnlyPort", 0), ("healthzPort", 1)] {
        // 0 disables these servers.
        if let Some(port) = views.int(path) {
            if port != 0 && !(1..=MAX_PORT).contains(&port) {
                c.push(
                    path,
                    format_args!("({port}) must be between {low} and {MAX_PORT}, inclusive"),
                );
            }
        }
    }
    for path in ["address", "healthzBindAddress"] {
        if let Some(address) = views.string(path) {
            if address.parse::<IpAddr>().is_err() {
                c.push(path, format_args!("({address:?}) must be an IP address"));
            }
        }
    }
}

fn validate_limits(views: &Views, c: &mut Checker) {
    for path in [
        "kubeAPIQPS",
        "kubeAPIBurst",
        "eventRecordQPS",
        "eventBurst",
        "registryPullQPS",
        "registryBurst",
        "maxPods",
        "podsPerCore",
        "maxOpenFiles",
    ] {
        c.non_negative(views, path);
    }
    c.in_range(views, "oomScoreAdj", -1000, 1000);
    c.in_range(views, "iptablesMasqueradeBit", 0, 31);
    c.in_range(views, "iptablesDropBit", 0, 31);
    if let Some(images) = views.int("nodeStatusMaxImages") {
        if images < -1 {
            c.push(
                "nodeStatusMaxImages",
                format_args!("({images}) must be -1 or greater"),
            );
        }
    }
    if let Some(seconds) = views.int("nodeLeaseDurationSeconds") {
        if seconds <= 0 {
            c.push(
                "nodeLeaseDurationSeconds",
                format_args!("({seconds}) must be greater than 0"),
            );
        }
    }
    if let Some(pulls) = views.int("maxParallelImagePulls") {
        if pulls < 1 {
            c.push(
                "maxParallelImagePulls",
                format_args!("({pulls}) must be a positive number"),
            );
        } else if pulls > 1 && views.boolean("serializeImagePulls") == Some(true) {
            c.push(
                "maxParallelImagePulls",
                format_args!(
                    "({pulls}) cannot be larger than 1 unless serializeImagePulls is false"
                ),
            );
        }
    }
    if let Some(factor) = views.float("memoryThrottlingFactor") {
        if !(factor > 0.0 && factor <= 1.0) {
            c.push(
                "memoryThrottlingFactor",
                format_args!("({factor}) must be greater than 0 and less than or equal to 1.0"),
            );
        }
    }
    if let Some(ids) = views.int("userNamespaces.idsPerPod") {
        const ID_RANGE: i64 = 1 << 16;
        if ids <= 0 || ids % ID_RANGE != 0 || ids >= 1 << 32 {
            c.push(
                "userNamespaces.idsPerPod",
                format_args!("({ids}) must be a positive multiple of {ID_RANGE} below 2^32"),
            );
        }
    }
    if views.boolean("runOnce") == Some(true) {
        c.push(
            "runOnce",
            "(true) is deprecated and must not be set: run-once mode has been removed",
        );
    }
}

fn validate_image_gc(views: &Views, c: &mut Checker) {
    c.in_range(views, "imageGCHighThresholdPercent", 0, 100);
    c.in_range(views, "imageGCLowThresholdPercent", 0, 100);
    if let (Some(low), Some(high)) = (
        views.int("imageGCLowThresholdPercent"),
        views.int("imageGCHighThresholdPercent"),
    ) {
        if low >= high {
            c.push(
                "imageGCLowThresholdPercent",
                format_args!("({low}) must be less than imageGCHighThresholdPercent ({high})"),
            );
        }
    }
    let minimum = views.duration("imageMinimumGCAge").unwrap_or_default();
    let maximum = views.duration("imageMaximumGCAge").unwrap_or_default();
    if minimum.is_negative() {
        c.push(
            "imageMinimumGCAge",
            format_args!("({minimum}) must not be negative"),
        );
    }
    if maximum.is_negative() {
        c.push(
            "imageMaximumGCAge",
            format_args!("({maximum}) must not be negative"),
        );
    }
    if maximum > GoDuration::ZERO && maximum <= minimum {
        c.push(
            "imageMaximumGCAge",
            format_args!("({maximum}) must be greater than imageMinimumGCAge ({minimum})"),
        );
    }
}

fn validate_policies(views: &Views, c: &mut Checker) {
    c.one_of(views, "cgroupDriver", &["cgroupfs", "systemd"]);
    c.one_of(views, "cpuManagerPolicy", &["none", "static"]);
    c.one_of(views, "memoryManagerPolicy", &["None", "Static"]);
    c.one_of(
        views,
        "topologyManagerPolicy",
        &["none", "best-effort", "restricted", "single-numa-node"],
    );
    c.one_of(views, "topologyManagerScope", &["container", "pod"]);
    c.one_of(
        views,
        "hairpinMode",
        &["promiscuous-bridge", "hairpin-veth", "none"],
    );
    c.one_of(views, "authorization.mode", &["AlwaysAllow", "Webhook"]);
    c.one_of(
        views,
        "configMapAndSecretChangeDetectionStrategy",
        &["Get", "Cache", "Watch"],
    );
    c.one_of(
        views,
        "memorySwap.swapBehavior",
        &["", "NoSwap", "LimitedSwap"],
    );
    c.one_of(
        views,
        "memoryReservationPolicy",
        &["None", "TieredReservation"],
    );
    c.one_of(
        views,
        "imagePullCredentialsVerificationPolicy",
        &[
            "NeverVerify",
            "NeverVerifyPreloadedImages",
            "NeverVerifyAllowlistedImages",
            "AlwaysVerify",
        ],
    );
    if let Some(system_cgroups) = views.string("systemCgroups") {
        if !system_cgroups.is_empty() && views.string("cgroupRoot").unwrap_or("").is_empty() {
            c.push(
                "systemCgroups",
                format_args!("({system_cgroups:?}) was specified and cgroupRoot was not"),
            );
        }
    }
    if let Some(cpus) = views.string("reservedSystemCPUs") {
        if !cpus.is_empty() {
            let cgroup_set = |path| !views.string(path).unwrap_or("").is_empty();
            if cgroup_set("systemReservedCgroup") || cgroup_set("kubeReservedCgroup") {
                c.push(
                    "reservedSystemCPUs",
                    "cannot be used with systemReservedCgroup or kubeReservedCgroup",
                );
            }
            if let Err(why) = check_cpu_list(cpus) {
                c.push(
                    "reservedSystemCPUs",
                    format_args!("({cpus:?}) is not a CPU list such as \"0-3,8\": {why}"),
                );
            }
        }
    }
}

/// Linux CPU list syntax (`0-3,8,10-11`), as `cpuset.Parse` reads it.
fn check_cpu_list(list: &str) -> Result<(), String> {
    for range in list.split(',') {
        let (start, end) = range.split_once('-').unwrap_or((range, range));
        let cpu = |s: &str| {
            if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
                return Err(format!("{s:?} is not a CPU number"));
            }
            s.parse::<u32>().map_err(|e| format!("{s:?}: {e}"))
        };
        let (start, end) = (cpu(start)?, cpu(end)?);
        if start > end {
            return Err(format!("range {range:?} runs backwards"));
        }
    }
    Ok(())
}

fn validate_durations(views: &Views, c: &mut Checker) {
    const MILLISECOND: i64 = 1_000_000;
    const SECOND: i64 = 1_000_000_000;
    if let Some(period) = views.duration("cpuCFSQuotaPeriod") {
        if !(MILLISECOND..=SECOND).contains(&period.as_nanos()) {
            c.push(
                "cpuCFSQuotaPeriod",
                format_args!("({period}) must be between 1ms and 1s, inclusive"),
            );
        }
    }
    // Zero is defaulted (to 1m) by the kubelets that know this field.
    if let Some(period) = views.duration("draManagerReconcilePeriod") {
        if period.is_negative() {
            c.push(
                "draManagerReconcilePeriod",
                format_args!("({period}) must be greater than zero"),
            );
        }
    }
    if let Some(period) = views.duration("crashLoopBackOff.maxContainerRestartPeriod") {
        if !(SECOND..=300 * SECOND).contains(&period.as_nanos()) {
            c.push(
                "crashLoopBackOff.maxContainerRestartPeriod",
                format_args!("({period}) must be between 1s and 300s, inclusive"),
            );
        }
    }
}

fn validate_shutdown(views: &Views, c: &mut Checker) {
    let second = GoDuration::from_nanos(1_000_000_000);
    let total = views.duration("shutdownGracePeriod").unwrap_or_default();
    let critical = views
        .duration("shutdownGracePeriodCriticalPods")
        .unwrap_or_default();
    if critical > total {
        c.push(
            "shutdownGracePeriodCriticalPods",
            format_args!("({critical}) must be <= shutdownGracePeriod ({total})"),
        );
    }
    for (path, period) in [
        ("shutdownGracePeriod", total),
        ("shutdownGracePeriodCriticalPods", critical),
    ] {
        if period.is_negative() || (period > GoDuration::ZERO && period < second) {
            c.push(
                path,
                format_args!("({period}) must be either zero or otherwise >= 1 sec"),
            );
        }
    }
    if views.items("shutdownGracePeriodByPodPriority") > 0
        && (total > GoDuration::ZERO || critical > GoDuration::ZERO)
    {
        c.push(
            "shutdownGracePeriodByPodPriority",
            "cannot be specified together with shutdownGracePeriod or \
             shutdownGracePeriodCriticalPods",
        );
    }
}

fn validate_node_allocatable(views: &Views, c: &mut Checker) {
    const PATH: &str = "enforceNodeAllocatable";
    let list = views.list(PATH);
    let has = |key: &str| list.iter().any(|item| item == key);
    for (plain, compressible) in [
        ("system-reserved", "system-reserved-compressible"),
        ("kube-reserved", "kube-reserved-compressible"),
    ] {
        if has(plain) && has(compressible) {
            c.push(
                PATH,
                format_args!("cannot contain both {plain:?} and {compressible:?}"),
            );
        }
    }
    let mut seen = BTreeSet::new();
    for (index, item) in list.iter().enumerate() {
        let path = format!("{PATH}[{index}]");
        if !seen.insert(item) {
            c.push(&path, format_args!("({item:?}) is a duplicate"));
            continue;
        }
        let cgroup = |field: &str| views.string(field).unwrap_or("").is_empty();
        match item.as_str() {
            "pods" => {}
            "system-reserved" | "system-reserved-compressible" => {
                if cgroup("systemReservedCgroup") {
                    c.push(
                        &path,
                        format_args!("({item:?}) requires systemReservedCgroup to be set"),
                    );
                }
            }
            "kube-reserved" | "kube-reserved-compressible" => {
                if cgroup("kubeReservedCgroup") {
                    c.push(
                        &path,
                        format_args!("({item:?}) requires kubeReservedCgroup to be set"),
                    );
                }
            }
            "none" => {
                if list.len() > 1 {
                    c.push(
                        &path,
                        "(\"none\") may not be combined with other enforcements",
                    );
                }
                continue;
            }
            other => {
                c.push(
                    &path,
                    format_args!(
                        "({other:?}) must be one of: \"pods\", \"system-reserved\", \
                         \"system-reserved-compressible\", \"kube-reserved\", \
                         \"kube-reserved-compressible\", \"none\""
                    ),
                );
                continue;
            }
        }
        if views.boolean("cgroupsPerQOS") == Some(false) {
            c.push(
                &path,
                format_args!("({item:?}) requires cgroupsPerQOS to be true"),
            );
        }
    }
}

fn validate_threshold_map(views: &Views, c: &mut Checker, field: &str) {
    let Some(map) = views.map(field) else {
        return;
    };
    for (signal, text) in map {
        let path = format!("{field}.{signal}");
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            c.push(&path, unsupported_signal());
            continue;
        }
        match EvictionThreshold::parse(text) {
            Err(e) => c.push(&path, format_args!("({text:?}) is invalid: {e}")),
            Ok(EvictionThreshold::Quantity(q)) if !q.is_positive() => {
                c.push(&path, format_args!("({text:?}) must be positive"));
            }
            Ok(EvictionThreshold::Percentage(p)) if !(0.0..=100.0).contains(&p) => {
                c.push(
                    &path,
                    format_args!("({text:?}) must be between 0% and 100%, inclusive"),
                );
            }
            Ok(_) => {}
        }
    }
}

fn unsupported_signal() -> String {
    format!(
        "is not a supported eviction signal; supported signals are {}",
        EVICTION_SIGNALS.join(", ")
    )
}

fn validate_eviction(views: &Views, c: &mut Checker) {
    validate_threshold_map(views, c, "evictionHard");
    validate_threshold_map(views, c, "evictionSoft");
    let grace = views.map("evictionSoftGracePeriod");
    for (signal, text) in grace.into_iter().flatten() {
        let path = format!("evictionSoftGracePeriod.{signal}");
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            c.push(&path, unsupported_signal());
            continue;
        }
        match GoDuration::parse(text) {
            Err(e) => c.push(&path, format_args!("({text:?}) is not a duration: {e}")),
            Ok(period) if period.is_negative() => {
                c.push(&path, format_args!("({text:?}) must not be negative"));
            }
            Ok(_) => {}
        }
    }
    for signal in views
        .map("evictionSoft")
        .into_iter()
        .flatten()
        .map(|(s, _)| s)
    {
        if EVICTION_SIGNALS.contains(&signal.as_str())
            && !grace.is_some_and(|g| g.contains_key(signal))
        {
            c.push(
                &format!("evictionSoftGracePeriod.{signal}"),
                format_args!("must be set because evictionSoft sets a threshold for {signal}"),
            );
        }
    }
    for (signal, text) in views.map("evictionMinimumReclaim").into_iter().flatten() {
        let path = format!("evictionMinimumReclaim.{signal}");
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            c.push(&path, unsupported_signal());
            continue;
        }
        match EvictionThreshold::parse(text) {
            Err(e) => c.push(&path, format_args!("({text:?}) is invalid: {e}")),
            Ok(EvictionThreshold::Percentage(p)) if p <= 0.0 => {
                c.push(&path, format_args!("({text:?}) must be positive"));
            }
            Ok(EvictionThreshold::Quantity(q)) if q.is_negative() => {
                c.push(&path, format_args!("({text:?}) must not be negative"));
            }
            Ok(_) => {}
        }
    }
}

/// Resources `kubeReserved` / `systemReserved` accept (`parseResourceList`
/// in cmd/kubelet/app/server.go).
const RESERVABLE_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

fn validate_reserved(views: &Views, c: &mut Checker) {
    for field in ["kubeReserved", "systemReserved"] {
        for (resource, text) in views.map(field).into_iter().flatten() {
            let path = format!("{field}.{resource}");
            if !RESERVABLE_RESOURCES.contains(&resource.as_str()) {
                c.push(
                    &path,
                    format_args!(
                        "cannot be reserved; reservable resources are {}",
                        RESERVABLE_RESOURCES.join(", ")
                    ),
                );
                continue;
            }
            match Quantity::parse(text) {
                Err(e) => c.push(&path, format_args!("({text:?}) is invalid: {e}")),
                Ok(q) if q.is_negative() => {
                    c.push(&path, format_args!("({text:?}) must not be negative"));
                }
                Ok(_) => {}
            }
        }
    }
    for (resource, text) in views.map("qosReserved").into_iter().flatten() {
        let path = format!("qosReserved.{resource}");
        if resource != "memory" {
            c.push(&path, "cannot be reserved; only memory is supported");
            continue;
        }
        let percent = text
            .strip_suffix('%')
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok());
        if percent.is_none_or(|p| p > 100) {
            c.push(
                &path,
                format_args!("({text:?}) must be a percentage between 0% and 100%"),
            );
        }
    }
}

fn validate_logs(views: &Views, c: &mut Checker) {
    if let Some(size) = views.string("containerLogMaxSize") {
        match Quantity::parse(size) {
            Err(e) => c.push(
                "containerLogMaxSize",
                format_args!("({size:?}) is invalid: {e}"),
            ),
            Ok(q) if q.is_negative() => {
                c.push(
                    "containerLogMaxSize",
                    format_args!("({size:?}) must not be negative"),
                );
            }
            Ok(_) => {}
        }
    }
    if let Some(files) = views.int("containerLogMaxFiles") {
        if files <= 1 {
            c.push(
                "containerLogMaxFiles",
                format_args!("({files}) must be greater than 1"),
            );
        }
    }
    if let Some(workers) = views.int("containerLogMaxWorkers") {
        if workers < 1 {
            c.push(
                "containerLogMaxWorkers",
                format_args!("({workers}) must be greater than or equal to 1"),
            );
        }
    }
    if let Some(interval) = views.duration("containerLogMonitorInterval") {
        if interval.as_nanos() < 3_000_000_000 {
            c.push(
                "containerLogMonitorInterval",
                format_args!("({interval}) must be at least 3s"),
            );
        }
    }
    if let Some(dir) = views.string("podLogsDir") {
        if !dir.is_empty() {
            if !dir.starts_with('/') {
                c.push(
                    "podLogsDir",
                    format_args!("({dir:?}) must be an absolute path"),
                );
            } else if !is_clean_path(dir) {
                c.push(
                    "podLogsDir",
                    format_args!(
                        "({dir:?}) must be normalized (no \"//\", \".\", \"..\" or trailing \"/\")"
                    ),
                );
            }
            if !dir.is_ascii() {
                c.push(
                    "podLogsDir",
                    format_args!("({dir:?}) must contain ASCII characters only"),
                );
            }
        }
    }
}

/// Whether an absolute path equals Go's `filepath.Clean` of itself.
fn is_clean_path(path: &str) -> bool {
    path == "/"
        || path
            .strip_prefix('/')
            .is_some_and(|rest| rest.split('/').all(|part| !matches!(part, "" | "." | "..")))
}

fn validate_pivot_fields(views: &Views, c: &mut Checker) {
    c.in_range(
        views,
        CRASH_LOOP_THRESHOLD_FIELD,
        0,
        i64::from(MAX_CRASH_LOOP_THRESHOLD),
    );
    if let Some(trial) = views.duration(CONFIG_TRIAL_DURATION_FIELD) {
        if trial.is_negative() {
            c.push(
                CONFIG_TRIAL_DURATION_FIELD,
                format_args!("({trial}) must not be negative"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    /// The example of the "Set Kubelet parameters via a config file" task
    /// page (kubernetes/website, content/en/docs/tasks/administer-cluster/
    /// kubelet-config-file.md, v1.10-era text).
    const DOCS_CONFIG_FILE_EXAMPLE: &str = r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard:
    memory.available:  "200Mi"
"#;

    /// The same page's current example.
    const DOCS_CONFIG_FILE_EXAMPLE_CURRENT: &str = r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "192.168.0.8"
port: 20250
serializeImagePulls: false
evictionHard:
    memory.available:  "100Mi"
    nodefs.available:  "10%"
    nodefs.inodesFree: "5%"
    imagefs.available: "15%"
"#;

    /// What the v1.11 "Reconfigure a Node's Kubelet in a Live Cluster" task
    /// produces: a kubeadm node's `configz` output with `kind` and
    /// `apiVersion` added by its `jq` command (kubelet_configz_${NODE_NAME}).
    const DKC_V111_CONFIGZ: &str = r#"{
  "kind": "KubeletConfiguration",
  "apiVersion": "kubelet.config.k8s.io/v1beta1",
  "staticPodPath": "/etc/kubernetes/manifests",
  "syncFrequency": "1m0s",
  "fileCheckFrequency": "20s",
  "httpCheckFrequency": "20s",
  "address": "0.0.0.0",
  "port": 10250,
  "readOnlyPort": 10255,
  "tlsCertFile": "/var/lib/kubelet/pki/kubelet.crt",
  "tlsPrivateKeyFile": "/var/lib/kubelet/pki/kubelet.key",
  "rotateCertificates": true,
  "authentication": {
    "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
    "webhook": {"enabled": true, "cacheTTL": "2m0s"},
    "anonymous": {"enabled": false}
  },
  "authorization": {
    "mode": "Webhook",
    "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"}
  },
  "registryPullQPS": 5,
  "registryBurst": 10,
  "eventRecordQPS": 5,
  "eventBurst": 10,
  "enableDebuggingHandlers": true,
  "healthzPort": 10248,
  "healthzBindAddress": "127.0.0.1",
  "oomScoreAdj": -999,
  "clusterDomain": "cluster.local",
  "clusterDNS": ["10.96.0.10"],
  "streamingConnectionIdleTimeout": "4h0m0s",
  "nodeStatusUpdateFrequency": "10s",
  "imageMinimumGCAge": "2m0s",
  "imageGCHighThresholdPercent": 85,
  "imageGCLowThresholdPercent": 80,
  "volumeStatsAggPeriod": "1m0s",
  "cgroupsPerQOS": true,
  "cgroupDriver": "cgroupfs",
  "cpuManagerPolicy": "none",
  "cpuManagerReconcilePeriod": "10s",
  "runtimeRequestTimeout": "2m0s",
  "hairpinMode": "promiscuous-bridge",
  "maxPods": 110,
  "podPidsLimit": -1,
  "resolvConf": "/etc/resolv.conf",
  "cpuCFSQuota": true,
  "maxOpenFiles": 1000000,
  "contentType": "application/vnd.kubernetes.protobuf",
  "kubeAPIQPS": 5,
  "kubeAPIBurst": 10,
  "serializeImagePulls": true,
  "evictionHard": {
    "imagefs.available": "15%",
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%"
  },
  "evictionPressureTransitionPeriod": "5m0s",
  "enableControllerAttachDetach": true,
  "makeIPTablesUtilChains": true,
  "iptablesMasqueradeBit": 14,
  "iptablesDropBit": 15,
  "featureGates": {},
  "failSwapOn": true,
  "containerLogMaxSize": "10Mi",
  "containerLogMaxFiles": 5,
  "enforceNodeAllocatable": ["pods"]
}"#;

    fn yaml_doc(body: &str) -> Vec<u8> {
        format!("{HEADER}{body}\n").into_bytes()
    }

    fn parse_yaml(body: &str) -> Result<KubeletConfig, ConfigError> {
        KubeletConfig::parse(&yaml_doc(body))
    }

    #[track_caller]
    fn valid(body: &str) -> KubeletConfig {
        let config = parse_yaml(body).unwrap_or_else(|e| panic!("parse {body:?}: {e}"));
        config
            .validate()
            .unwrap_or_else(|e| panic!("validate {body:?}: {e}"));
        config
    }

    #[track_caller]
    fn field_errors(body: &str) -> Vec<FieldError> {
        let config = parse_yaml(body).unwrap_or_else(|e| panic!("parse {body:?}: {e}"));
        match config.validate() {
            Err(ConfigError::Invalid(errors)) => errors,
            other => panic!("expected invalid configuration for {body:?}, got {other:?}"),
        }
    }

    #[track_caller]
    fn parse_error(body: &str) -> ConfigError {
        match parse_yaml(body) {
            Err(e) => e,
            Ok(config) => panic!("expected {body:?} to fail to parse, got {config:?}"),
        }
    }

    fn effective_field(config: &KubeletConfig, name: &str) -> Option<Value> {
        config.effective().get(name).cloned()
    }

    // --- documented examples ----------------------------------------------

    #[test]
    fn docs_config_file_example_parses_and_validates() {
        let config = KubeletConfig::parse_and_validate(DOCS_CONFIG_FILE_EXAMPLE.as_bytes())
            .expect("docs example");
        let mut expected = BTreeMap::new();
        expected.insert("memory.available".to_owned(), "200Mi".to_owned());
        assert_eq!(
            config.field("evictionHard"),
            Some(&FieldValue::StrMap(expected))
        );
        // A given evictionHard replaces the default one, it is not merged.
        assert_eq!(
            effective_field(&config, "evictionHard"),
            Some(serde_json::json!({"memory.available": "200Mi"}))
        );
        assert_eq!(effective_field(&config, "port"), Some(Value::from(10250)));
    }

    #[test]
    fn docs_current_config_file_example_parses_and_validates() {
        let config = KubeletConfig::parse_and_validate(DOCS_CONFIG_FILE_EXAMPLE_CURRENT.as_bytes())
            .expect("docs example");
        assert_eq!(config.field("port"), Some(&FieldValue::Int(20250)));
        assert_eq!(
            config.field("address"),
            Some(&FieldValue::Str("192.168.0.8".to_owned()))
        );
        assert_eq!(
            effective_field(&config, "serializeImagePulls"),
            Some(Value::Bool(false))
        );
        // The example spells out the default eviction thresholds.
        assert_eq!(
            config.effective().get("evictionHard"),
            KubeletConfig::defaults().effective().get("evictionHard")
        );
    }

    #[test]
    fn dkc_v111_configz_example_parses_and_validates() {
        let config =
            KubeletConfig::parse_and_validate(DKC_V111_CONFIGZ.as_bytes()).expect("configz");
        assert_eq!(config.crash_loop_threshold(), DEFAULT_CRASH_LOOP_THRESHOLD);
        assert_eq!(
            config.config_trial_duration(),
            DEFAULT_CONFIG_TRIAL_DURATION
        );
        assert_eq!(
            config.field("authentication.webhook.cacheTTL"),
            Some(&FieldValue::Duration(GoDuration::from_nanos(
                120_000_000_000
            )))
        );
        // The task's edit step: change eventRecordQPS, push it as a new ConfigMap.
        let edited = DKC_V111_CONFIGZ.replace("\"eventRecordQPS\": 5", "\"eventRecordQPS\": 10");
        let edited = KubeletConfig::parse_and_validate(edited.as_bytes()).expect("edited");
        assert_eq!(config.changed_fields(&edited), vec!["eventRecordQPS"]);
        assert_ne!(config.hash(), edited.hash());
    }

    #[test]
    fn dkc_fields_are_read_and_kept_from_the_kubelet() {
        let with_trial = DKC_V111_CONFIGZ.replacen(
            "\"staticPodPath\"",
            "\"crashLoopThreshold\": 3, \"configTrialDuration\": \"5m\", \"staticPodPath\"",
            1,
        );
        let config = KubeletConfig::parse_and_validate(with_trial.as_bytes()).expect("config");
        assert_eq!(config.crash_loop_threshold(), 3);
        assert_eq!(config.config_trial_duration(), Duration::from_secs(300));
        let effective = config.effective();
        assert!(effective.get(CRASH_LOOP_THRESHOLD_FIELD).is_none());
        assert!(effective.get(CONFIG_TRIAL_DURATION_FIELD).is_none());
        let plain = KubeletConfig::parse(DKC_V111_CONFIGZ.as_bytes()).expect("config");
        // The kubelet's file is the same; only kubelet-pivot's settings differ.
        assert_eq!(config.hash(), plain.hash());
        assert_eq!(
            config.changed_fields(&plain),
            vec![CONFIG_TRIAL_DURATION_FIELD, CRASH_LOOP_THRESHOLD_FIELD]
        );
    }

    #[test]
    fn kubelet_reservation_numbers_must_be_quoted() {
        // From the "Reserve Compute Resources" page: `pid: 1000` unquoted is a
        // number, which the kubelet cannot decode into map[string]string.
        let err = parse_error("kubeReserved:\n  cpu: 100m\n  memory: 100Mi\n  pid: 1000");
        match err {
            ConfigError::WrongType { path, .. } => assert_eq!(path, "kubeReserved.pid"),
            other => panic!("unexpected {other:?}"),
        }
        valid("kubeReserved:\n  cpu: 100m\n  memory: 100Mi\n  ephemeral-storage: 1Gi\n  pid: \"1000\"");
    }

    // --- validation rules: one failing case each ---------------------------

    /// (YAML body, path of the error, text the message contains).
    const RULES: &[(&str, &str, &str)] = &[
        ("port: 70000", "port", "port (70000) must be between 1 and 65535, inclusive"),
        ("port: -1", "port", "must be between 1 and 65535"),
        ("readOnlyPort: 70000", "readOnlyPort", "(70000) must be between 0 and 65535"),
        ("readOnlyPort: -5", "readOnlyPort", "must be between 0 and 65535"),
        ("healthzPort: 65536", "healthzPort", "(65536) must be between 1 and 65535"),
        ("address: not-an-ip", "address", "must be an IP address"),
        ("address: 10.0.0.300", "address", "must be an IP address"),
        ("healthzBindAddress: localhost", "healthzBindAddress", "must be an IP address"),
        ("kubeAPIQPS: -1", "kubeAPIQPS", "kubeAPIQPS (-1) must not be a negative number"),
        ("kubeAPIBurst: -1", "kubeAPIBurst", "must not be a negative number"),
        ("eventRecordQPS: -1", "eventRecordQPS", "must not be a negative number"),
        ("eventBurst: -1", "eventBurst", "must not be a negative number"),
        ("registryPullQPS: -1", "registryPullQPS", "must not be a negative number"),
        ("registryBurst: -1", "registryBurst", "must not be a negative number"),
        ("maxPods: -1", "maxPods", "must not be a negative number"),
        ("podsPerCore: -1", "podsPerCore", "must not be a negative number"),
        ("maxOpenFiles: -1", "maxOpenFiles", "must not be a negative number"),
        ("oomScoreAdj: 1001", "oomScoreAdj", "must be between -1000 and 1000"),
        ("iptablesMasqueradeBit: 32", "iptablesMasqueradeBit", "must be between 0 and 31"),
        ("iptablesDropBit: -1", "iptablesDropBit", "must be between 0 and 31"),
        ("nodeStatusMaxImages: -2", "nodeStatusMaxImages", "must be -1 or greater"),
        ("nodeLeaseDurationSeconds: -5", "nodeLeaseDurationSeconds", "must be greater than 0"),
        ("maxParallelImagePulls: 0", "maxParallelImagePulls", "must be a positive number"),
        (
            "maxParallelImagePulls: 3\nserializeImagePulls: true",
            "maxParallelImagePulls",
            "unless serializeImagePulls is false",
        ),
        ("memoryThrottlingFactor: 1.5", "memoryThrottlingFactor", "less than or equal to 1.0"),
        ("memoryThrottlingFactor: 0", "memoryThrottlingFactor", "greater than 0"),
        ("userNamespaces:\n  idsPerPod: 1000", "userNamespaces.idsPerPod", "multiple of 65536"),
        ("runOnce: true", "runOnce", "must not be set"),
        ("imageGCHighThresholdPercent: 101", "imageGCHighThresholdPercent", "between 0 and 100"),
        ("imageGCLowThresholdPercent: -1", "imageGCLowThresholdPercent", "between 0 and 100"),
        (
            "imageGCHighThresholdPercent: 70",
            "imageGCLowThresholdPercent",
            "(80) must be less than imageGCHighThresholdPercent (70)",
        ),
        ("imageMinimumGCAge: -1s", "imageMinimumGCAge", "(-1s) must not be negative"),
        ("imageMaximumGCAge: -1s", "imageMaximumGCAge", "must not be negative"),
        (
            "imageMaximumGCAge: 1m",
            "imageMaximumGCAge",
            "(1m0s) must be greater than imageMinimumGCAge (2m0s)",
        ),
        ("cgroupDriver: cgroup", "cgroupDriver", "must be one of: \"cgroupfs\", \"systemd\""),
        ("cpuManagerPolicy: dynamic", "cpuManagerPolicy", "must be one of"),
        ("memoryManagerPolicy: none", "memoryManagerPolicy", "\"None\", \"Static\""),
        ("topologyManagerPolicy: strict", "topologyManagerPolicy", "single-numa-node"),
        ("topologyManagerScope: node", "topologyManagerScope", "\"container\", \"pod\""),
        ("hairpinMode: veth", "hairpinMode", "hairpin-veth"),
        ("authorization:\n  mode: RBAC", "authorization.mode", "\"AlwaysAllow\", \"Webhook\""),
        (
            "configMapAndSecretChangeDetectionStrategy: Poll",
            "configMapAndSecretChangeDetectionStrategy",
            "\"Get\", \"Cache\", \"Watch\"",
        ),
        ("memorySwap:\n  swapBehavior: UnlimitedSwap", "memorySwap.swapBehavior", "NoSwap"),
        ("memoryReservationPolicy: Full", "memoryReservationPolicy", "TieredReservation"),
        (
            "imagePullCredentialsVerificationPolicy: Sometimes",
            "imagePullCredentialsVerificationPolicy",
            "AlwaysVerify",
        ),
        ("systemCgroups: /system.slice", "systemCgroups", "cgroupRoot was not"),
        (
            "reservedSystemCPUs: 0-3\nsystemReservedCgroup: /system.slice",
            "reservedSystemCPUs",
            "cannot be used with systemReservedCgroup",
        ),
        ("reservedSystemCPUs: 3-1", "reservedSystemCPUs", "runs backwards"),
        ("reservedSystemCPUs: a,b", "reservedSystemCPUs", "is not a CPU list"),
        ("cpuCFSQuotaPeriod: 2s", "cpuCFSQuotaPeriod", "(2s) must be between 1ms and 1s"),
        ("cpuCFSQuotaPeriod: 500us", "cpuCFSQuotaPeriod", "(500µs) must be between 1ms and 1s"),
        ("draManagerReconcilePeriod: -1s", "draManagerReconcilePeriod", "greater than zero"),
        (
            "crashLoopBackOff:\n  maxContainerRestartPeriod: 301s",
            "crashLoopBackOff.maxContainerRestartPeriod",
            "between 1s and 300s",
        ),
        ("shutdownGracePeriod: 500ms", "shutdownGracePeriod", "either zero or otherwise >= 1 sec"),
        (
            "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s",
            "shutdownGracePeriodCriticalPods",
            "(20s) must be <= shutdownGracePeriod (10s)",
        ),
        (
            "shutdownGracePeriod: 30s\nshutdownGracePeriodByPodPriority:\n- priority: 0\n  shutdownGracePeriodSeconds: 30",
            "shutdownGracePeriodByPodPriority",
            "cannot be specified together",
        ),
        ("enforceNodeAllocatable: [pods, pods]", "enforceNodeAllocatable[1]", "duplicate"),
        ("enforceNodeAllocatable: [pods, everything]", "enforceNodeAllocatable[1]", "must be one of"),
        ("enforceNodeAllocatable: [none, pods]", "enforceNodeAllocatable[0]", "may not be combined"),
        (
            "enforceNodeAllocatable: [pods, system-reserved]",
            "enforceNodeAllocatable[1]",
            "requires systemReservedCgroup",
        ),
        ("enforceNodeAllocatable: [kube-reserved]", "enforceNodeAllocatable[0]", "requires kubeReservedCgroup"),
        (
            "enforceNodeAllocatable: [system-reserved, system-reserved-compressible]\nsystemReservedCgroup: /system.slice",
            "enforceNodeAllocatable",
            "cannot contain both",
        ),
        ("cgroupsPerQOS: false", "enforceNodeAllocatable[0]", "requires cgroupsPerQOS to be true"),
        ("evictionHard:\n  memory.free: 100Mi", "evictionHard.memory.free", "not a supported eviction signal"),
        ("evictionHard:\n  swap.available: 10%", "evictionHard.swap.available", "not a supported eviction signal"),
        ("evictionHard:\n  memory.available: lots", "evictionHard.memory.available", "is invalid"),
        ("evictionHard:\n  memory.available: \"0\"", "evictionHard.memory.available", "must be positive"),
        ("evictionHard:\n  memory.available: -100Mi", "evictionHard.memory.available", "must be positive"),
        ("evictionHard:\n  nodefs.available: 150%", "evictionHard.nodefs.available", "between 0% and 100%"),
        ("evictionHard:\n  nodefs.available: \"-5%\"", "evictionHard.nodefs.available", "between 0% and 100%"),
        ("evictionHard:\n  nodefs.available: ten%", "evictionHard.nodefs.available", "is invalid"),
        ("evictionSoft:\n  pid.available: 1Mi", "evictionSoftGracePeriod.pid.available", "must be set because evictionSoft"),
        ("evictionSoft:\n  imagefs.available: 2%%", "evictionSoft.imagefs.available", "is invalid"),
        (
            "evictionSoft:\n  memory.available: 500Mi\nevictionSoftGracePeriod:\n  memory.available: soon",
            "evictionSoftGracePeriod.memory.available",
            "is not a duration",
        ),
        ("evictionSoftGracePeriod:\n  memory.available: -1m", "evictionSoftGracePeriod.memory.available", "must not be negative"),
        ("evictionSoftGracePeriod:\n  disk.available: 1m", "evictionSoftGracePeriod.disk.available", "not a supported"),
        ("evictionMinimumReclaim:\n  memory.available: 0%", "evictionMinimumReclaim.memory.available", "must be positive"),
        ("evictionMinimumReclaim:\n  imagefs.available: -2Gi", "evictionMinimumReclaim.imagefs.available", "must not be negative"),
        ("evictionMinimumReclaim:\n  gpu.available: 1Gi", "evictionMinimumReclaim.gpu.available", "not a supported"),
        ("kubeReserved:\n  gpu: \"1\"", "kubeReserved.gpu", "cannot be reserved"),
        ("kubeReserved:\n  memory: 1GB", "kubeReserved.memory", "is invalid"),
        ("systemReserved:\n  cpu: -100m", "systemReserved.cpu", "must not be negative"),
        ("systemReserved:\n  hugepages-2Mi: 1Gi", "systemReserved.hugepages-2Mi", "cannot be reserved"),
        ("qosReserved:\n  cpu: 50%", "qosReserved.cpu", "only memory"),
        ("qosReserved:\n  memory: 150%", "qosReserved.memory", "between 0% and 100%"),
        ("containerLogMaxSize: ten megabytes", "containerLogMaxSize", "is invalid"),
        ("containerLogMaxFiles: 1", "containerLogMaxFiles", "must be greater than 1"),
        ("containerLogMaxWorkers: 0", "containerLogMaxWorkers", "greater than or equal to 1"),
        ("containerLogMonitorInterval: 1s", "containerLogMonitorInterval", "at least 3s"),
        ("podLogsDir: var/log/pods", "podLogsDir", "absolute"),
        ("podLogsDir: /var/log//pods", "podLogsDir", "normalized"),
        ("podLogsDir: /var/log/pods/", "podLogsDir", "normalized"),
        ("podLogsDir: /var/log/../pods", "podLogsDir", "normalized"),
        ("podLogsDir: /var/lög", "podLogsDir", "ASCII"),
        (
            "crashLoopThreshold: 11",
            "crashLoopThreshold",
            "crashLoopThreshold (11) must be between 0 and 10, inclusive",
        ),
        ("crashLoopThreshold: -1", "crashLoopThreshold", "must be between 0 and 10"),
        ("configTrialDuration: -1m", "configTrialDuration", "(-1m0s) must not be negative"),
    ];

    #[test]
    fn every_rule_has_a_failing_case() {
        for (body, path, needle) in RULES {
            let errors = field_errors(body);
            assert!(
                errors
                    .iter()
                    .any(|e| e.path == *path && e.message.contains(needle)),
                "{body:?}: no error at {path:?} containing {needle:?}; got {errors:#?}"
            );
        }
    }

    #[test]
    fn rule_messages_start_with_their_path() {
        for (body, _, _) in RULES {
            for error in field_errors(body) {
                assert!(
                    error.message.starts_with(&error.path),
                    "{error:?} does not start with its path"
                );
            }
        }
    }

    #[test]
    fn invalid_display_is_kubelet_style() {
        let err = parse_yaml("port: 70000")
            .and_then(|c| c.validate())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration: port (70000) must be between 1 and 65535, inclusive"
        );
        assert_eq!(
            err.status_message(),
            "failed to validate config, see Kubelet log for details"
        );
    }

    #[test]
    fn every_failure_is_reported_at_once() {
        let errors =
            field_errors("port: 70000\nmaxPods: -1\ncgroupDriver: upstart\ncrashLoopThreshold: 12");
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths.len(), 4, "{errors:#?}");
        for path in ["port", "maxPods", "cgroupDriver", "crashLoopThreshold"] {
            assert!(paths.contains(&path), "{path} missing from {paths:?}");
        }
        let text = ConfigError::Invalid(errors).to_string();
        assert_eq!(text.matches("invalid configuration: ").count(), 4, "{text}");
    }

    #[test]
    fn boundary_values_are_valid() {
        for body in [
            "port: 1",
            "port: 65535",
            "readOnlyPort: 0",
            "readOnlyPort: 10255",
            "healthzPort: 0",
            "address: \"::\"",
            "address: fe80::1",
            "kubeAPIQPS: 0",
            "oomScoreAdj: -1000",
            "nodeStatusMaxImages: -1",
            "imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 0",
            "cpuCFSQuotaPeriod: 1ms",
            "cpuCFSQuotaPeriod: 1s",
            "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s",
            "shutdownGracePeriodByPodPriority:\n- priority: 100000\n  shutdownGracePeriodSeconds: 10\n- priority: 0\n  shutdownGracePeriodSeconds: 30",
            "enforceNodeAllocatable: []\ncgroupsPerQOS: false",
            "enforceNodeAllocatable: [none]\ncgroupsPerQOS: false",
            "enforceNodeAllocatable: [pods, system-reserved, kube-reserved-compressible]\nsystemReservedCgroup: /system.slice\nkubeReservedCgroup: /kube.slice",
            "evictionHard:\n  memory.available: 0%",
            "evictionHard:\n  nodefs.available: 100%\n  imagefs.inodesFree: 12.5%\n  pid.available: 1k",
            "evictionSoft:\n  memory.available: 1.5Gi\nevictionSoftGracePeriod:\n  memory.available: 1m30s\n  nodefs.available: 2m",
            "evictionMinimumReclaim:\n  memory.available: \"0\"\n  nodefs.available: 500Mi\n  imagefs.available: 2%",
            "kubeReserved:\n  cpu: \"0\"\n  memory: \"1.5e9\"\n  ephemeral-storage: 10G",
            "qosReserved:\n  memory: 100%",
            "reservedSystemCPUs: 0-1,4",
            "maxParallelImagePulls: 5\nserializeImagePulls: false",
            "maxParallelImagePulls: 1",
            "memoryThrottlingFactor: 1",
            "userNamespaces:\n  idsPerPod: 131072",
            "crashLoopThreshold: 0\nconfigTrialDuration: \"0\"",
            "crashLoopThreshold: 10\nconfigTrialDuration: 1h",
            "podLogsDir: /var/log/pods",
            "draManagerReconcilePeriod: 0s",
        ] {
            valid(body);
        }
    }

    // --- strict parsing -------------------------------------------------------

    #[test]
    fn unknown_top_level_field_is_rejected() {
        let err = parse_error("fooBar: 1");
        assert!(
            matches!(&err, ConfigError::UnknownField { path } if path == "fooBar"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "unknown field \"fooBar\"");
        assert_eq!(
            err.status_message(),
            "failed to load config, see Kubelet log for details"
        );
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
    fn unmodelled_known_fields_are_carried_untouched() {
        let body = "logging:\n  format: json\n  verbosity: 4\n  options:\n    json:\n      infoBufferSize: \"0\"\nregisterWithTaints:\n- key: dedicated\n  value: infra\n  effect: NoSchedule\ntracing:\n  samplingRatePerMillion: 100\nstaticPodURLHeader:\n  X-Token: [abc]";
        let config = valid(body);
        let effective = config.effective();
        assert_eq!(
            effective.get("logging"),
            Some(
                &serde_json::json!({"format": "json", "verbosity": 4, "options": {"json": {"infoBufferSize": "0"}}})
            )
        );
        assert_eq!(
            effective.get("registerWithTaints"),
            Some(
                &serde_json::json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])
            )
        );
        assert_eq!(
            effective.get("staticPodURLHeader"),
            Some(&serde_json::json!({"X-Token": ["abc"]}))
        );
        assert!(is_known_field("tracing") && is_known_field("kind") && !is_known_field("fooBar"));
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

    // --- defaults ---------------------------------------------------------

    #[test]
    fn defaults_are_valid_and_complete() {
        let defaults = KubeletConfig::defaults();
        defaults.validate().expect("defaults are valid");
        assert_eq!(defaults.crash_loop_threshold(), 10);
        assert_eq!(defaults.config_trial_duration(), Duration::from_secs(600));
        let effective = defaults.effective();
        for (name, value) in [
            ("apiVersion", serde_json::json!(API_VERSION)),
            ("kind", serde_json::json!(KIND)),
            ("port", serde_json::json!(10250)),
            ("address", serde_json::json!("0.0.0.0")),
            ("healthzPort", serde_json::json!(10248)),
            ("syncFrequency", serde_json::json!("1m0s")),
            (
                "streamingConnectionIdleTimeout",
                serde_json::json!("4h0m0s"),
            ),
            ("nodeStatusReportFrequency", serde_json::json!("5m0s")),
            ("kubeAPIQPS", serde_json::json!(50)),
            ("maxPods", serde_json::json!(110)),
            ("podPidsLimit", serde_json::json!(-1)),
            ("oomScoreAdj", serde_json::json!(-999)),
            ("cgroupDriver", serde_json::json!("cgroupfs")),
            ("cpuManagerPolicy", serde_json::json!("none")),
            ("memoryManagerPolicy", serde_json::json!("None")),
            ("topologyManagerPolicy", serde_json::json!("none")),
            ("topologyManagerScope", serde_json::json!("container")),
            ("serializeImagePulls", serde_json::json!(true)),
            ("enforceNodeAllocatable", serde_json::json!(["pods"])),
            (
                "evictionHard",
                serde_json::json!({"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%"}),
            ),
            (
                "authentication",
                serde_json::json!({"anonymous": {"enabled": false}, "webhook": {"enabled": true, "cacheTTL": "2m0s"}}),
            ),
            (
                "authorization",
                serde_json::json!({"mode": "Webhook", "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"}}),
            ),
        ] {
            assert_eq!(effective.get(name), Some(&value), "{name}");
        }
        for absent in [
            "readOnlyPort",
            "memorySwap",
            "evictionSoft",
            "logging",
            "crashLoopThreshold",
        ] {
            assert!(effective.get(absent).is_none(), "{absent}");
        }
        let minimal = KubeletConfig::parse(HEADER.as_bytes()).expect("header only");
        assert_eq!(minimal.hash(), defaults.hash());
        assert_eq!(minimal, defaults);
    }

    #[test]
    fn zero_values_of_go_value_fields_get_defaults() {
        let config = valid("port: 0\naddress: \"\"\nsyncFrequency: 0s\nmaxPods: 0\ncgroupDriver: \"\"\nimageMinimumGCAge: \"0\"\nauthorization:\n  mode: \"\"");
        let effective = config.effective();
        assert_eq!(effective["port"], 10250);
        assert_eq!(effective["address"], "0.0.0.0");
        assert_eq!(effective["syncFrequency"], "1m0s");
        assert_eq!(effective["maxPods"], 110);
        assert_eq!(effective["cgroupDriver"], "cgroupfs");
        assert_eq!(effective["imageMinimumGCAge"], "2m0s");
        assert_eq!(effective["authorization"]["mode"], "Webhook");
    }

    #[test]
    fn zero_values_of_go_pointer_fields_are_kept() {
        let config = valid("healthzPort: 0\nregistryPullQPS: 0\nimageGCLowThresholdPercent: 0\ncgroupsPerQOS: false\nenforceNodeAllocatable: []\nevictionHard: {}\nauthentication:\n  webhook:\n    enabled: false");
        let effective = config.effective();
        assert_eq!(effective["healthzPort"], 0);
        assert_eq!(effective["registryPullQPS"], 0);
        assert_eq!(effective["imageGCLowThresholdPercent"], 0);
        assert_eq!(effective["cgroupsPerQOS"], false);
        assert_eq!(effective["enforceNodeAllocatable"], serde_json::json!([]));
        assert_eq!(effective["evictionHard"], serde_json::json!({}));
        assert_eq!(effective["authentication"]["webhook"]["enabled"], false);
        assert_eq!(effective["authentication"]["webhook"]["cacheTTL"], "2m0s");
    }

    #[test]
    fn nulls_mean_unset() {
        let config =
            valid("port: null\nshutdownGracePeriod: ~\nauthentication: null\nlogging: null");
        let effective = config.effective();
        assert_eq!(effective["port"], 10250);
        assert!(effective.get("shutdownGracePeriod").is_none());
        assert_eq!(effective["authentication"]["anonymous"]["enabled"], false);
        // Unmodelled: untouched, the kubelet decides.
        assert_eq!(effective["logging"], Value::Null);
        assert_eq!(config.field("port"), None);
    }

    #[test]
    fn computed_defaults_follow_the_kubelet() {
        let config = valid("nodeStatusUpdateFrequency: 20s");
        assert_eq!(config.effective()["nodeStatusReportFrequency"], "20s");
        let config = valid("nodeStatusUpdateFrequency: 20s\nnodeStatusReportFrequency: 1m");
        assert_eq!(config.effective()["nodeStatusReportFrequency"], "1m");
        let config = valid("maxParallelImagePulls: 3");
        assert_eq!(config.effective()["serializeImagePulls"], false);
        let config = valid("maxParallelImagePulls: 1");
        assert_eq!(config.effective()["serializeImagePulls"], true);
    }

    #[test]
    fn effective_is_idempotent() {
        let config = KubeletConfig::parse(DKC_V111_CONFIGZ.as_bytes()).expect("config");
        let again = KubeletConfig::parse(&config.effective_bytes()).expect("effective parses");
        assert_eq!(again.effective(), config.effective());
        assert_eq!(again.effective_bytes(), config.effective_bytes());
    }

    // --- hashing and change detection ---------------------------------------

    #[test]
    fn hash_ignores_key_order_formatting_and_syntax() {
        let yaml = "kind: KubeletConfiguration\nevictionHard:\n  nodefs.available: 10%\n  memory.available: 500Mi\nport: 10251\napiVersion: kubelet.config.k8s.io/v1beta1\nkubeReserved: {memory: 1Gi, cpu: 200m}\n";
        let json_compact = r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","port":10251,"kubeReserved":{"cpu":"200m","memory":"1Gi"},"evictionHard":{"memory.available":"500Mi","nodefs.available":"10%"}}"#;
        let json_pretty = "\n  {\n \"port\" : 10251,\n \"evictionHard\": {\"nodefs.available\": \"10%\",\n  \"memory.available\": \"500Mi\"},\n \"kubeReserved\": {\"memory\": \"1Gi\", \"cpu\": \"200m\"},\n \"kind\": \"KubeletConfiguration\", \"apiVersion\": \"kubelet.config.k8s.io/v1beta1\"}\n";
        let hashes: Vec<String> = [yaml, json_compact, json_pretty]
            .iter()
            .map(|doc| {
                KubeletConfig::parse_and_validate(doc.as_bytes())
                    .expect("valid")
                    .hash()
            })
            .collect();
        assert_eq!(hashes[0], hashes[1]);
        assert_eq!(hashes[1], hashes[2]);
        assert_eq!(hashes[0].len(), 64);
        assert!(hashes[0]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(HASH_ALGORITHM, "sha256-canonical-json-v1");
        let changed = yaml.replace("500Mi", "600Mi");
        assert_ne!(
            KubeletConfig::parse(changed.as_bytes())
                .expect("config")
                .hash(),
            hashes[0]
        );
    }

    #[test]
    fn spelling_out_a_default_does_not_change_the_hash() {
        let implicit = valid("");
        let explicit = valid("port: 10250\nsyncFrequency: 1m0s\nevictionHard:\n  memory.available: 100Mi\n  nodefs.available: 10%\n  nodefs.inodesFree: 5%\n  imagefs.available: 15%");
        assert_eq!(implicit.hash(), explicit.hash());
        assert!(implicit.changed_fields(&explicit).is_empty());
    }

    #[test]
    fn effective_bytes_are_canonical_json() {
        let config = valid("port: 10251\nstaticPodPath: \"/etc/k8s \\\"manifests\\\"\\n\"");
        let bytes = config.effective_bytes();
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert!(text.starts_with("{\"address\":\"0.0.0.0\",\"apiVersion\":\"kubelet.config.k8s.io/v1beta1\",\"authentication\":{\"anonymous\":{\"enabled\":false},\"webhook\":{\"cacheTTL\":\"2m0s\",\"enabled\":true}},"), "{text}");
        assert!(
            text.contains("\"staticPodPath\":\"/etc/k8s \\\"manifests\\\"\\n\""),
            "{text}"
        );
        assert!(!text.contains('\n') && !text.contains(": ") && !text.contains(", "));
        let reparsed: Value = serde_json::from_slice(&bytes).expect("valid JSON");
        assert_eq!(reparsed, config.effective());
        let mut expected = String::new();
        write_canonical(&reparsed, &mut expected);
        assert_eq!(expected.into_bytes(), bytes);
    }

    #[test]
    fn changed_fields_names_top_level_differences() {
        let base = valid("kubeReserved:\n  cpu: 100m\nmaxPods: 110\nlogging:\n  format: text");
        assert!(base.changed_fields(&base.clone()).is_empty());
        let other = valid("kubeReserved:\n  cpu: 200m\nlogging:\n  format: json\ncpuManagerPolicy: static\ncrashLoopThreshold: 2");
        assert_eq!(
            base.changed_fields(&other),
            vec![
                "cpuManagerPolicy",
                "crashLoopThreshold",
                "kubeReserved",
                "logging"
            ]
        );
        assert_eq!(other.changed_fields(&base), base.changed_fields(&other));
    }

    #[test]
    fn pivot_accessors_fall_back_on_unvalidated_values() {
        let config =
            parse_yaml("crashLoopThreshold: 50\nconfigTrialDuration: -5m").expect("parses");
        assert!(config.validate().is_err());
        assert_eq!(config.crash_loop_threshold(), 10);
        assert_eq!(
            config.config_trial_duration(),
            DEFAULT_CONFIG_TRIAL_DURATION
        );
        let config = parse_yaml("crashLoopThreshold: -3").expect("parses");
        assert_eq!(config.crash_loop_threshold(), 0);
        let config = valid("configTrialDuration: 0s");
        assert_eq!(config.config_trial_duration(), Duration::ZERO);
    }

    // --- Go durations -------------------------------------------------------

    #[test]
    fn go_durations_parse_like_go() {
        const S: i64 = 1_000_000_000;
        const MIN: i64 = 60 * S;
        const H: i64 = 60 * MIN;
        // Cases from Go's time package tests.
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("5s", 5 * S),
            ("30s", 30 * S),
            ("1478s", 1478 * S),
            ("-5s", -5 * S),
            ("+5s", 5 * S),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5 * S),
            ("5.6s", 5 * S + 600_000_000),
            ("5.s", 5 * S),
            (".5s", S / 2),
            ("1.0s", S),
            ("1.00s", S),
            ("1.004s", S + 4_000_000),
            ("1.0040s", S + 4_000_000),
            ("100.00100s", 100 * S + 1_000_000),
            ("10ns", 10),
            ("11us", 11_000),
            ("12µs", 12_000),
            ("12μs", 12_000),
            ("13ms", 13_000_000),
            ("14s", 14 * S),
            ("15m", 15 * MIN),
            ("16h", 16 * H),
            ("3h30m", 3 * H + 30 * MIN),
            ("10.5s4m", 4 * MIN + 10 * S + S / 2),
            ("-2m3.4s", -(2 * MIN + 3 * S + 400_000_000)),
            (
                "1h2m3s4ms5us6ns",
                H + 2 * MIN + 3 * S + 4_000_000 + 5_000 + 6,
            ),
            ("39h9m14.425s", 39 * H + 9 * MIN + 14 * S + 425_000_000),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 20 * MIN),
            ("9007199254740993ns", (1 << 53) + 1),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("9223372036s854ms775us807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("-9223372036854775.808us", i64::MIN),
            ("0.100000000000000000000h", 6 * MIN),
            ("0.830103483285477580700h", 49 * MIN + 48 * S + 372_539_827),
        ];
        for (text, nanos) in cases {
            assert_eq!(
                GoDuration::parse(text),
                Ok(GoDuration::from_nanos(*nanos)),
                "{text}"
            );
        }
    }

    #[test]
    fn go_duration_errors_match_go() {
        for text in [
            "",
            "3",
            "-",
            "s",
            ".",
            "-.",
            ".s",
            "+.s",
            "1d",
            "1.5",
            "1h 2m",
            " 1s",
            "1s ",
            "9223372036854775808ns",
            "9223372036854775.808us",
            "9223372036854ms775us808ns",
            "-9223372036854775809ns",
            "1e3s",
            "0x10s",
        ] {
            assert!(
                GoDuration::parse(text).is_err(),
                "{text:?} should not parse"
            );
        }
        assert_eq!(
            GoDuration::parse("3").unwrap_err().to_string(),
            "time: missing unit in duration \"3\""
        );
        assert_eq!(
            GoDuration::parse("1d").unwrap_err().to_string(),
            "time: unknown unit \"d\" in duration \"1d\""
        );
        assert_eq!(
            GoDuration::parse("").unwrap_err().to_string(),
            "time: invalid duration \"\""
        );
    }

    #[test]
    fn go_durations_format_like_go() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (3_300_000_000, "3.3s"),
            (4 * 60_000_000_000 + 5_000_000_000, "4m5s"),
            (4 * 60_000_000_000 + 5_001_000_000, "4m5.001s"),
            (
                5 * 3_600_000_000_000 + 6 * 60_000_000_000 + 7_001_000_000,
                "5h6m7.001s",
            ),
            (8 * 60_000_000_000 + 1, "8m0.000000001s"),
            (3_600_000_000_000, "1h0m0s"),
            (-1_500_000_000, "-1.5s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for (nanos, text) in cases {
            assert_eq!(GoDuration::from_nanos(*nanos).to_string(), *text);
        }
        assert_eq!(
            "90s".parse::<GoDuration>().map(|d| d.to_string()),
            Ok("1m30s".to_owned())
        );
        assert_eq!(GoDuration::from_nanos(-1).to_std(), None);
        assert_eq!(
            GoDuration::from_nanos(1500).to_std(),
            Some(Duration::from_nanos(1500))
        );
    }

    // --- quantities ---------------------------------------------------------

    #[test]
    fn kubernetes_quantities_parse() {
        for (text, shown) in [
            ("0", "0"),
            ("100Mi", "100Mi"),
            ("1.5Gi", "1.5Gi"),
            ("100m", "100m"),
            ("250m", "250m"),
            ("1k", "1k"),
            ("1M", "1M"),
            ("1G", "1G"),
            ("2T", "2T"),
            ("3P", "3P"),
            ("4E", "4E"),
            ("1Ki", "1Ki"),
            ("1Ti", "1Ti"),
            ("1Pi", "1Pi"),
            ("1Ei", "1Ei"),
            ("1e3", "1e3"),
            ("1E3", "1e3"),
            ("1e-3", "1e-3"),
            ("12e+6", "12e6"),
            ("+1", "1"),
            ("-1", "-1"),
            (".5", "0.5"),
            ("5.", "5"),
            ("007", "7"),
            ("5n", "5n"),
            ("5u", "5u"),
            ("1.50", "1.50"),
        ] {
            let quantity = Quantity::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(quantity.to_string(), shown, "{text}");
        }
        assert_eq!(
            Quantity::parse("1E").map(|q| q.suffix()),
            Ok(QuantitySuffix::Exa)
        );
        assert_eq!(
            Quantity::parse("1E2").map(|q| q.suffix()),
            Ok(QuantitySuffix::Exponent(2))
        );
        assert!(Quantity::parse("-0")
            .is_ok_and(|q| q.is_zero() && !q.is_negative() && !q.is_positive()));
        assert!(Quantity::parse("-0.001").is_ok_and(|q| q.is_negative()));
        assert!(Quantity::parse("0.000m").is_ok_and(|q| q.is_zero()));
        assert!(Quantity::parse("0.001m").is_ok_and(|q| q.is_positive()));
    }

    #[test]
    fn malformed_quantities_are_rejected() {
        for text in [
            "",
            "abc",
            "1K",
            "1 Gi",
            " 1",
            "1Gi ",
            "1.2.3",
            "1e",
            "Mi",
            "-",
            "+",
            ".",
            "1mi",
            "1KiB",
            "1GB",
            "e3",
            "0x10",
            "1e99999999999",
            "1e3.5",
            "1Gi1",
            "--1",
            "1,000",
        ] {
            assert!(Quantity::parse(text).is_err(), "{text:?} should not parse");
        }
    }

    #[test]
    fn eviction_thresholds_parse() {
        assert_eq!(
            EvictionThreshold::parse("10%"),
            Ok(EvictionThreshold::Percentage(10.0))
        );
        assert_eq!(
            EvictionThreshold::parse("12.5%"),
            Ok(EvictionThreshold::Percentage(12.5))
        );
        assert_eq!(
            EvictionThreshold::parse("1e1%"),
            Ok(EvictionThreshold::Percentage(10.0))
        );
        assert!(matches!(
            EvictionThreshold::parse("100Mi"),
            Ok(EvictionThreshold::Quantity(_))
        ));
        for text in [
            "%", "inf%", "NaN%", "10%%", "1e%", "0x1p-2%", " 10%", "ten%",
        ] {
            assert!(EvictionThreshold::parse(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn helper_predicates() {
        assert!(is_clean_path("/") && is_clean_path("/var/log/pods"));
        for path in [
            "/var//log",
            "/var/./log",
            "/var/../log",
            "/var/log/",
            "var/log",
        ] {
            assert!(!is_clean_path(path), "{path}");
        }
        assert!(check_cpu_list("0").is_ok() && check_cpu_list("0-3,8,10-11").is_ok());
        for list in ["", "0-", "-1", "1,,2", "a", "3-1"] {
            assert!(check_cpu_list(list).is_err(), "{list:?}");
        }
        assert_eq!(yaml11_reading("On"), Some("a boolean"));
        assert_eq!(yaml11_reading("0"), None);
        assert_eq!(yaml11_reading("10"), None);
        assert_eq!(yaml11_reading("09"), None);
        assert_eq!(yaml11_reading("1:75"), None);
        assert_eq!(yaml11_reading("190:20:30"), Some("a base-60 integer"));
    }

    // --- properties ---------------------------------------------------------

    fn arb_threshold() -> impl Strategy<Value = String> {
        prop_oneof![
            "[1-9][0-9]{0,3}(Ki|Mi|Gi|k|M|G)?",
            (0u32..=100).prop_map(|p| format!("{p}%")),
            (0u32..=1000).prop_map(|p| format!("{}.{}%", p / 10, p % 10)),
        ]
    }

    fn arb_duration_text() -> impl Strategy<Value = String> {
        (0i64..10_000_000_000_000).prop_map(|n| GoDuration::from_nanos(n).to_string())
    }

    /// Random configs of the right types (not necessarily valid).
    fn arb_config() -> impl Strategy<Value = Map<String, Value>> {
        (
            (
                prop::option::of(1i64..=65535),
                prop::option::of(0i64..=65535),
                prop::option::of(arb_duration_text()),
                prop::option::of(prop::collection::btree_map(
                    prop::sample::select(EVICTION_SIGNALS.to_vec()),
                    arb_threshold(),
                    0..4,
                )),
                prop::option::of(prop::collection::btree_map(
                    prop::sample::select(RESERVABLE_RESOURCES.to_vec()),
                    "[1-9][0-9]{0,3}(m|Mi|Gi)?",
                    0..4,
                )),
                prop::option::of("/[a-z]{1,8}(/[a-z]{1,8}){0,2}"),
            ),
            (
                prop::option::of(prop::collection::btree_map(
                    "[A-Z][a-zA-Z]{1,12}",
                    any::<bool>(),
                    0..3,
                )),
                prop::option::of((prop::sample::select(vec!["text", "json"]), 0u8..10)),
                prop::option::of(0.01f64..=1.0),
                prop::option::of(0i64..=10),
                prop::option::of(arb_duration_text()),
                prop::option::of(any::<bool>()),
            ),
        )
            .prop_map(
                |(
                    (port, read_only, sync, eviction, reserved, static_path),
                    (gates, logging, throttling, threshold, trial, fail_swap),
                )| {
                    let mut doc = Map::new();
                    doc.insert("apiVersion".into(), API_VERSION.into());
                    doc.insert("kind".into(), KIND.into());
                    let mut put = |name: &str, value: Option<Value>| {
                        if let Some(value) = value {
                            doc.insert(name.to_owned(), value);
                        }
                    };
                    put("port", port.map(Value::from));
                    put("readOnlyPort", read_only.map(Value::from));
                    put("syncFrequency", sync.map(Value::from));
                    put("evictionHard", eviction.map(|m| serde_json::json!(m)));
                    put("kubeReserved", reserved.map(|m| serde_json::json!(m)));
                    put("staticPodPath", static_path.map(Value::from));
                    put("featureGates", gates.map(|m| serde_json::json!(m)));
                    put(
                        "logging",
                        logging.map(|(f, v)| serde_json::json!({"format": f, "verbosity": v})),
                    );
                    put("memoryThrottlingFactor", throttling.map(Value::from));
                    put(CRASH_LOOP_THRESHOLD_FIELD, threshold.map(Value::from));
                    put(CONFIG_TRIAL_DURATION_FIELD, trial.map(Value::from));
                    put("failSwapOn", fail_swap.map(Value::from));
                    doc
                },
            )
    }

    fn sample_documents() -> Vec<Vec<u8>> {
        vec![
            DKC_V111_CONFIGZ.as_bytes().to_vec(),
            DOCS_CONFIG_FILE_EXAMPLE_CURRENT.as_bytes().to_vec(),
            yaml_doc("authentication:\n  webhook:\n    cacheTTL: 1m\nshutdownGracePeriodByPodPriority:\n- priority: 1\n  shutdownGracePeriodSeconds: 2\nlogging: &l {a: [1, 2]}\ntracing: *l"),
        ]
    }

    proptest! {
        #[test]
        fn prop_duration_format_parse_round_trip(nanos in any::<i64>()) {
            let duration = GoDuration::from_nanos(nanos);
            prop_assert_eq!(GoDuration::parse(&duration.to_string()), Ok(duration));
        }

        #[test]
        fn prop_duration_components_sum(h in 0i64..1000, m in 0i64..60, s in 0i64..60, ms in 0i64..1000) {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let nanos = ((h * 60 + m) * 60 + s) * 1_000_000_000 + ms * 1_000_000;
            prop_assert_eq!(GoDuration::parse(&text), Ok(GoDuration::from_nanos(nanos)));
        }

        #[test]
        fn prop_duration_parse_never_panics(text in "\\PC{0,40}", structured in "[-+]?([0-9.]{0,22}(ns|us|µs|ms|s|m|h|x)?){0,4}") {
            let _ = GoDuration::parse(&text);
            if let Ok(duration) = GoDuration::parse(&structured) {
                prop_assert_eq!(GoDuration::parse(&duration.to_string()), Ok(duration));
            }
        }

        #[test]
        fn prop_quantity_format_parse_round_trip(
            sign in "[+-]?",
            integer in "[0-9]{0,12}",
            fraction in "(\\.[0-9]{0,6})?",
            suffix in prop_oneof![
                prop::sample::select(NAMED_SUFFIXES.iter().map(|(name, _)| (*name).to_owned()).collect::<Vec<_>>()),
                (any::<i32>(), any::<bool>()).prop_map(|(e, upper)| format!("{}{e}", if upper { 'E' } else { 'e' })),
            ],
        ) {
            let text = format!("{sign}{integer}{fraction}{suffix}");
            let has_digits = !integer.is_empty() || fraction.len() > 1;
            match Quantity::parse(&text) {
                Ok(quantity) => {
                    prop_assert!(has_digits);
                    let shown = quantity.to_string();
                    prop_assert_eq!(Quantity::parse(&shown), Ok(quantity.clone()));
                    prop_assert_eq!(Quantity::parse(&shown).map(|q| q.to_string()), Ok(shown));
                }
                Err(_) => prop_assert!(!has_digits, "{} should parse", text),
            }
        }

        #[test]
        fn prop_quantity_parse_never_panics(text in "\\PC{0,30}") {
            if let Ok(quantity) = Quantity::parse(&text) {
                prop_assert_eq!(Quantity::parse(&quantity.to_string()), Ok(quantity));
            }
        }

        #[test]
        fn prop_parse_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
            let _ = KubeletConfig::parse_and_validate(&bytes);
            let mut json = b"{".to_vec();
            json.extend_from_slice(&bytes);
            let _ = KubeletConfig::parse_and_validate(&json);
        }

        #[test]
        fn prop_parse_never_panics_on_mutated_configs(
            which in 0usize..3,
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
        ) {
            let mut doc = sample_documents().swap_remove(which);
            for (at, byte, op) in edits {
                let at = at.index(doc.len() + 1);
                match op {
                    0 => doc.insert(at, byte),
                    1 if at < doc.len() => { doc[at] = byte; }
                    _ if at < doc.len() => { doc.remove(at); }
                    _ => {}
                }
            }
            if let Ok(config) = KubeletConfig::parse_and_validate(&doc) {
                let again = KubeletConfig::parse_and_validate(&config.effective_bytes());
                prop_assert_eq!(again.map(|c| c.hash()).ok(), Some(config.hash()));
            }
        }

        #[test]
        fn prop_effective_bytes_reparse_to_the_same_hash(doc in arb_config()) {
            let bytes = serde_json::to_vec(&Value::Object(doc)).expect("serializes");
            let config = KubeletConfig::parse(&bytes).expect("generated configs parse");
            let again = KubeletConfig::parse(&config.effective_bytes()).expect("effective parses");
            prop_assert_eq!(again.hash(), config.hash());
            prop_assert_eq!(again.effective(), config.effective());
            prop_assert_eq!(again.validate().is_ok(), config.validate().is_ok());
        }

        #[test]
        fn prop_yaml_and_json_of_one_document_hash_alike(doc in arb_config()) {
            let value = Value::Object(doc);
            let json = serde_json::to_vec_pretty(&value).expect("json");
            let yaml = serde_yaml_ng::to_string(&value).expect("yaml");
            let from_json = KubeletConfig::parse(&json).expect("json parses");
            let from_yaml = KubeletConfig::parse(yaml.as_bytes())
                .unwrap_or_else(|e| panic!("{yaml}: {e}"));
            prop_assert_eq!(from_json.hash(), from_yaml.hash());
            prop_assert_eq!(&from_json, &from_yaml);
            prop_assert!(from_json.changed_fields(&from_yaml).is_empty());
        }
    }
}
