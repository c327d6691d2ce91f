//! Chaos: a seeded random driver over real supervisors and stand-in kubelets.
//!
//! A pool of at most five live supervisors (bootstraps and self-hosted of generations 1..=4)
//! is hit, step after step, by a random action: start one, SIGKILL one, SIGTERM one, open the
//! lock file (in-process or `cat`), or run `status`. After every step the driver waits (with a
//! deadline) for the node to settle and checks the invariants of DESIGN.md:
//! - I1: the overlap probe never fired, and exactly one kubelet runs while any supervisor lives
//!   (none once all are gone);
//! - I2: when the holder died and another supervisor waited, a kubelet was exec'd again within
//!   1 s of the kill (the stand-in's own start time, `ready - t`, comes on top);
//! - I3: the holder has the highest live generation, and no step starts more kubelets than it
//!   could justify (a start of a higher generation, or the holder's death: one each; anything
//!   else: none), so there is no ping-pong.
//!
//! Knobs: `CHAOS_SEED` (default: random, printed) and `CHAOS_ITERATIONS` (default 300).
//! A failure prints the seed and the step; rerunning with that seed replays the same random
//! choices (the same actions as long as the node settles the same way: which of two equal
//! generations holds can differ). 300 iterations take a few seconds. Long run (about 80 s on
//! 2 cores; build the release stand-in first with `cargo build --release --examples`):
//!     CHAOS_ITERATIONS=10000 cargo test --release --test chaos -- --nocapture

mod support;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::lock_state::{blocked_on, claim_pids, holder_record, status};
use support::{now_ns, ns_between, pid_alive, wait_until, LogLine, Proc, Scene};

const DEFAULT_ITERATIONS: u64 = 300;
const MAX_ALIVE: usize = 5;
const MAX_GENERATION: u32 = 4;
/// Deadline for the node to settle after one step; generous for a loaded CI host.
const SETTLE: Duration = Duration::from_secs(10);
/// I2.
const TAKEOVER: Duration = Duration::from_secs(1);
/// A supervisor asked to stop (SIGTERM, stand-in stops at once) exits within this long.
const EXIT_DEADLINE: Duration = Duration::from_secs(5);
/// Exit code of `status` without a live holder.
const STATUS_NO_HOLDER: i32 = 3;

fn env_u64(var: &str) -> Option<u64> {
    let value = std::env::var(var).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={value:?} is not a whole number")),
    )
}

/// Follows the stand-in log incrementally (the log grows to tens of thousands of lines in a
/// long run; rereading it on every poll would dominate the run time).
struct LogTail {
    path: PathBuf,
    offset: u64,
    starts: Vec<LogLine>,
    /// Kubelets that logged `start` but no `stop`/`crash` yet, by pid (may be dead: SIGKILL).
    started: BTreeMap<i32, LogLine>,
    overlaps: Vec<String>,
}

impl LogTail {
    fn new(path: PathBuf) -> LogTail {
        LogTail {
            path,
            offset: 0,
            starts: Vec::new(),
            started: BTreeMap::new(),
            overlaps: Vec::new(),
        }
    }

    /// Reads the complete lines appended since the last call.
    fn poll(&mut self) {
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return,
            Err(err) => panic!("open stand-in log {}: {err}", self.path.display()),
        };
        file.seek(SeekFrom::Start(self.offset))
            .expect("seek stand-in log");
        let mut text = String::new();
        file.read_to_string(&mut text).expect("read stand-in log");
        // A line still being written has no newline yet: leave it for the next poll.
        let Some(end) = text.rfind('\n') else {
            return;
        };
        self.offset += u64::try_from(end + 1).expect("offset fits");
        for raw in text[..end].lines().filter(|line| !line.is_empty()) {
            let line = LogLine::parse(raw)
                .unwrap_or_else(|| panic!("malformed stand-in log line {raw:?}"));
            match line.event.as_str() {
                "start" => {
                    self.started.insert(line.pid, line.clone());
                    self.starts.push(line);
                }
                "stop" | "crash" => {
                    self.started.remove(&line.pid);
                }
                "OVERLAP" => self.overlaps.push(line.raw),
                _ => {}
            }
        }
    }

    /// `(kubelet pid, supervisor pid)` of the kubelets running now.
    fn running(&mut self) -> Vec<(i32, i32)> {
        self.poll();
        // SIGKILLed kubelets (PDEATHSIG, fencing) log nothing: drop them once they are gone.
        self.started.retain(|pid, _| pid_alive(*pid));
        self.started
            .values()
            .map(|line| (line.pid, line.ppid()))
            .collect()
    }
}

struct Supervisor {
    proc: Proc,
    generation: u32,
}

