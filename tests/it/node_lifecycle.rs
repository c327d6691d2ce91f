//! A node's life outside the happy path of the lock protocol: one lock file
//! per node (a typo between the host and the DaemonSet is refused loudly), no
//! silently created lock directories, a pod without the host's paths, and a
//! reboot (every process gone, the tmpfs lock directory empty, the checkpoint
//! store kept). The real binary, the stand-in kubelet, real flock and files;
//! the test API server only for the Node condition.

use crate::support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use support::api_node::condition_of;
use support::lock_state::status_json;
use support::{wait_until, Proc, Scene};
use testkit::ApiServer;

const DEADLINE: Duration = Duration::from_secs(10);
const NODE: &str = "node-a";
const CONDITION: &str = "KubeletLockFile";

/// `<dir>/<sub>/kubelet.lock`, its directory created when `create`.
fn other_lock(scene: &Scene, sub: &str, create: bool) -> PathBuf {
    let dir = scene.path().join(sub);
    if create {
        fs::create_dir_all(&dir).expect("create the other lock directory");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    dir.join("kubelet.lock")
}

/// A supervisor command with `--lock-file lock` instead of the scene's.
fn supervisor_with_lock(scene: &Scene, args: &[&str], lock: &Path) -> Command {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--stop-timeout", "2s"]);
    let cmd = scene.pivot(&all, &[], &[]);
    // The same command with the scene's --lock-file swapped for `lock`.
    let args: Vec<_> = cmd.get_args().map(ToOwned::to_owned).collect();
    let mut fixed = Command::new(cmd.get_program());
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--lock-file" {
            it.next();
            fixed.arg("--lock-file").arg(lock);
        } else {
            fixed.arg(arg);
        }
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => fixed.env(k, v),
            None => fixed.env_remove(k),
        };
    }
    // Its output goes beside the scene's (run_to_exit pipes it instead).
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(scene.path().join("with-lock.out"))
        .expect("open the output file");
    let err = out.try_clone().expect("dup the output file");
    fixed
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    fixed
}

fn run_to_exit(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start kubelet-pivot");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(out) => out.expect("wait for kubelet-pivot"),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")),
                Signal::SIGKILL,
            );
            panic!("kubelet-pivot did not exit within {DEADLINE:?}");
        }
    }
}

/// Runs a supervisor with `lock` that must refuse (exit 4); returns what it said.
fn refused(scene: &Scene, args: &[&str], lock: &Path) -> String {
    let out = run_to_exit(supervisor_with_lock(scene, args, lock));
    let said = text(&out);
    assert_eq!(out.status.code(), Some(4), "{said}");
    said
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn bootstrap(scene: &Scene, extra: &[&str]) -> Proc {
    let mut args = vec!["bootstrap", "--stop-timeout", "2s"];
    args.extend_from_slice(extra);
    scene.spawn(scene.pivot(&args, &[], &[]))
}

fn one_kubelet(scene: &Scene) -> i32 {
    wait_until(DEADLINE, "exactly one running kubelet", || {
        match scene.running_kubelets().as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    })
}

fn holder(scene: &Scene) -> Value {
    wait_until(DEADLINE, "a live holder in status", || {
        let s = status_json(scene);
        (s["lock"]["holder"]["stale"] == false).then(|| s["lock"]["holder"].clone())
    })
}

#[test]
fn a_daemonset_given_another_lock_file_refuses_and_every_view_says_so() {
    let scene = Scene::new();
    let mut host = bootstrap(&scene, &[]);
    let host_kubelet = one_kubelet(&scene);
    assert_eq!(holder(&scene)["role"], "bootstrap");

    // Generation 1 with a lock file in another directory (same store): it must not wait
    // forever behind a misleading reason; it refuses, exit 4, naming both lock files.
    let typo = other_lock(&scene, "lock-typo", true);
    let said = refused(&scene, &["self-hosted", "--generation", "1"], &typo);
    assert!(said.contains("LOCK MISMATCH"), "{said}");
    assert!(said.contains(&*typo.to_string_lossy()), "{said}");
    assert!(said.contains(&*scene.lock().to_string_lossy()), "{said}");
    assert!(said.contains("bootstrap"), "{said}");
    assert!(
        !typo.exists(),
        "the refused supervisor created its lock file"
    );

    // The host's kubelet ran on, alone.
    assert_eq!(scene.running_kubelets(), vec![host_kubelet]);
    assert!(host.is_running());

    // status (JSON and table) shows the refusal.
    let s = status_json(&scene);
    let m = &s["lock"]["mismatch"];
    assert_eq!(m["refused"], "self-hosted gen 1", "{s}");
    assert_eq!(m["given"]["path"], typo.to_string_lossy().as_ref(), "{s}");
    assert_eq!(
        m["node"]["path"],
        scene.lock().to_string_lossy().as_ref(),
        "{s}"
    );
    assert_eq!(
        s["lock"]["nodeLockFile"]["lock"]["path"],
        scene.lock().to_string_lossy().as_ref(),
        "{s}"
    );
    let table = Command::new(support::pivot_bin())
        .arg("status")
        .env("KUBELET_PIVOT_ENV_FILE", "")
        .arg("--lock-file")
        .arg(scene.lock())
        .arg("--dynamic-config-dir")
        .arg(scene.config_dir())
        .output()
        .expect("status");
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.contains("LOCK MISMATCH"), "{table}");

    // A bind mount of the same directory under another path is the same lock file: a
    // generation given it takes over (v1 wins over the bootstrap) and clears the refusal.
    let alias = scene.path().join("lock-alias");
    std::os::unix::fs::symlink(scene.path().join("lock"), &alias).expect("symlink");
    let mut gen1 = scene.spawn(supervisor_with_lock(
        &scene,
        &["self-hosted", "--generation", "1"],
        &alias.join("kubelet.lock"),
    ));
    wait_until(DEADLINE, "generation 1 to hold the lock", || {
        let h = status_json(&scene)["lock"]["holder"].clone();
        (h["generation"] == 1 && h["stale"] == false).then_some(())
    });
    one_kubelet(&scene);
    let s = status_json(&scene);
    assert!(s["lock"]["mismatch"].is_null(), "refusal not cleared: {s}");
    assert!(gen1.is_running());
    scene.assert_no_overlap();
    gen1.signal(Signal::SIGTERM);
    host.signal(Signal::SIGTERM);
    gen1.wait_exit(DEADLINE);
    host.wait_exit(DEADLINE);
}

