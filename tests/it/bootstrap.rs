//! `kubelet-pivot bootstrap` end to end: the real binary, the stand-in kubelet, real flock,
//! inotify, signals and /proc. Every wait is on an observable fact (stand-in log lines, the
//! holder record, /proc/locks, /proc/PID); the only sleeps are bounded negative waits, each
//! commented as such.

use crate::support;

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

// The holder record is read strictly (a corrupt record fails the test), and /proc/locks is
// parsed by the tests' own parser (`flocks_on`), not the product's.
use support::lock_state::{checked_holder_record, flocks_on, status};
use support::{now_ns, pid_alive, wait_until, LogLine, Proc, Scene};

/// Deadline for things that should happen within a fraction of a second.
const DEADLINE: Duration = Duration::from_secs(5);
/// Exit code of `kubelet-pivot status` without a live holder.
const STATUS_NO_HOLDER: i32 = 3;
/// The design's availability bound (I2) plus a margin for the stand-in's own start.
const TAKEOVER_BOUND: Duration = Duration::from_millis(1500);
/// `--stop-timeout` used by the SIGKILL escalation test.
const STOP_TIMEOUT: Duration = Duration::from_secs(1);
/// How much later than `--stop-timeout` the stubborn kubelet may die (SIGKILL, reaping).
const KILL_SLACK: Duration = Duration::from_millis(1500);
/// First restart delay after a crash; each further one doubles.
const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// How long the holder looks for an opener to block in flock after an open (500 ms in the
/// product), plus slack: a negative wait of this length covers the whole window.
const OPEN_WINDOW_AND_SLACK: Duration = Duration::from_millis(700);

/// Makes the kubelet linger after SIGTERM, so that a handoff or restart that does not wait for
/// it to exit shows up as an overlap or as a start before its `stop` line.
const SLOW_STOP: (&str, &str) = ("STANDIN_TERM_DELAY_MS", "200");

/// `kubelet-pivot bootstrap <args> ...` running the stand-in with `env`.
fn bootstrap(scene: &Scene, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut all = vec!["bootstrap"];
    all.extend_from_slice(args);
    scene.spawn(scene.pivot(&all, &[], env))
}

/// A plain kubelet contender: the stand-in run directly with `--lock-file`, so it blocks in
/// flock on the lock file without a claim, like a kubelet started outside kubelet-pivot.
fn contender(scene: &Scene) -> Proc {
    let out_path = scene.path().join("contender.out");
    let out = File::create(&out_path)
        .unwrap_or_else(|err| panic!("failed to create {}: {err}", out_path.display()));
    let err = out
        .try_clone()
        .unwrap_or_else(|err| panic!("failed to dup {}: {err}", out_path.display()));
    let mut cmd = scene.plain_kubelet();
    cmd.stdout(out).stderr(err);
    Proc::spawn(&mut cmd)
}

/// Waits for the first `start` line matching `pred`.
fn wait_start(scene: &Scene, what: &str, pred: impl Fn(&LogLine) -> bool) -> LogLine {
    wait_until(DEADLINE, what, || scene.starts().into_iter().find(&pred))
}

/// Waits for a kubelet started by supervisor `pivot` whose pid is not in `not`.
fn kubelet_of(scene: &Scene, pivot: i32, not: &[i32]) -> LogLine {
    wait_start(
        scene,
        &format!("a new kubelet of supervisor {pivot}"),
        |line| line.num("ppid") == i128::from(pivot) && !not.contains(&line.pid),
    )
}

/// Waits until the plain kubelet `plain` has started after kubelet `old` was handed over
/// to it: `plain` blocked on the lock first, then `old` was stopped, then `plain` started.
fn handed_over(scene: &Scene, old: &LogLine, plain: &Proc) {
    let start = wait_start(scene, "the contender's start", |line| {
        line.pid == plain.pid()
    });
    assert_eq!(start.field("lock"), scene.lock().to_str(), "{}", start.raw);
    let blocked = events_of(scene, "lock-wait", plain.pid());
    assert_eq!(
        blocked.len(),
        1,
        "the contender should have blocked on the held lock first"
    );
    let term = wait_event(scene, "term", old.pid);
    let stop = wait_event(scene, "stop", old.pid);
    assert!(
        blocked[0].t_ns < term.t_ns,
        "the kubelet was stopped before the contender blocked:\n{}\n{}",
        blocked[0].raw,
        term.raw
    );
    assert!(
        start.num("ready") > unix_ns(&stop),
        "the contender started before the old kubelet stopped:\n{}\n{}",
        stop.raw,
        start.raw
    );
    assert!(!pid_alive(old.pid), "old kubelet {} still alive", old.pid);
}

