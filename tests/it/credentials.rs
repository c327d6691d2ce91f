//! Credentials that appear late and rotate (issue 29, items 1 and 2): the real
//! `kubelet-pivot` binary with the stand-in kubelet and the strict fake API server.
//!
//! - A `--kubeconfig` that does not exist yet (a joining node: the kubelet writes it after its
//!   TLS bootstrap) is waited for; the kubelet runs meanwhile; once the file appears
//!   (written atomically, temp file and rename, as the kubelet does) the node's assignment is
//!   followed. The time from the rename to the Node showing the assigned config is printed
//!   (run with `--nocapture`).
//! - A kubeconfig that appears invalid is refused with a clear error, the kubelet keeps
//!   running, and the fixed file is then picked up without a kubelet restart.
//! - A token file rotated (and the old token refused by the server): the node still follows.
//! - A bad rotated file keeps the old credentials and says why.
//!
//! Build the stand-in first: `cargo build --examples && cargo test --test it credentials::`.

use crate::support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::api_node::{ApiNode, NODE};
use support::lock_state::status_json;
use support::{kubelet_config, node_paths, pivot_bin, poll_until, wait_until, Proc, Scene};
use testkit::ApiServer;

/// Deadline for anything the product should do promptly.
const DEADLINE: Duration = Duration::from_secs(10);
/// How long a "does NOT happen" check watches (a bounded sleep by design).
const QUIET_WINDOW: Duration = Duration::from_millis(1500);
/// The issue's bound from the kubeconfig's appearance to following the assignment.
const FOLLOW_BOUND: Duration = Duration::from_secs(1);
const WAITING_TEXT: &str = "(the kubelet writes it after its TLS bootstrap)";

support::api_node::node_type! {
    /// [`ApiNode`] whose kubeconfig, `<scene>/etc/kubernetes/kubelet.conf`, does not exist at first
    /// (nor its directories), with the supervisor and the looks of these tests.
    Node
}

impl Node {
    fn new() -> Node {
        Node(ApiNode::awaiting_credentials("etc/kubernetes/kubelet.conf"))
    }

    fn bootstrap(&self) -> Proc {
        self.bootstrap_with(&[])
    }

    fn bootstrap_with(&self, extra: &[&str]) -> Proc {
        let mut args = self.node_args(&["bootstrap"]);
        args.extend_from_slice(extra);
        self.scene.spawn(self.scene.pivot(&args, &[], &[]))
    }

    fn configmap(&self, name: &str, extra: &str) -> String {
        self.0.configmap(name, kubelet_config(extra))
    }

    /// The condition says the assigned config (`uid`) runs.
    fn follows(&self, uid: &str) -> bool {
        self.condition().is_some_and(|c| {
            c["status"] == "True" && c["message"].as_str().unwrap_or("").contains(uid)
        })
    }

    fn running_kubelet(&self) -> i32 {
        wait_until(DEADLINE, "one running kubelet", || {
            match self.scene.running_kubelets().as_slice() {
                [pid] => Some(*pid),
                _ => None,
            }
        })
    }

