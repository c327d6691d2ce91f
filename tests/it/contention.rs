//! How a holder sees a contender block (ARCHITECTURE.md, "Seeing a contender block"): after
//! an open of the lock file by a known claimant, fast looks at the claimant's own /proc files
//! find it asleep in flock, and one read of /proc/locks confirms before the holder yields.
//!
//! The claimant here is this test process itself: it holds the flock of a real claim file
//! (generation 5, naming its pid and start time, as a supervisor's), opens the lock file and
//! blocks in flock on it from a thread, as a supervisor's flock thread does. That lets the
//! test choose when it blocks: long after its open, with nothing else happening on the node,
//! the yield can only come from a timed look (the timer firing alone).

use crate::support;

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use support::lock_state::claims_dir;
use support::sampler::start_time;
use support::{wait_until, Proc, Scene};

/// Deadline for states the product reaches in milliseconds; generous for a loaded CI host.
const SETTLE: Duration = Duration::from_secs(10);

/// A live claim of generation 5 owned by this process, flock held until dropped.
struct FakeClaimant {
    _claim: Flock<File>,
    path: PathBuf,
}

impl FakeClaimant {
    fn new(scene: &Scene) -> FakeClaimant {
        let pid = std::process::id();
        let start = start_time(i32::try_from(pid).expect("pid"));
        let dir = claims_dir(&scene.state_dir());
        let staged = scene.path().join("staged-claim.json");
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&staged)
            .expect("create the staged claim");
        let claim = Flock::lock(file, FlockArg::LockExclusiveNonblock).expect("flock the claim");
        fs::write(
            &staged,
            format!(
                r#"{{"role":"self-hosted","generation":5,"pid":{pid},"startTime":{start},"since":"2026-01-01T00:00:00.000Z"}}"#
            ),
        )
        .expect("write the claim");
        let path = dir.join(format!("{pid}-{start}.json"));
        fs::rename(&staged, &path).expect("rename the claim into place");
        FakeClaimant {
            _claim: claim,
            path,
        }
    }
}

impl Drop for FakeClaimant {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// A bootstrap that holds the lock; returns it and its kubelet.
fn holding_bootstrap(scene: &Scene) -> (Proc, i32) {
    let boot = scene.spawn(scene.pivot(&["bootstrap"], &[], &[]));
    let pid = boot.pid();
    let kubelet = wait_until(SETTLE, "the bootstrap's kubelet", || scene.kubelet_of(pid));
    (boot, kubelet)
}

/// The lock file opened now; a thread blocks in flock on it after `delay` and reports when
/// it got the lock (the descriptor is kept until the returned lock is dropped).
fn open_then_block(scene: &Scene, delay: Duration) -> mpsc::Receiver<(Instant, Flock<File>)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(scene.lock())
        .expect("open the lock file");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        thread::sleep(delay);
        let blocked = Instant::now();
        if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusive) {
            let _ = tx.send((blocked, lock));
        }
    });
    rx
}

fn yield_line(scene: &Scene) -> Option<String> {
    let me = format!("pid {}", std::process::id());
    scene
        .output()
        .lines()
        .find(|line| {
            line.contains("verified contender is blocked on the lock; yielding")
                && line.contains(&me)
        })
        .map(str::to_owned)
}

#[test]
fn a_claimant_that_blocks_long_after_its_open_is_seen_by_a_timed_look_alone() {
    let scene = Scene::new();
    let (_boot, kubelet) = holding_bootstrap(&scene);
    let _claimant = FakeClaimant::new(&scene);
    // Well past the burst of fast looks after the open: only the slower timed looks are
    // left to see it, and nothing else happens on the node meanwhile (no open, no claim).
    let got = open_then_block(&scene, Duration::from_millis(300));
    let (blocked, _lock) = got
        .recv_timeout(SETTLE)
        .expect("the holder never handed the lock to the blocked claimant");
    let line = wait_until(SETTLE, "the holder's yield line", || yield_line(&scene));
    assert!(line.contains("self-hosted gen 5"), "{line}");
    // Handed over within the timed looks' cadence (milliseconds), not at the next event or
    // the slow 100 ms look: a second is the bound a loaded CI host still meets.
    let waited = blocked.elapsed();
    assert!(
        waited < Duration::from_secs(1),
        "the lock came {waited:?} after the claimant blocked"
    );
    wait_until(SETTLE, "the bootstrap's kubelet to stop", || {
        (!scene.running_kubelets().contains(&kubelet)).then_some(())
    });
}

#[test]
fn a_claimant_that_opens_and_never_blocks_is_not_yielded_to() {
    let scene = Scene::new();
    let (boot, kubelet) = holding_bootstrap(&scene);
    let _claimant = FakeClaimant::new(&scene);
    let _lock = OpenOptions::new()
        .read(true)
        .open(scene.lock())
        .expect("open the lock file");
    // Negative window: past the burst, the open window (500 ms) and into the slow looks.
    let until = Instant::now() + Duration::from_millis(1100);
    while Instant::now() < until {
        assert_eq!(
            scene.kubelet_of(boot.pid()),
            Some(kubelet),
            "the holder stopped its kubelet for a claimant that never blocked"
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(yield_line(&scene), None);
}

/// `se.slice` of `/proc/PID/sched` in ns (Linux 6.12 and later show it).
fn slice_of(pid: &str) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/sched"))
        .ok()?
        .lines()
        .find(|line| line.starts_with("se.slice"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

#[test]
fn the_supervisor_runs_with_short_slices_and_its_kubelet_with_the_default() {
    let Some(default) = slice_of("self") else {
        eprintln!("skipped: this kernel shows no se.slice in /proc/PID/sched");
        return;
    };
    let scene = Scene::new();
    let (boot, kubelet) = holding_bootstrap(&scene);
    let supervisor = slice_of(&boot.pid().to_string()).expect("the supervisor's sched");
    assert_eq!(
        supervisor, 100_000,
        "the supervisor asks for a 0.1 ms slice (default here {default} ns)"
    );
    let kubelet = slice_of(&kubelet.to_string()).expect("the kubelet's sched");
    assert_eq!(kubelet, default, "the kubelet gets the default slice back");
}
