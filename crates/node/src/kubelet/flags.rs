//! The kubelet's own flags, given after `--`: which ones kubelet-pivot takes
//! over (`--config`, `--config-dir`), which ones it refuses (the lock flags,
//! and the flags that set a KubeletConfiguration field), and the arguments
//! the kubelet child gets.
//!
//! The kubelet parses its flags with pflag and `WordSepNormalizeFunc`:
//! `--max-pods=5`, `--max-pods 5` and `--max_pods=5` are one flag; after a
//! lone `--` everything is positional. Go's single-dash spelling
//! (`-max-pods`) is not pflag's, but it is refused all the same: stricter
//! than the kubelet, never more lenient.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use tracing::info;

/// A kubelet flag that sets a KubeletConfiguration field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigFlag {
    /// The flag's name, without dashes.
    pub flag: &'static str,
    /// The field it overrides (a path in the v1beta1 document).
    pub field: &'static str,
}

const fn f(flag: &'static str, field: &'static str) -> ConfigFlag {
    ConfigFlag { flag, field }
}

/// Every flag of `options.AddKubeletConfigFlags`
/// (cmd/kubelet/app/options/options.go), including the logging flags it
/// adds through `logsapi.AddFlags`: the kubelet re-applies them over its
/// config file (`kubeletConfigFlagPrecedence`), so each one would change the
/// config the kubelet runs behind the effective config's back.
pub const CONFIG_FLAGS: &[ConfigFlag] = &[
    f("enable-server", "enableServer"),
    f("fail-swap-on", "failSwapOn"),
    f("pod-manifest-path", "staticPodPath"),
    f("sync-frequency", "syncFrequency"),
    f("file-check-frequency", "fileCheckFrequency"),
    f("http-check-frequency", "httpCheckFrequency"),
    f("manifest-url", "staticPodURL"),
    f("manifest-url-header", "staticPodURLHeader"),
    f("address", "address"),
    f("port", "port"),
    f("read-only-port", "readOnlyPort"),
    f("container-runtime-endpoint", "containerRuntimeEndpoint"),
    f("image-service-endpoint", "imageServiceEndpoint"),
    f("anonymous-auth", "authentication.anonymous.enabled"),
    f(
        "authentication-token-webhook",
        "authentication.webhook.enabled",
    ),
    f(
        "authentication-token-webhook-cache-ttl",
        "authentication.webhook.cacheTTL",
    ),
    f("client-ca-file", "authentication.x509.clientCAFile"),
    f("authorization-mode", "authorization.mode"),
    f(
        "authorization-webhook-cache-authorized-ttl",
        "authorization.webhook.cacheAuthorizedTTL",
    ),
    f(
        "authorization-webhook-cache-unauthorized-ttl",
        "authorization.webhook.cacheUnauthorizedTTL",
    ),
    f("tls-cert-file", "tlsCertFile"),
    f("tls-private-key-file", "tlsPrivateKeyFile"),
    f("rotate-server-certificates", "serverTLSBootstrap"),
    f("tls-cipher-suites", "tlsCipherSuites"),
    f("tls-min-version", "tlsMinVersion"),
    f("rotate-certificates", "rotateCertificates"),
    f("registry-qps", "registryPullQPS"),
    f("registry-burst", "registryBurst"),
    f("event-qps", "eventRecordQPS"),
    f("event-burst", "eventBurst"),
    f("enable-debugging-handlers", "enableDebuggingHandlers"),
    f("contention-profiling", "enableContentionProfiling"),
    f("healthz-port", "healthzPort"),
    f("healthz-bind-address", "healthzBindAddress"),
    f("oom-score-adj", "oomScoreAdj"),
    f("cluster-domain", "clusterDomain"),
    f("volume-plugin-dir", "volumePluginDir"),
    f("cluster-dns", "clusterDNS"),
    f(
        "streaming-connection-idle-timeout",
        "streamingConnectionIdleTimeout",
    ),
    f("node-status-update-frequency", "nodeStatusUpdateFrequency"),
    f("minimum-image-ttl-duration", "imageMinimumGCAge"),
    f("image-gc-high-threshold", "imageGCHighThresholdPercent"),
    f("image-gc-low-threshold", "imageGCLowThresholdPercent"),
    f("volume-stats-agg-period", "volumeStatsAggPeriod"),
    f("feature-gates", "featureGates"),
    f("kubelet-cgroups", "kubeletCgroups"),
    f("system-cgroups", "systemCgroups"),
    f("provider-id", "providerID"),
    f("cgroups-per-qos", "cgroupsPerQOS"),
    f("cgroup-driver", "cgroupDriver"),
    f("cgroup-root", "cgroupRoot"),
    f("cpu-manager-policy", "cpuManagerPolicy"),
    f("cpu-manager-policy-options", "cpuManagerPolicyOptions"),
    f("cpu-manager-reconcile-period", "cpuManagerReconcilePeriod"),
    f("qos-reserved", "qosReserved"),
    f("topology-manager-policy", "topologyManagerPolicy"),
    f("runtime-request-timeout", "runtimeRequestTimeout"),
    f("hairpin-mode", "hairpinMode"),
    f("max-pods", "maxPods"),
    f("pod-cidr", "podCIDR"),
    f("pod-max-pids", "podPidsLimit"),
    f("resolv-conf", "resolvConf"),
    f("runonce", "runOnce"),
    f("cpu-cfs-quota", "cpuCFSQuota"),
    f("cpu-cfs-quota-period", "cpuCFSQuotaPeriod"),
    f(
        "enable-controller-attach-detach",
        "enableControllerAttachDetach",
    ),
    f("make-iptables-util-chains", "makeIPTablesUtilChains"),
    f("iptables-masquerade-bit", "iptablesMasqueradeBit"),
    f("iptables-drop-bit", "iptablesDropBit"),
    f("container-log-max-size", "containerLogMaxSize"),
    f("container-log-max-files", "containerLogMaxFiles"),
    f("allowed-unsafe-sysctls", "allowedUnsafeSysctls"),
    f("node-status-max-images", "nodeStatusMaxImages"),
    f("kernel-memcg-notification", "kernelMemcgNotification"),
    f(
        "local-storage-capacity-isolation",
        "localStorageCapacityIsolation",
    ),
    f("max-open-files", "maxOpenFiles"),
    f("kube-api-content-type", "contentType"),
    f("kube-api-qps", "kubeAPIQPS"),
    f("kube-api-burst", "kubeAPIBurst"),
    f("serialize-image-pulls", "serializeImagePulls"),
    f("eviction-hard", "evictionHard"),
    f("eviction-soft", "evictionSoft"),
    f("eviction-soft-grace-period", "evictionSoftGracePeriod"),
    f(
        "eviction-pressure-transition-period",
        "evictionPressureTransitionPeriod",
    ),
    f("eviction-max-pod-grace-period", "evictionMaxPodGracePeriod"),
    f("eviction-minimum-reclaim", "evictionMinimumReclaim"),
    f("pods-per-core", "podsPerCore"),
    f("protect-kernel-defaults", "protectKernelDefaults"),
    f("reserved-cpus", "reservedSystemCPUs"),
    f("topology-manager-scope", "topologyManagerScope"),
    f(
        "topology-manager-policy-options",
        "topologyManagerPolicyOptions",
    ),
    f("system-reserved", "systemReserved"),
    f("kube-reserved", "kubeReserved"),
    f("enforce-node-allocatable", "enforceNodeAllocatable"),
    f("system-reserved-cgroup", "systemReservedCgroup"),
    f("kube-reserved-cgroup", "kubeReservedCgroup"),
    f("logging-format", "logging.format"),
    f("log-flush-frequency", "logging.flushFrequency"),
    f("v", "logging.verbosity"),
    f("vmodule", "logging.vmodule"),
    f("log-json-split-stream", "logging.options.json.splitStream"),
    f(
        "log-json-info-buffer-size",
        "logging.options.json.infoBufferSize",
    ),
    f("log-text-split-stream", "logging.options.text.splitStream"),
    f(
        "log-text-info-buffer-size",
        "logging.options.text.infoBufferSize",
    ),
    f("memory-manager-policy", "memoryManagerPolicy"),
    f("reserved-memory", "reservedMemory"),
    f("register-node", "registerNode"),
    f("register-with-taints", "registerWithTaints"),
];

