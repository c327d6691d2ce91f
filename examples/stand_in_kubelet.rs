//! Stand-in kubelet for kubelet-pivot's integration tests, demo and benchmarks.
//!
//! It is an example target so `cargo install` never installs it; `cargo test` builds it to
//! `target/<profile>/examples/stand_in_kubelet`. It behaves like a kubelet as far as
//! kubelet-pivot can see (flags, lock file, signals, exit codes) and records what happened so a
//! test can prove that two kubelets never ran at the same time.
//!
//! Flags (unknown flags are ignored, `--flag=value` and `--flag value` both work):
//! - `--config FILE`: read at start; a read failure is fatal (exit 2).
//! - `--lock-file FILE`: like the real kubelet: open `O_RDWR|O_CREAT|O_CLOEXEC` mode 0600 and
//!   `flock(LOCK_EX)` blocking before the process counts as started; the fd is held for life.
//! - `--exit-on-lock-contention`: accepted and ignored.
//! - `--root-dir DIR`: the kubelet's state directory (default `/var/lib/kubelet`, the real
//!   kubelet's default). Giving it explicitly turns on the checkpoint handling below.
//!
//! The `--config` file is parsed as JSON (the supervisor writes the effective KubeletConfiguration
//! as canonical JSON) only when the checkpoint handling or healthz is on, and then only for
//! `cpuManagerPolicy` (default `none`), `memoryManagerPolicy` (default `None`),
//! `healthzBindAddress` (default `127.0.0.1`) and `healthzPort` (default 10248, 0 = off). A file
//! that is not a JSON object (YAML, garbage) means all defaults; a field of the wrong type is a
//! usage error (exit 2).
//!
//! Checkpoints (only with an explicit `--root-dir` or `STANDIN_STATE_FILES=1`, so that the other
//! tests never write into /var/lib/kubelet): after the lock file and the probe are held and
//! before `start`, like the kubelet's container manager, the stand-in restores
//! `DIR/cpu_manager_state`, then `DIR/memory_manager_state`:
//! - absent: created (`DIR` too, mode 0750), atomically, mode 0644:
//!   `{"policyName":"<cpuManagerPolicy>","defaultCpuSet":"<set>","checksum":<u64>}` (`<set>` is
//!   empty for `none`, else the online CPUs from /sys/devices/system/cpu/online, e.g. `0-3`) and
//!   `{"policyName":"<memoryManagerPolicy>","machineState":{},"checksum":<u64>}`. The checksum is
//!   an FNV-1a of the file's other fields, not the kubelet's; it is never verified.
//! - `policyName` equal to the configured policy: kept as is.
//! - `policyName` different: the start is refused as by the real kubelet: stderr gets (within a
//!   longer line) `could not restore state from checkpoint: configured policy "static" differs
//!   from state checkpoint policy "none", please drain this node and delete the CPU manager
//!   checkpoint file "/var/lib/kubelet/cpu_manager_state" before restarting Kubelet` (memory:
//!   `... checkpoint: [memorymanager] configured policy "Static" differs from state checkpoint
//!   policy "None", please drain this node and delete the memory manager checkpoint file
//!   "DIR/memory_manager_state" before restarting Kubelet`), the log gets
//!   `crash code=1 reason=cpu-manager-state|memory-manager-state`, no `start`, exit 1.
//! - not a JSON object with a string `policyName`: refused the same way, with `checkpoint is
//!   corrupted` in place of the policy sentence (without the `[memorymanager] ` prefix).
//!
//! What the stand-in does not model: the real kubelet restores the checkpoints when its
//! container manager starts, shortly *after* it is up (it logs `"Failed to start
//! ContainerManager"` and exits 1), and it validates much more (reserved CPUs/memory for the
//! static policies, the CPU set against the online CPUs, checksums).
//!
//! Environment:
//! - `STANDIN_LOG=PATH`: append one event line per event (format below).
//! - `STANDIN_OVERLAP_PROBE=PATH`: take a non-blocking exclusive flock on PATH for life; if
//!   another process holds it, report OVERLAP (stderr, log, `PATH.overlap` marker) and exit 97.
//! - `STANDIN_TERM_DELAY_MS=N`: on SIGTERM/SIGINT wait N ms before exiting 0.
//! - `STANDIN_IGNORE_TERM=1`: log SIGTERM/SIGINT with `ignored=1` and keep running.
//! - `STANDIN_CRASH_AFTER_MS=N`: exit with `STANDIN_CRASH_CODE` (default 1) N ms after start.
//!   When `STANDIN_CRASH_ON_CONFIG` is set it only sets that crash's delay (see below).
//! - `STANDIN_CRASH_ON_CONFIG=SUBSTR`: if the `--config` file contains SUBSTR, exit with
//!   `STANDIN_CRASH_CODE` (default 1) `STANDIN_CRASH_AFTER_MS` (default 50) ms after start;
//!   otherwise run normally.
//! - `STANDIN_SPAWN_GRANDCHILD=1`: fork a grandchild in the same process group that pauses until
//!   killed; it logs its own `grandchild` line.
//! - `STANDIN_DAEMONIZE_HELPER=1`: fork a helper that daemonizes the way a FUSE or mount helper
//!   does: `setsid()` (its own session and process group, so it is *not* in the kubelet's
//!   process group and a signal to that group misses it), no PDEATHSIG, and it keeps every
//!   descriptor the stand-in inherited across exec (the supervisor's lock descriptor among them)
//!   while closing the stand-in's own close-on-exec ones (`--lock-file`, probe, log), as an exec
//!   would. It logs `helper pgid=N sid=N` and sleeps until killed.
//! - `STANDIN_UNLOCK_INHERITED=1`: `STANDIN_UNLOCK_DELAY_MS` (default 0) ms after `start`,
//!   `flock(LOCK_UN)` every inherited lock descriptor and log `unlocked fd=N` for each (or
//!   `unlocked fd=none`). Inherited = an fd > 2 without close-on-exec that names a regular file;
//!   with `STANDIN_LOCK_PATH=PATH` only those whose `/proc/self/fd` link is PATH (or
//!   `PATH (deleted)`). The supervisor's locked descriptor shares its open file description with
//!   the supervisor, so this releases the supervisor's lock too.
//! - `STANDIN_STATE_FILES=1`: handle the checkpoints in `--root-dir` (see above) even when the
//!   flag is not given, i.e. in /var/lib/kubelet.
//! - `STANDIN_HEALTHZ=1`: after `start`, serve HTTP on `healthzBindAddress:healthzPort` from the
//!   config (nothing when `healthzPort` is 0), one connection at a time, each answered with
//!   `Connection: close`: `GET`/`HEAD /healthz` → `200` `ok` (`Content-Type: text/plain;
//!   charset=utf-8`), anything else → `404`. If the address cannot be bound, it logs
//!   `healthz-bind-failed addr=IP:PORT error=..` and retries every 5 s, running on (unhealthy),
//!   as the real kubelet does (`"Failed to start healthz server"`). A bind address that is not
//!   an IP exits 1 (`crash code=1 reason=healthz-bind`).
//! - `STANDIN_HEALTHZ_DELAY_MS=N`: `/healthz` answers `500` `not ready` until N ms after `start`.
//!
//! Log lines, each written with one `write()` on an `O_APPEND` fd:
//! `<event> t=<unix_ns> pid=<pid> ppid=<ppid> [key=value ...]`, events:
//! - `lock-wait lock=PATH`: the `--lock-file` is held by someone else; blocking on it.
//! - `start pgid=N ready=<unix_ns> lock=PATH|- config=PATH|- args=<space-joined args>`: written
//!   once the lock file and the probe are held; `t` is the exec time, `ready` the time the line
//!   was written (after any wait for the lock); `args` is last and runs to the end of the line.
//! - `grandchild pgid=N` (written by the grandchild: pid is the grandchild, ppid the stand-in).
//! - `helper pgid=N sid=N` (written by the daemonized helper: pid is the helper, ppid the
//!   stand-in at the time of writing).
//! - `unlocked fd=N|none` (written by the stand-in after `STANDIN_UNLOCK_INHERITED`).
//! - `healthz addr=IP:PORT` (after `start`, once the healthz listener is bound; IPv6 as
//!   `[IP]:PORT`).
//! - `term signal=sigterm|sigint from=PID [ignored=1]` (`from`: the sender, from the kernel's
//!   signal info, in this process's PID namespace; 0 for the kernel), `stop reason=sigterm|sigint`
//!   (then exit 0).
//! - `crash code=N reason=crash-after|config|error|cpu-manager-state|memory-manager-state|healthz-bind`
//!   (then exit N; the last three always with code 1).
//! - `OVERLAP holder=PID|unknown probe=PATH` (then exit 97).
//!
//! Exit codes: 0 after SIGTERM/SIGINT, the crash code, 1 on a refused start (checkpoint policy
//! mismatch, healthz bind failure), 97 on overlap, 2 on usage or I/O errors.

