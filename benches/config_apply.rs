//! Config-apply benchmark of the Kubernetes API sync, against the fake API server
//! (the `testkit` crate, real HTTP on loopback) and the stand-in kubelet.
//!
//!     cargo build --release --examples          # the stand-in kubelet is an example target
//!     cargo bench --bench config_apply          # 60 changes per path, 200 nodes idle for 3 min
//!     cargo bench --bench config_apply -- --quick   # 20 changes, 200 nodes idle for 20 s
//!
//! Environment: CONFIG_APPLY_CHANGES=N (changes per path), CONFIG_APPLY_NODES=N (fleet size),
//! CONFIG_APPLY_IDLE_SECS=N (fleet idle window), CONFIG_APPLY_QUICK=1 (same as --quick),
//! CONFIG_APPLY_PARTS=a|b|ab (which parts run; default both). The
//! nodes' directories (lock, checkpoint store) go to the system temp dir, a disk like /var/lib
//! on a node, so the store's fsyncs count; `TMPDIR=/dev/shm` measures without them.
//!
//! (a) Apply latency: from the node annotation PATCH (a real HTTP PATCH to the fake server,
//! timestamped just before connecting) to the exec of the new kubelet (the `t=` of the stand-in's
//! `start` line, its first instruction; both CLOCK_REALTIME). The changes alternate between
//! pre-created immutable ConfigMaps of different content. Between changes the bench waits until
//! the node is quiet again (status reported, or the restarted supervisor's watch re-opened), so
//! each sample is one change on an idle node.
//!
//! The same run measures the seed's apply path (the Dynamic Kubelet Configuration kubelet
//! checkpoints the new config and exits, and systemd starts it again after `RestartSec=`, whose
//! default is 100 ms): a bench thread watches the store's `meta/assigned` with inotify; when the
//! syncer has written it, the holder "exits" (SIGKILL, as immediate as the seed's `os.Exit`; its
//! kubelet dies with it through PDEATHSIG), and 100 ms after its exit a fresh `kubelet-pivot
//! bootstrap` starts and runs the kubelet from the checkpoint. The sample ends at the exec of
//! that new holder's kubelet; a kubelet the old holder may have restarted in the meantime is not
//! counted.
//!
//! (b) API load of an idle fleet: N supervisors (`kubelet-pivot bootstrap --node-name node-I
//! --kubeconfig ..`, each with its own lock file, store and stand-in kubelet), all assigned one
//! immutable ConfigMap, idle against one fake server. After the initial sync has settled the
//! request log is cleared; the figures are the requests of the idle window only: per node per
//! hour, by kind (watch renewals are expected; any GET/LIST is polling; a PATCH/POST is a status
//! report nobody asked for), the server's open watch count, and the supervisors' CPU and memory.
//! Watches get a BOOKMARK every 60 s (a real API server's order of magnitude; the fake's
//! default is 1 s).

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::thread;
use std::time::{Duration, Instant};

use inotify::WatchMask;
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use support::bench::{env_number, fail, inotify_times, stand_in, stats, Stats};
use support::{now_ns, pivot_bin, read_log, wait_until, LogLine, Proc, Scene};
use testkit::{ApiServer, RequestRecord};

const DEFAULT_CHANGES: usize = 60;
const QUICK_CHANGES: usize = 20;
const DEFAULT_NODES: usize = 200;
const DEFAULT_IDLE: Duration = Duration::from_secs(180);
const QUICK_IDLE: Duration = Duration::from_secs(20);
/// systemd's default `RestartSec=`.
const SYSTEMD_RESTART_SEC: Duration = Duration::from_millis(100);
/// Target of the sync path's median apply latency on loopback.
const TARGET_P50_MS: f64 = 100.0;
/// Deadline for one state of part (a) to be reached.
const DEADLINE: Duration = Duration::from_secs(15);
/// Deadline for the whole fleet's initial sync.
const FLEET_SETTLE_DEADLINE: Duration = Duration::from_secs(300);
/// The fleet has settled when the server saw no request for this long.
const FLEET_QUIET: Duration = Duration::from_secs(3);
/// How often the fleet's progress is printed during the idle window.
const FLEET_PROGRESS: Duration = Duration::from_secs(30);
/// Bookmark interval of the fake server during the bench.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
/// ConfigMaps the apply changes alternate between.
const CONFIGMAPS: usize = 3;
const NS: &str = "kubelet-config";
const SOURCE_ANNOTATION: &str = "kubelet-pivot.io/config-source";
const CONDITION: &str = "KubeletConfigOK";

