//! One truth about the config the kubelet runs (issue 21 item 5), end to end
//! with the real binary and the stand-in kubelet:
//! - the kubelet's `--config-dir` drop-ins are merged into the effective
//!   config the kubelet gets, and the kubelet is not given `--config-dir`;
//! - a drop-in change is a config change (the kubelet restarts with it);
//! - a bad drop-in is refused with an error naming it, and nothing is lost
//!   (the kubelet keeps running with the drop-ins that ran);
//! - a drop-in set that crash-loops in its trial goes back to the
//!   last-known-good set;
//! - a kubelet flag after `--` that sets a KubeletConfiguration field is
//!   refused at start, naming the field and the fix.

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::lock_state::status_json;
use support::{kubelet_config, wait_until, Proc, Scene};

const DEADLINE: Duration = Duration::from_secs(10);
const CRASH_MARK: &str = "crashme.example";

/// `<scene>/kubelet.conf.d` (created 0755 by the umask).
fn drop_in_dir(scene: &Scene) -> PathBuf {
    let dir = scene.path().join("kubelet.conf.d");
    fs::create_dir_all(&dir).expect("create the drop-in directory");
    dir
}

/// Writes a drop-in as an editor that saves atomically does: a temp file
/// (not `*.conf`) renamed over the name.
fn write_drop_in(dir: &Path, name: &str, body: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    fs::write(&tmp, kubelet_config(body)).expect("write a drop-in");
    fs::rename(&tmp, dir.join(name)).expect("rename a drop-in into place");
}

fn bootstrap(scene: &Scene, init: &Path, dir: &Path, extra_env: &[(&str, &str)]) -> Proc {
    let dir_arg = format!("--config-dir={}", dir.display());
    let mut env = vec![("STANDIN_CRASH_ON_CONFIG", CRASH_MARK)];
    env.extend_from_slice(extra_env);
    scene.spawn(scene.pivot(
        &[
            "bootstrap",
            "--stop-timeout",
            "2s",
            "--init-config",
            init.to_str().expect("utf-8 path"),
        ],
        &[&dir_arg, "--v=2"],
        &env,
    ))
}

/// The running kubelet and the content of its `--config` file.
fn running(scene: &Scene) -> (i32, String) {
    let pid = wait_until(DEADLINE, "a running kubelet", || {
        scene.running_kubelets().first().copied()
    });
    (pid, scene.config_of(pid))
}

/// Waits for a running kubelet whose config contains every needle.
fn running_with(scene: &Scene, needles: &[&str]) -> (i32, String) {
    wait_until(
        DEADLINE,
        &format!("a kubelet running with {needles:?}"),
        || {
            let (pid, config) = running(scene);
            needles
                .iter()
                .all(|n| config.contains(n))
                .then_some((pid, config))
        },
    )
}

/// A supervisor started with `init` and a drop-in directory holding
/// `10-pods.conf` (`maxPods: 60`), its kubelet running. Bind `supervisor`
/// for as long as it must run: dropping it kills it.
struct Started {
    scene: Scene,
    init: PathBuf,
    dir: PathBuf,
    supervisor: Proc,
    pid: i32,
    config: String,
}

fn started(init: &str) -> Started {
    let scene = Scene::new();
    let init = scene.kubelet_config_file("kubelet.conf", init);
    let dir = drop_in_dir(&scene);
    write_drop_in(&dir, "10-pods.conf", "maxPods: 60\n");
    let supervisor = bootstrap(&scene, &init, &dir, &[]);
    let (pid, config) = running_with(&scene, &["\"maxPods\":60"]);
    Started {
        scene,
        init,
        dir,
        supervisor,
        pid,
        config,
    }
}