// `fork` is unsafe in nix; it is used for STANDIN_SPAWN_GRANDCHILD and STANDIN_DAEMONIZE_HELPER
// (SAFETY comments there).
#![allow(unsafe_code)]

use std::convert::Infallible;
use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::exit;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::SignalFd;
use nix::unistd::{getpgrp, getpid, getppid, ForkResult};

/// Exit code for usage, environment and I/O errors.
const EXIT_ERROR: i32 = 2;
/// Exit code when the overlap probe is held by another kubelet.
const EXIT_OVERLAP: i32 = 97;
/// Default exit code of a simulated crash.
const DEFAULT_CRASH_CODE: i32 = 1;
/// Delay of the config-triggered crash when `STANDIN_CRASH_AFTER_MS` is not set.
const DEFAULT_CONFIG_CRASH_DELAY: Duration = Duration::from_millis(50);
/// Suffix of the marker file created next to the overlap probe on overlap.
const OVERLAP_MARKER_SUFFIX: &str = ".overlap";
/// Exit code of a start refused the way the real kubelet refuses it (checkpoint, healthz bind).
const EXIT_REFUSED: i32 = 1;
/// The real kubelet's `--root-dir` default.
const DEFAULT_ROOT_DIR: &str = "/var/lib/kubelet";
/// Checkpoint file names in the root dir, as the kubelet's CPU and memory managers name them.
const CPU_MANAGER_STATE: &str = "cpu_manager_state";
const MEMORY_MANAGER_STATE: &str = "memory_manager_state";
/// The online CPUs, as the static CPU policy's first default CPU set.
const ONLINE_CPUS: &str = "/sys/devices/system/cpu/online";
/// KubeletConfiguration defaults of the fields the stand-in reads.
const DEFAULT_CPU_MANAGER_POLICY: &str = "none";
const DEFAULT_MEMORY_MANAGER_POLICY: &str = "None";
const DEFAULT_HEALTHZ_BIND_ADDRESS: &str = "127.0.0.1";
const DEFAULT_HEALTHZ_PORT: u16 = 10248;
/// How long a healthz connection may take to send its request head, and its maximum size.
/// Retry cadence of a healthz bind that failed (the kubelet's).
const HEALTHZ_BIND_RETRY: Duration = Duration::from_secs(5);
const HEALTHZ_READ_TIMEOUT: Duration = Duration::from_secs(2);
const HEALTHZ_MAX_REQUEST: usize = 8 * 1024;

const ENV_LOG: &str = "STANDIN_LOG";
const ENV_PROBE: &str = "STANDIN_OVERLAP_PROBE";
const ENV_TERM_DELAY: &str = "STANDIN_TERM_DELAY_MS";
const ENV_IGNORE_TERM: &str = "STANDIN_IGNORE_TERM";
const ENV_CRASH_AFTER: &str = "STANDIN_CRASH_AFTER_MS";
const ENV_CRASH_CODE: &str = "STANDIN_CRASH_CODE";
const ENV_CRASH_ON_CONFIG: &str = "STANDIN_CRASH_ON_CONFIG";
const ENV_GRANDCHILD: &str = "STANDIN_SPAWN_GRANDCHILD";
const ENV_DAEMONIZE_HELPER: &str = "STANDIN_DAEMONIZE_HELPER";
const ENV_UNLOCK_INHERITED: &str = "STANDIN_UNLOCK_INHERITED";
const ENV_UNLOCK_DELAY: &str = "STANDIN_UNLOCK_DELAY_MS";
const ENV_LOCK_PATH: &str = "STANDIN_LOCK_PATH";
const ENV_STATE_FILES: &str = "STANDIN_STATE_FILES";
const ENV_HEALTHZ: &str = "STANDIN_HEALTHZ";
const ENV_HEALTHZ_DELAY: &str = "STANDIN_HEALTHZ_DELAY_MS";

