//! Wall-clock moments (a trial's end, a drain's retryAt) as timers on the monotonic
//! clock.

use std::time::{Duration, Instant};

/// How long after a timer's moment the look runs: stamps and the clock
/// agree to the millisecond, and a look a moment early would find nothing
/// due (and arm the same moment again).
const DUE_MARGIN: Duration = Duration::from_millis(5);

/// A moment the check that computed it found past already: that check did
/// what was due (a promotion, a drain started) and the store still names
/// it (a failed write, a retry nothing started): looked at again after this
/// long, not in a loop.
const OVERDUE_LOOK: Duration = Duration::from_secs(1);

/// The moment `at` (wall clock) on the monotonic clock, plus [`DUE_MARGIN`].
pub(super) fn instant_of(at: std::time::SystemTime) -> Instant {
    match at.duration_since(std::time::SystemTime::now()) {
        Ok(wait) => Instant::now() + wait + DUE_MARGIN,
        Err(_) => Instant::now() + OVERDUE_LOOK,
    }
}
