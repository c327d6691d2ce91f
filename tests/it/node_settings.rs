//! Issue 34 item 4: the operator commands read the node's settings. `status` and
//! `checkpoint` take their defaults from the settings file (the unit's EnvironmentFile,
//! here named by KUBELET_PIVOT_ENV_FILE: the machine's /etc/default/kubelet-pivot is never
//! read); a flag beats the environment, which beats the file. A lock file or store that
//! does not exist is refused (exit 2, the path named, nothing created); an assignment to a
//! store no supervisor uses says so; a non-root `status` says in one line that it needs
//! root (exit 5); a hostile settings file is one clear error and never a hang.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::command::{run, text};
use crate::support::{pivot_bin, wait_until, Proc, Scene};

const ENV_FILE: &str = "KUBELET_PIVOT_ENV_FILE";
const STORE_VAR: &str = "KUBELET_PIVOT_DYNAMIC_CONFIG_DIR";
const LOCK_VAR: &str = "KUBELET_PIVOT_LOCK_FILE";
/// Exit code of a bad path or settings file.
const EXIT_USAGE: i32 = 2;
/// Exit code of `status` without a live holder.
const EXIT_NO_HOLDER: i32 = 3;
/// Exit code of an operator command that needs root.
const EXIT_NEEDS_ROOT: i32 = 5;
/// How long a command that must not hang gets.
const DEADLINE: Duration = Duration::from_secs(10);

/// A node's paths in a temp dir: a lock file and stores made as a supervisor makes them.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("kubelet.lock"), b"").expect("lock file");
        Node { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn lock(&self) -> PathBuf {
        self.path("kubelet.lock")
    }

    /// A store directory (0700, as a supervisor creates it).
    fn store(&self, name: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .expect("store dir");
        path
    }

    /// A settings file with `text` (0644, root's: as install.sh leaves it).
    fn env_file(&self, text: &str) -> PathBuf {
        let path = self.path("kubelet-pivot.env");
        std::fs::write(&path, text).expect("env file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        path
    }

    /// A KubeletConfiguration payload named `name`.
    fn payload(&self, name: &str, extra: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(
            &path,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{extra}"
            ),
        )
        .expect("payload");
        path
    }
}

/// kubelet-pivot with none of the node's variables set and `env_file` as the settings file.
fn pivot(env_file: &Path) -> Command {
    let mut cmd = Command::new(pivot_bin());
    for var in [
        STORE_VAR,
        LOCK_VAR,
        "KUBELET_PIVOT_STATE_DIR",
        "KUBELET_PIVOT_OUTPUT",
    ] {
        cmd.env_remove(var);
    }
    cmd.env(ENV_FILE, env_file).stdin(Stdio::null());
    cmd
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Assigns `payload` to `store` (no settings file); returns the checkpoint's UID.
fn assign(store: &Path, payload: &Path) -> String {
    let out = run({
        let mut cmd = pivot(Path::new(""));
        cmd.args(["checkpoint", "assign"])
            .arg(payload)
            .arg("--dynamic-config-dir")
            .arg(store);
        cmd
    });
    assert!(out.status.success(), "assign: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .split("UID: ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no UID in {stdout:?}"))
        .to_string()
}

fn status_json(cmd: Command) -> (i32, serde_json::Value) {
    let out = run(cmd);
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("status printed no JSON ({err}): {}", text(&out)));
    (out.status.code().expect("exit code"), json)
}

#[test]
fn status_and_checkpoint_list_read_the_settings_file() {
    let node = Node::new();
    let store = node.store("moved-store");
    let uid = assign(&store, &node.payload("a.yaml", ""));
    let env_file = node.env_file(&format!(
        "# the node's settings\n\nKUBELET_ARGS=--v=2\n{STORE_VAR}=\"{}\"\n{LOCK_VAR}={}\n",
        store.display(),
        node.lock().display()
    ));
    let mut cmd = pivot(&env_file);
    cmd.args(["status", "-o", "json"]);
    let (code, json) = status_json(cmd);
    assert_eq!(code, EXIT_NO_HOLDER, "{json}");
    assert_eq!(json["lock"]["path"], node.lock().display().to_string());
    assert_eq!(json["config"]["assigned"]["uid"], uid.as_str(), "{json}");

    let mut cmd = pivot(&env_file);
    cmd.args(["checkpoint", "list"]);
    let out = run(cmd);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&uid),
        "{}",
        text(&out)
    );

    // --help shows the defaults in effect, and says which file they come from.
    let mut cmd = pivot(&env_file);
    cmd.args(["status", "--help"]);
    let help = String::from_utf8_lossy(&run(cmd).stdout).into_owned();
    assert!(
        help.contains(&format!("[default: {}]", store.display())),
        "{help}"
    );
    assert!(help.contains("/etc/default/kubelet-pivot"), "{help}");
}

