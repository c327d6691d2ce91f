//! Shared helpers for the integration tests (`tests/it`, one module per former test file).
//!
//! A [`Scene`] is one node in a temp dir: lock file, dynamic config dir, the stand-in kubelet's
//! event log and its overlap probe. [`Scene::pivot`] builds a `kubelet-pivot` command that runs
//! the stand-in kubelet (`examples/stand_in_kubelet/`); [`Proc`] kills what it started on
//! drop, and dropping the scene kills stand-in kubelets (and their grandchildren) left behind.
//! Waiting is done with [`wait_until`], never with fixed sleeps.
//!
//! Submodules: [`lock_state`] (what an operator sees of the lock: `status -o json`, the holder
//! record, claims, /proc/locks), [`load`] (busy and fork loops beside a test), [`alone`] (the
//! tests that need the machine to themselves), [`sampler`] (a background sampler of live
//! kubelets: overlaps at any instant, gaps without a kubelet), [`kubectl`] (real kubectl,
//! skipped when absent), [`api_node`] (one node on the test API server), [`command`] (the binary and the shipped scripts run to completion),
//! [`scrape`] (a strict Prometheus scraper), [`rollout`] (the rollout controller) and [`bench`]
//! (for the benches, which include this module with `#[path]`).

// Not every test file (or bench) uses every helper.
#![allow(dead_code)]

pub mod alone;
pub mod api_node;
pub mod bench;
pub mod command;
pub mod gap_trace;
pub mod kubectl;
pub mod load;
pub mod lock_state;
pub mod promql;
pub mod rollout;
pub mod sampler;
pub mod scrape;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How often [`wait_until`] polls.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// Suffix of the marker file the stand-in creates next to the probe on overlap.
pub const OVERLAP_MARKER_SUFFIX: &str = ".overlap";
/// Exit code of a stand-in kubelet that found another kubelet holding the overlap probe.
pub const STANDIN_EXIT_OVERLAP: i32 = 97;
/// Name of the stand-in binary (an example target), as in its argv[0].
pub const STAND_IN_NAME: &str = "stand_in_kubelet";

/// The kubelet-pivot binary under test.
pub fn pivot_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kubelet-pivot"))
}

/// Where the stand-in kubelet is built: `<dir of pivot_bin>/examples/stand_in_kubelet`
/// (it may not be there yet; see [`stand_in_bin`]).
pub fn stand_in_path() -> PathBuf {
    let pivot = pivot_bin();
    let dir = pivot
        .parent()
        .unwrap_or_else(|| panic!("kubelet-pivot binary {} has no parent dir", pivot.display()));
    dir.join("examples").join(STAND_IN_NAME)
}

/// The stand-in kubelet: [`stand_in_path`], panicking if it has not been built.
pub fn stand_in_bin() -> PathBuf {
    let bin = stand_in_path();
    assert!(
        bin.is_file(),
        "stand-in kubelet not found at {}: it is an example target, built by a plain `cargo test` \
         (or `cargo build --examples`); `cargo test --test it` alone does not build examples",
        bin.display()
    );
    bin
}

/// Polls `f` every [`POLL_INTERVAL`] until it returns `Some`, panicking after `deadline`.
pub fn wait_until<T>(deadline: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    poll_until(deadline, POLL_INTERVAL, what, f)
}

/// Polls `f` every `interval` until it returns `Some`, panicking after `deadline`.
pub fn poll_until<T>(
    deadline: Duration,
    interval: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = f() {
            return value;
        }
        if start.elapsed() >= deadline {
            panic!("timed out after {deadline:?} waiting for {what}");
        }
        thread::sleep(interval);
    }
}

/// Now, in ns since the Unix epoch (CLOCK_REALTIME, the clock of the stand-in's `t=`).
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the realtime clock is after 1970")
        .as_nanos()
}

/// The time from `from_ns` to `to_ns` (ns since the epoch); zero if `to_ns` is earlier.
pub fn ns_between(from_ns: u128, to_ns: u128) -> Duration {
    Duration::from_nanos(
        u64::try_from(to_ns.saturating_sub(from_ns)).expect("duration fits in u64 ns"),
    )
}