/// A config flag kubelet-pivot lets through on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowedFlag {
    pub flag: &'static str,
    /// Why it may bypass the effective config (docs/reference.md says the same).
    pub reason: &'static str,
}

/// Config flags allowed after `--` (docs/reference.md, "Kubelet flags after `--`").
/// Their values are not part of the effective config that is validated,
/// hashed, classified and trialled.
pub const ALLOWED_CONFIG_FLAGS: &[AllowedFlag] = &[
    AllowedFlag {
        flag: "v",
        reason: "Log verbosity for troubleshooting a node: raising it must not wait for a config rollout, it changes nothing but what the kubelet logs, and the kubelet keeps it as a permanent (not deprecated) flag.",
    },
    AllowedFlag {
        flag: "vmodule",
        reason: "Per-file log verbosity, for the same reasons as -v.",
    },
];

/// The kubelet's own lock flags: a kubelet given the lock kubelet-pivot
/// holds for it would block behind its own supervisor, and the supervisor
/// would take it for a contender. The lock is kubelet-pivot's job.
const LOCK_FLAGS: &[&str] = &["lock-file", "exit-on-lock-contention"];

/// The kubelet's `--config`: replaced by the effective config file.
const CONFIG: &str = "config";
/// The kubelet's `--config-dir`: merged into the effective config.
const CONFIG_DIR: &str = "config-dir";

