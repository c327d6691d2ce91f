//! A background sampler of the node: every ~2 ms it reads the stand-in log (incrementally) and
//! checks which stand-in kubelets are alive, so that "two kubelets at once" and "no kubelet for
//! too long" are seen at any instant, not only at the moments a test looks.
//!
//! A kubelet is a `start` line of the log; it is live from its exec (`t=`) until its pid is
//! seen dead or a zombie (the pid's start time is remembered, so a reused pid is not mistaken
//! for it). Two checks find two kubelets at once:
//! - *count*: two kubelets live in the same sample (the brief's definition);
//! - *exec*: a kubelet was exec'd (`t=`) before the last sample that saw an earlier kubelet
//!   alive, i.e. the product started a kubelet while the old one still ran, even if the old one
//!   was gone by the time the new one wrote its `start` line. The sample's time stamp is taken
//!   before the liveness check, so this never blames a correct product.
//!
//! A kubelet's *group* also counts its logged grandchildren (`grandchild` lines): a group is live
//! while its kubelet or any grandchild is, and two live groups are reported separately.
//!
//! Gaps (no live kubelet) are measured only while the sampler is *armed* (a test arms it while a
//! kubelet is owed, e.g. while a non-frozen bootstrap lives and nobody else legitimately holds
//! the lock). A gap starts at the last sample that still saw a kubelet (or at arming) and ends at
//! the exec time of the next kubelet, so the stand-in's own start time (exec to `start` line) is
//! not part of it.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::gap_trace::{self, ThreadSnapshot};
use super::{now_ns, LogLine};

/// How often the sampler looks.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(2);

/// Two kubelets (or kubelet groups) at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// `count`, `exec` or `group` (see the module doc).
    pub kind: &'static str,
    /// When it was seen (ns since the epoch).
    pub at_ns: u128,
    /// The kubelet pids involved.
    pub pids: Vec<i32>,
    /// What was seen, for the failure message.
    pub detail: String,
}

/// A time without a live kubelet while armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub from_ns: u128,
    pub to_ns: u128,
    /// The kubelet whose exec ended it; `None` when disarming ended it.
    pub ended_by: Option<i32>,
}

impl Gap {
    pub fn length(&self) -> Duration {
        super::ns_between(self.from_ns, self.to_ns)
    }
}

/// One kubelet as the sampler knows it.
#[derive(Debug, Clone)]
pub struct Kubelet {
    pub pid: i32,
    /// The supervisor that started it (`ppid` of its start line).
    pub ppid: i32,
    pub exec_ns: u128,
    pub ready_ns: u128,
    /// /proc start time (clock ticks since boot), 0 if it was already gone when first seen.
    start_ticks: u64,
    /// Time stamp of the last sample that saw it alive (at least `ready_ns`).
    pub last_alive_ns: u128,
    /// Time stamp of the sample that first saw it dead.
    pub dead_ns: Option<u128>,
    /// Grandchildren (same process group) with their start times.
    grandchildren: Vec<(i32, u64, bool)>,
}

impl Kubelet {
    pub fn alive(&self) -> bool {
        self.dead_ns.is_none()
    }

    fn group_alive(&self) -> bool {
        self.alive() || self.grandchildren.iter().any(|(_, _, alive)| *alive)
    }
}

/// What the sampler saw so far.
#[derive(Debug, Default)]
pub struct Report {
    pub samples: u64,
    /// The longest time between two samples (the sampler's resolution under load).
    pub max_interval: Duration,
    pub max_live: usize,
    pub overlaps: Vec<Overlap>,
    /// Closed gaps, in order.
    pub gaps: Vec<Gap>,
    /// Start of the gap still open, if any.
    pub open_gap_from: Option<u128>,
    /// Every kubelet seen, by pid (a reused pid replaces the older entry once that one is dead).
    pub kubelets: BTreeMap<i32, Kubelet>,
    /// Kubelets in start order: (pid, exec_ns).
    pub start_order: Vec<(i32, u128)>,
    /// Pids of kubelets live at the last sample.
    pub live: Vec<i32>,
    /// Time stamp of the last sample.
    pub last_sample_ns: u128,
    /// The watched processes' threads, sampled while no kubelet has lived for long
    /// ([`gap_trace::PROBE_AFTER`]; armed or not), at most [`gap_trace::MAX_SNAPSHOTS`].
    pub snapshots: Vec<ThreadSnapshot>,
}

