//! What a failed try says in the log: one line per failed try during the
//! first minute of the same failure, then one summary line a minute
//! (`API server unreachable for 3m (42 tries), last error: ...`), and one
//! line when a try succeeds again (`API server back after 3m12s (57 tries)`).
//! A day-long outage is 1,440 lines per watch, not one per try.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::backoff::Failure;

/// How long every failed try is logged.
pub const LOUD_FOR: Duration = Duration::from_secs(60);
/// How often an outage is summed up after that.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// The line an outage asks for (what [`Outage`] logs, returned for tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A failed try within the first minute.
    Failed {
        tries: u32,
        error: String,
        retry_in: Duration,
    },
    /// A minute's summary.
    Summary {
        down_for: Duration,
        tries: u32,
        state: &'static str,
        error: String,
    },
    /// The first success after failures.
    Back { down_for: Duration, tries: u32 },
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Line::Failed {
                tries,
                error,
                retry_in,
            } => write!(
                f,
                "failed (try {tries}), retrying in {}: {error}",
                Approx(*retry_in)
            ),
            Line::Summary {
                down_for,
                tries,
                state,
                error,
            } => write!(
                f,
                "API server {state} for {} ({tries} tries), last error: {error}",
                Minutes(*down_for)
            ),
            Line::Back { down_for, tries } => {
                write!(
                    f,
                    "API server back after {} ({tries} tries)",
                    Approx(*down_for)
                )
            }
        }
    }
}

/// A duration to the second (`3m12s`), or to the tenth below ten seconds (`1.5s`).
struct Approx(Duration);

impl fmt::Display for Approx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms < 10_000 {
            return write!(f, "{:.1}s", ms as f64 / 1000.0);
        }
        let s = self.0.as_secs();
        match (s / 3600, s / 60 % 60, s % 60) {
            (0, 0, s) => write!(f, "{s}s"),
            (0, m, s) => write!(f, "{m}m{s}s"),
            (h, m, s) => write!(f, "{h}h{m}m{s}s"),
        }
    }
}

/// Whole minutes (`3m`, `2h5m`).
struct Minutes(Duration);

impl fmt::Display for Minutes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0.as_secs() / 60;
        match (m / 60, m % 60) {
            (0, m) => write!(f, "{m}m"),
            (h, m) => write!(f, "{h}h{m}m"),
        }
    }
}

/// A failure this long after the previous one starts a new outage: with a
/// backoff capped at 30 s, a try went through in between (for callers that
/// cannot see their successes, as the controller's watch of rollouts).
const NEW_OUTAGE_AFTER: Duration = Duration::from_secs(90);

#[derive(Debug)]
struct Down {
    since: Instant,
    last: Instant,
    tries: u32,
    next_summary: Instant,
}

/// The failures of one thing tried again (`what`: "the watch of this node").
#[derive(Debug)]
pub struct Outage {
    what: String,
    down: Option<Down>,
    /// Everything at debug level (watches whose failures matter little).
    quiet: bool,
}

impl Outage {
    pub fn new(what: impl Into<String>) -> Self {
        Outage {
            what: what.into(),
            down: None,
            quiet: false,
        }
    }

    /// An outage logged at debug level only.
    pub fn quiet(what: impl Into<String>) -> Self {
        Outage {
            quiet: true,
            ..Outage::new(what)
        }
    }

    /// Whether the last try failed.
    pub fn is_down(&self) -> bool {
        self.down.is_some()
    }

    /// Records a failed try (the next one in `retry_in`) and logs it if due.
    pub fn failed(&mut self, error: &dyn fmt::Display, failure: Failure, retry_in: Duration) {
        if let Some(line) = self.failed_at(Instant::now(), error, failure, retry_in) {
            if self.quiet {
                debug!(target: "kubelet_pivot::api", "{}: {line}", self.what);
            } else {
                warn!(target: "kubelet_pivot::api", "{}: {line}", self.what);
            }
        }
    }

    /// Records a success; logs how long it failed before, if it did.
    pub fn ok(&mut self) {
        if let Some(line) = self.ok_at(Instant::now()) {
            if self.quiet {
                debug!(target: "kubelet_pivot::api", "{}: {line}", self.what);
            } else {
                info!(target: "kubelet_pivot::api", "{}: {line}", self.what);
            }
        }
    }

