//! The forked children: a grandchild in the process group (`STANDIN_SPAWN_GRANDCHILD`) and a
//! helper that daemonizes (`STANDIN_DAEMONIZE_HELPER`).

use std::io::{self};
use std::os::fd::RawFd;

use nix::unistd::{getpgrp, getpid, ForkResult};

use crate::error::Error;
use crate::events::{now_ns, Events};
use crate::inherited::{is_cloexec, open_fds};

/// Forks a grandchild in our process group that only waits to be killed.
pub(super) fn spawn_grandchild(events: &Events, inherited: &[RawFd]) -> Result<(), Error> {
    // SAFETY: no thread has been started yet (the signal thread comes later), so the child is a
    // copy of a single-threaded process and may allocate and run ordinary code.
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Parent { child }) => {
            eprintln!(
                "stand-in kubelet pid {} spawned grandchild pid {child}",
                getpid()
            );
            Ok(())
        }
        Ok(ForkResult::Child) => grandchild(events, inherited),
        Err(errno) => Err(Error::Os {
            what: "fork the grandchild",
            source: errno.into(),
        }),
    }
}

fn grandchild(events: &Events, inherited: &[RawFd]) -> ! {
    let pgid = getpgrp().to_string();
    if let Err(err) = events.record("grandchild", now_ns(), &[("pgid", pgid.as_str())]) {
        eprintln!("stand-in kubelet grandchild pid {}: {err}", getpid());
    }
    // Not a kubelet: it must not keep the lock file, the probe or the log. The owning `File`s
    // are never dropped here because this function never returns, so each fd is closed once.
    for fd in inherited {
        if let Err(errno) = nix::unistd::close(*fd) {
            eprintln!(
                "stand-in kubelet grandchild pid {}: failed to close fd {fd}: {errno}",
                getpid()
            );
        }
    }
    // Default signal dispositions (handlers are installed after the fork): only a signal ends it.
    loop {
        nix::unistd::pause();
    }
}

/// Forks a helper that daemonizes (fork + setsid) and keeps the descriptors the stand-in
/// inherited across exec; it only waits to be killed.
pub(super) fn spawn_daemon_helper(events: &Events) -> Result<(), Error> {
    // SAFETY: no thread has been started yet (the signal thread comes later), so the child is a
    // copy of a single-threaded process and may allocate and run ordinary code.
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Parent { child }) => {
            eprintln!(
                "stand-in kubelet pid {} spawned daemonized helper pid {child}",
                getpid()
            );
            Ok(())
        }
        Ok(ForkResult::Child) => daemon_helper(events),
        Err(errno) => Err(Error::Os {
            what: "fork the daemonized helper",
            source: errno.into(),
        }),
    }
}

fn daemon_helper(events: &Events) -> ! {
    let me = getpid();
    // A forked child has no PDEATHSIG already; say so explicitly, as a daemon would not set one.
    // SAFETY: prctl with PR_SET_PDEATHSIG and plain integers touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0, 0, 0, 0) } != 0 {
        eprintln!(
            "stand-in kubelet helper pid {me}: prctl(PR_SET_PDEATHSIG, 0) failed: {}",
            io::Error::last_os_error()
        );
    }
    // What an exec would close: every close-on-exec descriptor (the stand-in's `--lock-file`
    // and probe among them) except the log, which goes after the `helper` line. Descriptors the
    // stand-in inherited without close-on-exec (the supervisor's lock) stay open.
    let log_fd = events.raw_fd();
    for fd in open_fds() {
        if fd > 2 && Some(fd) != log_fd && is_cloexec(fd) {
            // Errors are irrelevant: the fd may be the directory stream just closed.
            let _ = nix::unistd::close(fd);
        }
    }
    // Only then out of the kubelet's process group: while it holds the probe it is one of the
    // group, whose end the supervisor waits for before it lets another kubelet start. Leaving
    // first let a helper that had not run yet (a loaded node) hold the probe outside the group
    // when the next kubelet started: an OVERLAP that no second kubelet caused (chaos, issue 31).
    if let Err(errno) = nix::unistd::setsid() {
        eprintln!("stand-in kubelet helper pid {me}: setsid failed: {errno}");
    }
    let pgid = getpgrp().to_string();
    let sid = nix::unistd::getsid(None).map_or_else(|_| "-".to_owned(), |sid| sid.to_string());
    if let Err(err) = events.record(
        "helper",
        now_ns(),
        &[("pgid", pgid.as_str()), ("sid", sid.as_str())],
    ) {
        eprintln!("stand-in kubelet helper pid {me}: {err}");
    }
    if let Some(fd) = log_fd {
        let _ = nix::unistd::close(fd);
    }
    loop {
        nix::unistd::pause();
    }
}
