//! Issue 34 item 5, with the real binary: a bad value from the environment is reported
//! under the variable's name (exit 2), also when it is refused after parsing (a missing
//! `--init-config` file); the `rollout` commands print API errors as kubectl
//! does (the server's reason and message, `rollout "nope" not found`, the address of a
//! server that cannot be reached); run as the `kubectl-pivot` plugin, errors start
//! `kubectl pivot: error:`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use testkit::ApiServer;

use crate::support::pivot_bin;
use crate::support::rollout::CrdServer;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `kubelet-pivot ARGS` with `env` set and nothing else of the caller's KUBELET_PIVOT_*.
fn run_with_env(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin);
    cmd.args(args).env_remove("KUBECONFIG");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("KUBELET_PIVOT_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env.iter().copied())
        .output()
        .expect("run kubelet-pivot")
}

/// No Rust Debug formatting in a message a person reads.
fn assert_no_debug(text: &str) {
    for pattern in [
        "Some(",
        "None",
        "Status {",
        "{ ",
        "ApiError",
        "ServiceError",
    ] {
        assert!(!text.contains(pattern), "{pattern:?} in {text}");
    }
}

#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    let bin = pivot_bin();
    let cases: &[(&[&str], (&str, &str), &str)] = &[
        (
            &["bootstrap", "--", "/bin/true"],
            ("KUBELET_PIVOT_STOP_TIMEOUT", "30"),
            "error: invalid value '30' for KUBELET_PIVOT_STOP_TIMEOUT (the environment; \
             --stop-timeout): a duration needs a unit, like 30s",
        ),
        (
            &["self-hosted", "--generation", "1", "--", "/bin/true"],
            ("KUBELET_PIVOT_WATCH_MODE", "fanotify"),
            "error: invalid value 'fanotify' for KUBELET_PIVOT_WATCH_MODE (the environment; \
             --watch-mode): expected one of inotify, poll",
        ),
        (
            &["self-hosted", "--", "/bin/true"],
            ("KUBELET_PIVOT_GENERATION", "0"),
            "error: invalid value '0' for KUBELET_PIVOT_GENERATION (the environment; \
             --generation)",
        ),
        (
            &["status"],
            ("KUBELET_PIVOT_OUTPUT", "yaml"),
            "error: invalid value 'yaml' for KUBELET_PIVOT_OUTPUT (the environment; --output)",
        ),
        (
            &["rollout-controller"],
            ("KUBELET_PIVOT_METRICS_ADDRESS", "localhost"),
            "error: invalid value 'localhost' for KUBELET_PIVOT_METRICS_ADDRESS (the \
             environment; --metrics-address)",
        ),
    ];
    for (args, env, expected) in cases {
        let out = run_with_env(&bin, args, &[*env]);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {text}");
        assert!(text.starts_with(expected), "{args:?} {env:?}: {text}");
        assert!(!text.contains("'--"), "{args:?} {env:?}: {text}");
    }
}

#[test]
fn a_value_refused_after_parsing_names_its_variable_too() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.yaml");
    let missing = missing.to_str().expect("a UTF-8 path");
    let out = run_with_env(
        &pivot_bin(),
        &["bootstrap", "--", "/bin/true"],
        &[("KUBELET_PIVOT_INIT_CONFIG", missing)],
    );
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.starts_with(&format!(
            "kubelet-pivot: error: cannot read --init-config {missing}"
        )),
        "{text}"
    );
    assert!(
        text.trim_end()
            .ends_with("(--init-config is KUBELET_PIVOT_INIT_CONFIG from the environment)"),
        "{text}"
    );
    // Given as a flag, the message is the flag's alone.
    let out = run_with_env(
        &pivot_bin(),
        &["bootstrap", "--init-config", missing, "--", "/bin/true"],
        &[],
    );
    assert!(!stderr(&out).contains("environment"), "{out:?}");
}

#[test]
fn a_bad_flag_is_still_the_flag_even_with_the_variable_set() {
    let out = run_with_env(
        &pivot_bin(),
        &["bootstrap", "--stop-timeout", "30", "--", "/bin/true"],
        &[("KUBELET_PIVOT_STOP_TIMEOUT", "30")],
    );
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.starts_with("error: invalid value '30' for '--stop-timeout <DURATION>'"),
        "{text}"
    );
    // A good variable and a bad flag: the flag.
    let out = run_with_env(
        &pivot_bin(),
        &["status", "-o", "yaml"],
        &[("KUBELET_PIVOT_OUTPUT", "json")],
    );
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("'--output <OUTPUT>'"), "{text}");
}

/// The test API server with the rollout CRD, and a kubeconfig for it in a temp dir.
struct Cluster {
    server: ApiServer,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn new() -> Cluster {
        let CrdServer {
            server,
            dir,
            kubeconfig,
        } = CrdServer::start();
        Cluster {
            kubeconfig,
            server,
            _dir: dir,
        }
    }
}

