//! `showHiddenMetricsForVersion`: empty, or the minor version before the
//! kubelet's own, written `<major>.<minor>` (upstream's
//! `ValidateShowHiddenMetricsVersion` compares the text with
//! `fmt.Sprintf("%d.%d", major, minor-1)`).

use super::super::fields::Views;
use super::Checker;

const FIELD: &str = "showHiddenMetricsForVersion";

/// A kubelet's `(major, minor)` version.
pub(crate) type MinorVersion = (u64, u64);

/// Without `kubelet` (the version is not known here) only the form is
/// checked: a value that is not `<major>.<minor>` in decimal without leading
/// zeros is never the one allowed. With it, the value must be exactly the
/// previous minor. The feature-gate model knows the kubelet's version and
/// can pass it.
pub(crate) fn validate_show_hidden_metrics(
    views: &Views,
    c: &mut Checker,
    kubelet: Option<MinorVersion>,
) {
    let Some(value) = views.string(FIELD).filter(|v| !v.is_empty()) else {
        return;
    };
    match kubelet {
        Some((major, minor)) if minor > 0 => {
            let allowed = format!("{major}.{}", minor - 1);
            if value != allowed {
                c.push(
                    FIELD,
                    format_args!(
                        "({value:?}) must be omitted or {allowed:?}: only the minor version \
                         before the kubelet's ({major}.{minor}) is allowed"
                    ),
                );
            }
        }
        _ => {
            if !is_major_minor(value) {
                c.push(
                    FIELD,
                    format_args!(
                        "({value:?}) must be omitted or the kubelet's previous minor version, \
                         such as \"1.35\""
                    ),
                );
            }
        }
    }
}

/// `<major>.<minor>` as Go's `%d.%d` prints two numbers.
fn is_major_minor(text: &str) -> bool {
    let number = |part: &str| {
        !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_digit())
            && (part == "0" || !part.starts_with('0'))
            && part.parse::<u64>().is_ok()
    };
    text.split_once('.')
        .is_some_and(|(major, minor)| number(major) && number(minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_minor_form() {
        for good in ["1.35", "1.0", "2.10"] {
            assert!(is_major_minor(good), "{good}");
        }
        for bad in [
            "1", "1.35.0", "v1.35", "1.035", "01.35", "1.", ".35", "1.-1", " 1.35",
        ] {
            assert!(!is_major_minor(bad), "{bad}");
        }
    }
}
