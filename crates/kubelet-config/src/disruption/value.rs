//! Canonical forms of the values the kubelet reads by value, so that two
//! spellings of one value compare (and hash) alike: quantities (`"1Gi"` and
//! `"1024Mi"`, `"500m"` and `"0.5"`), eviction thresholds (quantities or
//! percentages, never equal to each other) and Go durations (`"60s"` and
//! `"1m0s"`).
//!
//! A value that does not parse is kept as written, tagged
//! (`{"unparsed": text}`), so it can never equal the canonical form of a
//! value that does.

use serde_json::{json, Value};

use crate::{EvictionThreshold, GoDuration, Quantity, QuantitySuffix};

/// Largest power of ten written out in full; beyond it the canonical text
/// uses an exponent (`"15e30"`), so a huge exponent never becomes a huge
/// string.
const PLAIN_EXPONENT_LIMIT: i64 = 18;

/// Largest difference of decimal exponents [`Exact::checked_add`] aligns;
/// beyond it the sum is not computed (the values are compared one by one).
const MAX_ALIGN_DIGITS: i64 = 64;

/// An exact decimal value: `digits × 10^exponent`, digits without leading
/// or trailing zeros (none at all for zero). Every Kubernetes quantity is
/// one: binary suffixes are powers of two, which are finite decimals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Exact {
    negative: bool,
    /// Decimal digits (0..=9), most significant first.
    digits: Vec<u8>,
    exponent: i64,
}

/// The decimal and binary exponents of a suffix: its factor is
/// `10^decimal × 2^binary`.
fn suffix_exponents(suffix: QuantitySuffix) -> (i64, u32) {
    match suffix {
        QuantitySuffix::None => (0, 0),
        QuantitySuffix::Nano => (-9, 0),
        QuantitySuffix::Micro => (-6, 0),
        QuantitySuffix::Milli => (-3, 0),
        QuantitySuffix::Kilo => (3, 0),
        QuantitySuffix::Mega => (6, 0),
        QuantitySuffix::Giga => (9, 0),
        QuantitySuffix::Tera => (12, 0),
        QuantitySuffix::Peta => (15, 0),
        QuantitySuffix::Exa => (18, 0),
        QuantitySuffix::Kibi => (0, 10),
        QuantitySuffix::Mebi => (0, 20),
        QuantitySuffix::Gibi => (0, 30),
        QuantitySuffix::Tebi => (0, 40),
        QuantitySuffix::Pebi => (0, 50),
        QuantitySuffix::Exbi => (0, 60),
        QuantitySuffix::Exponent(n) => (i64::from(n), 0),
    }
}

/// `digits × factor`, digits most significant first.
fn multiply(digits: &[u8], factor: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(digits.len() + 20);
    let mut carry: u128 = 0;
    for &digit in digits.iter().rev() {
        let product = u128::from(digit) * u128::from(factor) + carry;
        out.push((product % 10) as u8);
        carry = product / 10;
    }
    while carry > 0 {
        out.push((carry % 10) as u8);
        carry /= 10;
    }
    out.reverse();
    out
}

impl Exact {
    fn new(negative: bool, mut digits: Vec<u8>, mut exponent: i64) -> Exact {
        let leading = digits.iter().take_while(|&&d| d == 0).count();
        digits.drain(..leading);
        while digits.last() == Some(&0) {
            digits.pop();
            exponent += 1;
        }
        if digits.is_empty() {
            return Exact {
                negative: false,
                digits,
                exponent: 0,
            };
        }
        Exact {
            negative,
            digits,
            exponent,
        }
    }

