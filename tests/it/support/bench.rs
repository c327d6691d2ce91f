//! For the benches (`benches/*.rs` include this module with `#[path]`): a bench reports a
//! failure on stderr and exits 2 instead of panicking.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use inotify::{Inotify, WatchMask};
use serde_json::json;
use testkit::ApiServer;

use super::{kubelet_config, now_ns, stand_in_path, Proc, Scene};

/// Prints `<bench> bench: <msg>` and exits 2; `<bench>` is the bench target's name.
pub fn fail(msg: &str) -> ! {
    eprintln!("{} bench: {msg}", env!("CARGO_CRATE_NAME"));
    std::process::exit(2);
}

/// The stand-in kubelet next to the kubelet-pivot binary cargo built for this bench; fails if
/// it has not been built (`cargo bench` does not build examples).
pub fn stand_in() -> PathBuf {
    let bin = stand_in_path();
    if !bin.is_file() {
        fail(&format!(
            "stand-in kubelet not found at {}; `cargo bench` does not build examples: run \
             `cargo build --release --examples` first",
            bin.display()
        ));
    }
    bin
}

/// /proc/PID/status field in kB (VmRSS, VmHWM) or a count (Threads).
pub fn status_field(pid: i32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|err| fail(&format!("read /proc/{pid}/status: {err}")));
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(':')))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| fail(&format!("no {key} in /proc/{pid}/status")))
}

/// utime + stime of `pid` in clock ticks.
pub fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|err| fail(&format!("read /proc/{pid}/stat: {err}")));
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After "pid (comm)": state is field 0, utime 11, stime 12.
    let num = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    num(11) + num(12)
}

/// Watches `path` for `mask` with inotify on a thread named `name`, which first runs `setup`;
/// sends the time (ns since the epoch, taken as soon as the events are read) of every event
/// that `wanted` accepts, given the event's file name (for a watched directory).
pub fn inotify_times(
    name: &str,
    path: &Path,
    mask: WatchMask,
    setup: impl FnOnce() + Send + 'static,
    wanted: impl Fn(Option<&OsStr>) -> bool + Send + 'static,
) -> Receiver<u128> {
    let inotify = Inotify::init().unwrap_or_else(|err| fail(&format!("inotify_init: {err}")));
    inotify
        .watches()
        .add(path, mask)
        .unwrap_or_else(|err| fail(&format!("watch {}: {err}", path.display())));
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            setup();
            let mut inotify = inotify;
            let mut buffer = [0u8; 4096];
            loop {
                let Ok(events) = inotify.read_events_blocking(&mut buffer) else {
                    return;
                };
                let at = now_ns();
                for event in events {
                    if wanted(event.name) && tx.send(at).is_err() {
                        return;
                    }
                }
            }
        })
        .unwrap_or_else(|err| fail(&format!("start the watch thread: {err}")));
    rx
}

/// A summary of samples; the percentiles are nearest-rank.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

/// Summarises `samples`; panics if there are none.
pub fn stats(samples: &[f64]) -> Stats {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    assert!(n > 0, "no samples");
    // Nearest-rank percentiles.
    let rank = |p: f64| sorted[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    Stats {
        n,
        p50: rank(0.50),
        p99: rank(0.99),
        min: sorted[0],
        max: sorted[n - 1],
        mean: sorted.iter().sum::<f64>() / n as f64,
    }
}

/// `name` from the environment as a number, else `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `var` from the environment as a whole number, `None` if unset; fails if it is not one.
pub fn env_number(var: &str) -> Option<u64> {
    let value = std::env::var(var).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| fail(&format!("{var}={value:?} is not a whole number"))),
    )
}

const DRAIN_NODE: &str = "bench-node";

/// The times of one [`DrainNode::change_timed`], from the assignment.
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    /// Until no pod was bound to the node (as `settled` if there were none).
    pub emptied: Duration,
    /// Until the node was settled on the new config.
    pub settled: Duration,
}
const CONFIG_NS: &str = "kubelet-config";
const SOURCE_ANNOTATION: &str = kp_contract::node_config::SOURCE_ANNOTATION;

/// A node for the drain benches: the test API server with the Node, a bootstrap supervisor
/// with the node's credentials (RUST_LOG=warn, or `DRAIN_SUPERVISOR_LOG`) and the stand-in kubelet serving healthz, settled
/// on a first assigned config.
pub struct DrainNode {
    pub scene: Scene,
    pub server: ApiServer,
    healthz: u16,
    sup: Proc,
    /// ConfigMaps created so far (names are unique per change).
    made: usize,
    /// Longest a change may take to settle.
    pub deadline: Duration,
}

