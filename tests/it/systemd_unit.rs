//! The shipped unit `systemd/kubelet-pivot.service` under a real systemd: start waits for READY
//! and runs the kubelet, the watchdog is fed (and enforced), a SIGKILLed kubelet-pivot is
//! restarted without two kubelets at once, a pivot to a self-hosted supervisor shows in
//! `systemctl status`, `systemctl reload` restarts the kubelet in place, `systemctl stop`
//! stops the kubelet gracefully and exits cleanly, and a kubelet-pivot that fails at every
//! start is restarted past systemd's default start limit until the cause is fixed.
//!
//! systemd runs as PID 1 of a sandbox: new PID, mount, cgroup, UTS, IPC and network namespaces
//! (`unshare`), driven with `nsenter -m -p systemctl ...` over systemd's private socket (no
//! D-Bus needed; `systemctl start`/`stop` block until READY=1 / the unit is down) and ended
//! with SIGKILL of PID 1 from outside, which kills every process of the sandbox.
//!
//! The sandbox is closed on purpose. Measured on Debian 12 (systemd 252): PID 1 booted to
//! `multi-user.target` in a plain `unshare --pid --mount` namespace acts on the host, because
//! the filesystems are shared: `systemd-tmpfiles --boot --remove` (sysinit.target) empties the
//! host's /tmp, PID 1 remounts the host's /sys/fs/cgroup tmpfs read-only and adds controller
//! directories and cgroups to it, creates /dev/log, /dev/initctl and a persistent journal on the
//! host, and starts the host's enabled services (postgresql and getty here). So here:
//!
//! * every inherited mount is made read-only (a per-mount flag: `remount,bind,ro`), /proc/sys
//!   too; /run, /tmp, /dev, /etc/systemd/system and /etc/default are private tmpfs; only the
//!   scene's temp dir stays writable, at its own path (the binaries stay visible, read-only);
//! * systemd gets its own cgroup2 tree: a cgroup made for the test, entered before
//!   `unshare --cgroup`, mounted at the sandbox's /sys/fs/cgroup, removed at the end;
//! * PID 1 boots an empty target (plus journald) instead of the default target, and the test's
//!   drop-in sets `DefaultDependencies=no`, so sysinit.target is never started;
//!   network-online.target is masked (a wait-online service could stall the start).
//!
//! The unit file is copied verbatim; the drop-in `kubelet-pivot.service.d/test.conf` only
//! points ExecStart at the binaries under test, shortens WatchdogSec and records every exit
//! (ExecStopPost). Flags and KUBELET_ARGS come from /etc/default/kubelet-pivot, the unit's own
//! EnvironmentFile. The kubelet is the stand-in (`examples/stand_in_kubelet/`), with a
//! grandchild in its process group and a SIGTERM grace period.
//!
//! Needs root, systemd (/lib/systemd/systemd), util-linux (`unshare`, `nsenter`, `setpriv`)
//! and a cgroup2 hierarchy. Not root: the test prints why it is skipped. Root without the
//! rest: the test fails (CI is root and `.ci/run` installs the tools).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::lock_state::holder_record;
use support::{
    node_paths, now_ns, pivot_bin, poll_until, signal_pid, stand_in_bin, wait_until, write_file,
    LogLine, Proc, Scene,
};

/// The unit under test, as shipped.
const UNIT_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/kubelet-pivot.service");
const UNIT: &str = "kubelet-pivot.service";
/// What PID 1 boots: journald and nothing else.
const BOOT_TARGET: &str = "kubelet-pivot-test.target";
/// Where distributions install systemd.
const SYSTEMD_PATHS: [&str; 2] = ["/lib/systemd/systemd", "/usr/lib/systemd/systemd"];
/// Tools the test runs, looked up in PATH.
const TOOLS: [&str; 6] = [
    "systemctl",
    "journalctl",
    "unshare",
    "nsenter",
    "setpriv",
    "timeout",
];
/// Prefix of the cgroups made for the sandboxes (stale ones are removed at the next start).
const CGROUP_PREFIX: &str = "kubelet-pivot-systemd-test-";

/// WatchdogSec of the test drop-in; kubelet-pivot pings every second.
const WATCHDOG_SEC: u64 = 2;
/// How long the watchdog must not fire: well over WatchdogSec.
const WATCHDOG_RUN: Duration = Duration::from_secs(5);
/// kubelet-pivot's default --stop-timeout, which TimeoutStopSec must exceed.
const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// The stand-in's SIGTERM grace period, so a graceful stop takes visible time.
const TERM_DELAY_MS: u64 = 200;
/// Deadline for states reached in well under a second (or one RestartSec); generous for CI.
const SETTLE: Duration = Duration::from_secs(15);
/// Deadline for one systemctl or journalctl call (`timeout` kills it after that).
const COMMAND_TIMEOUT_SECS: u32 = 30;
/// How often systemctl is polled (each poll starts nsenter and systemctl).
const SYSTEMCTL_POLL: Duration = Duration::from_millis(25);
/// systemd's default StartLimitBurst (DefaultStartLimitBurst=5, within 10 s); the unit's
/// StartLimitIntervalSec=0 turns the limit off.
const DEFAULT_START_LIMIT_BURST: u32 = 5;
/// Deadline for more than that many failed starts, one per RestartSec (1 s).
const START_LIMIT_RUN: Duration = Duration::from_secs(30);

