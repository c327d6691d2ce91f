//! Idle footprint of two builds side by side (issue 23): what an idle holder and an idle waiter
//! cost while nothing happens, what a config change and a start cost, and the binary's size.
//!
//!     cargo build --release --examples
//!     PIVOT_BEFORE_BIN=$(bash scripts/build-before.sh) cargo bench --bench idle
//!
//! Builds: "after" is the binary cargo built for this bench (`target/release/kubelet-pivot`);
//! "before" is `PIVOT_BEFORE_BIN` (scripts/build-before.sh builds the commit pinned in
//! benches/before-commit, main before issue 23, and prints its path). Without it only the after
//! build is measured. Both run the same stand-in kubelet (`examples/stand_in_kubelet/`), with
//! no API server unless said, no `NOTIFY_SOCKET` and no `WATCHDOG_USEC` (so no watchdog), and
//! `RUST_LOG=warn`. The builds take turns: each part runs the before build, then the after
//! build (the start and assign parts alternate sample by sample).
//!
//! Parts (`IDLE_PARTS`, comma-separated; default all):
//! - `idle`: a holder (`bootstrap`, its kubelet running), settled for `IDLE_SETTLE_SECS`
//!   (default 3), sampled for `IDLE_WINDOW_SECS` (default 60); then a second `bootstrap` on the
//!   same lock file and store, which stands by blocked in flock (seen in /proc/locks), settled
//!   and sampled the same way, together with the holder. Figures, scaled to a minute:
//!   * wakeups: context switches (`voluntary_ctxt_switches + nonvoluntary_ctxt_switches` of
//!     /proc/PID/task/TID/status) summed over the threads. The task list is read every 250 ms
//!     and each thread's last count kept: a thread born in the window counts from 0, a thread
//!     that exits loses only its switches since the last read, and a thread born and gone
//!     between two reads is missed (the births and exits seen are printed);
//!   * CPU ticks: `utime + stime` of /proc/PID/stat (exited threads included), in clock ticks
//!     (`getconf CLK_TCK`, usually 100 a second);
//!   * RSS (VmRSS) and threads at the end of the window, and RssAnon: VmRSS is mostly the
//!     binary's pages mapped from the page cache (RssFile, which varies by a few MB between two
//!     builds of the same code), RssAnon the process's own memory;
//!   * after the window, `strace -f -c -p PID` for `IDLE_STRACE_SECS` (default 10; 0 = off):
//!     system calls a minute, `openat` and `read` among them (the file reads of a store or
//!     /proc re-read). strace itself wakes the process (attach, detach), so these are counted
//!     outside the window.
//! - `api`: a holder with the test API server (testkit, loopback HTTP) and a Node object
//!   (`--kubeconfig` with the node's credentials, `--node-name`), watch bookmarks every 60 s as a
//!   real API server's order of magnitude; settled once its watch is open, then the same
//!   figures and the API requests a minute in the window.
//! - `start`: exec → the kubelet's spawn: from just before spawning `kubelet-pivot bootstrap`
//!   to the `t=` of the stand-in's `start` line (CLOCK_REALTIME, both), `IDLE_STARTS` times
//!   (default 20) per build after one start not counted (the first creates the store); each
//!   holder is stopped with SIGTERM before the next start.
//! - `assign`: `checkpoint assign FILE` → the new kubelet: from just before spawning the
//!   command (so its own process start counts) to the `t=` of the new stand-in's `start`
//!   line, `IDLE_ASSIGNS` times (default 50) per build, each a config of its own content
//!   (`maxPods`), on a holder without API server. Between samples the bench waits until the old
//!   kubelet is gone and `status -o json` reports the new assignment active.
//! - `size`: the binary's size, and stripped (`strip -o` a copy).
//!
//! The table gives both builds, after/before, and the targets with PASS/MISS (a miss is
//! a result, not a failure: the exit code is 0; 2 is a harness failure). A figure a build
//! could not give says why (`n/a: ...`). The load average is printed at each step: the CPU
//! figures are only as quiet as the machine.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::bench::{cpu_ticks, env_number, fail, stand_in, stats, status_field};
use support::lock_state::{blocked_on, status_by};
use support::{now_ns, pivot_bin, Proc, Scene, POLL_INTERVAL};
use testkit::ApiServer;