/// One kubelet flag that would set a KubeletConfiguration field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedFlag {
    /// As given (`--max-pods=5`).
    pub given: String,
    pub flag: ConfigFlag,
}

#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    #[error("the kubelet argument --{flag} is not allowed: kubelet-pivot holds the node's kubelet lock for the kubelet (see --lock-file of kubelet-pivot); remove --{flag} from the arguments after `--`")]
    LockFlag { flag: &'static str },
    #[error("{}", refused_message(.0))]
    ConfigFields(Vec<RefusedFlag>),
    #[error("the kubelet argument --{CONFIG_DIR} needs a directory: pass --{CONFIG_DIR}=DIR, or remove it")]
    MissingConfigDir,
}

fn refused_message(refused: &[RefusedFlag]) -> String {
    let each: Vec<String> = refused
        .iter()
        .map(|r| {
            format!(
                "the kubelet argument {} sets the KubeletConfiguration field {field} behind the effective config's back (no validation, classification, trial or rollback would see it): put {field} in the KubeletConfiguration (--init-config, a --config-dir drop-in or the assigned ConfigMap) and remove --{} from the arguments after `--`",
                r.given,
                r.flag.flag,
                field = r.flag.field,
            )
        })
        .collect();
    each.join("; ")
}

/// What kubelet-pivot takes from the kubelet's flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletFlags {
    /// `--config-dir`: drop-ins merged into the effective config.
    pub config_dir: Option<PathBuf>,
}

/// A flag argument: its normalized name, and its value when given inline.
struct Flag<'a> {
    name: String,
    inline: Option<&'a str>,
}

/// Reads `arg` as a flag (`--name[=value]`, `-name[=value]`, `-v...`);
/// `None` for a value or a positional argument. Names are normalized as
/// pflag's `WordSepNormalizeFunc` does (`_` is `-`).
fn flag_of(arg: &str) -> Option<Flag<'_>> {
    let body = match arg.strip_prefix("--") {
        Some(body) => body,
        // pflag's only kubelet shorthand: -v (-v=4, -v4, -v 4).
        None => match arg.strip_prefix('-')? {
            short if short.starts_with('v') && !short.starts_with("vmodule") => {
                return Some(Flag {
                    name: "v".to_owned(),
                    inline: short.get(1..).filter(|v| !v.is_empty()),
                })
            }
            body => body,
        },
    };
    if body.is_empty() {
        return None;
    }
    let (name, inline) = match body.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (body, None),
    };
    Some(Flag {
        name: name.replace('_', "-"),
        inline,
    })
}

/// Checks the kubelet's arguments (after `--`) before start: the lock flags
/// and the flags that set a KubeletConfiguration field (unless allowed) are
/// refused, every refused one named; `--config-dir` is taken.
pub fn check(args: &[OsString]) -> Result<KubeletFlags, FlagError> {
    let mut out = KubeletFlags::default();
    let mut refused = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let text = arg.to_string_lossy();
        if text == "--" {
            break;
        }
        let Some(flag) = flag_of(&text) else {
            continue;
        };
        if let Some(lock) = LOCK_FLAGS.iter().find(|l| **l == flag.name) {
            return Err(FlagError::LockFlag { flag: lock });
        }
        if flag.name == CONFIG_DIR {
            let value = match flag.inline {
                Some(v) => Some(OsString::from(v)),
                None => iter.next().cloned(),
            };
            match value.filter(|v| !v.is_empty()) {
                Some(dir) => out.config_dir = Some(PathBuf::from(dir)),
                None => return Err(FlagError::MissingConfigDir),
            }
            continue;
        }
        if ALLOWED_CONFIG_FLAGS.iter().any(|a| a.flag == flag.name) {
            continue;
        }
        if let Some(config) = CONFIG_FLAGS.iter().find(|c| c.flag == flag.name) {
            refused.push(RefusedFlag {
                given: text.into_owned(),
                flag: *config,
            });
        }
    }
    if refused.is_empty() {
        Ok(out)
    } else {
        Err(FlagError::ConfigFields(refused))
    }
}

