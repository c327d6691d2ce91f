//! Signals before the event loop exists, and SIGHUP bursts.
//!
//! The handlers are installed first thing in `main` for the supervisor
//! commands: a SIGTERM that arrives while the command line is parsed, the
//! store opened or the lock taken is remembered (instead of killing the
//! process with the default action) and acted on by the supervisor, which
//! then exits 0 without starting a kubelet.
//!
//! Once the supervisor's signal stream exists (`signal_hook_tokio::Signals`,
//! registered for the same signals), one run of signal-hook's handler does
//! both: it sets the flag here, then marks the signal pending for the stream
//! and writes the stream's wake-up byte. The supervisor therefore reads the
//! flag only where the stream cannot be heard: right after creating the
//! stream (a SIGTERM from before it), during config work and right before
//! the fork. Its event loop takes SIGTERM from the stream alone; a poll of
//! the flag there would see the same signal a second time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// Set once SIGTERM or SIGINT arrived; shared with the supervisor (never
/// cleared: it says "termination was requested", not "one is pending").
#[derive(Debug, Clone, Default)]
pub struct TerminateFlag(Arc<AtomicBool>);

impl TerminateFlag {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The handlers installed first thing in `main`.
#[derive(Debug)]
pub struct EarlySignals {
    pub flag: TerminateFlag,
    ids: Vec<signal_hook::SigId>,
}

/// Installs flag handlers for SIGTERM, SIGINT and SIGHUP (a SIGHUP before
/// the event loop runs is dropped: the kubelet it would restart has not
/// started yet).
pub fn install_early() -> std::io::Result<EarlySignals> {
    let flag = TerminateFlag::default();
    let ids = vec![
        signal_hook::flag::register(SIGTERM, flag.0.clone())?,
        signal_hook::flag::register(SIGINT, flag.0.clone())?,
        signal_hook::flag::register(SIGHUP, Arc::new(AtomicBool::new(false)))?,
    ];
    Ok(EarlySignals { flag, ids })
}

impl EarlySignals {
    /// For the commands that are not supervisors: back to the default
    /// actions, and a SIGTERM or SIGINT that already came ends the process
    /// the default way.
    pub fn restore_default(self) {
        for id in self.ids {
            signal_hook::low_level::unregister(id);
        }
        if self.flag.is_set() {
            let _ = signal_hook::low_level::emulate_default_handler(SIGTERM);
        }
    }
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