impl Report {
    /// The longest gap so far (closed or still open at the last sample).
    pub fn longest_gap(&self) -> Duration {
        let open = self
            .open_gap_from
            .map(|from| super::ns_between(from, self.last_sample_ns));
        self.gaps
            .iter()
            .map(Gap::length)
            .chain(open)
            .max()
            .unwrap_or_default()
    }

    /// The gaps (closed, and the open one up to the last sample) that overlap `[from, to]`.
    pub fn gaps_between(&self, from_ns: u128, to_ns: u128) -> Vec<Gap> {
        let open = self.open_gap_from.map(|from| Gap {
            from_ns: from,
            to_ns: self.last_sample_ns,
            ended_by: None,
        });
        self.gaps
            .iter()
            .copied()
            .chain(open)
            .filter(|gap| gap.to_ns >= from_ns && gap.from_ns <= to_ns)
            .collect()
    }

    /// Kubelets exec'd at or after `from_ns`, in start order.
    pub fn started_since(&self, from_ns: u128) -> Vec<&Kubelet> {
        self.start_order
            .iter()
            .filter(|(_, exec)| *exec >= from_ns)
            .filter_map(|(pid, exec)| {
                self.kubelets
                    .get(pid)
                    .filter(|kubelet| kubelet.exec_ns == *exec)
            })
            .collect()
    }

    /// Panics with every overlap seen.
    pub fn assert_no_overlap(&self, context: &str) {
        assert!(
            self.overlaps.is_empty(),
            "two kubelets at once {context} (sampler, {} samples, max interval {:?}): {:#?}",
            self.samples,
            self.max_interval,
            self.overlaps
        );
    }

    /// One line for eprintln.
    pub fn summary(&self) -> String {
        format!(
            "samples={} max_interval_ms={:.1} max_live={} overlaps={} gaps={} longest_gap_ms={:.1}",
            self.samples,
            self.max_interval.as_secs_f64() * 1e3,
            self.max_live,
            self.overlaps.len(),
            self.gaps.len() + usize::from(self.open_gap_from.is_some()),
            self.longest_gap().as_secs_f64() * 1e3
        )
    }
}

struct Shared {
    report: Report,
    armed: bool,
    /// Set by `arm(true)` while no kubelet lives: the gap starts there.
    armed_at: Option<u128>,
    /// Processes whose threads are sampled during a long gap (see `gap_trace`).
    watch: Vec<i32>,
    /// A killed process and since when: its threads are sampled while it takes longer than
    /// [`gap_trace::PROBE_AFTER`] to be gone (see [`Sampler::watch_dying`]).
    dying: Option<(i32, u128)>,
}

/// The sampler thread and its findings. Stops (and joins) when dropped.
pub struct Sampler {
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling the stand-in log `log`, armed (gaps count) from the start.
    pub fn start(log: PathBuf) -> Sampler {
        Self::start_armed(log, true)
    }