    pub fn failed_at(
        &mut self,
        now: Instant,
        error: &dyn fmt::Display,
        failure: Failure,
        retry_in: Duration,
    ) -> Option<Line> {
        if self
            .down
            .as_ref()
            .is_some_and(|d| now.saturating_duration_since(d.last) > NEW_OUTAGE_AFTER)
        {
            self.down = None;
        }
        let down = self.down.get_or_insert(Down {
            since: now,
            last: now,
            tries: 0,
            next_summary: now + LOUD_FOR,
        });
        down.tries = down.tries.saturating_add(1);
        down.last = now;
        if now < down.since + LOUD_FOR {
            return Some(Line::Failed {
                tries: down.tries,
                error: error.to_string(),
                retry_in,
            });
        }
        if now < down.next_summary {
            return None;
        }
        while down.next_summary <= now {
            down.next_summary += SUMMARY_EVERY;
        }
        Some(Line::Summary {
            down_for: now - down.since,
            tries: down.tries,
            state: match failure {
                Failure::NoAnswer => "unreachable",
                Failure::Status(_) | Failure::Gone => "failing",
            },
            error: error.to_string(),
        })
    }

    pub fn ok_at(&mut self, now: Instant) -> Option<Line> {
        let down = self.down.take()?;
        Some(Line::Back {
            down_for: now - down.since,
            tries: down.tries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFUSED: &str = "connection refused";

    /// Fails a try every `every` for `for_`, advancing tokio's paused clock;
    /// returns the lines logged.
    async fn fail_for(o: &mut Outage, every: Duration, for_: Duration) -> Vec<Line> {
        let end = Instant::now() + for_;
        let mut lines = Vec::new();
        while Instant::now() < end {
            lines.extend(o.failed_at(Instant::now(), &REFUSED, Failure::NoAnswer, every));
            tokio::time::advance(every).await;
        }
        lines
    }

    #[tokio::test(start_paused = true)]
    async fn every_try_of_the_first_minute_then_one_summary_a_minute() {
        let mut o = Outage::new("the watch of this node");
        let first = fail_for(&mut o, Duration::from_secs(5), LOUD_FOR).await;
        assert_eq!(first.len(), 12, "{first:?}");
        assert!(matches!(first[0], Line::Failed { tries: 1, .. }));
        let later = fail_for(&mut o, Duration::from_secs(5), Duration::from_secs(120)).await;
        assert_eq!(later.len(), 2, "{later:?}");
        assert_eq!(
            later[0].to_string(),
            "API server unreachable for 1m (13 tries), last error: connection refused"
        );
        assert_eq!(
            later[1].to_string(),
            "API server unreachable for 2m (25 tries), last error: connection refused"
        );
        tokio::time::advance(Duration::from_secs(12)).await;
        let back = o.ok_at(Instant::now()).unwrap();
        assert_eq!(back.to_string(), "API server back after 3m12s (36 tries)");
        assert!(!o.is_down());
        // A success with nothing failed before says nothing.
        assert_eq!(o.ok_at(Instant::now()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_failure_after_a_success_is_loud_again() {
        let mut o = Outage::new("x");
        fail_for(&mut o, Duration::from_secs(10), Duration::from_secs(300)).await;
        o.ok_at(Instant::now());
        let again = fail_for(&mut o, Duration::from_secs(10), Duration::from_secs(30)).await;
        assert_eq!(again.len(), 3);
        assert!(matches!(again[0], Line::Failed { tries: 1, .. }));
        assert!(again[0]
            .to_string()
            .starts_with("failed (try 1), retrying in 10s"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_hour_of_fast_failures_is_about_sixty_lines() {
        let mut o = Outage::new("x");
        let lines = fail_for(
            &mut o,
            Duration::from_millis(500),
            Duration::from_secs(3600),
        )
        .await;
        // 120 tries in the first minute, then 59 summaries.
        assert_eq!(lines.len(), 120 + 59, "{}", lines.len());
        let summaries = lines
            .iter()
            .filter(|l| matches!(l, Line::Summary { .. }))
            .count();
        assert_eq!(summaries, 59);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_long_after_the_last_one_is_a_new_outage() {
        let mut o = Outage::new("x");
        fail_for(&mut o, Duration::from_secs(10), Duration::from_secs(120)).await;
        // No success was seen (the caller cannot see them), but no try failed for 2 minutes.
        tokio::time::advance(Duration::from_secs(120)).await;
        let line = o.failed_at(
            Instant::now(),
            &REFUSED,
            Failure::NoAnswer,
            Duration::from_secs(1),
        );
        assert!(
            matches!(line, Some(Line::Failed { tries: 1, .. })),
            "{line:?}"
        );
    }

    #[test]
    fn durations_read_as_an_operator_writes_them() {
        assert_eq!(Approx(Duration::from_millis(1500)).to_string(), "1.5s");
        assert_eq!(Approx(Duration::from_secs(42)).to_string(), "42s");
        assert_eq!(Approx(Duration::from_secs(192)).to_string(), "3m12s");
        assert_eq!(Approx(Duration::from_secs(3700)).to_string(), "1h1m40s");
        assert_eq!(Minutes(Duration::from_secs(7500)).to_string(), "2h5m");
    }
}
