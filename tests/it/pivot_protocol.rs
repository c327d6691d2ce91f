//! The pivot protocol end to end: real `kubelet-pivot` supervisors, real stand-in kubelets,
//! real flock and inotify. Each test checks one promise of the lock protocol (DESIGN.md
//! invariants I1-I3) through what an operator can observe: the stand-in event log, the
//! holder record, `kubelet-pivot status -o json` and the supervisors' logs.
//!
//! Synchronisation is always `wait_until` on an observable fact. The few bounded sleeps
//! assert that something does NOT happen during a window and say so where they are.

use crate::support;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::lock_state::{blocked_on, claim_pids, claims_dir, holder_record, status};
use support::{now_ns, ns_between, pid_alive, wait_until, LogLine, Proc, Scene};

/// Deadline for states the product reaches in milliseconds; generous for a loaded CI host.
const SETTLE: Duration = Duration::from_secs(10);
/// I2: a waiting supervisor runs a kubelet again within this long after the holder died.
const TAKEOVER: Duration = Duration::from_secs(1);
/// A supervisor asked to stop (SIGTERM, stand-in stops at once) exits within this long.
const PROMPT_EXIT: Duration = Duration::from_secs(2);
/// Negative windows: long enough to cover the holder's 500 ms look for an opener to block
/// in flock and its 1 s look while a higher claimant cannot be yielded to, so a wrong yield
/// would have happened by then.
const QUIET_WINDOW: Duration = Duration::from_millis(1100);
/// Exit code of `status` without a live holder.
const STATUS_NO_HOLDER: i32 = 3;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn bootstrap(scene: &Scene) -> Proc {
    scene.spawn(scene.pivot(&["bootstrap"], &[], &[]))
}

/// A bootstrap that holds the lock; returns it and its kubelet.
fn holding_bootstrap(scene: &Scene) -> (Proc, i32) {
    let boot = bootstrap(scene);
    let kubelet = wait_holds(scene, boot.pid(), 0);
    (boot, kubelet)
}

fn self_hosted(scene: &Scene, generation: u32) -> Proc {
    let generation = generation.to_string();
    scene.spawn(scene.pivot(&["self-hosted", "--generation", &generation], &[], &[]))
}

/// The kubelet that supervisor `sup` runs right now, if any.
fn kubelet_of(scene: &Scene, sup: i32) -> Option<i32> {
    scene.kubelet_of(sup)
}

fn json_i64(value: &Value, key: &str) -> Option<i64> {
    value.get(key).and_then(Value::as_i64)
}

/// Waits until `sup` runs the only kubelet and the holder record names it with that kubelet
/// and `generation`; returns the kubelet pid.
fn wait_holds(scene: &Scene, sup: i32, generation: i64) -> i32 {
    wait_until(
        SETTLE,
        &format!("supervisor pid {sup} (generation {generation}) to hold the lock and run the only kubelet"),
        || {
            let running = scene.running_kubelets();
            let kubelet = kubelet_of(scene, sup)?;
            let record = holder_record(&scene.state_dir())?;
            (running == [kubelet]
                && json_i64(&record, "pid") == Some(i64::from(sup))
                && json_i64(&record, "generation") == Some(generation)
                && json_i64(&record, "kubeletPid") == Some(i64::from(kubelet)))
            .then_some(kubelet)
        },
    )
}

/// True once supervisor `pid` has its claim file in place.
fn has_claim(state: &Path, pid: i32) -> bool {
    claim_pids(state).contains(&pid)
}

/// Waits until supervisor `pid` stands by: its claim is in place and it is blocked in flock.
fn wait_standing_by(scene: &Scene, pid: i32) {
    wait_until(
        SETTLE,
        &format!("supervisor pid {pid} to stand by (claim written, blocked on the lock)"),
        || {
            (has_claim(&scene.state_dir(), pid) && blocked_on(&scene.lock()).contains(&pid))
                .then_some(())
        },
    );
}

/// The usual node after a pivot: the bootstrap standing by, self-hosted gen 1 holding.
/// Returns both supervisors and gen 1's kubelet.
fn gen1_holding_over_bootstrap(scene: &Scene) -> (Proc, Proc, i32) {
    let (boot, _) = holding_bootstrap(scene);
    let gen1 = self_hosted(scene, 1);
    let kubelet = wait_holds(scene, gen1.pid(), 1);
    wait_standing_by(scene, boot.pid());
    (boot, gen1, kubelet)
}