fn ms_between(from_ns: u128, to_ns: u128) -> f64 {
    if to_ns < from_ns {
        fail(&format!(
            "exec at {to_ns} ns came before the PATCH at {from_ns} ns"
        ));
    }
    // Intervals of milliseconds to seconds: far below f64's exact integer range.
    (to_ns - from_ns) as f64 / 1e6
}

struct Opts {
    changes: usize,
    nodes: usize,
    idle: Duration,
}

fn opts() -> Opts {
    let mut quick = std::env::var("CONFIG_APPLY_QUICK").is_ok_and(|v| v == "1");
    // `cargo bench` passes --bench; other harness flags do not apply here.
    quick |= std::env::args().skip(1).any(|arg| arg == "--quick");
    let (changes, idle) = if quick {
        (QUICK_CHANGES, QUICK_IDLE)
    } else {
        (DEFAULT_CHANGES, DEFAULT_IDLE)
    };
    Opts {
        changes: env_number("CONFIG_APPLY_CHANGES").map_or(changes, |n| n as usize),
        nodes: env_number("CONFIG_APPLY_NODES").map_or(DEFAULT_NODES, |n| n as usize),
        idle: env_number("CONFIG_APPLY_IDLE_SECS").map_or(idle, Duration::from_secs),
    }
}

/// ConfigMap data: key `kubelet` = a KubeletConfiguration with `eventBurst`.
fn kubelet_config(event_burst: u32) -> BTreeMap<String, String> {
    BTreeMap::from([(
        "kubelet".to_owned(),
        support::kubelet_config(&format!("eventBurst: {event_burst}\n")),
    )])
}

fn uid_of(obj: &Value) -> String {
    obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_else(|| fail(&format!("no uid in {obj}")))
        .to_owned()
}

fn condition_message(server: &ApiServer, node: &str) -> Option<String> {
    let node = server.try_node(node)?;
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == CONDITION)
        .and_then(|c| c["message"].as_str().map(str::to_owned))
}

/// A JSON merge patch of one node annotation, sent as a real HTTP PATCH (as kubectl annotate
/// does). Returns the time taken just before connecting.
fn http_patch_annotation(server: &ApiServer, node: &str, value: &str) -> u128 {
    let body = json!({"metadata": {"annotations": {SOURCE_ANNOTATION: value}}}).to_string();
    let request = format!(
        "PATCH /api/v1/nodes/{node} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/merge-patch+json\r\nAccept: application/json\r\n\
         Content-Length: {len}\r\nConnection: close\r\n\r\n{body}",
        port = server.port(),
        token = server.token(),
        len = body.len(),
    );
    let sent_at = now_ns();
    let mut stream = TcpStream::connect(("127.0.0.1", server.port()))
        .unwrap_or_else(|err| fail(&format!("connect to the fake API server: {err}")));
    stream
        .write_all(request.as_bytes())
        .unwrap_or_else(|err| fail(&format!("send the PATCH: {err}")));
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .unwrap_or_else(|err| fail(&format!("read the PATCH response: {err}")));
    if !response.starts_with("HTTP/1.1 200") {
        fail(&format!("PATCH of node {node} failed: {response}"));
    }
    sent_at
}

// ------------------------------------------------------------------------------------------
// (a) apply latency
// ------------------------------------------------------------------------------------------

/// One node for part (a): a scene, its own fake server, the ConfigMaps to alternate between.
struct ApplyNode {
    scene: Scene,
    server: ApiServer,
    kubeconfig: PathBuf,
    /// (name, uid, eventBurst)
    configmaps: Vec<(String, String, u32)>,
}

const APPLY_NODE: &str = "bench-node";