    /// The exact value of a quantity. Read from its `Display` form, which is
    /// `[-]integer[.fraction]suffix`.
    pub(super) fn of(quantity: &Quantity) -> Option<Exact> {
        let text = quantity.to_string();
        let number = text.strip_suffix(&quantity.suffix().to_string())?;
        let (negative, unsigned) = match number.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, number),
        };
        let (integer, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        let digits: Vec<u8> = integer
            .bytes()
            .chain(fraction.bytes())
            .map(|c| c.wrapping_sub(b'0'))
            .collect();
        if digits.iter().any(|&d| d > 9) {
            return None;
        }
        let (decimal, binary) = suffix_exponents(quantity.suffix());
        let fraction_len = i64::try_from(fraction.len()).ok()?;
        let digits = multiply(&digits, 1u64 << binary);
        Some(Exact::new(
            negative,
            digits,
            decimal.checked_sub(fraction_len)?,
        ))
    }

    pub(super) fn zero() -> Exact {
        Exact::new(false, Vec::new(), 0)
    }

    pub(super) fn parse(text: &str) -> Option<Exact> {
        Quantity::parse(text).ok().as_ref().and_then(Exact::of)
    }

    pub(super) fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// The sum of two values that are not negative; `None` for a negative
    /// one, or when their exponents are too far apart to align cheaply.
    pub(super) fn checked_add(&self, other: &Exact) -> Option<Exact> {
        if self.negative || other.negative {
            return None;
        }
        if self.is_zero() {
            return Some(other.clone());
        }
        if other.is_zero() {
            return Some(self.clone());
        }
        let exponent = self.exponent.min(other.exponent);
        let aligned = |value: &Exact| -> Option<Vec<u8>> {
            let shift = value.exponent.checked_sub(exponent)?;
            if shift > MAX_ALIGN_DIGITS {
                return None;
            }
            let mut digits = value.digits.clone();
            digits.resize(digits.len() + usize::try_from(shift).ok()?, 0);
            Some(digits)
        };
        let (a, b) = (aligned(self)?, aligned(other)?);
        let mut sum = Vec::with_capacity(a.len().max(b.len()) + 1);
        let mut carry = 0u8;
        let (mut ia, mut ib) = (a.iter().rev(), b.iter().rev());
        loop {
            let (da, db) = (ia.next(), ib.next());
            if da.is_none() && db.is_none() {
                break;
            }
            let total = da.copied().unwrap_or(0) + db.copied().unwrap_or(0) + carry;
            sum.push(total % 10);
            carry = total / 10;
        }
        if carry > 0 {
            sum.push(carry);
        }
        sum.reverse();
        Some(Exact::new(false, sum, exponent))
    }

    /// Canonical text, itself a quantity of the same value: `"1073741824"`,
    /// `"0.1"`, `"15e30"`, `"-2"`, `"0"`.
    pub(super) fn to_text(&self) -> String {
        if self.is_zero() {
            return "0".to_owned();
        }
        let digits: String = self.digits.iter().map(|&d| char::from(b'0' + d)).collect();
        let sign = if self.negative { "-" } else { "" };
        let len = i64::try_from(digits.len()).unwrap_or(i64::MAX);
        if (0..=PLAIN_EXPONENT_LIMIT).contains(&self.exponent) {
            let zeros = "0".repeat(usize::try_from(self.exponent).unwrap_or(0));
            format!("{sign}{digits}{zeros}")
        } else if (-PLAIN_EXPONENT_LIMIT..0).contains(&self.exponent) {
            let point = len + self.exponent;
            if point > 0 {
                let (whole, fraction) = digits.split_at(usize::try_from(point).unwrap_or(0));
                format!("{sign}{whole}.{fraction}")
            } else {
                let zeros = "0".repeat(usize::try_from(-point).unwrap_or(0));
                format!("{sign}0.{zeros}{digits}")
            }
        } else {
            format!("{sign}{digits}e{}", self.exponent)
        }
    }
}

/// A value kept as written because it does not parse.
pub(super) fn unparsed(text: &str) -> Value {
    json!({ "unparsed": text })
}

/// The canonical form of a quantity.
pub(super) fn quantity(text: &str) -> Value {
    match Exact::parse(text) {
        Some(exact) => Value::String(exact.to_text()),
        None => unparsed(text),
    }
}

/// The canonical form of an eviction threshold: a canonical quantity, or a
/// percentage as the shortest decimal with `%` (`"10%"`, `"12.5%"`).
pub(super) fn threshold(text: &str) -> Value {
    match EvictionThreshold::parse(text) {
        Ok(EvictionThreshold::Quantity(q)) => match Exact::of(&q) {
            Some(exact) => Value::String(exact.to_text()),
            None => unparsed(text),
        },
        Ok(EvictionThreshold::Percentage(p)) => {
            // -0.0 and 0.0 are one value; only their `Display` differs.
            let p = if p == 0.0 { 0.0 } else { p };
            Value::String(format!("{p}%"))
        }
        Err(_) => unparsed(text),
    }
}