/// Deadline for a state the product reaches in milliseconds (a start, a restart, a block).
const DEADLINE: Duration = Duration::from_secs(15);
/// How often the task list of a sampled process is read.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Watch bookmarks of the test API server (its default, 1 s, would wake the holder).
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
const NODE: &str = "idle-node";
/// Targets of issue 23 (after the change).
const TARGET_WAKEUPS: f64 = 5.0;
const TARGET_TICKS: f64 = 0.0;
const TARGET_RSS_KB: f64 = 8.0 * 1024.0;

struct Build {
    name: &'static str,
    bin: PathBuf,
}

struct Opts {
    window: Duration,
    settle: Duration,
    strace: Duration,
    starts: usize,
    assigns: usize,
    parts: Vec<String>,
}

impl Opts {
    fn from_env() -> Opts {
        let secs =
            |var: &str, default: u64| Duration::from_secs(env_number(var).unwrap_or(default));
        let parts = std::env::var("IDLE_PARTS")
            .unwrap_or_else(|_| "idle,api,start,assign,size".into())
            .split(',')
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>();
        for part in &parts {
            if !["idle", "api", "start", "assign", "size"].contains(&part.as_str()) {
                fail(&format!(
                    "IDLE_PARTS: unknown part {part:?} (idle, api, start, assign, size)"
                ));
            }
        }
        let window = secs("IDLE_WINDOW_SECS", 60);
        if window.is_zero() {
            fail("IDLE_WINDOW_SECS must be at least 1");
        }
        Opts {
            window,
            settle: secs("IDLE_SETTLE_SECS", 3),
            strace: secs("IDLE_STRACE_SECS", 10),
            starts: env_number("IDLE_STARTS").map_or(20, |n| n as usize).max(1),
            assigns: env_number("IDLE_ASSIGNS").map_or(50, |n| n as usize).max(1),
            parts,
        }
    }

    fn runs(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.trim().to_owned())
        .unwrap_or_else(|err| format!("(unreadable: {err})"))
}

fn note(msg: &str) {
    println!("  [{}] {msg}", loadavg());
}

/// Polls `f` every [`POLL_INTERVAL`] until it returns `Some`; `None` after `deadline`.
fn within<T>(deadline: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > deadline {
            return None;
        }
        thread::sleep(POLL_INTERVAL);
    }
}

// ------------------------------------------------------------------------------------------
// The table
// ------------------------------------------------------------------------------------------

#[derive(Clone)]
enum Cell {
    Val(f64),
    NotAvailable(String),
}

/// One figure: its values by build name; `at_most` the target, if any.
struct Row {
    label: String,
    at_most: Option<f64>,
    decimals: usize,
    cells: BTreeMap<&'static str, Cell>,
}

#[derive(Default)]
struct Table {
    rows: Vec<Row>,
}

impl Table {
    fn row(&mut self, label: &str, at_most: Option<f64>, decimals: usize) -> &mut Row {
        if let Some(i) = self.rows.iter().position(|r| r.label == label) {
            return &mut self.rows[i];
        }
        self.rows.push(Row {
            label: label.to_owned(),
            at_most,
            decimals,
            cells: BTreeMap::new(),
        });
        let last = self.rows.len() - 1;
        &mut self.rows[last]
    }

    fn set(&mut self, label: &str, at_most: Option<f64>, decimals: usize, build: &Build, v: f64) {
        let row = self.row(label, at_most, decimals);
        row.at_most = at_most.or(row.at_most);
        row.decimals = decimals;
        row.cells.insert(build.name, Cell::Val(v));
    }

    /// Marks the rows of `labels` not available for `build`, with `why`.
    fn not_available(&mut self, labels: &[&str], build: &Build, why: &str) {
        for label in labels {
            self.row(label, None, 0)
                .cells
                .insert(build.name, Cell::NotAvailable(why.to_owned()));
        }
    }

