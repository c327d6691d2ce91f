//! Where the time without a kubelet goes: the distribution of the sampler's gaps, and for each
//! long gap what the supervisors said and what their threads were doing meanwhile.
//!
//! - [`GapStats`]: count, p50, p99 and max of the gaps that a kubelet's exec ended (a takeover
//!   or a handoff), apart from those that disarming ended (the driver took the lock itself).
//! - [`ThreadSnapshot`]: while a gap has been open for [`PROBE_AFTER`], the sampler looks at
//!   every thread of the watched processes (the live supervisors): its state, its kernel wait
//!   channel (`/proc/PID/task/TID/wchan`), the system call it sits in (`syscall`), and for a
//!   thread in uninterruptible sleep (`D`) its kernel stack. That tells a waiter blocked in
//!   `flock` from one that runs (`R`, a scheduling delay) or waits in our event loop (`ep_poll`).
//! - [`SupervisorLog`]: the supervisors' own log lines (stderr, RFC 3339 time stamps) parsed
//!   back, so a long gap can be printed as a timeline of what each supervisor did.

use std::fs;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use super::sampler::Gap;

/// A gap open this long gets its waiters' threads sampled.
pub const PROBE_AFTER: Duration = Duration::from_millis(100);
/// At most this many thread snapshots are kept (a bound on memory in a long run).
pub const MAX_SNAPSHOTS: usize = 200_000;

/// The distribution of gap lengths, in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GapStats {
    pub count: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Gaps longer than 300 ms and than 1 s.
    pub over_300ms: usize,
    pub over_1s: usize,
}

impl GapStats {
    /// Of the gaps for which `keep` holds.
    pub fn of(gaps: &[Gap], keep: impl Fn(&Gap) -> bool) -> GapStats {
        let mut ms: Vec<f64> = gaps
            .iter()
            .filter(|gap| keep(gap))
            .map(|gap| gap.length().as_secs_f64() * 1e3)
            .collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| -> f64 {
            if ms.is_empty() {
                return 0.0;
            }
            // Nearest rank.
            let rank = (q * ms.len() as f64).ceil() as usize;
            ms[rank.clamp(1, ms.len()) - 1]
        };
        GapStats {
            count: ms.len(),
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: ms.last().copied().unwrap_or(0.0),
            over_300ms: ms.iter().filter(|ms| **ms > 300.0).count(),
            over_1s: ms.iter().filter(|ms| **ms > 1000.0).count(),
        }
    }

    /// `name_count=.. name_p50_ms=.. ...` for a summary line.
    pub fn fields(&self, name: &str) -> String {
        format!(
            "{name}_count={} {name}_p50_ms={:.1} {name}_p99_ms={:.1} {name}_max_ms={:.1} \
             {name}_over_300ms={} {name}_over_1s={}",
            self.count, self.p50_ms, self.p99_ms, self.max_ms, self.over_300ms, self.over_1s
        )
    }
}

/// One thread of a watched process, seen during a long gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSnapshot {
    pub at_ns: u128,
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    pub state: char,
    pub wchan: String,
    /// First field of `/proc/TID/syscall`: the system call number, `running` or `-1`.
    pub syscall: String,
    /// The kernel stack of a thread in `D` state (function names only).
    pub stack: Option<String>,
    /// For a thread in `D` state in a system call on a descriptor (its first argument): what
    /// the descriptor names, and for a `/proc/PID/...` file that process's state and wait.
    pub file: Option<String>,
}

impl ThreadSnapshot {
    /// What the thread does, without the time: consecutive equal looks are printed once.
    pub fn doing(&self) -> String {
        let mut text = format!(
            "pid {} tid {} ({}) {} wchan={} syscall={}",
            self.pid, self.tid, self.comm, self.state, self.wchan, self.syscall
        );
        if let Some(stack) = &self.stack {
            text.push_str(" stack=");
            text.push_str(stack);
        }
        if let Some(file) = &self.file {
            text.push_str(" file=");
            text.push_str(file);
        }
        text
    }
}

/// Every thread of `pid` as `/proc` shows it now (none once it is gone), and those of its
/// children that are not kubelets yet (a child still between its clone and its execve, which
/// the parent waits for in a vfork: the kubelet spawn).
pub fn snapshot(pid: i32, at_ns: u128) -> Vec<ThreadSnapshot> {
    let mut out = threads(pid, at_ns);
    let children: Vec<i32> = out
        .iter()
        .filter(|thread| thread.wchan == "kernel_clone")
        .filter_map(|thread| {
            fs::read_to_string(format!("/proc/{pid}/task/{}/children", thread.tid)).ok()
        })
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    for child in children {
        out.extend(threads(child, at_ns));
    }
    out
}