/// One line on stderr in one write(2). The stand-in shares stderr with kubelet-pivot, and
/// `eprintln!` writes a line piecewise (stderr is unbuffered), so its lines could interleave
/// with the supervisor's (a journal-stream test caught " started" on a line of its own). Not
/// used in the forked children below, which must not allocate.
macro_rules! say {
    ($($arg:tt)*) => {{
        let mut line = format!($($arg)*);
        line.push('\n');
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }};
}

fn main() {
    // First thing: the exec time, reported as `t` of the `start` event.
    let exec_ns = now_ns();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut events = Events::default();
    let code = match run(exec_ns, &args, &mut events) {
        Ok(never) => match never {},
        Err(err) => {
            say!(
                "stand-in kubelet pid {}: {err}; exiting with code {EXIT_ERROR}",
                getpid()
            );
            let code = EXIT_ERROR.to_string();
            // Best effort: the error itself may be that the log cannot be written.
            if let Err(log_err) = events.record(
                "crash",
                now_ns(),
                &[("code", code.as_str()), ("reason", "error")],
            ) {
                say!("stand-in kubelet pid {}: {log_err}", getpid());
            }
            EXIT_ERROR
        }
    };
    exit(code);
}

#[derive(Debug)]
enum Error {
    Usage(String),
    Env {
        var: &'static str,
        value: String,
        why: &'static str,
    },
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    Os {
        what: &'static str,
        source: io::Error,
    },
    Config {
        field: &'static str,
        why: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(msg) => write!(f, "invalid command line: {msg}"),
            Error::Env { var, value, why } => write!(f, "invalid {var}={value:?}: {why}"),
            Error::Io { what, path, source } => {
                write!(f, "failed to {what} {}: {source}", path.display())
            }
            Error::Os { what, source } => write!(f, "failed to {what}: {source}"),
            Error::Config { field, why } => write!(f, "invalid --config field {field}: {why}"),
        }
    }
}

/// The kubelet flags the stand-in understands.
#[derive(Debug, Default)]
struct Flags {
    config: Option<PathBuf>,
    lock_file: Option<PathBuf>,
    root_dir: Option<PathBuf>,
}

fn parse_flags(args: &[String]) -> Result<Flags, Error> {
    let mut flags = Flags::default();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        // Go's flag packages accept one or two dashes.
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        let slot = match name {
            "config" => &mut flags.config,
            "lock-file" => &mut flags.lock_file,
            "root-dir" => &mut flags.root_dir,
            // `--exit-on-lock-contention` and anything else: accepted, ignored.
            _ => continue,
        };
        let value = match inline {
            Some(value) => value,
            None => iter
                .next()
                .ok_or_else(|| Error::Usage(format!("flag --{name} needs a value")))?,
        };
        if value.is_empty() {
            return Err(Error::Usage(format!(
                "flag --{name} needs a non-empty value"
            )));
        }
        *slot = Some(PathBuf::from(value));
    }
    Ok(flags)
}

/// Behaviour switches read from `STANDIN_*`.
#[derive(Debug)]
struct Settings {
    probe: Option<PathBuf>,
    term_delay: Option<Duration>,
    ignore_term: bool,
    crash_after: Option<Duration>,
    crash_code: i32,
    crash_on_config: Option<String>,
    spawn_grandchild: bool,
    daemonize_helper: bool,
    /// `Some(delay)` with `STANDIN_UNLOCK_INHERITED=1`.
    unlock_inherited: Option<Duration>,
    lock_path: Option<PathBuf>,
    state_files: bool,
    healthz: bool,
    healthz_delay: Duration,
}

impl Settings {
    fn from_env() -> Result<Self, Error> {
        Ok(Settings {
            probe: env_path(ENV_PROBE),
            term_delay: env_millis(ENV_TERM_DELAY)?,
            ignore_term: env_bool(ENV_IGNORE_TERM)?,
            crash_after: env_millis(ENV_CRASH_AFTER)?,
            crash_code: env_string(ENV_CRASH_CODE)?
                .map(|value| match value.parse::<i32>() {
                    Ok(code) if (0..=255).contains(&code) => Ok(code),
                    _ => Err(Error::Env {
                        var: ENV_CRASH_CODE,
                        value,
                        why: "expected an exit code 0-255",
                    }),
                })
                .transpose()?
                .unwrap_or(DEFAULT_CRASH_CODE),
            crash_on_config: env_string(ENV_CRASH_ON_CONFIG)?,
            spawn_grandchild: env_bool(ENV_GRANDCHILD)?,
            daemonize_helper: env_bool(ENV_DAEMONIZE_HELPER)?,
            unlock_inherited: if env_bool(ENV_UNLOCK_INHERITED)? {
                Some(env_millis(ENV_UNLOCK_DELAY)?.unwrap_or(Duration::ZERO))
            } else {
                None
            },
            lock_path: env_path(ENV_LOCK_PATH),
            state_files: env_bool(ENV_STATE_FILES)?,
            healthz: env_bool(ENV_HEALTHZ)?,
            healthz_delay: env_millis(ENV_HEALTHZ_DELAY)?.unwrap_or(Duration::ZERO),
        })
    }
}

/// A non-empty environment variable as a path.
fn env_path(var: &'static str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

/// A non-empty, UTF-8 environment variable.
fn env_string(var: &'static str) -> Result<Option<String>, Error> {
    match std::env::var_os(var) {
        None => Ok(None),
        Some(value) if value.is_empty() => Ok(None),
        Some(value) => value.into_string().map(Some).map_err(|value| Error::Env {
            var,
            value: value.to_string_lossy().into_owned(),
            why: "not valid UTF-8",
        }),
    }
}

fn env_millis(var: &'static str) -> Result<Option<Duration>, Error> {
    env_string(var)?
        .map(|value| {
            value
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| Error::Env {
                    var,
                    value,
                    why: "expected a whole number of milliseconds",
                })
        })
        .transpose()
}

fn env_bool(var: &'static str) -> Result<bool, Error> {
    match env_string(var)?.as_deref() {
        None | Some("0") | Some("false") => Ok(false),
        Some("1") | Some("true") => Ok(true),
        Some(other) => Err(Error::Env {
            var,
            value: other.to_owned(),
            why: "expected 1 or 0",
        }),
    }
}

/// The optional event log (`STANDIN_LOG`); recording is a no-op without one.
#[derive(Default)]
struct Events {
    file: Option<(PathBuf, File)>,
}

