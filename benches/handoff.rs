//! Handoff benchmark: how long from a contender's `open()` of the lock file to the exec of its
//! kubelet, for kubelet-pivot and for the shell baseline `scripts/shell-pivot.sh` (util-linux
//! `flock` + inotify-tools `inotifywait`, the pivot a user would write from the background design (ARCHITECTURE.md, "Background")).
//!
//!     cargo build --release --examples      # the stand-in kubelet is an example target
//!     cargo bench --bench handoff           # 200 handoffs each
//!     cargo bench --bench handoff -- --quick  # 20 each; HANDOFF_ROUNDS=N sets any count
//!     cargo bench --bench handoff -- --quick --guard=0.8  # exit 1 below 0.8x the shell pivot
//!
//! `--guard=RATIO` (or HANDOFF_GUARD=RATIO) is the regression guard `scripts/test.sh` runs:
//! the bench fails when kubelet-pivot's p50 (open -> execve) is less than RATIO times as fast
//! as the shell pivot's in the same run. A first run below it is confirmed by a second, longer
//! one (GUARD_CONFIRM_ROUNDS) before the guard fails: one noisy quick run is not a regression.
//! The bench also times each kind of look a holder makes at a contender (`handoff/looks.rs`).
//!
//! Each round of kubelet-pivot: the bootstrap holds the lock and runs the stand-in kubelet; a
//! `self-hosted --generation 1` contender starts; the bootstrap yields; then the contender gets
//! SIGTERM (pod deletion) and the bootstrap takes back (reported separately, not in the ratio).
//! Each round of the baseline: a holder script holds the lock and runs the stand-in; a
//! contender script starts; the holder sees the open, stops its kubelet and exits; then the
//! contender's kubelet gets SIGTERM.
//!
//! The contender's open time comes from this process's own inotify watch on the lock file
//! (IN_OPEN, read on a dedicated thread, CLOCK_REALTIME): nothing else opens the lock file
//! while a contender starts, so the first IN_OPEN after its spawn is its open. The kubelet's
//! exec is timed the same way: execve(2) opens the kubelet binary, which raises IN_OPEN on it,
//! and nothing else opens the stand-in's binary during a round. That is where a pivot's work
//! ends. The stand-in's own loading (dynamic linker, Rust runtime) until its first instruction,
//! the `t=` of its `start` line, comes on top and is the same for both pivots; both figures
//! are printed. The lock
//! directory and the dynamic config directory live on tmpfs (/dev/shm if present), like
//! /run/lock on a node; HANDOFF_CONFIG_DIR=DIR puts the dynamic config directory under DIR.
//! The stand-in exits at once on SIGTERM, so the figures are the pivots' own cost.

#[path = "handoff/looks.rs"]
mod looks;
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, UNIX_EPOCH};

use inotify::WatchMask;
use nix::sys::signal::Signal;
use support::bench::{fail, inotify_times, stand_in, stats, Stats};
use support::{node_paths, now_ns, pivot_bin, read_log, wait_until, LogLine, Proc};

/// Handoffs per implementation by default, and with `--quick`.
const DEFAULT_ROUNDS: usize = 200;
const QUICK_ROUNDS: usize = 20;
/// Deadline for any one state to be reached.
const DEADLINE: Duration = Duration::from_secs(10);
/// Targets for kubelet-pivot's open -> kubelet execve (issue 11).
const TARGET_P50_MS: f64 = 1.5;
const TARGET_P99_MS: f64 = 5.0;
const BASELINE_SCRIPT: &str = "scripts/shell-pivot.sh";
/// Rounds of the run that confirms a guard failure.
const GUARD_CONFIRM_ROUNDS: usize = 60;
/// Looks of each kind timed.
const LOOK_ROUNDS: usize = 200;

fn ms_between(from_ns: u128, to_ns: u128) -> f64 {
    assert!(
        to_ns >= from_ns,
        "exec at {to_ns} ns came before the open at {from_ns} ns"
    );
    // Intervals are milliseconds: far below f64's exact integer range.
    (to_ns - from_ns) as f64 / 1e6
}