/// Waits for the `event` line of `pid` (`stop`, `term`, ...).
fn wait_event(scene: &Scene, event: &str, pid: i32) -> LogLine {
    wait_until(DEADLINE, &format!("`{event}` of pid {pid}"), || {
        scene.events(event).into_iter().find(|line| line.pid == pid)
    })
}

fn events_of(scene: &Scene, event: &str, pid: i32) -> Vec<LogLine> {
    scene
        .events(event)
        .into_iter()
        .filter(|line| line.pid == pid)
        .collect()
}

/// Starts a bootstrap and waits until it holds the lock and runs its first kubelet.
fn start_holding(scene: &Scene, args: &[&str], env: &[(&str, &str)]) -> (Proc, LogLine) {
    let pivot = bootstrap(scene, args, env);
    let kubelet = kubelet_of(scene, pivot.pid(), &[]);
    wait_holder(scene, pivot.pid(), kubelet.pid);
    (pivot, kubelet)
}

/// Starts a holding bootstrap (its kubelet with `holder_env`) and a second bootstrap that
/// waits blocked on the lock: (holder, holder's kubelet, waiter).
fn start_holder_and_waiter(scene: &Scene, holder_env: &[(&str, &str)]) -> (Proc, LogLine, Proc) {
    let (holder, kubelet) = start_holding(scene, &[], holder_env);
    let waiter = bootstrap(scene, &[], &[]);
    wait_blocked(scene, waiter.pid());
    (holder, kubelet, waiter)
}

/// Asserts that supervisor `pivot` holds the lock running `kubelet`, the only kubelet, and
/// that no two kubelets ever overlapped.
fn assert_sole_kubelet(scene: &Scene, pivot: i32, kubelet: i32) {
    wait_holder(scene, pivot, kubelet);
    assert_eq!(scene.running_kubelets(), vec![kubelet]);
    scene.assert_no_overlap();
}

/// A stand-in log line's `t` as a signed number, for differences.
fn unix_ns(line: &LogLine) -> i128 {
    i128::try_from(line.t_ns)
        .unwrap_or_else(|err| panic!("time overflows i128 in {}: {err}", line.raw))
}

fn unix_ns_now() -> i128 {
    i128::try_from(now_ns()).unwrap_or_else(|err| panic!("time overflows i128: {err}"))
}

fn ns(duration: Duration) -> i128 {
    i128::try_from(duration.as_nanos()).unwrap_or_else(|err| panic!("{duration:?}: {err}"))
}

fn ms(nanos: i128) -> f64 {
    nanos as f64 / 1e6
}

/// Waits until the holder record names supervisor `pivot` running kubelet `kubelet`.
fn wait_holder(scene: &Scene, pivot: i32, kubelet: i32) -> Value {
    wait_until(
        DEADLINE,
        &format!("holder record of pid {pivot} with kubeletPid {kubelet}"),
        || {
            checked_holder_record(&scene.state_dir())
                .filter(|rec| rec["pid"] == pivot && rec["kubeletPid"] == kubelet)
        },
    )
}

/// Waits until supervisor `pid` is blocked in flock on the file now at the lock path.
fn wait_blocked(scene: &Scene, pid: i32) {
    wait_until(DEADLINE, &format!("pid {pid} to block on the lock"), || {
        flocks_on(&scene.lock())
            .contains(&(true, pid))
            .then_some(())
    });
}

/// Waits for the `grandchild` line of the grandchild forked by stand-in `kubelet`.
fn wait_grandchild(scene: &Scene, kubelet: i32) -> LogLine {
    wait_until(
        DEADLINE,
        &format!("the grandchild of kubelet {kubelet}"),
        || {
            scene
                .events("grandchild")
                .into_iter()
                .find(|line| line.num("ppid") == i128::from(kubelet))
        },
    )
}

