//! The `kubelet-pivot` binary: parse the command line, set up logging, and
//! hand over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

mod cli;
mod completion;
mod env_error;
mod envfile;
mod manpage;
mod plugin_complete;
mod stdout;

use std::io::Write;

use cli::{Cli, Command, CommonArgs, OutputFormat, WatchModeArg};
use kp_node::config::lifecycle::LocalConfig;
use kp_node::config::operator;
use kp_node::kubelet::child::KubeletCommand;
use kp_node::kubelet::flags;
use kp_node::observe::preflight::{self, EXIT_NEEDS_ROOT};
use kp_node::observe::status::{self, EXIT_NO_HOLDER};
use kp_node::pivot::lock;
use kp_node::pivot::role::Rank;
use kp_node::pivot::state::StateDir;
use kp_node::signals::{self, TerminateFlag};
use kp_node::supervisor::{self, Options};

/// Exit code for a configuration or usage error found before start.
const EXIT_USAGE: u8 = 2;
/// Exit code for a runtime failure.
const EXIT_FAILURE: u8 = 1;
/// Exit code of a supervisor given another lock file than the node's (or,
/// self-hosted, missing the host's paths).
const EXIT_LOCK_MISMATCH: u8 = 4;
const _: () = assert!(EXIT_LOCK_MISMATCH as i32 == supervisor::EXIT_LOCK_MISMATCH);

/// One line on stderr and the exit code; nothing, and exit 0, once stdout's
/// reader has gone (the error is then that closed pipe or what followed it).
fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    if stdout::closed() {
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "{}: error: {}",
        program_name(),
        env_error::annotate(msg.to_string())
    );
    ExitCode::from(code)
}

