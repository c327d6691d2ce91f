//! Issue 23, item 1: an idle agent does no periodic work. A holder whose kubelet runs and a
//! waiter blocked in flock behind it, with no watchdog and nothing happening, make no file
//! reads, no `/proc` reads, no flock calls and no timed wakeups: strace attached to each for a
//! window sees only the calls of the attach and detach themselves.
//!
//! And what the periodic look used to cover still happens, now on events: a config change lost
//! in an inotify queue overflow (IN_Q_OVERFLOW) is found by the one rescan the overflow causes;
//! a drop-in written in a new subdirectory of `--config-dir` restarts the kubelet with it.
//!
//! Needs strace (`scripts/deps.sh` / `.ci/run` install it).

use crate::support;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use support::lock_state::{blocked_on, claim_pids, holder_record};
use support::{kubelet_config, wait_until, Proc, Scene};

/// Deadline for states the product reaches in milliseconds; generous for a loaded CI host.
const SETTLE: Duration = Duration::from_secs(10);
/// How long strace watches an idle supervisor. The old safety tick came every second and the
/// waiter's look every 100 ms: three seconds see both several times.
const WINDOW: Duration = Duration::from_secs(3);

fn bootstrap(scene: &Scene, env: &[(&str, &str)]) -> Proc {
    scene.spawn(scene.pivot(&["bootstrap"], &[], env))
}

/// The system calls `pid` (all its threads) makes during [`WINDOW`], as strace prints them:
/// one complete call per line (calls cut by the attach or the detach are left out).
fn calls_during_window(pid: i32) -> Vec<String> {
    let dir = tempfile::tempdir().expect("a temp dir for the trace");
    let trace = dir.path().join("trace");
    let status = Command::new("timeout")
        .args([
            "-s",
            "INT",
            &WINDOW.as_secs().to_string(),
            "strace",
            "-f",
            "-o",
        ])
        .arg(&trace)
        .args(["-p", &pid.to_string()])
        .status()
        .expect("run strace (install it: scripts/deps.sh)");
    // timeout exits 124 when it stopped strace; strace itself exits 0 on SIGINT.
    assert!(
        status.success() || status.code() == Some(124),
        "strace -p {pid} failed: {status}"
    );
    let text = fs::read_to_string(&trace).expect("strace wrote its trace");
    text.lines()
        .filter(|line| {
            !(line.contains("<unfinished ...>")
                || line.contains("resumed>")
                || line.contains("<detached ...>")
                || line.contains("+++")
                || line.contains("---"))
        })
        .map(str::to_owned)
        .collect()
}

/// The calls that are periodic work: anything touching a file or /proc, any flock, and any
/// wait that ended by its timeout (a timer). `epoll_wait(.., 0) = 0` (tokio's non-blocking
/// poll right after an event, as at the detach) is not a timer.
fn periodic_work(calls: &[String]) -> Vec<&String> {
    const FILE_CALLS: [&str; 9] = [
        "openat(",
        "open(",
        "read(",
        "pread64(",
        "statx(",
        "newfstatat(",
        "getdents64(",
        "flock(",
        "readlink(",
    ];
    calls
        .iter()
        .filter(|line| {
            let call = line
                .split_once(' ')
                .map_or(line.as_str(), |(_, rest)| rest)
                .trim_start();
            let timed_out = (call.starts_with("epoll_wait(")
                || call.starts_with("epoll_pwait")
                || call.starts_with("clock_nanosleep(")
                || call.starts_with("nanosleep("))
                && !call.contains(", 0) = 0")
                && call.trim_end().ends_with("= 0");
            FILE_CALLS.iter().any(|name| call.starts_with(name)) || timed_out
        })
        .collect()
}

#[test]
fn an_idle_holder_and_an_idle_waiter_do_no_periodic_work() {
    let scene = Scene::new();
    let mut holder = bootstrap(&scene, &[]);
    let kubelet = wait_until(SETTLE, "the holder's kubelet", || {
        let kubelet = scene.kubelet_of(holder.pid())?;
        let record = holder_record(&scene.state_dir())?;
        (record["kubeletPid"] == kubelet).then_some(kubelet)
    });
    let mut waiter = bootstrap(&scene, &[]);
    wait_until(SETTLE, "the second bootstrap to stand by", || {
        (claim_pids(&scene.state_dir()).contains(&waiter.pid())
            && blocked_on(&scene.lock()).contains(&waiter.pid()))
        .then_some(())
    });
    // Start-up work (the waiter's first look, which arms its watch of the holder's exits; the
    // holder's 500 ms of re-checks after the waiter's open) ends by itself: the first quiet
    // window of each counts, three windows at most. A timer of a second or less shows in every
    // window.
    for (who, pid) in [("holder", holder.pid()), ("waiter", waiter.pid())] {
        let mut windows = Vec::new();
        let quiet = (0..3).any(|_| {
            let calls = calls_during_window(pid);
            let work = periodic_work(&calls).len();
            windows.push((calls.len(), work));
            if work > 0 {
                let sample: Vec<_> = periodic_work(&calls).into_iter().take(5).collect();
                eprintln!("idle {who}: work in a window, first calls: {sample:#?}");
            }
            work == 0
        });
        eprintln!("idle {who} (pid {pid}), windows of {WINDOW:?} as (system calls, periodic work): {windows:?}");
        assert!(
            quiet,
            "the idle {who} worked without an event in every window\n{}",
            scene.output()
        );
    }
    // Still event-driven: the waiter takes over at once when the holder dies.
    assert!(holder.signal(Signal::SIGKILL));
    let taken = wait_until(SETTLE, "the waiter to take over", || {
        scene
            .kubelet_of(waiter.pid())
            .filter(|pid| *pid != kubelet && scene.running_kubelets() == [*pid])
    });
    assert_ne!(taken, kubelet);
    assert!(waiter.signal(Signal::SIGTERM));
    scene.assert_no_overlap();
}