#[test]
fn a_flag_beats_the_environment_which_beats_the_file() {
    let node = Node::new();
    let stores: Vec<(PathBuf, String)> = ["from-file", "from-env", "from-flag"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let store = node.store(name);
            let payload = node.payload(&format!("{name}.yaml"), &format!("maxPods: {}\n", 100 + i));
            let uid = assign(&store, &payload);
            (store, uid)
        })
        .collect();
    let env_file = node.env_file(&format!("{STORE_VAR}={}\n", stores[0].0.display()));
    let list = |env: bool, flag: bool| {
        let mut cmd = pivot(&env_file);
        cmd.args(["checkpoint", "list"]);
        if env {
            cmd.env(STORE_VAR, &stores[1].0);
        }
        if flag {
            cmd.arg("--dynamic-config-dir").arg(&stores[2].0);
        }
        let out = run(cmd);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for (env, flag, want) in [
        (false, false, 0),
        (true, false, 1),
        (true, true, 2),
        (false, true, 2),
    ] {
        let listed = list(env, flag);
        for (i, (_, uid)) in stores.iter().enumerate() {
            assert_eq!(
                listed.contains(uid.as_str()),
                i == want,
                "env {env}, flag {flag}: {listed}"
            );
        }
    }
}

/// One line on stderr naming `path`, exit `code`, nothing on stdout.
fn assert_refused(out: &Output, code: i32, path: &Path) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{}", text(out));
    assert_eq!(err.lines().count(), 1, "{}", text(out));
    assert!(err.contains(&path.display().to_string()), "{}", text(out));
    assert!(out.stdout.is_empty(), "{}", text(out));
}

#[test]
fn a_lock_file_or_store_that_does_not_exist_is_refused_and_nothing_is_created() {
    let node = Node::new();
    let store = node.store("store");
    let none = Path::new("");
    let typo = node.path("typo");

    let mut cmd = pivot(none);
    cmd.args(["status", "--dynamic-config-dir"])
        .arg(&store)
        .arg("--lock-file")
        .arg(node.path("wrong.lock"));
    assert_refused(&run(cmd), EXIT_USAGE, &node.path("wrong.lock"));

    let mut cmd = pivot(none);
    cmd.args(["status", "--dynamic-config-dir"])
        .arg(&typo)
        .arg("--lock-file")
        .arg(node.lock());
    assert_refused(&run(cmd), EXIT_USAGE, &typo);

    let payload = node.payload("a.yaml", "");
    for args in [
        vec!["checkpoint", "list"],
        vec!["checkpoint", "show", "x"],
        vec!["checkpoint", "reset"],
        vec!["checkpoint", "forget-bad", "x"],
        vec!["checkpoint", "assign", payload.to_str().expect("utf-8")],
    ] {
        let mut cmd = pivot(none);
        cmd.args(&args).arg("--dynamic-config-dir").arg(&typo);
        let out = run(cmd);
        assert_refused(&out, EXIT_USAGE, &typo);
        assert!(
            stderr(&out).contains("--dynamic-config-dir"),
            "{}",
            text(&out)
        );
    }
    assert!(
        !typo.exists(),
        "a refused command created {}",
        typo.display()
    );
    assert!(!node.path("wrong.lock").exists());
}

#[test]
fn an_assignment_to_a_store_no_supervisor_uses_warns() {
    let scene = Scene::new();
    let other = scene.path().join("other-store");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&other)
        .expect("store dir");
    let env_file = scene.path().join("env");
    std::fs::write(
        &env_file,
        format!("{STORE_VAR}={}\n", scene.config_dir().display()),
    )
    .expect("env file");
    let payload = scene.kubelet_config_file("a.yaml", "");
    let assign_to = |store: Option<&Path>| {
        let mut cmd = pivot(&env_file);
        cmd.args(["checkpoint", "assign"]).arg(&payload);
        if let Some(store) = store {
            cmd.arg("--dynamic-config-dir").arg(store);
        }
        let out = run(cmd);
        assert!(out.status.success(), "{}", text(&out));
        stderr(&out)
    };
    // No supervisor has started a kubelet with either store yet.
    let err = assign_to(Some(&other));
    assert!(
        err.contains("warning: no supervisor has started a kubelet with the checkpoint store"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "is not the node's checkpoint store {} ({STORE_VAR} in {})",
            scene.config_dir().display(),
            env_file.display()
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "{err}");

    // Once the node's supervisor runs a kubelet with its store: no warning for it, one for
    // the other store.
    let mut sup = scene.spawn(scene.pivot(&["bootstrap"], &[], &[]));
    wait_until(DEADLINE, "the bootstrap's kubelet", || {
        (!scene.running_kubelets().is_empty()).then_some(())
    });
    let err = assign_to(None);
    assert_eq!(err, "", "assign to the node's store in use");
    let err = assign_to(Some(&other));
    assert!(err.contains("is not the node's checkpoint store"), "{err}");
    stop(&mut sup);
}