impl Events {
    fn open(path: &Path) -> Result<Self, Error> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|source| Error::Io {
                what: "open the event log",
                path: path.to_owned(),
                source,
            })?;
        Ok(Events {
            file: Some((path.to_owned(), file)),
        })
    }

    fn raw_fd(&self) -> Option<RawFd> {
        self.file.as_ref().map(|(_, file)| file.as_raw_fd())
    }

    /// A second handle on the same log (for another thread).
    fn try_clone(&self) -> Result<Self, Error> {
        let Some((path, file)) = &self.file else {
            return Ok(Events::default());
        };
        let file = file.try_clone().map_err(|source| Error::Io {
            what: "duplicate the event log descriptor of",
            path: path.clone(),
            source,
        })?;
        Ok(Events {
            file: Some((path.clone(), file)),
        })
    }

    /// Appends `<event> t=.. pid=.. ppid=.. k=v..` with a single `write()`, so lines from
    /// concurrent writers never interleave.
    fn record(&self, event: &str, t_ns: u128, extra: &[(&str, &str)]) -> Result<(), Error> {
        let Some((path, file)) = &self.file else {
            return Ok(());
        };
        let line = event_line(event, t_ns, extra);
        let io_err = |source| Error::Io {
            what: "append to the event log",
            path: path.clone(),
            source,
        };
        let mut writer = file;
        let written = writer.write(line.as_bytes()).map_err(io_err)?;
        if written != line.len() {
            return Err(io_err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {written} of {} bytes", line.len()),
            )));
        }
        Ok(())
    }
}

fn event_line(event: &str, t_ns: u128, extra: &[(&str, &str)]) -> String {
    let mut line = format!("{event} t={t_ns} pid={} ppid={}", getpid(), getppid());
    for (key, value) in extra {
        line.push(' ');
        line.push_str(key);
        line.push('=');
        line.push_str(value);
    }
    line.push('\n');
    line
}

fn now_ns() -> u128 {
    // The realtime clock is before the epoch only on a badly broken host; report 0 then.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos())
}

fn path_field(path: Option<&Path>) -> String {
    path.map_or_else(|| "-".to_owned(), |path| path.display().to_string())
}

/// Runs the stand-in; exits the process itself so the lock file and probe are held until the end.
fn run(exec_ns: u128, args: &[String], events: &mut Events) -> Result<Infallible, Error> {
    // The log first, so later usage errors are recorded too.
    if let Some(path) = env_path(ENV_LOG) {
        *events = Events::open(&path)?;
    }
    let flags = parse_flags(args)?;
    let settings = Settings::from_env()?;

    let config = flags
        .config
        .as_deref()
        .map(|path| {
            std::fs::read_to_string(path).map_err(|source| Error::Io {
                what: "read --config",
                path: path.to_owned(),
                source,
            })
        })
        .transpose()?;

    let lock_file = flags
        .lock_file
        .as_deref()
        .map(|path| take_lock_file(path, events))
        .transpose()?;
    let probe = settings
        .probe
        .as_deref()
        .map(|path| take_probe(path, events))
        .transpose()?;

    // Parsed only when used, so that the other tests' configs never matter here.
    let state_files = settings.state_files || flags.root_dir.is_some();
    let kubelet_config = if state_files || settings.healthz {
        Some(KubeletConfig::parse(config.as_deref())?)
    } else {
        None
    };
    if let Some(kubelet_config) = kubelet_config.as_ref().filter(|_| state_files) {
        let root_dir = flags
            .root_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT_DIR));
        // Before the forks below, so that a refused start leaves no grandchild or helper.
        restore_checkpoints(&root_dir, kubelet_config, events)?;
    }

    if settings.spawn_grandchild {
        let mut inherited: Vec<RawFd> = Vec::new();
        inherited.extend(lock_file.as_ref().map(File::as_raw_fd));
        inherited.extend(probe.as_ref().map(File::as_raw_fd));
        inherited.extend(events.raw_fd());
        // Must stay before `signal_channel`, which starts a thread.
        spawn_grandchild(events, &inherited)?;
    }
    if settings.daemonize_helper {
        // Must stay before `signal_channel`, which starts a thread.
        spawn_daemon_helper(events)?;
    }

    let signals = signal_channel()?;
    let pgid = getpgrp().to_string();
    let lock_field = path_field(flags.lock_file.as_deref());
    let config_field = path_field(flags.config.as_deref());
    let joined_args = args.join(" ");
    let ready = now_ns().to_string();
    events.record(
        "start",
        exec_ns,
        &[
            ("pgid", pgid.as_str()),
            ("ready", ready.as_str()),
            ("lock", lock_field.as_str()),
            ("config", config_field.as_str()),
            ("args", joined_args.as_str()),
        ],
    )?;
    let started = Instant::now();
    say!("stand-in kubelet pid {} started", getpid());
    if let Some(kubelet_config) = kubelet_config.as_ref().filter(|_| settings.healthz) {
        start_healthz(kubelet_config, started + settings.healthz_delay, events)?;
    }
    if let Some(delay) = settings.unlock_inherited {
        start_unlocker(events.try_clone()?, delay, settings.lock_path.clone())?;
    }

    let crash = plan_crash(&settings, config.as_deref(), started);
    let code = serve(&settings, events, &signals, crash)?;
    // `lock_file` and `probe` are still open here: their flocks end with the process.
    exit(code);
}

/// Refuses to run the way the real kubelet does (message on stderr, exit 1), logging
/// `crash code=1 reason=<reason>`.
fn refuse(events: &Events, reason: &str, message: &str) -> ! {
    say!(
        "stand-in kubelet pid {}: {message}; exiting with code {EXIT_REFUSED}",
        getpid()
    );
    let code = EXIT_REFUSED.to_string();
    if let Err(err) = events.record(
        "crash",
        now_ns(),
        &[("code", code.as_str()), ("reason", reason)],
    ) {
        say!("stand-in kubelet pid {}: {err}", getpid());
    }
    exit(EXIT_REFUSED);
}

/// The fields of the `--config` KubeletConfiguration the stand-in acts on.
#[derive(Debug)]
struct KubeletConfig {
    cpu_manager_policy: String,
    memory_manager_policy: String,
    healthz_bind_address: String,
    /// 0: no healthz server.
    healthz_port: u16,
}