/// Waits until one line of the supervisors' captured stderr contains all of `needles`.
fn wait_log_line(scene: &Scene, needles: &[&str]) -> String {
    wait_until(
        SETTLE,
        &format!("a supervisor log line with {needles:?}"),
        || {
            scene
                .output()
                .lines()
                .find(|line| needles.iter().all(|needle| line.contains(needle)))
                .map(str::to_owned)
        },
    )
}

/// Negative check: for `window`, `kubelet` stays the only running kubelet, no kubelet starts
/// and the holder record keeps naming `sup`. A fixed window is the only way to show that
/// something does NOT happen; it is sized to cover the product's own re-check periods.
fn assert_no_handoff_for(scene: &Scene, sup: i32, kubelet: i32, window: Duration, why: &str) {
    let starts_before = scene.starts().len();
    let until = Instant::now() + window;
    while Instant::now() < until {
        let running = scene.running_kubelets();
        assert_eq!(
            running,
            [kubelet],
            "{why}: kubelet {kubelet} of supervisor {sup} must keep running alone"
        );
        if let Some(record) = holder_record(&scene.state_dir()) {
            assert_eq!(
                json_i64(&record, "pid"),
                Some(i64::from(sup)),
                "{why}: the holder record must keep naming supervisor {sup}: {record}"
            );
        }
        thread::sleep(support::POLL_INTERVAL);
    }
    let starts = scene.starts();
    assert_eq!(
        starts.len(),
        starts_before,
        "{why}: no kubelet may start, but these did: {:#?}",
        &starts[starts_before..]
    );
    scene.assert_no_overlap();
}

/// Sends `signal` to a supervisor and waits for it to exit; a SIGTERM must end in exit 0.
fn stop(sup: &mut Proc, signal: Signal) {
    assert!(
        sup.signal(signal),
        "supervisor {} already exited",
        sup.pid()
    );
    let status = sup.wait_exit(PROMPT_EXIT);
    if signal == Signal::SIGTERM {
        assert_eq!(
            status.code(),
            Some(0),
            "supervisor {} must exit 0 on SIGTERM",
            sup.pid()
        );
    }
}

/// Waits until `pid` is gone. After a SIGKILLed supervisor is reaped its kubelet is still
/// being killed by PR_SET_PDEATHSIG, so this is a wait, not an instant check.
fn wait_gone(pid: i32, what: &str) {
    wait_until(TAKEOVER, what, || (!pid_alive(pid)).then_some(()));
}

/// After the holder died at `killed_ns`: waits for `sup` to run a kubelet and checks that its
/// exec came within [`TAKEOVER`] (I2). Returns the kubelet pid.
fn wait_takeover(scene: &Scene, sup: i32, generation: i64, killed_ns: u128) -> i32 {
    let kubelet = wait_holds(scene, sup, generation);
    let start = scene
        .start_of(kubelet)
        .expect("start line of the running kubelet");
    let latency = ns_between(killed_ns, start.t_ns);
    assert!(
        latency <= TAKEOVER,
        "I2: supervisor {sup} started its kubelet {latency:?} after the holder died (limit {TAKEOVER:?})"
    );
    kubelet
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn bootstrap_yields_to_self_hosted_and_takes_back_after_pod_deletion() {
    let scene = Scene::new();
    let (boot, boot_kubelet) = holding_bootstrap(&scene);

    let mut gen1 = self_hosted(&scene, 1);
    let gen1_kubelet = wait_holds(&scene, gen1.pid(), 1);
    assert_ne!(gen1_kubelet, boot_kubelet);
    assert!(
        scene
            .events("stop")
            .iter()
            .any(|line| line.pid == boot_kubelet),
        "the bootstrap's kubelet must have been stopped with SIGTERM (a `stop` line)"
    );
    let (code, json) = status(&scene);
    assert_eq!(code, 0, "status with a live holder: {json}");
    let holder = &json["lock"]["holder"];
    assert_eq!(holder["role"], "self-hosted", "{json}");
    assert_eq!(holder["generation"], 1, "{json}");
    assert_eq!(holder["pid"], gen1.pid(), "{json}");
    assert_eq!(holder["kubeletPid"], gen1_kubelet, "{json}");
    assert_eq!(holder["stale"], false, "{json}");
    assert_eq!(json["lock"]["locked"], true, "{json}");

    // Pod deletion: the kubelet gets SIGTERM, the supervisor releases and exits 0.
    let asked = Instant::now();
    let killed_ns = now_ns();
    stop(&mut gen1, Signal::SIGTERM);
    let exited_after = asked.elapsed();
    assert!(
        exited_after < PROMPT_EXIT,
        "gen 1 took {exited_after:?} to exit"
    );
    assert!(
        !pid_alive(gen1_kubelet),
        "gen 1's kubelet must be gone when gen 1 has exited"
    );
    let back = wait_takeover(&scene, boot.pid(), 0, killed_ns);
    assert_ne!(back, boot_kubelet);
    let (code, json) = status(&scene);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["lock"]["holder"]["role"], "bootstrap", "{json}");
    scene.assert_no_overlap();
}