/// The kubelet child's arguments: the user's, with `--config` replaced by
/// the effective config file (which has the `--config-dir` drop-ins merged
/// in) and `--config-dir` removed, so that the kubelet reads nothing but
/// the effective config.
pub fn child_args(user: &[OsString], config: &Path) -> Vec<OsString> {
    let mut out = Vec::with_capacity(user.len() + 2);
    let mut iter = user.iter();
    while let Some(arg) = iter.next() {
        let text = arg.to_string_lossy();
        if text == "--" {
            out.push(arg.clone());
            out.extend(iter.cloned());
            break;
        }
        let taken = flag_of(&text)
            .filter(|f| f.name == CONFIG || f.name == CONFIG_DIR)
            .map(|f| (f.name, f.inline.is_some()));
        let Some((name, inline)) = taken else {
            out.push(arg.clone());
            continue;
        };
        let given = if inline {
            text.into_owned()
        } else {
            let value = iter
                .next()
                .map(OsString::as_os_str)
                .unwrap_or(OsStr::new(""));
            format!("{text} {}", value.to_string_lossy())
        };
        if name == CONFIG {
            info!(%given, effective = %config.display(), "replacing the kubelet's --config with the effective config file");
        } else {
            info!(%given, effective = %config.display(), "not passing --config-dir to the kubelet: its drop-ins are merged into the effective config file");
        }
    }
    // Before a user's `--` (positional arguments), where pflag still reads flags.
    let at = out
        .iter()
        .position(|a| a.as_os_str() == "--")
        .unwrap_or(out.len());
    out.splice(
        at..at,
        [OsString::from("--config"), config.as_os_str().to_owned()],
    );
    out
}

