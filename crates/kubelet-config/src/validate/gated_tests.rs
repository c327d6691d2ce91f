//! Each gate-dependent rule broken, and on its boundary, for the kubelet
//! minor it applies to; the gate checks; the host checks.

use crate::error::{ConfigError, FieldError};
use crate::gates::{CgroupVersion, GateModel, HostFacts, ValidationTarget};
use crate::test_support::parse_yaml;

fn target(minor: u32) -> ValidationTarget {
    let model = GateModel::for_minor(minor).unwrap_or_else(|| panic!("no model for 1.{minor}"));
    ValidationTarget::new(model, HostFacts::unknown())
}

fn on_cgroup(version: CgroupVersion) -> ValidationTarget {
    let how = match version {
        CgroupVersion::V1 => "/sys/fs/cgroup is tmpfs",
        CgroupVersion::V2 => "/sys/fs/cgroup is cgroup2fs",
    };
    ValidationTarget::new(
        GateModel::newest(),
        HostFacts {
            cgroup: Some((version, how.to_owned())),
        },
    )
}

#[track_caller]
fn errors_for(body: &str, target: &ValidationTarget) -> Vec<FieldError> {
    let config = parse_yaml(body).unwrap_or_else(|e| panic!("parse {body:?}: {e}"));
    match config.validate_for(target) {
        Err(ConfigError::Invalid(errors)) => errors,
        Ok(()) => Vec::new(),
        Err(other) => panic!("{body:?}: {other}"),
    }
}

