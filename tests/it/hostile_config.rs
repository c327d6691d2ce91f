//! Hostile config input against the real binary: devices, FIFOs and huge
//! files where a config or a store file should be, and nesting deep enough
//! to make the YAML scanner spin. Each must give one clear error at once,
//! assign nothing, never hang, and leave the running kubelet alone.
//!
//! Every command runs under a deadline (a regression fails, it does not
//! hang the suite): [`Proc::wait_exit`] panics after it, and dropping the
//! [`Proc`] kills the process.

use crate::support;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use support::{kubelet_config, pivot_bin, wait_until, Proc, Scene};

/// The prefix of kubelet-pivot's one-line fatal errors.
const ERROR_PREFIX: &str = "kubelet-pivot: error:";
/// How long a refusal may take: generous for a loaded CI machine, far below
/// a hang.
const PROMPT: Duration = Duration::from_secs(5);

/// What a command printed and how it ended.
struct Outcome {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn error_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with(ERROR_PREFIX))
            .collect()
    }

    /// Exactly one `kubelet-pivot: error:` line, containing every needle.
    #[track_caller]
    fn assert_one_error(&self, needles: &[&str]) {
        let errors = self.error_lines();
        assert_eq!(errors.len(), 1, "stderr: {}", self.stderr);
        for needle in needles {
            assert!(errors[0].contains(needle), "{needle:?} not in {errors:?}");
        }
    }
}

/// Runs `cmd` with stdin null and output captured in files of the scene,
/// killing it (and failing) if it has not exited within `deadline`.
fn run_within(scene: &Scene, mut cmd: Command, deadline: Duration) -> Outcome {
    let n = fs::read_dir(scene.path()).map(|d| d.count()).unwrap_or(0);
    let out_path = scene.path().join(format!("cmd-{n}.out"));
    let err_path = scene.path().join(format!("cmd-{n}.err"));
    let out = File::create(&out_path).expect("create stdout file");
    let err = File::create(&err_path).expect("create stderr file");
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let mut proc = Proc::spawn(&mut cmd);
    let status = proc.wait_exit(deadline);
    Outcome {
        status,
        stdout: fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

/// `kubelet-pivot <args> --dynamic-config-dir <scene's store>`.
fn checkpoint(scene: &Scene, args: &[&str]) -> Command {
    let mut cmd = Command::new(pivot_bin());
    cmd.arg("checkpoint")
        .args(args)
        .arg("--dynamic-config-dir")
        .arg(scene.config_dir());
    cmd
}

fn fifo(path: &Path) -> PathBuf {
    nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o600)).expect("mkfifo");
    path.to_path_buf()
}

/// `checkpoint list` succeeds promptly and shows no assignment.
#[track_caller]
fn assert_nothing_assigned(scene: &Scene) {
    let list = run_within(scene, checkpoint(scene, &["list"]), PROMPT);
    assert!(list.status.success(), "list failed: {}", list.stderr);
    assert!(!list.stdout.contains("assigned"), "{}", list.stdout);
}

#[test]
fn checkpoint_assign_of_a_device_or_fifo_fails_at_once() {
    let scene = Scene::new();
    let pipe = fifo(&scene.path().join("payload.fifo"));
    for (path, kind) in [
        (PathBuf::from("/dev/zero"), "character device"),
        (pipe, "fifo"),
    ] {
        let started = Instant::now();
        let cmd = checkpoint(&scene, &["assign", path.to_str().expect("utf-8")]);
        let out = run_within(&scene, cmd, PROMPT);
        eprintln!(
            "checkpoint assign {}: refused in {:?}",
            path.display(),
            started.elapsed()
        );
        assert!(!out.status.success(), "{}", out.stdout);
        out.assert_one_error(&[path.to_str().expect("utf-8"), kind, "nothing was assigned"]);
        assert_nothing_assigned(&scene);
    }
}

#[test]
fn checkpoint_assign_of_a_directory_refuses_special_entries() {
    let scene = Scene::new();
    let dir = scene.path().join("payload");
    fs::create_dir(&dir).expect("mkdir");
    fs::write(dir.join("kubelet"), kubelet_config("maxPods: 12\n")).expect("write");
    let pipe = fifo(&dir.join("extra"));
    let out = run_within(
        &scene,
        checkpoint(&scene, &["assign", dir.to_str().expect("utf-8")]),
        PROMPT,
    );
    assert!(!out.status.success(), "{}", out.stdout);
    out.assert_one_error(&[pipe.to_str().expect("utf-8"), "fifo"]);
    assert_nothing_assigned(&scene);
}

#[test]
fn init_config_of_a_device_or_fifo_exits_2_at_once() {
    let scene = Scene::new();
    let pipe = fifo(&scene.path().join("init.fifo"));
    for (path, kind) in [
        (PathBuf::from("/dev/zero"), "character device"),
        (pipe, "fifo"),
    ] {
        let path = path.to_str().expect("utf-8");
        let cmd = scene.pivot(&["bootstrap", "--init-config", path], &[], &[]);
        let started = Instant::now();
        let out = run_within(&scene, cmd, PROMPT);
        eprintln!("--init-config {path}: refused in {:?}", started.elapsed());
        assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
        out.assert_one_error(&["--init-config", path, kind]);
        assert!(scene.running_kubelets().is_empty());
    }
}