/// Runs as PID 1 of the sandbox (see the module doc), then execs systemd.
/// `$1`: systemd, `$2`: the scene dir (stays writable), `$3`...: dirs of the binaries.
const SANDBOX_SCRIPT: &str = r#"set -eu
systemd=$1
scene=$2
shift 2
# Every inherited mount read-only. remount,bind changes this mount only, never the
# filesystem shared with the host. /proc is new (--mount-proc) and /dev is replaced.
for mp in $(awk '{ print $5 }' /proc/self/mountinfo | sort -u); do
    case $mp in /proc | /proc/* | /dev | /dev/*) continue ;; esac
    mount -o remount,bind,ro "$mp" || echo "sandbox: cannot make $mp read-only" >&2
done
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
# Private /run and /tmp; the scene and the binaries stay visible at their own paths.
mount -t tmpfs -o mode=0755,nosuid,nodev sandbox-run /run
mkdir /run/keep
i=0
for dir in "$scene" "$@"; do
    mkdir "/run/keep/$i"
    mount --bind "$dir" "/run/keep/$i"
    i=$((i + 1))
done
mount -t tmpfs -o mode=1777,nosuid,nodev sandbox-tmp /tmp
i=0
for dir in "$scene" "$@"; do
    mkdir -p "$dir"
    mount --bind "/run/keep/$i" "$dir"
    umount "/run/keep/$i"
    rmdir "/run/keep/$i"
    i=$((i + 1))
done
rmdir /run/keep
mount -o remount,bind,rw "$scene"
# Private /dev: a few device nodes, and a console that is a file in the scene.
mount -t tmpfs -o mode=0755,nosuid sandbox-dev /dev
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/full c 1 7
mknod -m 666 /dev/random c 1 8
mknod -m 666 /dev/urandom c 1 9
mknod -m 666 /dev/tty c 5 0
: >"$scene/console.log"
: >/dev/console
mount --bind "$scene/console.log" /dev/console
# Our own cgroup2 tree: the cgroup namespace is rooted at the test's cgroup.
mount -t cgroup2 -o nosuid,nodev,noexec sandbox-cgroup /sys/fs/cgroup
# Only our units, and our /etc/default/kubelet-pivot.
mount -t tmpfs -o mode=0755 sandbox-units /etc/systemd/system
mount -t tmpfs -o mode=0755 sandbox-default /etc/default
cp "$scene/etc-default-kubelet-pivot" /etc/default/kubelet-pivot
mkdir -p /run/systemd/system
cp -R "$scene/units/." /run/systemd/system/
exec env -i container=kubelet-pivot-test "$systemd" --system --unit=kubelet-pivot-test.target
"#;

/// ExecStopPost of the drop-in: one line per exit of kubelet-pivot, in the scene.
const STOP_POST_SCRIPT: &str = r#"echo "result=$SERVICE_RESULT code=$EXIT_CODE status=$EXIT_STATUS" >>"$(dirname "$0")/stop-post.log"
"#;

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

fn systemd_binary() -> Option<PathBuf> {
    SYSTEMD_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup` or, on hybrid hosts,
/// `/sys/fs/cgroup/unified`), from /proc/self/mountinfo.
fn cgroup2_mount() -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let mount_point = mount.split_whitespace().nth(4)?;
        (fs.split_whitespace().next()? == "cgroup2" && !mount_point.contains('\\'))
            .then(|| PathBuf::from(mount_point))
    })
}

/// Why the test cannot run here, if it cannot.
fn skip_reason() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some(
            "not root: running systemd as PID 1 of a sandbox needs CAP_SYS_ADMIN".to_owned(),
        );
    }
    if systemd_binary().is_none() {
        return Some(format!(
            "systemd is not installed (none of {SYSTEMD_PATHS:?}; Debian: apt-get install systemd)"
        ));
    }
    if let Some(tool) = TOOLS.iter().find(|tool| find_in_path(tool).is_none()) {
        return Some(format!(
            "`{tool}` not found in PATH (systemd, util-linux, coreutils)"
        ));
    }
    let Some(cgroup2) = cgroup2_mount() else {
        return Some("no cgroup2 hierarchy mounted: systemd needs its own cgroup tree".to_owned());
    };
    // Unique per call: the tests of this file probe from the same process, maybe at once.
    static PROBES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = cgroup2.join(format!("{CGROUP_PREFIX}probe-{}-{n}", std::process::id()));
    if let Err(err) = fs::create_dir(&probe) {
        return Some(format!(
            "cannot create a cgroup under {}: {err}",
            cgroup2.display()
        ));
    }
    let _ = fs::remove_dir(&probe);
    None
}

/// `(pid, ppid)` of every process, from the host's /proc.
fn host_processes() -> Vec<(i32, i32)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            let mut fields = rest.split_whitespace();
            let state = fields.next()?;
            let ppid = fields.next()?.parse().ok()?;
            (state != "Z" && state != "X").then_some((pid, ppid))
        })
        .collect()
}

/// NUL-separated `/proc/PID/<file>` (cmdline, environ) as strings; empty if unreadable.
fn proc_strings(pid: i32, file: &str) -> Vec<String> {
    fs::read(format!("/proc/{pid}/{file}"))
        .map(|bytes| {
            bytes
                .split(|byte| *byte == 0)
                .filter(|part| !part.is_empty())
                .map(|part| String::from_utf8_lossy(part).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Live processes (anywhere on the host) whose command line or environment mentions `dir`.
fn processes_mentioning(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let me = i32::try_from(std::process::id()).expect("pid fits in i32");
    host_processes()
        .into_iter()
        .filter(|(pid, _)| *pid != me)
        .filter_map(|(pid, _)| {
            let cmdline = proc_strings(pid, "cmdline");
            let mentions = cmdline.iter().any(|arg| arg.contains(&needle))
                || proc_strings(pid, "environ")
                    .iter()
                    .any(|var| var.contains(&needle));
            mentions.then(|| format!("pid {pid}: {}", cmdline.join(" ")))
        })
        .collect()
}

/// A process of the sandbox: its pid on the host and in the sandbox, and its argv[0].
#[derive(Debug, Clone)]
struct SandboxProc {
    host: i32,
    ns: i32,
    argv0: String,
}

/// `root` and every cgroup under it, children before their parents.
fn cgroup_tree(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.to_owned()];
    let mut at = 0;
    while at < dirs.len() {
        if let Ok(entries) = fs::read_dir(&dirs[at]) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
                    .map(|entry| entry.path()),
            );
        }
        at += 1;
    }
    dirs.reverse();
    dirs
}

fn cgroup_has_processes(root: &Path) -> bool {
    cgroup_tree(root).iter().any(|dir| {
        fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|procs| !procs.trim().is_empty())
    })
}

/// Removes a cgroup tree without processes (rmdir, deepest first).
fn remove_cgroup_tree(root: &Path) -> Result<(), String> {
    for dir in cgroup_tree(root) {
        match fs::remove_dir(&dir) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(format!("cannot remove cgroup {}: {err}", dir.display())),
        }
    }
    Ok(())
}

/// Best effort: cgroups left by a test run that was killed before it could clean up.
fn remove_stale_cgroups(cgroup2: &Path) {
    let Ok(entries) = fs::read_dir(cgroup2) else {
        return;
    };
    for entry in entries.flatten() {
        let stale = entry
            .file_name()
            .to_string_lossy()
            .starts_with(CGROUP_PREFIX)
            && !cgroup_has_processes(&entry.path());
        if stale {
            let _ = remove_cgroup_tree(&entry.path());
        }
    }
}

/// systemd as PID 1 of a sandbox; SIGKILLed (with everything in it) on drop.
struct Sandbox {
    dir: PathBuf,
    /// `setpriv --pdeathsig KILL -- sh -c '... exec unshare --kill-child ...'`: if the test dies,
    /// unshare dies, and with it the sandbox's PID 1.
    unshare: Proc,
    /// Host pid of the sandbox's PID 1 (systemd).
    init: i32,
    /// `/proc/<init>/ns/pid`, to tell the sandbox's processes from reused host pids.
    pid_ns: PathBuf,
    cgroup: PathBuf,
    torn_down: bool,
}

impl Sandbox {
    /// Writes `units` (name, contents; `None` masks the unit) and the script into the scene,
    /// starts the sandbox and waits until systemd is up.
    fn boot(scene: &Scene, units: &[(&str, Option<String>)], default_env: &str) -> Sandbox {
        let dir = scene.path().to_owned();
        let units_dir = dir.join("units");
        for (name, contents) in units {
            let path = units_dir.join(name);
            match contents {
                Some(text) => write_file(&path, text),
                None => {
                    fs::create_dir_all(&units_dir)
                        .unwrap_or_else(|err| panic!("create {}: {err}", units_dir.display()));
                    symlink("/dev/null", &path)
                        .unwrap_or_else(|err| panic!("mask {}: {err}", path.display()));
                }
            }
        }
        write_file(&dir.join("etc-default-kubelet-pivot"), default_env);
        let script = dir.join("sandbox.sh");
        write_file(&script, SANDBOX_SCRIPT);

        let cgroup2 = cgroup2_mount().expect("cgroup2 mount (checked by skip_reason)");
        remove_stale_cgroups(&cgroup2);
        let cgroup = cgroup2.join(format!(
            "{CGROUP_PREFIX}{}-{}",
            std::process::id(),
            now_ns()
        ));
        fs::create_dir(&cgroup)
            .unwrap_or_else(|err| panic!("create cgroup {}: {err}", cgroup.display()));

        let output = dir.join("sandbox.out");
        let out = File::create(&output)
            .unwrap_or_else(|err| panic!("create {}: {err}", output.display()));
        let err_out = out
            .try_clone()
            .unwrap_or_else(|err| panic!("dup {}: {err}", output.display()));
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "--", "sh", "-c"])
            .arg(
                r#"echo $$ >"$1/cgroup.procs" && shift && exec unshare --kill-child=SIGKILL \
                    --cgroup --pid --fork --mount --mount-proc --uts --ipc --net \
                    --propagation private -- sh "$@""#,
            )
            .arg("sh")
            .arg(&cgroup)
            .arg(&script)
            .arg(systemd_binary().expect("systemd (checked by skip_reason)"))
            .arg(&dir);
        for bin in [pivot_bin(), stand_in_bin()] {
            cmd.arg(bin.parent().expect("binary has a parent dir"));
        }
        cmd.stdin(Stdio::null()).stdout(out).stderr(err_out);
        let unshare = Proc::spawn(&mut cmd);
        let launcher = unshare.pid();
        let init = wait_until(SETTLE, "unshare to fork the sandbox's PID 1", || {
            host_processes()
                .into_iter()
                .find(|(_, ppid)| *ppid == launcher)
                .map(|(pid, _)| pid)
        });
        let pid_ns = fs::read_link(format!("/proc/{init}/ns/pid"))
            .unwrap_or_else(|err| panic!("read the pid namespace of pid {init}: {err}"));
        let mut sandbox = Sandbox {
            dir,
            unshare,
            init,
            pid_ns,
            cgroup,
            torn_down: false,
        };
        let state = poll_until(
            SETTLE,
            SYSTEMCTL_POLL,
            "systemd in the sandbox to finish booting",
            || {
                if !sandbox.unshare.is_running() {
                    panic!(
                        "the sandbox exited during boot:\n{}",
                        fs::read_to_string(&output).unwrap_or_default()
                    );
                }
                let out = sandbox.systemctl(&["is-system-running"]);
                let state = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                matches!(state.as_str(), "running" | "degraded").then_some(state)
            },
        );
        if state == "degraded" {
            eprintln!(
                "warning: systemd in the sandbox is degraded:\n{}",
                sandbox.systemctl_text(&["--failed", "--no-pager"])
            );
        }
        sandbox
    }

    /// `timeout ... nsenter -t <init> -m -p -- <program> <args>`.
    fn nsenter(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("timeout");
        cmd.args([
            "-k",
            "2",
            &COMMAND_TIMEOUT_SECS.to_string(),
            "nsenter",
            "-t",
        ])
        .arg(self.init.to_string())
        .args(["-m", "-p", "--"])
        .arg(program)
        .env("SYSTEMD_PAGER", "")
        .env("SYSTEMD_COLORS", "0")
        .stdin(Stdio::null());
        cmd
    }

    fn systemctl(&self, args: &[&str]) -> Output {
        self.nsenter("systemctl")
            .args(args)
            .output()
            .unwrap_or_else(|err| panic!("failed to run systemctl {args:?}: {err}"))
    }

    /// stdout and stderr of `systemctl args`, whatever its exit status.
    fn systemctl_text(&self, args: &[&str]) -> String {
        let out = self.systemctl(args);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// Runs `systemctl args`, panicking (with its output) if it fails.
    fn systemctl_ok(&self, args: &[&str]) -> String {
        let out = self.systemctl(args);
        assert!(
            out.status.success(),
            "systemctl {args:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `systemctl show UNIT` as a map.
    fn show(&self, unit: &str) -> BTreeMap<String, String> {
        self.systemctl_ok(&["show", unit])
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect()
    }

    /// The whole journal of the sandbox (short-monotonic), or why it cannot be read.
    fn journal(&self) -> String {
        match self
            .nsenter("journalctl")
            .args(["--no-pager", "-o", "short-monotonic"])
            .output()
        {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(err) => format!("(journalctl failed: {err})"),
        }
    }

    /// Every live process of the sandbox.
    fn processes(&self) -> Vec<SandboxProc> {
        host_processes()
            .into_iter()
            .filter(|(pid, _)| {
                fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|ns| ns == self.pid_ns)
            })
            .filter_map(|(host, _)| {
                let status = fs::read_to_string(format!("/proc/{host}/status")).ok()?;
                let ns = status
                    .lines()
                    .find_map(|line| line.strip_prefix("NSpid:"))?
                    .split_whitespace()
                    .last()?
                    .parse()
                    .ok()?;
                let argv0 = proc_strings(host, "cmdline").into_iter().next()?;
                Some(SandboxProc { host, ns, argv0 })
            })
            .collect()
    }

    /// Host pid of the sandbox's process `ns`.
    fn host_pid(&self, ns: i32) -> i32 {
        self.processes()
            .into_iter()
            .find(|proc| proc.ns == ns)
            .map(|proc| proc.host)
            .unwrap_or_else(|| panic!("no live process with pid {ns} in the sandbox"))
    }

    /// Sandbox pids of live processes running `program`, sorted.
    fn running(&self, program: &Path) -> Vec<i32> {
        let program = program.to_string_lossy();
        let mut pids: Vec<i32> = self
            .processes()
            .into_iter()
            .filter(|proc| proc.argv0 == program)
            .map(|proc| proc.ns)
            .collect();
        pids.sort_unstable();
        pids
    }

    /// Replaces the sandbox's /etc/default/kubelet-pivot (read at each start of the unit).
    fn set_default_env(&self, text: &str) {
        let staged = self.dir.join("etc-default-kubelet-pivot");
        write_file(&staged, text);
        let out = self
            .nsenter("cp")
            .arg(&staged)
            .arg("/etc/default/kubelet-pivot")
            .output()
            .unwrap_or_else(|err| panic!("failed to run cp in the sandbox: {err}"));
        assert!(
            out.status.success(),
            "cp to the sandbox's /etc/default failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Lines of the drop-in's ExecStopPost log, one per exit of kubelet-pivot.
    fn stop_posts(&self) -> Vec<String> {
        fs::read_to_string(self.dir.join("stop-post.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn dump(&self) {
        let file = |name: &str| fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        eprintln!(
            "---- systemctl status {UNIT} ----\n{}\n---- journal ----\n{}\n---- sandbox.out ----\n{}\
             \n---- console.log ----\n{}\n---- stop-post.log ----\n{}\n---- self-hosted.out ----\n{}",
            self.systemctl_text(&["status", "--no-pager", "--full", UNIT]),
            self.journal(),
            file("sandbox.out"),
            file("console.log"),
            file("stop-post.log"),
            file("self-hosted.out"),
        );
    }

    /// SIGKILLs PID 1 (the kernel then kills every process of the sandbox), waits for it all to
    /// be gone and removes the cgroup.
    fn teardown(&mut self) -> Result<(), String> {
        self.torn_down = true;
        // Not reaped until unshare exits, so the pid still names PID 1 (the check guards reuse).
        if fs::read_link(format!("/proc/{}/ns/pid", self.init)).is_ok_and(|ns| ns == self.pid_ns) {
            signal_pid(self.init, Signal::SIGKILL);
        }
        let start = Instant::now();
        while self.unshare.is_running() || cgroup_has_processes(&self.cgroup) {
            if start.elapsed() > SETTLE {
                return Err(format!(
                    "the sandbox (PID 1 = host pid {}) is still running {SETTLE:?} after SIGKILL",
                    self.init
                ));
            }
            thread::sleep(Duration::from_millis(10));
        }
        remove_cgroup_tree(&self.cgroup)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.torn_down {
            return;
        }
        if thread::panicking() {
            self.dump();
        }
        if let Err(err) = self.teardown() {
            eprintln!("sandbox teardown: {err}");
        }
    }
}

/// The test drop-in: the binaries under test, test-sized timers, an exit log, and no
/// sysinit.target.
fn drop_in(scene: &Scene) -> String {
    let quoted = |path: &Path| format!("\"{}\"", path.display().to_string().replace('%', "%%"));
    let env = |key: &str, value: &str| format!("\"{key}={}\"", value.replace('%', "%%"));
    let stop_post = scene.path().join("stop-post.sh");
    write_file(&stop_post, STOP_POST_SCRIPT);
    format!(
        "# Test sandbox only (tests/it/systemd_unit.rs).\n\
         [Unit]\n\
         # sysinit.target would run tmpfiles, sysctl, udev... on filesystems shared with the host.\n\
         DefaultDependencies=no\n\
         \n\
         [Service]\n\
         ExecStart=\n\
         ExecStart={pivot} bootstrap -- {stand_in} $KUBELET_ARGS\n\
         Environment={log} {probe} {delay} {grandchild}\n\
         WatchdogSec={WATCHDOG_SEC}s\n\
         ExecStopPost=/bin/sh {stop_post}\n",
        pivot = quoted(&pivot_bin()),
        stand_in = quoted(&stand_in_bin()),
        log = env("STANDIN_LOG", &scene.log().display().to_string()),
        probe = env("STANDIN_OVERLAP_PROBE", &scene.probe().display().to_string()),
        delay = env("STANDIN_TERM_DELAY_MS", &TERM_DELAY_MS.to_string()),
        grandchild = env("STANDIN_SPAWN_GRANDCHILD", "1"),
        stop_post = quoted(&stop_post),
    )
}

/// /etc/default/kubelet-pivot: the node paths as KUBELET_PIVOT_* flags, and KUBELET_ARGS.
fn default_env(scene: &Scene) -> String {
    format!(
        "KUBELET_PIVOT_LOCK_FILE=\"{}\"\nKUBELET_PIVOT_DYNAMIC_CONFIG_DIR=\"{}\"\nKUBELET_ARGS=\"{KUBELET_ARGS}\"\n",
        scene.lock().display(),
        scene.config_dir().display()
    )
}

/// The kubelet flags given in /etc/default/kubelet-pivot.
const KUBELET_ARGS: &str = "--node-ip=10.0.0.1 --v=2";

/// A kubelet of supervisor `sup` (sandbox pids) not in `old`, and its grandchild.
fn kubelet_of(scene: &Scene, sup: i32, old: &[i32]) -> (LogLine, i32) {
    wait_until(
        SETTLE,
        &format!("a new kubelet of supervisor {sup} and its grandchild"),
        || {
            let start = scene
                .starts()
                .into_iter()
                .find(|line| line.ppid() == sup && !old.contains(&line.pid))?;
            let grandchild = scene
                .events("grandchild")
                .into_iter()
                .find(|line| line.ppid() == start.pid)?;
            Some((start, grandchild.pid))
        },
    )
}

/// Waits until exactly `expected` stand-ins (kubelet and grandchild) run in the sandbox.
fn wait_stand_ins(sandbox: &Sandbox, expected: &[i32], what: &str) {
    let mut expected = expected.to_vec();
    expected.sort_unstable();
    let stand_in = stand_in_bin();
    poll_until(SETTLE, SYSTEMCTL_POLL, what, || {
        (sandbox.running(&stand_in) == expected).then_some(())
    });
}

/// Events of kubelet `pid` after its start (`term`, `stop`, `crash`...).
fn kubelet_events(scene: &Scene, pid: i32) -> Vec<String> {
    scene
        .read_log()
        .into_iter()
        .filter(|line| line.pid == pid && line.event != "start")
        .map(|line| line.event)
        .collect()
}

fn prop<'a>(props: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    props
        .get(key)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("systemctl show has no {key}: {props:#?}"))
}

/// Waits until the unit runs kubelet-pivot `MainPID` with NRestarts `restarts` (any when
/// `None`) and the status `running kubelet pid K`, K a kubelet of that main pid not in `old`; returns
/// (main pid, kubelet start line, grandchild pid).
fn wait_running(
    sandbox: &Sandbox,
    scene: &Scene,
    restarts: Option<u32>,
    old: &[i32],
) -> (i32, LogLine, i32) {
    let main: i32 = poll_until(
        SETTLE,
        SYSTEMCTL_POLL,
        &format!("{UNIT} to run with NRestarts={restarts:?}"),
        || {
            let props = sandbox.show(UNIT);
            let running = prop(&props, "ActiveState") == "active"
                && prop(&props, "SubState") == "running"
                && restarts.is_none_or(|n| prop(&props, "NRestarts") == n.to_string());
            let main: i32 = prop(&props, "MainPID").parse().ok()?;
            (running && main != 0).then_some(main)
        },
    );
    let (kubelet, grandchild) = kubelet_of(scene, main, old);
    let status = format!("running kubelet pid {}", kubelet.pid);
    poll_until(
        SETTLE,
        SYSTEMCTL_POLL,
        &format!("StatusText={status:?}"),
        || (prop(&sandbox.show(UNIT), "StatusText") == status).then_some(()),
    );
    (main, kubelet, grandchild)
}

/// `nsenter` into the sandbox's mount and PID namespaces running
/// `kubelet-pivot self-hosted --generation 1` with the stand-in, output to `self-hosted.out`.
fn self_hosted_command(sandbox: &Sandbox, scene: &Scene) -> Command {
    let out_path = scene.path().join("self-hosted.out");
    let out = File::create(&out_path)
        .unwrap_or_else(|err| panic!("create {}: {err}", out_path.display()));
    let err_out = out
        .try_clone()
        .unwrap_or_else(|err| panic!("dup {}: {err}", out_path.display()));
    let mut cmd = Command::new("nsenter");
    cmd.arg("-t")
        .arg(sandbox.init.to_string())
        .args(["-m", "-p", "--"])
        .arg(pivot_bin())
        .args(["self-hosted", "--generation", "1"]);
    node_paths(&mut cmd, &scene.lock(), &scene.config_dir())
        .arg("--")
        .arg(stand_in_bin());
    for (key, _) in std::env::vars_os() {
        let key_text = key.to_string_lossy();
        if key_text.starts_with("KUBELET_PIVOT_")
            || key_text.starts_with("WATCHDOG_")
            || key_text == "NOTIFY_SOCKET"
        {
            cmd.env_remove(&key);
        }
    }
    cmd.envs(scene.stand_in_env())
        .env("STANDIN_TERM_DELAY_MS", TERM_DELAY_MS.to_string())
        .env("STANDIN_SPAWN_GRANDCHILD", "1")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err_out);
    cmd
}

/// One sandbox at a time: each boot removes the empty cgroups of earlier runs, which a sandbox
/// booting at the same moment could still be about to enter.
static ONE_SANDBOX: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_sandbox() -> std::sync::MutexGuard<'static, ()> {
    ONE_SANDBOX
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Skips (not root) or fails (root without the tools) as the module doc says; `true` to run.
fn may_run() -> bool {
    if let Some(reason) = skip_reason() {
        // Only a non-root run may skip; as root (CI) a missing tool is a failure, not a
        // silently passing test: .ci/run installs systemd and util-linux.
        assert!(
            !nix::unistd::geteuid().is_root(),
            "cannot run the systemd test as root: {reason}"
        );
        eprintln!("skipping: {reason}");
        return false;
    }
    true
}

/// A sandbox with the shipped unit, the test drop-in, the boot target, network-online.target
/// masked and, if given, a `kubelet.service` (the node's own kubelet unit).
fn boot_shipped(scene: &Scene, kubelet_service: Option<String>) -> Sandbox {
    let unit = fs::read_to_string(UNIT_FILE)
        .unwrap_or_else(|err| panic!("read the shipped unit {UNIT_FILE}: {err}"));
    let target = "[Unit]\nDescription=kubelet-pivot test sandbox: journald and nothing else\n\
                  Wants=systemd-journald.service\n"
        .to_owned();
    let mut units = vec![
        (UNIT, Some(unit)),
        ("kubelet-pivot.service.d/test.conf", Some(drop_in(scene))),
        (BOOT_TARGET, Some(target)),
        ("network-online.target", None),
    ];
    if let Some(text) = kubelet_service {
        units.push(("kubelet.service", Some(text)));
    }
    Sandbox::boot(scene, &units, &default_env(scene))
}

/// The node's own kubelet unit, as kubeadm installs it (here running the stand-in, with the
/// scene's log and overlap probe, so an overlap with kubelet-pivot's kubelet is seen).
fn kubeadm_kubelet_unit(scene: &Scene) -> String {
    let quoted = |path: &Path| format!("\"{}\"", path.display().to_string().replace('%', "%%"));
    let env = |key: &str, value: &str| format!("\"{key}={}\"", value.replace('%', "%%"));
    format!(
        "[Unit]\n\
         Description=kubelet: The Kubernetes Node Agent (as kubeadm installs it)\n\
         DefaultDependencies=no\n\
         \n\
         [Service]\n\
         ExecStart={stand_in} --kubeadm-unit\n\
         Environment={log} {probe} {delay}\n\
         Restart=always\n\
         RestartSec=1s\n",
        stand_in = quoted(&stand_in_bin()),
        log = env("STANDIN_LOG", &scene.log().display().to_string()),
        probe = env(
            "STANDIN_OVERLAP_PROBE",
            &scene.probe().display().to_string()
        ),
        delay = env("STANDIN_TERM_DELAY_MS", &TERM_DELAY_MS.to_string()),
    )
}

/// The node's existing `kubelet.service` (kubeadm's) and the shipped unit exclude each other:
/// starting kubelet-pivot stops kubelet.service first (its kubelet is gone before kubelet-pivot
/// starts one), and starting kubelet.service stops kubelet-pivot and its kubelet first. The
/// stand-ins' overlap probe proves there were never two kubelets.
#[test]
fn shipped_unit_never_runs_beside_kubelet_service() {
    let _one = one_sandbox();
    if !may_run() {
        return;
    }
    let scene = Scene::new();
    let sandbox = boot_shipped(&scene, Some(kubeadm_kubelet_unit(&scene)));
    let loaded = sandbox.show(UNIT);
    let conflicts = loaded.get("Conflicts").map(String::as_str).unwrap_or("");
    assert!(
        conflicts.split_whitespace().any(|u| u == "kubelet.service"),
        "the shipped unit does not conflict with kubelet.service: Conflicts={conflicts:?}"
    );
    let stand_in = stand_in_bin();
    // The stand-ins started by systemd itself (PID 1 of the sandbox): kubelet.service's.
    let kubeadm_kubelets = || -> Vec<i32> {
        scene
            .starts()
            .into_iter()
            .filter(|line| line.ppid() == 1 && sandbox.running(&stand_in).contains(&line.pid))
            .map(|line| line.pid)
            .collect()
    };

    // 1. The node as kubeadm left it: kubelet.service runs its kubelet.
    sandbox.systemctl_ok(&["start", "kubelet.service"]);
    let kubeadm1 = wait_until(SETTLE, "kubelet.service to run its kubelet", || {
        let pids = kubeadm_kubelets();
        (pids.len() == 1).then(|| pids[0])
    });

    // 2. Starting kubelet-pivot stops kubelet.service (gracefully: SIGTERM, its grace period)
    //    before kubelet-pivot starts its own kubelet.
    sandbox.systemctl_ok(&["start", UNIT]);
    assert_eq!(
        prop(&sandbox.show("kubelet.service"), "ActiveState"),
        "inactive",
        "kubelet.service still runs after kubelet-pivot started"
    );
    let (main, pivot_kubelet, grandchild) = wait_running(&sandbox, &scene, Some(0), &[kubeadm1]);
    wait_stand_ins(
        &sandbox,
        &[pivot_kubelet.pid, grandchild],
        "kubelet-pivot's kubelet to be the only one",
    );
    assert_eq!(kubelet_events(&scene, kubeadm1), ["term", "stop"]);
    let stopped_at = scene
        .read_log()
        .into_iter()
        .find(|line| line.pid == kubeadm1 && line.event == "stop")
        .map(|line| line.t_ns)
        .expect("the stop line of kubelet.service's kubelet");
    assert!(
        stopped_at < pivot_kubelet.t_ns,
        "kubelet-pivot's kubelet started before kubelet.service's had stopped"
    );
    scene.assert_no_overlap();

    // 3. Starting kubelet.service again (an operator, or a package upgrade) stops kubelet-pivot
    //    and its kubelet first; the node keeps exactly one kubelet.
    sandbox.systemctl_ok(&["start", "kubelet.service"]);
    let props = sandbox.show(UNIT);
    assert_eq!(
        (prop(&props, "ActiveState"), prop(&props, "SubState")),
        ("inactive", "dead"),
        "kubelet-pivot still runs after kubelet.service started"
    );
    assert_eq!(
        sandbox.stop_posts(),
        ["result=success code=exited status=0"],
        "kubelet-pivot (pid {main}) was not stopped cleanly"
    );
    assert_eq!(kubelet_events(&scene, pivot_kubelet.pid), ["term", "stop"]);
    let kubeadm2 = wait_until(SETTLE, "kubelet.service to run its kubelet again", || {
        let pids = kubeadm_kubelets();
        (pids.len() == 1 && pids[0] != kubeadm1).then(|| pids[0])
    });
    wait_stand_ins(
        &sandbox,
        &[kubeadm2],
        "kubelet.service's kubelet to be the only one",
    );
    scene.assert_no_overlap();
}

#[test]
fn shipped_unit_under_systemd() {
    let _one = one_sandbox();
    if !may_run() {
        return;
    }
    let test_start = Instant::now();
    let scene = Scene::new();
    let mut sandbox = boot_shipped(&scene, None);
    let booted = test_start.elapsed();
    let loaded = sandbox.show(UNIT);
    assert_eq!(
        prop(&loaded, "FragmentPath"),
        format!("/run/systemd/system/{UNIT}"),
        "systemd did not load the shipped unit"
    );
    assert_eq!(
        prop(&sandbox.show("network-online.target"), "LoadState"),
        "masked"
    );
    // What the runs below cannot tell apart (e.g. who sends the kubelet SIGTERM on stop).
    for (key, value) in [
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("Restart", "always"),
        ("KillMode", "mixed"),
    ] {
        assert_eq!(prop(&loaded, key), value, "{key} of the shipped unit");
    }
    let stop_timeout = humantime::parse_duration(prop(&loaded, "TimeoutStopUSec"))
        .unwrap_or_else(|err| panic!("TimeoutStopUSec: {err}"));
    assert!(
        stop_timeout > DEFAULT_STOP_TIMEOUT,
        "TimeoutStopSec={stop_timeout:?} leaves kubelet-pivot no time for its own \
         --stop-timeout ({DEFAULT_STOP_TIMEOUT:?}) before systemd SIGKILLs everything"
    );

    // 1. start: returns once kubelet-pivot sent READY=1; the kubelet runs with the flags from
    //    the unit's EnvironmentFile.
    let start = Instant::now();
    sandbox.systemctl_ok(&["start", UNIT]);
    let start_took = start.elapsed();
    // Type=notify: READY=1 comes after the kubelet was spawned and the holder record written.
    let at_ready = holder_record(&scene.state_dir());
    assert!(
        at_ready
            .as_ref()
            .is_some_and(|record| record["kubeletPid"].is_number()),
        "systemctl start returned before kubelet-pivot ran a kubelet: holder record {at_ready:?}"
    );
    let (main1, kubelet1, grandchild1) = wait_running(&sandbox, &scene, Some(0), &[]);
    assert_eq!(
        prop(&sandbox.show(UNIT), "WatchdogUSec"),
        format!("{WATCHDOG_SEC}s")
    );
    let args = kubelet1.field("args").unwrap_or_default();
    assert!(
        args.starts_with(KUBELET_ARGS),
        "KUBELET_ARGS from /etc/default/kubelet-pivot not passed to the kubelet: {args:?}"
    );
    let record = holder_record(&scene.state_dir()).unwrap_or_else(|| {
        panic!(
            "no holder record beside {}: KUBELET_PIVOT_LOCK_FILE not used",
            scene.lock().display()
        )
    });
    assert_eq!(record["pid"], main1, "holder record: {record}");
    wait_stand_ins(
        &sandbox,
        &[kubelet1.pid, grandchild1],
        "the first kubelet and its grandchild to be the only stand-ins",
    );

    // 2. The watchdog is fed: no kill over a run much longer than WatchdogSec, and systemd
    //    keeps receiving pings.
    let mut pings = BTreeSet::new();
    let run = Instant::now();
    while run.elapsed() < WATCHDOG_RUN {
        let props = sandbox.show(UNIT);
        assert_eq!(
            (
                prop(&props, "MainPID"),
                prop(&props, "NRestarts"),
                prop(&props, "ActiveState")
            ),
            (main1.to_string().as_str(), "0", "active"),
            "kubelet-pivot was restarted within {:?} (WatchdogSec={WATCHDOG_SEC}s)",
            run.elapsed()
        );
        pings.insert(prop(&props, "WatchdogTimestampMonotonic").to_owned());
        thread::sleep(Duration::from_millis(100));
    }
    assert!(
        pings.len() >= 3,
        "systemd saw {} distinct watchdog pings in {WATCHDOG_RUN:?}: {pings:?}",
        pings.len()
    );
    assert!(
        sandbox.stop_posts().is_empty(),
        "{:?}",
        sandbox.stop_posts()
    );

    // 3. kill -9 kubelet-pivot: its kubelet dies (PDEATHSIG), systemd kills the rest of the
    //    cgroup and restarts the unit; the new kubelet starts only after the old one is gone.
    let killed_at = Instant::now();
    assert!(
        signal_pid(sandbox.host_pid(main1), Signal::SIGKILL),
        "kubelet-pivot exited by itself"
    );
    let (main2, kubelet2, grandchild2) = wait_running(&sandbox, &scene, Some(1), &[kubelet1.pid]);
    let restart_took = killed_at.elapsed();
    assert_ne!(main2, main1);
    assert_eq!(
        sandbox.stop_posts(),
        ["result=signal code=killed status=KILL"]
    );
    wait_stand_ins(
        &sandbox,
        &[kubelet2.pid, grandchild2],
        "the old kubelet and grandchild to be gone after the restart",
    );
    scene.assert_no_overlap();

    // 4. The watchdog is enforced: a stopped kubelet-pivot misses its pings, systemd kills it
    //    (SIGABRT) and restarts it.
    let stopped_at = Instant::now();
    assert!(
        signal_pid(sandbox.host_pid(main2), Signal::SIGSTOP),
        "kubelet-pivot exited by itself"
    );
    let (main3, kubelet3, grandchild3) =
        wait_running(&sandbox, &scene, Some(2), &[kubelet1.pid, kubelet2.pid]);
    let watchdog_took = stopped_at.elapsed();
    assert_ne!(main3, main2);
    assert_eq!(
        sandbox.stop_posts(),
        [
            "result=signal code=killed status=KILL",
            "result=watchdog code=killed status=ABRT"
        ]
    );
    wait_stand_ins(
        &sandbox,
        &[kubelet3.pid, grandchild3],
        "the kubelet of the watchdog-killed kubelet-pivot to be gone",
    );
    scene.assert_no_overlap();

    // 5. Pivot: a self-hosted supervisor (gen 1) contends for the lock; the bootstrap yields
    //    and `systemctl status` shows whom it stands by for. Then the self-hosted one leaves
    //    and the bootstrap runs a kubelet again.
    let mut nsenter = Proc::spawn(&mut self_hosted_command(&sandbox, &scene));
    let pivot = pivot_bin().to_string_lossy().into_owned();
    let self_hosted = wait_until(
        SETTLE,
        "nsenter to start the self-hosted supervisor",
        || {
            let nsenter_pid = nsenter.pid();
            let host = host_processes()
                .into_iter()
                .find(|(_, ppid)| *ppid == nsenter_pid)?
                .0;
            sandbox
                .processes()
                .into_iter()
                .find(|proc| proc.host == host && proc.argv0 == pivot)
        },
    );
    let standing_by = format!(
        "standing by: lock held by self-hosted gen 1 pid {}",
        self_hosted.ns
    );
    poll_until(
        SETTLE,
        SYSTEMCTL_POLL,
        &format!("StatusText={standing_by:?}"),
        || (prop(&sandbox.show(UNIT), "StatusText") == standing_by).then_some(()),
    );
    let status = sandbox.systemctl_ok(&["status", "--no-pager", "--full", UNIT]);
    assert!(
        status.contains(&format!("Status: \"{standing_by}\"")),
        "`systemctl status` does not show the hand-over:\n{status}"
    );
    let (kubelet4, grandchild4) = kubelet_of(&scene, self_hosted.ns, &[]);
    wait_stand_ins(
        &sandbox,
        &[kubelet4.pid, grandchild4],
        "the self-hosted kubelet to be the only one",
    );
    assert!(
        scene
            .events("stop")
            .iter()
            .any(|line| line.pid == kubelet3.pid),
        "the bootstrap's kubelet was not stopped gracefully on the yield"
    );
    let props = sandbox.show(UNIT);
    assert_eq!(
        (
            prop(&props, "MainPID"),
            prop(&props, "NRestarts"),
            prop(&props, "ActiveState")
        ),
        (main3.to_string().as_str(), "2", "active"),
        "the standing-by bootstrap is not the running unit"
    );
    scene.assert_no_overlap();

    assert!(
        signal_pid(self_hosted.host, Signal::SIGTERM),
        "the self-hosted supervisor exited by itself"
    );
    let exit = nsenter.wait_exit(SETTLE);
    assert!(
        exit.success(),
        "the self-hosted supervisor exited with {exit}"
    );
    let (main5, kubelet5, grandchild5) = wait_running(
        &sandbox,
        &scene,
        Some(2),
        &[kubelet1.pid, kubelet2.pid, kubelet3.pid],
    );
    assert_eq!(main5, main3, "the bootstrap took back the lock in place");
    wait_stand_ins(
        &sandbox,
        &[kubelet5.pid, grandchild5],
        "the bootstrap's kubelet to be the only one again",
    );
    scene.assert_no_overlap();

    // 6. systemctl reload (ExecReload, SIGHUP): the kubelet restarts in place.
    sandbox.systemctl_ok(&["reload", UNIT]);
    let (main6, kubelet6, grandchild6) = wait_running(
        &sandbox,
        &scene,
        Some(2),
        &[kubelet1.pid, kubelet2.pid, kubelet3.pid, kubelet5.pid],
    );
    assert_eq!(main6, main3, "systemctl reload restarted kubelet-pivot");
    assert_eq!(
        kubelet_events(&scene, kubelet5.pid),
        ["term", "stop"],
        "the kubelet was not restarted gracefully on reload"
    );
    wait_stand_ins(
        &sandbox,
        &[kubelet6.pid, grandchild6],
        "the reloaded kubelet to be the only one",
    );
    scene.assert_no_overlap();

    // 7. systemctl stop: kubelet-pivot stops the kubelet gracefully and exits 0; the unit is
    //    inactive (not failed) and nothing of it is left.
    let stop = Instant::now();
    sandbox.systemctl_ok(&["stop", UNIT]);
    let stop_took = stop.elapsed();
    let props = sandbox.show(UNIT);
    assert_eq!(
        (prop(&props, "ActiveState"), prop(&props, "SubState")),
        ("inactive", "dead"),
        "after systemctl stop"
    );
    assert_eq!(
        sandbox.stop_posts(),
        [
            "result=signal code=killed status=KILL",
            "result=watchdog code=killed status=ABRT",
            "result=success code=exited status=0"
        ],
        "kubelet-pivot's exits (the last one on systemctl stop)"
    );
    assert_eq!(
        kubelet_events(&scene, kubelet6.pid),
        ["term", "stop"],
        "the kubelet was not stopped with SIGTERM"
    );
    // KillMode=mixed: systemd's SIGTERM went to kubelet-pivot only, and kubelet-pivot sent the
    // kubelet its SIGTERM (KillMode=control-group would have systemd, PID 1, send it).
    let term_from = scene
        .read_log()
        .into_iter()
        .find(|line| line.pid == kubelet6.pid && line.event == "term")
        .and_then(|line| line.field("from").map(str::to_owned));
    assert_eq!(
        term_from,
        Some(main6.to_string()),
        "the kubelet's SIGTERM on systemctl stop did not come from kubelet-pivot (pid {main6})"
    );
    assert!(
        stop_took >= Duration::from_millis(TERM_DELAY_MS),
        "systemctl stop returned after {stop_took:?}, before the kubelet's {TERM_DELAY_MS} ms grace period"
    );
    let ours = [pivot_bin(), stand_in_bin()].map(|bin| bin.to_string_lossy().into_owned());
    let left: Vec<SandboxProc> = sandbox
        .processes()
        .into_iter()
        .filter(|proc| ours.contains(&proc.argv0))
        .collect();
    assert!(
        left.is_empty(),
        "kubelet-pivot or kubelets left in the sandbox after systemctl stop: {left:#?}"
    );
    assert_eq!(
        scene.starts().len(),
        6,
        "unexpected kubelet starts:\n{}",
        fs::read_to_string(scene.log()).unwrap_or_default()
    );
    scene.assert_no_overlap();

    // 8. No start limit (StartLimitIntervalSec=0): a kubelet-pivot that fails at every start
    //    (here a bad flag in the EnvironmentFile: exit 2 before READY) is restarted every
    //    RestartSec for as long as it takes, more often than systemd's default limit (5 starts
    //    in 10 s) would allow, and the kubelet comes back as soon as the file is fixed, with
    //    no `systemctl reset-failed` or `start` by an operator.
    let restarts_before: u32 = prop(&sandbox.show(UNIT), "NRestarts")
        .parse()
        .expect("NRestarts is a number");
    let exits_before = sandbox.stop_posts().len();
    let old: Vec<i32> = scene.starts().iter().map(|line| line.pid).collect();
    sandbox.set_default_env(&format!(
        "{}KUBELET_PIVOT_STOP_TIMEOUT=\"not-a-duration\"\n",
        default_env(&scene)
    ));
    let failing = Instant::now();
    sandbox.systemctl_ok(&["start", "--no-block", UNIT]);
    let restarts: u32 = poll_until(
        START_LIMIT_RUN,
        SYSTEMCTL_POLL,
        &format!("more than {DEFAULT_START_LIMIT_BURST} failed starts in a row"),
        || {
            let props = sandbox.show(UNIT);
            assert!(
                prop(&props, "Result") != "start-limit-hit"
                    && prop(&props, "ActiveState") != "failed",
                "systemd gave up on {UNIT} (a start limit?): {props:#?}"
            );
            let restarts: u32 = prop(&props, "NRestarts").parse().ok()?;
            (restarts > restarts_before + DEFAULT_START_LIMIT_BURST).then_some(restarts)
        },
    );
    let failing_for = failing.elapsed();
    let failures = sandbox.stop_posts().split_off(exits_before);
    assert!(
        failures.len() > DEFAULT_START_LIMIT_BURST as usize
            && failures
                .iter()
                .all(|line| line == "result=exit-code code=exited status=2"),
        "kubelet-pivot's exits with the bad flag: {failures:#?}"
    );
    assert_eq!(
        scene.starts().len(),
        old.len(),
        "a kubelet started while kubelet-pivot could not parse its flags"
    );
    sandbox.set_default_env(&default_env(&scene));
    let (_, kubelet8, grandchild8) = wait_running(&sandbox, &scene, None, &old);
    wait_stand_ins(
        &sandbox,
        &[kubelet8.pid, grandchild8],
        "the kubelet after the failed starts to be the only one",
    );
    sandbox.systemctl_ok(&["stop", UNIT]);
    assert_eq!(
        sandbox.stop_posts().last().map(String::as_str),
        Some("result=success code=exited status=0"),
        "the last exit of kubelet-pivot (systemctl stop)"
    );
    assert_eq!(kubelet_events(&scene, kubelet8.pid), ["term", "stop"]);
    scene.assert_no_overlap();

    if let Err(err) = sandbox.teardown() {
        panic!("{err}");
    }
    let strays = processes_mentioning(scene.path());
    assert!(
        strays.is_empty(),
        "processes of the test left after the sandbox ended: {strays:#?}"
    );
    // The script's own warnings (e.g. a mount it could not make read-only).
    let sandbox_out = fs::read_to_string(scene.path().join("sandbox.out")).unwrap_or_default();
    for warning in sandbox_out
        .lines()
        .filter(|line| line.starts_with("sandbox: "))
    {
        eprintln!("warning: {warning}");
    }
    eprintln!(
        "systemd sandbox booted in {booted:?}; start (to READY) {start_took:?}; restart after \
         kill -9 {restart_took:?}; watchdog kill and restart after SIGSTOP {watchdog_took:?}; \
         stop {stop_took:?}; {restarts} restarts with a bad flag in {failing_for:?}; whole test {:?}",
        test_start.elapsed()
    );
}