/// Makes the calling thread SCHED_FIFO with util-linux `chrt`, so that it reads an inotify
/// event (and takes its timestamp) as soon as the open happened, even with every core busy
/// with the pivots. Without the privilege the figures carry the thread's wake-up delay.
fn realtime_priority() {
    let tid = nix::unistd::gettid().to_string();
    let raised = Command::new("chrt")
        .args(["--fifo", "--pid", "50", &tid])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !raised {
        eprintln!(
            "handoff bench: cannot make the inotify thread SCHED_FIFO (`chrt` failed); open \
             times may be late by scheduling delays"
        );
    }
}

/// Timestamps of IN_OPEN events on one file, read on a dedicated thread.
struct OpenWatch {
    opens: Receiver<u128>,
}

impl OpenWatch {
    fn new(path: &Path) -> OpenWatch {
        let opens = inotify_times(
            "open-watch",
            path,
            WatchMask::OPEN,
            realtime_priority,
            |_| true,
        );
        OpenWatch { opens }
    }

    /// Forgets opens seen so far (the holder's own open when it started).
    fn drain(&self) {
        while self.opens.try_recv().is_ok() {}
    }

    fn next_open(&self, what: &str) -> u128 {
        match self.opens.recv_timeout(DEADLINE) {
            Ok(at) => at,
            Err(RecvTimeoutError::Timeout) => fail(&format!("no open of {what}")),
            Err(RecvTimeoutError::Disconnected) => fail("the inotify thread stopped"),
        }
    }

    /// The first open at or after `at` (earlier ones belong to earlier execs).
    fn next_open_after(&self, at: u128, what: &str) -> u128 {
        loop {
            let t = self.next_open(what);
            if t >= at {
                return t;
            }
        }
    }
}

/// A lock directory on tmpfs with its stand-in log and overlap probe.
struct Node {
    dir: tempfile::TempDir,
    config_parent: Option<tempfile::TempDir>,
    stand_in: PathBuf,
    outputs: usize,
}

impl Node {
    fn new(name: &str, stand_in: &Path) -> Node {
        let tmpfs = Path::new("/dev/shm");
        let base = if tmpfs.is_dir() {
            tmpfs.to_owned()
        } else {
            std::env::temp_dir()
        };
        let dir = tempfile::Builder::new()
            .prefix(&format!("kubelet-pivot-bench-{name}-"))
            .tempdir_in(&base)
            .unwrap_or_else(|err| fail(&format!("temp dir in {}: {err}", base.display())));
        let config_parent = std::env::var_os("HANDOFF_CONFIG_DIR").map(|parent| {
            tempfile::Builder::new()
                .prefix("kubelet-pivot-bench-config-")
                .tempdir_in(&parent)
                .unwrap_or_else(|err| fail(&format!("temp dir in {parent:?}: {err}")))
        });
        fs::create_dir(dir.path().join("lock")).unwrap_or_else(|err| fail(&err.to_string()));
        // The watch needs the file; every pivot opens it without truncating.
        File::create(dir.path().join("lock").join("kubelet.lock"))
            .unwrap_or_else(|err| fail(&format!("create the lock file: {err}")));
        Node {
            dir,
            config_parent,
            stand_in: stand_in.to_owned(),
            outputs: 0,
        }
    }

    fn lock(&self) -> PathBuf {
        self.dir.path().join("lock").join("kubelet.lock")
    }

    fn config_dir(&self) -> PathBuf {
        self.config_parent
            .as_ref()
            .map_or(self.dir.path(), |parent| parent.path())
            .join("dynamic-config")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("stand-in.log")
    }

    /// A command with the stand-in's environment and output to a fresh file in the node.
    fn command(&mut self, program: &Path) -> Command {
        self.command_logged(program).0
    }

    /// [`Node::command`] and the file its stdout and stderr go to.
    fn command_logged(&mut self, program: &Path) -> (Command, PathBuf) {
        let mut cmd = Command::new(program);
        cmd.env_remove("NOTIFY_SOCKET")
            .env("STANDIN_LOG", self.log())
            .env(
                "STANDIN_OVERLAP_PROBE",
                self.dir.path().join("overlap.probe"),
            )
            .env("RUST_LOG", "info")
            .stdin(Stdio::null());
        let path = self.dir.path().join(format!("out-{}.log", self.outputs));
        self.outputs += 1;
        let out = File::create(&path).unwrap_or_else(|err| fail(&err.to_string()));
        let err = out.try_clone().unwrap_or_else(|err| fail(&err.to_string()));
        cmd.stdout(out).stderr(err);
        (cmd, path)
    }