/// What stops a supervisor before it starts: one clear line, nothing left behind.
#[derive(Debug, thiserror::Error)]
enum UsageError {
    #[error("missing kubelet command after `--`")]
    NoKubelet,
    #[error(transparent)]
    KubeletFlags(#[from] flags::FlagError),
    #[error(transparent)]
    KubeletCommand(#[from] kp_node::kubelet::child::ChildError),
    #[error(transparent)]
    LockFile(#[from] lock::LockError),
    #[error(transparent)]
    LocalConfig(#[from] kp_node::config::lifecycle::LocalConfigError),
}

/// Validates everything that can be checked before start, so a typo gives
/// one clear line and nothing is left behind. Also returns what to warn
/// about once logging is set up (the kubelet version not told or not
/// modelled).
fn options(
    rank: Rank,
    common: CommonArgs,
    terminate: TerminateFlag,
) -> Result<(Options, TargetNotes), UsageError> {
    let mut kubelet = common.kubelet.into_iter();
    let program = PathBuf::from(kubelet.next().ok_or(UsageError::NoKubelet)?);
    let kubelet: Vec<_> = kubelet.collect();
    let kubelet_flags = flags::check(&kubelet)?;
    let kubelet = KubeletCommand::resolve(&program, kubelet)?;
    lock::check_path(&common.paths.lock_file)?;
    let state_dir = common.paths.state_dir();
    let (target, notes) = validation_target(common.kubelet_version, &kubelet.program, &state_dir);
    let local = LocalConfig::load_for(common.init_config.as_deref(), target).and_then(|local| {
        local.with_config_dir(
            kubelet_flags.config_dir.as_deref(),
            &common.paths.dynamic_config_dir,
        )
    })?;
    Ok((
        Options {
            state_dir,
            kubeconfig: common.kubeconfig,
            node_name: kp_node::cluster::api::node_name(common.node_name),
            store_dir: common.paths.dynamic_config_dir,
            local,
            rank,
            lock_path: common.paths.lock_file,
            stop_timeout: common.stop_timeout,
            exit_on_yield: common.exit_on_yield,
            yield_on_any_open: common.yield_on_any_open,
            force_poll: common.watch_mode == WatchModeArg::Poll,
            kubelet,
            metrics_address: common.metrics_address,
            disruption: kp_node::supervisor::DisruptionOptions {
                policy: kp_kubelet_config::disruption::Policy::defaults()
                    .with(&common.disruption_action),
                drain_timeout: common.drain_timeout,
                drain_retry: common.drain_retry,
                kubelet_root_dir: common.kubelet_root_dir,
            },
            terminate,
        },
        notes,
    ))
}

/// What to log about the kubelet configs are validated for, once logging is
/// set up.
struct TargetNotes {
    /// Which version and model, from where; the host facts.
    chosen: String,
    /// The version not told or not modelled, a cache not usable.
    warnings: Vec<String>,
}

/// The kubelet every config is validated for: its version's feature-gate
/// model (`--kubelet-version`, or the binary's own answer, cached in the
/// state directory when that can be trusted) and the host's cgroup facts.
/// Blocking: runs before the async runtime. Returns the lines to log: what
/// was chosen, and the warnings.
fn validation_target(
    flag: Option<kp_kubelet_config::gates::KubeletVersion>,
    kubelet: &std::path::Path,
    state_dir: &std::path::Path,
) -> (kp_kubelet_config::ValidationTarget, TargetNotes) {
    use kp_node::kubelet::{host, version};
    // The cache only where the supervisor made the state directory before
    // (nothing is created for a start that may still be refused).
    let cache_dir = kp_node::safefs::trust::verify_dir(state_dir, "state directory")
        .ok()
        .map(|_| state_dir);
    let detected = version::detect(flag, kubelet, cache_dir, version::VERSION_TIMEOUT);
    let (model, warnings) = detected.model();
    let host = host::probe(std::path::Path::new(host::CGROUP_ROOT));
    let told = match (detected.version, detected.source) {
        (Some(v), version::VersionSource::Flag) => format!("kubelet {v} (--kubelet-version)"),
        (Some(v), version::VersionSource::Cache) => {
            format!("kubelet {v} (cached answer of {})", kubelet.display())
        }
        (Some(v), _) => format!("kubelet {v} ({} --version)", kubelet.display()),
        (None, _) => "a kubelet of unknown version".to_string(),
    };
    let cgroup = match &host.cgroup {
        Some((_, how)) => how.clone(),
        None => "cgroup version unknown".to_string(),
    };
    let chosen = format!(
        "validating configs for {told}: the 1.{} feature-gate model ({} gates); {cgroup}",
        model.minor(),
        model.len()
    );
    (
        kp_kubelet_config::ValidationTarget::new(model, host),
        TargetNotes { chosen, warnings },
    )
}

fn supervise(rank: Rank, common: CommonArgs, early: Option<TerminateFlag>) -> ExitCode {
    let log_format = common.log_format;
    // Installed in `main` already, unless the subcommand was not the first
    // argument (then from here on).
    let terminate = match early.map_or_else(signals::install_early, Ok) {
        Ok(flag) => flag,
        Err(err) => {
            return fail(
                EXIT_FAILURE,
                format!("cannot install signal handlers: {err}"),
            )
        }
    };
    let (opts, notes) = match options(rank, common, terminate) {
        Ok(o) => o,
        Err(msg) => return fail(EXIT_USAGE, msg),
    };
    kp_runtime::logging::init(log_format);
    tracing::info!("{}", notes.chosen);
    for warning in notes.warnings {
        tracing::warn!("{warning}");
    }
    // Before the runtime starts a thread: they all inherit it.
    match kp_node::latency::request_short_slices() {
        Ok(kp_node::latency::Slices::Short) => tracing::debug!("scheduler slices: short"),
        Ok(kp_node::latency::Slices::OtherPolicy) => {
            tracing::debug!("scheduler slices: left alone (not SCHED_OTHER)")
        }
        Err(err) => {
            tracing::info!(%err, "the kernel refused a short scheduler slice; the supervisor runs with the default one")
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(err) => {
            return fail(
                EXIT_FAILURE,
                format!("cannot start the async runtime: {err}"),
            )
        }
    };
    let result = runtime.block_on(supervisor::run(opts));
    // A blocking task still running (a store read, a parse) must not hold
    // up the exit: the kubelet is already stopped and the lock released, and
    // every store write is atomic.
    runtime.shutdown_background();
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(EXIT_FAILURE)),
        // An untrusted state directory is bad input found before start.
        Err(err @ supervisor::SupervisorError::State(_)) => fail(EXIT_USAGE, err),
        // Another lock file than the node's, or the host's paths missing in
        // a pod: a refusal of its own (docs/reference.md, "Exit codes").
        Err(
            err @ (supervisor::SupervisorError::HostPaths(_)
            | supervisor::SupervisorError::Lock(lock::LockError::NoDir { .. })),
        ) => fail(EXIT_LOCK_MISMATCH, err),
        Err(err) => fail(EXIT_FAILURE, err),
    }
}

fn main() -> ExitCode {
    // Linked as `kubectl_complete-pivot`: kubectl asks for `kubectl pivot <TAB>`.
    if plugin_complete::invoked_as_completer(std::env::args_os().next().as_deref()) {
        let args: Vec<String> = std::env::args_os()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let answer = plugin_complete::answer(&args);
        return stdout::finish(match stdout::stdout().write_all(answer.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => fail(EXIT_FAILURE, format!("cannot write completions: {err}")),
        });
    }
    // First of all, for a supervisor: a SIGTERM from the first instant on is
    // remembered, so a supervisor asked to stop while it starts exits 0
    // without a kubelet. The other commands keep the default actions.
    let early = if signals::is_supervisor_command(std::env::args_os().nth(1).as_deref()) {
        match signals::install_early() {
            Ok(flag) => Some(flag),
            Err(err) => {
                return fail(
                    EXIT_FAILURE,
                    format!("cannot install signal handlers: {err}"),
                )
            }
        }
    } else {
        None
    };
    // The operator commands' defaults: the node's settings file.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let settings = match envfile::for_command_line(argv.get(1..).unwrap_or_default()) {
        Ok(s) => s,
        Err(envfile::Unusable::Refused(refusal)) => return refuse(refusal),
        Err(envfile::Unusable::Bad(err)) => return fail(EXIT_USAGE, err),
    };
    let cli = parse_cli(&settings, &argv);
    match cli.command {
        Command::Bootstrap(a) => supervise(Rank::BOOTSTRAP, a.common, early),
        Command::SelfHosted(a) => supervise(Rank::self_hosted(a.generation), a.common, early),
        other => stdout::finish(other_command(other, &settings)),
    }
}

/// Parses the command line; installed as `kubectl-pivot` (a kubectl plugin), the same
/// commands answer to `kubectl pivot ...`. A bad value from a `KUBELET_PIVOT_*` variable
/// is reported under the variable's name ([`env_error`]); exit 2 as clap's own refusals.
fn parse_cli(settings: &envfile::NodeSettings, args: &[std::ffi::OsString]) -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let mut command = settings.apply(Cli::command());
    if invoked_as_plugin() {
        command = command.bin_name("kubectl pivot").name("kubectl-pivot");
    }
    let matches = match command.try_get_matches_from_mut(args) {
        Ok(m) => m,
        Err(err) => match env_error::rename(&err, &command, args) {
            Some(msg) => clap::Error::raw(err.kind(), format!("{msg}\n"))
                .with_cmd(&command)
                .exit(),
            None => err.exit(),
        },
    };
    env_error::remember(&command, &matches);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Whether this process runs as the kubectl plugin (argv\[0\]'s file name `kubectl-pivot`).
fn invoked_as_plugin() -> bool {
    std::env::args_os().next().is_some_and(|argv0| {
        std::path::Path::new(&argv0).file_name() == Some("kubectl-pivot".as_ref())
    })
}

/// How errors are prefixed: as the command was typed, `kubectl pivot` for the plugin.
fn program_name() -> &'static str {
    if invoked_as_plugin() {
        "kubectl pivot"
    } else {
        "kubelet-pivot"
    }
}

/// `rollout ...` and `rollout-controller` on a runtime of their own.
fn cluster_command(command: Command) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            return fail(
                EXIT_FAILURE,
                format!("cannot start the async runtime: {err}"),
            )
        }
    };
    let result = runtime.block_on(async move {
        match command {
            Command::Rollout(a) => kp_rollout::cli::run(a, &mut stdout::stdout())
                .await
                .map_err(|e| e.to_string()),
            Command::RolloutController(a) => {
                kp_runtime::logging::init(a.log_format);
                let client = kp_rollout::cli::client(
                    &a.cluster,
                    kp_runtime::agent::Component::RolloutController,
                )
                .await
                .map_err(|e| e.to_string())?;
                let identity = a.identity.clone().unwrap_or_else(|| {
                    let host = nix::unistd::gethostname()
                        .map(|h| h.to_string_lossy().into_owned())
                        .unwrap_or_else(|_| "controller".into());
                    format!("{host}-{}", std::process::id())
                });
                let opts = kp_rollout::controller::ControllerOptions {
                    namespace: a.namespace,
                    lease_name: a.lease_name,
                    identity,
                    timings: kp_rollout::lease::LeaseTimings {
                        lease_duration: a.lease_duration,
                        renew_deadline: a.renew_deadline,
                        retry_period: a.retry_period,
                    },
                    stop_configmap: a.stop_configmap,
                    debounce: a.debounce,
                    metrics_address: a.metrics_address,
                };
                kp_rollout::controller::run(client, opts)
                    .await
                    .map(|()| 0)
                    .map_err(|e| e.to_string())
            }
            _ => Err("internal error: not a cluster command".to_string()),
        }
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => fail(EXIT_FAILURE, err),
    }
}

