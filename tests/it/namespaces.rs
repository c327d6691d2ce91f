//! The self-hosted supervisor in its own PID and mount namespaces, the way a DaemonSet pod
//! runs it, against the bootstrap in the host namespaces.
//!
//! The pod side is `unshare --pid --fork --mount --propagation private`: the lock directory is
//! bind-mounted from the host path onto another path, so the two sides name the same lock file
//! differently, and the pod has its own pids. /proc is left as the host's (no --mount-proc),
//! as in a DaemonSet with `hostPID`-style /proc access: the supervisor sees host pids there.
//!
//! Needs root and util-linux `unshare`; without them each test prints why it is skipped.

use crate::support;

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use nix::sys::signal::Signal;
use support::lock_state::{holder_record, status};
use support::{
    now_ns, ns_between, pid_alive, pivot_bin, signal_pid, stand_in_bin, wait_until, LogLine, Proc,
    Scene, STAND_IN_NAME,
};

/// Deadline for states the product reaches in milliseconds; generous for a loaded CI host.
const SETTLE: Duration = Duration::from_secs(10);
/// I2: the bootstrap runs a kubelet again within this long after the holder died.
const TAKEOVER: Duration = Duration::from_secs(1);
/// Grace period the pod's stand-in kubelet takes to stop after SIGTERM.
const POD_KUBELET_TERM_DELAY_MS: &str = "300";

/// Why namespace tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root: unshare --pid --mount needs CAP_SYS_ADMIN".to_owned());
    }
    match Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount",
            "--propagation",
            "private",
            "true",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => None,
        Ok(status) => Some(format!(
            "`unshare --pid --fork --mount true` failed ({status}): namespaces not permitted here"
        )),
        Err(err) => Some(format!("util-linux `unshare` not runnable: {err}")),
    }
}

macro_rules! skip_unless_namespaces {
    () => {
        if let Some(reason) = skip_reason() {
            eprintln!("skipping: {reason}");
            return;
        }
    };
}

/// `(pid, ppid)` of every process, from the host's /proc.
fn processes() -> Vec<(i32, i32)> {
    fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
}

fn children_of(parent: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(_, ppid)| *ppid == parent)
        .map(|(pid, _)| pid)
        .collect()
}

