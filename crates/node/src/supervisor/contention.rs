//! The contention side of a holder: when to look at a contender again, and
//! which kind of look (an opener about to block, a higher claimant not
//! blocked yet, one that may not be yielded to now), and the contenders
//! not yielded to for a while. The looks themselves are in `acquire`; this
//! part owns only the clocks they leave behind.
//!
//! Two kinds of look: a *full* one reads /proc/locks and the claims (the
//! only look that can find an unclaimed waiter, and the one every yield is
//! decided on); a *fast* one reads the known claimant's own /proc files
//! (`procfs::syscall`) and costs no kernel-wide lock, so it can be made
//! every [`BURST_CADENCE`] right after an open. ARCHITECTURE.md, "Seeing a
//! contender block", has the measurements behind the numbers.

use std::time::{Duration, Instant};

use crate::pivot::contention::Skips;

/// After an open of the lock file, how long to keep looking for the opener
/// to block in flock (open and flock are two syscalls).
const OPEN_WINDOW: Duration = Duration::from_millis(500);
/// Right after an open, the known claimant is looked at this often (fast
/// looks only): it blocks in flock a few hundred microseconds after its
/// open, and this is most of a handoff's first stage.
const BURST_CADENCE: Duration = Duration::from_micros(100);
/// How long after an open the burst lasts (about 50 fast looks).
const BURST_WINDOW: Duration = Duration::from_millis(5);
/// While a higher claim exists but its owner is not blocked yet.
const PENDING_WINDOW: Duration = Duration::from_secs(2);
/// Re-check cadence inside those windows outside the burst. A full look
/// reads /proc/locks, which takes the kernel's file-lock rwsem for writing
/// and stalls every flock on the node meanwhile; a fast one does not.
const FAST_RECHECK: Duration = Duration::from_millis(2);
/// While fast looks watch a known claimant, a full look still comes at
/// least this often: it alone sees an unclaimed waiter (a plain kubelet)
/// or a second claimant.
const FULL_EVERY: Duration = Duration::from_millis(10);
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

/// Which look is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Look {
    /// At the claimant with this pid (in our /proc): is it asleep in
    /// flock on our lock file?
    Fast(i32),
    /// /proc/locks and the claims.
    Full,
}

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
    /// Sub-millisecond fast looks until then (after an open).
    burst_until: Option<Instant>,
    /// Whether fast looks work on the pending claimant (its /proc files
    /// are readable to us and agree with /proc/locks).
    fast_ok: bool,
    /// When the last full look was made.
    last_full: Option<Instant>,
}

impl Default for Contention {
    fn default() -> Self {
        Contention {
            recheck_until: None,
            pending: None,
            outranked: false,
            skips: Skips::new(SKIP_INITIAL, SKIP_MAX),
            burst_until: None,
            fast_ok: true,
            last_full: None,
        }
    }
}

impl Contention {
    /// The lock file was opened: the opener is about to block in flock;
    /// look fast for a while.
    pub(super) fn opened(&mut self, now: Instant) {
        self.recheck_until = Some(now + OPEN_WINDOW);
        self.burst_until = Some(now + BURST_WINDOW);
    }

    /// The claimant a fast look can watch now, if any.
    pub(super) fn fast_target(&self) -> Option<i32> {
        self.pending.filter(|_| self.fast_ok)
    }

    /// A fast look at the pending claimant failed, or disagreed with the
    /// full look that followed it: full looks only, until another claimant
    /// is pending.
    pub(super) fn fast_failed(&mut self) {
        self.fast_ok = false;
    }

    /// A full look was made at `now`.
    pub(super) fn looked_full(&mut self, now: Instant) {
        self.last_full = Some(now);
    }

