//! The delay between two tries against the API server: 0.5 s doubling, with
//! subtractive jitter (a wait is never longer than its cap), to
//! [`NO_ANSWER_CAP`] while the server does not answer at all and to
//! [`STATUS_CAP`] while it answers with an error status (429, 5xx: it is up
//! and asked us to wait). Reset only by a success ([`Backoff::reset`]).

use std::time::Duration;

/// The first wait after a failure.
pub const FIRST: Duration = Duration::from_millis(500);
/// The longest wait while the server does not answer (connection refused,
/// timeout, TLS): the node is at most this late when the server is back.
pub const NO_ANSWER_CAP: Duration = Duration::from_secs(10);
/// The longest wait while the server answers with an error status.
pub const STATUS_CAP: Duration = Duration::from_secs(30);
/// At most this share (in percent) of a wait is taken off at random, so that
/// the nodes of a cluster that went down together do not come back in step.
const JITTER_PERCENT: u32 = 20;

/// What a failed try got back from the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No answer: connection refused or reset, timeout, TLS handshake.
    NoAnswer,
    /// An answer with this error status.
    Status(u16),
    /// 410 Gone: a watch's resourceVersion expired; re-listing at once is
    /// the answer, and no failure of the server.
    Gone,
}

impl Failure {
    pub fn of(err: &kube::Error) -> Self {
        match err {
            kube::Error::Api(status) if status.code == 410 => Failure::Gone,
            kube::Error::Api(status) => Failure::Status(status.code),
            _ => Failure::NoAnswer,
        }
    }

    pub fn of_watch(err: &kube::runtime::watcher::Error) -> Self {
        use kube::runtime::watcher::Error;
        match err {
            Error::WatchError(status) if status.code == 410 => Failure::Gone,
            Error::WatchError(status) => Failure::Status(status.code),
            Error::InitialListFailed(e) | Error::WatchStartFailed(e) | Error::WatchFailed(e) => {
                Failure::of(e)
            }
            // The server answered a list without a resourceVersion.
            Error::NoResourceVersion => Failure::Status(200),
        }
    }

    /// The longest wait after this failure.
    pub fn cap(self) -> Duration {
        match self {
            Failure::NoAnswer => NO_ANSWER_CAP,
            Failure::Status(_) => STATUS_CAP,
            Failure::Gone => Duration::ZERO,
        }
    }
}

/// The backoff of one thing tried again (a watch, a kind of call).
#[derive(Debug, Clone)]
pub struct Backoff {
    /// The wait before jitter after the next failure.
    next: Duration,
    rng: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    pub fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        Self::with_seed(seed ^ u64::from(std::process::id()).rotate_left(32))
    }

    /// A backoff whose jitter is drawn from `seed` (tests).
    pub fn with_seed(seed: u64) -> Self {
        Backoff {
            next: FIRST,
            // xorshift has no zero state.
            rng: seed | 1,
        }
    }

    /// A try succeeded: the next failure waits [`FIRST`] again.
    pub fn reset(&mut self) {
        self.next = FIRST;
    }

    /// Records a failed try; returns the wait before the next one (zero
    /// after a 410, which changes nothing else).
    pub fn failed(&mut self, failure: Failure) -> Duration {
        if failure == Failure::Gone {
            return Duration::ZERO;
        }
        let base = self.next.min(failure.cap());
        self.next = base.saturating_mul(2).min(STATUS_CAP);
        let off = base * (self.random() % (JITTER_PERCENT + 1)) / 100;
        base - off
    }

    fn random(&mut self) -> u32 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[test]
    fn doubles_from_half_a_second_to_the_cap_with_jitter_below() {
        for seed in 0..50 {
            let mut b = Backoff::with_seed(seed);
            let mut base = FIRST;
            for _ in 0..12 {
                let wait = b.failed(Failure::NoAnswer);
                assert!(wait <= base, "{seed}: {wait:?} > {base:?}");
                assert!(
                    ms(wait) >= ms(base) * 80 / 100,
                    "{seed}: {wait:?} < 80% of {base:?}"
                );
                base = (base * 2).min(NO_ANSWER_CAP);
            }
            let mut b = Backoff::with_seed(seed);
            let waits: Vec<Duration> = (0..12).map(|_| b.failed(Failure::Status(503))).collect();
            assert!(waits.iter().all(|w| *w <= STATUS_CAP));
            assert!(ms(waits[11]) >= ms(STATUS_CAP) * 80 / 100, "{waits:?}");
        }
    }

    #[test]
    fn a_server_that_stops_answering_waits_no_more_than_the_no_answer_cap() {
        let mut b = Backoff::with_seed(7);
        for _ in 0..10 {
            b.failed(Failure::Status(429));
        }
        assert!(b.failed(Failure::NoAnswer) <= NO_ANSWER_CAP);
        assert!(b.failed(Failure::Status(500)) >= NO_ANSWER_CAP * 2 * 80 / 100);
    }

    #[test]
    fn only_a_reset_starts_again_and_a_410_changes_nothing() {
        let mut b = Backoff::with_seed(3);
        for _ in 0..6 {
            b.failed(Failure::NoAnswer);
        }
        assert_eq!(b.failed(Failure::Gone), Duration::ZERO);
        assert!(b.failed(Failure::NoAnswer) >= NO_ANSWER_CAP * 80 / 100);
        b.reset();
        assert!(b.failed(Failure::NoAnswer) <= FIRST);
    }

    #[test]
    fn failures_are_classified_by_answer() {
        let status = |code: u16| -> Box<kube::core::Status> {
            Box::new(serde_json::from_value(serde_json::json!({ "code": code })).unwrap())
        };
        let refused = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert_eq!(Failure::of(&refused), Failure::NoAnswer);
        assert_eq!(
            Failure::of(&kube::Error::Api(status(429))),
            Failure::Status(429)
        );
        assert_eq!(Failure::of(&kube::Error::Api(status(410))), Failure::Gone);
        use kube::runtime::watcher::Error as W;
        assert_eq!(
            Failure::of_watch(&W::WatchError(status(410))),
            Failure::Gone
        );
        assert_eq!(
            Failure::of_watch(&W::InitialListFailed(kube::Error::Api(status(500)))),
            Failure::Status(500)
        );
    }
}