impl KubeletConfig {
    /// The fields from a JSON object; defaults for absent fields and when `text` is not a JSON
    /// object (or there is no config). A present field of the wrong type is an error.
    fn parse(text: Option<&str>) -> Result<Self, Error> {
        use serde_json::Value;
        let value = text.and_then(|text| serde_json::from_str::<Value>(text).ok());
        let fields = value.as_ref().and_then(Value::as_object);
        let field = |name: &str| fields.and_then(|fields| fields.get(name));
        // Empty strings get the default too, as in the kubelet's defaulting.
        let string = |name: &'static str, default: &str| match field(name) {
            None | Some(Value::Null) => Ok(default.to_owned()),
            Some(Value::String(value)) if value.is_empty() => Ok(default.to_owned()),
            Some(Value::String(value)) => Ok(value.clone()),
            Some(other) => Err(Error::Config {
                field: name,
                why: format!("expected a string, got {other}"),
            }),
        };
        let healthz_port = match field("healthzPort") {
            None | Some(Value::Null) => DEFAULT_HEALTHZ_PORT,
            Some(other) => other
                .as_u64()
                .and_then(|port| u16::try_from(port).ok())
                .ok_or_else(|| Error::Config {
                    field: "healthzPort",
                    why: format!("expected a port 0-65535, got {other}"),
                })?,
        };
        Ok(KubeletConfig {
            cpu_manager_policy: string("cpuManagerPolicy", DEFAULT_CPU_MANAGER_POLICY)?,
            memory_manager_policy: string("memoryManagerPolicy", DEFAULT_MEMORY_MANAGER_POLICY)?,
            healthz_bind_address: string("healthzBindAddress", DEFAULT_HEALTHZ_BIND_ADDRESS)?,
            healthz_port,
        })
    }
}

/// One of the kubelet's resource-manager checkpoints in the root dir.
struct Checkpoint {
    file_name: &'static str,
    /// As in the kubelet's advice to "delete the <manager> checkpoint file".
    manager: &'static str,
    /// The kubelet's container manager wraps the manager's start error in this.
    start_error: &'static str,
    /// Prefix of the policy-mismatch error (the memory manager tags its own errors).
    mismatch_prefix: &'static str,
    /// `reason` of the `crash` line when the start is refused.
    reason: &'static str,
}

const CPU_CHECKPOINT: Checkpoint = Checkpoint {
    file_name: CPU_MANAGER_STATE,
    manager: "CPU manager",
    start_error: "start cpu manager error",
    mismatch_prefix: "",
    reason: "cpu-manager-state",
};

const MEMORY_CHECKPOINT: Checkpoint = Checkpoint {
    file_name: MEMORY_MANAGER_STATE,
    manager: "memory manager",
    start_error: "start memory manager error",
    mismatch_prefix: "[memorymanager] ",
    reason: "memory-manager-state",
};

/// Restores (or creates) the CPU, then the memory manager checkpoint in `root`; refuses to
/// start (exit 1) on a policy mismatch or a corrupted checkpoint, as the kubelet does.
fn restore_checkpoints(root: &Path, config: &KubeletConfig, events: &Events) -> Result<(), Error> {
    let cpu_policy = config.cpu_manager_policy.as_str();
    restore_checkpoint(root, &CPU_CHECKPOINT, cpu_policy, events, || {
        // The static policy starts with every CPU in the shared pool; `none` keeps no set.
        let cpu_set = if cpu_policy == "static" {
            online_cpus()
        } else {
            String::new()
        };
        format!(
            "{{\"policyName\":{},\"defaultCpuSet\":{}",
            json_string(cpu_policy),
            json_string(&cpu_set)
        )
    })?;
    let memory_policy = config.memory_manager_policy.as_str();
    restore_checkpoint(root, &MEMORY_CHECKPOINT, memory_policy, events, || {
        format!(
            "{{\"policyName\":{},\"machineState\":{{}}",
            json_string(memory_policy)
        )
    })
}

/// `fresh` gives the content of a new checkpoint without its checksum and closing brace.
fn restore_checkpoint(
    root: &Path,
    checkpoint: &Checkpoint,
    policy: &str,
    events: &Events,
    fresh: impl FnOnce() -> String,
) -> Result<(), Error> {
    let path = root.join(checkpoint.file_name);
    let problem = match std::fs::read(&path) {
        Ok(content) => match checkpoint_policy(&content) {
            Some(found) if found == policy => return Ok(()),
            Some(found) => format!(
                "{}configured policy {policy:?} differs from state checkpoint policy {found:?}",
                checkpoint.mismatch_prefix
            ),
            None => "checkpoint is corrupted".to_owned(),
        },
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            let body = fresh();
            let content = format!("{body},\"checksum\":{}}}", fnv1a(body.as_bytes()));
            write_checkpoint(root, &path, &content)?;
            say!(
                "stand-in kubelet pid {} created {} with policy {policy:?}",
                getpid(),
                path.display()
            );
            return Ok(());
        }
        Err(source) => {
            return Err(Error::Io {
                what: "read the checkpoint",
                path,
                source,
            })
        }
    };
    let message = format!(
        "could not restore state from checkpoint: {problem}, please drain this node and delete \
         the {} checkpoint file {:?} before restarting Kubelet",
        checkpoint.manager,
        path.display().to_string()
    );
    refuse(
        events,
        checkpoint.reason,
        &format!(
            "Failed to start ContainerManager: {}: {message}",
            checkpoint.start_error
        ),
    )
}

/// The `policyName` of a checkpoint; `None` if it is not a JSON object with a string one.
fn checkpoint_policy(content: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(content).ok()?;
    value.get("policyName")?.as_str().map(str::to_owned)
}

/// Writes a new checkpoint atomically (temp file, fsync, rename), mode 0644, creating `root`
/// (mode 0750, as the kubelet creates its root dir) if needed.
fn write_checkpoint(root: &Path, path: &Path, content: &str) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(root)
        .map_err(|source| Error::Io {
            what: "create --root-dir",
            path: root.to_owned(),
            source,
        })?;
    let file_name = path.file_name().map_or_else(
        || "checkpoint".into(),
        |name| name.to_string_lossy().into_owned(),
    );
    let tmp = root.join(format!(".{file_name}.stand-in-{}.tmp", getpid()));
    let io_err = |what, path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { what, path, source }
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(io_err("create the checkpoint", &tmp))?;
    file.write_all(content.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_err("write the checkpoint", &tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io_err("rename the checkpoint into", path))
}

