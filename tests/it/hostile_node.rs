//! A local user who is not root attacks the pivot through a world-writable (1777) lock
//! directory, the way `/var/run/lock` is on common distributions (issue 10, I6). The attacker
//! is `nobody` (uid 65534); kubelet-pivot runs as root with the stand-in kubelet. Every attack
//! must end with a clear log line and nothing done: no kill, no yield, no hang, no deletion,
//! and the kubelet still running.
//!
//! Root-only: the tests print why they are skipped otherwise.

use crate::support;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::lock_state::{claims_dir, holder_path};
use support::sampler::start_time;
use support::{pid_alive, wait_until, Proc, Scene};

const NOBODY: u32 = 65534;
/// Deadline for what the product does in milliseconds; generous for a loaded CI host.
const SETTLE: Duration = Duration::from_secs(10);
/// How long nothing may happen after an attack.
const QUIET: Duration = Duration::from_secs(2);

macro_rules! root_only {
    () => {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to run the attacker as nobody");
            return;
        }
    };
}

/// A scene whose lock directory is mode 1777 and reachable by nobody.
struct Node {
    scene: Scene,
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|err| panic!("chmod {mode:o} {}: {err}", path.display()));
}

impl Node {
    fn new() -> Node {
        let scene = Scene::new();
        chmod(scene.path(), 0o755);
        chmod(&scene.path().join("lock"), 0o1777);
        Node { scene }
    }

    fn lock_dir(&self) -> PathBuf {
        self.scene.path().join("lock")
    }

    /// `sh -c script` as nobody in the lock directory, with `$LOCK` set; waits for it.
    fn as_nobody(&self, script: &str) -> Output {
        self.nobody_command(script)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap_or_else(|err| panic!("failed to run `{script}` as nobody: {err}"))
    }

    /// The same, left running: its whole process group is killed on drop, and its output goes
    /// nowhere (a leftover must not keep the test runner's pipes open).
    fn spawn_nobody(&self, script: &str) -> GroupProc {
        let mut cmd = self.nobody_command(script);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        GroupProc(Proc::spawn(&mut cmd))
    }

    fn nobody_command(&self, script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .current_dir(self.lock_dir())
            .env("LOCK", self.scene.lock())
            .env("KUBELET_PIVOT_ENV_FILE", "")
            .stdin(Stdio::null())
            .uid(NOBODY)
            .gid(NOBODY)
            .process_group(0);
        cmd
    }

    /// A bootstrap in its own process group (a supervisor tricked into signalling "its own
    /// group" must not take the test runner with it).
    fn bootstrap(&self) -> Proc {
        let mut cmd = self.scene.pivot(&["bootstrap"], &[], &[]);
        cmd.process_group(0);
        self.scene.spawn(cmd)
    }

    /// Waits until supervisor `sup` runs a kubelet; returns its pid.
    fn kubelet_of(&self, sup: i32) -> i32 {
        wait_until(SETTLE, "the bootstrap to run a kubelet", || {
            self.scene.kubelet_of(sup)
        })
    }

    /// For [`QUIET`]: the same kubelet keeps running, no other starts, no yield.
    fn assert_steady(&self, sup: &mut Proc, kubelet: i32, what: &str) {
        let starts = self.scene.starts().len();
        let until = Instant::now() + QUIET;
        while Instant::now() < until {
            assert!(
                sup.is_running(),
                "{what}: the supervisor exited\n{}",
                self.scene.output()
            );
            assert_eq!(
                self.scene.running_kubelets(),
                vec![kubelet],
                "{what}: the kubelet did not keep running alone\n{}",
                self.scene.output()
            );
            thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            self.scene.starts().len(),
            starts,
            "{what}: the kubelet was restarted\n{}",
            self.scene.output()
        );
        let out = self.scene.output();
        assert!(
            !out.contains("yielding"),
            "{what}: the holder yielded\n{out}"
        );
        self.scene.assert_no_overlap();
    }

    fn output_has(&self, needle: &str) -> bool {
        self.scene.output().contains(needle)
    }
}

