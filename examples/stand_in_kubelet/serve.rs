//! The stand-in at work: SIGTERM/SIGINT from a signalfd, the planned crash, and the loop
//! that waits for either.

use std::io::{self};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Instant;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::SignalFd;
use nix::unistd::getpid;

use crate::error::Error;
use crate::events::{now_ns, Events};
use crate::settings::Settings;
use crate::DEFAULT_CONFIG_CRASH_DELAY;

/// A termination request and who sent it.
pub(super) struct Term {
    signal: Signal,
    /// The sender's pid (0 for the kernel).
    from: u32,
}

/// SIGTERM and SIGINT with their senders: blocked in every thread and read from a signalfd
/// on a thread of their own.
pub(super) fn signal_channel() -> Result<Receiver<Term>, Error> {
    let os = |what: &'static str| {
        move |err: nix::errno::Errno| Error::Os {
            what,
            source: io::Error::from(err),
        }
    };
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGTERM);
    mask.add(Signal::SIGINT);
    // Before any thread exists, so that every thread inherits the mask.
    mask.thread_block().map_err(os("block SIGTERM/SIGINT"))?;
    let fd = SignalFd::new(&mask).map_err(os("create a signalfd"))?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("signals".to_owned())
        .spawn(move || loop {
            match fd.read_signal() {
                Ok(Some(info)) => {
                    let Ok(signal) = Signal::try_from(info.ssi_signo as i32) else {
                        continue;
                    };
                    let term = Term {
                        signal,
                        from: info.ssi_pid,
                    };
                    if tx.send(term).is_err() {
                        break;
                    }
                }
                Ok(None) | Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
        })
        .map_err(|source| Error::Os {
            what: "start the signal thread",
            source,
        })?;
    Ok(rx)
}

pub(super) struct Crash {
    at: Instant,
    code: i32,
    reason: &'static str,
}

pub(super) fn plan_crash(
    settings: &Settings,
    config: Option<&str>,
    started: Instant,
) -> Option<Crash> {
    let (delay, reason) = match &settings.crash_on_config {
        Some(needle) => {
            if !config.is_some_and(|content| content.contains(needle.as_str())) {
                return None;
            }
            (
                settings.crash_after.unwrap_or(DEFAULT_CONFIG_CRASH_DELAY),
                "config",
            )
        }
        None => (settings.crash_after?, "crash-after"),
    };
    Some(Crash {
        at: started + delay,
        code: settings.crash_code,
        reason,
    })
}

fn signal_name(signal: Signal) -> &'static str {
    if signal == Signal::SIGINT {
        "sigint"
    } else {
        "sigterm"
    }
}

/// Runs until a signal or the planned crash; returns the exit code.
pub(super) fn serve(
    settings: &Settings,
    events: &Events,
    signals: &Receiver<Term>,
    crash: Option<Crash>,
) -> Result<i32, Error> {
    let lost = || Error::Os {
        what: "receive signals",
        source: io::Error::other("the signal thread stopped"),
    };
    loop {
        let term = match &crash {
            None => signals.recv().map_err(|_| lost())?,
            Some(crash) => {
                match signals.recv_timeout(crash.at.saturating_duration_since(Instant::now())) {
                    Ok(term) => term,
                    Err(RecvTimeoutError::Timeout) => {
                        let code = crash.code.to_string();
                        events.record(
                            "crash",
                            now_ns(),
                            &[("code", code.as_str()), ("reason", crash.reason)],
                        )?;
                        eprintln!(
                            "stand-in kubelet pid {} crashing with code {} ({})",
                            getpid(),
                            crash.code,
                            crash.reason
                        );
                        return Ok(crash.code);
                    }
                    Err(RecvTimeoutError::Disconnected) => return Err(lost()),
                }
            }
        };
        let name = signal_name(term.signal);
        let from = term.from.to_string();
        if settings.ignore_term {
            events.record(
                "term",
                now_ns(),
                &[("signal", name), ("from", from.as_str()), ("ignored", "1")],
            )?;
            eprintln!("stand-in kubelet pid {} ignoring {name}", getpid());
            continue;
        }
        events.record(
            "term",
            now_ns(),
            &[("signal", name), ("from", from.as_str())],
        )?;
        if let Some(delay) = settings.term_delay {
            std::thread::sleep(delay);
        }
        events.record("stop", now_ns(), &[("reason", name)])?;
        eprintln!("stand-in kubelet pid {} stopped on {name}", getpid());
        return Ok(0);
    }
}