fn rollout(bin: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
    let mut full = vec!["rollout"];
    full.extend_from_slice(args);
    full.push("--kubeconfig");
    full.push(kubeconfig.to_str().expect("a UTF-8 path"));
    run_with_env(bin, &full, &[])
}

#[test]
fn a_missing_rollout_reads_as_kubectl_would_say_it() {
    let cluster = Cluster::new();
    for args in [
        &["pause", "nope"][..],
        &["undo", "nope"],
        &["resume", "nope"],
        &["status", "nope"],
        &["history", "nope"],
    ] {
        let out = rollout(&pivot_bin(), &cluster.kubeconfig, args);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {text}");
        assert!(
            text.starts_with("kubelet-pivot: error: rollout \"nope\" not found"),
            "{args:?}: {text}"
        );
        assert_no_debug(&text);
    }
}

#[test]
fn the_server_s_reason_and_message_are_shown_for_429_and_500() {
    let cluster = Cluster::new();
    for (code, expected) in [
        (
            500,
            "kubelet-pivot: error: cannot update rollout \"r1\": Error from server \
             (InternalError): ",
        ),
        (
            429,
            "kubelet-pivot: error: cannot update rollout \"r1\": Error from server \
             (TooManyRequests): ",
        ),
        (
            403,
            "kubelet-pivot: error: cannot update rollout \"r1\": Error from server \
             (Forbidden): ",
        ),
    ] {
        cluster.server.fail_next(1, code);
        let out = rollout(&pivot_bin(), &cluster.kubeconfig, &["pause", "r1"]);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{code}: {text}");
        assert!(text.starts_with(expected), "{code}: {text}");
        assert_eq!(text.lines().count(), 1, "{code}: {text}");
        assert_no_debug(&text);
    }
    cluster.server.fail_next(1, 500);
    let out = rollout(&pivot_bin(), &cluster.kubeconfig, &["status", "r1"]);
    let text = stderr(&out);
    assert!(
        text.starts_with(
            "kubelet-pivot: error: cannot read rollout \"r1\": Error from server \
             (InternalError): "
        ),
        "{text}"
    );
}

/// A kubeconfig for `server` (a URL) with a token.
fn kubeconfig_for(dir: &Path, server: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
         users:\n- name: u\n  user:\n    token: t\n\
         contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
    );
    std::fs::write(&path, text).expect("write the kubeconfig");
    path
}

#[test]
fn a_server_that_cannot_be_reached_is_named_with_its_address() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let kubeconfig = kubeconfig_for(dir.path(), &format!("https://127.0.0.1:{port}"));
    let out = rollout(&pivot_bin(), &kubeconfig, &["pause", "r1"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        stderr(&out),
        format!(
            "kubelet-pivot: error: The connection to the server 127.0.0.1:{port} was refused - \
             did you specify the right host or port?\n"
        )
    );
    // TLS that fails (the server wants a client certificate; the kubeconfig has none and
    // does not trust its CA): the address and the handshake's reason.
    let https = ApiServer::start_https();
    let kubeconfig = kubeconfig_for(dir.path(), &https.url());
    let out = rollout(&pivot_bin(), &kubeconfig, &["status", "r1"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.starts_with(&format!(
            "kubelet-pivot: error: Unable to connect to the server 127.0.0.1:{}: ",
            https.port()
        )),
        "{text}"
    );
    assert!(text.contains("certificate"), "{text}");
}

#[test]
fn run_as_the_plugin_errors_say_kubectl_pivot() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = dir.path().join("kubectl-pivot");
    std::os::unix::fs::symlink(pivot_bin(), &plugin).expect("link kubectl-pivot");
    let cluster = Cluster::new();
    let out = rollout(&plugin, &cluster.kubeconfig, &["pause", "nope"]);
    let text = stderr(&out);
    assert!(
        text.starts_with("kubectl pivot: error: rollout \"nope\" not found"),
        "{text}"
    );
    // Clap's own refusals name the plugin in their usage line.
    let out = run_with_env(&plugin, &["rollout", "pause"], &[]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("Usage: kubectl pivot rollout pause"),
        "{text}"
    );
}

/// A kubeconfig that cannot be read is named once, with the system's reason (not kube's
/// Debug-quoted copy of the path).
#[test]
fn a_kubeconfig_that_cannot_be_read_is_named_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nope.kubeconfig");
    let out = rollout(&pivot_bin(), &missing, &["pause", "r1"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_eq!(
        text.trim_end(),
        format!(
            "kubelet-pivot: error: cannot read --kubeconfig {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    assert_no_debug(&text);
}
