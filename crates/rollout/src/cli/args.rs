//! Flags of `kubelet-pivot rollout ...` (also `kubectl pivot rollout ...`) and of
//! `kubelet-pivot rollout-controller`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use super::error::CountError;
use kp_runtime::logging::LogFormat;

/// Where the API server is: the usual kubeconfig rules.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

impl Output {
    /// Writes `value` as kubectl's `-o json` (indented by two spaces) or `-o yaml`
    /// prints it, ending with a newline. The table is each command's own: asked for
    /// it, this writes JSON.
    pub fn write_structured(
        self,
        out: &mut impl std::io::Write,
        value: &impl serde::Serialize,
    ) -> std::io::Result<()> {
        match self {
            Output::Yaml => {
                let text = serde_yaml_ng::to_string(value).map_err(std::io::Error::other)?;
                write!(out, "{text}")
            }
            Output::Json | Output::Table => {
                let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
                writeln!(out, "{text}")
            }
        }
    }
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Output format [default: table].
    #[arg(short = 'o', long = "output", global = true, value_enum)]
    pub output: Option<Output>,
    #[command(subcommand)]
    pub action: RolloutAction,
}

#[derive(Debug, Subcommand)]
pub enum RolloutAction {
    /// Create a rollout, or start a new revision of it with another config.
    Start(Box<StartArgs>),
    /// Show a rollout's progress. Exit 3 when it paused because nodes failed, completed with failed nodes, or its spec is invalid; 4 when --watch --timeout passed.
    Status {
        /// The rollout's name (a KubeletConfigRollout; cluster-scoped).
        name: String,
        /// Follow it live until it completes, is undone or pauses.
        #[arg(short = 'w', long)]
        watch: bool,
        /// With --watch: give up after this long (e.g. 10m), exit 4.
        #[arg(long, requires = "watch", value_parser = duration, value_name = "DURATION")]
        timeout: Option<std::time::Duration>,
    },
    /// Stop changing nodes (nodes already changed are still watched).
    Pause {
        /// The rollout's name (a KubeletConfigRollout; cluster-scoped).
        name: String,
    },
    /// Go on after a pause; failures so far are acknowledged and no longer count toward maxFailures.
    Resume {
        /// The rollout's name (a KubeletConfigRollout; cluster-scoped).
        name: String,
    },
    /// Point every node the current revision changed back at the config it had before.
    Undo {
        /// The rollout's name (a KubeletConfigRollout; cluster-scoped).
        name: String,
    },
    /// List the rollout's revisions.
    History {
        /// The rollout's name (a KubeletConfigRollout; cluster-scoped).
        name: String,
    },
    /// The global stop switch: `on` halts every rollout at once, `off` lets them go on.
    GlobalStop {
        /// `on` or `off`; `status` prints whether it is on.
        #[arg(value_enum)]
        switch: Switch,
        /// The controller's namespace (where the switch ConfigMap lives).
        #[arg(long, default_value = super::super::controller_defaults::NAMESPACE)]
        namespace: String,
    },
    /// Print the CustomResourceDefinition (YAML) generated from the types (no cluster: it takes no --kubeconfig, --context or -o).
    Crd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
    Status,
}

#[derive(Debug, Args)]
pub struct StartArgs {
    /// The rollout's name.
    pub name: String,
    /// The config: NAMESPACE/NAME[:KEY] of a ConfigMap.
    #[arg(long)]
    pub config: String,
    /// Target nodes by label, as `kubectl get nodes -l` takes it: `pool=a`, `pool!=a`, `zone in (z1,z2)`, `zone notin (z3)`, `gpu`, `!spot`, comma-separated, all must hold (default: every node). On an existing rollout it replaces the old selector.
    #[arg(long, short = 'l', value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Canary nodes, rolled first (0: none).
    #[arg(long, allow_negative_numbers = true, value_parser = count)]
    pub canary: Option<u32>,
    /// Nodes per batch: a count or a percentage like `10%`.
    #[arg(long, allow_hyphen_values = true)]
    pub batch: Option<String>,
    /// Nodes per topology domain that may be unavailable at once: a count or a percentage.
    #[arg(long, allow_hyphen_values = true)]
    pub max_unavailable: Option<String>,
    /// The node label that defines the domains.
    #[arg(long)]
    pub topology_key: Option<String>,
    /// Wait after a healthy batch, e.g. `10m`.
    #[arg(long, value_name = "DURATION")]
    pub soak: Option<String>,
    /// Failed nodes tolerated after the canary before the rollout pauses itself.
    #[arg(long, allow_negative_numbers = true, value_parser = count)]
    pub max_failures: Option<u32>,
    /// Bound on the config turning active with KubeletConfigOK=True, e.g. `5m`.
    #[arg(long, value_name = "DURATION")]
    pub config_active_timeout: Option<String>,
    /// Bound on the Node turning Ready, e.g. `5m`.
    #[arg(long, value_name = "DURATION")]
    pub node_ready_timeout: Option<String>,
    /// How long a node must run the config without falling back before it counts as done
    /// [default: the config's own configTrialDuration, 10m when it sets none].
    #[arg(long, value_name = "DURATION")]
    pub no_fallback_for: Option<String>,
    /// Do not wait for the node's pods to be Ready again.
    #[arg(long)]
    pub no_pods_gate: bool,
    /// Bound on the node's pods turning Ready.
    #[arg(long)]
    pub pods_ready_timeout: Option<String>,
    /// A maintenance window (UTC): `[DAYS ]HH:MM DURATION`, e.g. `Sat,Sun 22:00 4h`. Repeatable.
    #[arg(long = "window", value_name = "WINDOW")]
    pub windows: Vec<String>,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
    /// Start even though the ConfigMap does not exist yet (the rollout waits for it), its
    /// payload does not validate (the canary will refuse it), or no node matches the
    /// selector yet (the rollout takes nodes as they come to match); each is a warning.
    #[arg(long)]
    pub force: bool,
    /// Check, then print per node the change class and what its supervisor would do
    /// (restart, drain, hold), from the config the node reports active; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `kubelet-pivot rollout-controller`.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Namespace of the leader Lease and of the global stop switch.
    #[arg(long, env = "KUBELET_PIVOT_NAMESPACE", default_value = super::super::controller_defaults::NAMESPACE)]
    pub namespace: String,
    /// This replica's identity in the Lease (default: $POD_NAME, else HOSTNAME-PID).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// The leader Lease's name.
    #[arg(long, default_value = super::super::controller_defaults::LEASE_NAME)]
    pub lease_name: String,
    /// How long a Lease not renewed keeps other replicas waiting.
    #[arg(long, default_value = "15s", value_parser = duration, value_name = "DURATION")]
    pub lease_duration: Duration,
    /// The leader stops acting when it could not renew within this long.
    #[arg(long, default_value = "10s", value_parser = duration, value_name = "DURATION")]
    pub renew_deadline: Duration,
    /// How often the leader renews and candidates try.
    #[arg(long, default_value = "2s", value_parser = duration, value_name = "DURATION")]
    pub retry_period: Duration,
    /// Name of the ConfigMap (in --namespace) whose existence halts every rollout.
    #[arg(long, default_value = super::super::controller_defaults::STOP_CONFIGMAP)]
    pub stop_configmap: String,
    /// Coalesce changes for this long before reconciling.
    #[arg(long, default_value = "200ms", value_parser = duration, value_name = "DURATION")]
    pub debounce: Duration,
    /// Serve Prometheus metrics at http://ADDRESS/metrics, and the probes /healthz and /readyz, on every replica: IP:PORT, localhost:PORT or :PORT for every interface (e.g. :9642). Off by default.
    #[arg(long, env = "KUBELET_PIVOT_METRICS_ADDRESS", value_name = "ADDRESS", value_parser = listen_address)]
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Log format.
    #[arg(long, env = "KUBELET_PIVOT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
}