/// The online CPUs in the kernel's list format (`0-3`), from sysfs, else from the CPU count.
fn online_cpus() -> String {
    if let Ok(list) = std::fs::read_to_string(ONLINE_CPUS) {
        let list = list.trim();
        if !list.is_empty() {
            return list.to_owned();
        }
    }
    match std::thread::available_parallelism().map_or(1, usize::from) {
        1 => "0".to_owned(),
        count => format!("0-{}", count - 1),
    }
}

fn json_string(value: &str) -> String {
    serde_json::Value::from(value).to_string()
}

/// 32-bit FNV-1a (widened to u64), as the checkpoint checksum; the kubelet's own checksum hashes
/// Go's dump of its checkpoint struct, which the stand-in does not reproduce.
fn fnv1a(bytes: &[u8]) -> u64 {
    let hash = bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    });
    u64::from(hash)
}

/// Binds `healthzBindAddress:healthzPort` (exit 1 if it cannot), logs `healthz addr=..` and
/// serves `/healthz` on a thread of its own: 500 until `ready_at`, then 200.
fn start_healthz(config: &KubeletConfig, ready_at: Instant, events: &Events) -> Result<(), Error> {
    if config.healthz_port == 0 {
        return Ok(());
    }
    let Ok(ip) = config.healthz_bind_address.parse::<IpAddr>() else {
        refuse(
            events,
            "healthz-bind",
            &format!(
                "Failed to start healthz server: healthzBindAddress {:?} is not an IP address",
                config.healthz_bind_address
            ),
        );
    };
    let addr = SocketAddr::new(ip, config.healthz_port);
    // Like the real kubelet: a bind failure is logged and retried every 5 s; the kubelet
    // runs on (unhealthy) meanwhile.
    let first = TcpListener::bind(addr);
    if let Err(err) = &first {
        let error = err.to_string();
        events.record(
            "healthz-bind-failed",
            now_ns(),
            &[
                ("addr", addr.to_string().as_str()),
                ("error", error.as_str()),
            ],
        )?;
        say!(
            "stand-in kubelet pid {}: Failed to start healthz server: listen tcp {addr}: {err}; retrying every {HEALTHZ_BIND_RETRY:?}",
            getpid()
        );
    }
    let bound = first.is_ok();
    std::thread::Builder::new()
        .name("healthz".to_owned())
        .spawn(move || {
            let listener = match first {
                Ok(listener) => listener,
                Err(_) => loop {
                    std::thread::sleep(HEALTHZ_BIND_RETRY);
                    if let Ok(listener) = TcpListener::bind(addr) {
                        say!(
                            "stand-in kubelet pid {} serving healthz on {addr} (after retries)",
                            getpid()
                        );
                        break listener;
                    }
                },
            };
            for stream in listener.incoming() {
                let result = stream.and_then(|stream| answer_healthz(stream, ready_at));
                if let Err(err) = result {
                    say!("stand-in kubelet pid {}: healthz: {err}", getpid());
                    // Do not spin if accept itself keeps failing (EMFILE and the like).
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        })
        .map_err(|source| Error::Os {
            what: "start the healthz thread",
            source,
        })?;
    if bound {
        events.record("healthz", now_ns(), &[("addr", addr.to_string().as_str())])?;
        say!(
            "stand-in kubelet pid {} serving healthz on {addr}",
            getpid()
        );
    }
    Ok(())
}

/// Reads one request head and answers it with `Connection: close`.
fn answer_healthz(mut stream: TcpStream, ready_at: Instant) -> io::Result<()> {
    stream.set_read_timeout(Some(HEALTHZ_READ_TIMEOUT))?;
    stream.set_write_timeout(Some(HEALTHZ_READ_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0_u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < HEALTHZ_MAX_REQUEST {
        let read = stream.read(&mut buf)?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buf[..read]);
    }
    let request_line = head.split(|byte| *byte == b'\n').next().unwrap_or_default();
    let request_line = String::from_utf8_lossy(request_line);
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default();
    let path = parts
        .next()
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default();
    let (status, body) = if matches!(method, "GET" | "HEAD") && path == "/healthz" {
        if Instant::now() < ready_at {
            ("500 Internal Server Error", "not ready")
        } else {
            ("200 OK", "ok")
        }
    } else {
        ("404 Not Found", "404 page not found\n")
    };
    let sent_body = if method == "HEAD" { "" } else { body };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         X-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n\
         {sent_body}",
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    stream.flush()?;
    // Errors are irrelevant here: the client may be gone already.
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(())
}

/// Takes `--lock-file` the way the real kubelet does: blocking exclusive flock, fd kept for life.
fn take_lock_file(path: &Path, events: &Events) -> Result<File, Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| Error::Io {
            what: "open --lock-file",
            path: path.to_owned(),
            source,
        })?;
    let lock_err = |source| Error::Io {
        what: "flock --lock-file",
        path: path.to_owned(),
        source,
    };
    // fs2's methods, not std's same-named `File::try_lock`/`File::lock`.
    match fs2::FileExt::try_lock_exclusive(&file) {
        Ok(()) => return Ok(file),
        Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
        Err(err) => return Err(lock_err(err)),
    }
    let lock_field = path.display().to_string();
    events.record("lock-wait", now_ns(), &[("lock", lock_field.as_str())])?;
    say!(
        "stand-in kubelet pid {} waiting for the lock on {}",
        getpid(),
        path.display()
    );
    loop {
        match fs2::FileExt::lock_exclusive(&file) {
            Ok(()) => return Ok(file),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(lock_err(err)),
        }
    }
}

/// Takes the overlap probe or, if another kubelet holds it, reports OVERLAP and exits 97.
fn take_probe(path: &Path, events: &Events) -> Result<File, Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
        .map_err(|source| Error::Io {
            what: "open the overlap probe",
            path: path.to_owned(),
            source,
        })?;
    // fs2's method, not std's same-named `File::try_lock`.
    match fs2::FileExt::try_lock_exclusive(&file) {
        Ok(()) => Ok(file),
        Err(err) if err.kind() == io::ErrorKind::WouldBlock => report_overlap(path, &file, events),
        Err(source) => Err(Error::Io {
            what: "flock the overlap probe",
            path: path.to_owned(),
            source,
        }),
    }
}

