//! systemd notifications: kubelet-pivot talks sd_notify over `NOTIFY_SOCKET` (a unix datagram
//! socket bound here in the scene's temp dir) and keeps that socket from the kubelet.

use crate::support;

use std::fs;
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;

use support::{signal_pid, stand_in_bin, wait_until, LogLine, Proc, Scene};

/// Deadline for things that should happen within a fraction of a second.
const DEADLINE: Duration = Duration::from_secs(5);
/// Largest datagram we accept; sd_notify messages are a few lines.
const MAX_DATAGRAM: usize = 4096;

/// The listening end of `NOTIFY_SOCKET`: every line received so far, in order.
struct Notifications {
    socket: UnixDatagram,
    path: PathBuf,
    lines: Vec<String>,
}

impl Notifications {
    fn bind(scene: &Scene) -> Notifications {
        let path = scene.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path)
            .unwrap_or_else(|err| panic!("failed to bind {}: {err}", path.display()));
        socket
            .set_nonblocking(true)
            .unwrap_or_else(|err| panic!("failed to make the notify socket non-blocking: {err}"));
        Notifications {
            socket,
            path,
            lines: Vec::new(),
        }
    }

    /// `("NOTIFY_SOCKET", path)` for [`Scene::pivot`]'s `extra_env`.
    fn env(&self) -> (&'static str, &str) {
        let path = self
            .path
            .to_str()
            .unwrap_or_else(|| panic!("socket path {} is not UTF-8", self.path.display()));
        ("NOTIFY_SOCKET", path)
    }

    /// Reads every datagram already queued, one entry per line.
    fn drain(&mut self) {
        let mut buf = [0u8; MAX_DATAGRAM];
        loop {
            match self.socket.recv(&mut buf) {
                Ok(len) => {
                    let text = String::from_utf8_lossy(&buf[..len]);
                    self.lines.extend(
                        text.lines()
                            .filter(|line| !line.is_empty())
                            .map(str::to_owned),
                    );
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => return,
                Err(err) => panic!("failed to read the notify socket: {err}"),
            }
        }
    }

    /// Waits for a line equal to `wanted`; returns its position among all lines.
    fn wait_for(&mut self, wanted: &str) -> usize {
        self.wait_for_match(&format!("notification {wanted:?}"), |line| line == wanted)
    }

    /// Waits for a line matching `pred`; returns the position of the first one.
    fn wait_for_match(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> usize {
        wait_until(DEADLINE, what, || {
            self.drain();
            self.lines.iter().position(|line| pred(line))
        })
    }
}

/// The first kubelet started by supervisor `pivot`.
fn kubelet_of(scene: &Scene, pivot: i32) -> LogLine {
    wait_until(
        DEADLINE,
        &format!("a kubelet of supervisor {pivot}"),
        || {
            scene
                .starts()
                .into_iter()
                .find(|line| line.num("ppid") == i128::from(pivot))
        },
    )
}

/// READY=1, then the running status naming the kubelet, then STOPPING=1 on SIGTERM; the
/// kubelet never sees NOTIFY_SOCKET.
#[test]
fn holder_reports_ready_running_and_stopping() {
    let scene = Scene::new();
    let mut notes = Notifications::bind(&scene);
    let mut pivot = scene.spawn(scene.pivot(&["bootstrap"], &[], &[notes.env()]));
    let kubelet = kubelet_of(&scene, pivot.pid());

    let ready = notes.wait_for("READY=1");
    let running = notes.wait_for(&format!("STATUS=running kubelet pid {}", kubelet.pid));
    assert!(
        ready < running,
        "READY=1 came after the running status: {:#?}",
        notes.lines
    );

    let environ = fs::read(format!("/proc/{}/environ", kubelet.pid))
        .unwrap_or_else(|err| panic!("failed to read the kubelet's environment: {err}"));
    let vars: Vec<String> = environ
        .split(|byte| *byte == 0)
        .map(|var| String::from_utf8_lossy(var).into_owned())
        .collect();
    assert!(
        vars.iter().any(|var| var.starts_with("STANDIN_LOG=")),
        "not the stand-in's environment: {vars:?}"
    );
    assert!(
        !vars.iter().any(|var| var.starts_with("NOTIFY_SOCKET=")),
        "the kubelet inherited NOTIFY_SOCKET: {vars:?}"
    );

    assert!(
        !notes.lines.iter().any(|line| line == "STOPPING=1"),
        "STOPPING=1 before any stop was asked for: {:#?}",
        notes.lines
    );
    assert!(pivot.signal(Signal::SIGTERM), "pivot exited by itself");
    let stopping = notes.wait_for("STOPPING=1");
    assert!(
        running < stopping,
        "notifications out of order: {:#?}",
        notes.lines
    );
    let status = pivot.wait_exit(DEADLINE);
    assert!(status.success(), "pivot exited with {status}");
}

/// A bootstrap that finds the lock held by a self-hosted kubelet stands by: READY=1 and a
/// status naming the holder, without starting a kubelet.
#[test]
fn standing_by_bootstrap_reports_ready_and_the_holder() {
    let scene = Scene::new();
    let holder = scene.spawn(scene.pivot(&["self-hosted", "--generation", "2"], &[], &[]));
    let holder_kubelet = kubelet_of(&scene, holder.pid());

    let mut notes = Notifications::bind(&scene);
    let mut standby = scene.spawn(scene.pivot(&["bootstrap"], &[], &[notes.env()]));
    let ready = notes.wait_for("READY=1");
    let standing_by = notes.wait_for(&format!(
        "STATUS=standing by: lock held by self-hosted gen 2 pid {}",
        holder.pid()
    ));
    assert!(
        ready < standing_by,
        "READY=1 came after the status: {:#?}",
        notes.lines
    );
    let standby_starts: Vec<LogLine> = scene
        .starts()
        .into_iter()
        .filter(|line| line.num("ppid") == i128::from(standby.pid()))
        .collect();
    assert!(
        standby_starts.is_empty(),
        "the standing-by bootstrap started a kubelet: {standby_starts:#?}"
    );
    assert_eq!(scene.running_kubelets(), vec![holder_kubelet.pid]);

    assert!(standby.signal(Signal::SIGTERM), "standby exited by itself");
    let stopping = notes.wait_for("STOPPING=1");
    assert!(standing_by < stopping, "{:#?}", notes.lines);
    let status = standby.wait_exit(DEADLINE);
    assert!(
        status.success(),
        "standing-by bootstrap exited with {status}"
    );
}

/// Yield to a plain kubelet (util-linux `flock LOCK kubelet`) and take over again: each step
/// is reported as a STATUS, READY=1 only once.
#[test]
fn yield_and_takeover_are_reported() {
    let scene = Scene::new();
    let mut notes = Notifications::bind(&scene);
    let pivot = scene.spawn(scene.pivot(&["bootstrap"], &[], &[notes.env()]));
    let first = kubelet_of(&scene, pivot.pid());
    let running_first = notes.wait_for(&format!("STATUS=running kubelet pid {}", first.pid));

    let mut flock = scene.stand_in_command("flock");
    flock.arg(scene.lock()).arg(stand_in_bin());
    let flock = Proc::spawn(&mut flock);
    let plain = kubelet_of(&scene, flock.pid());
    let stopping_first = notes.wait_for_match("the stopping status", |line| {
        line.starts_with(&format!("STATUS=stopping kubelet pid {}", first.pid))
    });
    let standing_by = notes.wait_for_match("a standing-by status", |line| {
        line.starts_with("STATUS=standing by")
    });
    assert!(
        running_first < stopping_first && stopping_first < standing_by,
        "statuses out of order: {:#?}",
        notes.lines
    );

    assert!(
        signal_pid(plain.pid, Signal::SIGTERM),
        "the plain kubelet exited by itself"
    );
    let second = wait_until(DEADLINE, "the bootstrap's next kubelet", || {
        scene
            .starts()
            .into_iter()
            .find(|line| line.num("ppid") == i128::from(pivot.pid()) && line.pid != first.pid)
    });
    let running_second = notes.wait_for(&format!("STATUS=running kubelet pid {}", second.pid));
    assert!(standing_by < running_second, "{:#?}", notes.lines);
    let readies = notes.lines.iter().filter(|line| *line == "READY=1").count();
    assert_eq!(
        readies, 1,
        "READY=1 sent {readies} times: {:#?}",
        notes.lines
    );
    scene.assert_no_overlap();
}

/// With WATCHDOG_USEC set, WATCHDOG=1 arrives at half the interval (not faster, and often
/// enough for systemd), and the kubelet does not inherit the watchdog variables.
#[test]
fn watchdog_is_fed_at_half_the_interval() {
    let scene = Scene::new();
    let mut notes = Notifications::bind(&scene);
    let started = std::time::Instant::now();
    let pivot = scene.spawn(scene.pivot(
        &["bootstrap"],
        &[],
        &[notes.env(), ("WATCHDOG_USEC", "200000")],
    ));
    let kubelet = kubelet_of(&scene, pivot.pid());
    let pings = |notes: &Notifications| notes.lines.iter().filter(|l| *l == "WATCHDOG=1").count();
    wait_until(DEADLINE, "five WATCHDOG=1 pings", || {
        notes.drain();
        (pings(&notes) >= 5).then_some(())
    });
    let elapsed = started.elapsed();
    // The first ping is immediate, then one per 100 ms: five pings take >= 400 ms.
    assert!(
        elapsed >= std::time::Duration::from_millis(380),
        "pings came faster than half of WATCHDOG_USEC: 5 in {elapsed:?}"
    );
    let environ = fs::read(format!("/proc/{}/environ", kubelet.pid))
        .unwrap_or_else(|err| panic!("failed to read the kubelet's environment: {err}"));
    assert!(
        !String::from_utf8_lossy(&environ).contains("WATCHDOG_USEC="),
        "the kubelet inherited WATCHDOG_USEC"
    );
}

/// Under journald (`JOURNAL_STREAM` names stderr), plain lines carry a syslog priority prefix and
/// no timestamp; elsewhere they start with a timestamp. A `JOURNAL_STREAM` that names another
/// file (inherited from a parent whose stderr was the journal) must not switch formats.
#[test]
fn journal_stream_on_stderr_gives_priority_prefixed_lines() {
    use std::os::unix::fs::MetadataExt;
    use std::process::Stdio;

    let scene = Scene::new();
    let run = |name: &str, journal: bool| -> String {
        let path = scene.path().join(name);
        let file = fs::File::create(&path).expect("log file");
        let meta = file.metadata().expect("stat log file");
        let stream = if journal {
            format!("{}:{}", meta.dev(), meta.ino())
        } else {
            format!("{}:{}", meta.dev(), meta.ino() + 1)
        };
        let mut cmd = scene.pivot(&["bootstrap"], &[], &[("JOURNAL_STREAM", &stream)]);
        cmd.stdout(Stdio::null()).stderr(file);
        let mut p = Proc::spawn(&mut cmd);
        wait_until(DEADLINE, "the kubelet to run", || {
            let text = fs::read_to_string(&path).unwrap_or_default();
            text.contains("running kubelet pid").then_some(())
        });
        p.signal(Signal::SIGTERM);
        assert!(p.wait_exit(DEADLINE).success());
        fs::read_to_string(&path).expect("read log")
    };
    let journal = run("journal.log", true);
    // The kubelet shares stderr; its lines are its own business.
    let ours = |l: &&str| !l.starts_with("stand-in kubelet");
    let lines: Vec<&str> = journal.lines().filter(ours).collect();
    assert!(!lines.is_empty());
    for line in &lines {
        assert!(
            line.starts_with("<6> INFO")
                || line.starts_with("<4> WARN")
                || line.starts_with("<3>ERROR"),
            "not priority-prefixed: {line:?}\n{journal}"
        );
    }
    let plain = run("plain.log", false);
    for line in plain.lines().filter(ours) {
        assert!(
            line.starts_with("20") && line.contains('T'),
            "plain line without a timestamp: {line:?}"
        );
    }
}