/// The commands that are not supervisors.
fn other_command(command: Command, settings: &envfile::NodeSettings) -> ExitCode {
    match command {
        Command::Bootstrap(_) | Command::SelfHosted(_) => fail(
            EXIT_FAILURE,
            "internal error: supervisor command dispatched as a tool",
        ),
        command @ (Command::Rollout(_) | Command::RolloutController(_)) => cluster_command(command),
        Command::Checkpoint(a) => checkpoint(a, settings),
        Command::Config(cli::ConfigArgs {
            action: cli::ConfigAction::Check(a),
        }) => match kp_rollout::cli::configcheck::run(&a, &mut stdout::stdout()) {
            Ok(code) => ExitCode::from(code),
            Err(err) => fail(kp_rollout::cli::configcheck::EXIT_USAGE, err),
        },
        Command::Completions { shell } => {
            let written = crate::completion::script(shell)
                .map_err(|e| e.to_string())
                .and_then(|s| stdout::stdout().write_all(&s).map_err(|e| e.to_string()));
            match written {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => fail(
                    EXIT_FAILURE,
                    format!("cannot write the completion script: {err}"),
                ),
            }
        }
        Command::Man(a) => {
            let written = match a.out_dir {
                Some(dir) => crate::manpage::write_all(&dir).and_then(|files| {
                    let mut out = stdout::stdout();
                    files
                        .iter()
                        .try_for_each(|f| writeln!(out, "{}", f.display()))
                }),
                None => {
                    let mut page = Vec::new();
                    crate::manpage::render_main(&mut page)
                        .and_then(|()| stdout::stdout().write_all(&page))
                }
            };
            match written {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => fail(EXIT_FAILURE, format!("cannot write the man page: {err}")),
            }
        }
        Command::Status(a) => status(&a),
    }
}