impl ApplyNode {
    fn new() -> ApplyNode {
        let scene = Scene::new();
        let server = ApiServer::start();
        server.set_bookmark_interval(BOOKMARK_INTERVAL);
        server.create_node(APPLY_NODE, std::iter::empty::<(&str, &str)>());
        let configmaps = (0..CONFIGMAPS)
            .map(|i| {
                let name = format!("bench-config-{i}");
                let event_burst = 100 + u32::try_from(i).unwrap_or(0);
                let cm = server.create_configmap(NS, &name, kubelet_config(event_burst), true);
                (name, uid_of(&cm), event_burst)
            })
            .collect();
        let kubeconfig = server.kubeconfig_in(scene.path());
        ApplyNode {
            scene,
            server,
            kubeconfig,
            configmaps,
        }
    }

    fn bootstrap(&self) -> Proc {
        let kubeconfig = self.kubeconfig.to_str().expect("utf-8 temp path");
        self.scene.spawn(self.scene.pivot(
            &[
                "bootstrap",
                "--kubeconfig",
                kubeconfig,
                "--node-name",
                APPLY_NODE,
                "--stop-timeout",
                "5s",
            ],
            &[],
            &[],
        ))
    }

    fn starts(&self) -> Vec<LogLine> {
        self.scene.starts()
    }

    /// The `i`th start line, once written.
    fn wait_start(&self, index: usize) -> LogLine {
        wait_until(DEADLINE, "the new kubelet's start line", || {
            self.starts().get(index).cloned()
        })
    }

    /// Checks that the kubelet of `start` got `event_burst` (the effective config file is
    /// rewritten only before a start, and no other start followed).
    fn check_config(&self, start: &LogLine, event_burst: u32) {
        let path = start.field("config").unwrap_or_default();
        let content = fs::read_to_string(path).unwrap_or_default();
        if !content.contains(&format!("\"eventBurst\":{event_burst}")) {
            fail(&format!(
                "kubelet pid {} started without eventBurst {event_burst}: {content}\n{}",
                start.pid,
                self.scene.output()
            ));
        }
    }

    fn node_watch_requests(&self) -> usize {
        count(&self.server.requests(), |r| {
            r.watch && r.path == "/api/v1/nodes"
        })
    }
}

fn count(requests: &[RequestRecord], pred: impl Fn(&RequestRecord) -> bool) -> usize {
    requests.iter().filter(|r| pred(r)).count()
}

/// kubelet-pivot's own path: the running holder restarts its kubelet in place.
fn bench_sync_path(changes: usize) -> Vec<f64> {
    let node = ApplyNode::new();
    let holder = node.bootstrap();
    node.wait_start(0);
    wait_until(DEADLINE, "the initial status report", || {
        condition_message(&node.server, APPLY_NODE)
    });
    let mut samples = Vec::with_capacity(changes);
    for i in 0..changes {
        let (name, uid, event_burst) = &node.configmaps[i % CONFIGMAPS];
        let starts = node.starts().len();
        let events = node.server.events().len();
        let sent_at = http_patch_annotation(&node.server, APPLY_NODE, &format!("{NS}/{name}"));
        let start = node.wait_start(starts);
        if start.num("ppid") != i128::from(holder.pid()) {
            fail(&format!("kubelet {} not started by the holder", start.pid));
        }
        node.check_config(&start, *event_burst);
        samples.push(ms_between(sent_at, start.t_ns));
        // Quiet again: the status names the new config and its Event (posted last) is there.
        wait_until(DEADLINE, "the status report of the change", || {
            (condition_message(&node.server, APPLY_NODE).is_some_and(|m| m.contains(uid.as_str()))
                && node.server.events().len() > events)
                .then_some(())
        });
        if node.starts().len() != starts + 1 {
            fail(&format!(
                "change {i} restarted the kubelet more than once\n{}",
                node.scene.output()
            ));
        }
    }
    node.scene.assert_no_overlap();
    samples
}

/// Timestamps of writes of `meta/assigned` (the atomic writer renames it into place).
fn watch_assigned(meta: &Path) -> Receiver<u128> {
    fs::create_dir_all(meta)
        .unwrap_or_else(|err| fail(&format!("create {}: {err}", meta.display())));
    inotify_times(
        "assigned-watch",
        meta,
        WatchMask::MOVED_TO | WatchMask::CLOSE_WRITE | WatchMask::DELETE,
        || {},
        |name| name.is_some_and(|n| n == "assigned"),
    )
}