/// Host pids of every live stand-in kubelet of `scene`, in any PID namespace.
fn live_stand_ins(scene: &Scene) -> Vec<i32> {
    let mut wanted = b"STANDIN_LOG=".to_vec();
    wanted.extend_from_slice(scene.log().as_os_str().as_encoded_bytes());
    let mut pids: Vec<i32> = processes()
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|pid| pid_alive(*pid))
        .filter(|pid| {
            let argv0_is_stand_in = fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| {
                    let argv0 = cmdline.split(|byte| *byte == 0).next().unwrap_or_default();
                    argv0.ends_with(STAND_IN_NAME.as_bytes())
                })
                .unwrap_or(false);
            let ours = fs::read(format!("/proc/{pid}/environ"))
                .map(|environ| environ.split(|byte| *byte == 0).any(|var| var == wanted))
                .unwrap_or(false);
            argv0_is_stand_in && ours
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Waits until host supervisor `sup` runs the only kubelet (over all namespaces) and the holder
/// record names it; returns the kubelet's start line.
fn wait_host_holds(scene: &Scene, sup: i32) -> LogLine {
    wait_until(
        SETTLE,
        &format!("host supervisor {sup} to hold the lock and run the only kubelet"),
        || {
            let live = live_stand_ins(scene);
            let start = scene
                .starts()
                .into_iter()
                .rev()
                .find(|line| line.ppid() == sup && live.contains(&line.pid))?;
            let record = holder_record(&scene.state_dir())?;
            (live == [start.pid] && record["pid"] == sup && record["kubeletPid"] == start.pid)
                .then_some(start)
        },
    )
}

/// The self-hosted supervisor in a pod-like sandbox: `unshare` (host pid), its forked child
/// (PID 1 of the new PID namespace) and the supervisor itself.
struct Pod {
    unshare: Proc,
    /// Host pid of PID 1 of the namespace.
    init: i32,
    /// Host pid of the kubelet-pivot supervisor.
    supervisor: i32,
    output: PathBuf,
}

impl Pod {
    /// Starts `kubelet-pivot self-hosted --generation N` in new PID and mount namespaces, with
    /// the scene's lock directory bind-mounted at `<scene>/pod-view`. With `exec_supervisor`
    /// the supervisor is PID 1 of the namespace; otherwise a shell is, as with a wrapper
    /// entrypoint.
    fn start(scene: &Scene, generation: u32, exec_supervisor: bool, env: &[(&str, &str)]) -> Pod {
        let view = scene.path().join("pod-view");
        fs::create_dir_all(&view).expect("create the pod's mount point");
        let host_lock_dir = scene.lock().parent().expect("lock dir").to_owned();
        let run = if exec_supervisor { "exec " } else { "" };
        let script = format!(
            r#"mount --bind "$0" "$1" && {run}"$2" self-hosted --generation "$3" --lock-file "$1/{}" --dynamic-config-dir "$4" -- "$5"; echo "supervisor exited $?""#,
            scene
                .lock()
                .file_name()
                .expect("lock name")
                .to_string_lossy()
        );
        let output = scene.path().join(format!("pod-gen{generation}.out"));
        let out = File::create(&output).expect("create pod output");
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--pid",
            "--kill-child",
            "--mount",
            "--propagation",
            "private",
        ])
        .args(["sh", "-c", &script])
        .arg(&host_lock_dir)
        .arg(&view)
        .arg(pivot_bin())
        .arg(generation.to_string())
        .arg(scene.config_dir())
        .arg(stand_in_bin())
        .env_remove("NOTIFY_SOCKET")
        .envs(scene.stand_in_env())
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup pod output"))
        .stderr(out);
        let unshare = Proc::spawn(&mut cmd);
        let init = wait_until(SETTLE, "unshare to fork the namespace's PID 1", || {
            children_of(unshare.pid()).first().copied()
        });
        let pivot = pivot_bin();
        let supervisor = wait_until(SETTLE, "the pod's supervisor to start", || {
            let candidates = if exec_supervisor {
                vec![init]
            } else {
                children_of(init)
            };
            candidates
                .into_iter()
                .find(|pid| fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == pivot))
        });
        Pod {
            unshare,
            init,
            supervisor,
            output,
        }
    }

    fn output(&self) -> String {
        fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// Waits until the pod's supervisor holds the lock and its kubelet is the only one
    /// running; returns that kubelet's host pid (the stand-in logs its pod-local pid).
    fn wait_holds(&self, scene: &Scene, generation: u32) -> i32 {
        wait_until(
            SETTLE,
            &format!("the pod's gen {generation} supervisor to hold the lock"),
            || {
                let record = holder_record(&scene.state_dir())?;
                if record["pid"] != self.supervisor
                    || record["generation"] != generation
                    || record["role"] != "self-hosted"
                {
                    return None;
                }
                let live = live_stand_ins(scene);
                let kubelet = children_of(self.supervisor)
                    .into_iter()
                    .find(|pid| live.contains(pid))?;
                (live == [kubelet]).then_some(kubelet)
            },
        )
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "---- pod output {} ----\n{}",
                self.output.display(),
                self.output()
            );
        }
        // --kill-child: killing unshare SIGKILLs the namespace's PID 1, and with it the pod.
        self.unshare.signal(Signal::SIGKILL);
    }
}

fn bootstrap(scene: &Scene) -> Proc {
    scene.spawn(scene.pivot(&["bootstrap"], &[], &[]))
}

/// A host bootstrap that holds the lock; returns it and its kubelet's start line.
fn holding_bootstrap(scene: &Scene) -> (Proc, LogLine) {
    let boot = bootstrap(scene);
    let start = wait_host_holds(scene, boot.pid());
    (boot, start)
}

#[test]
fn pod_in_own_namespaces_takes_over_and_bootstrap_returns_when_the_pod_is_killed() {
    skip_unless_namespaces!();
    let scene = Scene::new();
    let (boot, boot_start) = holding_bootstrap(&scene);

    // Handoff to the namespaced supervisor: the bootstrap's kubelet stops, the pod's starts.
    let mut pod = Pod::start(&scene, 1, true, &[]);
    let pod_kubelet = pod.wait_holds(&scene, 1);
    assert!(
        scene
            .events("stop")
            .iter()
            .any(|line| line.pid == boot_start.pid),
        "the bootstrap's kubelet must have stopped on SIGTERM"
    );
    let (code, json) = status(&scene);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["lock"]["holder"]["role"], "self-hosted", "{json}");
    assert_eq!(
        json["lock"]["holder"]["pid"], pod.supervisor,
        "host pid expected: {json}"
    );
    assert!(
        json["lock"]["claims"]
            .as_array()
            .expect("claims")
            .iter()
            .any(|claim| claim["pid"] == boot.pid()),
        "the standing-by bootstrap must be listed: {json}"
    );

    // The node drains the pod the hard way: SIGKILL to the namespace's PID 1 kills it all.
    let killed_ns = now_ns();
    assert!(signal_pid(pod.init, Signal::SIGKILL));
    let back = wait_host_holds(&scene, boot.pid());
    let latency = ns_between(killed_ns, back.t_ns);
    assert!(
        latency <= TAKEOVER,
        "I2: the bootstrap started its kubelet {latency:?} after the pod was killed"
    );
    assert!(!pid_alive(pod_kubelet), "the pod's kubelet must be gone");
    assert_eq!(live_stand_ins(&scene), [back.pid]);
    pod.unshare.wait_exit(SETTLE);
    scene.assert_no_overlap();
    eprintln!("bootstrap took over {latency:?} after the pod was killed");
}

