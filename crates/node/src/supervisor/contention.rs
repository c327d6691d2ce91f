//! The contention side of a holder: how soon to look at /proc/locks and
//! the claims again (an opener about to block, a higher claimant not
//! blocked yet, one that may not be yielded to now), and the contenders
//! not yielded to for a while. The looks themselves (`judge`) are in
//! `acquire`; this part owns only the clocks they leave behind.

use std::time::{Duration, Instant};

use crate::pivot::contention::Skips;

/// After an open of the lock file, how long to keep looking for the opener
/// to block in flock (open and flock are two syscalls).
const OPEN_WINDOW: Duration = Duration::from_millis(500);
/// While a higher claim exists but its owner is not blocked yet.
const PENDING_WINDOW: Duration = Duration::from_secs(2);
/// Re-check cadence inside those windows: each re-check reads /proc/locks,
/// which takes the kernel's file-lock rwsem for writing and stalls every
/// flock on the node meanwhile; an opener blocks in flock within
/// microseconds of its open, so a few ms cost a handoff little.
const FAST_RECHECK: Duration = Duration::from_millis(2);
/// Cadence of re-checks while a higher claimant is not blocked, after the
/// fast window.
const PENDING_RECHECK: Duration = Duration::from_millis(100);
/// While a higher claimant exists that may not be yielded to now.
const OUTRANKED_RECHECK: Duration = Duration::from_secs(1);
/// A contender that did not take the lock it was handed (or never blocked on
/// it) is not yielded to again for this long, doubling up to
/// [`SKIP_MAX`]: at most a few takebacks a minute from one stuck contender.
const SKIP_INITIAL: Duration = Duration::from_secs(10);
const SKIP_MAX: Duration = Duration::from_secs(300);

/// What a holder remembers between looks at its contenders.
#[derive(Debug)]
pub(super) struct Contention {
    /// Look again until then (fast cadence).
    recheck_until: Option<Instant>,
    /// A higher claimant seen not blocked yet (its pid), while holding.
    pending: Option<i32>,
    /// While holding: a live higher claim exists whose owner may not be
    /// yielded to now (stopped, or skipped after it failed to take the lock
    /// once). A thawed process resumes its flock without opening the lock
    /// file (no event), and a skip ends by time: looked at again every
    /// `OUTRANKED_RECHECK` until it blocks, wins or goes.
    outranked: bool,
    /// Contenders not yielded to for a while (they did not take the lock).
    skips: Skips,
}

impl Default for Contention {
    fn default() -> Self {
        Contention {
            recheck_until: None,
            pending: None,
            outranked: false,
            skips: Skips::new(SKIP_INITIAL, SKIP_MAX),
        }
    }
}

impl Contention {
    /// The lock file was opened: the opener is about to block in flock;
    /// look fast for a while.
    pub(super) fn opened(&mut self, now: Instant) {
        self.recheck_until = Some(now + OPEN_WINDOW);
    }

    /// We yield to a blocked contender: nothing more to watch.
    pub(super) fn yielded(&mut self) {
        self.recheck_until = None;
        self.pending = None;
    }

    /// Nobody to yield to, nobody about to contend.
    pub(super) fn quiet(&mut self) {
        self.pending = None;
    }

    /// A higher claimant `pid` is not blocked yet: fast looks for a while
    /// after it appears, then slow ones (never a hot loop). True when it
    /// is newly seen.
    pub(super) fn claimant_pending(&mut self, pid: i32, now: Instant) -> bool {
        if self.pending == Some(pid) {
            return false;
        }
        self.pending = Some(pid);
        let until = now + PENDING_WINDOW;
        if self.recheck_until.is_none_or(|u| u < until) {
            self.recheck_until = Some(until);
        }
        true
    }

    /// Whether a live higher claim exists that may not be yielded to now.
    pub(super) fn set_outranked(&mut self, outranked: bool) {
        self.outranked = outranked;
    }

