//! The schema: every known top-level v1beta1 field (modelled or not), the
//! type of each modelled field, and its v1beta1 default.

use super::{CONFIG_TRIAL_DURATION_FIELD, CRASH_LOOP_THRESHOLD_FIELD};

#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// Known, not modelled: carried through untouched.
    Any,
    Bool,
    Int32,
    Int64,
    Float,
    Str,
    /// A `metav1.Duration`: a string in Go duration syntax.
    Duration,
    StrList,
    StrMap,
    BoolMap,
    /// A struct whose fields are checked strictly.
    Object(&'static [Field]),
    /// A list of such structs.
    ObjectList(&'static [Field]),
}

impl Kind {
    pub(super) fn expected(self) -> &'static str {
        match self {
            Kind::Any => "any value",
            Kind::Bool => "a boolean",
            Kind::Int32 => "a 32-bit integer",
            Kind::Int64 => "a 64-bit integer",
            Kind::Float => "a number",
            Kind::Str => "a string",
            Kind::Duration => "a duration string such as \"1m30s\" (Go syntax)",
            Kind::StrList => "a list of strings",
            Kind::StrMap => "a mapping of strings to strings",
            Kind::BoolMap => "a mapping of strings to booleans",
            Kind::Object(_) => "a mapping",
            Kind::ObjectList(_) => "a list of mappings",
        }
    }
}