/// The seed's path: checkpoint, exit, be restarted by systemd after RestartSec=100ms.
/// Returns the samples, the PATCH -> meta/assigned part of each, and how often the old holder
/// restarted its kubelet before its exit.
fn bench_seed_path(changes: usize) -> (Vec<f64>, Vec<f64>, usize) {
    let node = ApplyNode::new();
    let assigned = watch_assigned(&node.scene.config_dir().join("meta"));
    let mut holder = node.bootstrap();
    node.wait_start(0);
    wait_until(DEADLINE, "the initial status report", || {
        condition_message(&node.server, APPLY_NODE)
    });
    let mut samples = Vec::with_capacity(changes);
    let mut checkpointed = Vec::with_capacity(changes);
    let mut early_restarts = 0;
    for (i, (name, _, event_burst)) in node.configmaps.iter().cycle().take(changes).enumerate() {
        while assigned.try_recv().is_ok() {}
        let starts = node.starts().len();
        let sent_at = http_patch_annotation(&node.server, APPLY_NODE, &format!("{NS}/{name}"));
        let Ok(assigned_at) = assigned.recv_timeout(DEADLINE) else {
            fail(&format!("change {i}: meta/assigned was not written"));
        };
        checkpointed.push(ms_between(sent_at, assigned_at));
        // The seed exits right after its checkpoint; systemd restarts it RestartSec later.
        holder.signal(Signal::SIGKILL);
        holder.wait_exit(DEADLINE);
        thread::sleep(SYSTEMD_RESTART_SEC);
        let watches = node.node_watch_requests();
        holder = node.bootstrap();
        let pid = i128::from(holder.pid());
        let start = wait_until(DEADLINE, "the restarted holder's kubelet", || {
            node.starts()
                .into_iter()
                .skip(starts)
                .find(|line| line.num("ppid") == pid)
        });
        early_restarts += node
            .starts()
            .iter()
            .skip(starts)
            .filter(|line| line.num("ppid") != pid)
            .count();
        node.check_config(&start, *event_burst);
        samples.push(ms_between(sent_at, start.t_ns));
        // Quiet again: the new holder's syncer has listed the node and watches it.
        wait_until(DEADLINE, "the restarted holder's node watch", || {
            (node.node_watch_requests() > watches).then_some(())
        });
    }
    node.scene.assert_no_overlap();
    (samples, checkpointed, early_restarts)
}

fn print_stats(name: &str, s: &Stats, n: usize) {
    println!(
        "  {name:<38} n={n:<4} p50 {:>8.1} ms  p99 {:>8.1} ms  min {:>7.1}  mean {:>7.1}  max {:>7.1}",
        s.p50, s.p99, s.min, s.mean, s.max
    );
}

// ------------------------------------------------------------------------------------------
// (b) idle fleet
// ------------------------------------------------------------------------------------------

struct FleetNode {
    name: String,
    supervisor: Proc,
    log: PathBuf,
}

/// (utime + stime) of `pid` in clock ticks, and its VmRSS in KiB.
fn cpu_and_rss(pid: i32) -> (u64, u64) {
    let cpu = fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // After the comm: state is field 3, utime 14 and stime 15 (1-based).
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    let rss = fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    (cpu, rss)
}

fn clock_ticks() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .unwrap_or(100)
}

struct FleetReport {
    nodes: usize,
    idle: Duration,
    requests: usize,
    watch_renewals: usize,
    polling: usize,
    writes: usize,
    other: Vec<String>,
    open_watches_start: usize,
    open_watches_end: usize,
    watch_timeout_secs: Option<u64>,
    /// CPU cores used while idle: all supervisors, and the mean per supervisor in ms of CPU per
    /// second by lock-watch mode (inotify, poll).
    cpu_cores: f64,
    cpu_ms_per_s_inotify: f64,
    cpu_ms_per_s_poll: f64,
    supervisor_rss_mib: f64,
    kubelet_rss_mib: f64,
    poll_mode: usize,
    startup: Duration,
    alive_end: usize,
}

impl FleetReport {
    fn per_node_hour(&self, n: usize) -> f64 {
        n as f64 / self.nodes as f64 * 3600.0 / self.idle.as_secs_f64()
    }
}