    fn print(&self, builds: &[Build]) {
        println!();
        print!("{:<52} {:>10}", "figure", "target");
        for b in builds {
            print!(" {:>16}", b.name);
        }
        if builds.len() == 2 {
            print!(" {:>12}", "after/before");
        }
        println!();
        let mut reasons = Vec::new();
        for row in &self.rows {
            let target = row
                .at_most
                .map_or(String::new(), |t| format!("<= {}", fmt_num(t, 0)));
            print!("{:<52} {target:>10}", row.label);
            for b in builds {
                let text = match row.cells.get(b.name) {
                    None => "-".to_owned(),
                    Some(Cell::Val(v)) => {
                        let mark = match row.at_most {
                            Some(t) if *v <= t => " PASS",
                            Some(_) => " MISS",
                            None => "",
                        };
                        format!("{}{mark}", fmt_num(*v, row.decimals))
                    }
                    Some(Cell::NotAvailable(why)) => {
                        reasons.push(format!("{} / {}: {why}", row.label, b.name));
                        "n/a".to_owned()
                    }
                };
                print!(" {text:>16}");
            }
            if let [before, after] = builds {
                let ratio = match (row.cells.get(before.name), row.cells.get(after.name)) {
                    (Some(Cell::Val(b)), Some(Cell::Val(a))) if *b != 0.0 => {
                        format!("{:.2}", a / b)
                    }
                    (Some(Cell::Val(b)), Some(Cell::Val(a))) if *a == *b => "=".to_owned(),
                    _ => "-".to_owned(),
                };
                print!(" {ratio:>12}");
            }
            println!();
        }
        for r in reasons {
            println!("  n/a {r}");
        }
    }
}

fn fmt_num(v: f64, decimals: usize) -> String {
    format!("{v:.decimals$}")
}

// ------------------------------------------------------------------------------------------
// Sampling a process
// ------------------------------------------------------------------------------------------

/// Context switches of each thread of `pid`: tid → voluntary + nonvoluntary. A thread that
/// exits between the listing and the read is left out.
fn task_switches(pid: i32) -> BTreeMap<i32, u64> {
    let dir = format!("/proc/{pid}/task");
    let entries =
        fs::read_dir(&dir).unwrap_or_else(|err| fail(&format!("read {dir}: {err} (did it exit?)")));
    let mut out = BTreeMap::new();
    for entry in entries.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let Ok(text) = fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let count = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        out.insert(
            tid,
            count("voluntary_ctxt_switches:") + count("nonvoluntary_ctxt_switches:"),
        );
    }
    out
}

/// Wakeups and CPU of one process over a window; see the module doc for the method.
struct Sampler {
    pid: i32,
    initial: BTreeMap<i32, u64>,
    last: BTreeMap<i32, u64>,
    gone: BTreeSet<i32>,
    ticks: u64,
}

struct Figures {
    wakeups_per_min: f64,
    ticks_per_min: f64,
    rss_kb: u64,
    /// VmRSS = RssAnon (heap, stacks) + RssFile (the binary's pages touched) + RssShmem.
    rss_anon_kb: u64,
    rss_file_kb: u64,
    threads: u64,
    births: usize,
    exits: usize,
}

impl Sampler {
    fn start(pid: i32) -> Sampler {
        let initial = task_switches(pid);
        Sampler {
            pid,
            last: initial.clone(),
            initial,
            gone: BTreeSet::new(),
            ticks: cpu_ticks(pid),
        }
    }

    fn sample(&mut self) {
        let now = task_switches(self.pid);
        for tid in self.last.keys() {
            if !now.contains_key(tid) {
                self.gone.insert(*tid);
            }
        }
        self.last.extend(now);
    }

    fn finish(mut self, window: Duration) -> Figures {
        self.sample();
        let switches: u64 = self
            .last
            .iter()
            .map(|(tid, n)| n.saturating_sub(self.initial.get(tid).copied().unwrap_or(0)))
            .sum();
        let per_min = 60.0 / window.as_secs_f64();
        Figures {
            wakeups_per_min: switches as f64 * per_min,
            ticks_per_min: cpu_ticks(self.pid).saturating_sub(self.ticks) as f64 * per_min,
            rss_kb: status_field(self.pid, "VmRSS"),
            rss_anon_kb: status_field(self.pid, "RssAnon"),
            rss_file_kb: status_field(self.pid, "RssFile"),
            threads: status_field(self.pid, "Threads"),
            births: self
                .last
                .keys()
                .filter(|t| !self.initial.contains_key(t))
                .count(),
            exits: self.gone.len(),
        }
    }
}