fn threads(pid: i32, at_ns: u128) -> Vec<ThreadSnapshot> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let dir = task.path();
        let Some((comm, state)) = comm_state(&dir) else {
            continue;
        };
        let wchan = fs::read_to_string(dir.join("wchan")).unwrap_or_default();
        let syscall_line = fs::read_to_string(dir.join("syscall")).unwrap_or_default();
        let mut fields = syscall_line.split_whitespace();
        let syscall = fields.next().unwrap_or_default().to_owned();
        let stack = (state == 'D').then(|| kernel_stack(&dir));
        let file = fields
            .next()
            .filter(|_| state == 'D')
            .and_then(|arg| i64::from_str_radix(arg.trim_start_matches("0x"), 16).ok())
            .and_then(|fd| described(pid, fd));
        out.push(ThreadSnapshot {
            at_ns,
            pid,
            tid,
            comm,
            state,
            wchan: if wchan.is_empty() { "0".into() } else { wchan },
            syscall,
            stack,
            file,
        });
    }
    out
}

/// What descriptor `fd` of `pid` names; for `/proc/N/...`, also N's state, wait channel and
/// kernel stack (the process whose /proc file a reader waits on).
fn described(pid: i32, fd: i64) -> Option<String> {
    let target = fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    let target = target.to_string_lossy().into_owned();
    let other = target
        .strip_prefix("/proc/")
        .and_then(|rest| rest.split('/').next())
        .and_then(|n| n.parse::<i32>().ok());
    let Some(other) = other else {
        return Some(target);
    };
    let dir = Path::new("/proc").join(other.to_string());
    // Not its `stat`: that may be the very read that blocks.
    let comm = fs::read_to_string(dir.join("comm")).unwrap_or_default();
    let wchan = fs::read_to_string(dir.join("wchan")).unwrap_or_default();
    Some(format!(
        "{target}[{} wchan={wchan} stack={}]",
        comm.trim(),
        kernel_stack(&dir)
    ))
}