    /// Starts `kubelet-pivot <args>`; returns it and the file it logs to.
    fn pivot(&mut self, args: &[&str]) -> (Proc, PathBuf) {
        let (mut cmd, output) = self.command_logged(&pivot_bin());
        cmd.args(args);
        node_paths(&mut cmd, &self.lock(), &self.config_dir())
            .arg("--")
            .arg(&self.stand_in);
        (Proc::spawn(&mut cmd), output)
    }

    fn shell_pivot(&mut self, script: &Path, mode: &str, ready: Option<&Path>) -> Proc {
        let mut cmd = self.command(script);
        cmd.arg(mode).arg(self.lock()).arg("--").arg(&self.stand_in);
        if let Some(ready) = ready {
            cmd.env("SHELL_PIVOT_READY", ready);
        }
        Proc::spawn(&mut cmd)
    }

    /// Waits for a `start` line that `matches` and returns it.
    fn wait_start(&self, what: &str, matches: impl Fn(&LogLine) -> bool) -> LogLine {
        wait_until(DEADLINE, what, || {
            read_log(&self.log())
                .into_iter()
                .find(|line| line.event == "start" && matches(line))
        })
    }

    fn assert_no_overlap(&self) {
        let overlaps: Vec<String> = read_log(&self.log())
            .into_iter()
            .filter(|line| line.event == "OVERLAP")
            .map(|line| line.raw)
            .collect();
        if !overlaps.is_empty() {
            fail(&format!("two kubelets ran at once: {overlaps:#?}"));
        }
    }
}

/// One round's measurements in ms.
struct Samples {
    /// open -> the kubelet's execve.
    handoff: Vec<f64>,
    /// open -> the kubelet's first instruction (its own loading included).
    handoff_main: Vec<f64>,
    takeback: Vec<f64>,
    /// kubelet-pivot's handoff in phases, from the holder's log (see [`phases`]).
    phases: [Vec<f64>; 3],
}

const PHASES: [&str; 3] = [
    "  1 open -> holder decides to yield",
    "  2 decision -> kubelet stopped, lock released",
    "  3 release -> contender's kubelet execve",
];
/// Holder log messages that end phases 1 and 2.
const YIELD_DECIDED: &str = "verified contender is blocked on the lock; yielding";
const LOCK_RELEASED: &str = "standing by: handing the lock to";

/// Times (ns) of the holder's log lines containing `message` (the tracing timestamp).
fn log_times(path: &Path, message: &str) -> Vec<u128> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(message))
        .filter_map(|line| {
            let stamp = line.split_whitespace().next()?;
            let at = humantime::parse_rfc3339(stamp).ok()?;
            Some(at.duration_since(UNIX_EPOCH).ok()?.as_nanos())
        })
        .collect()
}

/// Splits each handoff `(open, exec)` at the holder's first yield decision and release after
/// the open (log timestamps are taken when the line is written: a little after the fact).
fn phases(holder_log: &Path, handoffs: &[(u128, u128)]) -> [Vec<f64>; 3] {
    let decided = log_times(holder_log, YIELD_DECIDED);
    let released = log_times(holder_log, LOCK_RELEASED);
    let mut out: [Vec<f64>; 3] = Default::default();
    for (open, exec) in handoffs {
        let first_after = |times: &[u128], at: u128| times.iter().copied().find(|t| *t >= at);
        let Some(decision) = first_after(&decided, *open) else {
            continue;
        };
        let Some(release) = first_after(&released, decision).filter(|t| t <= exec) else {
            continue;
        };
        out[0].push(ms_between(*open, decision));
        out[1].push(ms_between(decision, release));
        out[2].push(ms_between(release, *exec));
    }
    out
}