    pub(super) fn skips(&self) -> &Skips {
        &self.skips
    }

    /// A contender failed to take the lock it was handed: not yielded to
    /// for the returned while.
    pub(super) fn skip(&mut self, pid: i32, start_time: Option<u64>, now: Instant) -> Duration {
        self.skips.skip(pid, start_time, now)
    }

    /// While holding: when to look at the contenders again (None: on
    /// events only).
    pub(super) fn next_look(&mut self, now: Instant) -> Option<Instant> {
        match self.recheck_until {
            Some(until) if until > now => Some(now + FAST_RECHECK),
            _ => {
                self.recheck_until = None;
                // A higher claimant that is not blocked (stuck between
                // its claim and flock, or stopped): look every 100 ms,
                // not every millisecond, so that it is seen soon once it
                // blocks without a hot loop meanwhile.
                self.pending
                    .map(|_| now + PENDING_RECHECK)
                    .or(self.outranked.then(|| now + OUTRANKED_RECHECK))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_holder_looks_on_events_only() {
        let mut c = Contention::default();
        assert_eq!(c.next_look(Instant::now()), None);
    }

    #[test]
    fn an_open_is_watched_fast_for_a_while() {
        let mut c = Contention::default();
        let now = Instant::now();
        c.opened(now);
        assert_eq!(c.next_look(now), Some(now + FAST_RECHECK));
        let later = now + OPEN_WINDOW;
        assert_eq!(c.next_look(later), None);
        // The window is over for good.
        assert_eq!(c.next_look(now), None);
    }

    #[test]
    fn a_pending_claimant_is_watched_fast_then_slowly() {
        let mut c = Contention::default();
        let now = Instant::now();
        assert!(c.claimant_pending(7, now));
        assert!(!c.claimant_pending(7, now + FAST_RECHECK), "seen already");
        assert_eq!(c.next_look(now), Some(now + FAST_RECHECK));
        let later = now + PENDING_WINDOW;
        assert_eq!(c.next_look(later), Some(later + PENDING_RECHECK));
        c.quiet();
        assert_eq!(c.next_look(later), None);
    }

    #[test]
    fn a_new_claimant_does_not_shorten_an_open_window() {
        let mut c = Contention::default();
        let now = Instant::now();
        c.opened(now + PENDING_WINDOW);
        c.claimant_pending(7, now);
        let in_window = now + PENDING_WINDOW + Duration::from_millis(1);
        assert_eq!(c.next_look(in_window), Some(in_window + FAST_RECHECK));
    }

    #[test]
    fn yielding_ends_every_look() {
        let mut c = Contention::default();
        let now = Instant::now();
        c.claimant_pending(7, now);
        c.yielded();
        assert_eq!(c.next_look(now), None);
        // A claimant seen again after the yield is news again.
        assert!(c.claimant_pending(7, now));
    }

    #[test]
    fn an_outranked_holder_looks_every_second() {
        let mut c = Contention::default();
        let now = Instant::now();
        c.set_outranked(true);
        assert_eq!(c.next_look(now), Some(now + OUTRANKED_RECHECK));
        // A pending claimant is looked at sooner.
        c.claimant_pending(7, now);
        let later = now + PENDING_WINDOW;
        assert_eq!(c.next_look(later), Some(later + PENDING_RECHECK));
        c.set_outranked(false);
        c.quiet();
        assert_eq!(c.next_look(later), None);
    }

    #[test]
    fn a_skipped_contender_is_skipped_for_a_while() {
        let mut c = Contention::default();
        let now = Instant::now();
        assert!(!c.skips().is_skipped(7, Some(1), now));
        assert_eq!(c.skip(7, Some(1), now), SKIP_INITIAL);
        assert!(c.skips().is_skipped(7, Some(1), now));
        assert!(!c.skips().is_skipped(7, Some(1), now + SKIP_INITIAL));
    }
}
