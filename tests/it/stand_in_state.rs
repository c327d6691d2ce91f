//! The stand-in kubelet's checkpoint handling (`--root-dir`, `cpu_manager_state`,
//! `memory_manager_state`) and its healthz server (`STANDIN_HEALTHZ`), run as the built binary
//! (`target/<profile>/examples/stand_in_kubelet`, built by a plain `cargo test`).

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::support::free_port;

const DEADLINE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(5);

/// `<dir of kubelet-pivot>/examples/stand_in_kubelet`, as in tests/support.
fn stand_in_bin() -> PathBuf {
    let pivot = PathBuf::from(env!("CARGO_BIN_EXE_kubelet-pivot"));
    let bin = pivot
        .parent()
        .expect("kubelet-pivot has a parent dir")
        .join("examples")
        .join("stand_in_kubelet");
    assert!(
        bin.is_file(),
        "stand-in kubelet not found at {}: build it with a plain `cargo test` or \
         `cargo build --examples`",
        bin.display()
    );
    bin
}

/// Polls `f` until it returns `Some`, panicking after [`DEADLINE`].
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        thread::sleep(POLL);
    }
}

/// One stand-in run in a temp dir: root dir, config and event log.
struct Node {
    dir: TempDir,
}

/// A running stand-in; killed and reaped on drop if the test did not stop it.
struct Kubelet {
    child: Child,
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Kubelet {
    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits in i32"))
    }

    fn wait_exit(&mut self) -> ExitStatus {
        wait_for("the stand-in to exit", || {
            self.child.try_wait().expect("try_wait on the stand-in")
        })
    }

    /// SIGTERM, then waits for the exit (0, as after any SIGTERM).
    fn stop(&mut self) {
        kill(self.pid(), Signal::SIGTERM).expect("SIGTERM to the stand-in");
        let status = self.wait_exit();
        assert_eq!(status.code(), Some(0), "stand-in exit after SIGTERM");
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        self.child
            .stderr
            .take()
            .expect("stderr is piped")
            .read_to_string(&mut text)
            .expect("read the stand-in's stderr");
        text
    }
}

impl Node {
    fn new() -> Node {
        Node {
            dir: tempfile::tempdir().expect("create a temp dir"),
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("events.log")
    }

    fn config(&self, json: &str) -> PathBuf {
        let path = self.dir.path().join("config.json");
        fs::write(&path, json).expect("write the config");
        path
    }

    fn write_state(&self, name: &str, content: &str) {
        fs::create_dir_all(self.root()).expect("create the root dir");
        fs::write(self.root().join(name), content).expect("write a checkpoint");
    }

    fn state(&self, name: &str) -> serde_json::Value {
        let path = self.root().join(name);
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("read {}: {err}", path.display()));
        serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("{}: {err}: {text}", path.display()))
    }

    /// Starts the stand-in with `--config`, `--root-dir` and `env`.
    fn spawn(&self, config: &Path, env: &[(&str, &str)]) -> Kubelet {
        let mut cmd = Command::new(stand_in_bin());
        cmd.arg("--config")
            .arg(config)
            .arg("--root-dir")
            .arg(self.root())
            .env("STANDIN_LOG", self.log())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, value) in env {
            cmd.env(key, value);
        }
        Kubelet {
            child: cmd.spawn().expect("spawn the stand-in"),
        }
    }

    fn lines(&self, event: &str) -> Vec<String> {
        let prefix = format!("{event} ");
        fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .filter(|line| line.starts_with(&prefix))
            .map(str::to_owned)
            .collect()
    }

    /// Waits for the `event` line of `kubelet` and returns it.
    fn wait_line(&self, kubelet: &Kubelet, event: &str) -> String {
        let pid = format!(" pid={} ", kubelet.pid());
        wait_for(&format!("a {event} line"), || {
            self.lines(event)
                .into_iter()
                .find(|line| line.contains(&pid))
        })
    }
}

fn config_json(extra: &str) -> String {
    format!(
        r#"{{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration"{extra}}}"#
    )
}