fn inode_of(path: &Path) -> u64 {
    fs::metadata(path)
        .unwrap_or_else(|err| panic!("failed to stat {}: {err}", path.display()))
        .ino()
}

/// An operator's `cat` of the lock file: an open that is no contender.
fn cat_lock(scene: &Scene) {
    let cat = Command::new("cat")
        .arg(scene.lock())
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|err| panic!("failed to run cat: {err}"));
    assert!(cat.success(), "cat of the lock file failed: {cat}");
}

/// Asserts that nothing disturbs `kubelet` for a while: no SIGTERM, still the only kubelet.
fn assert_undisturbed(scene: &Scene, kubelet: &LogLine, after: &str) {
    // Bounded negative wait (permitted: asserting that nothing happens): longer than the
    // window in which the holder re-checks contention after an open or a claim change.
    thread::sleep(OPEN_WINDOW_AND_SLACK);
    assert!(
        scene.events("term").is_empty(),
        "the holder stopped its kubelet {after}: {:#?}",
        scene.events("term")
    );
    assert_eq!(scene.running_kubelets(), vec![kubelet.pid]);
}

/// Asserts that no process that ever wrote to the scene's log is alive.
fn assert_nothing_running(scene: &Scene) {
    let alive: Vec<String> = scene
        .read_log()
        .into_iter()
        .filter(|line| pid_alive(line.pid))
        .map(|line| line.raw)
        .collect();
    assert!(alive.is_empty(), "stand-ins still running: {alive:#?}");
}

/// The seed sequence: hold, yield to a plain kubelet blocked on the lock, take over again
/// when it dies.
#[test]
fn yields_to_a_plain_kubelet_and_takes_over_when_it_dies() {
    let scene = Scene::new();
    let (mut pivot, first) = start_holding(&scene, &[], &[SLOW_STOP]);

    let mut plain = contender(&scene);
    handed_over(&scene, &first, &plain);
    assert!(pivot.is_running(), "bootstrap exited after yielding");

    let killed_at = unix_ns_now();
    assert!(plain.signal(Signal::SIGKILL), "contender exited by itself");
    plain.wait_exit(DEADLINE);
    let second = kubelet_of(&scene, pivot.pid(), &[first.pid]);
    assert!(
        unix_ns(&second) > killed_at,
        "bootstrap started a kubelet before the contender was killed: {}",
        second.raw
    );
    assert_sole_kubelet(&scene, pivot.pid(), second.pid);
}

/// I2 and I1: the holder is SIGKILLed; its kubelet dies with it and the waiting bootstrap
/// runs a kubelet within the availability bound.
#[test]
fn waiting_bootstrap_takes_over_within_a_second_of_a_sigkill() {
    let scene = Scene::new();
    let (mut holder, old, waiter) = start_holder_and_waiter(&scene, &[]);

    let killed_at = unix_ns_now();
    assert!(holder.signal(Signal::SIGKILL), "holder exited by itself");
    let killed = Instant::now();
    holder.wait_exit(DEADLINE);
    wait_until(
        Duration::from_secs(1),
        "the old kubelet to die with its supervisor (PDEATHSIG)",
        || (!pid_alive(old.pid)).then_some(()),
    );
    let new = kubelet_of(&scene, waiter.pid(), &[]);
    let latency = new.num("ready") - killed_at;
    eprintln!(
        "takeover: kubelet exec {:.1} ms, ready {:.1} ms after the SIGKILL (seen after {:?})",
        ms(unix_ns(&new) - killed_at),
        ms(latency),
        killed.elapsed()
    );
    assert!(
        latency < ns(TAKEOVER_BOUND),
        "the waiting bootstrap's kubelet was ready {:.1} ms after the holder was killed (bound {TAKEOVER_BOUND:?}): {}",
        ms(latency),
        new.raw
    );
    assert!(
        events_of(&scene, "term", old.pid).is_empty(),
        "the old kubelet got SIGTERM: the holder yielded to an equal-rank bootstrap"
    );
    assert_sole_kubelet(&scene, waiter.pid(), new.pid);
    // The takeover says why, naming the dead holder.
    let why = format!(
        "took the lock: the previous holder is gone without releasing it (killed or crashed) rank=bootstrap previous=bootstrap previous_pid={}",
        holder.pid()
    );
    let output = scene.output();
    assert!(output.contains(&why), "no {why:?} in\n{output}");
}