    /// We yield to a blocked contender: nothing more to watch.
    pub(super) fn yielded(&mut self) {
        self.recheck_until = None;
        self.burst_until = None;
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
        self.fast_ok = true;
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

    /// While holding: when to look at the contenders again, and how (None:
    /// on events only).
    pub(super) fn next_look(&mut self, now: Instant) -> Option<(Instant, Look)> {
        match self.recheck_until {
            Some(until) if until > now => Some(self.in_window(now)),
            _ => {
                self.recheck_until = None;
                self.burst_until = None;
                // A higher claimant that is not blocked (stuck between
                // its claim and flock, or stopped): look every 100 ms,
                // not every millisecond, so that it is seen soon once it
                // blocks without a hot loop meanwhile.
                self.pending
                    .map(|_| (now + PENDING_RECHECK, Look::Full))
                    .or(self
                        .outranked
                        .then(|| (now + OUTRANKED_RECHECK, Look::Full)))
            }
        }
    }

    /// Inside a window of fast re-checks: fast looks at a known claimant
    /// (every [`BURST_CADENCE`] in the burst after an open, else every
    /// [`FAST_RECHECK`], then with a full one at least every
    /// [`FULL_EVERY`]); full looks every [`FAST_RECHECK`] when no claimant is known.
    fn in_window(&self, now: Instant) -> (Instant, Look) {
        let Some(pid) = self.fast_target() else {
            return (now + FAST_RECHECK, Look::Full);
        };
        if self.burst_until.is_some_and(|until| until > now) {
            return (now + BURST_CADENCE, Look::Fast(pid));
        }
        let fast = now + FAST_RECHECK;
        match self.last_full.map(|at| at + FULL_EVERY) {
            Some(full) if full <= fast => (full.max(now), Look::Full),
            None => (now, Look::Full),
            _ => (fast, Look::Fast(pid)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: Look = Look::Full;

    #[test]
    fn an_idle_holder_looks_on_events_only() {
        let mut c = Contention::default();
        assert_eq!(c.next_look(Instant::now()), None);
    }

    #[test]
    fn an_open_without_a_known_claimant_is_watched_by_full_looks() {
        let mut c = Contention::default();
        let now = Instant::now();
        c.opened(now);
        assert_eq!(c.next_look(now), Some((now + FAST_RECHECK, FULL)));
        let later = now + OPEN_WINDOW;
        assert_eq!(c.next_look(later), None);
        // The window is over for good.
        assert_eq!(c.next_look(now), None);
    }

    #[test]
    fn an_open_by_a_known_claimant_is_watched_by_a_burst_of_fast_looks() {
        let mut c = Contention::default();
        let t0 = Instant::now();
        // The claim was seen (a full look) before the open.
        c.looked_full(t0);
        assert!(c.claimant_pending(7, t0));
        let open = t0 + Duration::from_millis(9);
        c.opened(open);
        assert_eq!(c.fast_target(), Some(7));
        // In the burst: fast looks only, even when a full one is due.
        let in_burst = open + Duration::from_millis(4);
        assert_eq!(
            c.next_look(in_burst),
            Some((in_burst + BURST_CADENCE, Look::Fast(7)))
        );
        // After it: fast looks every FAST_RECHECK, a full one every FULL_EVERY.
        let after = open + BURST_WINDOW;
        assert_eq!(c.next_look(after), Some((after, FULL)));
        c.looked_full(after);
        assert_eq!(
            c.next_look(after),
            Some((after + FAST_RECHECK, Look::Fast(7)))
        );
        let near_full = after + FULL_EVERY - Duration::from_millis(1);
        assert_eq!(c.next_look(near_full), Some((after + FULL_EVERY, FULL)));
    }

    #[test]
    fn a_failed_fast_look_leaves_full_looks() {
        let mut c = Contention::default();
        let now = Instant::now();
        c.looked_full(now);
        c.claimant_pending(7, now);
        c.opened(now);
        c.fast_failed();
        assert_eq!(c.fast_target(), None);
        assert_eq!(c.next_look(now), Some((now + FAST_RECHECK, FULL)));
        // Another claimant gets fast looks again.
        c.claimant_pending(8, now);
        assert_eq!(c.next_look(now), Some((now + BURST_CADENCE, Look::Fast(8))));
    }

    #[test]
    fn a_pending_claimant_is_watched_fast_then_slowly() {
        let mut c = Contention::default();
        let now = Instant::now();
        c.looked_full(now);
        assert!(c.claimant_pending(7, now));
        assert!(!c.claimant_pending(7, now + FAST_RECHECK), "seen already");
        assert_eq!(c.next_look(now), Some((now + FAST_RECHECK, Look::Fast(7))));
        let later = now + PENDING_WINDOW;
        assert_eq!(c.next_look(later), Some((later + PENDING_RECHECK, FULL)));
        c.quiet();
        assert_eq!(c.next_look(later), None);
    }

    #[test]
    fn a_new_claimant_does_not_shorten_an_open_window() {
        let mut c = Contention::default();
        let now = Instant::now();
        c.opened(now + PENDING_WINDOW);
        c.claimant_pending(7, now);
        c.fast_failed();
        let in_window = now + PENDING_WINDOW + Duration::from_millis(1);
        assert_eq!(
            c.next_look(in_window),
            Some((in_window + FAST_RECHECK, FULL))
        );
    }

    #[test]
    fn yielding_ends_every_look() {
        let mut c = Contention::default();
        let now = Instant::now();
        c.claimant_pending(7, now);
        c.opened(now);
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
        assert_eq!(c.next_look(now), Some((now + OUTRANKED_RECHECK, FULL)));
        // A pending claimant is looked at sooner.
        c.claimant_pending(7, now);
        let later = now + PENDING_WINDOW;
        assert_eq!(c.next_look(later), Some((later + PENDING_RECHECK, FULL)));
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