fn report_overlap(path: &Path, file: &File, events: &Events) -> ! {
    let holder = probe_holder(file).map_or_else(|| "unknown".to_owned(), |pid| pid.to_string());
    let probe_field = path.display().to_string();
    say!(
        "STAND-IN KUBELET OVERLAP: another kubelet holds the overlap probe {probe_field} (pid {holder})"
    );
    let t = now_ns();
    let extra = [("holder", holder.as_str()), ("probe", probe_field.as_str())];
    let mut marker_path = OsString::from(path.as_os_str());
    marker_path.push(OVERLAP_MARKER_SUFFIX);
    let marker = OpenOptions::new()
        .append(true)
        .create(true)
        .open(&marker_path)
        .and_then(|mut marker| marker.write_all(event_line("OVERLAP", t, &extra).as_bytes()));
    // Keep going on failures: the exit code and the other report still tell the story.
    if let Err(err) = marker {
        say!(
            "stand-in kubelet pid {}: failed to write the overlap marker {}: {err}",
            getpid(),
            Path::new(&marker_path).display()
        );
    }
    if let Err(err) = events.record("OVERLAP", t, &extra) {
        say!("stand-in kubelet pid {}: {err}", getpid());
    }
    exit(EXIT_OVERLAP);
}

/// The pid holding the flock on `file`, from /proc/locks (`N: FLOCK ADVISORY WRITE PID MAJ:MIN:INO ..`).
fn probe_holder(file: &File) -> Option<i32> {
    let meta = file.metadata().ok()?;
    let (major, minor) = (
        nix::sys::stat::major(meta.dev()),
        nix::sys::stat::minor(meta.dev()),
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let mut fields = line.split_whitespace().skip(1);
        // Blocked waiters are listed as `N: -> FLOCK ...`.
        if fields.next()? != "FLOCK" {
            return None;
        }
        let pid = fields.nth(2)?.parse::<i32>().ok()?;
        let mut dev_ino = fields.next()?.split(':');
        let same_file = u64::from_str_radix(dev_ino.next()?, 16).ok()? == major
            && u64::from_str_radix(dev_ino.next()?, 16).ok()? == minor
            && dev_ino.next()?.parse::<u64>().ok()? == meta.ino();
        (same_file && pid != getpid().as_raw()).then_some(pid)
    })
}

/// Forks a grandchild in our process group that only waits to be killed.
fn spawn_grandchild(events: &Events, inherited: &[RawFd]) -> Result<(), Error> {
    // SAFETY: no thread has been started yet (the signal thread comes later), so the child is a
    // copy of a single-threaded process and may allocate and run ordinary code.
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Parent { child }) => {
            eprintln!(
                "stand-in kubelet pid {} spawned grandchild pid {child}",
                getpid()
            );
            Ok(())
        }
        Ok(ForkResult::Child) => grandchild(events, inherited),
        Err(errno) => Err(Error::Os {
            what: "fork the grandchild",
            source: errno.into(),
        }),
    }
}

fn grandchild(events: &Events, inherited: &[RawFd]) -> ! {
    let pgid = getpgrp().to_string();
    if let Err(err) = events.record("grandchild", now_ns(), &[("pgid", pgid.as_str())]) {
        eprintln!("stand-in kubelet grandchild pid {}: {err}", getpid());
    }
    // Not a kubelet: it must not keep the lock file, the probe or the log. The owning `File`s
    // are never dropped here because this function never returns, so each fd is closed once.
    for fd in inherited {
        if let Err(errno) = nix::unistd::close(*fd) {
            eprintln!(
                "stand-in kubelet grandchild pid {}: failed to close fd {fd}: {errno}",
                getpid()
            );
        }
    }
    // Default signal dispositions (handlers are installed after the fork): only a signal ends it.
    loop {
        nix::unistd::pause();
    }
}

/// Forks a helper that daemonizes (fork + setsid) and keeps the descriptors the stand-in
/// inherited across exec; it only waits to be killed.
fn spawn_daemon_helper(events: &Events) -> Result<(), Error> {
    // SAFETY: no thread has been started yet (the signal thread comes later), so the child is a
    // copy of a single-threaded process and may allocate and run ordinary code.
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Parent { child }) => {
            eprintln!(
                "stand-in kubelet pid {} spawned daemonized helper pid {child}",
                getpid()
            );
            Ok(())
        }
        Ok(ForkResult::Child) => daemon_helper(events),
        Err(errno) => Err(Error::Os {
            what: "fork the daemonized helper",
            source: errno.into(),
        }),
    }
}

fn daemon_helper(events: &Events) -> ! {
    let me = getpid();
    if let Err(errno) = nix::unistd::setsid() {
        eprintln!("stand-in kubelet helper pid {me}: setsid failed: {errno}");
    }
    // A forked child has no PDEATHSIG already; say so explicitly, as a daemon would not set one.
    // SAFETY: prctl with PR_SET_PDEATHSIG and plain integers touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0, 0, 0, 0) } != 0 {
        eprintln!(
            "stand-in kubelet helper pid {me}: prctl(PR_SET_PDEATHSIG, 0) failed: {}",
            io::Error::last_os_error()
        );
    }
    // What an exec would close: every close-on-exec descriptor (the stand-in's `--lock-file`
    // and probe among them) except the log, which goes after the `helper` line. Descriptors the
    // stand-in inherited without close-on-exec (the supervisor's lock) stay open.
    let log_fd = events.raw_fd();
    for fd in open_fds() {
        if fd > 2 && Some(fd) != log_fd && is_cloexec(fd) {
            // Errors are irrelevant: the fd may be the directory stream just closed.
            let _ = nix::unistd::close(fd);
        }
    }
    let pgid = getpgrp().to_string();
    let sid = nix::unistd::getsid(None).map_or_else(|_| "-".to_owned(), |sid| sid.to_string());
    if let Err(err) = events.record(
        "helper",
        now_ns(),
        &[("pgid", pgid.as_str()), ("sid", sid.as_str())],
    ) {
        eprintln!("stand-in kubelet helper pid {me}: {err}");
    }
    if let Some(fd) = log_fd {
        let _ = nix::unistd::close(fd);
    }
    loop {
        nix::unistd::pause();
    }
}

/// The descriptors open in this process, from /proc/self/fd (empty if it cannot be read).
fn open_fds() -> Vec<RawFd> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut fds: Vec<RawFd> = dir
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    fds
}

