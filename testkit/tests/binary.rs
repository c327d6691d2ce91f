//! The `kubelet-pivot-test-apiserver` binary: it serves, registers the Node, writes a working
//! kubeconfig, prints where, and on SIGTERM stops and removes the kubeconfig.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_kubelet-pivot-test-apiserver");
const DEADLINE: Duration = Duration::from_secs(10);

/// Kills the server if a test panics before stopping it.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Reads the banner up to the `try` line, as `key -> value`.
fn banner_fields(stdout: ChildStdout) -> std::collections::BTreeMap<String, String> {
    let mut fields = std::collections::BTreeMap::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read the server's stdout");
        let (key, value) = line.split_once(' ').expect("`key value` lines");
        fields.insert(key.to_owned(), value.trim().to_owned());
        if key == "try" {
            break;
        }
    }
    fields
}

/// Reads the banner up to the `kubeconfig` line; returns (`serving` URL, `node`, `kubeconfig`).
fn banner(stdout: ChildStdout) -> (String, String, String) {
    let fields = banner_fields(stdout);
    let get = |key: &str| {
        fields
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key} line"))
    };
    (get("serving"), get("node"), get("kubeconfig"))
}

/// `GET path` with the kubeconfig's bearer token; returns the whole answer.
fn get(url: &str, token: &str, path: &str) -> String {
    let addr = url.strip_prefix("http://").expect("an http:// URL");
    let mut conn = TcpStream::connect(addr).expect("connect to the server");
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("read the answer");
    answer
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for the server") {
            return status;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the server did not exit on SIGTERM"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn serves_the_node_writes_a_kubeconfig_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kc");
    let mut server = Server(
        Command::new(BIN)
            .args(["--node", "node-x", "--kubeconfig"])
            .arg(&kubeconfig)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the server"),
    );
    let (url, node, printed) = banner(server.0.stdout.take().expect("piped stdout"));
    assert_eq!(node, "node-x");
    assert_eq!(Path::new(&printed), kubeconfig);
    let text = std::fs::read_to_string(&kubeconfig).expect("the kubeconfig is written");
    assert!(text.contains(&format!("server: {url}")), "{text}");
    let token = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("token: "))
        .expect("a token in the kubeconfig");

    for path in ["/api/v1/nodes/node-x", "/api/v1/namespaces/kubelet-config"] {
        let answer = get(&url, token, path);
        assert!(answer.starts_with("HTTP/1.1 200 "), "GET {path}: {answer}");
    }

    // The real kubectl, where installed (CI installs it).
    if let Ok(out) = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg(format!(
            "--cache-dir={}",
            dir.path().join("cache").display()
        ))
        .args(["get", "nodes", "-o", "name"])
        .output()
    {
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "node/node-x");
    }

    let status = Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    assert!(wait_exit(&mut server.0).success());
    assert!(!kubeconfig.exists(), "the kubeconfig is removed on exit");
}

fn token_of(kubeconfig: &Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).expect("the kubeconfig is written");
    text.lines()
        .find_map(|line| line.trim().strip_prefix("token: "))
        .expect("a token in the kubeconfig")
        .to_string()
}

#[test]
fn node_kubeconfig_has_the_node_credentials() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kc");
    let node_kubeconfig = dir.path().join("node-kc");
    let mut server = Server(
        Command::new(BIN)
            .args(["--node", "node-x", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--node-kubeconfig")
            .arg(&node_kubeconfig)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the server"),
    );
    let fields = banner_fields(server.0.stdout.take().expect("piped stdout"));
    assert_eq!(
        fields.get("nodeconfig").map(Path::new),
        Some(node_kubeconfig.as_path())
    );
    let url = &fields["serving"];
    let token = token_of(&node_kubeconfig);
    assert_ne!(token, token_of(&kubeconfig));
    let answer = get(url, &token, "/api/v1/nodes/node-x");
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    let answer = get(url, &token, "/apis/policy/v1/poddisruptionbudgets");
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert!(
        answer.contains("User \\\"system:node:node-x\\\" cannot list resource"),
        "{answer}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    assert!(wait_exit(&mut server.0).success());
    assert!(!node_kubeconfig.exists(), "removed on exit");
}

#[test]
fn bad_arguments_exit_2_with_the_usage() {
    for args in [&["--bogus"][..], &["--port", "x"], &["--node"]] {
        let out = Command::new(BIN)
            .args(args)
            .output()
            .expect("run the server");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Usage:"),
            "{out:?}"
        );
    }
    let out = Command::new(BIN)
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--kubeconfig FILE"));
}
