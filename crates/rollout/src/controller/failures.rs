//! Failed reconciles in a row, per rollout, and the backoff they give.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// First wait after a failed reconcile of a rollout.
const RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest wait between retries of a failing rollout.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// Failures logged one by one: those of the first minute (0.5 s doubling).
const LOG_EVERY_FAILURE: u32 = 7;

/// Failed reconciles in a row, per rollout (reset by a success).
#[derive(Debug, Default)]
pub(super) struct Failures {
    in_a_row: Mutex<HashMap<String, u32>>,
}

impl Failures {
    /// Counts a failure of `rollout`; returns how many in a row.
    pub(super) fn failed(&self, rollout: &str) -> u32 {
        match self.in_a_row.lock() {
            Ok(mut f) => {
                let n = f.entry(rollout.to_string()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        }
    }

    /// A success of `rollout`: the next failure is the first again.
    pub(super) fn succeeded(&self, rollout: &str) {
        if let Ok(mut f) = self.in_a_row.lock() {
            f.remove(rollout);
        }
    }
}

/// The wait before reconciling a rollout again after its `failures`-th
/// failure in a row: 500 ms doubling up to [`RETRY_MAX`], so that a 429 is
/// not answered with more load and an outage is not polled 2 times a second
/// for every rollout.
pub(super) fn retry_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1u32 << exp).min(RETRY_MAX)
}

/// Whether the `failures`-th failure in a row is logged: every failure of the first
/// minute, then every other one (30 s apart: one line a minute).
pub(super) fn logged(failures: u32) -> bool {
    failures <= LOG_EVERY_FAILURE || failures.is_multiple_of(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_from_half_a_second_up_to_30s() {
        let ms = |n| Duration::from_millis(n);
        let delays: Vec<Duration> = (1..=8).map(retry_delay).collect();
        assert_eq!(
            delays,
            [
                ms(500),
                ms(1000),
                ms(2000),
                ms(4000),
                ms(8000),
                ms(16000),
                ms(30000),
                ms(30000)
            ]
        );
        assert_eq!(retry_delay(0), ms(500));
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX, "no overflow");
    }

    #[test]
    fn the_first_minute_is_logged_then_every_other_failure() {
        let logged: Vec<u32> = (1..=12).filter(|n| logged(*n)).collect();
        assert_eq!(logged, [1, 2, 3, 4, 5, 6, 7, 8, 10, 12]);
    }

    #[test]
    fn failures_count_per_rollout_until_a_success() {
        let f = Failures::default();
        assert_eq!(f.failed("r1"), 1);
        assert_eq!(f.failed("r1"), 2);
        assert_eq!(f.failed("r2"), 1);
        f.succeeded("r1");
        assert_eq!(f.failed("r1"), 1);
        assert_eq!(f.failed("r2"), 2);
    }
}