#[test]
fn a_refusal_is_a_node_condition_where_an_api_server_is_configured() {
    let scene = Scene::new();
    let server = ApiServer::start();
    server.create_node(NODE, std::iter::empty::<(&str, &str)>());
    let kubeconfig = server.node_kubeconfig_in(scene.path(), NODE);
    let kubeconfig = kubeconfig.to_str().expect("utf-8").to_owned();
    let api = ["--kubeconfig", kubeconfig.as_str(), "--node-name", NODE];
    let mut args = vec!["bootstrap"];
    args.extend_from_slice(&api);
    let mut host = bootstrap(&scene, &args[1..]);
    one_kubelet(&scene);

    let typo = other_lock(&scene, "lock-typo", true);
    let mut gen1_args = vec!["self-hosted", "--generation", "1"];
    gen1_args.extend_from_slice(&api);
    let out = run_to_exit(supervisor_with_lock(&scene, &gen1_args, &typo));
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let cond = wait_until(DEADLINE, "the KubeletLockFile condition", || {
        condition_of(&server.node(NODE), CONDITION)
    });
    assert_eq!(cond["status"], "False", "{cond}");
    assert_eq!(cond["reason"], "LockFileMismatch", "{cond}");
    let message = cond["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&*typo.to_string_lossy())
            && message.contains(&*scene.lock().to_string_lossy()),
        "{cond}"
    );
    // The config condition is the holder's and untouched.
    assert!(host.is_running());

    // The fixed DaemonSet: generation 1 with the node's lock file clears it.
    let mut gen1 = scene.spawn(scene.pivot(
        &[&gen1_args[..], &["--stop-timeout", "2s"]].concat(),
        &[],
        &[],
    ));
    let cond = wait_until(DEADLINE, "the condition True again", || {
        condition_of(&server.node(NODE), CONDITION).filter(|c| c["status"] == "True")
    });
    assert_eq!(cond["reason"], "LockFileAgreed", "{cond}");
    gen1.signal(Signal::SIGTERM);
    host.signal(Signal::SIGTERM);
    gen1.wait_exit(DEADLINE);
    host.wait_exit(DEADLINE);
}

#[test]
fn a_missing_lock_directory_is_a_typo_not_something_to_create() {
    let scene = Scene::new();
    let typo = other_lock(&scene, "lokc", false);
    let said = refused(&scene, &["bootstrap"], &typo);
    assert!(
        said.contains("does not exist") && said.contains("typo") && said.contains("lokc"),
        "{said}"
    );
    assert!(!typo.parent().expect("parent").exists(), "created {typo:?}");
    assert!(scene.running_kubelets().is_empty());
}

