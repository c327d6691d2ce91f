//! Command line (clap derive). Every flag also reads `KUBELET_PIVOT_<FLAG>`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use kp_node::pivot::lock::DEFAULT_LOCK_FILE;
pub use kp_runtime::logging::LogFormat;
pub const DEFAULT_DYNAMIC_CONFIG_DIR: &str = "/var/lib/kubelet-pivot";
/// What `status --help` and `checkpoint --help` say about the node's
/// settings file (read by `envfile`).
pub const SETTINGS_HELP: &str = "Defaults come from the node's settings: the KUBELET_PIVOT_* variables of /etc/default/kubelet-pivot (the systemd unit's EnvironmentFile) when it exists, so this command reads the lock file and store the node's supervisor uses; KUBELET_PIVOT_ENV_FILE names another file (empty: none). A flag wins over the environment, the environment over the file. `--help` shows the defaults in effect.";

#[derive(Debug, Parser)]
#[command(name = "kubelet-pivot", version = kp_node::version::LONG_VERSION, about = "Decides which kubelet runs on this node: the host bootstrap or a self-hosted one from a DaemonSet", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Host mode (systemd): hold the lock and run the host kubelet; hand over to a self-hosted kubelet and take back over when it dies.
    Bootstrap(BootstrapArgs),
    /// DaemonSet entrypoint: contend for the lock with a generation; newer generations win.
    SelfHosted(SelfHostedArgs),
    /// Show who holds the kubelet lock, the waiting claims and the config state. Exit 0 with a live holder, 3 without; 2 when the lock file or store does not exist, 5 when it needs root.
    #[command(after_help = SETTINGS_HELP)]
    Status(StatusArgs),
    /// Inspect and repair the dynamic-config checkpoint store (operator commands). A store that does not exist is refused (exit 2), never created.
    #[command(after_help = SETTINGS_HELP)]
    Checkpoint(CheckpointArgs),
    /// Print a shell completion script to stdout (e.g. `kubelet-pivot completions bash > /usr/share/bash-completion/completions/kubelet-pivot`). For `kubectl pivot <TAB>`, link the binary as `kubectl_complete-pivot` on PATH.
    Completions {
        /// The shell to generate completions for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout (e.g. `kubelet-pivot man | man -l -`), or write a page per subcommand with --out-dir.
    Man(ManArgs),
    /// Check a KubeletConfiguration file as a node would, and what a change to it needs (for CI pipelines; no cluster).
    Config(ConfigArgs),
    /// Staged rollouts of a kubelet config across the fleet (also `kubectl pivot rollout ...`).
    Rollout(kp_rollout::cli::RolloutArgs),
    /// Run the KubeletConfigRollout controller (a Deployment; leader election through a Lease).
    RolloutController(kp_rollout::cli::ControllerArgs),
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub action: ConfigAction,
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Validate FILE with the validator the nodes run (each error with its field); with --against, the change class and the action a node would take.
    Check(kp_rollout::cli::configcheck::CheckArgs),
}

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// Checkpoint directory for dynamic kubelet configuration.
    #[arg(long, env = "KUBELET_PIVOT_DYNAMIC_CONFIG_DIR", default_value = DEFAULT_DYNAMIC_CONFIG_DIR, global = true)]
    pub dynamic_config_dir: PathBuf,
    #[command(subcommand)]
    pub action: CheckpointAction,
}