/// When, during an upgrade, v1 (the holder being replaced) is deleted.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// Right after v2 was started (v2 may not have claimed yet).
    Immediately,
    /// Once v2's claim file is in place.
    Claimed,
    /// Once v2 is blocked on the lock or already holds it.
    Contending,
    /// Once v2 holds the lock and v1 stands by.
    V2Holds,
}

const KILL_POINTS: [KillPoint; 4] = [
    KillPoint::Immediately,
    KillPoint::Claimed,
    KillPoint::Contending,
    KillPoint::V2Holds,
];

/// Samples the holder record every millisecond on a thread: (time ns, supervisor pid, role).
struct HolderMonitor {
    samples: Arc<Mutex<Vec<(u128, i64, String)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl HolderMonitor {
    fn start(lock: &Path) -> HolderMonitor {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (lock, out, done) = (lock.to_owned(), samples.clone(), stop.clone());
        let thread = thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(record) = holder_record(&lock) {
                    let pid = json_i64(&record, "pid").unwrap_or(-1);
                    let role = record["role"].as_str().unwrap_or("?").to_owned();
                    let mut samples = out.lock().expect("monitor mutex");
                    if samples
                        .last()
                        .is_none_or(|last: &(u128, i64, String)| last.1 != pid)
                    {
                        samples.push((now_ns(), pid, role));
                    }
                }
                // Sampling cadence of a passive observer, not synchronisation.
                thread::sleep(Duration::from_millis(1));
            }
        });
        HolderMonitor {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// Holder changes seen in `[from_ns, to_ns)`.
    fn between(&self, from_ns: u128, to_ns: u128) -> Vec<(u128, i64, String)> {
        self.samples
            .lock()
            .expect("monitor mutex")
            .iter()
            .filter(|(t, _, _)| (from_ns..to_ns).contains(t))
            .cloned()
            .collect()
    }
}

impl Drop for HolderMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What one upgrade round saw.
struct UpgradeRound {
    /// Kubelets the bootstrap started after v2's claim was visible and before v2 first ran one.
    bootstrap_starts_while_v2_claimed: Vec<LogLine>,
}

