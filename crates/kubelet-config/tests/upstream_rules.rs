//! The kubelet's gate-independent validation rules (upstream's
//! `pkg/kubelet/apis/config/validation` and the helpers it calls), one test
//! per rule, run through the public parse-and-validate path: documents that
//! break the rule are refused with the field named, documents on the rule's
//! boundary are accepted. The facts are upstream's; the fixtures are this
//! project's own.
//!
//! A new upstream rule is a new entry in `rules!` below plus a row in
//! docs/validation-rules.md naming it (`upstream_rules::NAME`);
//! `every_table_row_names_a_test` and `every_rule_is_in_the_table` keep the
//! two in step.

use std::fs;
use std::path::{Path, PathBuf};

use kp_kubelet_config::{ConfigError, KubeletConfig};

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn document(body: &str) -> Vec<u8> {
    format!("{HEADER}{body}\n").into_bytes()
}

/// The paths a refusal names.
fn refused_paths(error: &ConfigError) -> Vec<String> {
    match error {
        ConfigError::Invalid(errors) => errors.iter().map(|e| e.path.clone()).collect(),
        ConfigError::WrongType { path, .. } | ConfigError::UnknownField { path } => {
            vec![path.clone()]
        }
        _ => Vec::new(),
    }
}

#[track_caller]
fn check_rule(rule: &str, breaks: &[(&str, &str)], holds: &[&str]) {
    assert!(
        !breaks.is_empty(),
        "{rule}: a rule needs a document that breaks it"
    );
    for (body, field) in breaks {
        match KubeletConfig::parse_and_validate(&document(body)) {
            Ok(_) => panic!("{rule}: accepted a document that breaks it:\n{body}"),
            Err(error) => {
                let paths = refused_paths(&error);
                assert!(
                    paths.iter().any(|p| p == field),
                    "{rule}: refusal of\n{body}\ndoes not name {field:?}: {error}"
                );
                assert!(
                    error.to_string().contains(field),
                    "{rule}: the message does not show {field:?}: {error}"
                );
            }
        }
    }
    for body in holds {
        if let Err(error) = KubeletConfig::parse_and_validate(&document(body)) {
            panic!("{rule}: refused a document on its boundary:\n{body}\n{error}");
        }
    }
}

/// `name { breaks: [(document body, field named)...], holds: [document body...] }`:
/// one test per rule, and `RULE_NAMES` for the table checks.
macro_rules! rules {
    ($($name:ident {
        breaks: [$(($body:expr, $field:expr $(,)?)),+ $(,)?],
        holds: [$($ok:expr),* $(,)?] $(,)?
    })+) => {
        $(
            #[test]
            fn $name() {
                check_rule(stringify!($name), &[$(($body, $field)),+], &[$($ok),*]);
            }
        )+
        const RULE_NAMES: &[&str] = &[$(stringify!($name)),+];
    };
}

const LONG_63: &str = "abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefgh";
const LONG_64: &str = "abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefghi";