/// A TCP port on loopback that was free a moment ago (bound, read, released).
pub fn free_port() -> u16 {
    scrape::free_addr().port()
}

/// Whether `pid` has a handler for SIGTERM (bit 14 of `SigCgt` in /proc/PID/status).
pub fn catches_sigterm(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let mask = status
                .lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))?
                .trim()
                .to_owned();
            u64::from_str_radix(&mask, 16).ok()
        })
        .is_some_and(|mask| mask & (1 << 14) != 0)
}

/// A KubeletConfiguration document with `extra` YAML fields.
pub fn kubelet_config(extra: &str) -> String {
    format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{extra}")
}

/// Process state letter from /proc/PID/stat (`R`, `S`, `Z`, ...), `None` if there is no such pid.
fn proc_state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ...`; comm may contain spaces and parentheses, so split at the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// True if `pid` exists and is neither a zombie nor dead.
pub fn pid_alive(pid: i32) -> bool {
    matches!(proc_state(pid), Some(state) if state != 'Z' && state != 'X')
}

/// Sends `signal` to `pid`; false if there is no such process.
pub fn signal_pid(pid: i32, signal: Signal) -> bool {
    match kill(Pid::from_raw(pid), signal) {
        Ok(()) => true,
        Err(nix::errno::Errno::ESRCH) => false,
        Err(err) => panic!("failed to send {signal} to pid {pid}: {err}"),
    }
}

/// A child process that is killed (SIGKILL) and reaped when dropped.
pub struct Proc {
    child: Child,
    what: String,
}

impl Proc {
    /// Spawns `cmd`, panicking with the program name if that fails.
    pub fn spawn(cmd: &mut Command) -> Proc {
        let what = format!("{:?}", cmd.get_program());
        let child = cmd
            .spawn()
            .unwrap_or_else(|err| panic!("failed to spawn {what}: {err}"));
        Proc { child, what }
    }

    pub fn pid(&self) -> i32 {
        // Linux pids fit in i32 (pid_max is at most 2^22).
        i32::try_from(self.child.id())
            .unwrap_or_else(|_| panic!("pid {} overflows i32", self.child.id()))
    }

    /// The underlying child, e.g. to take piped stdout.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Sends `signal`; returns false (and sends nothing) if the process already exited.
    pub fn signal(&mut self, signal: Signal) -> bool {
        if !self.is_running() {
            return false;
        }
        // Not yet reaped, so the pid still names this process (at worst a zombie).
        signal_pid(self.pid(), signal)
    }

    /// True until the process has exited (reaps it when it has).
    pub fn is_running(&mut self) -> bool {
        match self.child.try_wait() {
            Ok(status) => status.is_none(),
            Err(err) => panic!("failed to check {} pid {}: {err}", self.what, self.pid()),
        }
    }

    /// Waits up to `timeout` for the process to exit and returns its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let pid = self.pid();
        let what = format!("{} pid {pid} to exit", self.what);
        wait_until(timeout, &what, || match self.child.try_wait() {
            Ok(status) => status,
            Err(err) => panic!("failed to wait for {what}: {err}"),
        })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Errors are ignored: it may be gone already, and panicking in drop would abort.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One line of the stand-in's event log:
/// `<event> t=<unix_ns> pid=<pid> ppid=<ppid> [key=value ...]` (`args=` runs to end of line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub event: String,
    pub t_ns: u128,
    pub pid: i32,
    /// Every `key=value` except `t` and `pid` (so `ppid`, `pgid`, `code`, `reason`, `args`...).
    pub fields: BTreeMap<String, String>,
    pub raw: String,
}

impl LogLine {
    /// Parses one complete line; `None` if it is malformed.
    pub fn parse(raw: &str) -> Option<LogLine> {
        let (event, mut rest) = raw.split_once(' ')?;
        let mut fields = BTreeMap::new();
        while !rest.is_empty() {
            let (key, after_key) = rest.split_once('=')?;
            if key.is_empty() || key.contains(' ') {
                return None;
            }
            // `args` holds the space-joined command line and is always last.
            let (value, next) = if key == "args" {
                (after_key, "")
            } else {
                after_key.split_once(' ').unwrap_or((after_key, ""))
            };
            fields.insert(key.to_owned(), value.to_owned());
            rest = next;
        }
        let t_ns = fields.remove("t")?.parse().ok()?;
        let pid = fields.remove("pid")?.parse().ok()?;
        Some(LogLine {
            event: event.to_owned(),
            t_ns,
            pid,
            fields,
            raw: raw.to_owned(),
        })
    }

    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// A numeric field (`ppid`, `pgid`, `code`, `ready`, ...), panicking if absent or malformed.
    pub fn num(&self, key: &str) -> i128 {
        self.field(key)
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("log line has no numeric {key}: {}", self.raw))
    }

    /// The `ppid` field as a pid.
    pub fn ppid(&self) -> i32 {
        i32::try_from(self.num("ppid")).expect("ppid fits in i32")
    }
}

/// Reads the stand-in event log; a missing file is an empty log. A last line still being
/// written (no trailing newline) is skipped; any other malformed line panics.
pub fn read_log(path: &Path) -> Vec<LogLine> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(err) => panic!("failed to read stand-in log {}: {err}", path.display()),
    };
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => return Vec::new(),
    };
    complete
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            LogLine::parse(line).unwrap_or_else(|| {
                panic!(
                    "malformed line in stand-in log {}: {line:?}",
                    path.display()
                )
            })
        })
        .collect()
}

/// True if `pid` is alive and is a stand-in writing to `log` (guards against pid reuse).
fn is_stand_in_of(pid: i32, log: &Path) -> bool {
    if !pid_alive(pid) {
        return false;
    }
    match fs::read(format!("/proc/{pid}/environ")) {
        Ok(environ) => {
            let mut wanted = b"STANDIN_LOG=".to_vec();
            wanted.extend_from_slice(log.as_os_str().as_encoded_bytes());
            environ
                .split(|byte| *byte == 0)
                .any(|var| var == wanted.as_slice())
        }
        // Unreadable environ (another user, or it just exited): fall back to the name.
        Err(_) => fs::read(format!("/proc/{pid}/cmdline"))
            .map(|cmdline| {
                let argv0 = cmdline.split(|byte| *byte == 0).next().unwrap_or_default();
                argv0.ends_with(STAND_IN_NAME.as_bytes())
            })
            .unwrap_or(false),
    }
}

/// True if `pid` is alive (not a zombie) and is a stand-in writing to `log` (its environment
/// names the log), so that a reused pid is never taken for a stand-in.
pub fn stand_in_alive(pid: i32, log: &Path) -> bool {
    is_stand_in_of(pid, log)
}

/// Pids of stand-in kubelets in `log` that started, neither stopped nor crashed, and are alive.
pub fn running_kubelets(log: &Path) -> Vec<i32> {
    let lines = read_log(log);
    let mut running: Vec<i32> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.event == "start")
        .filter(|(at, start)| {
            // Only a stop/crash after this start counts (a pid can be reused within one log).
            !lines[at + 1..].iter().any(|line| {
                line.pid == start.pid && (line.event == "stop" || line.event == "crash")
            })
        })
        .map(|(_, start)| start.pid)
        .filter(|pid| is_stand_in_of(*pid, log))
        .collect();
    running.sort_unstable();
    running.dedup();
    running
}

/// One node: a temp dir with the kubelet lock, the dynamic config dir, the stand-in event log
/// and its overlap probe. Dropping it kills stand-in kubelets left running. It is not opened
/// while a test runs [`alone::alone`].
pub struct Scene {
    /// Captured stdout+stderr files of the pivots built by [`Scene::pivot`].
    outputs: RefCell<Vec<PathBuf>>,
    dir: tempfile::TempDir,
    /// Dropped last (fields drop in order), after the scene's processes are gone.
    _beside: alone::Beside,
}

impl Default for Scene {
    fn default() -> Self {
        Self::new()
    }
}

impl Scene {
    /// Creates the temp dir, `lock/` and `config_dir()` (0700, as the host's bootstrap leaves
    /// it: a self-hosted supervisor refuses a checkpoint store that does not exist, the sign
    /// of a host path not mounted into its pod).
    pub fn new() -> Scene {
        let beside = alone::beside();
        let dir = tempfile::Builder::new()
            .prefix("kubelet-pivot-test-")
            .tempdir()
            .unwrap_or_else(|err| panic!("failed to create a temp dir: {err}"));
        let scene = Scene {
            outputs: RefCell::new(Vec::new()),
            dir,
            _beside: beside,
        };
        let lock_dir = scene.path().join("lock");
        fs::create_dir_all(&lock_dir)
            .unwrap_or_else(|err| panic!("failed to create {}: {err}", lock_dir.display()));
        let store = scene.config_dir();
        std::os::unix::fs::DirBuilderExt::mode(&mut fs::DirBuilder::new(), 0o700)
            .create(&store)
            .unwrap_or_else(|err| panic!("failed to create {}: {err}", store.display()));
        scene
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `<dir>/lock/kubelet.lock`, passed as `--lock-file`.
    pub fn lock(&self) -> PathBuf {
        self.path().join("lock").join("kubelet.lock")
    }

    /// `<dir>/dynamic-config`, passed as `--dynamic-config-dir`.
    pub fn config_dir(&self) -> PathBuf {
        self.path().join("dynamic-config")
    }

    /// `<dir>/dynamic-config/lock`: the default state directory (holder record and claims).
    pub fn state_dir(&self) -> PathBuf {
        self.config_dir().join("lock")
    }

    /// The stand-in's event log (`STANDIN_LOG`).
    pub fn log(&self) -> PathBuf {
        self.path().join("stand-in.log")
    }

    /// The stand-in's overlap probe (`STANDIN_OVERLAP_PROBE`).
    pub fn probe(&self) -> PathBuf {
        self.path().join("overlap.probe")
    }

    /// Writes [`kubelet_config`]`(extra)` to `<dir>/<name>`; returns its path.
    pub fn kubelet_config_file(&self, name: &str, extra: &str) -> PathBuf {
        let path = self.path().join(name);
        write_file(&path, &kubelet_config(extra));
        path
    }

    /// `<probe>.overlap`, created by a stand-in that found another kubelet running.
    pub fn overlap_marker(&self) -> PathBuf {
        let mut marker = self.probe().into_os_string();
        marker.push(OVERLAP_MARKER_SUFFIX);
        PathBuf::from(marker)
    }

    /// `STANDIN_LOG` and `STANDIN_OVERLAP_PROBE` for this scene.
    pub fn stand_in_env(&self) -> Vec<(String, String)> {
        vec![
            ("STANDIN_LOG".to_owned(), path_string(&self.log())),
            (
                "STANDIN_OVERLAP_PROBE".to_owned(),
                path_string(&self.probe()),
            ),
        ]
    }

    /// `kubelet-pivot <args> --lock-file <lock> --dynamic-config-dir <config_dir> --
    /// <stand-in> <kubelet_args>` with the stand-in env, `RUST_LOG=info`, then `extra_env`,
    /// stdin null and stdout+stderr appended to a file in the scene (see [`Scene::output`];
    /// printed when a test fails). Override with `cmd.stdout(..)` to read output yourself.
    pub fn pivot(
        &self,
        args: &[&str],
        kubelet_args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Command {
        self.pivot_via(&[], args, kubelet_args, extra_env)
    }

    /// [`Scene::pivot`] started through a wrapper program: `wrapper[0] wrapper[1..]
    /// kubelet-pivot ...` (e.g. strace).
    pub fn pivot_via(
        &self,
        wrapper: &[&str],
        args: &[&str],
        kubelet_args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Command {
        let cmd = match wrapper.split_first() {
            None => Command::new(pivot_bin()),
            Some((program, wrapper_args)) => {
                let mut cmd = Command::new(program);
                cmd.args(wrapper_args).arg(pivot_bin());
                cmd
            }
        };
        self.node_command(cmd, args, &stand_in_bin(), kubelet_args, extra_env)
    }

    /// [`Scene::pivot`] with another kubelet-pivot binary (an earlier build: tests/it/skew.rs).
    pub fn pivot_of(
        &self,
        bin: &Path,
        args: &[&str],
        kubelet_args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Command {
        self.node_command(
            Command::new(bin),
            args,
            &stand_in_bin(),
            kubelet_args,
            extra_env,
        )
    }

    /// `cmd` (a kubelet-pivot, maybe through a wrapper) completed as [`Scene::pivot`] says.
    /// `kubelet-pivot checkpoint assign FILE EXTRA.. --dynamic-config-dir <config_dir>`, run
    /// to its end; its output, whatever its status.
    pub fn try_checkpoint_assign(&self, file: &Path, extra: &[&str]) -> std::process::Output {
        Command::new(pivot_bin())
            .env("KUBELET_PIVOT_ENV_FILE", "")
            .args(["checkpoint", "assign"])
            .arg(file)
            .args(extra)
            .arg("--dynamic-config-dir")
            .arg(self.config_dir())
            .output()
            .expect("run kubelet-pivot checkpoint assign")
    }

    /// [`Scene::try_checkpoint_assign`], which must succeed; its stdout.
    pub fn checkpoint_assign(&self, file: &Path, extra: &[&str]) -> String {
        let out = self.try_checkpoint_assign(file, extra);
        assert!(
            out.status.success(),
            "assign failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// [`Scene::pivot`] running `kubelet` (a wrapper of the stand-in) in place of the stand-in.
    pub fn pivot_running(
        &self,
        kubelet: &Path,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Command {
        self.node_command(Command::new(pivot_bin()), args, kubelet, &[], extra_env)
    }

    fn node_command(
        &self,
        mut cmd: Command,
        args: &[&str],
        kubelet: &Path,
        kubelet_args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Command {
        cmd.args(args);
        node_paths(&mut cmd, &self.lock(), &self.config_dir())
            .arg("--")
            .arg(kubelet)
            .args(kubelet_args);
        cmd.env_remove("NOTIFY_SOCKET");
        cmd.envs(self.stand_in_env());
        cmd.env("RUST_LOG", "info");
        cmd.envs(extra_env.iter().copied());
        cmd.stdin(Stdio::null());

        let mut outputs = self.outputs.borrow_mut();
        let path = self.path().join(format!("pivot-{}.out", outputs.len()));
        let out = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .unwrap_or_else(|err| panic!("failed to create {}: {err}", path.display()));
        let err = out
            .try_clone()
            .unwrap_or_else(|err| panic!("failed to dup {}: {err}", path.display()));
        cmd.stdout(out).stderr(err);
        outputs.push(path);
        cmd
    }

    /// `program` with the stand-in env (and no `NOTIFY_SOCKET`), stdin, stdout and stderr null:
    /// for stand-ins run without kubelet-pivot.
    pub fn stand_in_command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_remove("NOTIFY_SOCKET")
            .envs(self.stand_in_env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    /// A plain kubelet: the stand-in run directly with `--lock-file <lock>`, so it blocks in
    /// flock on the lock file without a claim, like a kubelet started outside kubelet-pivot.
    pub fn plain_kubelet(&self) -> Command {
        let mut cmd = self.stand_in_command(stand_in_bin());
        cmd.arg("--lock-file").arg(self.lock());
        cmd
    }

    /// Spawns a command (usually from [`Scene::pivot`]) as a [`Proc`].
    pub fn spawn(&self, mut cmd: Command) -> Proc {
        Proc::spawn(&mut cmd)
    }

    /// Captured stdout+stderr of every pivot built by this scene so far, in build order.
    pub fn output(&self) -> String {
        self.outputs
            .borrow()
            .iter()
            .map(|path| {
                let text = fs::read_to_string(path).unwrap_or_default();
                format!("==== {} ====\n{text}", path.display())
            })
            .collect()
    }

    /// The files [`Scene::output`] reads, in build order (one per pivot command).
    pub fn output_paths(&self) -> Vec<PathBuf> {
        self.outputs.borrow().clone()
    }

    pub fn read_log(&self) -> Vec<LogLine> {
        read_log(&self.log())
    }

    /// `start` lines, in log order.
    pub fn starts(&self) -> Vec<LogLine> {
        self.events("start")
    }

    /// All lines of one event kind, in log order.
    pub fn events(&self, event: &str) -> Vec<LogLine> {
        self.read_log()
            .into_iter()
            .filter(|line| line.event == event)
            .collect()
    }

    pub fn running_kubelets(&self) -> Vec<i32> {
        running_kubelets(&self.log())
    }

    /// The newest running kubelet that supervisor `sup` started, if any.
    pub fn kubelet_of(&self, sup: i32) -> Option<i32> {
        let running = self.running_kubelets();
        self.starts()
            .iter()
            .rev()
            .find(|line| line.ppid() == sup && running.contains(&line.pid))
            .map(|line| line.pid)
    }

    /// The last `start` line of kubelet `pid`.
    pub fn start_of(&self, pid: i32) -> Option<LogLine> {
        self.starts().into_iter().rev().find(|line| line.pid == pid)
    }

    /// Content of the `--config` file kubelet `pid` was started with (the `config=` of its
    /// last `start` line); empty if it cannot be read.
    pub fn config_of(&self, pid: i32) -> String {
        let start = self
            .start_of(pid)
            .unwrap_or_else(|| panic!("no start line of kubelet {pid}"));
        let path = start.field("config").expect("config= in the start line");
        fs::read_to_string(path).unwrap_or_default()
    }

    /// Panics if any stand-in reported OVERLAP (log line or `<probe>.overlap` marker).
    pub fn assert_no_overlap(&self) {
        let overlaps: Vec<String> = self
            .events("OVERLAP")
            .into_iter()
            .map(|line| line.raw)
            .collect();
        let marker = fs::read_to_string(self.overlap_marker()).ok();
        assert!(
            overlaps.is_empty() && marker.is_none(),
            "two kubelets ran at once: OVERLAP log lines {overlaps:#?}, marker {}: {marker:?}\nfull log:\n{}",
            self.overlap_marker().display(),
            fs::read_to_string(self.log()).unwrap_or_default()
        );
    }

    /// SIGKILLs every live stand-in (kubelet, lock waiter or grandchild) of this scene.
    pub fn kill_stand_ins(&self) {
        let mut pids: Vec<i32> = self
            .read_log_lenient()
            .iter()
            .map(|line| line.pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        for pid in pids {
            if is_stand_in_of(pid, &self.log()) {
                signal_pid(pid, Signal::SIGKILL);
            }
        }
    }

    /// Like [`Scene::read_log`] but skips malformed lines instead of panicking (for drop).
    fn read_log_lenient(&self) -> Vec<LogLine> {
        fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .filter_map(LogLine::parse)
            .collect()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "---- scene {} ----\n{}\n---- stand-in log ----\n{}",
                self.path().display(),
                self.output(),
                fs::read_to_string(self.log()).unwrap_or_default()
            );
        }
        self.kill_stand_ins();
    }
}

/// Adds `--lock-file <lock> --dynamic-config-dir <config_dir>` to a kubelet-pivot command,
/// and no settings file: an operator command must not read the machine's
/// /etc/default/kubelet-pivot (its KUBELET_PIVOT_STATE_DIR would win over the default).
pub fn node_paths<'a>(cmd: &'a mut Command, lock: &Path, config_dir: &Path) -> &'a mut Command {
    cmd.env("KUBELET_PIVOT_ENV_FILE", "")
        .arg("--lock-file")
        .arg(lock)
        .arg("--dynamic-config-dir")
        .arg(config_dir)
}

fn path_string(path: &Path) -> String {
    path.to_str()
        .unwrap_or_else(|| panic!("temp path {} is not UTF-8", path.display()))
        .to_owned()
}

/// Creates (or truncates) `path` with `contents`, panicking with the path on failure.
pub fn write_file(path: &Path, contents: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)
            .unwrap_or_else(|err| panic!("failed to create {}: {err}", parent.display()));
    }
    fs::write(path, contents)
        .unwrap_or_else(|err| panic!("failed to write {}: {err}", path.display()));
}
