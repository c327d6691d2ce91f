//! Configs are validated for the kubelet that runs them (issue 33): the stand-in's answer to
//! `--version` picks the feature-gate model, `--kubelet-version` overrides it, a kubelet that
//! does not answer is a warning (the newest model), and a config the kubelet would refuse
//! (an unknown gate) is refused before any restart.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;
use support::lock_state::status_json;
use support::{stand_in_bin, wait_until, Scene};

/// A kubelet for `scene` that is the stand-in answering `--version` with `version`
/// (`none`: it does not know the flag). kubelet-pivot runs `--version` with an empty
/// environment, so the answer is set here, not in the supervisor's environment.
fn kubelet_answering(scene: &Scene, version: &str) -> PathBuf {
    let path = scene.path().join(format!("kubelet-{version}"));
    let script = format!(
        "#!/bin/sh\nSTANDIN_VERSION='{version}' exec '{}' \"$@\"\n",
        stand_in_bin().display()
    );
    std::fs::write(&path, script).expect("write the kubelet wrapper");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make the kubelet wrapper executable");
    path
}

fn running_kubelet(scene: &Scene) -> i32 {
    wait_until(Duration::from_secs(10), "a running kubelet", || {
        scene.running_kubelets().first().copied()
    })
}

/// A start refused with exit 2 and one error line containing each of `needles`.
#[track_caller]
fn assert_refused_start(scene: &Scene, status: std::process::ExitStatus, needles: &[&str]) {
    let output = scene.output();
    assert_eq!(status.code(), Some(2), "{output}");
    let errors: Vec<&str> = output
        .lines()
        .filter(|l| l.starts_with("kubelet-pivot: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{output}");
    for needle in needles {
        assert!(
            errors[0].contains(needle),
            "{needle:?} not in {}",
            errors[0]
        );
    }
    assert!(scene.starts().is_empty(), "a kubelet was started");
}

#[test]
fn an_unknown_gate_is_refused_before_any_restart() {
    let scene = Scene::new();
    // In the init config: the supervisor does not start.
    let init = scene.kubelet_config_file("init.yaml", "featureGates:\n  NoSuchGate: true\n");
    let status = scene
        .pivot(
            &["bootstrap", "--init-config", init.to_str().unwrap()],
            &[],
            &[],
        )
        .status()
        .expect("run kubelet-pivot");
    assert_refused_start(
        &scene,
        status,
        &["init.yaml", "unrecognized feature gate: NoSuchGate"],
    );

    // Assigned to a running node: refused, the kubelet left alone.
    let scene = Scene::new();
    let mut p = scene.spawn(scene.pivot(&["bootstrap", "--stop-timeout", "2s"], &[], &[]));
    let first = running_kubelet(&scene);
    let file = scene.kubelet_config_file(
        "gates.yaml",
        "maxPods: 42\nfeatureGates:\n  NoSuchGate: true\n",
    );
    scene.checkpoint_assign(&file, &["--force"]);
    let st = wait_until(Duration::from_secs(10), "the refusal in the status", || {
        let st = status_json(&scene);
        (!st["config"]["error"].is_null()).then_some(st)
    });
    let error = st["config"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("featureGates.NoSuchGate (true): unrecognized feature gate: NoSuchGate"),
        "{st}"
    );
    assert_eq!(st["config"]["active"]["origin"], "local", "{st}");
    assert_eq!(scene.running_kubelets(), vec![first]);
    assert_eq!(scene.starts().len(), 1, "the kubelet was restarted");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn the_kubelets_version_picks_the_gate_model() {
    // KubeletCrashLoopBackOffMax is off in 1.34 and on from 1.35.
    const BODY: &str = "crashLoopBackOff:\n  maxContainerRestartPeriod: 30s\n";
    let scene = Scene::new();
    let init = scene.kubelet_config_file("init.yaml", BODY);
    let init = init.to_str().unwrap();
    let old = kubelet_answering(&scene, "Kubernetes v1.34.3");
    let status = scene
        .pivot_running(&old, &["bootstrap", "--init-config", init], &[])
        .status()
        .expect("run kubelet-pivot");
    assert_refused_start(
        &scene,
        status,
        &[
            "crashLoopBackOff.maxContainerRestartPeriod",
            "feature gate KubeletCrashLoopBackOffMax is disabled (kubelet 1.34)",
        ],
    );

    // The same binary told to be 1.35: the model follows the flag.
    let mut p = scene.spawn(scene.pivot_running(
        &old,
        &[
            "bootstrap",
            "--init-config",
            init,
            "--kubelet-version",
            "v1.35.0",
        ],
        &[],
    ));
    running_kubelet(&scene);
    let output = scene.output();
    assert!(
        output.contains("kubelet v1.35.0 (--kubelet-version): the 1.35 feature-gate model"),
        "{output}"
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(Duration::from_secs(10)).success());

    // The stand-in's own answer (1.35.0) accepts it too.
    let scene = Scene::new();
    let init = scene.kubelet_config_file("init.yaml", BODY);
    let mut p = scene.spawn(scene.pivot(
        &["bootstrap", "--init-config", init.to_str().unwrap()],
        &[],
        &[],
    ));
    running_kubelet(&scene);
    assert!(
        scene.output().contains("the 1.35 feature-gate model"),
        "{}",
        scene.output()
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn a_kubelet_that_does_not_answer_version_runs_with_a_warning() {
    let scene = Scene::new();
    let mute = kubelet_answering(&scene, "none");
    let mut p =
        scene.spawn(scene.pivot_running(&mute, &["bootstrap", "--stop-timeout", "2s"], &[]));
    running_kubelet(&scene);
    let output = scene.output();
    assert!(output.contains("kubelet-none --version failed"), "{output}");
    assert!(
        output.contains("the kubelet's version is unknown; validating against the newest"),
        "{output}"
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn checkpoint_assign_checks_the_kubelet_version_and_the_host() {
    let scene = Scene::new();
    let file = scene.kubelet_config_file(
        "crash.yaml",
        "crashLoopBackOff:\n  maxContainerRestartPeriod: 30s\n",
    );
    let out = scene.try_checkpoint_assign(&file, &["--kubelet-version", "v1.34.0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("KubeletCrashLoopBackOffMax is disabled (kubelet 1.34)"),
        "{stderr}"
    );
    let out = scene.try_checkpoint_assign(&file, &["--kubelet-version", "1.35"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The host check follows this host's cgroup version.
    let file = scene.kubelet_config_file("v1.yaml", "failCgroupV1: true\n");
    let out = scene.try_checkpoint_assign(&file, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let cgroup = nix::sys::statfs::statfs("/sys/fs/cgroup").map(|fs| fs.filesystem_type());
    if cgroup.is_ok_and(|kind| kind == nix::sys::statfs::TMPFS_MAGIC) {
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains(
                "failCgroupV1 (true): this host runs cgroup v1 (/sys/fs/cgroup is tmpfs)"
            ),
            "{stderr}"
        );
    } else {
        assert!(out.status.success(), "{stderr}");
    }
}