/// The table in docs/reference.md of allowed flags (a test keeps the two equal).
pub fn allowed_flags_markdown() -> String {
    let mut out = String::from("| flag | field | why it is allowed |\n| --- | --- | --- |\n");
    for allowed in ALLOWED_CONFIG_FLAGS {
        let field = CONFIG_FLAGS
            .iter()
            .find(|c| c.flag == allowed.flag)
            .map_or("", |c| c.field);
        let dashes = if allowed.flag.len() == 1 { "-" } else { "--" };
        out.push_str(&format!(
            "| `{dashes}{}` | `{field}` | {} |\n",
            allowed.flag, allowed.reason
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn strings(list: &[OsString]) -> Vec<String> {
        list.iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    #[track_caller]
    fn refused(list: &[&str]) -> Vec<RefusedFlag> {
        match check(&args(list)) {
            Err(FlagError::ConfigFields(refused)) => refused,
            other => panic!("{list:?}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn config_field_flags_are_refused_in_every_spelling() {
        for spelling in [
            &["--max-pods=110"][..],
            &["--max-pods", "110"],
            &["--max_pods=110"],
            &["-max-pods=110"],
            &[
                "--kubeconfig",
                "/k",
                "--max-pods",
                "110",
                "--node-ip=1.2.3.4",
            ],
        ] {
            let refused = refused(spelling);
            assert_eq!(refused.len(), 1, "{spelling:?}");
            assert_eq!(refused[0].flag.field, "maxPods");
        }
    }

    #[test]
    fn the_message_names_the_field_and_the_fix() {
        let err = check(&args(&[
            "--kube-reserved=cpu=100m",
            "--cgroup-driver",
            "systemd",
            "--eviction-hard=memory.available<100Mi",
        ]))
        .unwrap_err()
        .to_string();
        for needle in [
            "--kube-reserved=cpu=100m",
            "KubeletConfiguration field kubeReserved",
            "put kubeReserved in the KubeletConfiguration",
            "remove --kube-reserved",
            "--cgroup-driver",
            "cgroupDriver",
            "evictionHard",
        ] {
            assert!(err.contains(needle), "{needle:?} missing in {err}");
        }
        let err = check(&args(&["--max-pods=5"])).unwrap_err().to_string();
        assert!(
            err.contains("put maxPods in the KubeletConfiguration"),
            "{err}"
        );
    }

    #[test]
    fn flags_that_are_no_config_field_pass() {
        let list = [
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--bootstrap-kubeconfig",
            "/etc/kubernetes/bootstrap-kubelet.conf",
            "--hostname-override=node-1",
            "--node-ip",
            "10.0.0.1",
            "--node-labels=a=b",
            "--root-dir=/var/lib/kubelet",
            "--cert-dir",
            "/var/lib/kubelet/pki",
            "--cloud-provider=external",
            "--seccomp-default",
            "--image-credential-provider-config=/etc/x",
            "--runtime-cgroups=/system.slice/containerd.service",
        ];
        assert_eq!(check(&args(&list)).unwrap(), KubeletFlags::default());
    }

    #[test]
    fn log_verbosity_is_allowed() {
        for list in [
            &["--v=4"][..],
            &["-v=4"],
            &["-v", "4"],
            &["-v4"],
            &["--v", "2"],
            &["--vmodule=pod*=5"],
        ] {
            assert!(check(&args(list)).is_ok(), "{list:?}");
        }
        // Other logging flags are config fields like any other.
        assert_eq!(
            refused(&["--logging-format=json"])[0].flag.field,
            "logging.format"
        );
    }

    #[test]
    fn lock_flags_are_refused() {
        for list in [
            &["--lock-file", "/x"][..],
            &["--lock-file=/x"],
            &["--exit-on-lock-contention"],
            &["-exit-on-lock-contention=true"],
            &["--lock_file=/x"],
        ] {
            assert!(
                matches!(check(&args(list)), Err(FlagError::LockFlag { .. })),
                "{list:?}"
            );
        }
    }

    #[test]
    fn config_dir_is_taken_in_both_forms() {
        for list in [
            &["--config-dir=/etc/kubernetes/kubelet.conf.d"][..],
            &["--config-dir", "/etc/kubernetes/kubelet.conf.d"],
            &["--config_dir", "/etc/kubernetes/kubelet.conf.d", "--v=2"],
        ] {
            assert_eq!(
                check(&args(list)).unwrap().config_dir,
                Some(PathBuf::from("/etc/kubernetes/kubelet.conf.d")),
                "{list:?}"
            );
        }
        assert!(matches!(
            check(&args(&["--config-dir"])),
            Err(FlagError::MissingConfigDir)
        ));
        assert!(matches!(
            check(&args(&["--config-dir="])),
            Err(FlagError::MissingConfigDir)
        ));
    }

    #[test]
    fn arguments_after_a_double_dash_are_not_flags() {
        assert!(check(&args(&["--v=2", "--", "--max-pods=5"])).is_ok());
    }

    #[test]
    fn every_config_flag_names_a_known_field() {
        for c in CONFIG_FLAGS {
            let top = c.field.split('.').next().unwrap_or_default();
            assert!(
                kp_kubelet_config::is_known_field(top),
                "{} -> {}",
                c.flag,
                c.field
            );
        }
        for a in ALLOWED_CONFIG_FLAGS {
            assert!(CONFIG_FLAGS.iter().any(|c| c.flag == a.flag), "{}", a.flag);
        }
    }

    #[test]
    fn child_gets_the_effective_config_and_no_config_dir() {
        let user = args(&[
            "--v=2",
            "--config",
            "/etc/k.yaml",
            "--config=/x",
            "--config-dir",
            "/etc/kubernetes/kubelet.conf.d",
            "--config_dir=/y",
            "--node-ip",
            "1.2.3.4",
        ]);
        assert_eq!(
            strings(&child_args(&user, Path::new("/eff.json"))),
            vec!["--v=2", "--node-ip", "1.2.3.4", "--config", "/eff.json"]
        );
        // pflag reads no flag after a `--`: ours goes before it.
        let user = args(&["--v=2", "--", "extra"]);
        assert_eq!(
            strings(&child_args(&user, Path::new("/eff.json"))),
            vec!["--v=2", "--config", "/eff.json", "--", "extra"]
        );
    }
}
