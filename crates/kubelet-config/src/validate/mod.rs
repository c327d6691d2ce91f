//! The kubelet's validation rules (`pkg/kubelet/apis/config/validation`,
//! the node-allocatable reservation parser) and kubelet-pivot's checks of its
//! own fields; every failure is collected, not just the first.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use serde_json::{Map, Value};

mod eviction;
mod gated;
mod go_url;
mod images;
mod logging;
mod metrics;
mod raw;
mod reserved_memory;
mod resources;
mod system_log;
pub(crate) mod taints;
mod tracing_config;

use eviction::validate_eviction;
#[cfg(test)]
use resources::is_clean_path;
#[cfg(test)]
pub(crate) use resources::RESERVABLE_RESOURCES;

use super::duration::GoDuration;
use super::error::{ConfigError, FieldError};
use super::fields::{check_object, Views};
use super::gates::ValidationTarget;
use super::quantity::Quantity;
use super::schema::TOP_FIELDS;
use super::{CONFIG_TRIAL_DURATION_FIELD, CRASH_LOOP_THRESHOLD_FIELD, MAX_CRASH_LOOP_THRESHOLD};
use resources::{
    validate_logs, validate_node_allocatable, validate_pivot_fields, validate_reserved,
};

/// Runs the kubelet's validation on the `effective` config (defaults
/// applied, as the kubelet validates after defaulting) and kubelet-pivot's
/// checks of its own fields on the `given` document's views (the effective
/// config no longer has them); [`ConfigError::Invalid`] lists every failure.
pub(super) fn check_config(
    effective: &Map<String, Value>,
    given: &Views,
    target: &ValidationTarget,
) -> Result<(), ConfigError> {
    let mut views = Views::default();
    check_object(effective, TOP_FIELDS, "", &mut views)?;
    let mut checker = Checker::default();
    validate_network(&views, &mut checker);
    validate_limits(&views, &mut checker);
    validate_image_gc(&views, &mut checker);
    validate_policies(&views, &mut checker);
    validate_durations(&views, &mut checker);
    gated::validate_gated(effective, &views, target, &mut checker);
    validate_node_allocatable(&views, &mut checker);
    validate_eviction(&views, &mut checker);
    validate_reserved(&views, &mut checker);
    validate_logs(&views, &mut checker);
    taints::validate_taints(effective, &mut checker);
    reserved_memory::validate_reserved_memory(effective, &mut checker);
    logging::validate_logging(effective, &mut checker);
    tracing_config::validate_tracing(effective, &mut checker);
    images::validate_image_allowlist(&views, &mut checker);
    metrics::validate_show_hidden_metrics(&views, &mut checker, None);
    system_log::validate_system_log_query(&views, &mut checker);
    validate_pivot_fields(given, &mut checker);
    checker.finish()
}

/// Collects the failures of the rules, each with its path.
#[derive(Default)]
pub(super) struct Checker {
    errors: Vec<FieldError>,
}

impl Checker {
    pub(super) fn push(&mut self, path: &str, detail: impl fmt::Display) {
        self.errors.push(FieldError {
            path: path.to_owned(),
            message: format!("{path} {detail}"),
        });
    }

    pub(super) fn in_range(&mut self, views: &Views, path: &str, low: i64, high: i64) {
        if let Some(value) = views.int(path) {
            if !(low..=high).contains(&value) {
                self.push(
                    path,
                    format_args!("({value}) must be between {low} and {high}, inclusive"),
                );
            }
        }
    }

    pub(super) fn non_negative(&mut self, views: &Views, path: &str) {
        if let Some(value) = views.int(path) {
            if value < 0 {
                self.push(
                    path,
                    format_args!("({value}) must not be a negative number"),
                );
            }
        }
    }

    pub(super) fn one_of(&mut self, views: &Views, path: &str, allowed: &[&str]) {
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

    pub(super) fn finish(self) -> Result<(), ConfigError> {
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
        "memoryReservationPolicy",
        &["None", "TieredReservation"],
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
    // Zero is defaulted (to 1m) by the kubelets that know this field.
    if let Some(period) = views.duration("draManagerReconcilePeriod") {
        if period.is_negative() {
            c.push(
                "draManagerReconcilePeriod",
                format_args!("({period}) must be greater than zero"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{parse_yaml, valid};

    use super::*;

    #[track_caller]
    fn field_errors(body: &str) -> Vec<FieldError> {
        let config = parse_yaml(body).unwrap_or_else(|e| panic!("parse {body:?}: {e}"));
        match config.validate() {
            Err(ConfigError::Invalid(errors)) => errors,
            other => panic!("expected invalid configuration for {body:?}, got {other:?}"),
        }
    }

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
        (
            "featureGates: {CustomCPUCFSQuotaPeriod: true}\ncpuCFSQuotaPeriod: 2s",
            "cpuCFSQuotaPeriod",
            "(2s) must be between 1ms and 1s",
        ),
        (
            "featureGates: {CustomCPUCFSQuotaPeriod: true}\ncpuCFSQuotaPeriod: 500us",
            "cpuCFSQuotaPeriod",
            "(500µs) must be between 1ms and 1s",
        ),
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
            "featureGates: {CustomCPUCFSQuotaPeriod: true}\ncpuCFSQuotaPeriod: 1ms",
            "featureGates: {CustomCPUCFSQuotaPeriod: true}\ncpuCFSQuotaPeriod: 1s",
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
    }
}