/// Waits until a kubelet other than `first` runs with a config that contains `needle`.
fn restarted_with(scene: &Scene, first: i32, needle: &str) {
    wait_until(
        SETTLE,
        &format!("a new kubelet running with {needle}"),
        || {
            scene
                .running_kubelets()
                .first()
                .copied()
                .filter(|pid| *pid != first && scene.config_of(*pid).contains(needle))
        },
    );
}

/// Fills `dir`'s inotify queues past `fs.inotify.max_queued_events` (16384 by default) with
/// creations of unrelated files while the supervisor is stopped.
fn overflow_inotify(dir: &Path) {
    let limit: usize = fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(16384);
    for i in 0..=limit + 16 {
        let path = dir.join(format!("unrelated-{i}"));
        fs::write(&path, b"").expect("create an unrelated file");
        fs::remove_file(&path).expect("remove an unrelated file");
    }
}

#[test]
fn a_config_change_lost_in_an_inotify_overflow_is_found_by_one_rescan() {
    let scene = Scene::new();
    let mut holder = bootstrap(&scene, &[]);
    let first = wait_until(SETTLE, "the holder's kubelet", || {
        scene.kubelet_of(holder.pid())
    });
    // Negative window (bounded sleep): past the config check a second after the kubelet's
    // start, so that only the overflow's rescan can find the change below.
    std::thread::sleep(Duration::from_millis(1500));
    // Stopped, the holder reads no events: the flood fills its queue, and the change that
    // follows is lost (the kernel drops events once the queue is full and queues one
    // IN_Q_OVERFLOW).
    assert!(holder.signal(Signal::SIGSTOP));
    overflow_inotify(scene.lock().parent().expect("lock dir"));
    let config = scene.kubelet_config_file("assigned.yaml", "maxPods: 77\n");
    scene.checkpoint_assign(&config, &[]);
    assert!(holder.signal(Signal::SIGCONT));
    restarted_with(&scene, first, "\"maxPods\":77");
    assert!(
        scene.output().contains("inotify queue overflowed"),
        "the change was not found by the overflow's rescan:\n{}",
        scene.output()
    );
    scene.assert_no_overlap();
}

#[test]
fn a_drop_in_in_a_new_subdirectory_of_config_dir_is_applied() {
    let scene = Scene::new();
    let dir = scene.path().join("kubelet.conf.d");
    fs::create_dir_all(&dir).expect("create the drop-in directory");
    let dir_arg = format!("--config-dir={}", dir.display());
    let _holder = scene.spawn(scene.pivot(&["bootstrap"], &[&dir_arg], &[]));
    let first = wait_until(SETTLE, "the holder's kubelet", || {
        scene.running_kubelets().first().copied()
    });
    // A new subdirectory (watched once it appears), then a drop-in in it, written as an
    // editor saves: a temp file renamed over the name.
    let sub = dir.join("20-team");
    fs::create_dir(&sub).expect("create a subdirectory");
    let tmp = sub.join(".30-pods.conf.tmp");
    fs::write(&tmp, kubelet_config("maxPods: 33\n")).expect("write a drop-in");
    fs::rename(&tmp, sub.join("30-pods.conf")).expect("rename it into place");
    restarted_with(&scene, first, "\"maxPods\":33");
    scene.assert_no_overlap();
}

/// Issue 29: a holder waiting for its `--kubeconfig` to appear (a joining node) follows the
/// path with inotify only: no reads, no timers while nothing happens.
#[test]
fn an_idle_holder_waiting_for_its_kubeconfig_does_no_periodic_work() {
    let scene = Scene::new();
    let kubeconfig = scene.path().join("etc/kubernetes/kubelet.conf");
    let text = kubeconfig.display().to_string();
    let holder = bootstrap(&scene, &[("KUBELET_PIVOT_KUBECONFIG", &text)]);
    wait_until(SETTLE, "the holder's kubelet", || {
        let kubelet = scene.kubelet_of(holder.pid())?;
        let record = holder_record(&scene.state_dir())?;
        (record["kubeletPid"] == kubelet).then_some(())
    });
    let mut windows = Vec::new();
    let quiet = (0..3).any(|_| {
        let calls = calls_during_window(holder.pid());
        let work = periodic_work(&calls).len();
        windows.push((calls.len(), work));
        work == 0
    });
    eprintln!("idle holder waiting for {text}, windows of {WINDOW:?} as (system calls, periodic work): {windows:?}");
    assert!(
        quiet,
        "the holder worked without an event in every window\n{}",
        scene.output()
    );
}