/// A kubelet that ignores SIGTERM is SIGKILLed after --stop-timeout; the pivot exits 0.
#[test]
fn sigterm_escalates_to_sigkill_after_stop_timeout() {
    let scene = Scene::new();
    let timeout = humantime::format_duration(STOP_TIMEOUT).to_string();
    let mut pivot = bootstrap(
        &scene,
        &["--stop-timeout", &timeout],
        &[("STANDIN_IGNORE_TERM", "1")],
    );
    let kubelet = kubelet_of(&scene, pivot.pid(), &[]);

    let asked = Instant::now();
    assert!(pivot.signal(Signal::SIGTERM), "pivot exited by itself");
    let term = wait_event(&scene, "term", kubelet.pid);
    assert_eq!(term.field("ignored"), Some("1"), "{}", term.raw);
    wait_until(DEADLINE, "the stubborn kubelet to be killed", || {
        (!pid_alive(kubelet.pid)).then_some(())
    });
    let elapsed = asked.elapsed();
    assert!(
        elapsed >= STOP_TIMEOUT.mul_f64(0.9) && elapsed < STOP_TIMEOUT + KILL_SLACK,
        "kubelet killed {elapsed:?} after SIGTERM, expected about {STOP_TIMEOUT:?}"
    );
    let status = pivot.wait_exit(DEADLINE);
    assert!(status.success(), "pivot exited with {status}");
    assert!(
        events_of(&scene, "stop", kubelet.pid).is_empty(),
        "the kubelet stopped by itself, so SIGKILL was not needed"
    );
    assert_nothing_running(&scene);
}

/// A crashing kubelet is restarted with growing delays (100 ms doubling).
#[test]
fn crashing_kubelet_is_restarted_with_backoff() {
    const STARTS: usize = 4;
    let scene = Scene::new();
    let mut pivot = bootstrap(&scene, &[], &[("STANDIN_CRASH_AFTER_MS", "20")]);
    let starts = wait_until(DEADLINE, &format!("{STARTS} kubelet starts"), || {
        let starts = scene.starts();
        (starts.len() >= STARTS).then_some(starts)
    });
    let crashes = scene.events("crash");

    let mut delays = Vec::new();
    for (i, pair) in starts[..STARTS].windows(2).enumerate() {
        let (before, after) = (&pair[0], &pair[1]);
        let crash = crashes
            .iter()
            .find(|line| line.pid == before.pid)
            .unwrap_or_else(|| panic!("no crash line for {} before {}", before.raw, after.raw));
        let delay = unix_ns(after) - unix_ns(crash);
        let expected = INITIAL_BACKOFF * (1u32 << i);
        assert!(
            delay >= ns(expected) && delay < ns(expected + Duration::from_secs(1)),
            "restart {} came {:.1} ms after the crash, expected {expected:?} backoff",
            i + 1,
            ms(delay)
        );
        delays.push(delay);
    }
    let gaps: Vec<i128> = starts[..STARTS]
        .windows(2)
        .map(|pair| unix_ns(&pair[1]) - unix_ns(&pair[0]))
        .collect();
    assert!(
        gaps.windows(2).all(|pair| pair[1] > pair[0]),
        "gaps between starts do not grow: {:?} ms (crash-to-start {:?} ms)",
        gaps.iter().map(|gap| ms(*gap)).collect::<Vec<_>>(),
        delays.iter().map(|delay| ms(*delay)).collect::<Vec<_>>()
    );

    assert!(pivot.signal(Signal::SIGTERM), "pivot exited by itself");
    let status = pivot.wait_exit(DEADLINE);
    assert!(status.success(), "pivot exited with {status}");
    assert_nothing_running(&scene);
    scene.assert_no_overlap();
}

