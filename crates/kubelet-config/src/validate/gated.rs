//! The rules of upstream's `ValidateKubeletConfiguration` that follow the
//! feature gates in force (the kubelet's defaults for its version, overlaid
//! with the config's `featureGates`), the gate checks themselves
//! (`SetFromMap`), and the start-up checks against the host
//! (`validateKubeletOSConfiguration`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{logging, Checker};
use crate::duration::GoDuration;
use crate::fields::Views;
use crate::gates::{CgroupVersion, GatesInForce, ValidationTarget};

const MILLISECOND: i64 = 1_000_000;
const SECOND: i64 = 1_000_000_000;
/// The v1beta1 default of `cpuCFSQuotaPeriod`.
const DEFAULT_CFS_QUOTA_PERIOD: i64 = 100 * MILLISECOND;

/// Applies the config's `featureGates` to the target's model (refusing
/// unknown and locked gates) and runs every gate-dependent rule and host
/// check on the effective config.
pub(super) fn validate_gated(
    effective: &Map<String, Value>,
    views: &Views,
    target: &ValidationTarget,
    c: &mut Checker,
) {
    let requested = match views.get("featureGates") {
        Some(crate::FieldValue::BoolMap(gates)) => gates.clone(),
        _ => BTreeMap::new(),
    };
    let (gates, refusals) = target.model.in_force(&requested);
    for refusal in refusals {
        c.push(
            &format!("featureGates.{}", refusal.gate),
            format_args!(
                "({}): {} (kubelet 1.{} feature gates)",
                refusal.value,
                refusal.reason,
                target.model.minor()
            ),
        );
    }
    validate_cfs_quota(views, &gates, c);
    validate_gc_and_certificates(views, &gates, c);
    validate_shutdown(views, &gates, c);
    validate_swap_and_memory(views, &gates, c);
    validate_crash_loop_back_off(views, &gates, c);
    validate_image_credentials(views, &gates, c);
    validate_logging(effective, &gates, c);
    validate_host(views, target, c);
}

/// `path (value) requires feature gate GATE, which is disabled (kubelet 1.N)`.
fn requires(
    c: &mut Checker,
    gates: &GatesInForce,
    path: &str,
    value: impl std::fmt::Display,
    gate: &str,
) {
    c.push(
        path,
        format_args!(
            "({value}) requires feature gate {gate}, which is disabled (kubelet 1.{})",
            gates.minor()
        ),
    );
}

/// `path must not be set when feature gate GATE is disabled (kubelet 1.N)`.
fn must_not_be_set(c: &mut Checker, gates: &GatesInForce, path: &str, gate: &str) {
    c.push(
        path,
        format_args!(
            "must not be set when feature gate {gate} is disabled (kubelet 1.{})",
            gates.minor()
        ),
    );
}

fn validate_cfs_quota(views: &Views, gates: &GatesInForce, c: &mut Checker) {
    const GATE: &str = "CustomCPUCFSQuotaPeriod";
    let Some(period) = views.duration("cpuCFSQuotaPeriod") else {
        return;
    };
    if !gates.enabled(GATE) {
        if period.as_nanos() != DEFAULT_CFS_QUOTA_PERIOD {
            requires(c, gates, "cpuCFSQuotaPeriod", period, GATE);
        }
    } else if !(MILLISECOND..=SECOND).contains(&period.as_nanos()) {
        c.push(
            "cpuCFSQuotaPeriod",
            format_args!("({period}) must be between 1ms and 1s, inclusive"),
        );
    }
}

fn validate_gc_and_certificates(views: &Views, gates: &GatesInForce, c: &mut Checker) {
    if let Some(age) = views.duration("imageMaximumGCAge") {
        if age != GoDuration::ZERO && !gates.enabled("ImageMaximumGCAge") {
            requires(c, gates, "imageMaximumGCAge", age, "ImageMaximumGCAge");
        }
    }
    if views.boolean("serverTLSBootstrap") == Some(true)
        && !gates.enabled("RotateKubeletServerCertificate")
    {
        requires(
            c,
            gates,
            "serverTLSBootstrap",
            true,
            "RotateKubeletServerCertificate",
        );
    }
    if views.boolean("enableSystemLogQuery") == Some(true) && !gates.enabled("NodeLogQuery") {
        requires(c, gates, "enableSystemLogQuery", true, "NodeLogQuery");
    }
}