/// Runs kubelet-pivot to a refusal at start: exit 2, one error line (which
/// is returned), no kubelet.
fn refused_at_start(scene: &Scene, args: &[&str], kubelet_args: &[&str]) -> String {
    let out = scene
        .pivot(args, kubelet_args, &[])
        .output()
        .expect("run kubelet-pivot");
    let output = scene.output();
    assert_eq!(out.status.code(), Some(2), "{kubelet_args:?}: {output}");
    let errors: Vec<&str> = output
        .lines()
        .filter(|l| l.starts_with("kubelet-pivot: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{kubelet_args:?}: {output}");
    assert!(
        scene.starts().is_empty(),
        "{kubelet_args:?}: a kubelet was started"
    );
    errors[0].to_owned()
}

/// The docs' "structure fields" example of kubelet configuration directory
/// merging (kubernetes.io, "Kubelet Configuration Directory Merging"), with
/// a second drop-in after it.
#[test]
fn drop_ins_are_merged_into_the_config_the_kubelet_gets() {
    let scene = Scene::new();
    let init = scene.kubelet_config_file(
        "kubelet.conf",
        "port: 20250\nauthorization:\n  mode: Webhook\n  webhook:\n    cacheAuthorizedTTL: \"5m\"\n    cacheUnauthorizedTTL: \"30s\"\nserializeImagePulls: false\naddress: \"192.168.0.1\"\n",
    );
    let dir = drop_in_dir(&scene);
    write_drop_in(
        &dir,
        "10-authz.conf",
        "authorization:\n  mode: AlwaysAllow\n  webhook:\n    cacheAuthorizedTTL: \"8m\"\n    cacheUnauthorizedTTL: \"45s\"\naddress: \"192.168.0.8\"\n",
    );
    write_drop_in(&dir, "20-pods.conf", "maxPods: 77\n");
    fs::write(dir.join("README"), "not a drop-in: skipped\n").unwrap();
    let mut p = bootstrap(&scene, &init, &dir, &[]);
    let (pid, config) = running(&scene);
    for needle in [
        "\"port\":20250",
        "\"serializeImagePulls\":false",
        "\"address\":\"192.168.0.8\"",
        "\"mode\":\"AlwaysAllow\"",
        "\"cacheAuthorizedTTL\":\"8m\"",
        "\"cacheUnauthorizedTTL\":\"45s\"",
        "\"maxPods\":77",
    ] {
        assert!(config.contains(needle), "{needle} missing in {config}");
    }
    // The kubelet reads the merged file only: no --config-dir of its own.
    let args = scene
        .start_of(pid)
        .and_then(|s| s.field("args").map(str::to_owned))
        .unwrap_or_default();
    assert!(!args.contains("config-dir"), "{args}");
    assert!(!args.contains("kubelet.conf.d"), "{args}");
    assert!(args.contains("--v=2"), "{args}");
    let st = status_json(&scene);
    assert_eq!(
        st["config"]["dropIns"]["applied"]["files"],
        serde_json::json!(["10-authz.conf", "20-pods.conf"]),
        "{st}"
    );
    assert!(st["config"]["error"].is_null(), "{st}");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(DEADLINE).success());
    scene.assert_no_overlap();
}

#[test]
fn a_drop_in_change_restarts_the_kubelet_with_it() {
    let Started {
        scene,
        dir,
        pid: first,
        supervisor: _supervisor,
        ..
    } = started("maxPods: 50\n");
    let changed = Instant::now();
    write_drop_in(&dir, "20-more.conf", "maxPods: 61\nkubeAPIQPS: 7\n");
    let (second, _) = running_with(&scene, &["\"maxPods\":61", "\"kubeAPIQPS\":7"]);
    eprintln!(
        "drop-in written -> new kubelet running: {:?}",
        changed.elapsed()
    );
    assert_ne!(first, second, "the kubelet was not restarted");
    // Written in place (no rename) and removed: each is a change too.
    fs::write(
        dir.join("20-more.conf"),
        kubelet_config("maxPods: 62\nkubeAPIQPS: 7\n"),
    )
    .unwrap();
    let (third, _) = running_with(&scene, &["\"maxPods\":62"]);
    assert_ne!(third, second);
    fs::remove_file(dir.join("20-more.conf")).unwrap();
    let (fourth, config) = running_with(&scene, &["\"maxPods\":60"]);
    assert_ne!(fourth, third);
    assert!(!config.contains("\"kubeAPIQPS\":7"), "{config}");
    assert!(
        scene.output().contains("effective kubelet config changed"),
        "{}",
        scene.output()
    );
    scene.assert_no_overlap();
}