/// SIGHUP restarts the kubelet without giving up the lock.
#[test]
fn sighup_restarts_the_kubelet_and_keeps_the_lock() {
    let scene = Scene::new();
    let (mut pivot, old) = start_holding(&scene, &[], &[SLOW_STOP]);

    assert!(pivot.signal(Signal::SIGHUP), "pivot exited by itself");
    let new = kubelet_of(&scene, pivot.pid(), &[old.pid]);
    let stop = wait_event(&scene, "stop", old.pid);
    assert_eq!(stop.field("reason"), Some("sigterm"), "{}", stop.raw);
    assert!(
        stop.t_ns < new.t_ns,
        "new kubelet started before the old one stopped:\n{}\n{}",
        stop.raw,
        new.raw
    );
    wait_holder(&scene, pivot.pid(), new.pid);
    assert!(pivot.is_running(), "pivot exited on SIGHUP");
    assert_eq!(
        flocks_on(&scene.lock()),
        vec![(false, pivot.pid())],
        "the lock should still be held by the pivot, with nobody waiting"
    );
    let (code, report) = status(&scene);
    assert_eq!(code, 0, "status: {report:#}");
    assert_eq!(report["lock"]["holder"]["kubeletPid"], Value::from(new.pid));
    assert_eq!(scene.running_kubelets(), vec![new.pid]);
    scene.assert_no_overlap();
}

/// An operator's `cat` and a `status` call open or inspect the lock but are no contenders.
#[test]
fn cat_and_status_do_not_cause_a_yield() {
    let scene = Scene::new();
    let (_pivot, kubelet) = start_holding(&scene, &[], &[]);

    cat_lock(&scene);
    let (code, report) = status(&scene);
    assert_eq!(code, 0, "status: {report:#}");

    assert_undisturbed(&scene, &kubelet, "after a cat and a status");
    assert_eq!(
        checked_holder_record(&scene.state_dir()).map(|rec| rec["kubeletPid"].clone()),
        Some(Value::from(kubelet.pid))
    );
}

/// The seed behaviour on request: with --yield-on-any-open a `cat` makes the holder yield.
#[test]
fn yield_on_any_open_yields_to_a_cat() {
    let scene = Scene::new();
    let (pivot, first) = start_holding(&scene, &["--yield-on-any-open"], &[SLOW_STOP]);

    cat_lock(&scene);
    let stop = wait_event(&scene, "stop", first.pid);
    assert_eq!(stop.field("reason"), Some("sigterm"), "{}", stop.raw);
    // Nobody takes the lock after a mere open, so the bootstrap takes it back.
    let second = kubelet_of(&scene, pivot.pid(), &[first.pid]);
    assert!(stop.t_ns < second.t_ns, "{}\n{}", stop.raw, second.raw);
    scene.assert_no_overlap();
}

/// --exit-on-yield: the seed's exit-and-be-restarted behaviour.
#[test]
fn exit_on_yield_exits_zero_after_yielding() {
    let scene = Scene::new();
    let (mut pivot, kubelet) = start_holding(&scene, &["--exit-on-yield"], &[SLOW_STOP]);

    let plain = contender(&scene);
    let status = pivot.wait_exit(DEADLINE);
    assert!(status.success(), "pivot exited with {status}");
    handed_over(&scene, &kubelet, &plain);
    assert!(
        checked_holder_record(&scene.state_dir()).is_none(),
        "holder record left behind"
    );
    assert_eq!(scene.running_kubelets(), vec![plain.pid()]);
    scene.assert_no_overlap();
}

/// Known flaw 7: the lock file deleted under the holder (tmpfiles) is re-created and
/// re-locked; the kubelet keeps running and contention on the new file still works.
#[test]
fn deleted_lock_file_is_recreated_and_relocked() {
    let scene = Scene::new();
    let (pivot, kubelet) = start_holding(&scene, &[], &[SLOW_STOP]);
    let old_inode = inode_of(&scene.lock());

    fs::remove_file(scene.lock()).unwrap_or_else(|err| panic!("rm lock file: {err}"));
    wait_until(DEADLINE, "a new lock file flocked by the pivot", || {
        let inode = fs::metadata(scene.lock()).ok()?.ino();
        (inode != old_inode && flocks_on(&scene.lock()).contains(&(false, pivot.pid())))
            .then_some(())
    });
    assert!(
        scene.events("term").is_empty(),
        "the kubelet was stopped: {:#?}",
        scene.events("term")
    );
    assert_eq!(scene.running_kubelets(), vec![kubelet.pid]);
    let (code, report) = status(&scene);
    assert_eq!(code, 0, "status: {report:#}");
    assert_eq!(report["lock"]["locked"], Value::Bool(true), "{report:#}");
    assert_eq!(report["lock"]["holder"]["stale"], Value::Bool(false));
    assert_eq!(
        report["lock"]["holder"]["kubeletPid"],
        Value::from(kubelet.pid)
    );

    let plain = contender(&scene);
    handed_over(&scene, &kubelet, &plain);
    scene.assert_no_overlap();
}