/// Samples `procs` together for `window`; fails if one of them exits meanwhile.
fn measure(procs: &mut [&mut Proc], window: Duration, scene: &Scene) -> Vec<Figures> {
    let mut samplers: Vec<Sampler> = procs.iter().map(|p| Sampler::start(p.pid())).collect();
    let started = Instant::now();
    while started.elapsed() < window {
        thread::sleep(SAMPLE_EVERY.min(window.saturating_sub(started.elapsed())));
        for (p, s) in procs.iter_mut().zip(samplers.iter_mut()) {
            if !p.is_running() {
                fail(&format!(
                    "kubelet-pivot pid {} exited during the idle window\n{}",
                    s.pid,
                    scene.output()
                ));
            }
            s.sample();
        }
    }
    let window = started.elapsed();
    samplers.into_iter().map(|s| s.finish(window)).collect()
}

/// System calls of `pid` (all threads) over `secs` with `strace -f -c`: name → calls.
fn strace_counts(pid: i32, span: Duration, dir: &Path) -> Result<BTreeMap<String, u64>, String> {
    let out = dir.join(format!("strace-{pid}.txt"));
    let child = Command::new("strace")
        .args(["-f", "-c", "-o"])
        .arg(&out)
        .args(["-p", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("cannot run strace: {err}"))?;
    thread::sleep(span);
    // SIGINT: strace detaches and writes the summary.
    let strace_pid = i32::try_from(child.id()).map_err(|_| "strace pid overflows".to_owned())?;
    support::signal_pid(strace_pid, Signal::SIGINT);
    let done = child
        .wait_with_output()
        .map_err(|err| format!("wait for strace: {err}"))?;
    let text = fs::read_to_string(&out).unwrap_or_default();
    let mut counts = BTreeMap::new();
    // `% time  seconds  usecs/call  calls  [errors]  syscall`; the total line is skipped.
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(name), Some(calls)) = (words.last(), words.get(3)) else {
            continue;
        };
        if *name == "total" || words.len() < 5 {
            continue;
        }
        if let Ok(calls) = calls.parse::<u64>() {
            counts.insert((*name).to_owned(), calls);
        }
    }
    // strace writes an empty summary when the process made no system call at all: that
    // is a count of zero, as long as strace did attach and detach.
    let stderr = String::from_utf8_lossy(&done.stderr);
    if text.trim().is_empty() && stderr.contains("attached") && stderr.contains("detached") {
        return Ok(counts);
    }
    if counts.is_empty() && !text.contains("total") {
        return Err(format!(
            "strace gave no summary ({}): {}",
            done.status,
            String::from_utf8_lossy(&done.stderr).trim()
        ));
    }
    Ok(counts)
}

// ------------------------------------------------------------------------------------------
// The parts
// ------------------------------------------------------------------------------------------

/// `build bootstrap <args>` on `scene`'s node, without watchdog, `RUST_LOG=warn`.
fn bootstrap(scene: &Scene, build: &Build, args: &[&str]) -> Proc {
    let mut cmd = scene.pivot_of(&build.bin, args, &[], &[("RUST_LOG", "warn")]);
    cmd.env_remove("WATCHDOG_USEC").env_remove("WATCHDOG_PID");
    scene.spawn(cmd)
}

/// Why a build could not do what it was asked: its exit, if it exited, and its output's tail.
fn why_not(what: &str, proc: &mut Proc, scene: &Scene) -> String {
    let state = if proc.is_running() {
        "still running".to_owned()
    } else {
        "exited".to_owned()
    };
    let output = scene.output();
    let tail: Vec<&str> = output.lines().rev().take(3).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    format!(
        "{what} not seen within {DEADLINE:?} ({state}): {}",
        tail.join(" | ")
    )
}

/// Stops `proc` with SIGTERM; says so if it does not exit cleanly (not a harness failure).
fn stop(mut proc: Proc, what: &str) {
    proc.signal(Signal::SIGTERM);
    let exited = within(DEADLINE, || (!proc.is_running()).then_some(()));
    if exited.is_none() {
        note(&format!(
            "{what} did not exit within {DEADLINE:?} of SIGTERM; killed"
        ));
    }
}