/// One upgrade: bootstrap stands by, v1 holds; v2 starts; v1 is deleted at `kill_point` with
/// `v1_signal`; v2 must end up holding and the bootstrap must never run while v2 is live.
/// Then v2 is deleted with `v2_signal` and the bootstrap takes over within 1 s.
fn upgrade_round(
    scene: &Scene,
    boot: i32,
    monitor: &HolderMonitor,
    kill_point: KillPoint,
    v1_signal: Signal,
    v2_signal: Signal,
) -> UpgradeRound {
    let what = format!("upgrade round ({kill_point:?}, v1 {v1_signal}, v2 {v2_signal})");
    let mut v1 = self_hosted(scene, 1);
    let v1_kubelet = wait_holds(scene, v1.pid(), 1);
    let round_start = scene.starts().len();

    let mut v2 = self_hosted(scene, 2);
    let mut claimed_ns = None;
    match kill_point {
        KillPoint::Immediately => {}
        KillPoint::Claimed => {
            wait_until(SETTLE, "v2's claim", || {
                has_claim(&scene.state_dir(), v2.pid()).then_some(())
            });
            claimed_ns = Some(now_ns());
        }
        KillPoint::Contending => {
            wait_until(SETTLE, "v2 blocked on the lock or holding it", || {
                (blocked_on(&scene.lock()).contains(&v2.pid())
                    || kubelet_of(scene, v2.pid()).is_some())
                .then_some(())
            });
            claimed_ns = Some(now_ns());
        }
        KillPoint::V2Holds => {
            wait_holds(scene, v2.pid(), 2);
            claimed_ns = Some(now_ns());
        }
    }
    stop(&mut v1, v1_signal);
    wait_gone(v1_kubelet, &format!("{what}: v1's kubelet to die with v1"));

    let v2_kubelet = wait_holds(scene, v2.pid(), 2);
    // Negative check: nobody (least of all the bootstrap) takes the lock from v2 now that v1
    // is gone; 150 ms is far longer than a wrong takeover would need.
    assert_no_handoff_for(
        scene,
        v2.pid(),
        v2_kubelet,
        Duration::from_millis(150),
        &what,
    );

    let starts = scene.starts();
    let round = &starts[round_start..];
    let v2_first = round
        .iter()
        .find(|line| line.ppid() == v2.pid())
        .expect("v2's first kubelet start")
        .clone();
    let v2_killed_ns = now_ns();
    // Log: after v2 first ran a kubelet, only v2 started kubelets.
    let after_v2: Vec<&LogLine> = round
        .iter()
        .filter(|line| line.t_ns >= v2_first.t_ns && line.ppid() != v2.pid())
        .collect();
    assert!(
        after_v2.is_empty(),
        "{what}: kubelets started by others after v2 first held: {after_v2:#?}"
    );
    // Holder record: after it first named v2, it named nobody else until v2 was deleted.
    let changes = monitor.between(v2_first.t_ns, v2_killed_ns);
    let first_v2 = changes
        .iter()
        .position(|(_, pid, _)| *pid == i64::from(v2.pid()));
    if let Some(first_v2) = first_v2 {
        let others: Vec<_> = changes[first_v2..]
            .iter()
            .filter(|(_, pid, _)| *pid != i64::from(v2.pid()))
            .collect();
        assert!(
            others.is_empty(),
            "{what}: the holder record named others after v2: {others:?}"
        );
    }
    let bootstrap_starts_while_v2_claimed = claimed_ns
        .map(|from| {
            round
                .iter()
                .filter(|line| {
                    line.ppid() == boot && line.t_ns >= from && line.t_ns < v2_first.t_ns
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();

    // v2 goes away: the bootstrap takes over within 1 s.
    stop(&mut v2, v2_signal);
    wait_gone(v2_kubelet, &format!("{what}: v2's kubelet to die with v2"));
    wait_takeover(scene, boot, 0, v2_killed_ns);
    scene.assert_no_overlap();
    UpgradeRound {
        bootstrap_starts_while_v2_claimed,
    }
}

#[test]
fn upgrade_v2_wins_in_every_ordering_and_bootstrap_takes_over_after() {
    let scene = Scene::new();
    let (boot, _) = holding_bootstrap(&scene);
    let monitor = HolderMonitor::start(&scene.state_dir());
    let signals = [Signal::SIGKILL, Signal::SIGTERM];
    let mut rounds = 0;
    for (i, kill_point) in KILL_POINTS.iter().cycle().take(24).enumerate() {
        let v1_signal = signals[(i / KILL_POINTS.len()) % 2];
        let v2_signal = signals[i % 2];
        upgrade_round(
            &scene,
            boot.pid(),
            &monitor,
            *kill_point,
            v1_signal,
            v2_signal,
        );
        rounds += 1;
    }
    assert_eq!(rounds, 24);
    scene.assert_no_overlap();
}

/// Design flaw 3 (v2 versus bootstrap is a coin toss): once v2 has a live claim, deleting v1
/// must not let the bootstrap win flock and start its kubelet before v2 runs; DESIGN.md: "On
/// acquiring, a contender first checks for live claims of higher generation and, if any,
/// releases again and waits for that claimant instead of racing it".
#[test]
fn upgrade_never_restarts_the_bootstrap_kubelet_while_v2_is_claimed() {
    let scene = Scene::new();
    let (boot, _) = holding_bootstrap(&scene);
    let monitor = HolderMonitor::start(&scene.state_dir());
    let mut raced = Vec::new();
    for i in 0..30 {
        let kill_point = [KillPoint::Claimed, KillPoint::Contending][i % 2];
        let v1_signal = [Signal::SIGKILL, Signal::SIGTERM][(i / 2) % 2];
        let round = upgrade_round(
            &scene,
            boot.pid(),
            &monitor,
            kill_point,
            v1_signal,
            Signal::SIGTERM,
        );
        raced.extend(
            round
                .bootstrap_starts_while_v2_claimed
                .into_iter()
                .map(|line| (i, kill_point, v1_signal, line.raw)),
        );
    }
    assert!(
        raced.is_empty(),
        "the bootstrap started a kubelet while v2 had a live claim: {raced:#?}"
    );
}

#[test]
fn lower_generations_never_take_the_lock_from_a_live_higher_one() {
    let scene = Scene::new();
    let _boot = bootstrap(&scene);
    let v2 = self_hosted(&scene, 2);
    let v2_kubelet = wait_holds(&scene, v2.pid(), 2);

    let v1 = self_hosted(&scene, 1);
    let boot2 = bootstrap(&scene);
    wait_standing_by(&scene, v1.pid());
    wait_standing_by(&scene, boot2.pid());
    let v2_pid = v2.pid().to_string();
    wait_log_line(
        &scene,
        &[
            "standing by: lock held by self-hosted gen 2 pid",
            &v2_pid,
            "rank=self-hosted gen 1",
        ],
    );

    // Negative check over a bounded window: v2 keeps its kubelet, nobody starts one.
    assert_no_handoff_for(
        &scene,
        v2.pid(),
        v2_kubelet,
        Duration::from_secs(1),
        "lower generations standing by",
    );
    let (code, json) = status(&scene);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["lock"]["holder"]["generation"], 2, "{json}");
    let claims = json["lock"]["claims"].as_array().expect("claims array");
    for pid in [v1.pid(), boot2.pid()] {
        assert!(
            claims.iter().any(|claim| claim["pid"] == pid),
            "the waiting supervisor {pid} must be listed in the claims: {json}"
        );
    }
}

/// What an operator, a backup agent or a monitoring tool does to the lock file. None of it is
/// a contender: the holder must not yield.
fn poke_the_lock_without_contending(scene: &Scene, holder: i32, kubelet: i32) {
    let lock = scene.lock();
    let lock_dir = lock.parent().expect("lock dir");
    let run = |program: &str, args: &[&std::ffi::OsStr]| {
        let status = Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|err| panic!("run {program}: {err}"));
        (program.to_owned(), status)
    };
    for (program, status) in [
        run("cat", &[lock.as_os_str()]),
        run("stat", &[lock.as_os_str()]),
        run("ls", &["-l".as_ref(), lock_dir.as_os_str()]),
    ] {
        assert!(status.success(), "{program} failed: {status}");
    }
    // `flock -n` by an operator checking whether the lock is held: fails, never blocks.
    let (_, probe) = run("flock", &["-n".as_ref(), lock.as_os_str(), "true".as_ref()]);
    assert!(
        !probe.success(),
        "flock -n must fail while the lock is held"
    );
    // Monitoring agents read every process's fds.
    let mut links = 0;
    for entry in fs::read_dir("/proc").expect("read /proc").flatten() {
        if let Ok(fds) = fs::read_dir(entry.path().join("fd")) {
            links += fds
                .flatten()
                .filter_map(|fd| fs::read_link(fd.path()).ok())
                .count();
        }
    }
    assert!(links > 0, "read no fd links under /proc/*/fd");
    for pid in [holder, kubelet] {
        assert!(
            fs::read_dir(format!("/proc/{pid}/fd")).is_ok(),
            "cannot read /proc/{pid}/fd"
        );
    }
    for _ in 0..2 {
        let (code, json) = status(scene);
        assert_eq!(code, 0, "{json}");
        assert_eq!(json["lock"]["holder"]["pid"], holder, "{json}");
    }
}

#[test]
fn no_handoff_without_a_contender() {
    let scene = Scene::new();
    let (boot, kubelet) = holding_bootstrap(&scene);
    // A reader keeps the lock file open (no flock) for the whole window.
    let reader = fs::File::open(scene.lock()).expect("open the lock file for reading");
    poke_the_lock_without_contending(&scene, boot.pid(), kubelet);
    assert_no_handoff_for(
        &scene,
        boot.pid(),
        kubelet,
        QUIET_WINDOW,
        "bootstrap holder poked",
    );
    drop(reader);

    // The same against a self-hosted holder with the bootstrap standing by.
    let gen1 = self_hosted(&scene, 1);
    let kubelet = wait_holds(&scene, gen1.pid(), 1);
    wait_standing_by(&scene, boot.pid());
    poke_the_lock_without_contending(&scene, gen1.pid(), kubelet);
    assert_no_handoff_for(
        &scene,
        gen1.pid(),
        kubelet,
        QUIET_WINDOW,
        "self-hosted holder poked",
    );
}

/// A claim of generation 5 for `pid`; the test writes it without a flock, so its owner is
/// "dead" as far as the protocol can tell.
/// Writes `text` to `path` with mode 0600, as claims are (a claim readable by others is
/// rejected, not judged dead).
fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, text).unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|err| panic!("chmod {}: {err}", path.display()));
}