#[test]
fn a_pod_without_the_host_paths_refuses_instead_of_running_a_private_kubelet() {
    // The lock directory not mounted.
    let scene = Scene::new();
    let missing = other_lock(&scene, "host-lock-not-mounted", false);
    let said = refused(&scene, &["self-hosted", "--generation", "1"], &missing);
    assert!(said.contains("mounted"), "{said}");
    assert!(!missing.parent().expect("parent").exists());

    // The checkpoint store not mounted (the lock directory is).
    let scene = Scene::new();
    fs::remove_dir(scene.config_dir()).expect("remove the store");
    let out = run_to_exit(scene.pivot(&["self-hosted", "--generation", "1"], &[], &[]));
    let said = text(&out);
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(
        said.contains("checkpoint store") && said.contains("mounted"),
        "{said}"
    );
    assert!(!scene.config_dir().exists(), "the store was created");
    assert!(scene.running_kubelets().is_empty());

    // Where an API server is configured (the host's kubeconfig is mounted), the Node says so.
    let server = ApiServer::start();
    server.create_node(NODE, std::iter::empty::<(&str, &str)>());
    let kubeconfig = server.node_kubeconfig_in(scene.path(), NODE);
    let kubeconfig = kubeconfig.to_str().expect("utf-8");
    let out = run_to_exit(scene.pivot(
        &[
            "self-hosted",
            "--generation",
            "1",
            "--kubeconfig",
            kubeconfig,
            "--node-name",
            NODE,
        ],
        &[],
        &[],
    ));
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let cond = condition_of(&server.node(NODE), CONDITION).expect("the KubeletLockFile condition");
    assert_eq!(cond["status"], "False", "{cond}");
    let message = cond["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("checkpoint store") && message.contains("mounted"),
        "{cond}"
    );
}

/// Rewrites `bootId` in a JSON record of the state directory: what a reboot leaves.
fn from_another_boot(path: &Path) {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut v: Value = serde_json::from_str(&text).expect("JSON record");
    v["bootId"] = Value::from("00000000-0000-0000-0000-previousboot");
    fs::write(path, serde_json::to_vec(&v).expect("JSON")).expect("rewrite the record");
}

#[test]
fn after_a_reboot_the_bootstrap_runs_the_assigned_config_and_a_generation_takes_over() {
    let scene = Scene::new();
    let init = scene.kubelet_config_file("init.yaml", "maxPods: 17\n");
    let init = init.to_str().expect("utf-8").to_owned();
    let mut host = bootstrap(&scene, &["--init-config", &init]);
    let first = one_kubelet(&scene);
    assert!(scene.config_of(first).contains("17"), "init config first");

    // An assignment, applied by a restart of the kubelet.
    let assigned = scene.kubelet_config_file("assigned.yaml", "maxPods: 42\n");
    let out = Command::new(support::pivot_bin())
        .args(["checkpoint", "assign"])
        .arg(&assigned)
        .arg("--dynamic-config-dir")
        .arg(scene.config_dir())
        .output()
        .expect("checkpoint assign");
    assert!(out.status.success(), "{}", text(&out));
    wait_until(DEADLINE, "the assigned config to run", || {
        let pids = scene.running_kubelets();
        match pids.as_slice() {
            [one]
                if scene.config_of(*one).contains("\"maxPods\":42")
                    || scene.config_of(*one).contains("maxPods: 42") =>
            {
                Some(())
            }
            _ => None,
        }
    });

    // The reboot: every process gone at once (no clean stop), the tmpfs lock directory
    // empty (recreated: a new inode), the store kept, the records of the old boot.
    host.signal(Signal::SIGKILL);
    host.wait_exit(DEADLINE);
    scene.kill_stand_ins();
    wait_until(DEADLINE, "no kubelet", || {
        scene.running_kubelets().is_empty().then_some(())
    });
    let lock_dir = scene.path().join("lock");
    fs::remove_dir_all(&lock_dir).expect("empty the lock directory");
    fs::create_dir(&lock_dir).expect("recreate the lock directory");
    for record in ["holder.json", "lock-file.json"] {
        from_another_boot(&scene.state_dir().join(record));
    }

    let mut host = bootstrap(&scene, &["--init-config", &init]);
    let after = one_kubelet(&scene);
    let config = scene.config_of(after);
    assert!(
        config.contains("42") && !config.contains("\"maxPods\":17"),
        "the bootstrap ran the init config after the reboot, not the assigned one: {config}"
    );
    let log = scene.output();
    assert!(
        !log.contains("LOCK MISMATCH"),
        "a recreated tmpfs lock directory is not a mismatch after a reboot:\n{log}"
    );

    // The DaemonSet's pod starts: generation 1 takes over with the same config.
    let mut gen1 = scene.spawn(scene.pivot(
        &["self-hosted", "--generation", "1", "--stop-timeout", "2s"],
        &[],
        &[],
    ));
    wait_until(DEADLINE, "generation 1 to hold the lock", || {
        let h = status_json(&scene)["lock"]["holder"].clone();
        (h["generation"] == 1 && h["stale"] == false).then_some(())
    });
    let pod_kubelet = one_kubelet(&scene);
    assert_ne!(pod_kubelet, after);
    assert!(scene.config_of(pod_kubelet).contains("42"));
    scene.assert_no_overlap();
    gen1.signal(Signal::SIGTERM);
    host.signal(Signal::SIGTERM);
    gen1.wait_exit(DEADLINE);
    host.wait_exit(DEADLINE);
}