#[derive(Debug, Subcommand)]
pub enum CheckpointAction {
    /// List checkpoints with their state (assigned, last-known-good, bad).
    List,
    /// Show one checkpoint's source, state and files.
    Show {
        /// UID of the checkpoint (see `checkpoint list`).
        uid: String,
    },
    /// Checkpoint a local payload and assign it (testing and air-gapped nodes). A file becomes key --key; a directory gives one key per regular file.
    Assign {
        /// A KubeletConfiguration file, or a directory of ConfigMap-like key files.
        path: PathBuf,
        /// Key of the KubeletConfiguration in the payload.
        #[arg(long, default_value = "kubelet")]
        key: String,
        /// Name recorded in the config source.
        #[arg(long, default_value = "local")]
        name: String,
        /// Namespace recorded in the config source.
        #[arg(long, default_value = "local")]
        namespace: String,
        /// UID (default: "local-" + the first 16 hex digits of the payload's sha256).
        #[arg(long)]
        uid: Option<String>,
        /// Resource version recorded in the config source.
        #[arg(long, default_value = "1")]
        resource_version: String,
        /// Assign even if the payload does not validate (to exercise the rollback).
        #[arg(long)]
        force: bool,
        /// The node's kubelet version (v1.35.2, 1.35), whose feature gates the payload is validated for (default: the newest modelled, 1.36). The host's cgroup version is read from /sys/fs/cgroup.
        #[arg(long, value_name = "VERSION", value_parser = kubelet_version)]
        kubelet_version: Option<kp_kubelet_config::gates::KubeletVersion>,
    },
    /// Go back to the local config (init file or defaults): clears the assignment.
    Reset,
    /// Remove a config from bad-configs so it can be tried again (the proposal's out-of-band repair); also a crash-looped --config-dir drop-in set, by its id.
    ForgetBad {
        /// UID of the bad config, or the id (at least its first 12 hex digits) of a bad --config-dir drop-in set.
        uid: String,
    },
}

impl From<CheckpointAction> for kp_node::config::operator::CheckpointCommand {
    fn from(action: CheckpointAction) -> Self {
        use kp_node::config::operator::{CheckpointCommand as Op, LocalAssign};
        match action {
            CheckpointAction::List => Op::List,
            CheckpointAction::Show { uid } => Op::Show { uid },
            CheckpointAction::Assign {
                path,
                key,
                name,
                namespace,
                uid,
                resource_version,
                force,
                kubelet_version,
            } => Op::Assign(LocalAssign {
                path,
                key,
                name,
                namespace,
                uid,
                resource_version,
                force,
                target: assign_target(kubelet_version),
            }),
            CheckpointAction::Reset => Op::Reset,
            CheckpointAction::ForgetBad { uid } => Op::ForgetBad { uid },
        }
    }
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write kubelet-pivot.1 and one page per subcommand, nested ones included (kubelet-pivot-bootstrap.1, kubelet-pivot-rollout-start.1, ...), into this directory (created if missing) instead of printing the main page.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WatchModeArg {
    /// inotify on the lock file, its directory and the claims directory (falls back to poll if unavailable).
    Inotify,
    /// Poll claims and /proc/locks every 100 ms.
    Poll,
}

/// Where the node's lock file, checkpoint store and state live: the same three flags for
/// the supervisors and `status`.
#[derive(Debug, Clone, Args)]
pub struct NodePaths {
    /// The node's kubelet lock file (flock).
    #[arg(long, env = "KUBELET_PIVOT_LOCK_FILE", default_value = DEFAULT_LOCK_FILE)]
    pub lock_file: PathBuf,
    /// Checkpoint directory for dynamic kubelet configuration, shared by all supervisors of the node (bind-mount it into the DaemonSet).
    #[arg(long, env = "KUBELET_PIVOT_DYNAMIC_CONFIG_DIR", default_value = DEFAULT_DYNAMIC_CONFIG_DIR)]
    pub dynamic_config_dir: PathBuf,
    /// State directory for the holder record and the claims (default: DYNAMIC_CONFIG_DIR/lock). It must be owned by kubelet-pivot's uid and not writable by group or others; kubelet-pivot creates it with mode 0700 and refuses to start otherwise.
    #[arg(long, env = "KUBELET_PIVOT_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

impl NodePaths {
    /// The state directory: --state-dir, else DYNAMIC_CONFIG_DIR/lock.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(|| {
            kp_node::pivot::state::StateDir::default_for(&self.dynamic_config_dir)
        })
    }
}