/// (kubelet minor, YAML body, path of the error, text the message contains).
const BROKEN: &[(u32, &str, &str, &str)] = &[
    (36, "featureGates: {NoSuchGate: true}", "featureGates.NoSuchGate", "(true): unrecognized feature gate: NoSuchGate"),
    (
        36,
        "featureGates: {MemoryManager: false}",
        "featureGates.MemoryManager",
        "cannot set feature gate MemoryManager to false, feature is locked to true",
    ),
    (33, "featureGates: {EnvFiles: true}", "featureGates.EnvFiles", "unrecognized feature gate: EnvFiles"),
    (35, "featureGates: {PodIndexLabel: true}", "featureGates.PodIndexLabel", "unrecognized feature gate"),
    (34, "featureGates: {NodeSwap: false}", "featureGates.NodeSwap", "locked to true"),
    (35, "featureGates: {ImageMaximumGCAge: false}", "featureGates.ImageMaximumGCAge", "locked to true"),
    (36, "cpuCFSQuotaPeriod: 50ms", "cpuCFSQuotaPeriod", "(50ms) requires feature gate CustomCPUCFSQuotaPeriod"),
    (
        36,
        "featureGates: {CustomCPUCFSQuotaPeriod: true}\ncpuCFSQuotaPeriod: 1001ms",
        "cpuCFSQuotaPeriod",
        "must be between 1ms and 1s",
    ),
    (
        34,
        "featureGates: {ImageMaximumGCAge: false}\nimageMaximumGCAge: 1h",
        "imageMaximumGCAge",
        "(1h0m0s) requires feature gate ImageMaximumGCAge",
    ),
    (
        36,
        "featureGates: {RotateKubeletServerCertificate: false}\nserverTLSBootstrap: true",
        "serverTLSBootstrap",
        "(true) requires feature gate RotateKubeletServerCertificate",
    ),
    (
        36,
        "featureGates: {GracefulNodeShutdown: false}\nshutdownGracePeriod: 30s",
        "shutdownGracePeriod",
        "(30s) requires feature gate GracefulNodeShutdown",
    ),
    (
        36,
        "featureGates: {GracefulNodeShutdown: false}\nshutdownGracePeriodCriticalPods: 1s",
        "shutdownGracePeriodCriticalPods",
        "requires feature gate GracefulNodeShutdown",
    ),
    (36, "shutdownGracePeriod: 999ms", "shutdownGracePeriod", "either zero or otherwise >= 1 sec"),
    (36, "shutdownGracePeriod: -1s", "shutdownGracePeriod", "either zero or otherwise >= 1 sec"),
    (
        36,
        "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 11s",
        "shutdownGracePeriodCriticalPods",
        "(11s) must be <= shutdownGracePeriod (10s)",
    ),
    (
        36,
        "featureGates: {GracefulNodeShutdownBasedOnPodPriority: false}\nshutdownGracePeriodByPodPriority:\n- priority: 0\n  shutdownGracePeriodSeconds: 30",
        "shutdownGracePeriodByPodPriority",
        "requires feature gate GracefulNodeShutdownBasedOnPodPriority",
    ),
    (
        36,
        "shutdownGracePeriodCriticalPods: 0s\nshutdownGracePeriod: 1s\nshutdownGracePeriodByPodPriority:\n- priority: 0\n  shutdownGracePeriodSeconds: 30",
        "shutdownGracePeriodByPodPriority",
        "cannot be specified together",
    ),
    (
        33,
        "featureGates: {NodeSwap: false}\nmemorySwap: {swapBehavior: LimitedSwap}",
        "memorySwap.swapBehavior",
        "must not be set when feature gate NodeSwap is disabled",
    ),
    (34, "memorySwap: {swapBehavior: Unlimited}", "memorySwap.swapBehavior", "must be one of"),
    (
        34,
        "crashLoopBackOff: {maxContainerRestartPeriod: 30s}",
        "crashLoopBackOff.maxContainerRestartPeriod",
        "must not be set when feature gate KubeletCrashLoopBackOffMax is disabled",
    ),
    (
        35,
        "crashLoopBackOff: {maxContainerRestartPeriod: 301s}",
        "crashLoopBackOff.maxContainerRestartPeriod",
        "(5m1s) must be between 1s and 300s",
    ),
    (
        35,
        "crashLoopBackOff: {maxContainerRestartPeriod: 999ms}",
        "crashLoopBackOff.maxContainerRestartPeriod",
        "must be between 1s and 300s",
    ),
    (
        34,
        "imagePullCredentialsVerificationPolicy: AlwaysVerify",
        "imagePullCredentialsVerificationPolicy",
        "must not be set when feature gate KubeletEnsureSecretPulledImages is disabled",
    ),
    (
        34,
        "preloadedImagesVerificationAllowlist: [\"registry.k8s.io/pause\"]",
        "preloadedImagesVerificationAllowlist",
        "must not be set when feature gate KubeletEnsureSecretPulledImages",
    ),
    (
        35,
        "imagePullCredentialsVerificationPolicy: Sometimes",
        "imagePullCredentialsVerificationPolicy",
        "must be one of",
    ),
    (
        35,
        "imagePullCredentialsVerificationPolicy: NeverVerify\npreloadedImagesVerificationAllowlist: [\"registry.k8s.io/pause\"]",
        "preloadedImagesVerificationAllowlist",
        "can only be set when imagePullCredentialsVerificationPolicy is \"NeverVerifyAllowlistedImages\"",
    ),
    (
        36,
        "memoryReservationPolicy: TieredReservation",
        "memoryReservationPolicy",
        "(\"TieredReservation\") requires feature gate MemoryQoS",
    ),
    (36, "enableSystemLogQuery: true", "enableSystemLogQuery", "(true) requires feature gate NodeLogQuery"),
    (
        36,
        "featureGates: {LoggingBetaOptions: false}\nlogging: {format: json}",
        "logging.format",
        "(\"json\") requires feature gate LoggingBetaOptions",
    ),
    (
        36,
        "logging: {options: {json: {splitStream: true}}}",
        "logging.options.json.splitStream",
        "(true) requires feature gate LoggingAlphaOptions",
    ),
    (
        36,
        "logging: {options: {text: {infoBufferSize: 1Mi}}}",
        "logging.options.text.infoBufferSize",
        "requires feature gate LoggingAlphaOptions",
    ),
];