fn record(table: &mut Table, who: &str, build: &Build, f: &Figures, targets: bool) {
    let t = |v: f64| targets.then_some(v);
    table.set(
        &format!("{who}: wakeups/min"),
        t(TARGET_WAKEUPS),
        1,
        build,
        f.wakeups_per_min,
    );
    table.set(
        &format!("{who}: CPU ticks/min"),
        t(TARGET_TICKS),
        1,
        build,
        f.ticks_per_min,
    );
    note(&format!(
        "{} {who}: {:.1} wakeups/min, {:.1} ticks/min, RSS {} kB (anon {}, file {}), {} threads ({} born, {} exited in the window)",
        build.name,
        f.wakeups_per_min,
        f.ticks_per_min,
        f.rss_kb,
        f.rss_anon_kb,
        f.rss_file_kb,
        f.threads,
        f.births,
        f.exits
    ));
}

fn record_memory(table: &mut Table, who: &str, build: &Build, f: &Figures, rss_target: bool) {
    table.set(
        &format!("{who}: RSS kB"),
        rss_target.then_some(TARGET_RSS_KB),
        0,
        build,
        f.rss_kb as f64,
    );
    table.set(
        &format!("{who}: RSS anon kB (private)"),
        None,
        0,
        build,
        f.rss_anon_kb as f64,
    );
    table.set(&format!("{who}: threads"), None, 0, build, f.threads as f64);
}

fn record_strace(
    table: &mut Table,
    who: &str,
    build: &Build,
    pid: i32,
    opts: &Opts,
    scene: &Scene,
) {
    if opts.strace.is_zero() {
        return;
    }
    let labels = [
        format!("{who}: syscalls/min (strace)"),
        format!("{who}: openat/min (strace)"),
        format!("{who}: read/min (strace)"),
    ];
    match strace_counts(pid, opts.strace, scene.path()) {
        Ok(counts) => {
            let per_min = 60.0 / opts.strace.as_secs_f64();
            let total: u64 = counts.values().sum();
            let get = |name: &str| counts.get(name).copied().unwrap_or(0);
            table.set(&labels[0], None, 1, build, total as f64 * per_min);
            table.set(&labels[1], None, 1, build, get("openat") as f64 * per_min);
            table.set(&labels[2], None, 1, build, get("read") as f64 * per_min);
            let mut top: Vec<(&String, &u64)> = counts.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1));
            let top: Vec<String> = top
                .iter()
                .take(8)
                .map(|(n, c)| format!("{n} {c}"))
                .collect();
            note(&format!(
                "{} {who}: strace {:?}: {}",
                build.name,
                opts.strace,
                if top.is_empty() {
                    "no system calls".to_owned()
                } else {
                    top.join(", ")
                }
            ));
        }
        Err(why) => {
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            table.not_available(&labels, build, &why);
        }
    }
}

const HOLDER: &str = "idle holder";
const WAITER: &str = "idle waiter";
const HOLDER_WITH_WAITER: &str = "idle holder, waiter standing by";
const API_HOLDER: &str = "idle holder with API server";

fn idle_labels(who: &str) -> Vec<String> {
    [
        "wakeups/min",
        "CPU ticks/min",
        "RSS kB",
        "RSS anon kB (private)",
        "threads",
    ]
    .iter()
    .map(|f| format!("{who}: {f}"))
    .collect()
}