rules! {
    node_lease_duration {
        breaks: [("nodeLeaseDurationSeconds: -1", "nodeLeaseDurationSeconds")],
        holds: ["nodeLeaseDurationSeconds: 1"],
    }
    system_cgroups_need_cgroup_root {
        breaks: [("systemCgroups: /system.slice", "systemCgroups")],
        holds: ["systemCgroups: /system.slice\ncgroupRoot: /"],
    }
    event_burst {
        breaks: [("eventBurst: -1", "eventBurst")],
        holds: ["eventBurst: 0"],
    }
    event_record_qps {
        breaks: [("eventRecordQPS: -1", "eventRecordQPS")],
        holds: ["eventRecordQPS: 0"],
    }
    healthz_port {
        breaks: [("healthzPort: 65536", "healthzPort"), ("healthzPort: -1", "healthzPort")],
        holds: ["healthzPort: 0", "healthzPort: 1", "healthzPort: 65535"],
    }
    cpu_cfs_quota_period_range {
        breaks: [
            ("cpuCFSQuotaPeriod: 1001ms", "cpuCFSQuotaPeriod"),
            ("cpuCFSQuotaPeriod: 999us", "cpuCFSQuotaPeriod"),
        ],
        holds: [
            "featureGates:\n  CustomCPUCFSQuotaPeriod: true\ncpuCFSQuotaPeriod: 1ms",
            "featureGates:\n  CustomCPUCFSQuotaPeriod: true\ncpuCFSQuotaPeriod: 1s",
        ],
    }
    image_gc_high_threshold_range {
        breaks: [("imageGCHighThresholdPercent: 101", "imageGCHighThresholdPercent")],
        holds: ["imageGCHighThresholdPercent: 100"],
    }
    image_gc_low_threshold_range {
        breaks: [("imageGCLowThresholdPercent: -1", "imageGCLowThresholdPercent")],
        holds: ["imageGCLowThresholdPercent: 0"],
    }
    image_gc_low_below_high {
        breaks: [(
            "imageGCHighThresholdPercent: 50\nimageGCLowThresholdPercent: 50",
            "imageGCLowThresholdPercent",
        )],
        holds: ["imageGCHighThresholdPercent: 51\nimageGCLowThresholdPercent: 50"],
    }
    image_minimum_gc_age {
        breaks: [("imageMinimumGCAge: -1ns", "imageMinimumGCAge")],
        holds: ["imageMinimumGCAge: 1ns"],
    }
    image_maximum_gc_age_negative {
        breaks: [("imageMaximumGCAge: -1s", "imageMaximumGCAge")],
        holds: [],
    }
    image_maximum_gc_age_above_minimum {
        breaks: [
            ("imageMinimumGCAge: 2m\nimageMaximumGCAge: 2m", "imageMaximumGCAge"),
            ("imageMaximumGCAge: 1m", "imageMaximumGCAge"),
        ],
        holds: ["featureGates:\n  ImageMaximumGCAge: true\nimageMinimumGCAge: 2m\nimageMaximumGCAge: 2m1s"],
    }
    dra_manager_reconcile_period {
        breaks: [("draManagerReconcilePeriod: -1s", "draManagerReconcilePeriod")],
        holds: ["draManagerReconcilePeriod: 1ns"],
    }
    iptables_drop_bit {
        breaks: [("iptablesDropBit: 32", "iptablesDropBit"), ("iptablesDropBit: -1", "iptablesDropBit")],
        holds: ["iptablesDropBit: 0", "iptablesDropBit: 31"],
    }
    iptables_masquerade_bit {
        breaks: [
            ("iptablesMasqueradeBit: 32", "iptablesMasqueradeBit"),
            ("iptablesMasqueradeBit: -1", "iptablesMasqueradeBit"),
        ],
        holds: ["iptablesMasqueradeBit: 0", "iptablesMasqueradeBit: 31"],
    }
    kube_api_burst {
        breaks: [("kubeAPIBurst: -1", "kubeAPIBurst")],
        holds: ["kubeAPIBurst: 0"],
    }
    kube_api_qps {
        breaks: [("kubeAPIQPS: -1", "kubeAPIQPS")],
        holds: ["kubeAPIQPS: 0"],
    }
    node_status_max_images {
        breaks: [("nodeStatusMaxImages: -2", "nodeStatusMaxImages")],
        holds: ["nodeStatusMaxImages: -1"],
    }
    max_open_files {
        breaks: [("maxOpenFiles: -1", "maxOpenFiles")],
        holds: ["maxOpenFiles: 0"],
    }
    max_pods {
        breaks: [("maxPods: -1", "maxPods")],
        holds: ["maxPods: 0"],
    }
    oom_score_adj {
        breaks: [("oomScoreAdj: 1001", "oomScoreAdj"), ("oomScoreAdj: -1001", "oomScoreAdj")],
        holds: ["oomScoreAdj: -1000", "oomScoreAdj: 1000"],
    }
    pods_per_core {
        breaks: [("podsPerCore: -1", "podsPerCore")],
        holds: ["podsPerCore: 0"],
    }
    port {
        breaks: [("port: 65536", "port"), ("port: -1", "port")],
        holds: ["port: 1", "port: 65535"],
    }
    read_only_port {
        breaks: [("readOnlyPort: 65536", "readOnlyPort"), ("readOnlyPort: -1", "readOnlyPort")],
        holds: ["readOnlyPort: 0", "readOnlyPort: 65535"],
    }
    registry_burst {
        breaks: [("registryBurst: -1", "registryBurst")],
        holds: ["registryBurst: 0"],
    }
    registry_pull_qps {
        breaks: [("registryPullQPS: -1", "registryPullQPS")],
        holds: ["registryPullQPS: 0"],
    }
    max_parallel_image_pulls {
        breaks: [("maxParallelImagePulls: 0", "maxParallelImagePulls")],
        holds: ["maxParallelImagePulls: 1"],
    }
    parallel_pulls_need_serialize_off {
        breaks: [(
            "maxParallelImagePulls: 2\nserializeImagePulls: true",
            "maxParallelImagePulls",
        )],
        holds: [
            "maxParallelImagePulls: 1\nserializeImagePulls: true",
            "maxParallelImagePulls: 2\nserializeImagePulls: false",
        ],
    }
    run_once {
        breaks: [("runOnce: true", "runOnce")],
        holds: ["runOnce: false"],
    }
    taint_key {
        breaks: [
            ("registerWithTaints:\n- key: \"\"\n  effect: NoSchedule", "registerWithTaints[0].key"),
            ("registerWithTaints:\n- effect: NoSchedule", "registerWithTaints[0].key"),
            ("registerWithTaints:\n- key: a/b/c", "registerWithTaints[0].key"),
            ("registerWithTaints:\n- key: /gpu", "registerWithTaints[0].key"),
            ("registerWithTaints:\n- key: Example.com/gpu", "registerWithTaints[0].key"),
            ("registerWithTaints:\n- key: -gpu", "registerWithTaints[0].key"),
            ("registerWithTaints:\n- key: gpu card", "registerWithTaints[0].key"),
            (&format!("registerWithTaints:\n- key: ok\n- key: {LONG_64}"), "registerWithTaints[1].key"),
        ],
        holds: [
            "registerWithTaints:\n- key: dedicated\n  value: infra\n  effect: NoSchedule",
            "registerWithTaints:\n- key: example.com/gpu_card.v-2",
            &format!("registerWithTaints:\n- key: example.com/{LONG_63}"),
        ],
    }
    taint_value {
        breaks: [
            (&format!("registerWithTaints:\n- key: a\n  value: {LONG_64}"), "registerWithTaints[0].value"),
            ("registerWithTaints:\n- key: a\n  value: two words", "registerWithTaints[0].value"),
            ("registerWithTaints:\n- key: a\n  value: a/b", "registerWithTaints[0].value"),
            ("registerWithTaints:\n- key: a\n  value: _a", "registerWithTaints[0].value"),
        ],
        holds: [
            &format!("registerWithTaints:\n- key: a\n  value: {LONG_63}"),
            "registerWithTaints:\n- key: a\n  value: \"\"",
            "registerWithTaints:\n- key: a\n  value: A_b.c-1",
        ],
    }
    taint_effect {
        breaks: [
            ("registerWithTaints:\n- key: a\n  effect: NoEvict", "registerWithTaints[0].effect"),
            ("registerWithTaints:\n- key: a\n  effect: noschedule", "registerWithTaints[0].effect"),
        ],
        holds: [
            "registerWithTaints:\n- key: a\n  effect: NoSchedule\n- key: b\n  effect: PreferNoSchedule\n- key: c\n  effect: NoExecute",
            "registerWithTaints:\n- key: a\n  effect: \"\"",
        ],
    }
    taint_time_added {
        breaks: [(
            "registerWithTaints:\n- key: a\n  effect: NoSchedule\n  timeAdded: \"2026-01-01T00:00:00Z\"",
            "registerWithTaints[0].timeAdded",
        )],
        holds: ["registerWithTaints:\n- key: a\n  effect: NoSchedule\n  timeAdded: null"],
    }
    topology_manager_policy {
        breaks: [("topologyManagerPolicy: strict", "topologyManagerPolicy")],
        holds: ["topologyManagerPolicy: single-numa-node"],
    }
    topology_manager_scope {
        breaks: [("topologyManagerScope: node", "topologyManagerScope")],
        holds: ["topologyManagerScope: pod"],
    }
    swap_behavior_value {
        breaks: [("memorySwap:\n  swapBehavior: UnlimitedSwap", "memorySwap.swapBehavior")],
        holds: [],
    }
    crash_loop_back_off_max_range {
        breaks: [
            ("crashLoopBackOff:\n  maxContainerRestartPeriod: 301s", "crashLoopBackOff.maxContainerRestartPeriod"),
            ("crashLoopBackOff:\n  maxContainerRestartPeriod: 999ms", "crashLoopBackOff.maxContainerRestartPeriod"),
        ],
        holds: [
            "featureGates:\n  KubeletCrashLoopBackOffMax: true\ncrashLoopBackOff:\n  maxContainerRestartPeriod: 1s",
            "featureGates:\n  KubeletCrashLoopBackOffMax: true\ncrashLoopBackOff:\n  maxContainerRestartPeriod: 300s",
        ],
    }
    enforce_node_allocatable_both_forms {
        breaks: [
            (
                "enforceNodeAllocatable: [system-reserved, system-reserved-compressible]\nsystemReservedCgroup: /system.slice",
                "enforceNodeAllocatable",
            ),
            (
                "enforceNodeAllocatable: [kube-reserved, kube-reserved-compressible]\nkubeReservedCgroup: /kube.slice",
                "enforceNodeAllocatable",
            ),
        ],
        holds: ["enforceNodeAllocatable: [pods, system-reserved-compressible, kube-reserved]\nsystemReservedCgroup: /system.slice\nkubeReservedCgroup: /kube.slice"],
    }
    enforce_node_allocatable_duplicate {
        breaks: [("enforceNodeAllocatable: [pods, pods]", "enforceNodeAllocatable[1]")],
        holds: ["enforceNodeAllocatable: [pods]"],
    }
    enforce_node_allocatable_cgroups {
        breaks: [
            ("enforceNodeAllocatable: [system-reserved]", "enforceNodeAllocatable[0]"),
            ("enforceNodeAllocatable: [pods, kube-reserved-compressible]", "enforceNodeAllocatable[1]"),
        ],
        holds: ["enforceNodeAllocatable: [kube-reserved-compressible]\nkubeReservedCgroup: /kube.slice"],
    }
    enforce_node_allocatable_none_alone {
        breaks: [("enforceNodeAllocatable: [none, pods]", "enforceNodeAllocatable[0]")],
        holds: ["enforceNodeAllocatable: [none]"],
    }
    enforce_node_allocatable_option {
        breaks: [("enforceNodeAllocatable: [everything]", "enforceNodeAllocatable[0]")],
        holds: ["enforceNodeAllocatable: []"],
    }
    enforce_node_allocatable_needs_cgroups_per_qos {
        breaks: [("cgroupsPerQOS: false\nenforceNodeAllocatable: [pods]", "enforceNodeAllocatable[0]")],
        holds: ["cgroupsPerQOS: false\nenforceNodeAllocatable: [none]"],
    }
    hairpin_mode {
        breaks: [("hairpinMode: veth", "hairpinMode")],
        holds: ["hairpinMode: none"],
    }
    image_pull_credentials_verification_policy {
        breaks: [("imagePullCredentialsVerificationPolicy: Sometimes", "imagePullCredentialsVerificationPolicy")],
        holds: [],
    }
    image_allowlist_needs_policy {
        breaks: [
            ("preloadedImagesVerificationAllowlist: [registry.example/app]", "preloadedImagesVerificationAllowlist"),
            (
                "imagePullCredentialsVerificationPolicy: AlwaysVerify\npreloadedImagesVerificationAllowlist: [registry.example/app]",
                "preloadedImagesVerificationAllowlist",
            ),
        ],
        holds: [],
    }
    image_allowlist_pattern {
        breaks: [
            ("imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [nginx]", "preloadedImagesVerificationAllowlist[0]"),
            ("imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [registry.example/app, registry.example/app:1.0]", "preloadedImagesVerificationAllowlist[1]"),
            ("imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.example/*/app\"]", "preloadedImagesVerificationAllowlist[0]"),
            ("imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.example/app*\"]", "preloadedImagesVerificationAllowlist[0]"),
            ("imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"/*\"]", "preloadedImagesVerificationAllowlist[0]"),
            ("imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\" registry.example/app\"]", "preloadedImagesVerificationAllowlist[0]"),
            ("imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [registry.example/]", "preloadedImagesVerificationAllowlist[0]"),
        ],
        holds: ["featureGates:\n  KubeletEnsureSecretPulledImages: true\nimagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.example/*\", docker.io/library/nginx, \"localhost:5000/team/app\"]"],
    }
    reserved_system_cpus_with_cgroups {
        breaks: [
            ("reservedSystemCPUs: 0-1\nsystemReservedCgroup: /system.slice", "reservedSystemCPUs"),
            ("reservedSystemCPUs: 0-1\nkubeReservedCgroup: /kube.slice", "reservedSystemCPUs"),
        ],
        holds: ["reservedSystemCPUs: 0-1"],
    }
    reserved_system_cpus_list {
        breaks: [("reservedSystemCPUs: two", "reservedSystemCPUs"), ("reservedSystemCPUs: 3-1", "reservedSystemCPUs")],
        holds: ["reservedSystemCPUs: 0,2-3"],
    }
    reserved_memory_resource {
        breaks: [("reservedMemory:\n- numaNode: 0\n  limits:\n    cpu: \"1\"", "reservedMemory[0].limits.cpu")],
        holds: ["reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\n    hugepages-2Mi: 64Mi"],
    }
    reserved_memory_zero {
        breaks: [
            ("reservedMemory:\n- numaNode: 0\n  limits:\n    memory: \"0\"", "reservedMemory[0].limits.memory"),
            ("reservedMemory:\n- numaNode: 1\n  limits:\n    hugepages-1Gi: 0Gi", "reservedMemory[0].limits.hugepages-1Gi"),
        ],
        holds: ["reservedMemory:\n- numaNode: 0\n  limits:\n    memory: \"1\""],
    }
    reserved_memory_duplicate {
        breaks: [(
            "reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\n- numaNode: 0\n  limits:\n    memory: 2Gi",
            "reservedMemory[1].limits.memory",
        )],
        holds: ["reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\n- numaNode: 1\n  limits:\n    memory: 1Gi"],
    }
    reserved_memory_types {
        breaks: [
            ("reservedMemory:\n- numaNode: zero\n  limits:\n    memory: 1Gi", "reservedMemory[0].numaNode"),
            ("reservedMemory:\n- numaNode: 0\n  limits:\n    memory: lots", "reservedMemory[0].limits.memory"),
        ],
        holds: ["reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1073741824"],
    }
    show_hidden_metrics_for_version {
        breaks: [
            ("showHiddenMetricsForVersion: latest", "showHiddenMetricsForVersion"),
            ("showHiddenMetricsForVersion: v1.35", "showHiddenMetricsForVersion"),
            ("showHiddenMetricsForVersion: 1.35.0", "showHiddenMetricsForVersion"),
        ],
        holds: ["showHiddenMetricsForVersion: \"\""],
    }
    logging_format {
        breaks: [
            ("logging:\n  format: yaml", "logging.format"),
            ("logging:\n  format: JSON", "logging.format"),
        ],
        holds: ["logging:\n  format: text", "logging:\n  format: \"\""],
    }
    logging_verbosity {
        breaks: [
            ("logging:\n  verbosity: 2147483648", "logging.verbosity"),
            ("logging:\n  verbosity: -1", "logging.verbosity"),
        ],
        holds: ["logging:\n  verbosity: 2147483647", "logging:\n  verbosity: 0"],
    }
    logging_vmodule_text_only {
        breaks: [(
            "logging:\n  format: json\n  vmodule:\n  - filePattern: kubelet\n    verbosity: 4",
            "logging.vmodule",
        )],
        holds: ["logging:\n  format: text\n  vmodule:\n  - filePattern: kubelet\n    verbosity: 4"],
    }
    logging_vmodule_file_pattern {
        breaks: [
            ("logging:\n  vmodule:\n  - filePattern: \"\"\n    verbosity: 4", "logging.vmodule[0].filePattern"),
            ("logging:\n  vmodule:\n  - verbosity: 4", "logging.vmodule[0].filePattern"),
            ("logging:\n  vmodule:\n  - filePattern: a=b", "logging.vmodule[0].filePattern"),
            ("logging:\n  vmodule:\n  - filePattern: ok\n  - filePattern: a,b", "logging.vmodule[1].filePattern"),
        ],
        holds: ["logging:\n  vmodule:\n  - filePattern: \"pod*/kubelet?\"\n    verbosity: 2"],
    }
    logging_vmodule_verbosity {
        breaks: [("logging:\n  vmodule:\n  - filePattern: a\n    verbosity: 2147483648", "logging.vmodule[0].verbosity")],
        holds: ["logging:\n  vmodule:\n  - filePattern: a\n    verbosity: 2147483647"],
    }
    logging_decodes {
        breaks: [
            ("logging:\n  flushFrequency: soon", "logging.flushFrequency"),
            ("logging:\n  flushFrequency: 1.5", "logging.flushFrequency"),
            ("logging:\n  format: 1", "logging.format"),
            ("logging:\n  options:\n    json:\n      infoBufferSize: lots", "logging.options.json.infoBufferSize"),
            ("logging:\n  options:\n    text:\n      splitStream: sometimes", "logging.options.text.splitStream"),
            ("logging: verbose", "logging"),
        ],
        holds: [
            "logging:\n  flushFrequency: 5s",
            "logging:\n  flushFrequency: 5000000000",
            "logging:\n  options:\n    json:\n      infoBufferSize: \"0\"",
        ],
    }
    tracing_sampling_rate {
        breaks: [
            ("tracing:\n  samplingRatePerMillion: -1", "tracing.samplingRatePerMillion"),
            ("tracing:\n  samplingRatePerMillion: 1000001", "tracing.samplingRatePerMillion"),
        ],
        holds: ["tracing:\n  samplingRatePerMillion: 0", "tracing:\n  samplingRatePerMillion: 1000000"],
    }
    tracing_endpoint_scheme {
        breaks: [
            ("tracing:\n  endpoint: http://collector:4317", "tracing.endpoint"),
            ("tracing:\n  endpoint: //collector:4317", "tracing.endpoint"),
        ],
        holds: [
            "tracing:\n  endpoint: collector.monitoring.svc:4317",
            "tracing:\n  endpoint: dns:///collector:4317",
            "tracing:\n  endpoint: unix:///run/otel/otel.sock",
            "tracing:\n  endpoint: unix-abstract://otel",
        ],
    }
    tracing_endpoint_url {
        breaks: [
            ("tracing:\n  endpoint: \"dn%2s://localhost:4317\"", "tracing.endpoint"),
            ("tracing:\n  endpoint: collector:otlp", "tracing.endpoint"),
            ("tracing:\n  endpoint: \"collector name:4317\"", "tracing.endpoint"),
        ],
        holds: ["tracing:\n  endpoint: \"[::1]:4317\""],
    }
    memory_throttling_factor {
        breaks: [
            ("memoryThrottlingFactor: 0", "memoryThrottlingFactor"),
            ("memoryThrottlingFactor: 1.01", "memoryThrottlingFactor"),
        ],
        holds: ["memoryThrottlingFactor: 1", "memoryThrottlingFactor: 0.01"],
    }
    memory_reservation_policy {
        breaks: [("memoryReservationPolicy: Full", "memoryReservationPolicy")],
        holds: ["memoryReservationPolicy: None"],
    }
    system_log_query_needs_handler {
        breaks: [(
            "featureGates:\n  NodeLogQuery: true\nenableSystemLogHandler: false\nenableSystemLogQuery: true",
            "enableSystemLogQuery",
        )],
        holds: ["featureGates:\n  NodeLogQuery: true\nenableSystemLogQuery: true"],
    }
    container_log_max_workers {
        breaks: [("containerLogMaxWorkers: 0", "containerLogMaxWorkers")],
        holds: ["containerLogMaxWorkers: 1"],
    }
    container_log_monitor_interval {
        breaks: [("containerLogMonitorInterval: 2999ms", "containerLogMonitorInterval")],
        holds: ["containerLogMonitorInterval: 3s"],
    }
    container_log_max_files {
        breaks: [("containerLogMaxFiles: 1", "containerLogMaxFiles")],
        holds: ["containerLogMaxFiles: 2"],
    }
    pod_logs_dir_absolute {
        breaks: [("podLogsDir: var/log/pods", "podLogsDir")],
        holds: ["podLogsDir: /var/log/pods"],
    }
    pod_logs_dir_normalized {
        breaks: [("podLogsDir: /var/log/./pods", "podLogsDir"), ("podLogsDir: /var/log/pods/", "podLogsDir")],
        holds: ["podLogsDir: /"],
    }
    pod_logs_dir_ascii {
        breaks: [("podLogsDir: /var/log/pöds", "podLogsDir")],
        holds: ["podLogsDir: /var/log/pods-~_.1"],
    }
    startup_address_is_ip {
        breaks: [
            ("address: kubelet.local", "address"),
            ("healthzBindAddress: localhost", "healthzBindAddress"),
        ],
        holds: ["address: \"::\"", "healthzBindAddress: 127.0.0.1"],
    }
    startup_cgroup_driver {
        breaks: [("cgroupDriver: upstart", "cgroupDriver")],
        holds: ["cgroupDriver: systemd", "cgroupDriver: cgroupfs"],
    }
    startup_cpu_manager_policy {
        breaks: [("cpuManagerPolicy: dynamic", "cpuManagerPolicy")],
        holds: ["cpuManagerPolicy: static"],
    }
    startup_memory_manager_policy {
        breaks: [("memoryManagerPolicy: static", "memoryManagerPolicy")],
        holds: ["memoryManagerPolicy: Static"],
    }
    startup_change_detection_strategy {
        breaks: [("configMapAndSecretChangeDetectionStrategy: Poll", "configMapAndSecretChangeDetectionStrategy")],
        holds: ["configMapAndSecretChangeDetectionStrategy: Get"],
    }
    startup_authorization_mode {
        breaks: [("authorization:\n  mode: RBAC", "authorization.mode")],
        holds: ["authorization:\n  mode: AlwaysAllow"],
    }
    startup_user_namespaces_ids_per_pod {
        breaks: [
            ("userNamespaces:\n  idsPerPod: 65537", "userNamespaces.idsPerPod"),
            ("userNamespaces:\n  idsPerPod: 0", "userNamespaces.idsPerPod"),
        ],
        holds: ["userNamespaces:\n  idsPerPod: 65536"],
    }
    startup_container_log_max_size {
        breaks: [("containerLogMaxSize: ten", "containerLogMaxSize")],
        holds: ["containerLogMaxSize: 1Ki"],
    }
    startup_eviction_signal {
        breaks: [("evictionHard:\n  memory.free: 1Gi", "evictionHard.memory.free")],
        holds: ["evictionHard:\n  pid.available: 10%"],
    }
    startup_eviction_threshold {
        breaks: [
            ("evictionHard:\n  memory.available: 101%", "evictionHard.memory.available"),
            ("evictionHard:\n  memory.available: \"-1Mi\"", "evictionHard.memory.available"),
        ],
        holds: ["evictionHard:\n  memory.available: 100%", "evictionHard:\n  memory.available: 0%"],
    }
    startup_eviction_soft_grace_period {
        breaks: [("evictionSoft:\n  memory.available: 1Gi", "evictionSoftGracePeriod.memory.available")],
        holds: ["evictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 0s"],
    }
    startup_eviction_minimum_reclaim {
        breaks: [("evictionMinimumReclaim:\n  memory.available: -1Mi", "evictionMinimumReclaim.memory.available")],
        holds: ["evictionMinimumReclaim:\n  memory.available: \"0\""],
    }
    startup_reserved_resources {
        breaks: [
            ("kubeReserved:\n  nvidia.com/gpu: \"1\"", "kubeReserved.nvidia.com/gpu"),
            ("systemReserved:\n  memory: -1Gi", "systemReserved.memory"),
        ],
        holds: ["kubeReserved:\n  cpu: \"0\"\n  pid: \"100\"\nsystemReserved:\n  ephemeral-storage: 1Gi"],
    }
    startup_qos_reserved {
        breaks: [
            ("qosReserved:\n  cpu: 10%", "qosReserved.cpu"),
            ("qosReserved:\n  memory: 101%", "qosReserved.memory"),
        ],
        holds: ["qosReserved:\n  memory: 100%", "qosReserved:\n  memory: 0%"],
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The test names in the `test` column of docs/validation-rules.md (every
/// section that has one): the `` `module::name` `` references in it.
fn table_test_references() -> Vec<(String, String)> {
    let path = workspace_root().join("docs/validation-rules.md");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path:?}: {e}"));
    let mut references = Vec::new();
    let mut test_column = None;
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            test_column = None;
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells
            .iter()
            .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        match test_column {
            None => test_column = Some(cells.iter().position(|c| *c == "test")),
            Some(None) => {}
            Some(Some(column)) => {
                let cell = cells.get(column).copied().unwrap_or("");
                // Every `module::name` in backquotes; words around them are notes.
                let named: Vec<&str> = cell
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .filter(|r| r.contains("::"))
                    .collect();
                assert!(!named.is_empty(), "a row names no test: {line}");
                for reference in named {
                    references.push((reference.to_owned(), line.to_owned()));
                }
            }
        }
    }
    references
}

/// Every `.rs` file of the workspace's code and tests.
fn rust_sources() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                let name = entry.file_name();
                if name != "target" && name != ".git" {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                if let Ok(text) = fs::read_to_string(&path) {
                    out.push(text);
                }
            }
        }
    }
    let root = workspace_root();
    let mut out = Vec::new();
    for dir in ["crates", "tests", "src", "testkit", "examples"] {
        walk(&root.join(dir), &mut out);
    }
    out
}

#[test]
fn every_table_row_names_a_test() {
    let references = table_test_references();
    assert!(
        references.len() >= RULE_NAMES.len(),
        "the table names {} tests, fewer than the {} rules here",
        references.len(),
        RULE_NAMES.len()
    );
    let sources = rust_sources();
    for (reference, row) in &references {
        let name = reference.rsplit("::").next().unwrap_or(reference);
        let exists = if reference.starts_with("upstream_rules::") {
            RULE_NAMES.contains(&name)
        } else {
            let function = format!("fn {name}(");
            sources.iter().any(|text| text.contains(&function))
        };
        assert!(exists, "no test {reference:?} (row: {row})");
    }
}

#[test]
fn every_rule_is_in_the_table() {
    let references = table_test_references();
    for name in RULE_NAMES {
        let reference = format!("upstream_rules::{name}");
        assert!(
            references.iter().any(|(r, _)| *r == reference),
            "rule test {name} has no row in docs/validation-rules.md"
        );
    }
}