fn fake_claim(pid: i32, start_time: u64) -> String {
    format!(
        r#"{{"role":"self-hosted","generation":5,"pid":{pid},"startTime":{start_time},"since":"2026-01-01T00:00:00.000Z"}}"#
    )
}

#[test]
fn claims_of_dead_processes_are_ignored_and_removed() {
    let scene = Scene::new();
    let (mut boot, kubelet) = holding_bootstrap(&scene);
    let claims = claims_dir(&scene.state_dir());
    assert!(claims.is_dir(), "claims dir {} missing", claims.display());

    // Renamed into place like a real claim (the holder watches renames into the dir). Its pid
    // is this test process: alive, but it holds no flock on the claim, so the claim is dead.
    let me = std::process::id();
    let staged = scene.path().join("staged-claim.json");
    write_private(&staged, &fake_claim(i32::try_from(me).expect("pid"), 1));
    let dead = claims.join(format!("{me}-1.json"));
    fs::rename(&staged, &dead).expect("rename the fake claim into the claims dir");
    wait_until(SETTLE, "the holder to remove the dead claim", || {
        (!dead.exists()).then_some(())
    });
    assert_no_handoff_for(
        &scene,
        boot.pid(),
        kubelet,
        QUIET_WINDOW,
        "dead claim of generation 5",
    );

    // Written in place (no rename; the holder sees it closed after writing): `status` ignores
    // it and leaves it (it only reads). The holder is stopped meanwhile, so that only `status`
    // could have removed it; thawed, the holder removes it on the queued event.
    assert!(boot.signal(Signal::SIGSTOP));
    let dead = claims.join("4194303-7.json");
    write_private(&dead, &fake_claim(4_194_303, 7));
    let (code, json) = status(&scene);
    assert_eq!(code, 0, "{json}");
    let listed = json["lock"]["claims"].as_array().expect("claims array");
    assert!(
        listed.iter().all(|claim| claim["generation"] != 5),
        "dead claims must not be listed: {json}"
    );
    assert_eq!(listed.len(), 1, "only the bootstrap's claim: {json}");
    assert!(
        dead.exists(),
        "status must not delete anything, but removed the dead claim {}",
        dead.display()
    );
    assert!(boot.signal(Signal::SIGCONT));
    wait_until(SETTLE, "the holder to remove the dead claim", || {
        (!dead.exists()).then_some(())
    });
    assert_no_handoff_for(
        &scene,
        boot.pid(),
        kubelet,
        QUIET_WINDOW,
        "dead claim written in place",
    );
}