/// `(comm, state)` from `DIR/stat`.
fn comm_state(dir: &Path) -> Option<(String, char)> {
    let text = fs::read_to_string(dir.join("stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let state = text
        .get(close + 1..)?
        .split_whitespace()
        .next()?
        .chars()
        .next()?;
    Some((comm, state))
}

/// `DIR/stack` as `a<b<c` (innermost first, offsets dropped).
fn kernel_stack(dir: &Path) -> String {
    fs::read_to_string(dir.join("stack"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .map(|frame| frame.split('+').next().unwrap_or(frame))
        .collect::<Vec<_>>()
        .join("<")
}

/// One line of a supervisor's stderr with its time stamp.
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub at_ns: u128,
    /// Which supervisor: `pid/rank` from its `supervisor starting` line, else the file name.
    pub who: String,
    pub text: String,
}

/// The supervisors' log lines, from the scene's output files.
#[derive(Debug, Default)]
pub struct SupervisorLog {
    pub entries: Vec<LogEntry>,
}

impl SupervisorLog {
    /// Reads every file in `outputs` (one per supervisor).
    pub fn read(outputs: &[std::path::PathBuf]) -> SupervisorLog {
        let mut entries = Vec::new();
        for path in outputs {
            let text = fs::read_to_string(path).unwrap_or_default();
            let who = text
                .lines()
                .find(|line| line.contains("supervisor starting"))
                .map(|line| format!("{}/{}", field(line, "pid"), field(line, "rank")))
                .unwrap_or_else(|| {
                    path.file_name()
                        .map(|name| name.to_string_lossy().into_owned())
                        .unwrap_or_default()
                });
            for line in text.lines() {
                let Some((stamp, rest)) = line.split_once(' ') else {
                    continue;
                };
                let Some(at_ns) = parse_stamp(stamp) else {
                    continue;
                };
                entries.push(LogEntry {
                    at_ns,
                    who: who.clone(),
                    text: rest.trim().to_owned(),
                });
            }
        }
        entries.sort_by_key(|entry| entry.at_ns);
        SupervisorLog { entries }
    }

    /// The lines stamped within `[from_ns, to_ns]`.
    pub fn between(&self, from_ns: u128, to_ns: u128) -> impl Iterator<Item = &LogEntry> {
        let start = self.entries.partition_point(|entry| entry.at_ns < from_ns);
        self.entries[start..]
            .iter()
            .take_while(move |entry| entry.at_ns <= to_ns)
    }
}

/// The value of `key=value` in a log line (up to the next space), or `?`.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let pattern = format!(" {key}=");
    line.find(&pattern)
        .and_then(|at| line[at + pattern.len()..].split_whitespace().next())
        .unwrap_or("?")
}

/// An RFC 3339 time stamp (tracing's default, UTC with microseconds) as ns since the epoch.
fn parse_stamp(stamp: &str) -> Option<u128> {
    let time = kp_contract::time::parse(stamp)?;
    Some(time.duration_since(UNIX_EPOCH).ok()?.as_nanos())
}

/// One step of a driver (chaos): what it did, from its start to the node's settling.
#[derive(Debug, Clone)]
pub struct StepSpan {
    pub step: u64,
    pub action: String,
    pub from_ns: u128,
    pub to_ns: u128,
}

/// Supervisor log lines this long before a gap are part of its timeline (the old holder's
/// last words, the step that caused it).
const LEAD_IN: Duration = Duration::from_millis(300);

/// A timeline of each of the `limit` longest gaps over `over` (kubelet-ended or not): the
/// steps it overlaps, the kubelet that ended it and its supervisor, the supervisors' log lines
/// from [`LEAD_IN`] before it to its end, and what the watched threads did meanwhile (each
/// change once), all as ms from the gap's start.
pub fn timelines(
    report: &super::sampler::Report,
    steps: &[StepSpan],
    log: &SupervisorLog,
    over: Duration,
    limit: usize,
) -> String {
    let mut long: Vec<&Gap> = report.gaps.iter().filter(|g| g.length() > over).collect();
    long.sort_by_key(|gap| std::cmp::Reverse(gap.length()));
    long.into_iter()
        .take(limit)
        .map(|gap| timeline(report, steps, log, gap))
        .collect()
}

/// The timeline of one gap (see [`timelines`]); `gap` may also be a span the caller chose
/// (from a kill to the next kubelet's exec).
pub fn timeline(
    report: &super::sampler::Report,
    steps: &[StepSpan],
    log: &SupervisorLog,
    gap: &Gap,
) -> String {
    let mut out = String::new();
    {
        let ms = |ns: u128| (ns as f64 - gap.from_ns as f64) / 1e6;
        let ended = match gap.ended_by.and_then(|pid| report.kubelets.get(&pid)) {
            Some(kubelet) => format!("kubelet {} of supervisor {}", kubelet.pid, kubelet.ppid),
            None => "disarming".to_owned(),
        };
        let during: Vec<String> = steps
            .iter()
            .filter(|step| step.to_ns >= gap.from_ns && step.from_ns <= gap.to_ns)
            .map(|step| {
                format!(
                    "#{} {} ({:+.1}..{:+.1} ms)",
                    step.step,
                    step.action,
                    ms(step.from_ns),
                    ms(step.to_ns)
                )
            })
            .collect();
        out.push_str(&format!(
            "gap {:.1} ms from {} to {}, ended by {ended}; steps: {}\n",
            gap.length().as_secs_f64() * 1e3,
            gap.from_ns,
            gap.to_ns,
            during.join(", ")
        ));
        let lead_in = gap.from_ns.saturating_sub(LEAD_IN.as_nanos());
        let mut lines: Vec<(u128, String)> = log
            .between(lead_in, gap.to_ns + 1_000_000)
            .map(|entry| (entry.at_ns, format!("{}  {}", entry.who, entry.text)))
            .collect();
        let mut last: std::collections::BTreeMap<i32, String> = Default::default();
        for snap in report
            .snapshots
            .iter()
            .filter(|snap| snap.at_ns >= gap.from_ns && snap.at_ns <= gap.to_ns)
        {
            let doing = snap.doing();
            if last.get(&snap.tid) != Some(&doing) {
                lines.push((snap.at_ns, format!("thread: {doing}")));
                last.insert(snap.tid, doing);
            }
        }
        lines.sort_by_key(|(at, _)| *at);
        for (at, line) in lines {
            out.push_str(&format!("  {:+9.1} ms  {line}\n", ms(at)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(ms: u64, ended: bool) -> Gap {
        Gap {
            from_ns: 0,
            to_ns: u128::from(ms) * 1_000_000,
            ended_by: ended.then_some(1),
        }
    }

    #[test]
    fn stats_are_nearest_rank_percentiles() {
        let gaps: Vec<Gap> = (1..=100).map(|ms| gap(ms * 10, ms % 2 == 0)).collect();
        let all = GapStats::of(&gaps, |_| true);
        assert_eq!(all.count, 100);
        assert_eq!(all.p50_ms, 500.0);
        assert_eq!(all.p99_ms, 990.0);
        assert_eq!(all.max_ms, 1000.0);
        assert_eq!(all.over_300ms, 70);
        assert_eq!(all.over_1s, 0);
        let ended = GapStats::of(&gaps, |gap| gap.ended_by.is_some());
        assert_eq!(ended.count, 50);
        assert_eq!(GapStats::of(&[], |_| true), GapStats::default());
    }

    #[test]
    fn a_log_stamp_is_read_to_the_microsecond() {
        let ns = parse_stamp("2026-11-29T09:21:07.123456Z").expect("a stamp");
        assert_eq!(ns % 1_000_000_000, 123_456_000);
        assert!(parse_stamp("INFO").is_none());
    }

    #[test]
    fn our_own_threads_are_seen() {
        let me = i32::try_from(std::process::id()).expect("pid");
        let threads = snapshot(me, 1);
        assert!(threads.iter().any(|t| t.tid == me), "{threads:?}");
        assert!(snapshot(-1, 1).is_empty());
    }
}