impl DrainNode {
    pub fn start() -> DrainNode {
        let scene = Scene::new();
        let server = ApiServer::start();
        server.create_node(DRAIN_NODE, std::iter::empty::<(&str, &str)>());
        let kubeconfig = server.node_kubeconfig_in(scene.path(), DRAIN_NODE);
        let root = scene.path().join("kubelet-root");
        if let Err(err) = std::fs::create_dir_all(&root) {
            fail(&format!("cannot create {}: {err}", root.display()));
        }
        let healthz = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|err| fail(&format!("no free port: {err}")));
        let kubeconfig = path_str(&kubeconfig);
        let root = path_str(&root);
        let log = std::env::var("DRAIN_SUPERVISOR_LOG").unwrap_or_else(|_| "warn".into());
        let sup = scene.spawn(scene.pivot(
            &[
                "bootstrap",
                "--kubeconfig",
                &kubeconfig,
                "--node-name",
                DRAIN_NODE,
                "--kubelet-root-dir",
                &root,
                "--stop-timeout",
                "5s",
            ],
            &["--root-dir", &root],
            &[("STANDIN_HEALTHZ", "1"), ("RUST_LOG", &log)],
        ));
        let mut b = DrainNode {
            scene,
            server,
            healthz,
            sup,
            made: 0,
            deadline: Duration::from_secs(60),
        };
        b.change("maxPods: 110\neventBurst: 100\n");
        b
    }

    /// The supervisor's pid.
    pub fn supervisor(&self) -> i32 {
        self.sup.pid()
    }

    /// Assigns a new ConfigMap with `extra`; returns the wall time until the node is settled
    /// (condition True for it, uncordoned, no drain record).
    pub fn change(&mut self, extra: &str) -> Duration {
        self.settle(extra, false).settled
    }

    /// [`DrainNode::change`], also timing the moment the last pod left the node (the pods
    /// are counted every poll, under the server's lock: not for tens of thousands of pods).
    pub fn change_timed(&mut self, extra: &str) -> Timed {
        self.settle(extra, true)
    }

    fn settle(&mut self, extra: &str, count_pods: bool) -> Timed {
        self.made += 1;
        let name = format!("cfg-{}", self.made);
        let body = kubelet_config(&format!("healthzPort: {}\n{extra}", self.healthz));
        let data: BTreeMap<String, String> = [("kubelet".to_string(), body)].into_iter().collect();
        let cm = self.server.create_configmap(CONFIG_NS, &name, data, true);
        let uid = cm["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let start = Instant::now();
        self.server.set_node_annotation(
            DRAIN_NODE,
            SOURCE_ANNOTATION,
            Some(&format!("{CONFIG_NS}/{name}")),
        );
        let record = self.scene.config_dir().join("v1/disruption.json");
        let mut emptied = None;
        loop {
            if count_pods && emptied.is_none() && self.server.pod_count_on(DRAIN_NODE) == 0 {
                emptied = Some(start.elapsed());
            }
            let node = self.server.node(DRAIN_NODE);
            let settled = node["status"]["conditions"]
                .as_array()
                .and_then(|c| {
                    c.iter()
                        .find(|c| c["type"] == kp_contract::node_config::CONDITION_TYPE)
                })
                .is_some_and(|c| {
                    c["status"] == "True" && c["message"].as_str().unwrap_or("").contains(&uid)
                })
                && node["spec"]["unschedulable"] != json!(true)
                && !record.exists();
            if settled {
                let settled = start.elapsed();
                return Timed {
                    emptied: emptied.unwrap_or(settled),
                    settled,
                };
            }
            if start.elapsed() > self.deadline {
                fail(&format!(
                    "change to {name} did not settle within {:?}\n{}",
                    self.deadline,
                    self.scene.output()
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The node's name.
    pub fn node(&self) -> &'static str {
        DRAIN_NODE
    }

    /// Creates `n` ReplicaSet pods bound to the node (`web-{round}-{i}`, label `app=web`).
    pub fn pods(&self, n: usize, round: usize) {
        for i in 0..n {
            self.server.create_pod(
                "default",
                &format!("web-{round}-{i}"),
                DRAIN_NODE,
                json!({"app": "web"}),
                Some("ReplicaSet"),
                json!({}),
            );
        }
    }
}

fn path_str(p: &Path) -> String {
    p.to_str()
        .unwrap_or_else(|| fail("temp path is not UTF-8"))
        .to_string()
}