#[test]
fn a_bad_drop_in_is_refused_with_a_clear_error_and_loses_nothing() {
    let Started {
        scene,
        dir,
        pid,
        config,
        supervisor: _supervisor,
        ..
    } = started("maxPods: 50\n");
    let starts = scene.starts().len();
    let cases: &[(&str, &str, &str)] = &[
        // Parses, but the merged config does not validate.
        (
            "port: 70000\n",
            "port",
            "failed to validate config with --config-dir drop-ins",
        ),
        // Does not parse: an unknown field.
        (
            "maxPodz: 70\n",
            "maxPodz",
            "failed to load --config-dir drop-ins",
        ),
        // Not a KubeletConfiguration.
        ("", "kind", "failed to load --config-dir drop-ins"),
    ];
    for (body, needle, status_error) in cases {
        let bad = dir.join("20-bad.conf");
        if body.is_empty() {
            fs::write(dir.join(".20-bad.conf.tmp"), "maxPods: 70\n").unwrap();
            fs::rename(dir.join(".20-bad.conf.tmp"), &bad).unwrap();
        } else {
            write_drop_in(&dir, "20-bad.conf", body);
        }
        let st = wait_until(DEADLINE, &format!("{needle}: the refusal reported"), || {
            let st = status_json(&scene);
            (st["config"]["error"].as_str().unwrap_or_default())
                .starts_with(status_error)
                .then_some(st)
        });
        // The supervisor's log names the file and what is wrong with it.
        let output = wait_until(DEADLINE, "the refusal logged", || {
            let output = scene.output();
            output
                .lines()
                .any(|l| {
                    l.contains("--config-dir drop-ins refused")
                        && l.contains("20-bad.conf")
                        && l.contains(needle)
                })
                .then_some(output)
        });
        // Nothing lost: the same kubelet, the same config, the set that ran.
        assert_eq!(scene.running_kubelets(), vec![pid], "{output}");
        assert_eq!(scene.config_of(pid), config);
        assert_eq!(scene.starts().len(), starts, "a kubelet was started");
        assert_eq!(
            st["config"]["dropIns"]["applied"]["files"],
            serde_json::json!(["10-pods.conf"]),
            "{st}"
        );
        fs::remove_file(&bad).unwrap();
        wait_until(DEADLINE, "the error to clear", || {
            status_json(&scene)["config"]["error"]
                .is_null()
                .then_some(())
        });
    }
    // A drop-in that is a symlink is refused, never followed.
    let target = scene.kubelet_config_file("elsewhere.yaml", "maxPods: 99\n");
    std::os::unix::fs::symlink(&target, dir.join("30-link.conf")).unwrap();
    wait_until(DEADLINE, "the symlink refused", || {
        scene
            .output()
            .lines()
            .any(|l| l.contains("30-link.conf") && l.contains("symlink"))
            .then_some(())
    });
    assert_eq!(scene.running_kubelets(), vec![pid]);
    // Fixed: the next change applies.
    fs::remove_file(dir.join("30-link.conf")).unwrap();
    write_drop_in(&dir, "20-good.conf", "maxPods: 70\n");
    let (after, _) = running_with(&scene, &["\"maxPods\":70"]);
    assert_ne!(after, pid);
    for start in scene.starts() {
        let content = fs::read_to_string(start.field("config").unwrap()).unwrap_or_default();
        assert!(
            !content.contains("\"port\":70000") && !content.contains("\"maxPods\":99"),
            "{content}"
        );
    }
    scene.assert_no_overlap();
}

#[test]
fn a_restart_with_a_broken_drop_in_runs_the_drop_ins_that_ran() {
    let Started {
        scene,
        init,
        dir,
        supervisor: mut p,
        ..
    } = started("maxPods: 50\n");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(DEADLINE).success());
    write_drop_in(&dir, "10-pods.conf", "maxPods: [\n");
    let _p2 = bootstrap(&scene, &init, &dir, &[]);
    let (_, config) = running(&scene);
    assert!(config.contains("\"maxPods\":60"), "{config}");
    let st = wait_until(DEADLINE, "the refusal reported", || {
        let st = status_json(&scene);
        (!st["config"]["error"].is_null()).then_some(st)
    });
    // The prefix, then the loader's words naming the drop-in.
    let error = st["config"]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("failed to load --config-dir drop-ins: ")
            && error.contains("10-pods.conf"),
        "{st}"
    );
}

#[test]
fn a_broken_config_dir_on_a_new_node_refuses_to_start() {
    let scene = Scene::new();
    let init = scene.kubelet_config_file("kubelet.conf", "maxPods: 50\n");
    let dir = drop_in_dir(&scene);
    write_drop_in(&dir, "10-pods.conf", "maxPodz: 60\n");
    let error = refused_at_start(
        &scene,
        &["bootstrap", "--init-config", init.to_str().unwrap()],
        &[&format!("--config-dir={}", dir.display())],
    );
    assert!(
        error.contains("10-pods.conf") && error.contains("maxPodz"),
        "{error}"
    );
}