#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    #[command(flatten)]
    pub paths: NodePaths,
    /// Local KubeletConfiguration file (YAML or JSON) used when no remote config is assigned; validated at start (exit 2 when invalid). Default: none, the kubelet's built-in defaults.
    #[arg(long, env = "KUBELET_PIVOT_INIT_CONFIG")]
    pub init_config: Option<PathBuf>,
    /// Name of this node (default: the hostname).
    #[arg(long, env = "KUBELET_PIVOT_NODE_NAME")]
    pub node_name: Option<String>,
    /// kubeconfig for the API server (default: in-cluster config when available).
    #[arg(long, env = "KUBELET_PIVOT_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// How long the kubelet gets to exit after SIGTERM before its process group is SIGKILLed.
    #[arg(long, env = "KUBELET_PIVOT_STOP_TIMEOUT", default_value = "30s", value_parser = kp_rollout::cli::args::duration, value_name = "DURATION")]
    pub stop_timeout: Duration,
    /// Exit 0 after yielding the lock (the behaviour of the self-hosted kubelet proposal, for an init system that restarts us) instead of standing by on the same descriptor. Off by default.
    #[arg(long, env = "KUBELET_PIVOT_EXIT_ON_YIELD")]
    pub exit_on_yield: bool,
    /// Yield on any open of the lock file (the self-hosted kubelet proposal's unverified behaviour). Off by default: yield only to a verified contender blocked on the lock.
    #[arg(long, env = "KUBELET_PIVOT_YIELD_ON_ANY_OPEN")]
    pub yield_on_any_open: bool,
    /// How to notice contention (inotify falls back to poll by itself when inotify is unavailable).
    #[arg(long, env = "KUBELET_PIVOT_WATCH_MODE", value_enum, default_value_t = WatchModeArg::Inotify)]
    pub watch_mode: WatchModeArg,
    /// Serve Prometheus metrics at http://ADDRESS/metrics: IP:PORT, localhost:PORT (127.0.0.1) or :PORT for every interface (e.g. localhost:9641). Off by default. An address in use is retried every 5 s (another supervisor of the node may still have it).
    #[arg(long, env = "KUBELET_PIVOT_METRICS_ADDRESS", value_name = "ADDRESS", value_parser = kp_rollout::cli::args::listen_address)]
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Log format. Plain lines get a syslog priority prefix and no timestamp when stderr is the journal.
    #[arg(long, env = "KUBELET_PIVOT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
    /// What a config change of each class does, overriding the defaults (in-place=restart, allocatable=drain, state-bound=drain, node-replacing=hold), e.g. "allocatable=restart,node-replacing=drain". The Node annotation kubelet-pivot.io/disruption-actions overrides this per node.
    #[arg(
        long,
        env = "KUBELET_PIVOT_DISRUPTION_ACTION",
        value_name = "CLASS=ACTION,...",
        default_value = "",
        hide_default_value = true
    )]
    pub disruption_action: kp_kubelet_config::disruption::Overrides,
    /// How long a drain waits for the pods bound to the node to leave (PodDisruptionBudgets may hold them) before it gives up, uncordons and tries again later. Nothing is ever forced.
    #[arg(long, env = "KUBELET_PIVOT_DRAIN_TIMEOUT", default_value = "10m", value_parser = kp_rollout::cli::args::duration, value_name = "DURATION")]
    pub drain_timeout: Duration,
    /// First wait after a drain timed out before the next try (doubles per failed try, up to 32 times this). At least 1s: a drain refused at once (a forbidden cordon, several budgets) would otherwise be tried again in a loop.
    #[arg(long, env = "KUBELET_PIVOT_DRAIN_RETRY", default_value = "1m", value_parser = drain_retry, value_name = "DURATION")]
    pub drain_retry: Duration,
    /// The kubelet's root directory (its --root-dir), where cpu_manager_state and memory_manager_state live.
    #[arg(
        long,
        env = "KUBELET_PIVOT_KUBELET_ROOT_DIR",
        default_value = "/var/lib/kubelet"
    )]
    pub kubelet_root_dir: PathBuf,
    /// The kubelet's version (v1.35.2, 1.35): picks the feature-gate model every config is validated for. Default: the kubelet binary's own answer to --version (run once, with a timeout, and cached by the binary's identity in the state directory). A version not modelled (1.33 to 1.36) is validated against the nearest model, with a warning; so is a kubelet that does not answer.
    #[arg(long, env = "KUBELET_PIVOT_KUBELET_VERSION", value_name = "VERSION", value_parser = kubelet_version)]
    pub kubelet_version: Option<kp_kubelet_config::gates::KubeletVersion>,
    /// The kubelet command and its arguments. A --config is replaced by the effective config, whose --config-dir drop-ins kubelet-pivot merges in (the kubelet gets no --config-dir); flags that set a KubeletConfiguration field (--max-pods, --kube-reserved, ...) are refused, except -v and --vmodule.
    #[arg(last = true, required = true, value_name = "KUBELET [ARGS]")]
    pub kubelet: Vec<OsString>,
}

