//! The kubelet child process: spawn it in its own process group with
//! PR_SET_PDEATHSIG=SIGKILL and the lock's open file description inherited,
//! signal its group, tell when the group is gone, reap, back off.
//!
//! Inheriting the locked descriptor is deliberate: the kernel keeps the lock
//! held until the last process holding that description exits, so if the
//! supervisor is SIGKILLed the lock is not free before its kubelet (killed by
//! PDEATHSIG) is gone too. That closes the background design's window where the
//! lock is free while the old kubelet still runs.

use std::ffi::OsString;
use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::procfs::{self, ProcessId};

/// Environment variables of ours that the kubelet must not inherit.
const PRIVATE_ENV: &[&str] = &["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("kubelet command {path} not found (not a path to an executable and not in PATH); install the kubelet or fix the command after `--`")]
    NotFound { path: PathBuf },
    #[error("kubelet command {path} is not an executable regular file; fix its permissions or the command after `--`")]
    NotExecutable { path: PathBuf },
    #[error("failed to start kubelet {path}: {source}")]
    Spawn {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The kubelet command line given after `--`.
#[derive(Debug, Clone)]
pub struct KubeletCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl KubeletCommand {
    /// Resolves the program like execvp would and checks it is executable,
    /// so that a typo fails at start-up with one clear line.
    pub fn resolve(program: &Path, args: Vec<OsString>) -> Result<Self, ChildError> {
        let resolved = if program.components().count() > 1 || program.is_absolute() {
            program.to_path_buf()
        } else {
            let path =
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
            std::env::split_paths(&path)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
                .ok_or_else(|| ChildError::NotFound {
                    path: program.to_path_buf(),
                })?
        };
        check_executable(&resolved)?;
        Ok(KubeletCommand {
            program: resolved,
            args,
        })
    }
}

fn check_executable(path: &Path) -> Result<(), ChildError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|_| ChildError::NotFound {
        path: path.to_path_buf(),
    })?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(ChildError::NotExecutable {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// A running kubelet: its pid in our namespace (for signals and waitpid),
/// its identity as /proc shows it (for the holder record), and when it
/// started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kubelet {
    pub pid: i32,
    pub id: ProcessId,
    pub started: Instant,
}

impl Kubelet {
    /// Process group id in our namespace: the kubelet leads its own group.
    pub fn pgid(&self) -> i32 {
        self.pid
    }
}

/// Starts the kubelet (see `spawn`: vfork-style, own process group,
/// PR_SET_PDEATHSIG=SIGKILL, stdin from /dev/null, `inherit_fd` kept open,
/// our private environment variables removed). Must be called from a thread
/// that lives as long as the supervisor (PR_SET_PDEATHSIG fires when the
/// *thread* that forked exits): kubelet-pivot runs its supervisor on the
/// main thread.
pub fn spawn(cmd: &KubeletCommand, inherit_fd: Option<RawFd>) -> Result<Kubelet, ChildError> {
    let spawn_error = |e: io::Error| ChildError::Spawn {
        path: cmd.program.clone(),
        source: e,
    };
    let plan =
        crate::kubelet::spawn::SpawnPlan::new(&cmd.program, &cmd.args, PRIVATE_ENV, inherit_fd)
            .map_err(spawn_error)?;
    // The supervisor reaps every child itself with waitpid(-1) (it may be
    // PID 1 or a subreaper).
    let pid = crate::kubelet::spawn::spawn(&plan).map_err(spawn_error)?;
    let view = procfs::view_pid_of_local(pid).unwrap_or(pid);
    let start_time = procfs::stat(view).map(|s| s.start_time).unwrap_or(0);
    Ok(Kubelet {
        pid,
        id: ProcessId {
            pid: view,
            start_time,
        },
        started: Instant::now(),
    })
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    Code(i32),
    Signal(Signal),
}

impl std::fmt::Display for ExitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitKind::Code(c) => write!(f, "exit code {c}"),
            ExitKind::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// Reaps every exited child without blocking. Returns (pid, how).
pub fn reap_all() -> Vec<(i32, ExitKind)> {
    let mut out = Vec::new();
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => out.push((pid.as_raw(), ExitKind::Code(code))),
            Ok(WaitStatus::Signaled(pid, sig, _)) => {
                out.push((pid.as_raw(), ExitKind::Signal(sig)))
            }
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
            Ok(_) => continue,
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    out
}

/// Sends `sig` to the whole process group; a gone group is not an error.
/// Never signals group 0 or 1, a negative id, or our own group (kill(2)
/// would read those as "our group", init, or "every process").
pub fn signal_group(pgid: i32, sig: Signal) -> bool {
    if pgid <= 1 || pgid == nix::unistd::getpgrp().as_raw() {
        tracing::error!(pgid, signal = %sig, "refusing to signal process group {pgid}: it is not a kubelet's (0, 1, negative or kubelet-pivot's own)");
        return false;
    }
    match killpg(Pid::from_raw(pgid), sig) {
        Ok(()) => true,
        Err(Errno::ESRCH) => false,
        Err(err) => {
            tracing::warn!(pgid, %err, signal = %sig, "failed to signal kubelet process group");
            false
        }
    }
}

/// True when no live process is left in our kubelet's group (`pgid` in our
/// namespace). Zombies do not count when /proc can tell (they hold no files
/// and run nothing); with another namespace's /proc, kill(2) decides alone
/// (our own zombies are reaped by us: we are a subreaper or PID 1).
pub fn group_gone(pgid: i32) -> bool {
    match killpg(Pid::from_raw(pgid), None) {
        Err(Errno::ESRCH) => true,
        _ if procfs::proc_is_own_namespace() => procfs::live_group_members(pgid).is_empty(),
        _ => false,
    }
}

/// True when no live process is left in a group known by its /proc id
/// (another supervisor's kubelet, from its holder record).
pub fn view_group_gone(view_pgid: i32) -> bool {
    procfs::live_group_members(view_pgid).is_empty()
}

/// Signals a group known by its /proc id; false when it is gone or not
/// visible from our namespace.
pub fn signal_view_group(view_pgid: i32, sig: Signal) -> bool {
    match procfs::local_pgid_of_view(view_pgid) {
        Some(local) => signal_group(local, sig),
        None => false,
    }
}

/// Signals one process known by its /proc ("view") pid. Never pid 0 or 1,
/// a negative pid, or ourselves; false when it is gone or not visible from
/// our PID namespace.
pub fn signal_view_pid(view_pid: i32, sig: Signal) -> bool {
    let Some(local) = procfs::local_pid_of_view(view_pid) else {
        return false;
    };
    if local <= 1 || local == nix::unistd::getpid().as_raw() {
        tracing::error!(pid = local, signal = %sig, "refusing to signal pid {local}");
        return false;
    }
    nix::sys::signal::kill(Pid::from_raw(local), sig).is_ok()
}

/// Capped exponential backoff between kubelet restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    /// A kubelet that ran at least this long resets the backoff.
    pub reset_after: Duration,
    current: Duration,
}

impl Backoff {
    pub const fn new(initial: Duration, max: Duration, reset_after: Duration) -> Self {
        Backoff {
            initial,
            max,
            reset_after,
            current: initial,
        }
    }

    /// The delay before the next start, given how long the last one ran.
    pub fn next_delay(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= self.reset_after {
            self.current = self.initial;
        }
        let delay = self.current;
        self.current = (self.current * 2).min(self.max);
        delay
    }

    pub fn reset(&mut self) {
        self.current = self.initial;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(10),
            Duration::from_secs(60),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_resets() {
        let mut b = Backoff::default();
        let short = Duration::from_millis(10);
        let delays: Vec<u64> = (0..9)
            .map(|_| b.next_delay(short).as_millis() as u64)
            .collect();
        assert_eq!(
            delays,
            vec![100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000]
        );
        assert_eq!(
            b.next_delay(Duration::from_secs(61)),
            Duration::from_millis(100)
        );
        assert_eq!(b.next_delay(short), Duration::from_millis(200));
    }

    #[test]
    fn resolve_rejects_missing_and_non_executable() {
        assert!(matches!(
            KubeletCommand::resolve(Path::new("/nonexistent/kubelet"), vec![]),
            Err(ChildError::NotFound { .. })
        ));
        assert!(matches!(
            KubeletCommand::resolve(Path::new("no-such-kubelet-binary-xyz"), vec![]),
            Err(ChildError::NotFound { .. })
        ));
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("k");
        std::fs::write(&f, b"#!/bin/sh\n").unwrap();
        assert!(matches!(
            KubeletCommand::resolve(&f, vec![]),
            Err(ChildError::NotExecutable { .. })
        ));
        assert!(KubeletCommand::resolve(Path::new("sh"), vec![]).is_ok());
    }
}