    /// Starts sampling `log`; gaps count only once armed.
    pub fn start_armed(log: PathBuf, armed: bool) -> Sampler {
        let shared = Arc::new(Mutex::new(Shared {
            report: Report::default(),
            armed,
            armed_at: armed.then(now_ns),
            watch: Vec::new(),
            dying: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
            thread::Builder::new()
                .name("sampler".to_owned())
                .spawn(move || run(&log, &shared, &stop))
                .expect("start the sampler thread")
        };
        let sampler = Sampler {
            shared,
            stop,
            thread: Some(thread),
        };
        // Return once the first sample is in, so that callers can rely on it.
        super::wait_until(Duration::from_secs(5), "the sampler's first sample", || {
            (sampler.lock().report.samples > 0).then_some(())
        });
        sampler
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic in the sampler thread poisons the mutex; the data is still what it saw.
        self.shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Arms or disarms gap measurement; disarming closes an open gap at this instant.
    pub fn arm(&self, armed: bool) {
        let now = now_ns();
        let mut shared = self.lock();
        if shared.armed == armed {
            return;
        }
        shared.armed = armed;
        if armed {
            shared.armed_at = Some(now);
        } else {
            shared.armed_at = None;
            if let Some(from) = shared.report.open_gap_from.take() {
                shared.report.gaps.push(Gap {
                    from_ns: from,
                    to_ns: now.max(from),
                    ended_by: None,
                });
            }
        }
    }

    /// The processes (live supervisors) whose threads are sampled while a gap is long.
    pub fn watch(&self, pids: Vec<i32>) {
        self.lock().watch = pids;
    }

    /// `pid` is about to be killed: its threads are sampled while it is slow to be gone (a
    /// killed holder's kubelet lives until its exit ends).
    pub fn watch_dying(&self, pid: i32) {
        self.lock().dying = Some((pid, now_ns()));
    }

    /// Waits for one more complete sample, so that what happened before this call is seen.
    pub fn sync(&self) {
        let after = now_ns();
        super::wait_until(Duration::from_secs(5), "a fresh sample", || {
            (self.lock().report.last_sample_ns > after).then_some(())
        });
        // The sample stamped after `after` may still be in progress; one more is complete.
        let seen = self.lock().report.samples;
        super::wait_until(Duration::from_secs(5), "a complete sample", || {
            (self.lock().report.samples > seen + 1).then_some(())
        });
    }

    /// Runs `f` on the report as it is now (under the lock: keep it short).
    pub fn with<T>(&self, f: impl FnOnce(&Report) -> T) -> T {
        f(&self.lock().report)
    }

    /// Stops sampling (after one last sample) and returns the report.
    pub fn finish(mut self) -> Report {
        self.sync();
        self.stop_thread();
        std::mem::take(&mut self.lock().report)
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            // A panicking sampler has recorded nothing wrong in the report; its panic message
            // went to stderr already.
            let _ = thread.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// `/proc/PID/stat`: (state, start time in ticks).
pub(crate) fn stat(pid: i32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After `)`: state is field 3; starttime is field 22.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The start time of `pid` (field 22 of its stat, as claims and records name it).
pub fn start_time(pid: i32) -> u64 {
    stat(pid)
        .unwrap_or_else(|| panic!("no readable /proc/{pid}/stat"))
        .1
}

/// The start time of `pid` if it is alive (neither zombie nor dead).
fn alive_since(pid: i32) -> Option<u64> {
    stat(pid)
        .filter(|(state, _)| *state != 'Z' && *state != 'X')
        .map(|(_, start)| start)
}

/// True if `pid` has `STANDIN_LOG=<log>` in its environment.
fn writes_to(pid: i32, log: &Path) -> bool {
    let mut wanted = b"STANDIN_LOG=".to_vec();
    wanted.extend_from_slice(log.as_os_str().as_encoded_bytes());
    fs::read(format!("/proc/{pid}/environ"))
        .map(|environ| environ.split(|byte| *byte == 0).any(|var| var == wanted))
        .unwrap_or(false)
}

/// Incremental reader of the log's complete lines.
struct Tail {
    path: PathBuf,
    offset: u64,
}

impl Tail {
    fn poll(&mut self) -> Vec<LogLine> {
        let Ok(mut file) = File::open(&self.path) else {
            return Vec::new();
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut bytes = Vec::new();
        if file.read_to_end(&mut bytes).is_err() {
            return Vec::new();
        }
        let Some(end) = bytes.iter().rposition(|byte| *byte == b'\n') else {
            return Vec::new();
        };
        self.offset += u64::try_from(end + 1).expect("offset fits");
        String::from_utf8_lossy(&bytes[..end])
            .lines()
            .filter_map(LogLine::parse)
            .collect()
    }
}

fn run(log: &Path, shared: &Mutex<Shared>, stop: &AtomicBool) {
    let mut tail = Tail {
        path: log.to_owned(),
        offset: 0,
    };
    let mut prev_ns: Option<u128> = None;
    let mut prev_live = 0usize;
    // Since when no kubelet lives, armed or not (a takeover is owed among self-hosted ones too).
    let mut none_since: Option<u128> = None;
    while !stop.load(Ordering::SeqCst) {
        // The time stamp comes before every check: whatever is seen alive was alive at `ts`.
        let ts = now_ns();
        let lines = tail.poll();
        let probe = {
            let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
            let shared = &mut *guard;
            sample(log, shared, ts, lines, prev_ns, prev_live);
            prev_live = shared.report.live.len();
            none_since = match (shared.report.live.is_empty(), none_since) {
                (false, _) => None,
                (true, None) => Some(ts),
                (true, since) => since,
            };
            let long_gap = none_since
                .is_some_and(|from| super::ns_between(from, ts) >= gap_trace::PROBE_AFTER);
            let room = shared.report.snapshots.len() < gap_trace::MAX_SNAPSHOTS;
            let mut probe = if long_gap && room {
                shared.watch.clone()
            } else {
                Vec::new()
            };
            if let Some((pid, since)) = shared.dying {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    shared.dying = None;
                } else if room && super::ns_between(since, ts) >= gap_trace::PROBE_AFTER {
                    probe.push(pid);
                }
            }
            probe
        };
        if !probe.is_empty() {
            // Outside the lock: /proc reads of a few threads each.
            let at = now_ns();
            let seen: Vec<ThreadSnapshot> = probe
                .iter()
                .flat_map(|pid| gap_trace::snapshot(*pid, at))
                .collect();
            let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
            guard.report.snapshots.extend(seen);
        }
        prev_ns = Some(ts);
        thread::sleep(SAMPLE_INTERVAL);
    }
}

fn sample(
    log: &Path,
    shared: &mut Shared,
    ts: u128,
    lines: Vec<LogLine>,
    prev_ns: Option<u128>,
    prev_live: usize,
) {
    let report = &mut shared.report;
    let mut new_pids = Vec::new();
    for line in lines {
        match line.event.as_str() {
            "start" => {
                let ready = line
                    .field("ready")
                    .and_then(|ready| ready.parse().ok())
                    .unwrap_or(line.t_ns);
                // Checked against the log's environment once, so that a reused pid is not taken
                // for the kubelet.
                let start_ticks = alive_since(line.pid)
                    .filter(|_| writes_to(line.pid, log))
                    .unwrap_or(0);
                let kubelet = Kubelet {
                    pid: line.pid,
                    ppid: line.ppid(),
                    exec_ns: line.t_ns,
                    ready_ns: ready,
                    start_ticks,
                    last_alive_ns: ready,
                    dead_ns: (start_ticks == 0).then_some(ts),
                    grandchildren: Vec::new(),
                };
                report.start_order.push((line.pid, line.t_ns));
                report.kubelets.insert(line.pid, kubelet);
                new_pids.push(line.pid);
            }
            "grandchild" => {
                let parent = line.ppid();
                let ticks = alive_since(line.pid).unwrap_or(0);
                if let Some(kubelet) = report.kubelets.get_mut(&parent) {
                    kubelet.grandchildren.push((line.pid, ticks, ticks != 0));
                }
            }
            _ => {}
        }
    }

    // Liveness of every kubelet (and grandchild) not yet seen dead.
    let mut live = Vec::new();
    let mut live_groups = Vec::new();
    for kubelet in report.kubelets.values_mut() {
        if kubelet.alive() {
            if alive_since(kubelet.pid) == Some(kubelet.start_ticks) {
                kubelet.last_alive_ns = kubelet.last_alive_ns.max(ts);
            } else {
                kubelet.dead_ns = Some(ts);
            }
        }
        for (pid, ticks, alive) in &mut kubelet.grandchildren {
            if *alive && alive_since(*pid) != Some(*ticks) {
                *alive = false;
            }
        }
        if kubelet.alive() {
            live.push(kubelet.pid);
        }
        if kubelet.group_alive() {
            live_groups.push(kubelet.pid);
        }
    }

    if live.len() >= 2 {
        record_overlap(report, "count", ts, &live);
    }
    if live_groups.len() >= 2 {
        record_overlap(report, "group", ts, &live_groups);
    }
    // Exec-time check: a new kubelet exec'd while an earlier one was still seen alive.
    for pid in &new_pids {
        let Some(new) = report.kubelets.get(pid).cloned() else {
            continue;
        };
        let earlier: Vec<i32> = report
            .kubelets
            .values()
            .filter(|old| old.pid != new.pid && old.exec_ns < new.exec_ns)
            .filter(|old| old.last_alive_ns > new.exec_ns)
            .map(|old| old.pid)
            .collect();
        if !earlier.is_empty() {
            let mut pids = earlier.clone();
            pids.push(new.pid);
            let detail = format!(
                "kubelet {} (supervisor {}) exec'd at {} while {} still ran: {:?}",
                new.pid,
                new.ppid,
                new.exec_ns,
                if earlier.len() == 1 {
                    "an earlier kubelet"
                } else {
                    "earlier kubelets"
                },
                earlier
                    .iter()
                    .filter_map(|pid| report.kubelets.get(pid))
                    .map(|old| format!(
                        "pid {} (supervisor {}) exec {} last seen alive {}",
                        old.pid, old.ppid, old.exec_ns, old.last_alive_ns
                    ))
                    .collect::<Vec<_>>()
            );
            report.overlaps.push(Overlap {
                kind: "exec",
                at_ns: ts,
                pids,
                detail,
            });
        }
    }

    // Gaps.
    if let Some(from) = report.open_gap_from {
        // Closed by the exec of the first kubelet seen since (even one already dead again).
        let ended = new_pids
            .iter()
            .filter_map(|pid| report.kubelets.get(pid))
            .min_by_key(|kubelet| kubelet.exec_ns)
            .map(|kubelet| (kubelet.pid, kubelet.exec_ns))
            .or_else(|| live.first().map(|pid| (*pid, ts)));
        if let Some((pid, exec)) = ended {
            report.gaps.push(Gap {
                from_ns: from,
                to_ns: exec.clamp(from, ts.max(from)),
                ended_by: Some(pid),
            });
            report.open_gap_from = None;
        }
    }
    if shared.armed && live.is_empty() && report.open_gap_from.is_none() && new_pids.is_empty() {
        // Conservative start: the previous sample still saw a kubelet (or arming came later).
        let from = match (prev_ns, prev_live) {
            (Some(prev), n) if n > 0 => prev,
            _ => ts,
        };
        let from = shared.armed_at.map_or(from, |armed| from.max(armed));
        report.open_gap_from = Some(from);
    }

    report.max_live = report.max_live.max(live.len());
    if let Some(prev) = prev_ns {
        report.max_interval = report.max_interval.max(super::ns_between(prev, ts));
    }
    report.live = live;
    report.samples += 1;
    report.last_sample_ns = ts;
}

fn record_overlap(report: &mut Report, kind: &'static str, ts: u128, pids: &[i32]) {
    // One entry per distinct set of pids (an overlap lasts many samples).
    if report
        .overlaps
        .iter()
        .any(|seen| seen.kind == kind && seen.pids == pids)
    {
        return;
    }
    let detail = pids
        .iter()
        .filter_map(|pid| report.kubelets.get(pid))
        .map(|kubelet| {
            format!(
                "pid {} (supervisor {}) exec {} ready {} last seen alive {}",
                kubelet.pid, kubelet.ppid, kubelet.exec_ns, kubelet.ready_ns, kubelet.last_alive_ns
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    report.overlaps.push(Overlap {
        kind,
        at_ns: ts,
        pids: pids.to_vec(),
        detail,
    });
}

/// utime + stime of `pid` in clock ticks (`/proc/PID/stat` fields 14 and 15), `None` if gone.
pub fn cpu_ticks(pid: i32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
pub fn ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|ticks| u64::try_from(ticks).ok())
        .filter(|ticks| *ticks > 0)
        .unwrap_or(100)
}