#[test]
fn a_crash_looping_drop_in_set_goes_back_to_last_known_good() {
    // The node's first set is its last-known-good; a change is on trial.
    let Started {
        scene,
        dir,
        supervisor: _supervisor,
        ..
    } = started("maxPods: 50\ncrashLoopThreshold: 1\n");
    let good = wait_until(DEADLINE, "the first drop-ins last-known-good", || {
        let st = status_json(&scene);
        let lkg = st["config"]["dropIns"]["lastKnownGood"]["id"]
            .as_str()?
            .to_owned();
        Some(lkg)
    });
    // A set that validates but crashes the kubelet, with a trial long
    // enough to see the loop.
    write_drop_in(
        &dir,
        "20-crash.conf",
        &format!("staticPodURL: http://{CRASH_MARK}/\nconfigTrialDuration: 5m\n"),
    );
    let st = wait_until(Duration::from_secs(20), "the crash loop detected", || {
        let st = status_json(&scene);
        let bad = st["config"]["dropIns"]["bad"].as_object()?;
        (!bad.is_empty()).then_some(st.clone())
    });
    let reason = st["config"]["dropIns"]["bad"]
        .as_object()
        .and_then(|b| b.values().next())
        .and_then(|e| e["reason"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("crash loop"), "{st}");
    // The last-known-good set runs again, the directory unchanged.
    let (_, config) = running_with(&scene, &["\"maxPods\":60"]);
    assert!(!config.contains(CRASH_MARK), "{config}");
    let st = wait_until(DEADLINE, "the known-bad error reported", || {
        let st = status_json(&scene);
        (st["config"]["dropIns"]["applied"]["id"] == good.as_str()).then_some(st)
    });
    assert!(
        st["config"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("known bad"),
        "{st}"
    );
    // The assigned-config machinery blamed nothing of its own.
    assert!(
        st["config"]["badConfigs"]
            .as_object()
            .is_none_or(|b| b.is_empty()),
        "{st}"
    );
    assert!(dir.join("20-crash.conf").exists());
    // forget-bad by the id `status` shows: the set is tried again (and
    // crash-loops again).
    let bad_id = st["config"]["dropIns"]["bad"]
        .as_object()
        .and_then(|b| b.keys().next().cloned())
        .expect("a bad set");
    let starts = scene.starts().len();
    let out = std::process::Command::new(support::pivot_bin())
        .args(["checkpoint", "forget-bad", &bad_id[..12]])
        .arg("--dynamic-config-dir")
        .arg(scene.config_dir())
        .output()
        .expect("run checkpoint forget-bad");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(&bad_id),
        "{out:?}"
    );
    wait_until(
        Duration::from_secs(20),
        "the set tried and marked bad again",
        || {
            let st = status_json(&scene);
            (scene.starts().len() > starts && st["config"]["dropIns"]["bad"].get(&bad_id).is_some())
                .then_some(())
        },
    );
    running_with(&scene, &["\"maxPods\":60"]);
    scene.assert_no_overlap();
}

/// `--kube-reserved`, `--max-pods`, `--cgroup-driver`, `--eviction-hard`:
/// refused at start in both spellings, with the field and the fix.
#[test]
fn kubelet_flags_that_set_a_config_field_are_refused_at_start() {
    let cases: &[(&[&str], &str)] = &[
        (&["--max-pods=200"], "maxPods"),
        (&["--max-pods", "200"], "maxPods"),
        (&["--kube-reserved=cpu=500m,memory=1Gi"], "kubeReserved"),
        (&["--cgroup-driver", "systemd"], "cgroupDriver"),
        (&["--eviction-hard=memory.available<500Mi"], "evictionHard"),
        (
            &["--kubeconfig=/etc/kubernetes/kubelet.conf", "--max_pods=3"],
            "maxPods",
        ),
    ];
    for (args, field) in cases {
        let error = refused_at_start(&Scene::new(), &["bootstrap"], args);
        assert!(
            error.contains(&format!("KubeletConfiguration field {field}"))
                && error.contains(&format!("put {field} in the KubeletConfiguration")),
            "{args:?}: {error}"
        );
    }
}

#[test]
fn kubelet_flags_that_are_no_config_field_pass() {
    let scene = Scene::new();
    let mut p = scene.spawn(scene.pivot(
        &["bootstrap"],
        &[
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--hostname-override",
            "node-1",
            "--node-ip=10.0.0.1",
            "--node-labels=a=b",
            "-v=3",
        ],
        &[],
    ));
    let (pid, _) = running(&scene);
    let args = scene
        .start_of(pid)
        .and_then(|s| s.field("args").map(str::to_owned))
        .unwrap_or_default();
    assert!(args.contains("--hostname-override node-1"), "{args}");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(DEADLINE).success());
}

/// The shipped DaemonSet's kubelet arguments pass the same check.
#[test]
fn the_shipped_daemonset_passes_no_config_flags() {
    let text = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/20-daemonset.yaml"
    ))
    .expect("read the DaemonSet");
    let args: Vec<std::ffi::OsString> = text
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("- "))
        .skip_while(|a| *a != "--")
        .skip(2)
        .take_while(|a| a.starts_with('-'))
        .map(Into::into)
        .collect();
    assert!(!args.is_empty(), "no kubelet arguments found");
    kp_node::kubelet::flags::check(&args).expect("the DaemonSet's kubelet flags");
}

#[test]
fn readme_lists_the_allowed_kubelet_flags_from_the_code() {
    let readme = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference.md"))
        .expect("docs/reference.md");
    let table = kp_node::kubelet::flags::allowed_flags_markdown();
    assert!(
        readme.contains(table.trim()),
        "docs/reference.md must embed the allowed kubelet flags of crates/node/src/kubelet/flags.rs (regenerate it):\n{table}"
    );
}