/// I3: stopping a standing-by bootstrap (`systemctl stop`) must not disturb the self-hosted
/// holder: the bootstrap is no contender of higher generation, not even while it exits.
#[test]
fn stopping_a_standing_by_bootstrap_leaves_the_holder_alone() {
    /// The race is narrow (the exiting bootstrap's last microseconds), so stop a few.
    const STANDBYS: usize = 30;
    let scene = Scene::new();
    let holder = scene.spawn(scene.pivot(&["self-hosted", "--generation", "2"], &[], &[]));
    let kubelet = kubelet_of(&scene, holder.pid(), &[]);
    wait_holder(&scene, holder.pid(), kubelet.pid);

    for _ in 0..STANDBYS {
        let mut standby = bootstrap(&scene, &[], &[]);
        wait_blocked(&scene, standby.pid());
        assert!(standby.signal(Signal::SIGTERM), "standby exited by itself");
        let status = standby.wait_exit(DEADLINE);
        assert!(
            status.success(),
            "standing-by bootstrap exited with {status}"
        );
    }
    assert_undisturbed(&scene, &kubelet, "after standing-by bootstraps exited");
}

/// A bootstrap blocked on the deleted lock file follows the holder to the re-created one, so
/// it still takes over when the holder dies.
#[test]
fn waiter_on_a_deleted_lock_file_follows_the_recreated_one() {
    waiter_follows_a_recreated_lock_file_and_takes_over(&[]);
}

/// A holder and a waiter (started with `waiter_args`); the lock file is removed: the holder
/// re-creates it, the waiter follows it, and takes over once the holder is SIGKILLed.
fn waiter_follows_a_recreated_lock_file_and_takes_over(waiter_args: &[&str]) {
    let scene = Scene::new();
    let (mut holder, old) = start_holding(&scene, &[], &[]);
    let waiter = bootstrap(&scene, waiter_args, &[]);
    wait_blocked(&scene, waiter.pid());
    let old_inode = inode_of(&scene.lock());

    fs::remove_file(scene.lock()).unwrap_or_else(|err| panic!("rm lock file: {err}"));
    wait_until(
        DEADLINE,
        "holder and waiter on the re-created lock file",
        || {
            let inode = fs::metadata(scene.lock()).ok()?.ino();
            let locks = flocks_on(&scene.lock());
            (inode != old_inode
                && locks.contains(&(false, holder.pid()))
                && locks.contains(&(true, waiter.pid())))
            .then_some(())
        },
    );
    assert_eq!(scene.running_kubelets(), vec![old.pid]);

    assert!(holder.signal(Signal::SIGKILL), "holder exited by itself");
    holder.wait_exit(DEADLINE);
    let new = kubelet_of(&scene, waiter.pid(), &[]);
    assert_sole_kubelet(&scene, waiter.pid(), new.pid);
}

#[test]
fn a_polling_waiter_follows_a_recreated_lock_file_and_takes_over() {
    // Without inotify (exhausted, or --watch-mode poll) the poll tick came as often as the
    // waiting re-check and, first in the select, starved it: a polling waiter never moved to a
    // re-created lock file and never fenced a dead holder's leftovers.
    waiter_follows_a_recreated_lock_file_and_takes_over(&["--watch-mode", "poll"]);
}

/// When the holder dies, what is left of its kubelet's process group (a helper process that
/// does not die with the holder, like a kubelet's child; it inherited the kubelet's open
/// descriptors, the lock among them) is killed and the waiting bootstrap takes over.
#[test]
fn takeover_fences_the_old_kubelets_process_group() {
    let scene = Scene::new();
    let (mut holder, old, waiter) =
        start_holder_and_waiter(&scene, &[("STANDIN_SPAWN_GRANDCHILD", "1")]);
    let grandchild = wait_grandchild(&scene, old.pid);

    assert!(holder.signal(Signal::SIGKILL), "holder exited by itself");
    holder.wait_exit(DEADLINE);
    let new = kubelet_of(&scene, waiter.pid(), &[]);
    // Checked as soon as the new kubelet is seen: the fence comes before the start.
    assert!(
        !pid_alive(grandchild.pid),
        "grandchild {} of the dead holder's kubelet still runs beside the new kubelet {}",
        grandchild.pid,
        new.pid
    );
    assert_eq!(scene.running_kubelets(), vec![new.pid]);
    scene.assert_no_overlap();
}