/// A v1beta1 default.
#[derive(Debug, Clone, Copy)]
pub(super) enum Def {
    Bool(bool),
    Int(i64),
    Str(&'static str),
    Strs(&'static [&'static str]),
    Pairs(&'static [(&'static str, &'static str)]),
    /// nodeStatusUpdateFrequency if that is set, else 5m.
    NodeStatusReportFrequency,
    /// false if maxParallelImagePulls >= 2, else true.
    SerializeImagePulls,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Field {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    pub(super) default: Option<Def>,
    /// Go value field defaulted on its zero value (`if obj.Port == 0`), as
    /// opposed to a pointer field defaulted only when nil.
    pub(super) zero_is_unset: bool,
}

/// Known, not modelled.
const fn unmodelled(name: &'static str) -> Field {
    Field {
        name,
        kind: Kind::Any,
        default: None,
        zero_is_unset: false,
    }
}

/// Modelled, no default inserted.
const fn plain(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        default: None,
        zero_is_unset: false,
    }
}

/// Go pointer field: defaulted when absent or null.
const fn ptr(name: &'static str, kind: Kind, default: Def) -> Field {
    Field {
        name,
        kind,
        default: Some(default),
        zero_is_unset: false,
    }
}

/// Go value field: defaulted when absent, null or the zero value.
const fn val(name: &'static str, kind: Kind, default: Def) -> Field {
    Field {
        name,
        kind,
        default: Some(default),
        zero_is_unset: true,
    }
}

const AUTHN_X509: &[Field] = &[plain("clientCAFile", Kind::Str)];
const AUTHN_WEBHOOK: &[Field] = &[
    ptr("enabled", Kind::Bool, Def::Bool(true)),
    val("cacheTTL", Kind::Duration, Def::Str("2m0s")),
];
const AUTHN_ANONYMOUS: &[Field] = &[ptr("enabled", Kind::Bool, Def::Bool(false))];
const AUTHENTICATION: &[Field] = &[
    plain("x509", Kind::Object(AUTHN_X509)),
    plain("webhook", Kind::Object(AUTHN_WEBHOOK)),
    plain("anonymous", Kind::Object(AUTHN_ANONYMOUS)),
];
const AUTHZ_WEBHOOK: &[Field] = &[
    val("cacheAuthorizedTTL", Kind::Duration, Def::Str("5m0s")),
    val("cacheUnauthorizedTTL", Kind::Duration, Def::Str("30s")),
];
const AUTHORIZATION: &[Field] = &[
    val("mode", Kind::Str, Def::Str("Webhook")),
    plain("webhook", Kind::Object(AUTHZ_WEBHOOK)),
];
const MEMORY_SWAP: &[Field] = &[plain("swapBehavior", Kind::Str)];
const CRASH_LOOP_BACK_OFF: &[Field] = &[plain("maxContainerRestartPeriod", Kind::Duration)];
const USER_NAMESPACES: &[Field] = &[plain("idsPerPod", Kind::Int64)];
const SHUTDOWN_BY_POD_PRIORITY: &[Field] = &[
    plain("priority", Kind::Int32),
    plain("shutdownGracePeriodSeconds", Kind::Int64),
];

/// `DefaultEvictionHard` of `pkg/kubelet/eviction/defaults_linux.go`.
const DEFAULT_EVICTION_HARD: &[(&str, &str)] = &[
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
];

/// Every top-level field of `kubelet.config.k8s.io/v1beta1`
/// `KubeletConfiguration` (staging/src/k8s.io/kubelet/config/v1beta1/
/// types.go) besides `apiVersion` and `kind`, plus kubelet-pivot's two.
/// Defaults follow pkg/kubelet/apis/config/v1beta1/defaults.go; fields added
/// to v1beta1 recently (or defaulted per platform or feature gate) are
/// modelled without inserting a default, so an older kubelet is not handed
/// fields it does not know.
pub(super) const TOP_FIELDS: &[Field] = &[
    ptr("enableServer", Kind::Bool, Def::Bool(true)),
    plain("staticPodPath", Kind::Str),
    plain("podLogsDir", Kind::Str),
    val("syncFrequency", Kind::Duration, Def::Str("1m0s")),
    val("fileCheckFrequency", Kind::Duration, Def::Str("20s")),
    val("httpCheckFrequency", Kind::Duration, Def::Str("20s")),
    plain("staticPodURL", Kind::Str),
    unmodelled("staticPodURLHeader"),
    val("address", Kind::Str, Def::Str("0.0.0.0")),
    val("port", Kind::Int32, Def::Int(10250)),
    plain("readOnlyPort", Kind::Int32),
    plain("tlsCertFile", Kind::Str),
    plain("tlsPrivateKeyFile", Kind::Str),
    plain("tlsCipherSuites", Kind::StrList),
    unmodelled("tlsCurvePreferences"),
    plain("tlsMinVersion", Kind::Str),
    plain("rotateCertificates", Kind::Bool),
    plain("serverTLSBootstrap", Kind::Bool),
    plain("authentication", Kind::Object(AUTHENTICATION)),
    plain("authorization", Kind::Object(AUTHORIZATION)),
    ptr("registryPullQPS", Kind::Int32, Def::Int(5)),
    val("registryBurst", Kind::Int32, Def::Int(10)),
    plain("imagePullCredentialsVerificationPolicy", Kind::Str),
    plain("preloadedImagesVerificationAllowlist", Kind::StrList),
    ptr("eventRecordQPS", Kind::Int32, Def::Int(50)),
    val("eventBurst", Kind::Int32, Def::Int(100)),
    ptr("enableDebuggingHandlers", Kind::Bool, Def::Bool(true)),
    plain("enableContentionProfiling", Kind::Bool),
    ptr("healthzPort", Kind::Int32, Def::Int(10248)),
    val("healthzBindAddress", Kind::Str, Def::Str("127.0.0.1")),
    ptr("oomScoreAdj", Kind::Int32, Def::Int(-999)),
    plain("clusterDomain", Kind::Str),
    plain("clusterDNS", Kind::StrList),
    val(
        "streamingConnectionIdleTimeout",
        Kind::Duration,
        Def::Str("4h0m0s"),
    ),
    val("nodeStatusUpdateFrequency", Kind::Duration, Def::Str("10s")),
    val(
        "nodeStatusReportFrequency",
        Kind::Duration,
        Def::NodeStatusReportFrequency,
    ),
    val("nodeLeaseDurationSeconds", Kind::Int32, Def::Int(40)),
    val("imageMinimumGCAge", Kind::Duration, Def::Str("2m0s")),
    plain("imageMaximumGCAge", Kind::Duration),
    ptr("imageGCHighThresholdPercent", Kind::Int32, Def::Int(85)),
    ptr("imageGCLowThresholdPercent", Kind::Int32, Def::Int(80)),
    val("volumeStatsAggPeriod", Kind::Duration, Def::Str("1m0s")),
    plain("kubeletCgroups", Kind::Str),
    plain("systemCgroups", Kind::Str),
    plain("cgroupRoot", Kind::Str),
    ptr("cgroupsPerQOS", Kind::Bool, Def::Bool(true)),
    val("cgroupDriver", Kind::Str, Def::Str("cgroupfs")),
    val("cpuManagerPolicy", Kind::Str, Def::Str("none")),
    plain("singleProcessOOMKill", Kind::Bool),
    plain("cpuManagerPolicyOptions", Kind::StrMap),
    val("cpuManagerReconcilePeriod", Kind::Duration, Def::Str("10s")),
    plain("draManagerReconcilePeriod", Kind::Duration),
    val("memoryManagerPolicy", Kind::Str, Def::Str("None")),
    val("topologyManagerPolicy", Kind::Str, Def::Str("none")),
    val("topologyManagerScope", Kind::Str, Def::Str("container")),
    plain("topologyManagerPolicyOptions", Kind::StrMap),
    plain("qosReserved", Kind::StrMap),
    val("runtimeRequestTimeout", Kind::Duration, Def::Str("2m0s")),
    val("hairpinMode", Kind::Str, Def::Str("promiscuous-bridge")),
    val("maxPods", Kind::Int32, Def::Int(110)),
    plain("podCIDR", Kind::Str),
    ptr("podPidsLimit", Kind::Int64, Def::Int(-1)),
    ptr("resolvConf", Kind::Str, Def::Str("/etc/resolv.conf")),
    plain("runOnce", Kind::Bool),
    ptr("cpuCFSQuota", Kind::Bool, Def::Bool(true)),
    ptr("cpuCFSQuotaPeriod", Kind::Duration, Def::Str("100ms")),
    ptr("nodeStatusMaxImages", Kind::Int32, Def::Int(50)),
    val("maxOpenFiles", Kind::Int64, Def::Int(1_000_000)),
    val(
        "contentType",
        Kind::Str,
        Def::Str("application/vnd.kubernetes.protobuf"),
    ),
    ptr("kubeAPIQPS", Kind::Int32, Def::Int(50)),
    val("kubeAPIBurst", Kind::Int32, Def::Int(100)),
    ptr("serializeImagePulls", Kind::Bool, Def::SerializeImagePulls),
    plain("maxParallelImagePulls", Kind::Int32),
    ptr(
        "evictionHard",
        Kind::StrMap,
        Def::Pairs(DEFAULT_EVICTION_HARD),
    ),
    plain("evictionSoft", Kind::StrMap),
    plain("evictionSoftGracePeriod", Kind::StrMap),
    val(
        "evictionPressureTransitionPeriod",
        Kind::Duration,
        Def::Str("5m0s"),
    ),
    plain("evictionMaxPodGracePeriod", Kind::Int32),
    plain("evictionMinimumReclaim", Kind::StrMap),
    plain("mergeDefaultEvictionSettings", Kind::Bool),
    plain("podsPerCore", Kind::Int32),
    ptr("enableControllerAttachDetach", Kind::Bool, Def::Bool(true)),
    plain("protectKernelDefaults", Kind::Bool),
    ptr("makeIPTablesUtilChains", Kind::Bool, Def::Bool(true)),
    ptr("iptablesMasqueradeBit", Kind::Int32, Def::Int(14)),
    ptr("iptablesDropBit", Kind::Int32, Def::Int(15)),
    plain("featureGates", Kind::BoolMap),
    ptr("failSwapOn", Kind::Bool, Def::Bool(true)),
    plain("memorySwap", Kind::Object(MEMORY_SWAP)),
    val("containerLogMaxSize", Kind::Str, Def::Str("10Mi")),
    ptr("containerLogMaxFiles", Kind::Int32, Def::Int(5)),
    plain("containerLogMaxWorkers", Kind::Int32),
    plain("containerLogMonitorInterval", Kind::Duration),
    val(
        "configMapAndSecretChangeDetectionStrategy",
        Kind::Str,
        Def::Str("Watch"),
    ),
    plain("systemReserved", Kind::StrMap),
    plain("kubeReserved", Kind::StrMap),
    plain("reservedSystemCPUs", Kind::Str),
    plain("showHiddenMetricsForVersion", Kind::Str),
    plain("systemReservedCgroup", Kind::Str),
    plain("kubeReservedCgroup", Kind::Str),
    ptr(
        "enforceNodeAllocatable",
        Kind::StrList,
        Def::Strs(&["pods"]),
    ),
    plain("allowedUnsafeSysctls", Kind::StrList),
    val(
        "volumePluginDir",
        Kind::Str,
        Def::Str("/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"),
    ),
    plain("providerID", Kind::Str),
    plain("kernelMemcgNotification", Kind::Bool),
    unmodelled("logging"),
    ptr("enableSystemLogHandler", Kind::Bool, Def::Bool(true)),
    plain("enableSystemLogQuery", Kind::Bool),
    plain("shutdownGracePeriod", Kind::Duration),
    plain("shutdownGracePeriodCriticalPods", Kind::Duration),
    plain(
        "shutdownGracePeriodByPodPriority",
        Kind::ObjectList(SHUTDOWN_BY_POD_PRIORITY),
    ),
    plain("crashLoopBackOff", Kind::Object(CRASH_LOOP_BACK_OFF)),
    unmodelled("reservedMemory"),
    ptr("enableProfilingHandler", Kind::Bool, Def::Bool(true)),
    ptr("enableDebugFlagsHandler", Kind::Bool, Def::Bool(true)),
    ptr("seccompDefault", Kind::Bool, Def::Bool(false)),
    plain("memoryThrottlingFactor", Kind::Float),
    plain("memoryReservationPolicy", Kind::Str),
    unmodelled("registerWithTaints"),
    ptr("registerNode", Kind::Bool, Def::Bool(true)),
    unmodelled("tracing"),
    ptr("localStorageCapacityIsolation", Kind::Bool, Def::Bool(true)),
    plain("containerRuntimeEndpoint", Kind::Str),
    plain("imageServiceEndpoint", Kind::Str),
    plain("failCgroupV1", Kind::Bool),
    plain("userNamespaces", Kind::Object(USER_NAMESPACES)),
    plain("podHousekeepingPeriod", Kind::Duration),
    // kubelet-pivot's own, removed from the effective config.
    plain(CRASH_LOOP_THRESHOLD_FIELD, Kind::Int32),
    plain(CONFIG_TRIAL_DURATION_FIELD, Kind::Duration),
];

/// The type meta fields, checked separately.
pub(super) const TYPE_META: [&str; 2] = ["apiVersion", "kind"];

/// Whether `name` is a top-level field of v1beta1 `KubeletConfiguration`
/// (or one of kubelet-pivot's two).
pub fn is_known_field(name: &str) -> bool {
    TYPE_META.contains(&name) || TOP_FIELDS.iter().any(|f| f.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::valid;

    #[test]
    fn unmodelled_known_fields_are_carried_untouched() {
        let body = "logging:\n  format: json\n  verbosity: 4\n  options:\n    json:\n      infoBufferSize: \"0\"\nregisterWithTaints:\n- key: dedicated\n  value: infra\n  effect: NoSchedule\ntracing:\n  samplingRatePerMillion: 100\nstaticPodURLHeader:\n  X-Token: [abc]";
        let config = valid(body);
        let effective = config.effective();
        assert_eq!(
            effective.get("logging"),
            Some(
                &serde_json::json!({"format": "json", "verbosity": 4, "options": {"json": {"infoBufferSize": "0"}}})
            )
        );
        assert_eq!(
            effective.get("registerWithTaints"),
            Some(
                &serde_json::json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])
            )
        );
        assert_eq!(
            effective.get("staticPodURLHeader"),
            Some(&serde_json::json!({"X-Token": ["abc"]}))
        );
        assert!(is_known_field("tracing") && is_known_field("kind") && !is_known_field("fooBar"));
    }
}