/// The stand-in run as a plain kubelet with `--lock-file` and no kubelet-pivot claim.
fn plain_kubelet(scene: &Scene) -> Proc {
    Proc::spawn(&mut scene.plain_kubelet())
}

/// Waits until the plain kubelet `pid` holds the lock and runs as the only kubelet.
fn wait_plain_runs(scene: &Scene, pid: i32) {
    let lock = scene.lock().display().to_string();
    wait_until(SETTLE, &format!("plain kubelet {pid} to run alone"), || {
        let started = scene
            .starts()
            .iter()
            .any(|line| line.pid == pid && line.field("lock") == Some(lock.as_str()));
        (started && scene.running_kubelets() == [pid]).then_some(())
    });
}

#[test]
fn plain_kubelet_with_lock_file_is_a_contender() {
    let scene = Scene::new();
    let (boot, _) = holding_bootstrap(&scene);

    // The bootstrap yields to an unclaimed process blocked on the lock.
    let mut plain = plain_kubelet(&scene);
    wait_plain_runs(&scene, plain.pid());
    let (code, json) = status(&scene);
    assert_eq!(
        code, STATUS_NO_HOLDER,
        "no supervisor holds the lock: {json}"
    );
    assert_eq!(json["lock"]["locked"], true, "{json}");
    wait_standing_by(&scene, boot.pid());
    let killed_ns = now_ns();
    stop(&mut plain, Signal::SIGTERM);
    wait_takeover(&scene, boot.pid(), 0, killed_ns);

    // A self-hosted holder yields to it as well.
    let gen1 = self_hosted(&scene, 1);
    wait_holds(&scene, gen1.pid(), 1);
    let mut plain = plain_kubelet(&scene);
    wait_plain_runs(&scene, plain.pid());
    wait_standing_by(&scene, gen1.pid());
    let killed_ns = now_ns();
    stop(&mut plain, Signal::SIGKILL);
    wait_takeover(&scene, gen1.pid(), 1, killed_ns);
    scene.assert_no_overlap();
}

