//! Signals before the event loop exists, and SIGHUP bursts.
//!
//! The handlers are installed first thing in `main` for the supervisor
//! commands: a SIGTERM that arrives while the command line is parsed, the
//! store opened or the lock taken is remembered (instead of killing the
//! process with the default action) and acted on by the supervisor, which
//! then exits 0 without starting a kubelet.
//!
//! They are installed with the signals blocked. signal-hook-registry sets
//! the process's handler (`sigaction`) before it stores the action the
//! handler runs; a signal in between finds no action and runs the previous
//! disposition, which for SIG_DFL it skips: the signal was swallowed
//! (measured: 1 SIGTERM in a few hundred, sent the instant the handler
//! appeared in /proc, was never acted on; issue 20). Blocked, it stays
//! pending and is delivered when the mask is restored, with the actions in
//! place. SIGCHLD is registered here too, so that the event loop's
//! `Signals::new` only adds actions to handlers that exist and opens no
//! such window while other threads run.
//!
//! Only the supervisor commands install them ([`is_supervisor_command`]):
//! unregistering an action leaves signal-hook's handler in place with no
//! action, so a tool that "restored" the default this way ignored SIGTERM
//! (`rollout status --watch` outlived `kill`).
//!
//! Once the supervisor's signal stream exists (`signal_hook_tokio::Signals`,
//! registered for the same signals), one run of signal-hook's handler does
//! both: it sets the flag here, then marks the signal pending for the stream
//! and writes the stream's wake-up byte. The supervisor therefore reads the
//! flag only where the stream cannot be heard: right after creating the
//! stream (a SIGTERM from before it), during config work and right before
//! the fork. Its event loop takes SIGTERM from the stream alone; a poll of
//! the flag there would see the same signal a second time.

use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};

/// The subcommands that supervise a kubelet (the first argument: the
/// command line has no options before the subcommand).
const SUPERVISOR_COMMANDS: [&str; 2] = ["bootstrap", "self-hosted"];

/// Whether the process was started as a supervisor, from its first
/// argument after the program name. Read before the command line is
/// parsed, because the handlers must exist before that work starts.
pub fn is_supervisor_command(first_arg: Option<&OsStr>) -> bool {
    first_arg.is_some_and(|arg| SUPERVISOR_COMMANDS.iter().any(|c| arg == *c))
}

/// Set once SIGTERM or SIGINT arrived; shared with the supervisor (never
/// cleared: it says "termination was requested", not "one is pending").
#[derive(Debug, Clone, Default)]
pub struct TerminateFlag(Arc<AtomicBool>);

impl TerminateFlag {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The handlers installed first thing in `main`: SIGTERM and SIGINT set the
/// flag; SIGHUP and SIGCHLD before the event loop runs are dropped (the
/// kubelet a SIGHUP would restart has not started yet, and there is no
/// child to reap).
pub fn install_early() -> std::io::Result<TerminateFlag> {
    let flag = TerminateFlag::default();
    let mut blocked = SigSet::empty();
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGCHLD,
    ] {
        blocked.add(sig);
    }
    // The only thread of the process yet: what it blocks waits for it.
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&blocked), Some(&mut old))
        .map_err(std::io::Error::from)?;
    let registered = register_all(&flag);
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None).map_err(std::io::Error::from)?;
    registered?;
    Ok(flag)
}

fn register_all(flag: &TerminateFlag) -> std::io::Result<()> {
    signal_hook::flag::register(SIGTERM, flag.0.clone())?;
    signal_hook::flag::register(SIGINT, flag.0.clone())?;
    let dropped = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(SIGHUP, dropped.clone())?;
    signal_hook::flag::register(SIGCHLD, dropped)?;
    Ok(())
}

/// Coalesces a burst of SIGHUPs into one kubelet restart: the restart is
/// due `quiet` after the last SIGHUP, and at most `max` after the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Debounce {
    quiet: Duration,
    max: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// Restart this long after the last SIGHUP of a burst.
pub const RELOAD_QUIET: Duration = Duration::from_millis(250);
/// However long the burst, restart at most this long after its first SIGHUP.
pub const RELOAD_MAX_DELAY: Duration = Duration::from_secs(2);

impl Default for Debounce {
    fn default() -> Self {
        Debounce::new(RELOAD_QUIET, RELOAD_MAX_DELAY)
    }
}

impl Debounce {
    pub const fn new(quiet: Duration, max: Duration) -> Self {
        Debounce {
            quiet,
            max,
            first: None,
            last: None,
        }
    }

    /// Records one request.
    pub fn poke(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// When the coalesced request is due, if one is pending.
    pub fn due(&self) -> Option<Instant> {
        let (first, last) = (self.first?, self.last?);
        Some((last + self.quiet).min(first + self.max))
    }

    /// Takes the pending request if it is due at `now`.
    pub fn take_due(&mut self, now: Instant) -> bool {
        match self.due() {
            Some(at) if at <= now => {
                self.first = None;
                self.last = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bootstrap_and_self_hosted_are_supervisors() {
        assert!(is_supervisor_command(Some(OsStr::new("bootstrap"))));
        assert!(is_supervisor_command(Some(OsStr::new("self-hosted"))));
        for other in [
            "status",
            "rollout",
            "rollout-controller",
            "--help",
            "bootstrapx",
            "",
        ] {
            assert!(!is_supervisor_command(Some(OsStr::new(other))), "{other}");
        }
        assert!(!is_supervisor_command(None));
    }

    #[test]
    fn a_burst_is_one_request_due_after_the_last_or_the_cap() {
        let mut d = Debounce::new(Duration::from_millis(250), Duration::from_secs(2));
        let t0 = Instant::now();
        assert_eq!(d.due(), None);
        for i in 0..100 {
            d.poke(t0 + Duration::from_millis(10 * i));
        }
        let due = d.due().unwrap();
        assert_eq!(due, t0 + Duration::from_millis(990 + 250));
        assert!(!d.take_due(due - Duration::from_millis(1)));
        assert!(d.take_due(due));
        assert!(!d.take_due(due + Duration::from_secs(10)));
        // An endless stream is still served at the cap.
        for i in 0..1000 {
            d.poke(t0 + Duration::from_millis(10 * i));
        }
        assert_eq!(d.due(), Some(t0 + Duration::from_secs(2)));
    }
}