/// A refusal of an operator command before it starts: exit 2 for a path
/// that does not exist, its own code when it needs root.
fn refuse(refusal: preflight::Refusal) -> ExitCode {
    let code = if refusal.needs_root() {
        EXIT_NEEDS_ROOT as u8
    } else {
        EXIT_USAGE
    };
    fail(code, refusal)
}

/// `kubelet-pivot status`.
fn status(a: &cli::StatusArgs) -> ExitCode {
    let state_dir = a.paths.state_dir();
    if let Err(refusal) =
        preflight::for_status(&a.paths.lock_file, &state_dir, &a.paths.dynamic_config_dir)
    {
        return refuse(refusal);
    }
    let state = StateDir::at(&state_dir);
    let report = status::report(&a.paths.lock_file, &state, &a.paths.dynamic_config_dir);
    let printed = match a.output {
        OutputFormat::Json => serde_json::to_string_pretty(&report)
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(stdout::stdout(), "{s}")),
        OutputFormat::Table => status::write_table(&report, &mut stdout::stdout()),
    };
    if let Err(err) = printed {
        return fail(EXIT_FAILURE, format!("cannot print status: {err}"));
    }
    if report.has_live_holder() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_NO_HOLDER as u8)
    }
}

/// `kubelet-pivot checkpoint ...`: refuses a store that does not exist; an
/// assignment to a store no supervisor uses is made, with a warning (a
/// supervisor may start later).
fn checkpoint(a: cli::CheckpointArgs, settings: &envfile::NodeSettings) -> ExitCode {
    let store = a.dynamic_config_dir;
    if let Err(refusal) = preflight::for_checkpoint(&store) {
        return refuse(refusal);
    }
    let warnings = match a.action {
        cli::CheckpointAction::Assign { .. } => unused_store_warnings(&store, settings),
        _ => Vec::new(),
    };
    match operator::run(&store, a.action.into(), &mut stdout::stdout()) {
        Ok(()) => {
            for warning in warnings {
                eprintln!("{}: warning: {warning}", program_name());
            }
            ExitCode::SUCCESS
        }
        Err(err) => fail(EXIT_FAILURE, err),
    }
}

/// Why `store` may be read by no supervisor: none has started a kubelet
/// with it, or it is not the node's store.
fn unused_store_warnings(store: &std::path::Path, settings: &envfile::NodeSettings) -> Vec<String> {
    preflight::unused_store(store)
        .into_iter()
        .chain(settings.not_the_nodes_store(store))
        .collect()
}