    /// `status` (table).
    fn status_table(&self) -> String {
        let mut cmd = Command::new(pivot_bin());
        cmd.arg("status");
        let out = node_paths(&mut cmd, &self.scene.lock(), &self.scene.config_dir())
            .stdin(Stdio::null())
            .output()
            .expect("run status");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn api_row(&self) -> String {
        self.status_table()
            .lines()
            .find(|l| l.starts_with("API "))
            .unwrap_or("")
            .to_string()
    }

    /// Starts the bootstrap, assigns a ConfigMap `cfg-a` and waits until the node follows it;
    /// creates `cfg-b` for the next assignment and returns its uid.
    fn follow_a_first(&self) -> (Proc, String) {
        let uid_a = self.configmap("cfg-a", "eventBurst: 41\n");
        let uid_b = self.configmap("cfg-b", "eventBurst: 42\n");
        let boot = self.bootstrap();
        self.running_kubelet();
        self.assign("cfg-a");
        wait_until(DEADLINE, "the node to follow cfg-a", || {
            self.follows(&uid_a).then_some(())
        });
        (boot, uid_b)
    }

    /// Waits for the supervisor's log line containing `needle`.
    fn log_line(&self, needle: &str) -> String {
        wait_until(DEADLINE, &format!("a log line with {needle:?}"), || {
            self.scene
                .output()
                .lines()
                .find(|l| l.contains(needle))
                .map(str::to_string)
        })
    }

    /// Asserts for [`QUIET_WINDOW`] that `pid` stays the only running kubelet.
    fn assert_kubelet_untouched(&self, pid: i32, why: &str) {
        let until = Instant::now() + QUIET_WINDOW;
        while Instant::now() < until {
            assert_eq!(
                self.scene.running_kubelets(),
                vec![pid],
                "the kubelet was restarted or stopped ({why})\n{}",
                self.scene.output()
            );
            std::thread::sleep(support::POLL_INTERVAL);
        }
    }
}

/// Writes `text` to `path` as the kubelet does: a temp file in the same directory, then a
/// rename. Returns the moment of the rename.
fn write_atomically(path: &Path, text: &str, mode: u32) -> Instant {
    let dir = path.parent().expect("a parent");
    fs::create_dir_all(dir).expect("create the directory");
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().expect("a name").to_string_lossy()
    ));
    fs::write(&tmp, text).expect("write the temp file");
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).expect("chmod");
    let at = Instant::now();
    fs::rename(&tmp, path).expect("rename into place");
    at
}

/// The time from `since` until the node follows `uid` (polled every 5 ms).
fn time_to_follow(node: &Node, uid: &str, since: Instant) -> Duration {
    poll_until(
        DEADLINE,
        Duration::from_millis(5),
        "the Node to show the assigned config",
        || node.follows(uid).then(Instant::now),
    )
    .duration_since(since)
}

/// 1. No kubeconfig at start: the kubelet runs at once, `status` says what is awaited; the
///    file written atomically (in a directory created meanwhile) is followed within 1 s.
#[test]
fn a_kubeconfig_that_appears_later_is_followed_within_a_second() {
    let node = Node::new();
    let uid = node.configmap("cfg-a", "eventBurst: 42\n");
    node.assign("cfg-a");
    let _boot = node.bootstrap();
    let first = node.running_kubelet();
    let row = wait_until(DEADLINE, "the API row of status", || {
        Some(node.api_row()).filter(|r| r.contains("waiting for"))
    });
    assert!(
        row.contains(&node.kubeconfig.display().to_string()) && row.contains(WAITING_TEXT),
        "{row}"
    );
    let json = status_json(&node.scene);
    assert_eq!(json["api"]["phase"], "waiting", "{json}");
    assert!(
        node.condition().is_none(),
        "nothing reported without credentials"
    );
    let logs = node.scene.output();
    assert_eq!(
        logs.matches("the kubeconfig does not exist yet").count(),
        1,
        "{logs}"
    );

    let text = kubeconfig_text(&node.server, &node.server.node_token(NODE));
    assert!(
        node.server.requests().is_empty(),
        "a request before the kubeconfig"
    );
    let renamed = write_atomically(&node.kubeconfig, &text, 0o600);
    // Following begins with the list of this node's Node.
    let listed = poll_until(
        DEADLINE,
        Duration::from_millis(2),
        "the first list of this node's Node",
        || {
            node.server
                .requests()
                .iter()
                .any(|r| r.path == "/api/v1/nodes" && r.status == 200)
                .then(Instant::now)
        },
    )
    .duration_since(renamed);
    let took = time_to_follow(&node, &uid, renamed);
    println!("kubeconfig rename -> Node listed (following begins): {listed:?}; -> Node shows the assigned config (ConfigMap downloaded, kubelet restarted, status patched): {took:?}");
    assert!(listed <= FOLLOW_BOUND, "took {listed:?}");
    assert_ne!(node.running_kubelet(), first, "the assigned config runs");
    let row = node.api_row();
    assert!(row.contains("following"), "{row}");
}