fn stop(sup: &mut Proc) {
    sup.signal(nix::sys::signal::Signal::SIGTERM);
    sup.wait_exit(DEADLINE);
}

#[test]
fn a_non_root_status_says_in_one_line_that_it_needs_root() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to drop to nobody");
        return;
    }
    let Some(setpriv) = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
    else {
        panic!("setpriv (util-linux) is needed to run status as nobody");
    };
    // As a supervisor leaves the node: root's 0700 store and state directory, root's lock.
    let node = Node::new();
    std::fs::set_permissions(node.dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod temp dir");
    let store = node.store("store");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(store.join("lock"))
        .expect("state dir");
    let as_nobody = |env_file: &Path| {
        let mut cmd = Command::new(setpriv);
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(pivot_bin())
            .args(["status", "--lock-file"])
            .arg(node.lock())
            .arg("--dynamic-config-dir")
            .arg(&store)
            .env(ENV_FILE, env_file)
            .stdin(Stdio::null());
        run(cmd)
    };
    let out = as_nobody(Path::new(""));
    assert_refused(&out, EXIT_NEEDS_ROOT, &store.join("lock"));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "kubelet-pivot: error: status needs root: cannot read {} (permission denied); run it with sudo",
            store.join("lock").display()
        )
    );
    // A settings file only root may read: the same refusal, naming it.
    let private = node.env_file("KUBELET_PIVOT_OUTPUT=json\n");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    assert_refused(&as_nobody(&private), EXIT_NEEDS_ROOT, &private);
}

/// Runs `status` with the settings file `env_file`, which must fail within the deadline
/// with one line naming `env_file` and `what`.
fn refused_settings(env_file: &Path, what: &str) {
    let mut cmd = pivot(env_file);
    cmd.arg("status")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn status");
    let code = wait_until(DEADLINE, "status to give up on the settings file", || {
        child.try_wait().expect("wait").map(|s| s.code())
    });
    let out = child.wait_with_output().expect("output");
    let err = stderr(&out);
    assert_eq!(code, Some(EXIT_USAGE), "{}: {err}", env_file.display());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&env_file.display().to_string()), "{err}");
    assert!(err.contains(what), "{err}");
}

#[test]
fn a_hostile_settings_file_is_one_clear_error_and_no_hang() {
    let node = Node::new();
    let fifo = node.path("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    refused_settings(&fifo, "fifo");

    let huge = node.path("huge");
    std::fs::write(&huge, "#".repeat(1 << 20)).expect("huge");
    refused_settings(&huge, "too large");

    let target = node.env_file("KUBELET_PIVOT_LOCK_FILE=/x\n");
    let link = node.path("link");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    refused_settings(&link, "symlink");

    let bad = node
        .env_file("# ok\nKUBELET_PIVOT_LOCK_FILE=/x\nexport KUBELET_PIVOT_DYNAMIC_CONFIG_DIR=/y\n");
    refused_settings(&bad, &format!("{}:3: ", bad.display()));

    let bad = node.env_file("KUBELET_PIVOT_LOCK_FILE=\"/x\n");
    refused_settings(&bad, ":1: the double quote is not closed");

    let open = node.env_file("KUBELET_PIVOT_LOCK_FILE=/x\n");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    refused_settings(&open, "writable by group or others");

    refused_settings(&node.path("missing"), "does not exist");

    // A value its flag refuses is the file's error, unless the flag overrides it.
    let bad = node.env_file(&format!(
        "KUBELET_PIVOT_OUTPUT=yaml\n{LOCK_VAR}={}\n",
        node.lock().display()
    ));
    refused_settings(&bad, "KUBELET_PIVOT_OUTPUT=yaml in ");
    let store = node.store("store");
    let mut cmd = pivot(&bad);
    cmd.args(["status", "-o", "json", "--dynamic-config-dir"])
        .arg(&store);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(EXIT_NO_HOLDER), "{}", text(&out));

    // The supervisors do not read it: systemd gave them its values already.
    let out = run({
        let mut cmd = pivot(&fifo);
        cmd.args(["bootstrap", "--", "/nonexistent/kubelet"]);
        cmd
    });
    assert_eq!(out.status.code(), Some(EXIT_USAGE), "{}", text(&out));
    assert!(!stderr(&out).contains("fifo"), "{}", text(&out));
}