fn bench_kubelet_pivot(rounds: usize, stand_in: &Path) -> Samples {
    let mut node = Node::new("ours", stand_in);
    let watch = OpenWatch::new(&node.lock());
    let execs = OpenWatch::new(stand_in);
    let (boot, boot_log) = node.pivot(&["bootstrap"]);
    let boot_pid = boot.pid();
    let mut boot_kubelet = node
        .wait_start("the bootstrap's kubelet", |line| line.ppid() == boot_pid)
        .pid;
    let mut samples = Samples {
        handoff: Vec::with_capacity(rounds),
        handoff_main: Vec::with_capacity(rounds),
        takeback: Vec::with_capacity(rounds),
        phases: Default::default(),
    };
    let mut handoffs = Vec::with_capacity(rounds);
    for round in 0..rounds {
        watch.drain();
        execs.drain();
        let (mut contender, _) = node.pivot(&["self-hosted", "--generation", "1"]);
        let contender_pid = contender.pid();
        let opened = watch.next_open(&format!(
            "the lock by contender {contender_pid} (round {round})"
        ));
        let start = node.wait_start(&format!("contender {contender_pid}'s kubelet"), |line| {
            line.ppid() == contender_pid
        });
        let exec = execs.next_open_after(opened, "the kubelet binary by an execve");
        samples.handoff.push(ms_between(opened, exec));
        samples.handoff_main.push(ms_between(opened, start.t_ns));
        handoffs.push((opened, exec));

        let terminated = now_ns();
        contender.signal(Signal::SIGTERM);
        let previous = boot_kubelet;
        let back = node.wait_start("the bootstrap to take back", |line| {
            line.ppid() == boot_pid && line.pid != previous && line.t_ns > terminated
        });
        boot_kubelet = back.pid;
        samples.takeback.push(ms_between(terminated, back.t_ns));
        contender.wait_exit(DEADLINE);
    }
    node.assert_no_overlap();
    drop(boot);
    samples.phases = phases(&boot_log, &handoffs);
    samples
}

fn bench_shell_pivot(rounds: usize, stand_in: &Path, script: &Path) -> Samples {
    let mut node = Node::new("shell", stand_in);
    let watch = OpenWatch::new(&node.lock());
    let execs = OpenWatch::new(stand_in);
    let ready = node.dir.path().join("inotifywait.ready");
    let mut samples = Samples {
        handoff: Vec::with_capacity(rounds),
        handoff_main: Vec::with_capacity(rounds),
        takeback: Vec::new(),
        phases: Default::default(),
    };
    for round in 0..rounds {
        let _ = fs::remove_file(&ready);
        let mut holder = node.shell_pivot(script, "holder", Some(&ready));
        let holder_pid = holder.pid();
        node.wait_start(&format!("holder script {holder_pid}'s kubelet"), |line| {
            line.ppid() == holder_pid
        });
        wait_until(
            DEADLINE,
            "the holder's inotifywait to watch the lock",
            || {
                fs::read_to_string(&ready)
                    .ok()
                    .filter(|text| text.contains("Watches established"))
            },
        );
        watch.drain();
        execs.drain();
        let mut contender = node.shell_pivot(script, "contender", None);
        let contender_pid = contender.pid();
        let opened = watch.next_open(&format!(
            "the lock by contender script {contender_pid} (round {round})"
        ));
        // The contender script execs its kubelet: same pid.
        let start = node.wait_start(&format!("contender {contender_pid}'s kubelet"), |line| {
            line.pid == contender_pid
        });
        let exec = execs.next_open_after(opened, "the kubelet binary by an execve");
        samples.handoff.push(ms_between(opened, exec));
        samples.handoff_main.push(ms_between(opened, start.t_ns));
        holder.wait_exit(DEADLINE);
        contender.signal(Signal::SIGTERM);
        contender.wait_exit(DEADLINE);
    }
    node.assert_no_overlap();
    samples
}

fn row(name: &str, s: &Stats) {
    println!(
        "{name:<50} {:>6} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
        s.n, s.p50, s.p99, s.max, s.mean
    );
}

