//! Eviction requests in flight: how many the server is serving at once (each
//! [`crate::RequestRecord::evictions_in_flight`]), a hold that keeps each one in flight for a
//! while before it is served ([`crate::ApiServer::set_eviction_hold`], so that a client's
//! concurrent requests overlap visibly), and refusals the way API priority and fairness
//! refuses a flow whose queue is full: beyond a cap of evictions in flight
//! ([`crate::ApiServer::limit_evictions_in_flight`]) or the next few
//! ([`crate::ApiServer::throttle_next_evictions`]); at once, 429 with `Retry-After: 1` and the
//! filter's text/plain body (apiserver's `tooManyRequests`), no Status and no
//! PodDisruptionBudget cause.

use std::io::{self, Write};
use std::time::Duration;

use crate::protocol::HttpRequest;

/// The body of API priority and fairness's 429 (k8s.io/apiserver, `tooManyRequests`).
pub(crate) const TOO_MANY: &str = "Too many requests, please try again later.\n";

/// The server's count and rules for eviction requests.
#[derive(Debug, Default)]
pub(crate) struct Evictions {
    /// Eviction requests received and not answered yet.
    in_flight: usize,
    /// Each is held this long before it is served.
    hold: Duration,
    /// More than this many in flight are refused with 429.
    limit: Option<usize>,
    /// The next this many are refused with 429.
    throttle_next: usize,
}

/// What happens to one eviction request as it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admission {
    /// Evictions in flight with this one.
    pub(crate) in_flight: usize,
    /// Wait this long before serving it.
    pub(crate) hold: Duration,
    /// Refused: over the limit.
    pub(crate) refused: bool,
}

impl Evictions {
    pub(crate) fn set_hold(&mut self, hold: Duration) {
        self.hold = hold;
    }

    pub(crate) fn set_limit(&mut self, limit: Option<usize>) {
        assert!(
            limit != Some(0),
            "a limit of 0 evictions in flight refuses them all; deny them instead"
        );
        self.limit = limit;
    }

    pub(crate) fn throttle_next(&mut self, n: usize) {
        self.throttle_next = n;
    }

    /// An eviction request arrives; call [`Evictions::leave`] when it is answered.
    pub(crate) fn enter(&mut self) -> Admission {
        self.in_flight += 1;
        let throttled = self.throttle_next > 0;
        self.throttle_next = self.throttle_next.saturating_sub(1);
        Admission {
            in_flight: self.in_flight,
            hold: self.hold,
            refused: throttled || self.limit.is_some_and(|limit| self.in_flight > limit),
        }
    }

    /// An eviction request was answered.
    pub(crate) fn leave(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

/// Whether `request` asks for an eviction (`POST .../pods/NAME/eviction`).
pub(crate) fn is_eviction(request: &HttpRequest) -> bool {
    request.method == "POST" && request.path.ends_with("/eviction")
}

/// Writes API priority and fairness's refusal.
pub(crate) fn write_too_many(writer: &mut impl Write, keep_alive: bool) -> io::Result<()> {
    let connection = if keep_alive {
        ""
    } else {
        "Connection: close\r\n"
    };
    let head = format!(
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\nX-Content-Type-Options: nosniff\r\n{connection}Content-Length: {}\r\n\r\n{TOO_MANY}",
        TOO_MANY.len()
    );
    writer.write_all(head.as_bytes())?;
    writer.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_holds_and_refuses_beyond_the_limit() {
        let mut e = Evictions::default();
        e.set_hold(Duration::from_millis(5));
        e.set_limit(Some(2));
        let a = e.enter();
        let b = e.enter();
        let c = e.enter();
        assert_eq!((a.in_flight, a.refused), (1, false));
        assert_eq!((b.in_flight, b.refused), (2, false));
        assert_eq!((c.in_flight, c.refused), (3, true));
        assert_eq!(a.hold, Duration::from_millis(5));
        e.leave();
        e.leave();
        let d = e.enter();
        assert_eq!((d.in_flight, d.refused), (2, false));
        e.set_limit(None);
        assert!(!e.enter().refused);
        e.throttle_next(2);
        assert!(e.enter().refused);
        assert!(e.enter().refused);
        assert!(!e.enter().refused);
    }

    #[test]
    fn the_refusal_is_priority_and_fairness_text_with_retry_after() {
        let mut out = Vec::new();
        write_too_many(&mut out, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nRetry-After: 1\r\n"), "{text}");
        assert!(text.contains("Content-Type: text/plain"), "{text}");
        assert!(text.ends_with("\r\n\r\nToo many requests, please try again later.\n"));
    }
}