fn bench_fleet(opts: &Opts, stand_in: &Path) -> FleetReport {
    let base = std::env::temp_dir();
    let dir = tempfile::Builder::new()
        .prefix("kubelet-pivot-fleet-")
        .tempdir_in(&base)
        .unwrap_or_else(|err| fail(&format!("temp dir in {}: {err}", base.display())));
    let server = ApiServer::start();
    server.set_bookmark_interval(BOOKMARK_INTERVAL);
    let cm = server.create_configmap(NS, "fleet-config", kubelet_config(110), true);
    let uid = uid_of(&cm);
    let kubeconfig = server.kubeconfig_in(dir.path());
    let assignment = format!("{NS}/fleet-config");

    let started = Instant::now();
    let mut fleet = Vec::with_capacity(opts.nodes);
    for i in 0..opts.nodes {
        let name = format!("node-{i}");
        server.create_node(&name, [(SOURCE_ANNOTATION, assignment.as_str())]);
        let node_dir = dir.path().join(&name);
        fs::create_dir_all(node_dir.join("lock"))
            .unwrap_or_else(|err| fail(&format!("create {}: {err}", node_dir.display())));
        let log = node_dir.join("stand-in.log");
        let out = File::create(node_dir.join("supervisor.out"))
            .unwrap_or_else(|err| fail(&format!("create the output file: {err}")));
        let err = out
            .try_clone()
            .unwrap_or_else(|err| fail(&format!("dup the output file: {err}")));
        let mut cmd = Command::new(pivot_bin());
        cmd.arg("bootstrap")
            .arg("--node-name")
            .arg(&name)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--lock-file")
            .arg(node_dir.join("lock").join("kubelet.lock"))
            .arg("--dynamic-config-dir")
            .arg(node_dir.join("store"))
            .arg("--stop-timeout")
            .arg("5s")
            .arg("--")
            .arg(stand_in)
            .env_remove("NOTIFY_SOCKET")
            .env("STANDIN_LOG", &log)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        fleet.push(FleetNode {
            name,
            supervisor: Proc::spawn(&mut cmd),
            log,
        });
    }
    println!(
        "  spawned {} supervisors; waiting for the initial sync",
        opts.nodes
    );

    // Settled: every node reports the assigned config and runs one kubelet with it, one
    // watch per node is open, and the server has seen no request for a while.
    wait_until(
        FLEET_SETTLE_DEADLINE,
        "every node to report its config",
        || {
            fleet
                .iter()
                .all(|n| condition_message(&server, &n.name).is_some_and(|m| m.contains(&uid)))
                .then_some(())
        },
    );
    wait_until(
        FLEET_SETTLE_DEADLINE,
        "one node watch per supervisor",
        || (server.open_watches("/api/v1/nodes") >= opts.nodes).then_some(()),
    );
    let mut last = (server.requests().len(), Instant::now());
    wait_until(
        FLEET_SETTLE_DEADLINE,
        "the initial sync to go quiet",
        || {
            let now = server.requests().len();
            if now != last.0 {
                last = (now, Instant::now());
            }
            (last.1.elapsed() >= FLEET_QUIET).then_some(())
        },
    );
    let startup = started.elapsed();
    println!(
        "  initial sync settled after {:.1} s ({} requests); idle window {} s",
        startup.as_secs_f64(),
        server.requests().len(),
        opts.idle.as_secs()
    );

    let kubelet_pids: Vec<i32> = fleet
        .iter()
        .filter_map(|n| support::running_kubelets(&n.log).first().copied())
        .collect();
    let supervisor_pids: Vec<i32> = fleet.iter().map(|n| n.supervisor.pid()).collect();
    let cpu_before: Vec<u64> = supervisor_pids.iter().map(|p| cpu_and_rss(*p).0).collect();
    server.clear_requests();
    let open_watches_start = server.open_watches("/");
    let idle_start = Instant::now();
    while idle_start.elapsed() < opts.idle {
        thread::sleep(FLEET_PROGRESS.min(opts.idle.saturating_sub(idle_start.elapsed())));
        println!(
            "    t+{:>4.0} s: {} requests, {} open watches",
            idle_start.elapsed().as_secs_f64(),
            server.requests().len(),
            server.open_watches("/")
        );
    }
    let idle = idle_start.elapsed();
    let requests = server.requests();
    let open_watches_end = server.open_watches("/");
    let cpu_used: Vec<u64> = supervisor_pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, before)| cpu_and_rss(*p).0.saturating_sub(*before))
        .collect();
    let supervisor_rss: u64 = supervisor_pids.iter().map(|p| cpu_and_rss(*p).1).sum();
    let kubelet_rss: u64 = kubelet_pids.iter().map(|p| cpu_and_rss(*p).1).sum();
    let watch_timeout_secs = server
        .open_watch_records()
        .iter()
        .find_map(|r| r.query_param("timeoutSeconds")?.parse().ok());

    let watch_renewals = count(&requests, |r| r.watch);
    let polling = count(&requests, |r| !r.watch && r.method == "GET");
    let writes = count(&requests, |r| !r.watch && r.method != "GET");
    let other = requests
        .iter()
        .filter(|r| !r.watch)
        .take(10)
        .map(|r| format!("{} {}?{} -> {}", r.method, r.path, r.query, r.status))
        .collect();
    let polls: Vec<bool> = fleet
        .iter()
        .map(|n| {
            let out = n.log.with_file_name("supervisor.out");
            fs::read_to_string(out).is_ok_and(|text| text.contains("watch=Poll"))
        })
        .collect();
    let poll_mode = polls.iter().filter(|p| **p).count();
    let ticks_per_s = clock_ticks() as f64;
    let cpu_ms_per_s = |poll: bool| {
        let used: Vec<u64> = cpu_used
            .iter()
            .zip(&polls)
            .filter(|(_, p)| **p == poll)
            .map(|(c, _)| *c)
            .collect();
        if used.is_empty() {
            return 0.0;
        }
        let ticks = used.iter().sum::<u64>() as f64 / used.len() as f64;
        ticks / ticks_per_s * 1000.0 / idle.as_secs_f64()
    };
    let mut alive_end = 0;
    for node in &mut fleet {
        if node.supervisor.is_running() {
            alive_end += 1;
        }
    }
    // Orderly shutdown: SIGTERM all, then wait (the Procs SIGKILL any straggler on drop).
    for node in &mut fleet {
        node.supervisor.signal(Signal::SIGTERM);
    }
    for node in &mut fleet {
        node.supervisor.wait_exit(Duration::from_secs(30));
    }
    for node in &fleet {
        let overlaps = read_log(&node.log)
            .iter()
            .filter(|l| l.event == "OVERLAP")
            .count();
        if overlaps > 0 {
            fail(&format!("{}: two kubelets ran at once", node.name));
        }
    }
    FleetReport {
        nodes: opts.nodes,
        idle,
        requests: requests.len(),
        watch_renewals,
        polling,
        writes,
        other,
        open_watches_start,
        open_watches_end,
        watch_timeout_secs,
        cpu_cores: cpu_used.iter().sum::<u64>() as f64 / ticks_per_s / idle.as_secs_f64(),
        cpu_ms_per_s_inotify: cpu_ms_per_s(false),
        cpu_ms_per_s_poll: cpu_ms_per_s(true),
        supervisor_rss_mib: supervisor_rss as f64 / 1024.0,
        kubelet_rss_mib: kubelet_rss as f64 / 1024.0,
        poll_mode,
        startup,
        alive_end,
    }
}