/// The canonical form of a Go duration (Go's `Duration.String()`).
pub(super) fn duration(text: &str) -> Value {
    match GoDuration::parse(text) {
        Ok(d) => Value::String(d.to_string()),
        Err(_) => unparsed(text),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn text(q: &str) -> String {
        Exact::parse(q)
            .map(|e| e.to_text())
            .unwrap_or_else(|| panic!("{q} parses"))
    }

    #[test]
    fn quantities_have_one_canonical_text_per_value() {
        for (a, b, canonical) in [
            ("1Gi", "1024Mi", "1073741824"),
            ("0.5Gi", "512Mi", "536870912"),
            ("500m", "0.5", "0.5"),
            ("1000m", "1", "1"),
            ("1k", "1e3", "1000"),
            ("1.5Ki", "1536", "1536"),
            ("100n", "0.1u", "0.0000001"),
            ("0", "0Gi", "0"),
            ("-0", "0.000m", "0"),
            ("-1.50", "-1500m", "-1.5"),
            ("1e30", "1000000000000e18", "1e30"),
            ("1e-30", "0.000000000000000000000000000001", "1e-30"),
            ("1Ei", "1152921504606846976", "1152921504606846976"),
        ] {
            assert_eq!(text(a), canonical, "{a}");
            assert_eq!(text(b), canonical, "{b}");
        }
        assert_ne!(text("1G"), text("1Gi"));
    }

    #[test]
    fn canonical_text_is_a_quantity_of_the_same_value() {
        for q in ["1e30", "1e-30", "0.001", "12.5Mi", "7e2147483647", "3m"] {
            let canonical = text(q);
            assert_eq!(text(&canonical), canonical, "{q}");
        }
    }

    #[test]
    fn sums_are_exact_and_bounded() {
        let sum = |a: &str, b: &str| {
            Exact::parse(a)
                .and_then(|x| Exact::parse(b).and_then(|y| x.checked_add(&y)))
                .map(|e| e.to_text())
        };
        assert_eq!(sum("512Mi", "512Mi").as_deref(), Some("1073741824"));
        assert_eq!(sum("100m", "0.9"), Some("1".to_owned()));
        assert_eq!(sum("0", "1Gi"), sum("1Gi", "0"));
        assert_eq!(sum("-1", "2"), None);
        assert_eq!(sum("1e100", "1m"), None);
        assert_eq!(
            sum("1e40", "1"),
            Some("10000000000000000000000000000000000000001".to_owned())
        );
    }

    #[test]
    fn thresholds_and_durations_compare_by_value() {
        assert_eq!(threshold("100Mi"), threshold("0.09765625Gi"));
        assert_eq!(threshold("10%"), threshold("10.0%"));
        assert_eq!(threshold("10%"), threshold("1e1%"));
        assert_eq!(threshold("0%"), threshold("-0%"));
        assert_ne!(threshold("10%"), threshold("10"));
        assert_eq!(threshold("ten%"), unparsed("ten%"));
        assert_eq!(duration("60s"), duration("1m0s"));
        assert_eq!(duration("1m"), Value::from("1m0s"));
        assert_eq!(duration("1x"), unparsed("1x"));
        assert_eq!(quantity("1 Gi"), unparsed("1 Gi"));
    }

    proptest! {
        #[test]
        fn prop_canonical_text_round_trips(q in "[+-]?[0-9]{1,8}(\\.[0-9]{0,4})?(m|k|M|G|Ki|Mi|Gi|Ei|e-?[0-9]{1,3})?") {
            let canonical = text(&q);
            prop_assert_eq!(text(&canonical), canonical.clone());
            prop_assert_eq!(quantity(&q), Value::String(canonical));
        }

        #[test]
        fn prop_sum_is_commutative_and_adds_up(a in 0u64..1_000_000, b in 0u64..1_000_000) {
            let (x, y) = (Exact::parse(&format!("{a}m")), Exact::parse(&format!("{b}m")));
            let (x, y) = (x.expect("quantity"), y.expect("quantity"));
            prop_assert_eq!(x.checked_add(&y), y.checked_add(&x));
            let expected = Exact::parse(&format!("{}m", a + b)).expect("quantity");
            prop_assert_eq!(x.checked_add(&y), Some(expected));
        }
    }
}