fn verdict(met: bool) -> &'static str {
    if met {
        "MET"
    } else {
        "NOT MET"
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds = match std::env::var("HANDOFF_ROUNDS") {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| fail(&format!("HANDOFF_ROUNDS={value:?} is not a count"))),
        Err(_) if args.iter().any(|arg| arg == "--quick") => QUICK_ROUNDS,
        Err(_) => DEFAULT_ROUNDS,
    };
    let stand_in = stand_in();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(BASELINE_SCRIPT);
    for tool in ["flock", "inotifywait"] {
        let found = Command::new(tool)
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            fail(&format!(
                "`{tool}` not found: the baseline needs util-linux and inotify-tools"
            ));
        }
    }
    let guard = guard_ratio(&args);
    let began = Instant::now();
    let mut speedup = run(rounds, &stand_in, &script);
    if let Some(ratio) = guard {
        if speedup < ratio {
            println!(
                "\nguard: {speedup:.2}x is below {ratio:.2}x; confirming with {GUARD_CONFIRM_ROUNDS} rounds\n"
            );
            speedup = run(GUARD_CONFIRM_ROUNDS, &stand_in, &script);
        }
    }
    let costs = looks::measure(&std::env::temp_dir(), LOOK_ROUNDS);
    println!();
    println!(
        "{:<50} {:>6} {:>9} {:>9} {:>9} {:>9}",
        "look at a contender (us)", "n", "p50", "p99", "max", "mean"
    );
    row("full look: read /proc/locks", &costs.full);
    row(
        "fast look: the claimant's syscall and fd files",
        &costs.fast,
    );
    println!(
        "fast look vs full look, p50: {:.2}x",
        costs.full.p50 / costs.fast.p50
    );
    println!("elapsed: {:.1} s", began.elapsed().as_secs_f64());
    if let Some(ratio) = guard {
        let pass = speedup >= ratio;
        println!(
            "guard: kubelet-pivot's p50 is {speedup:.2}x the shell pivot's; at least {ratio:.2}x required: {}",
            if pass { "PASS" } else { "FAIL" }
        );
        if !pass {
            std::process::exit(1);
        }
    }
}

/// The guard's ratio from `--guard=RATIO` or HANDOFF_GUARD.
fn guard_ratio(args: &[String]) -> Option<f64> {
    let value = args
        .iter()
        .find_map(|arg| arg.strip_prefix("--guard=").map(str::to_owned))
        .or_else(|| std::env::var("HANDOFF_GUARD").ok())?;
    match value.parse::<f64>() {
        Ok(ratio) if ratio > 0.0 => Some(ratio),
        _ => fail(&format!("guard ratio {value:?} is not a positive number")),
    }
}

/// One bench run of `rounds` handoffs each; prints the table, returns the p50 speedup.
fn run(rounds: usize, stand_in: &Path, script: &Path) -> f64 {
    println!("handoff bench: {rounds} handoffs each; open of the lock -> exec of the new kubelet");
    let ours = bench_kubelet_pivot(rounds, stand_in);
    let baseline = bench_shell_pivot(rounds, stand_in, script);
    let ours_stats = stats(&ours.handoff);
    let ours_main = stats(&ours.handoff_main);
    let takeback_stats = stats(&ours.takeback);
    let baseline_stats = stats(&baseline.handoff);
    let baseline_main = stats(&baseline.handoff_main);
    let speedup = baseline_stats.p50 / ours_stats.p50;
    let speedup_main = baseline_main.p50 / ours_main.p50;

    println!();
    println!(
        "{:<50} {:>6} {:>9} {:>9} {:>9} {:>9}",
        "handoff (ms)", "n", "p50", "p99", "max", "mean"
    );
    row(
        "kubelet-pivot: open -> contender kubelet execve",
        &ours_stats,
    );
    for (name, phase) in PHASES.iter().zip(&ours.phases) {
        if !phase.is_empty() {
            row(name, &stats(phase));
        }
    }
    row(
        "shell-pivot.sh: open -> contender kubelet execve",
        &baseline_stats,
    );
    row(
        "kubelet-pivot: open -> kubelet's first instruction",
        &ours_main,
    );
    row(
        "shell-pivot.sh: open -> kubelet's first instruction",
        &baseline_main,
    );
    row(
        "kubelet-pivot: SIGTERM -> bootstrap kubelet exec",
        &takeback_stats,
    );
    println!();
    println!(
        "kubelet-pivot vs shell pivot, p50: {speedup:.2}x to execve, {speedup_main:.2}x to the kubelet's first instruction"
    );
    println!(
        "target p50 <= {TARGET_P50_MS} ms (open -> execve): {} ({:.3} ms)",
        verdict(ours_stats.p50 <= TARGET_P50_MS),
        ours_stats.p50
    );
    println!(
        "target p99 <= {TARGET_P99_MS} ms (open -> execve): {} ({:.3} ms)",
        verdict(ours_stats.p99 <= TARGET_P99_MS),
        ours_stats.p99
    );
    println!(
        "faster than the shell pivot at p50: {} ({speedup:.2}x)",
        verdict(speedup > 1.0)
    );
    speedup
}