/// Part (a): both apply paths; returns the summary lines.
fn latency_part(changes: usize) -> Vec<String> {
    println!("(a) apply latency: node annotation PATCH -> new kubelet exec");
    let sync = bench_sync_path(changes);
    let sync_stats = stats(&sync);
    print_stats("kubelet-pivot (restart in place)", &sync_stats, sync.len());
    let (seed, checkpointed, early) = bench_seed_path(changes);
    let seed_stats = stats(&seed);
    print_stats(
        "seed (checkpoint, exit, RestartSec=100ms)",
        &seed_stats,
        seed.len(),
    );
    print_stats(
        "  of which PATCH -> meta/assigned",
        &stats(&checkpointed),
        checkpointed.len(),
    );
    if early > 0 {
        println!("    (the seed's old holder restarted its kubelet before its exit {early} times; not counted)");
    }
    let met = if sync_stats.p50 < TARGET_P50_MS {
        "met"
    } else {
        "MISSED"
    };
    vec![
        format!(
            "apply latency p50 {:.1} ms, p99 {:.1} ms over {} changes (target p50 < {TARGET_P50_MS} ms: {met})",
            sync_stats.p50,
            sync_stats.p99,
            sync.len(),
        ),
        format!(
            "seed apply path p50 {:.1} ms, p99 {:.1} ms: kubelet-pivot is {:.1}x faster at p50 ({:.1}x at p99)",
            seed_stats.p50,
            seed_stats.p99,
            seed_stats.p50 / sync_stats.p50,
            seed_stats.p99 / sync_stats.p99
        ),
    ]
}

