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
//! - `--version`: print `STANDIN_VERSION` (default `Kubernetes v1.35.0`, the real kubelet's
//!   form) and exit 0 before anything else (no log, no lock); with `STANDIN_VERSION=none`
//!   behave as a binary without the flag: `unknown flag: --version` on stderr, exit 2.
//!   kubelet-pivot runs `--version` with an empty environment but `PATH`, so a test sets
//!   `STANDIN_VERSION` in a wrapper script that execs the stand-in.
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
//!
//! Layout: this file holds the constants, `main` and the start sequence (`run`); `settings`
//! (flags, environment), `config` (the `--config` fields), `events` (the log), `locks`
//! (`--lock-file`, the overlap probe), `checkpoints`, `healthz`, `forks` (grandchild, helper),
//! `inherited` (inherited lock descriptors), `serve` (signals, the planned crash, the wait)
//! and `error`.

// `fork` is unsafe in nix; it is used for STANDIN_SPAWN_GRANDCHILD and STANDIN_DAEMONIZE_HELPER
// (module `forks`), and libc calls need it too (module `inherited`); SAFETY comments at each.
#![allow(unsafe_code)]

use std::convert::Infallible;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::process::exit;
use std::time::{Duration, Instant};

use nix::unistd::{getpgrp, getpid};

use crate::checkpoints::restore_checkpoints;
use crate::config::KubeletConfig;
use crate::error::Error;
use crate::events::{now_ns, path_field, Events};
use crate::forks::{spawn_daemon_helper, spawn_grandchild};
use crate::healthz::start_healthz;
use crate::inherited::start_unlocker;
use crate::locks::{take_lock_file, take_probe};
use crate::serve::{plan_crash, serve, signal_channel};
use crate::settings::{env_path, parse_flags, Settings};

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
const ENV_VERSION: &str = "STANDIN_VERSION";
/// The `--version` answer without `STANDIN_VERSION`.
const DEFAULT_VERSION: &str = "Kubernetes v1.35.0";
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

mod checkpoints;
mod config;
mod error;
mod events;
mod forks;
mod healthz;
mod inherited;
mod locks;
mod serve;
mod settings;

fn main() {
    // First thing: the exec time, reported as `t` of the `start` event.
    let exec_ns = now_ns();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args
        .iter()
        .any(|a| a == "--version" || a.starts_with("--version="))
    {
        exit(answer_version());
    }
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

/// `--version`, as the kubelet answers it (or, with `STANDIN_VERSION=none`, as a binary that
/// does not know the flag); returns the exit code.
fn answer_version() -> i32 {
    let version = std::env::var(ENV_VERSION).unwrap_or_else(|_| DEFAULT_VERSION.to_owned());
    if version == "none" {
        eprintln!("unknown flag: --version");
        return EXIT_ERROR;
    }
    println!("{version}");
    0
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