#[test]
fn standing_by_supervisors_report_the_holder() {
    let scene = Scene::new();
    let (boot, gen1, kubelet) = gen1_holding_over_bootstrap(&scene);

    let (code, json) = status(&scene);
    assert_eq!(code, 0, "{json}");
    let lock = &json["lock"];
    assert_eq!(lock["holder"]["role"], "self-hosted", "{json}");
    assert_eq!(lock["holder"]["generation"], 1, "{json}");
    assert_eq!(lock["holder"]["pid"], gen1.pid(), "{json}");
    assert_eq!(lock["holder"]["kubeletPid"], kubelet, "{json}");
    let claims = lock["claims"].as_array().expect("claims array");
    let waiting = claims
        .iter()
        .find(|claim| claim["pid"] == boot.pid())
        .unwrap_or_else(|| panic!("the standing-by bootstrap must be listed: {json}"));
    assert_eq!(waiting["role"], "bootstrap", "{json}");
    assert_eq!(waiting["generation"], 0, "{json}");
    assert!(waiting["since"].is_string(), "{json}");

    let gen1_pid = format!(
        "standing by: lock held by self-hosted gen 1 pid {}",
        gen1.pid()
    );
    let line = wait_log_line(&scene, &[&gen1_pid, "rank=bootstrap"]);
    assert!(line.contains("INFO"), "{line}");
}

/// Other programs on a node take and drop flocks all the time (package managers, container
/// runtimes, log rotation). That churn must not make a holder misread who is waiting.
/// Here: a self-hosted holder, the bootstrap standing by, a thread flocking and unlocking
/// 32 files in a loop, and an operator `cat`ting the lock file (each open makes the holder
/// look at /proc/locks for 500 ms). The holder must keep its kubelet.
#[test]
fn lock_churn_elsewhere_does_not_make_the_holder_yield_to_a_claimed_waiter() {
    let scene = Scene::new();
    let (_boot, gen1, kubelet) = gen1_holding_over_bootstrap(&scene);

    let stop = Arc::new(AtomicBool::new(false));
    let churn_dir = scene.path().join("churn");
    fs::create_dir(&churn_dir).expect("create churn dir");
    let files: Vec<fs::File> = (0..32)
        .map(|i| fs::File::create(churn_dir.join(format!("f{i}"))).expect("create churn file"))
        .collect();
    let churn = {
        let stop = stop.clone();
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for file in &files {
                    // fs2's methods, not std's same-named File::lock.
                    fs2::FileExt::lock_exclusive(file).expect("flock churn file");
                }
                for file in &files {
                    fs2::FileExt::unlock(file).expect("unlock churn file");
                }
            }
        })
    };
    let lock = scene.lock();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for _ in 0..10 {
            fs::read(&lock).expect("cat the lock file");
            assert_no_handoff_for(
                &scene,
                gen1.pid(),
                kubelet,
                Duration::from_millis(600),
                "lock churn elsewhere while the holder re-checks contention",
            );
        }
    }));
    stop.store(true, Ordering::Relaxed);
    churn.join().expect("churn thread");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