/// A process that leads its own process group; the group is SIGKILLed on drop.
struct GroupProc(Proc);

impl std::ops::Deref for GroupProc {
    type Target = Proc;
    fn deref(&self) -> &Proc {
        &self.0
    }
}

impl std::ops::DerefMut for GroupProc {
    fn deref_mut(&mut self) -> &mut Proc {
        &mut self.0
    }
}

impl Drop for GroupProc {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.0.pid()), Signal::SIGKILL);
    }
}

/// A long-running process of nobody in its own process group (a victim for a fencing trick).
fn nobody_victim(node: &Node) -> GroupProc {
    node.spawn_nobody("exec sleep 600")
}

/// Writes `text` as root with mode 0600, as kubelet-pivot's own files are.
fn write_private(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
    chmod(path, 0o600);
}

#[test]
fn files_planted_beside_the_lock_are_never_read_or_signalled() {
    root_only!();
    let node = Node::new();
    let mut victim = nobody_victim(&node);
    let pgid = victim.pid();
    // What the landed build trusted: a holder record naming nobody's process group (and one
    // naming pid 0), a claims directory with a fake high generation, FIFOs that hung it.
    let script = format!(
        r#"set -e
        printf '{{"role":"bootstrap","generation":0,"pid":1,"startTime":1,"kubeletPid":{pgid},"kubeletStartTime":{st},"since":"x"}}' > "$LOCK.holder"
        mkdir "$LOCK.claims"
        printf '{{"role":"self-hosted","generation":99,"pid":1,"startTime":1,"since":"x"}}' > "$LOCK.claims/1-1.json"
        mkfifo "$LOCK.claims/2-2.json" "$LOCK.holder.fifo"
        ln -s /etc "$LOCK.claims/link""#,
        st = start_time(pgid)
    );
    let out = node.as_nobody(&script);
    assert!(out.status.success(), "planting failed: {out:?}");
    let planted: Vec<PathBuf> = fs::read_dir(node.lock_dir())
        .expect("list lock dir")
        .flatten()
        .map(|e| e.path())
        .collect();

    let mut boot = node.bootstrap();
    let kubelet = node.kubelet_of(boot.pid());
    node.assert_steady(&mut boot, kubelet, "planted holder record and claims");
    assert!(pid_alive(pgid), "nobody's process group was signalled");
    for path in &planted {
        assert!(
            fs::symlink_metadata(path).is_ok(),
            "{} was deleted",
            path.display()
        );
    }
    assert!(victim.is_running());
    // The real claims live where nobody cannot even look.
    let out = node.as_nobody(&format!(
        r#"ls "{}""#,
        claims_dir(&node.scene.state_dir()).display()
    ));
    assert!(!out.status.success(), "nobody can list the claims: {out:?}");
}