/// `--state-dir`, or its default inside the checkpoint directory.
/// What `checkpoint assign` validates for: the `--kubelet-version` model
/// (the nearest, with a warning on stderr, when not modelled; the newest
/// without the flag) and this host's cgroup facts.
fn assign_target(
    version: Option<kp_kubelet_config::gates::KubeletVersion>,
) -> kp_kubelet_config::ValidationTarget {
    use kp_kubelet_config::gates::GateModel;
    use kp_node::kubelet::host;
    let (model, warning) = GateModel::for_flag(version);
    if let Some(warning) = warning {
        eprintln!("{}: warning: {warning}", crate::program_name());
    }
    let facts = host::probe(std::path::Path::new(host::CGROUP_ROOT));
    kp_kubelet_config::ValidationTarget::new(model, facts)
}

/// `--kubelet-version`: v1.35.2 or 1.35.
pub fn kubelet_version(s: &str) -> Result<kp_kubelet_config::gates::KubeletVersion, String> {
    kp_node::kubelet::version::parse_flag(s)
}

/// `--drain-retry`: a duration of at least [`MIN_DRAIN_RETRY`].
fn drain_retry(s: &str) -> Result<Duration, String> {
    let d = kp_rollout::cli::args::duration(s)?;
    if d < MIN_DRAIN_RETRY {
        return Err(format!(
            "{} is too short: a drain that gave up is tried again after at least {} (a drain refused at once would otherwise loop against the API server); the default is 1m",
            humantime::format_duration(d),
            humantime::format_duration(MIN_DRAIN_RETRY)
        ));
    }
    Ok(d)
}

/// The shortest `--drain-retry`.
pub const MIN_DRAIN_RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, Args)]
pub struct BootstrapArgs {
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Args)]
pub struct SelfHostedArgs {
    /// Generation of this self-hosted kubelet (>= 1; the bootstrap is 0). Higher wins.
    #[arg(long, env = "KUBELET_PIVOT_GENERATION", value_parser = clap::value_parser!(u32).range(1..))]
    pub generation: u32,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub paths: NodePaths,
    /// Output format.
    #[arg(short = 'o', long = "output", env = "KUBELET_PIVOT_OUTPUT", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_self_hosted_with_kubelet_args() {
        let cli = Cli::try_parse_from([
            "kubelet-pivot",
            "self-hosted",
            "--generation",
            "2",
            "--stop-timeout",
            "5s",
            "--",
            "/usr/bin/kubelet",
            "--config",
            "/x",
        ])
        .unwrap();
        let Command::SelfHosted(a) = cli.command else {
            panic!("wrong subcommand")
        };
        assert_eq!(a.generation, 2);
        assert_eq!(a.common.stop_timeout, Duration::from_secs(5));
        assert_eq!(a.common.kubelet.len(), 3);
    }

    #[test]
    fn generation_zero_is_rejected() {
        assert!(Cli::try_parse_from([
            "kubelet-pivot",
            "self-hosted",
            "--generation",
            "0",
            "--",
            "k"
        ])
        .is_err());
    }
}