fn part_idle(table: &mut Table, build: &Build, opts: &Opts) {
    let scene = Scene::new();
    let mut holder = bootstrap(&scene, build, &["bootstrap"]);
    let hpid = holder.pid();
    if within(DEADLINE, || scene.kubelet_of(hpid)).is_none() {
        let why = why_not("the holder's kubelet", &mut holder, &scene);
        let labels: Vec<String> = [HOLDER, WAITER, HOLDER_WITH_WAITER]
            .iter()
            .flat_map(|w| idle_labels(w))
            .collect();
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        table.not_available(&labels, build, &why);
        return;
    }
    thread::sleep(opts.settle);
    let f = measure(&mut [&mut holder], opts.window, &scene);
    record(table, HOLDER, build, &f[0], true);
    record_memory(table, HOLDER, build, &f[0], true);
    record_strace(table, HOLDER, build, hpid, opts, &scene);

    let mut waiter = bootstrap(&scene, build, &["bootstrap"]);
    let wpid = waiter.pid();
    if within(DEADLINE, || {
        blocked_on(&scene.lock()).contains(&wpid).then_some(())
    })
    .is_none()
    {
        let why = why_not("the waiter blocked in flock", &mut waiter, &scene);
        let labels: Vec<String> = [WAITER, HOLDER_WITH_WAITER]
            .iter()
            .flat_map(|w| idle_labels(w))
            .collect();
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        table.not_available(&labels, build, &why);
    } else {
        thread::sleep(opts.settle);
        let f = measure(&mut [&mut waiter, &mut holder], opts.window, &scene);
        record(table, WAITER, build, &f[0], true);
        record_memory(table, WAITER, build, &f[0], false);
        record(table, HOLDER_WITH_WAITER, build, &f[1], true);
        record_strace(table, WAITER, build, wpid, opts, &scene);
    }
    stop(waiter, "the waiter");
    stop(holder, "the holder");
}

fn part_api(table: &mut Table, build: &Build, opts: &Opts) {
    let scene = Scene::new();
    let server = ApiServer::start();
    server.set_bookmark_interval(BOOKMARK_INTERVAL);
    server.create_node(NODE, std::iter::empty::<(&str, &str)>());
    let kubeconfig = server.node_kubeconfig_in(scene.path(), NODE);
    let kubeconfig = kubeconfig
        .to_str()
        .unwrap_or_else(|| fail("temp path is not UTF-8"));
    let mut holder = bootstrap(
        &scene,
        build,
        &["bootstrap", "--kubeconfig", kubeconfig, "--node-name", NODE],
    );
    let hpid = holder.pid();
    let mut labels = idle_labels(API_HOLDER);
    labels.push(format!("{API_HOLDER}: API requests/min"));
    let ready = within(DEADLINE, || scene.kubelet_of(hpid))
        .and_then(|_| within(DEADLINE, || (server.open_watches("") > 0).then_some(())));
    if ready.is_none() {
        let why = why_not("the kubelet and an open watch", &mut holder, &scene);
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        table.not_available(&labels, build, &why);
        return;
    }
    thread::sleep(opts.settle);
    server.clear_requests();
    let f = measure(&mut [&mut holder], opts.window, &scene);
    let requests = server.requests();
    record(table, API_HOLDER, build, &f[0], false);
    record_memory(table, API_HOLDER, build, &f[0], false);
    let per_min = requests.len() as f64 * 60.0 / opts.window.as_secs_f64();
    table.set(&labels[5], None, 1, build, per_min);
    if !requests.is_empty() {
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for r in &requests {
            *kinds.entry(format!("{} {}", r.method, r.path)).or_default() += 1;
        }
        note(&format!(
            "{} {API_HOLDER}: requests in the window: {kinds:?}",
            build.name
        ));
    }
    record_strace(table, API_HOLDER, build, hpid, opts, &scene);
    stop(holder, "the holder with API server");
}

/// A node per build for the start and assign parts.
struct Node<'a> {
    build: &'a Build,
    scene: Scene,
    holder: Option<Proc>,
    samples: Vec<f64>,
    /// The `checkpoint assign` command's own run time (ms).
    command_ms: Vec<f64>,
    broken: Option<String>,
}

