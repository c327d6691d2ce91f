//! Go durations ([`GoDuration`]): `metav1.Duration` values, parsed with Go's
//! `time.ParseDuration` grammar and shown as Go's `Duration.String()`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
    }
}