/// A config nested 200,000 levels deep: about 18 s of YAML scanning before
/// the pre-scan existed.
fn deep_config(scene: &Scene) -> PathBuf {
    let path = scene.path().join("deep.yaml");
    let body = format!("{}maxPods: {}\n", kubelet_config(""), "[".repeat(200_000));
    fs::write(&path, body).expect("write deep config");
    path
}

fn bootstrap(scene: &Scene) -> Proc {
    scene.spawn(scene.pivot(&["bootstrap", "--stop-timeout", "2s"], &[], &[]))
}

fn running_kubelet(scene: &Scene) -> i32 {
    wait_until(PROMPT, "a running kubelet", || {
        scene.running_kubelets().first().copied()
    })
}

#[test]
fn deeply_nested_assignment_is_refused_and_the_kubelet_keeps_running() {
    let scene = Scene::new();
    let _pivot = bootstrap(&scene);
    let first = running_kubelet(&scene);
    let file = deep_config(&scene);
    let path = file.to_str().expect("utf-8");
    // Without --force the operator command refuses at once, with the limit.
    let refused = run_within(&scene, checkpoint(&scene, &["assign", path]), PROMPT);
    assert!(!refused.status.success());
    refused.assert_one_error(&["deeper than 32 levels"]);
    let forced = run_within(
        &scene,
        checkpoint(&scene, &["assign", path, "--force"]),
        PROMPT,
    );
    assert!(forced.status.success(), "{}", forced.stderr);
    // The supervisor records it bad (load failure) and never restarts the
    // kubelet with it.
    wait_until(PROMPT, "the deep config to be marked bad", || {
        let list = run_within(&scene, checkpoint(&scene, &["list"]), PROMPT);
        list.stdout.contains("bad since").then_some(())
    });
    assert_eq!(scene.running_kubelets(), vec![first]);
    assert_eq!(scene.starts().len(), 1, "the kubelet was restarted");
}

#[test]
fn sigterm_right_after_a_deep_assignment_is_acted_on_promptly() {
    let scene = Scene::new();
    let mut pivot = bootstrap(&scene);
    running_kubelet(&scene);
    let file = deep_config(&scene);
    let path = file.to_str().expect("utf-8");
    let forced = run_within(
        &scene,
        checkpoint(&scene, &["assign", path, "--force"]),
        PROMPT,
    );
    assert!(forced.status.success(), "{}", forced.stderr);
    let sent = Instant::now();
    assert!(pivot.signal(Signal::SIGTERM));
    let status = pivot.wait_exit(PROMPT);
    let latency = sent.elapsed();
    eprintln!("SIGTERM right after a 200,000-level assignment: supervisor exited in {latency:?} (stops the kubelet first)");
    assert!(status.success(), "{status:?}\n{}", scene.output());
    assert!(latency < Duration::from_secs(2), "{latency:?}");
    assert!(scene.running_kubelets().is_empty());
}

#[test]
fn planted_store_files_do_not_hang_anyone() {
    let scene = Scene::new();
    // Create the store.
    let reset = run_within(&scene, checkpoint(&scene, &["reset"]), PROMPT);
    assert!(reset.status.success(), "{}", reset.stderr);
    let store = scene.config_dir();
    let assigned = fifo(&store.join("meta/assigned"));
    let list = run_within(&scene, checkpoint(&scene, &["list"]), PROMPT);
    assert!(!list.status.success());
    list.assert_one_error(&[assigned.to_str().expect("utf-8"), "fifo"]);
    // The supervisor says why, runs the local config, and stops on SIGTERM.
    let mut pivot = bootstrap(&scene);
    running_kubelet(&scene);
    assert!(scene.output().contains("fifo"), "{}", scene.output());
    fs::remove_file(&assigned).expect("remove fifo");
    // A 64 MiB bad-config list (sparse: nothing is written) is refused
    // unread.
    let bad = store.join("v1/bad-configs.json");
    File::create(&bad)
        .and_then(|f| f.set_len(64 * 1024 * 1024))
        .expect("sparse file");
    let list = run_within(&scene, checkpoint(&scene, &["list"]), PROMPT);
    assert!(!list.status.success());
    list.assert_one_error(&["bad-configs.json", "too large"]);
    let sent = Instant::now();
    assert!(pivot.signal(Signal::SIGTERM));
    pivot.wait_exit(PROMPT);
    eprintln!(
        "SIGTERM with planted store files: exited in {:?}",
        sent.elapsed()
    );
}

#[test]
fn an_untrusted_store_root_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let scene = Scene::new();
    let reset = run_within(&scene, checkpoint(&scene, &["reset"]), PROMPT);
    assert!(reset.status.success(), "{}", reset.stderr);
    fs::set_permissions(scene.config_dir(), fs::Permissions::from_mode(0o777)).expect("chmod");
    let list = run_within(&scene, checkpoint(&scene, &["list"]), PROMPT);
    assert!(!list.status.success());
    list.assert_one_error(&["chmod go-w"]);
    let file = scene.kubelet_config_file("c.yaml", "maxPods: 12\n");
    let assign = run_within(
        &scene,
        checkpoint(&scene, &["assign", file.to_str().expect("utf-8")]),
        PROMPT,
    );
    assert!(!assign.status.success());
    assign.assert_one_error(&["chmod go-w"]);
}