#[test]
fn pod_holder_hands_over_only_after_its_kubelet_stopped() {
    skip_unless_namespaces!();
    let scene = Scene::new();
    let _boot = bootstrap(&scene);
    let pod = Pod::start(
        &scene,
        1,
        true,
        &[("STANDIN_TERM_DELAY_MS", POD_KUBELET_TERM_DELAY_MS)],
    );
    let pod_kubelet = pod.wait_holds(&scene, 1);

    // A newer generation on the host: the pod must stop its kubelet (300 ms grace) first.
    let gen2 = scene.spawn(scene.pivot(&["self-hosted", "--generation", "2"], &[], &[]));
    let gen2_start = wait_host_holds(&scene, gen2.pid());
    scene.assert_no_overlap();
    assert!(!pid_alive(pod_kubelet));
    let stops = scene.events("stop");
    let pod_stop = stops
        .iter()
        .rev()
        .find(|line| line.t_ns < gen2_start.t_ns && line.field("reason") == Some("sigterm"))
        .unwrap_or_else(|| {
            panic!("the pod's kubelet must have stopped on its own (a `stop` line) before gen 2's kubelet started")
        });
    assert!(pod_stop.t_ns <= gen2_start.t_ns);
    drop(pod);
}

#[test]
fn pod_deletion_gives_the_kubelet_its_grace_period() {
    skip_unless_namespaces!();
    let scene = Scene::new();
    let (boot, _) = holding_bootstrap(&scene);
    // A wrapper shell is PID 1, the supervisor its child: as with a shell entrypoint.
    let pod = Pod::start(
        &scene,
        1,
        false,
        &[("STANDIN_TERM_DELAY_MS", POD_KUBELET_TERM_DELAY_MS)],
    );
    pod.wait_holds(&scene, 1);
    let terms_before = scene.events("term").len();

    // Pod deletion: SIGTERM to the supervisor.
    assert!(signal_pid(pod.supervisor, Signal::SIGTERM));
    let back = wait_host_holds(&scene, boot.pid());
    scene.assert_no_overlap();
    let terms = scene.events("term");
    let pod_term = terms
        .get(terms_before)
        .expect("the pod's kubelet got SIGTERM")
        .clone();
    let pod_stop = scene
        .events("stop")
        .into_iter()
        .find(|line| line.pid == pod_term.pid && line.t_ns >= pod_term.t_ns)
        .unwrap_or_else(|| {
            panic!(
                "the pod's kubelet (pod pid {}) was killed before it finished its {POD_KUBELET_TERM_DELAY_MS} ms graceful stop",
                pod_term.pid
            )
        });
    assert!(
        pod_stop.t_ns <= back.t_ns,
        "the bootstrap's kubelet started before the pod's kubelet stopped"
    );
    wait_until(SETTLE, "the pod's supervisor to exit", || {
        (!pid_alive(pod.supervisor)).then_some(())
    });
    assert!(
        pod.output().contains("supervisor exited 0"),
        "{}",
        pod.output()
    );
}

#[test]
fn pod_holder_record_names_its_kubelet_by_host_pid() {
    skip_unless_namespaces!();
    let scene = Scene::new();
    let (_boot, _) = holding_bootstrap(&scene);
    let pod = Pod::start(&scene, 1, true, &[]);
    let pod_kubelet = pod.wait_holds(&scene, 1);
    let (code, json) = status(&scene);
    assert_eq!(code, 0, "{json}");
    assert_eq!(
        json["lock"]["holder"]["kubeletPid"], pod_kubelet,
        "status must name the pod's kubelet by its pid in the host's /proc: {json}"
    );
}