fn is_cloexec(fd: RawFd) -> bool {
    // SAFETY: F_GETFD on any integer only reads the descriptor table.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    flags >= 0 && flags & libc::FD_CLOEXEC != 0
}

/// Descriptors inherited across exec that name a regular file (and `lock_path`, if given).
fn inherited_lock_fds(lock_path: Option<&Path>) -> Vec<RawFd> {
    open_fds()
        .into_iter()
        .filter(|fd| *fd > 2 && !is_cloexec(*fd))
        .filter(|fd| {
            nix::sys::stat::fstat(*fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
        })
        .filter(|fd| {
            let Some(want) = lock_path else {
                return true;
            };
            let Ok(link) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
                return false;
            };
            let mut deleted = want.as_os_str().to_owned();
            deleted.push(" (deleted)");
            link.as_os_str() == want.as_os_str() || link.as_os_str() == deleted
        })
        .collect()
}

/// After `delay`, unlocks every inherited lock descriptor (on a thread of its own).
fn start_unlocker(
    events: Events,
    delay: Duration,
    lock_path: Option<PathBuf>,
) -> Result<(), Error> {
    std::thread::Builder::new()
        .name("unlocker".to_owned())
        .spawn(move || {
            std::thread::sleep(delay);
            let fds = inherited_lock_fds(lock_path.as_deref());
            if fds.is_empty() {
                eprintln!(
                    "stand-in kubelet pid {}: no inherited lock descriptor to unlock",
                    getpid()
                );
                if let Err(err) = events.record("unlocked", now_ns(), &[("fd", "none")]) {
                    eprintln!("stand-in kubelet pid {}: {err}", getpid());
                }
            }
            for fd in fds {
                // SAFETY: flock on an open descriptor of ours touches no memory.
                if unsafe { libc::flock(fd, libc::LOCK_UN) } != 0 {
                    eprintln!(
                        "stand-in kubelet pid {}: flock(fd {fd}, LOCK_UN) failed: {}",
                        getpid(),
                        io::Error::last_os_error()
                    );
                    continue;
                }
                eprintln!(
                    "stand-in kubelet pid {} unlocked inherited fd {fd}",
                    getpid()
                );
                let fd = fd.to_string();
                if let Err(err) = events.record("unlocked", now_ns(), &[("fd", fd.as_str())]) {
                    eprintln!("stand-in kubelet pid {}: {err}", getpid());
                }
            }
        })
        .map(drop)
        .map_err(|source| Error::Os {
            what: "start the unlocker thread",
            source,
        })
}

/// A termination request and who sent it.
struct Term {
    signal: Signal,
    /// The sender's pid (0 for the kernel).
    from: u32,
}

/// SIGTERM and SIGINT with their senders: blocked in every thread and read from a signalfd
/// on a thread of their own.
fn signal_channel() -> Result<Receiver<Term>, Error> {
    let os = |what: &'static str| {
        move |err: nix::errno::Errno| Error::Os {
            what,
            source: io::Error::from(err),
        }
    };
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGTERM);
    mask.add(Signal::SIGINT);
    // Before any thread exists, so that every thread inherits the mask.
    mask.thread_block().map_err(os("block SIGTERM/SIGINT"))?;
    let fd = SignalFd::new(&mask).map_err(os("create a signalfd"))?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("signals".to_owned())
        .spawn(move || loop {
            match fd.read_signal() {
                Ok(Some(info)) => {
                    let Ok(signal) = Signal::try_from(info.ssi_signo as i32) else {
                        continue;
                    };
                    let term = Term {
                        signal,
                        from: info.ssi_pid,
                    };
                    if tx.send(term).is_err() {
                        break;
                    }
                }
                Ok(None) | Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
        })
        .map_err(|source| Error::Os {
            what: "start the signal thread",
            source,
        })?;
    Ok(rx)
}

struct Crash {
    at: Instant,
    code: i32,
    reason: &'static str,
}

fn plan_crash(settings: &Settings, config: Option<&str>, started: Instant) -> Option<Crash> {
    let (delay, reason) = match &settings.crash_on_config {
        Some(needle) => {
            if !config.is_some_and(|content| content.contains(needle.as_str())) {
                return None;
            }
            (
                settings.crash_after.unwrap_or(DEFAULT_CONFIG_CRASH_DELAY),
                "config",
            )
        }
        None => (settings.crash_after?, "crash-after"),
    };
    Some(Crash {
        at: started + delay,
        code: settings.crash_code,
        reason,
    })
}

fn signal_name(signal: Signal) -> &'static str {
    if signal == Signal::SIGINT {
        "sigint"
    } else {
        "sigterm"
    }
}

/// Runs until a signal or the planned crash; returns the exit code.
fn serve(
    settings: &Settings,
    events: &Events,
    signals: &Receiver<Term>,
    crash: Option<Crash>,
) -> Result<i32, Error> {
    let lost = || Error::Os {
        what: "receive signals",
        source: io::Error::other("the signal thread stopped"),
    };
    loop {
        let term = match &crash {
            None => signals.recv().map_err(|_| lost())?,
            Some(crash) => {
                match signals.recv_timeout(crash.at.saturating_duration_since(Instant::now())) {
                    Ok(term) => term,
                    Err(RecvTimeoutError::Timeout) => {
                        let code = crash.code.to_string();
                        events.record(
                            "crash",
                            now_ns(),
                            &[("code", code.as_str()), ("reason", crash.reason)],
                        )?;
                        eprintln!(
                            "stand-in kubelet pid {} crashing with code {} ({})",
                            getpid(),
                            crash.code,
                            crash.reason
                        );
                        return Ok(crash.code);
                    }
                    Err(RecvTimeoutError::Disconnected) => return Err(lost()),
                }
            }
        };
        let name = signal_name(term.signal);
        let from = term.from.to_string();
        if settings.ignore_term {
            events.record(
                "term",
                now_ns(),
                &[("signal", name), ("from", from.as_str()), ("ignored", "1")],
            )?;
            eprintln!("stand-in kubelet pid {} ignoring {name}", getpid());
            continue;
        }
        events.record(
            "term",
            now_ns(),
            &[("signal", name), ("from", from.as_str())],
        )?;
        if let Some(delay) = settings.term_delay {
            std::thread::sleep(delay);
        }
        events.record("stop", now_ns(), &[("reason", name)])?;
        eprintln!("stand-in kubelet pid {} stopped on {name}", getpid());
        return Ok(0);
    }
}
