//! Kubernetes resource quantities ([`Quantity`]), with the grammar of
//! apimachinery's `resource.ParseQuantity`.

use std::fmt;
use std::str::FromStr;

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
pub struct QuantityError(pub(super) String);

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    proptest! {
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
    }
}
