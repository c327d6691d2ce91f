//! The kubelet's rules for the eviction fields.

use super::Checker;
use crate::duration::GoDuration;
use crate::eviction::{EvictionThreshold, EVICTION_SIGNALS};
use crate::fields::Views;

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

/// The kubelet's rules for `evictionHard`, `evictionSoft`,
/// `evictionSoftGracePeriod` and `evictionMinimumReclaim`.
pub(crate) fn validate_eviction(views: &Views, c: &mut Checker) {
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