/// `GET path` over a fresh connection: (status code, body).
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|err| panic!("connect {addr}: {err}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("set a read timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {response:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    if path == "/healthz" {
        assert!(
            head.contains("Content-Type: text/plain"),
            "healthz content type in {head:?}"
        );
    }
    (status, body.to_owned())
}

#[test]
fn cpu_policy_mismatch_refuses_to_start() {
    let node = Node::new();
    node.write_state(
        "cpu_manager_state",
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#,
    );
    let config = node.config(&config_json(r#","cpuManagerPolicy":"static""#));
    let mut kubelet = node.spawn(&config, &[]);
    let status = kubelet.wait_exit();
    let stderr = kubelet.stderr();
    assert_eq!(status.code(), Some(1), "exit code; stderr: {stderr}");
    let path = node.root().join("cpu_manager_state");
    let expected = format!(
        "could not restore state from checkpoint: configured policy \"static\" differs from state \
         checkpoint policy \"none\", please drain this node and delete the CPU manager checkpoint \
         file \"{}\" before restarting Kubelet",
        path.display()
    );
    assert!(stderr.contains(&expected), "stderr: {stderr}");
    assert!(
        node.lines("start").is_empty(),
        "a refused start logs no start line"
    );
    let crashes = node.lines("crash");
    assert_eq!(crashes.len(), 1, "crash lines: {crashes:?}");
    assert!(
        crashes[0].ends_with(" code=1 reason=cpu-manager-state"),
        "crash line: {}",
        crashes[0]
    );
    // The checkpoint is left alone and the memory manager's is never reached.
    assert_eq!(node.state("cpu_manager_state")["policyName"], "none");
    assert!(!node.root().join("memory_manager_state").exists());
}

#[test]
fn memory_policy_mismatch_refuses_to_start() {
    let node = Node::new();
    node.write_state(
        "memory_manager_state",
        r#"{"policyName":"None","machineState":{},"checksum":1}"#,
    );
    let config = node.config(&config_json(r#","memoryManagerPolicy":"Static""#));
    let mut kubelet = node.spawn(&config, &[]);
    let status = kubelet.wait_exit();
    let stderr = kubelet.stderr();
    assert_eq!(status.code(), Some(1), "exit code; stderr: {stderr}");
    let path = node.root().join("memory_manager_state");
    let expected = format!(
        "could not restore state from checkpoint: [memorymanager] configured policy \"Static\" \
         differs from state checkpoint policy \"None\", please drain this node and delete the \
         memory manager checkpoint file \"{}\" before restarting Kubelet",
        path.display()
    );
    assert!(stderr.contains(&expected), "stderr: {stderr}");
    assert!(
        node.lines("start").is_empty(),
        "a refused start logs no start line"
    );
    let crashes = node.lines("crash");
    assert_eq!(crashes.len(), 1, "crash lines: {crashes:?}");
    assert!(
        crashes[0].ends_with(" code=1 reason=memory-manager-state"),
        "crash line: {}",
        crashes[0]
    );
}

#[test]
fn corrupted_checkpoint_refuses_to_start() {
    let node = Node::new();
    node.write_state("cpu_manager_state", "{not json");
    let config = node.config(&config_json(""));
    let mut kubelet = node.spawn(&config, &[]);
    let status = kubelet.wait_exit();
    let stderr = kubelet.stderr();
    assert_eq!(status.code(), Some(1), "exit code; stderr: {stderr}");
    assert!(
        stderr.contains("could not restore state from checkpoint: checkpoint is corrupted"),
        "stderr: {stderr}"
    );
    assert!(node.lines("start").is_empty());
}

#[test]
fn absent_checkpoints_are_created_and_kept() {
    let node = Node::new();
    let config = node.config(&config_json(
        r#","cpuManagerPolicy":"static","memoryManagerPolicy":"Static""#,
    ));
    let mut kubelet = node.spawn(&config, &[]);
    node.wait_line(&kubelet, "start");
    let cpu = node.state("cpu_manager_state");
    assert_eq!(cpu["policyName"], "static");
    let online = fs::read_to_string("/sys/devices/system/cpu/online")
        .map(|list| list.trim().to_owned())
        .unwrap_or_default();
    if !online.is_empty() {
        assert_eq!(cpu["defaultCpuSet"], online.as_str());
    }
    assert!(cpu["checksum"].is_u64(), "checksum in {cpu}");
    let memory = node.state("memory_manager_state");
    assert_eq!(memory["policyName"], "Static");
    assert_eq!(memory["machineState"], serde_json::json!({}));
    assert!(memory["checksum"].is_u64(), "checksum in {memory}");
    kubelet.stop();

    // Same policies: the second start runs and keeps the files as they are.
    let cpu_before = fs::read(node.root().join("cpu_manager_state")).expect("read");
    let mut second = node.spawn(&config, &[]);
    node.wait_line(&second, "start");
    second.stop();
    assert_eq!(
        fs::read(node.root().join("cpu_manager_state")).expect("read"),
        cpu_before
    );
    assert!(node.lines("crash").is_empty(), "{:?}", node.lines("crash"));
}

#[test]
fn not_json_config_means_default_policies() {
    let node = Node::new();
    let config = node.config("kind: KubeletConfiguration\ncpuManagerPolicy: static\n");
    let mut kubelet = node.spawn(&config, &[]);
    node.wait_line(&kubelet, "start");
    assert_eq!(node.state("cpu_manager_state")["policyName"], "none");
    assert_eq!(node.state("cpu_manager_state")["defaultCpuSet"], "");
    assert_eq!(node.state("memory_manager_state")["policyName"], "None");
    kubelet.stop();
}

#[test]
fn healthz_serves_ok() {
    let node = Node::new();
    let port = free_port();
    let config = node.config(&config_json(&format!(
        r#","healthzBindAddress":"127.0.0.1","healthzPort":{port}"#
    )));
    let mut kubelet = node.spawn(&config, &[("STANDIN_HEALTHZ", "1")]);
    node.wait_line(&kubelet, "start");
    let line = node.wait_line(&kubelet, "healthz");
    let addr = format!("127.0.0.1:{port}");
    assert!(
        line.ends_with(&format!(" addr={addr}")),
        "healthz line: {line}"
    );
    assert_eq!(http_get(&addr, "/healthz"), (200, "ok".to_owned()));
    assert_eq!(http_get(&addr, "/nope").0, 404);
    kubelet.stop();
}

#[test]
fn healthz_delay_answers_500_first() {
    let node = Node::new();
    let port = free_port();
    let config = node.config(&config_json(&format!(r#","healthzPort":{port}"#)));
    let mut kubelet = node.spawn(
        &config,
        &[
            ("STANDIN_HEALTHZ", "1"),
            ("STANDIN_HEALTHZ_DELAY_MS", "3000"),
        ],
    );
    let start = node.wait_line(&kubelet, "start");
    node.wait_line(&kubelet, "healthz");
    let addr = format!("127.0.0.1:{port}");
    let first = http_get(&addr, "/healthz");
    // Only meaningful while we are still inside the delay (a very slow host may not be).
    let ready_ns: u128 = start
        .split_whitespace()
        .find_map(|field| field.strip_prefix("ready="))
        .and_then(|ns| ns.parse().ok())
        .expect("ready= in the start line");
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos();
    if now_ns < ready_ns + 2_500_000_000 {
        assert_eq!(first, (500, "not ready".to_owned()));
    }
    wait_for("healthz to turn ok", || {
        (http_get(&addr, "/healthz") == (200, "ok".to_owned())).then_some(())
    });
    kubelet.stop();
}

#[test]
fn healthz_port_taken_is_retried_while_the_kubelet_runs_on() {
    let node = Node::new();
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    let port = taken.local_addr().expect("local addr").port();
    let config = node.config(&config_json(&format!(r#","healthzPort":{port}"#)));
    let mut kubelet = node.spawn(&config, &[("STANDIN_HEALTHZ", "1")]);
    let failed = wait_for("a healthz-bind-failed line", || {
        node.lines("healthz-bind-failed").into_iter().next()
    });
    assert!(
        failed.contains(&format!("addr=127.0.0.1:{port}")),
        "{failed}"
    );
    assert!(
        node.lines("crash").is_empty(),
        "the kubelet runs on, like the real one"
    );
    // Freed: the retry (every 5 s) binds it and serves.
    drop(taken);
    let addr = format!("127.0.0.1:{port}");
    wait_for("healthz served after the retry", || {
        // Connection refused until the retry binds: not an answer yet.
        TcpStream::connect(&addr).ok()?;
        (http_get(&addr, "/healthz") == (200, "ok".to_owned())).then_some(())
    });
    kubelet.stop();
}

#[test]
fn healthz_port_zero_serves_nothing() {
    let node = Node::new();
    let config = node.config(&config_json(r#","healthzPort":0"#));
    let mut kubelet = node.spawn(&config, &[("STANDIN_HEALTHZ", "1")]);
    node.wait_line(&kubelet, "start");
    kubelet.stop();
    assert!(
        node.lines("healthz").is_empty(),
        "{:?}",
        node.lines("healthz")
    );
}