/// A duration flag's value, written as the docs write them: `30s`, `10m`, `1m30s`,
/// `500ms`. A bare number is refused with those examples (not humantime's `5sec`).
pub fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| match err {
        humantime::DurationError::UnknownUnit { unit, value, .. } if unit.is_empty() => {
            format!("a duration needs a unit, like {value}s (30s, 10m, 1m30s, 500ms)")
        }
        err => format!("{err}; write a duration with its unit, as 30s, 10m, 1m30s or 500ms"),
    })
}

/// A listen address for the metrics server: `IP:PORT`, `[IPv6]:PORT`, `localhost:PORT`
/// (the IPv4 loopback, as the kubelet's own `localhost` defaults bind) or `:PORT` (every
/// interface, as Go writes it). Other host names are refused, not resolved: a daemon
/// starting at boot may have no DNS yet, and a name that resolves elsewhere later would
/// move the port without a word.
pub fn listen_address(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "{text:?} has no port; write HOST:PORT, as 127.0.0.1:9641, localhost:9641, [::1]:9641 or :9641"
        ));
    };
    let port: u16 = port.parse().map_err(|_| {
        format!("{port:?} is not a port (0 to 65535); write HOST:PORT, as 127.0.0.1:9641")
    })?;
    let ip = match host {
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        h if h.eq_ignore_ascii_case("localhost") => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h => {
            return Err(format!(
                "{h:?} is not an IP address; give one (127.0.0.1, 0.0.0.0, [::1]) or localhost: other host names are not resolved"
            ))
        }
    };
    Ok(SocketAddr::new(ip, port))
}

/// A count of nodes: a whole number from 0 to 4294967295. A negative number is taken as
/// the flag's value (not as another flag) and refused with this message.
fn count(text: &str) -> Result<u32, CountError> {
    if text.trim_start().starts_with('-') {
        return Err(CountError::Negative(text.to_string()));
    }
    text.parse::<u32>().map_err(|source| CountError::NotACount {
        text: text.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_without_its_unit_is_refused_with_the_docs_examples() {
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        let err = duration("5").expect_err("no unit");
        assert_eq!(
            err,
            "a duration needs a unit, like 5s (30s, 10m, 1m30s, 500ms)"
        );
        let err = duration("30").expect_err("no unit");
        assert!(!err.contains("sec"), "{err}");
        let err = duration("5nights").expect_err("unknown unit");
        assert!(err.contains("30s, 10m, 1m30s or 500ms"), "{err}");
    }

    #[test]
    fn listen_addresses_take_localhost_and_a_bare_port_but_resolve_no_other_name() {
        let ok = |t: &str| listen_address(t).expect(t).to_string();
        assert_eq!(ok("127.0.0.1:9641"), "127.0.0.1:9641");
        assert_eq!(ok("localhost:9641"), "127.0.0.1:9641");
        assert_eq!(ok("LOCALHOST:9641"), "127.0.0.1:9641");
        assert_eq!(ok(":9641"), "0.0.0.0:9641");
        assert_eq!(ok("[::1]:9641"), "[::1]:9641");
        for (bad, want) in [
            ("localhost", "has no port"),
            ("localhost:http", "is not a port"),
            ("localhost:70000", "is not a port"),
            (
                "metrics.example.com:9641",
                "other host names are not resolved",
            ),
        ] {
            let err = listen_address(bad).expect_err(bad);
            assert!(err.contains(want), "{bad}: {err}");
        }
    }
}