/// 2. An invalid kubeconfig appears: a clear error, the kubelet keeps running; the fixed
///    file is picked up (the Node gets its status) without restarting the kubelet.
#[test]
fn an_invalid_kubeconfig_is_refused_and_the_fixed_one_picked_up() {
    let node = Node::new();
    let _boot = node.bootstrap();
    let pid = node.running_kubelet();
    write_atomically(
        &node.kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: {not: [a list\n",
        0o600,
    );
    let line = node.log_line("refusing the kubeconfig");
    assert!(
        line.contains(&node.kubeconfig.display().to_string())
            && line.contains("kubelet keeps running"),
        "{line}"
    );
    let row = wait_until(DEADLINE, "the API row naming the error", || {
        Some(node.api_row()).filter(|r| r.contains("waiting for a valid file"))
    });
    assert!(row.contains("kubelet.conf"), "{row}");
    node.assert_kubelet_untouched(pid, "an invalid kubeconfig");

    let text = kubeconfig_text(&node.server, &node.server.node_token(NODE));
    write_atomically(&node.kubeconfig, &text, 0o600);
    wait_until(DEADLINE, "the Node's KubeletConfigOK condition", || {
        node.condition()
    });
    node.assert_kubelet_untouched(pid, "the kubeconfig became valid");
    assert_eq!(
        node.scene
            .output()
            .matches("refusing the kubeconfig")
            .count(),
        1,
        "one line per distinct error"
    );
}

/// A kubeconfig for `server` with a static bearer token.
fn kubeconfig_text(server: &ApiServer, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n    insecure-skip-tls-verify: true\nusers:\n- name: fake\n  user:\n    token: {token}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n",
        server.url()
    )
}

/// A node whose kubeconfig reads its token from `<scene>/tokens/current` (a symlink to
/// `token-N`, re-pointed as a rotation does).
fn token_file_node() -> (Node, PathBuf) {
    let node = Node::new();
    let tokens = node.scene.path().join("tokens");
    fs::create_dir_all(&tokens).expect("tokens dir");
    let current = tokens.join("current");
    fs::write(tokens.join("token-1"), node.server.node_token(NODE)).expect("token");
    std::os::unix::fs::symlink("token-1", &current).expect("symlink");
    fs::create_dir_all(node.kubeconfig.parent().expect("parent")).expect("dir");
    node.server
        .write_token_file_kubeconfig(&node.kubeconfig, &current);
    (node, tokens)
}

/// Re-points `tokens/current` at a new file `name` holding `token` (atomically: a new
/// symlink renamed over the old one, as the kubelet's certificate manager does).
fn repoint(tokens: &Path, name: &str, token: &str, mode: u32) {
    let file = tokens.join(name);
    fs::write(&file, token).expect("token");
    fs::set_permissions(&file, fs::Permissions::from_mode(mode)).expect("chmod");
    let tmp = tokens.join(".current.tmp");
    std::os::unix::fs::symlink(name, &tmp).expect("symlink");
    fs::rename(&tmp, tokens.join("current")).expect("rename");
}

/// 4. A token file rotated (the old token refused from then on) and every connection
///    dropped: the node still follows a new assignment.
#[test]
fn a_rotated_token_file_is_used() {
    let (node, tokens) = token_file_node();
    let (_boot, uid_b) = node.follow_a_first();

    let new = node.server.rotate_node_token(NODE);
    repoint(&tokens, "token-2", &new, 0o600);
    node.log_line("credentials changed");
    node.server.drop_watches();
    let assigned = Instant::now();
    node.assign("cfg-b");
    let took = time_to_follow(&node, &uid_b, assigned);
    println!("token rotated, watches dropped: assignment followed in {took:?}");
}

/// 4b. Without inotify (`--watch-mode poll`: a read every 10 s), a rotated token is found
///     through the server's 401: the watch that reconnects is refused, the files are read
///     again at once, and the node follows a new assignment well before the next poll.
#[test]
fn a_401_reads_the_credentials_again() {
    let (node, tokens) = token_file_node();
    let uid_b = node.configmap("cfg-b", "eventBurst: 42\n");
    let _boot = node.bootstrap_with(&["--watch-mode", "poll"]);
    node.running_kubelet();
    wait_until(DEADLINE, "the Node's condition", || node.condition());

    let new = node.server.rotate_node_token(NODE);
    repoint(&tokens, "token-2", &new, 0o600);
    node.server.drop_watches();
    let assigned = Instant::now();
    node.assign("cfg-b");
    let took = time_to_follow(&node, &uid_b, assigned);
    println!("token rotated, no inotify: assignment followed after the 401 in {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}: the poll, not the 401"
    );
    let logs = node.scene.output();
    assert!(logs.contains("refused our credentials"), "{logs}");
}

/// 5. A bad rotated file (writable by others) keeps the old credentials, and the log and
///    `status` say why; the node keeps following.
#[test]
fn a_bad_rotated_file_keeps_the_old_credentials() {
    let (node, tokens) = token_file_node();
    let uid_b = node.configmap("cfg-b", "eventBurst: 42\n");
    let _boot = node.bootstrap();
    node.running_kubelet();
    wait_until(DEADLINE, "the Node's condition", || node.condition());

    repoint(&tokens, "token-bad", "not-a-token", 0o666);
    let line = node.log_line("refusing the changed credentials");
    assert!(
        line.contains("token file") && line.contains("writable") && line.contains("token-bad"),
        "{line}"
    );
    let row = wait_until(DEADLINE, "the API row", || {
        Some(node.api_row()).filter(|r| r.contains("keeping the last good credentials"))
    });
    assert!(row.contains("token file"), "{row}");
    node.server.drop_watches();
    node.assign("cfg-b");
    wait_until(
        DEADLINE,
        "the node to follow cfg-b with the old token",
        || node.follows(&uid_b).then_some(()),
    );
}

/// How long the first client certificate of test 3 is valid: long enough to start and
/// follow a first assignment, short enough to expire during the test.
const SHORT_VALIDITY: Duration = Duration::from_secs(6);

/// Writes `cert` as `<pki>/name` (certificate then key, 0600) and points
/// `<pki>/kubelet-client-current.pem` at it as the kubelet's certificate manager does
/// (client-go `fileStore.updateSymlink`): a symlink `kubelet-client-updated.pem` to the
/// absolute path, the current link removed, the new one renamed into its place.
fn install_client_cert(pki: &Path, name: &str, cert: &testkit::ClientCert) {
    let file = pki.join(name);
    fs::write(&file, cert.combined_pem()).expect("write the client certificate");
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).expect("chmod");
    let updated = pki.join("kubelet-client-updated.pem");
    let current = pki.join("kubelet-client-current.pem");
    std::os::unix::fs::symlink(&file, &updated).expect("symlink");
    if fs::symlink_metadata(&current).is_ok() {
        fs::remove_file(&current).expect("remove the current link");
    }
    fs::rename(&updated, &current).expect("rename");
}