/// (kubelet minor, YAML body) the kubelet accepts: each rule's boundary or
/// its gate on.
const ACCEPTED: &[(u32, &str)] = &[
    (36, "featureGates: {MemoryManager: true, AllAlpha: false, AllBeta: true}"),
    (34, "featureGates: {EnvFiles: true, PodIndexLabel: true}"),
    (33, "featureGates: {NodeSwap: false}"),
    (36, "cpuCFSQuotaPeriod: 100ms"),
    (36, "featureGates: {CustomCPUCFSQuotaPeriod: true}\ncpuCFSQuotaPeriod: 1s"),
    (36, "featureGates: {CustomCPUCFSQuotaPeriod: true}\ncpuCFSQuotaPeriod: 1ms"),
    (36, "featureGates: {AllAlpha: true}\ncpuCFSQuotaPeriod: 10ms"),
    (34, "featureGates: {ImageMaximumGCAge: false}\nimageMaximumGCAge: 0s"),
    (36, "imageMaximumGCAge: 1h"),
    (36, "serverTLSBootstrap: true"),
    (36, "featureGates: {RotateKubeletServerCertificate: false}\nserverTLSBootstrap: false"),
    (36, "featureGates: {GracefulNodeShutdown: false}\nshutdownGracePeriod: 0s"),
    (36, "shutdownGracePeriod: 1s\nshutdownGracePeriodCriticalPods: 1s"),
    (36, "featureGates: {GracefulNodeShutdown: false}\nshutdownGracePeriodCriticalPods: -1s"),
    (36, "featureGates: {GracefulNodeShutdownBasedOnPodPriority: false}\nshutdownGracePeriod: 10s"),
    (36, "shutdownGracePeriodByPodPriority:\n- priority: 0\n  shutdownGracePeriodSeconds: 30"),
    (33, "featureGates: {NodeSwap: false}\nmemorySwap: {swapBehavior: \"\"}"),
    (36, "memorySwap: {swapBehavior: NoSwap}"),
    (35, "crashLoopBackOff: {maxContainerRestartPeriod: 300s}"),
    (35, "crashLoopBackOff: {maxContainerRestartPeriod: 1s}"),
    (34, "featureGates: {KubeletCrashLoopBackOffMax: true}\ncrashLoopBackOff: {maxContainerRestartPeriod: 10s}"),
    (35, "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.k8s.io/pause\"]"),
    (34, "featureGates: {KubeletEnsureSecretPulledImages: true}\nimagePullCredentialsVerificationPolicy: AlwaysVerify"),
    (36, "featureGates: {MemoryQoS: true}\nmemoryReservationPolicy: TieredReservation"),
    (36, "memoryReservationPolicy: None"),
    (36, "featureGates: {NodeLogQuery: true}\nenableSystemLogQuery: true"),
    (36, "logging: {format: json}"),
    (36, "logging: {options: {json: {infoBufferSize: \"0\", splitStream: false}}}"),
    (36, "featureGates: {LoggingAlphaOptions: true}\nlogging: {options: {json: {splitStream: true, infoBufferSize: 1Mi}}}"),
];

#[test]
fn every_gate_rule_has_a_failing_case() {
    for (minor, body, path, needle) in BROKEN {
        let errors = errors_for(body, &target(*minor));
        assert!(
            errors.iter().any(|e| e.path == *path
                && e.message.contains(needle)
                && e.message.starts_with(path)),
            "1.{minor} {body:?}: no error at {path:?} containing {needle:?}; got {errors:#?}"
        );
    }
}

#[test]
fn every_gate_rule_boundary_is_accepted() {
    for (minor, body) in ACCEPTED {
        let errors = errors_for(body, &target(*minor));
        assert!(errors.is_empty(), "1.{minor} {body:?}: {errors:#?}");
    }
}

#[test]
fn the_same_config_follows_the_kubelet_version() {
    let body = "crashLoopBackOff: {maxContainerRestartPeriod: 30s}";
    assert!(!errors_for(body, &target(34)).is_empty());
    assert!(errors_for(body, &target(35)).is_empty());
    let body = "featureGates: {NodeSwap: false}";
    assert!(errors_for(body, &target(33)).is_empty());
    assert!(!errors_for(body, &target(34)).is_empty());
}

#[test]
fn a_refused_gate_names_the_model() {
    let errors = errors_for("featureGates: {NoSuchGate: true}", &target(35));
    assert_eq!(
        ConfigError::Invalid(errors).to_string(),
        "invalid configuration: featureGates.NoSuchGate (true): unrecognized feature gate: \
         NoSuchGate (kubelet 1.35 feature gates)"
    );
}

#[test]
fn cgroup_v1_host_checks_name_the_host_fact() {
    let v1 = on_cgroup(CgroupVersion::V1);
    let errors = errors_for("failCgroupV1: true", &v1);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].path, "failCgroupV1");
    assert!(
        errors[0]
            .message
            .starts_with("failCgroupV1 (true): this host runs cgroup v1 (/sys/fs/cgroup is tmpfs)"),
        "{}",
        errors[0].message
    );
    let errors = errors_for("singleProcessOOMKill: false", &v1);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].message.contains("this host runs cgroup v1"));
    for body in ["failCgroupV1: false", "singleProcessOOMKill: true", ""] {
        assert!(errors_for(body, &v1).is_empty(), "{body:?}");
    }
    let v2 = on_cgroup(CgroupVersion::V2);
    let unknown = target(36);
    for body in ["failCgroupV1: true", "singleProcessOOMKill: false"] {
        assert!(errors_for(body, &v2).is_empty(), "{body:?} on v2");
        assert!(
            errors_for(body, &unknown).is_empty(),
            "{body:?}, host unknown"
        );
    }
}