fn validate_shutdown(views: &Views, gates: &GatesInForce, c: &mut Checker) {
    let second = GoDuration::from_nanos(SECOND);
    let total = views.duration("shutdownGracePeriod").unwrap_or_default();
    let critical = views
        .duration("shutdownGracePeriodCriticalPods")
        .unwrap_or_default();
    let periods = [
        ("shutdownGracePeriod", total),
        ("shutdownGracePeriodCriticalPods", critical),
    ];
    if gates.enabled("GracefulNodeShutdown") {
        if critical > total {
            c.push(
                "shutdownGracePeriodCriticalPods",
                format_args!("({critical}) must be <= shutdownGracePeriod ({total})"),
            );
        }
        for (path, period) in periods {
            if period.is_negative() || (period > GoDuration::ZERO && period < second) {
                c.push(
                    path,
                    format_args!("({period}) must be either zero or otherwise >= 1 sec"),
                );
            }
        }
    } else {
        for (path, period) in periods {
            if period > GoDuration::ZERO {
                requires(c, gates, path, period, "GracefulNodeShutdown");
            }
        }
    }
    let by_priority = views.items("shutdownGracePeriodByPodPriority");
    if by_priority == 0 {
        return;
    }
    if !gates.enabled("GracefulNodeShutdownBasedOnPodPriority") {
        requires(
            c,
            gates,
            "shutdownGracePeriodByPodPriority",
            format_args!("{by_priority} items"),
            "GracefulNodeShutdownBasedOnPodPriority",
        );
    } else if total > GoDuration::ZERO || critical > GoDuration::ZERO {
        c.push(
            "shutdownGracePeriodByPodPriority",
            "cannot be specified together with shutdownGracePeriod or \
             shutdownGracePeriodCriticalPods",
        );
    }
}

fn validate_swap_and_memory(views: &Views, gates: &GatesInForce, c: &mut Checker) {
    let behavior = views.string("memorySwap.swapBehavior").unwrap_or("");
    if gates.enabled("NodeSwap") {
        c.one_of(
            views,
            "memorySwap.swapBehavior",
            &["", "NoSwap", "LimitedSwap"],
        );
    } else if !behavior.is_empty() {
        must_not_be_set(c, gates, "memorySwap.swapBehavior", "NodeSwap");
    }
    if views.string("memoryReservationPolicy") == Some("TieredReservation")
        && !gates.enabled("MemoryQoS")
    {
        requires(
            c,
            gates,
            "memoryReservationPolicy",
            "\"TieredReservation\"",
            "MemoryQoS",
        );
    }
}

fn validate_crash_loop_back_off(views: &Views, gates: &GatesInForce, c: &mut Checker) {
    const PATH: &str = "crashLoopBackOff.maxContainerRestartPeriod";
    let Some(period) = views.duration(PATH) else {
        return;
    };
    if !gates.enabled("KubeletCrashLoopBackOffMax") {
        must_not_be_set(c, gates, PATH, "KubeletCrashLoopBackOffMax");
    } else if !(SECOND..=300 * SECOND).contains(&period.as_nanos()) {
        c.push(
            PATH,
            format_args!("({period}) must be between 1s and 300s, inclusive"),
        );
    }
}

fn validate_image_credentials(views: &Views, gates: &GatesInForce, c: &mut Checker) {
    const GATE: &str = "KubeletEnsureSecretPulledImages";
    const POLICY: &str = "imagePullCredentialsVerificationPolicy";
    const ALLOWLIST: &str = "preloadedImagesVerificationAllowlist";
    let policy = views.string(POLICY).unwrap_or("");
    let allowlist = views.list(ALLOWLIST);
    if !gates.enabled(GATE) {
        if !policy.is_empty() {
            must_not_be_set(c, gates, POLICY, GATE);
        }
        if !allowlist.is_empty() {
            must_not_be_set(c, gates, ALLOWLIST, GATE);
        }
        return;
    }
    c.one_of(
        views,
        POLICY,
        &[
            "NeverVerify",
            "NeverVerifyPreloadedImages",
            "NeverVerifyAllowlistedImages",
            "AlwaysVerify",
        ],
    );
    if !allowlist.is_empty() && policy != "NeverVerifyAllowlistedImages" {
        c.push(
            ALLOWLIST,
            format_args!(
                "can only be set when {POLICY} is \"NeverVerifyAllowlistedImages\" (it is {policy:?})"
            ),
        );
    }
}

/// `logsapi.Validate`'s gate checks: the json format is a beta option, the
/// split stream and info buffer of either format alpha ones
/// ([`logging::gated_logging_settings`] lists them).
fn validate_logging(effective: &Map<String, Value>, gates: &GatesInForce, c: &mut Checker) {
    for setting in logging::gated_logging_settings(effective) {
        if !gates.enabled(setting.gate) {
            requires(c, gates, &setting.path, &setting.value, setting.gate);
        }
    }
}

/// The kubelet's start-up checks against the host
/// (`validateKubeletOSConfiguration`), where the fact is known.
fn validate_host(views: &Views, target: &ValidationTarget, c: &mut Checker) {
    let Some((CgroupVersion::V1, how)) = &target.host.cgroup else {
        return;
    };
    if views.boolean("failCgroupV1") == Some(true) {
        c.push(
            "failCgroupV1",
            format_args!(
                "(true): this host runs cgroup v1 ({how}), and the kubelet is configured \
                 not to run on cgroup v1"
            ),
        );
    }
    if views.boolean("singleProcessOOMKill") == Some(false) {
        c.push(
            "singleProcessOOMKill",
            format_args!(
                "(false): this host runs cgroup v1 ({how}), where the kubelet refuses \
                 singleProcessOOMKill set to false"
            ),
        );
    }
}

#[cfg(test)]
#[path = "gated_tests.rs"]
mod tests;