/// Part (b): the idle fleet; returns the summary lines.
fn fleet_part(opts: &Opts, stand_in: &Path) -> Vec<String> {
    println!(
        "(b) idle fleet: {} supervisors against one API server",
        opts.nodes
    );
    let fleet = bench_fleet(opts, stand_in);
    let inotify_limit = fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .map_or_else(|_| "?".to_owned(), |v| v.trim().to_owned());
    vec![
        format!(
            "fleet: {} nodes, initial sync settled in {:.1} s, idle {:.0} s, {} of {} supervisors alive at the end",
            fleet.nodes,
            fleet.startup.as_secs_f64(),
            fleet.idle.as_secs_f64(),
            fleet.alive_end,
            fleet.nodes
        ),
        format!(
            "fleet API load: {} requests in the idle window = {:.2} requests per node per hour \
             (watch renewals {}, polling GET/LIST {}, writes {})",
            fleet.requests,
            fleet.per_node_hour(fleet.requests),
            fleet.watch_renewals,
            fleet.polling,
            fleet.writes
        ),
        match fleet.watch_timeout_secs {
            Some(t) => format!(
                "watch timeoutSeconds={t}: steady state {:.1} renewals per watch per hour",
                3600.0 / t as f64
            ),
            None => "watch timeoutSeconds: not sent".to_owned(),
        },
        format!(
            "open watches on the server: {} at the start of the idle window, {} at the end ({:.2} per node)",
            fleet.open_watches_start,
            fleet.open_watches_end,
            fleet.open_watches_end as f64 / fleet.nodes as f64
        ),
        format!(
            "polling of the API: {}",
            if fleet.polling == 0 && fleet.writes == 0 {
                "none (only watch renewals)".to_owned()
            } else {
                format!("YES: {:#?}", fleet.other)
            }
        ),
        format!(
            "fleet cost while idle: {:.3} CPU cores for all supervisors; per supervisor {:.2} ms CPU/s \
             with inotify, {:.2} ms CPU/s polling the lock ({} of {} fell back to polling at \
             fs.inotify.max_user_instances={inotify_limit}); RSS {:.0} MiB supervisors + {:.0} MiB stand-ins",
            fleet.cpu_cores,
            fleet.cpu_ms_per_s_inotify,
            fleet.cpu_ms_per_s_poll,
            fleet.poll_mode,
            fleet.nodes,
            fleet.supervisor_rss_mib,
            fleet.kubelet_rss_mib
        ),
    ]
}

fn main() {
    let opts = opts();
    let stand_in = stand_in();
    let parts = std::env::var("CONFIG_APPLY_PARTS").unwrap_or_else(|_| "ab".to_owned());
    println!(
        "config_apply: kubelet-pivot {} ({} changes per path, fleet of {} idle for {} s, parts {parts})",
        pivot_bin().display(),
        opts.changes,
        opts.nodes,
        opts.idle.as_secs()
    );
    if opts.changes == 0 || opts.nodes == 0 {
        fail("CONFIG_APPLY_CHANGES and CONFIG_APPLY_NODES must be at least 1");
    }
    let mut summary = Vec::new();
    if parts.contains('a') {
        summary.extend(latency_part(opts.changes));
    }
    if parts.contains('b') {
        summary.extend(fleet_part(&opts, &stand_in));
    }
    println!();
    println!("summary");
    for line in summary {
        println!("  {line}");
    }
}
