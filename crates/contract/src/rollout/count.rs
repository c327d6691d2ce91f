//! A count of nodes or a percentage of them, as Kubernetes' IntOrString.

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Unexpected, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::{MAX_COUNT, PERCENT_PATTERN};

/// A count (at least 1) or a percentage (`"25%"`), as Kubernetes' IntOrString.
///
/// Decoding names what is wrong (`null`, a negative or too large count, a fraction)
/// instead of serde's "did not match any variant"; whether a string is a percentage is
/// checked where the spec is followed ([`IntOrPercent::resolve`]), as the CRD's pattern
/// does at the API.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum IntOrPercent {
    Int(u32),
    Percent(String),
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountOrPercent;

        impl Visitor<'_> for CountOrPercent {
            type Value = IntOrPercent;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(
                    f,
                    "a count from 0 to {} or a percentage like \"10%\"",
                    u32::MAX
                )
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrPercent, E> {
                u32::try_from(v)
                    .map(IntOrPercent::Int)
                    .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrPercent, E> {
                u32::try_from(v)
                    .map(IntOrPercent::Int)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<IntOrPercent, E> {
                // A whole number written as a float (`4.0`), as JSON allows.
                if v.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&v) {
                    Ok(IntOrPercent::Int(v as u32))
                } else {
                    Err(E::invalid_value(Unexpected::Float(v), &self))
                }
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrPercent, E> {
                Ok(IntOrPercent::Percent(v.to_string()))
            }
        }

        deserializer.deserialize_any(CountOrPercent)
    }
}

impl JsonSchema for IntOrPercent {
    fn schema_name() -> Cow<'static, str> {
        "IntOrPercent".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // The API server applies `minimum`/`maximum` to integers only and `pattern`/
        // `maxLength` to strings only; no CEL is needed (and an int-or-string is `dyn` to
        // CEL, whose cost estimate for `matches` on it is the whole request size).
        json_schema!({
            "x-kubernetes-int-or-string": true,
            "minimum": 1,
            "maximum": MAX_COUNT,
            "pattern": PERCENT_PATTERN,
            "maxLength": 4,
        })
    }
}

/// A string of a count-or-percentage field that is not a percentage from 1% to 100%.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PercentError {
    #[error("{0:?} is neither a count nor a percentage like \"10%\"")]
    NoPercentSign(String),
    #[error("{0:?} is not a percentage like \"10%\"")]
    NotANumber(String),
    #[error("{0:?} must be between 1% and 100%")]
    OutOfRange(String),
}

impl IntOrPercent {
    fn percent(text: &str) -> Result<usize, PercentError> {
        let digits = text
            .trim()
            .strip_suffix('%')
            .ok_or_else(|| PercentError::NoPercentSign(text.to_string()))?;
        let pct: usize = digits
            .parse()
            .map_err(|_| PercentError::NotANumber(text.to_string()))?;
        if pct == 0 || pct > 100 {
            return Err(PercentError::OutOfRange(text.to_string()));
        }
        Ok(pct)
    }

    /// The count out of `total`: a percentage rounds up (a batch of 10% of 5 nodes is 1).
    pub fn resolve(&self, total: usize) -> Result<usize, PercentError> {
        match self {
            IntOrPercent::Int(n) => Ok(*n as usize),
            IntOrPercent::Percent(text) => Ok((total * Self::percent(text)?).div_ceil(100)),
        }
    }

    /// The count out of `total`, a percentage rounded down but at least 1 (as
    /// maxUnavailable rounds in Kubernetes, with a floor so that progress is possible).
    pub fn resolve_down(&self, total: usize) -> Result<usize, PercentError> {
        match self {
            IntOrPercent::Int(n) => Ok(*n as usize),
            IntOrPercent::Percent(text) => Ok((total * Self::percent(text)? / 100).max(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentage_pattern_takes_1_to_100_percent_only() {
        let re = regex::Regex::new(PERCENT_PATTERN).expect("the pattern compiles");
        for ok in ["1%", "9%", "10%", "55%", "99%", "100%"] {
            assert!(re.is_match(ok), "{ok}");
            assert!(IntOrPercent::Percent(ok.into()).resolve(10).is_ok(), "{ok}");
        }
        let text = |p: &str| {
            IntOrPercent::Percent(p.into())
                .resolve(10)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            text("10"),
            r#""10" is neither a count nor a percentage like "10%""#
        );
        assert_eq!(text("ten%"), r#""ten%" is not a percentage like "10%""#);
        assert_eq!(text("101%"), r#""101%" must be between 1% and 100%"#);
        for bad in [
            "0%", "00%", "05%", "101%", "1000%", "10", "%", "10 %", " 10%", "10%\n", "1.5%", "-5%",
            "ten%", "",
        ] {
            assert!(!re.is_match(bad), "{bad:?}");
        }
    }
}