#[test]
fn a_lock_file_planted_and_flocked_by_another_user_is_replaced() {
    root_only!();
    let node = Node::new();
    // Nobody creates the lock file before kubelet-pivot (at boot, after a clean-up) and holds
    // its flock, with a second process of nobody blocked on it.
    let mut holder =
        node.spawn_nobody(r#"umask 0; : > "$LOCK"; exec flock --no-fork "$LOCK" sleep 600"#);
    wait_until(SETTLE, "nobody's lock file", || {
        fs::metadata(node.scene.lock())
            .ok()
            .filter(|m| m.uid() == NOBODY)
    });
    let mut waiter = node.spawn_nobody(r#"exec flock --no-fork "$LOCK" sleep 600"#);

    let mut boot = node.bootstrap();
    let kubelet = node.kubelet_of(boot.pid());
    let meta = fs::metadata(node.scene.lock()).expect("lock file");
    assert_eq!(
        (meta.uid(), meta.mode() & 0o7777),
        (0, 0o600),
        "the lock file is not root's 0600"
    );
    assert!(
        node.output_has("owned by uid 65534 stands at the lock path"),
        "no log line about the planted lock file\n{}",
        node.scene.output()
    );
    node.assert_steady(&mut boot, kubelet, "nobody's planted lock file");
    assert!(
        holder.is_running() && waiter.is_running(),
        "nobody's processes were killed"
    );
    // Nobody cannot open the new one to flock it.
    let out = node.as_nobody(r#"exec 3<"$LOCK""#);
    assert!(!out.status.success(), "nobody could open the lock file");
}

#[test]
fn a_symlink_planted_at_the_lock_path_is_replaced_not_followed() {
    root_only!();
    let node = Node::new();
    let precious = node.scene.path().join("precious");
    fs::write(&precious, "keep me").expect("write precious");
    let out = node.as_nobody(&format!(r#"ln -s "{}" "$LOCK""#, precious.display()));
    assert!(out.status.success(), "{out:?}");
    let mut boot = node.bootstrap();
    let kubelet = node.kubelet_of(boot.pid());
    let meta = fs::symlink_metadata(node.scene.lock()).expect("lock");
    assert!(meta.file_type().is_file() && meta.uid() == 0);
    assert_eq!(fs::read_to_string(&precious).expect("precious"), "keep me");
    assert_eq!(
        fs::metadata(&precious).expect("precious").mode() & 0o7777,
        0o644
    );
    node.assert_steady(&mut boot, kubelet, "planted symlink");
}

#[test]
fn a_process_of_another_user_blocked_on_the_lock_is_no_contender() {
    root_only!();
    let node = Node::new();
    let mut boot = node.bootstrap();
    let kubelet = node.kubelet_of(boot.pid());
    // Root opens the lock (an inherited descriptor, e.g. through a leaky helper) and hands it
    // to a process that drops to nobody and blocks in flock on it.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"exec 9<>"$LOCK"; exec setpriv --reuid=65534 --regid=65534 --clear-groups flock 9"#)
        .env("LOCK", node.scene.lock())
        .stdin(Stdio::null())
        .process_group(0);
    let mut blocked = Proc::spawn(&mut cmd);
    wait_until(SETTLE, "nobody blocked in flock on the lock", || {
        support::lock_state::blocked_on(&node.scene.lock())
            .contains(&blocked.pid())
            .then_some(())
    });
    node.assert_steady(&mut boot, kubelet, "nobody blocked on the lock");
    assert!(blocked.is_running());
}

/// Makes an untrusted state directory at a path.
type MakeDir = Box<dyn Fn(&Path)>;

#[test]
fn an_untrusted_state_directory_is_refused_with_one_line() {
    root_only!();
    let node = Node::new();
    let shared = node.lock_dir();
    let cases: Vec<(&str, PathBuf, MakeDir)> = vec![
        (
            "created by nobody",
            shared.join("by-nobody"),
            Box::new(|p: &Path| {
                fs::create_dir(p).expect("mkdir");
                nix::unistd::chown(p, Some(NOBODY.into()), Some(NOBODY.into())).expect("chown");
                chmod(p, 0o700);
            }),
        ),
        (
            "world-writable",
            node.scene.path().join("open"),
            Box::new(|p: &Path| {
                fs::create_dir(p).expect("mkdir");
                chmod(p, 0o777);
            }),
        ),
        (
            "a symlink",
            node.scene.path().join("link"),
            Box::new(|p: &Path| {
                std::os::unix::fs::symlink("/etc", p).expect("symlink");
            }),
        ),
    ];
    for (what, dir, make) in cases {
        make(&dir);
        let dir_text = dir.display().to_string();
        let out = node
            .scene
            .pivot(
                &["bootstrap"],
                &[],
                &[("KUBELET_PIVOT_STATE_DIR", &dir_text)],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap_or_else(|err| panic!("run bootstrap: {err}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("kubelet-pivot: error:"))
            .collect();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{what}: not refused as bad input\n{stderr}"
        );
        assert_eq!(errors.len(), 1, "{what}: not one error line\n{stderr}");
        assert!(
            errors[0].contains(&dir.display().to_string()),
            "{what}: the error does not name {}: {}",
            dir.display(),
            errors[0]
        );
        assert!(node.scene.starts().is_empty(), "{what}: a kubelet ran");
    }
}

#[test]
fn fencing_signals_only_a_proven_kubelet() {
    root_only!();
    let node = Node::new();
    let state = node.scene.state_dir();
    let mut victim = nobody_victim(&node);
    let pgid = victim.pid();
    let st = start_time(pgid);
    let record = |kubelet_pid: i32, start: u64, boot: &str| {
        format!(
            r#"{{"role":"bootstrap","generation":0,"pid":4194000,"startTime":1,"kubeletPid":{kubelet_pid},"kubeletStartTime":{start},"since":"x"{boot}}}"#
        )
    };
    let cases = [
        (
            "pid 0",
            record(0, 1, ""),
            "pids below 2 are never signalled",
        ),
        (
            "pid 1",
            record(1, 1, ""),
            "pids below 2 are never signalled",
        ),
        (
            "a negative pid",
            record(-1, 1, ""),
            "pids below 2 are never signalled",
        ),
        (
            "another boot",
            record(pgid, st, r#","bootId":"not-this-boot""#),
            "from another boot",
        ),
    ];
    // A first supervisor creates the state directory (and removes its record on a clean stop).
    let mut first = node.bootstrap();
    node.kubelet_of(first.pid());
    first.signal(Signal::SIGTERM);
    assert!(first.wait_exit(SETTLE).success());
    for (what, text, expect) in cases {
        write_private(&holder_path(&state), &text);
        let mut boot = node.bootstrap();
        let kubelet = node.kubelet_of(boot.pid());
        assert!(pid_alive(pgid), "{what}: nobody's group was killed");
        wait_until(SETTLE, "the refusal to fence", || {
            node.output_has(expect).then_some(())
        });
        node.assert_steady(&mut boot, kubelet, what);
        boot.signal(Signal::SIGTERM);
        assert!(boot.wait_exit(SETTLE).success());
    }
    // Control: the same record with this boot's id and the right start time is a proven kubelet
    // (the test would pass vacuously if fencing never ran).
    write_private(&holder_path(&state), &record(pgid, st, ""));
    let mut boot = node.bootstrap();
    wait_until(SETTLE, "the proven kubelet to be fenced", || {
        (!victim.is_running()).then_some(())
    });
    let kubelet = node.kubelet_of(boot.pid());
    node.assert_steady(&mut boot, kubelet, "after fencing");
}

#[test]
fn odd_files_in_the_state_directory_never_hang_status_or_the_supervisor() {
    root_only!();
    let node = Node::new();
    let state = node.scene.state_dir();
    let mut boot = node.bootstrap();
    node.kubelet_of(boot.pid());
    boot.signal(Signal::SIGTERM);
    assert!(boot.wait_exit(SETTLE).success());

    // The holder record as a FIFO: the supervisor starts, `status` says why it cannot read it.
    let holder = holder_path(&state);
    let _ = fs::remove_file(&holder);
    nix::unistd::mkfifo(&holder, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let status = timed_status(&node);
    assert!(
        status.contains("not a regular file") && status.contains("holder"),
        "status does not say why the holder record is unreadable:\n{status}"
    );
    // A huge claim file: read no further than its cap.
    let huge = claims_dir(&state).join("3-3.json");
    let f = fs::File::create(&huge).expect("create huge claim");
    f.set_len(1 << 30).expect("grow huge claim");
    chmod(&huge, 0o600);
    let status = timed_status(&node);
    assert!(status.contains("too large"), "{status}");

    let mut boot = node.bootstrap();
    let kubelet = node.kubelet_of(boot.pid());
    node.assert_steady(&mut boot, kubelet, "FIFO holder record and huge claim");
    let t = Instant::now();
    boot.signal(Signal::SIGTERM);
    assert!(boot.wait_exit(SETTLE).success());
    eprintln!(
        "SIGTERM to exit with a FIFO in the state directory: {:?}",
        t.elapsed()
    );
    assert!(huge.exists(), "the huge claim was deleted");
}

/// `status` (table) as root; must answer within a few seconds.
fn timed_status(node: &Node) -> String {
    let mut cmd = Command::new(support::pivot_bin());
    cmd.arg("status");
    support::node_paths(&mut cmd, &node.scene.lock(), &node.scene.config_dir());
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn status");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait status").is_some() {
            break;
        }
        if started.elapsed() > SETTLE {
            let _ = child.kill();
            panic!("status hung for {SETTLE:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("status output");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn status_as_another_user_says_what_it_cannot_read() {
    root_only!();
    let node = Node::new();
    let mut boot = node.bootstrap();
    node.kubelet_of(boot.pid());
    let bin = node.scene.path().join("kubelet-pivot");
    fs::copy(support::pivot_bin(), &bin).expect("copy binary");
    chmod(&bin, 0o755);
    let out = node.as_nobody(&format!(
        r#"exec "{}" status --lock-file "$LOCK" --dynamic-config-dir "{}""#,
        bin.display(),
        node.scene.config_dir().display()
    ));
    // One line that says it needs root, its own exit code, no table claiming an empty node.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("status needs root: cannot read")
            && stderr.contains("(permission denied); run it with sudo"),
        "status as nobody does not say why:\n{stderr}"
    );
    boot.signal(Signal::SIGTERM);
    assert!(boot.wait_exit(SETTLE).success());
}

/// Runs `bootstrap` with `--kubeconfig kubeconfig` and returns its one error line; asserts
/// it exits promptly, non-zero, without starting a kubelet.
fn refused_kubeconfig(node: &Node, kubeconfig: &Path) -> String {
    let text = kubeconfig.display().to_string();
    let started = Instant::now();
    let mut child = node
        .scene
        .pivot(&["bootstrap"], &[], &[("KUBELET_PIVOT_KUBECONFIG", &text)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bootstrap");
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > SETTLE {
            let _ = child.kill();
            panic!("--kubeconfig {text}: kubelet-pivot hung");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text} accepted:\n{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("kubelet-pivot: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(node.scene.starts().is_empty(), "a kubelet ran");
    errors[0].to_string()
}

#[test]
fn files_a_kubeconfig_names_are_checked_like_the_kubeconfig() {
    root_only!();
    let node = Node::new();
    let dir = node.scene.path().join("pki");
    fs::create_dir(&dir).expect("pki dir");
    let write = |name: &str, mode: u32| {
        let path = dir.join(name);
        fs::write(&path, "-----BEGIN X-----\n").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
    };
    write("ca.crt", 0o644);
    write("client.crt", 0o644);
    write("client.key", 0o600);
    write("open.key", 0o666);
    nix::unistd::mkfifo(
        &dir.join("fifo.crt"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    let kubeconfig = node.scene.path().join("kubelet.conf");
    for (ca, cert, key, expect) in [
        ("pki/ca.crt", "pki/client.crt", "pki/open.key", "client key"),
        ("pki/fifo.crt", "pki/client.crt", "pki/client.key", "fifo"),
        (
            "pki/ca.crt",
            "/dev/zero",
            "pki/client.key",
            "character device",
        ),
        (
            "pki/ca.crt",
            "pki/client.crt",
            "pki/gone.key",
            "does not exist",
        ),
    ] {
        fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    certificate-authority: {ca}\nusers:\n- name: u\n  user:\n    client-certificate: {cert}\n    client-key: {key}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
            ),
        )
        .expect("kubeconfig");
        let line = refused_kubeconfig(&node, &kubeconfig);
        assert!(
            line.contains(expect) && line.contains("kubelet.conf"),
            "{line}"
        );
    }
}

#[test]
fn a_fifo_or_device_as_kubeconfig_is_refused_at_once() {
    root_only!();
    let node = Node::new();
    let fifo = node.scene.path().join("kubeconfig.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    for (path, expect) in [
        (fifo.as_path(), "fifo"),
        (Path::new("/dev/zero"), "character device"),
    ] {
        let line = refused_kubeconfig(&node, path);
        let text = path.display().to_string();
        assert!(line.contains(&text) && line.contains(expect), "{line}");
    }
}