impl Supervisor {
    fn role(&self) -> &'static str {
        if self.generation == 0 {
            "bootstrap"
        } else {
            "self-hosted"
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Start(u32),
    Kill(usize),
    Term(usize),
    OpenInProcess,
    Cat,
    Status,
}

fn pick_action(rng: &mut StdRng, pool: &[Supervisor], holder: Option<usize>) -> Action {
    let can_start = pool.len() < MAX_ALIVE;
    let can_stop = !pool.is_empty();
    let weights = [
        (if can_start { 4 } else { 0 }),
        (if can_stop { 2 } else { 0 }),
        (if can_stop { 2 } else { 0 }),
        1,
        1,
        1,
    ];
    let total: u32 = weights.iter().sum();
    let mut roll = rng.gen_range(0..total);
    let choice = weights
        .iter()
        .position(|weight| {
            if roll < *weight {
                true
            } else {
                roll -= weight;
                false
            }
        })
        .expect("roll below the total");
    match choice {
        0 => Action::Start(rng.gen_range(0..=MAX_GENERATION)),
        1 => Action::Kill(pick_victim(rng, pool, holder)),
        2 => Action::Term(pick_victim(rng, pool, holder)),
        3 => Action::OpenInProcess,
        4 => Action::Cat,
        _ => Action::Status,
    }
}

/// Half of the stops hit the holder: those are the steps that exercise a takeover.
fn pick_victim(rng: &mut StdRng, pool: &[Supervisor], holder: Option<usize>) -> usize {
    match holder {
        Some(holder) if rng.gen_bool(0.5) => holder,
        _ => rng.gen_range(0..pool.len()),
    }
}

/// The settled state: which pool member holds, and its kubelet.
#[derive(Debug, Clone, Copy)]
struct Settled {
    holder: Option<(usize, i32)>,
}

/// Waits until the node is settled: no kubelet without supervisors; otherwise exactly one
/// kubelet, run by a supervisor of the highest live generation that the holder record names,
/// and every other supervisor standing by (claim written, blocked in flock on the lock).
fn settle(scene: &Scene, tail: &mut LogTail, pool: &[Supervisor], context: &str) -> Settled {
    let max_generation = pool.iter().map(|sup| sup.generation).max();
    let deadline = Instant::now() + SETTLE;
    loop {
        let running = tail.running();
        assert!(
            tail.overlaps.is_empty(),
            "I1 violated {context}: two kubelets ran at once: {:#?}",
            tail.overlaps
        );
        let settled = match (running.as_slice(), max_generation) {
            ([], None) => Some(Settled { holder: None }),
            ([(kubelet, parent)], Some(max)) => pool
                .iter()
                .position(|sup| sup.proc.pid() == *parent)
                .filter(|at| pool[*at].generation == max)
                .filter(|at| {
                    holder_record(&scene.state_dir()).is_some_and(|record| {
                        record["pid"] == *parent
                            && record["kubeletPid"] == *kubelet
                            && record["generation"] == max
                            && record["role"] == pool[*at].role()
                    })
                })
                .filter(|at| {
                    let claimed = claim_pids(&scene.state_dir());
                    let blocked = blocked_on(&scene.lock());
                    pool.iter().enumerate().all(|(other, sup)| {
                        claimed.contains(&sup.proc.pid())
                            && (other == *at || blocked.contains(&sup.proc.pid()))
                    })
                })
                .map(|at| Settled {
                    holder: Some((at, *kubelet)),
                }),
            _ => None,
        };
        if let Some(settled) = settled {
            return settled;
        }
        assert!(
            Instant::now() < deadline,
            "the node did not settle within {SETTLE:?} {context} (I1/I3): running kubelets \
             (pid, supervisor) {running:?}, highest live generation {max_generation:?}, \
             holder record {:?}, claims of {:?}, blocked on the lock {:?}",
            holder_record(&scene.state_dir()),
            claim_pids(&scene.state_dir()),
            blocked_on(&scene.lock())
        );
        std::thread::sleep(support::POLL_INTERVAL);
    }
}

#[derive(Default)]
struct Tally {
    started: u64,
    killed: u64,
    terminated: u64,
    opens: u64,
    statuses: u64,
    handoffs: usize,
    justified: usize,
    takeovers: u64,
    max_takeover_exec: Duration,
    max_takeover_ready: Duration,
}

#[test]
fn chaos() {
    let seed = env_u64("CHAOS_SEED").unwrap_or_else(rand::random);
    let iterations = env_u64("CHAOS_ITERATIONS").unwrap_or(DEFAULT_ITERATIONS);
    println!("chaos: seed={seed} iterations={iterations} (replay with CHAOS_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let scene = Scene::new();
    let mut tail = LogTail::new(scene.log());
    let mut pool: Vec<Supervisor> = Vec::new();
    let mut state = Settled { holder: None };
    let mut tally = Tally::default();
    let began = Instant::now();

    for step in 0..iterations {
        let action = pick_action(&mut rng, &pool, state.holder.map(|(at, _)| at));
        let context = format!("after step {step} {action:?} (seed {seed})");
        let holder_generation = state.holder.map(|(at, _)| pool[at].generation);
        let starts_before = tail.starts.len();
        // Kubelet starts this step may cause (see the module doc).
        let mut justified = 0;
        let mut holder_killed_at = None;
        match action {
            Action::Start(generation) => {
                let cmd = if generation == 0 {
                    scene.pivot(&["bootstrap"], &[], &[])
                } else {
                    let generation = generation.to_string();
                    scene.pivot(&["self-hosted", "--generation", &generation], &[], &[])
                };
                if holder_generation.is_none_or(|held| generation > held) {
                    justified = 1;
                }
                pool.push(Supervisor {
                    proc: scene.spawn(cmd),
                    generation,
                });
                tally.started += 1;
            }
            Action::Kill(at) | Action::Term(at) => {
                let signal = if matches!(action, Action::Kill(_)) {
                    tally.killed += 1;
                    Signal::SIGKILL
                } else {
                    tally.terminated += 1;
                    Signal::SIGTERM
                };
                let mut victim = pool.remove(at);
                let was_holder = state.holder.is_some_and(|(holder, _)| holder == at);
                let killed_ns = now_ns();
                assert!(
                    victim.proc.signal(signal),
                    "supervisor {} died on its own {context}",
                    victim.proc.pid()
                );
                let exit = victim.proc.wait_exit(EXIT_DEADLINE);
                if signal == Signal::SIGTERM {
                    assert_eq!(exit.code(), Some(0), "SIGTERM must end in exit 0 {context}");
                }
                if was_holder && !pool.is_empty() {
                    justified = 1;
                    holder_killed_at = Some(killed_ns);
                }
            }
            // Before the first supervisor ran there is no lock file to open.
            Action::OpenInProcess | Action::Cat if !scene.lock().exists() => {}
            Action::OpenInProcess => {
                drop(File::open(scene.lock()).expect("open the lock file"));
                tally.opens += 1;
            }
            Action::Cat => {
                let cat = Command::new("cat")
                    .arg(scene.lock())
                    .stdout(Stdio::null())
                    .status()
                    .expect("run cat");
                assert!(cat.success());
                tally.opens += 1;
            }
            Action::Status => {
                let (code, json) = status(&scene);
                match state.holder {
                    Some((at, kubelet)) => {
                        assert_eq!(code, 0, "status {context}: {json}");
                        assert_eq!(json["lock"]["holder"]["pid"], pool[at].proc.pid(), "{json}");
                        assert_eq!(json["lock"]["holder"]["kubeletPid"], kubelet, "{json}");
                        let claims = json["lock"]["claims"].as_array().expect("claims");
                        assert_eq!(
                            claims.len(),
                            pool.len(),
                            "one claim per live supervisor: {json}"
                        );
                    }
                    None => assert_eq!(code, STATUS_NO_HOLDER, "status {context}: {json}"),
                }
                tally.statuses += 1;
            }
        }

        state = settle(&scene, &mut tail, &pool, &context);
        let new_starts = &tail.starts[starts_before..];
        assert!(
            new_starts.len() <= justified,
            "ping-pong {context}: {} kubelet starts where {justified} can be justified: {:#?}",
            new_starts.len(),
            new_starts.iter().map(|line| &line.raw).collect::<Vec<_>>()
        );
        tally.handoffs += new_starts.len();
        tally.justified += justified;
        if let Some(killed_ns) = holder_killed_at {
            let first = new_starts
                .first()
                .expect("a takeover start after the holder died");
            let exec = ns_between(killed_ns, first.t_ns);
            let ready_ns = u128::try_from(first.num("ready")).expect("ready is positive");
            let ready = ns_between(killed_ns, ready_ns);
            assert!(
                exec <= TAKEOVER,
                "I2 violated {context}: the next kubelet was exec'd {exec:?} after the holder died"
            );
            tally.takeovers += 1;
            tally.max_takeover_exec = tally.max_takeover_exec.max(exec);
            tally.max_takeover_ready = tally.max_takeover_ready.max(ready);
        }
    }

    // All gone: no kubelet may be left behind.
    let context = format!("after stopping everything (seed {seed})");
    for mut sup in pool.drain(..) {
        sup.proc.signal(Signal::SIGKILL);
        sup.proc.wait_exit(EXIT_DEADLINE);
    }
    wait_until(
        SETTLE,
        &format!("every kubelet to be gone {context}"),
        || tail.running().is_empty().then_some(()),
    );
    scene.assert_no_overlap();
    assert!(
        tally.handoffs <= tally.justified,
        "more kubelet starts ({}) than events that justify one ({})",
        tally.handoffs,
        tally.justified
    );
    println!(
        "chaos summary: iterations={iterations} seed={seed} handoffs={} justified={} \
         takeovers={} max_takeover_exec_ms={:.1} max_takeover_ready_ms={:.1} started={} \
         killed={} terminated={} opens={} statuses={} elapsed_s={:.1}",
        tally.handoffs,
        tally.justified,
        tally.takeovers,
        tally.max_takeover_exec.as_secs_f64() * 1e3,
        tally.max_takeover_ready.as_secs_f64() * 1e3,
        tally.started,
        tally.killed,
        tally.terminated,
        tally.opens,
        tally.statuses,
        began.elapsed().as_secs_f64()
    );
}