/// `status`: exit 3 without a holder, the live holder with exit 0, a stale one with exit 3.
#[test]
fn status_reports_live_and_stale_holders() {
    let scene = Scene::new();
    // Before any supervisor: no lock file, which `status` refuses (exit 2, naming it)
    // instead of reporting it `NOT locked`.
    let mut cmd = Command::new(support::pivot_bin());
    cmd.arg("status");
    let out = support::node_paths(&mut cmd, &scene.lock(), &scene.config_dir())
        .output()
        .expect("run status");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "status: {stderr}");
    assert!(
        stderr.contains(scene.lock().to_str().expect("utf-8")),
        "{stderr}"
    );
    assert!(!scene.lock().exists(), "status created the lock file");

    let (mut pivot, kubelet) = start_holding(&scene, &[], &[]);
    let (code, report) = status(&scene);
    assert_eq!(code, 0, "status: {report:#}");
    let lock = &report["lock"];
    assert_eq!(lock["path"], Value::from(scene.lock().to_str()));
    assert_eq!(lock["locked"], Value::Bool(true), "{report:#}");
    let holder = &lock["holder"];
    assert_eq!(holder["role"], "bootstrap", "{report:#}");
    assert_eq!(holder["generation"], 0);
    assert_eq!(holder["pid"], pivot.pid());
    assert_eq!(holder["kubeletPid"], kubelet.pid);
    assert_eq!(holder["stale"], false);
    assert!(
        holder["since"]
            .as_str()
            .is_some_and(|since| !since.is_empty()),
        "{report:#}"
    );
    let claims = lock["claims"]
        .as_array()
        .unwrap_or_else(|| panic!("claims is not a list: {report:#}"));
    assert!(
        claims
            .iter()
            .any(|claim| claim["pid"] == pivot.pid() && claim["role"] == "bootstrap"),
        "the holder's own claim is not listed: {report:#}"
    );
    assert!(report["config"].is_object(), "{report:#}");

    assert!(pivot.signal(Signal::SIGKILL), "pivot exited by itself");
    pivot.wait_exit(DEADLINE);
    wait_until(DEADLINE, "the kubelet to die with its supervisor", || {
        (!pid_alive(kubelet.pid)).then_some(())
    });
    let (code, report) = status(&scene);
    assert_eq!(code, STATUS_NO_HOLDER, "status: {report:#}");
    assert_eq!(report["lock"]["holder"]["stale"], true, "{report:#}");
    assert_eq!(report["lock"]["holder"]["pid"], pivot.pid());
    assert_eq!(report["lock"]["locked"], false, "{report:#}");
}

/// The whole process group goes: a grandchild of the kubelet is gone before the pivot exits.
#[test]
fn sigterm_stops_the_whole_process_group() {
    let scene = Scene::new();
    let mut pivot = bootstrap(&scene, &[], &[("STANDIN_SPAWN_GRANDCHILD", "1")]);
    let kubelet = kubelet_of(&scene, pivot.pid(), &[]);
    let grandchild = wait_grandchild(&scene, kubelet.pid);
    assert_eq!(grandchild.num("pgid"), i128::from(kubelet.pid));
    assert!(pid_alive(grandchild.pid), "grandchild died early");

    assert!(pivot.signal(Signal::SIGTERM), "pivot exited by itself");
    let status = pivot.wait_exit(DEADLINE);
    assert!(status.success(), "pivot exited with {status}");
    // Checked right at the pivot's exit, without waiting: it must not exit before the group is gone.
    assert!(
        !pid_alive(grandchild.pid),
        "grandchild {} outlived kubelet-pivot",
        grandchild.pid
    );
    assert!(!pid_alive(kubelet.pid), "kubelet outlived kubelet-pivot");
    assert_nothing_running(&scene);
}