/// Whether a client with `cert` completes a request against `server` (a TLS handshake
/// with that certificate, then `/version`).
fn cert_accepted(server: &ApiServer, ca: &Path, cert: &testkit::ClientCert) -> bool {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        server.url(),
        ca.display(),
        b64(&cert.cert_pem),
        b64(&cert.key_pem),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let kc = kube::config::Kubeconfig::from_yaml(&text).expect("kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("config");
        let client = kube::Client::try_from(config).expect("client");
        client.apiserver_version().await.is_ok()
    })
}

/// 3. HTTPS with x509 client certificates: the first certificate expires a few seconds after
///    the start; it is rotated before (the `kubelet-client-current.pem` symlink re-pointed);
///    after the expiry every connection is dropped: the node still follows a new assignment,
///    and never shook hands with the expired certificate.
#[test]
fn a_rotated_client_certificate_is_used_after_the_old_one_expired() {
    let scene = Scene::new();
    let server = ApiServer::start_https();
    let pki = scene.path().join("var/lib/kubelet/pki");
    fs::create_dir_all(&pki).expect("pki dir");
    let ca = pki.join("ca.crt");
    fs::write(&ca, server.ca_pem()).expect("CA");
    let common_name = format!("system:node:{NODE}");
    let first = server.issue_client_cert(&common_name, SHORT_VALIDITY);
    install_client_cert(&pki, "kubelet-client-1.pem", &first);
    let kubeconfig = scene.path().join("etc/kubernetes/kubelet.conf");
    fs::create_dir_all(kubeconfig.parent().expect("parent")).expect("dir");
    let current = pki.join("kubelet-client-current.pem");
    fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            server.url(),
            ca.display(),
            current.display(),
            current.display(),
        ),
    )
    .expect("kubeconfig");
    let node = Node(ApiNode::from_parts(scene, server, kubeconfig));
    let (_boot, uid_b) = node.follow_a_first();
    assert!(
        std::time::SystemTime::now() < first.not_after,
        "the first certificate expired before the rotation: the machine is too slow for {SHORT_VALIDITY:?}"
    );

    let second = node
        .server
        .issue_client_cert(&common_name, Duration::from_secs(3600));
    install_client_cert(&pki, "kubelet-client-2.pem", &second);
    node.log_line("credentials changed");

    // Wait for the expiry (X.509 times are whole seconds: one more for the rounding).
    poll_until(
        SHORT_VALIDITY + DEADLINE,
        Duration::from_millis(50),
        "the first certificate to expire",
        || (std::time::SystemTime::now() > first.not_after + Duration::from_secs(1)).then_some(()),
    );
    // The server is strict: the expired certificate fails its handshake now.
    let refused_before = node.server.failed_handshakes();
    assert!(
        !cert_accepted(&node.server, &ca, &first),
        "an expired certificate was accepted"
    );
    assert!(node.server.failed_handshakes() > refused_before);
    assert!(cert_accepted(&node.server, &ca, &second));
    let refused_before = node.server.failed_handshakes();

    node.server.drop_connections();
    let assigned = Instant::now();
    node.assign("cfg-b");
    let took = time_to_follow(&node, &uid_b, assigned);
    println!(
        "certificate rotated and expired, connections dropped: assignment followed in {took:?}"
    );
    assert_eq!(
        node.server.failed_handshakes(),
        refused_before,
        "kubelet-pivot shook hands with the expired certificate\n{}",
        node.scene.output()
    );
}

/// 1b. The kubelet writes kubelet.conf in place (client-go `clientcmd.WriteToFile`:
///     `os.WriteFile`, the file created empty, then written): a file seen empty for a while
///     is not an error, and the written one is followed.
#[test]
fn a_kubeconfig_written_in_place_is_not_an_error_while_empty() {
    let node = Node::new();
    let _boot = node.bootstrap();
    let pid = node.running_kubelet();
    fs::create_dir_all(node.kubeconfig.parent().expect("parent")).expect("dir");
    let mut file = fs::File::create(&node.kubeconfig).expect("create the kubeconfig");
    // Longer than the follower's debounce: it reads the empty file (on purpose).
    std::thread::sleep(Duration::from_millis(300));
    let row = node.api_row();
    assert!(row.contains("waiting for"), "{row}");
    use std::io::Write;
    let text = kubeconfig_text(&node.server, &node.server.node_token(NODE));
    file.write_all(text.as_bytes()).expect("write");
    drop(file);
    wait_until(DEADLINE, "the Node's KubeletConfigOK condition", || {
        node.condition()
    });
    let logs = node.scene.output();
    assert!(!logs.contains("refusing"), "{logs}");
    node.assert_kubelet_untouched(pid, "the kubeconfig appeared");
}
