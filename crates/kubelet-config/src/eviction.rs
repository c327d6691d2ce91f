//! Eviction thresholds: the signals the kubelet accepts, the threshold
//! syntax ([`EvictionThreshold`]). The kubelet's rules for the eviction fields are
//! `validate::eviction`'s.

use super::quantity::{Quantity, QuantityError};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