impl<'a> Node<'a> {
    fn new(build: &'a Build) -> Node<'a> {
        Node {
            build,
            scene: Scene::new(),
            holder: None,
            samples: Vec::new(),
            command_ms: Vec::new(),
            broken: None,
        }
    }

    /// Starts a holder; returns exec → the kubelet's start (ms).
    fn start(&mut self) -> Result<f64, String> {
        let seen = self.scene.starts().len();
        let t0 = now_ns();
        let mut holder = bootstrap(
            &self.scene,
            self.build,
            &["bootstrap", "--stop-timeout", "5s"],
        );
        let Some(start) = within(DEADLINE, || self.scene.starts().get(seen).cloned()) else {
            return Err(why_not("the kubelet's start", &mut holder, &self.scene));
        };
        if start.ppid() != holder.pid() {
            fail(&format!(
                "a kubelet of pid {} started, not of the holder {}",
                start.ppid(),
                holder.pid()
            ));
        }
        self.holder = Some(holder);
        Ok(ms_since(t0, start.t_ns))
    }

    fn stop(&mut self) {
        if let Some(holder) = self.holder.take() {
            stop(holder, "the holder");
        }
        if within(DEADLINE, || {
            self.scene.running_kubelets().is_empty().then_some(())
        })
        .is_none()
        {
            fail("the kubelet outlived its holder");
        }
    }

    /// `checkpoint assign` of config `i`; returns the command's start → the new kubelet (ms).
    fn assign(&mut self, i: usize) -> Result<f64, String> {
        let hpid = self
            .holder
            .as_ref()
            .map(Proc::pid)
            .unwrap_or_else(|| fail("no holder"));
        let max_pods = 101 + i;
        let file = self.scene.kubelet_config_file(
            &format!("assign-{i}.yaml"),
            &format!("maxPods: {max_pods}\n"),
        );
        let seen = self.scene.starts().len();
        let t0 = now_ns();
        let out = Command::new(&self.build.bin)
            .args(["checkpoint", "assign"])
            .arg(&file)
            .arg("--dynamic-config-dir")
            .arg(self.scene.config_dir())
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .output()
            .map_err(|err| format!("cannot run checkpoint assign: {err}"))?;
        self.command_ms.push(ms_since(t0, now_ns()));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(format!(
                "checkpoint assign failed ({}): {}{}",
                out.status,
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        // "assigned ConfigMap local/local (UID: local-..., ResourceVersion: 1)"
        let uid = text
            .split("UID: ")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .ok_or_else(|| format!("no UID in the output of checkpoint assign: {text:?}"))?
            .to_owned();
        let start =
            within(DEADLINE, || self.scene.starts().get(seen).cloned()).ok_or_else(|| {
                format!("no kubelet started within {DEADLINE:?} of checkpoint assign")
            })?;
        let config = self.scene.config_of(start.pid);
        if start.ppid() != hpid || !config.contains(&format!("\"maxPods\":{max_pods}")) {
            fail(&format!(
                "kubelet {} (parent {}) started with {config}, not the holder {hpid}'s with maxPods {max_pods}",
                start.pid,
                start.ppid()
            ));
        }
        // Quiet again: the old kubelet gone and the new assignment reported active.
        let settled = within(DEADLINE, || {
            let (_, st) = status_by(&self.build.bin, &self.scene);
            (self.scene.running_kubelets() == [start.pid]
                && st["config"]["active"]["source"]["uid"] == uid.as_str())
            .then_some(())
        });
        if settled.is_none() {
            return Err(format!(
                "after assign {i}: the old kubelet still ran or status did not report {uid} active"
            ));
        }
        Ok(ms_since(t0, start.t_ns))
    }
}

fn ms_since(from_ns: u128, to_ns: u128) -> f64 {
    if to_ns < from_ns {
        fail(&format!(
            "{to_ns} ns came before the command's start at {from_ns} ns"
        ));
    }
    (to_ns - from_ns) as f64 / 1e6
}

fn record_latency(table: &mut Table, what: &str, node: &Node, samples: &[f64]) {
    if let Some(why) = &node.broken {
        let labels = [
            format!("{what} p50 ms"),
            format!("{what} p99 ms"),
            format!("{what} max ms"),
        ];
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        table.not_available(&labels, node.build, why);
        return;
    }
    if samples.is_empty() {
        return;
    }
    let s = stats(samples);
    table.set(&format!("{what} p50 ms"), None, 1, node.build, s.p50);
    table.set(&format!("{what} p99 ms"), None, 1, node.build, s.p99);
    table.set(&format!("{what} max ms"), None, 1, node.build, s.max);
}

fn part_start(table: &mut Table, builds: &[Build], opts: &Opts) {
    let mut nodes: Vec<Node> = builds.iter().map(Node::new).collect();
    // Round 0 is not counted: it creates the node's store.
    for round in 0..=opts.starts {
        for node in nodes.iter_mut().filter(|n| n.broken.is_none()) {
            match node.start() {
                Ok(ms) if round > 0 => node.samples.push(ms),
                Ok(_) => {}
                Err(why) => node.broken = Some(why),
            }
            node.stop();
        }
    }
    for node in &nodes {
        record_latency(table, "start: exec → kubelet", node, &node.samples);
    }
}

fn part_assign(table: &mut Table, builds: &[Build], opts: &Opts) {
    let mut nodes: Vec<Node> = builds.iter().map(Node::new).collect();
    for node in &mut nodes {
        if let Err(why) = node.start() {
            node.broken = Some(why);
        }
    }
    for i in 0..opts.assigns {
        for node in nodes.iter_mut().filter(|n| n.broken.is_none()) {
            match node.assign(i) {
                Ok(ms) => node.samples.push(ms),
                Err(why) => node.broken = Some(why),
            }
        }
    }
    for node in &mut nodes {
        node.stop();
        record_latency(table, "assign → new kubelet", node, &node.samples);
        if node.broken.is_none() && !node.command_ms.is_empty() {
            let s = stats(&node.command_ms);
            table.set(
                "assign: the command's own run p50 ms",
                None,
                1,
                node.build,
                s.p50,
            );
        }
    }
}

fn part_size(table: &mut Table, build: &Build, dir: &Path) {
    let size = |p: &Path| {
        fs::metadata(p)
            .map(|m| m.len() as f64 / (1024.0 * 1024.0))
            .unwrap_or_else(|err| fail(&format!("stat {}: {err}", p.display())))
    };
    table.set("binary MiB", None, 2, build, size(&build.bin));
    let stripped = dir.join(format!("kubelet-pivot-{}-stripped", build.name));
    match Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&build.bin)
        .output()
    {
        Ok(out) if out.status.success() => {
            table.set("binary MiB, stripped", None, 2, build, size(&stripped));
        }
        Ok(out) => table.not_available(
            &["binary MiB, stripped"],
            build,
            &format!(
                "strip failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ),
        Err(err) => table.not_available(
            &["binary MiB, stripped"],
            build,
            &format!("no strip: {err}"),
        ),
    }
}

fn main() {
    let opts = Opts::from_env();
    stand_in();
    let mut builds = Vec::new();
    match std::env::var_os("PIVOT_BEFORE_BIN") {
        Some(bin) => {
            let bin = PathBuf::from(bin);
            if !bin.is_file() {
                fail(&format!(
                    "PIVOT_BEFORE_BIN={} is not a file (build it with scripts/build-before.sh)",
                    bin.display()
                ));
            }
            builds.push(Build {
                name: "before",
                bin,
            });
        }
        None => println!(
            "idle: PIVOT_BEFORE_BIN not set: the after build only \
             (PIVOT_BEFORE_BIN=$(bash scripts/build-before.sh) for both)"
        ),
    }
    builds.push(Build {
        name: "after",
        bin: pivot_bin(),
    });
    println!(
        "idle: window {:?}, settle {:?}, strace {:?}, {} starts, {} assigns, parts {}; {} CPUs",
        opts.window,
        opts.settle,
        opts.strace,
        opts.starts,
        opts.assigns,
        opts.parts.join(","),
        thread::available_parallelism().map_or(0, |n| n.get())
    );
    for b in &builds {
        let version = Command::new(&b.bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|err| format!("(--version failed: {err})"));
        println!("  {:<6} {}: {version}", b.name, b.bin.display());
    }
    note("load average at the start");
    let mut table = Table::default();
    if opts.runs("idle") {
        for b in &builds {
            part_idle(&mut table, b, &opts);
        }
    }
    if opts.runs("api") {
        for b in &builds {
            part_api(&mut table, b, &opts);
        }
    }
    if opts.runs("start") {
        part_start(&mut table, &builds, &opts);
        note("start done");
    }
    if opts.runs("assign") {
        part_assign(&mut table, &builds, &opts);
        note("assign done");
    }
    if opts.runs("size") {
        let dir = tempfile::tempdir().unwrap_or_else(|err| fail(&format!("temp dir: {err}")));
        for b in &builds {
            part_size(&mut table, b, dir.path());
        }
    }
    table.print(&builds);
    note("load average at the end");
}
