//! How many eviction requests a drain keeps in flight: a window that the
//! server's throttling closes and its answers open again, in the manner of
//! TCP's congestion window (additive increase, multiplicative decrease).
//!
//! The window starts at [`MAX_IN_FLIGHT`]. A 429 without a
//! PodDisruptionBudget's cause is API priority and fairness refusing the
//! node's requests: the window halves (once per window of requests: the
//! refusals of requests sent before the last cut do not cut it again) and
//! no request goes out until the server's Retry-After has passed
//! ([`THROTTLE_PAUSE`] if it names none). Every answer the server handled
//! (an eviction, a pod gone, a budget's refusal) counts toward growing it
//! again, by one request per window's worth of such answers to requests
//! sent since the last cut. Other
//! failures (5xx, no answer) neither grow nor shrink it: each pod is asked
//! again with its own backoff. Pure state, no clock of its own: the caller
//! passes the time.

use std::time::Duration;

use tokio::time::Instant;

/// The most evictions in flight at once. A node's requests fall in the
/// `system` priority level of API priority and fairness (FlowSchema
/// `system-nodes`, one flow per node): 30 of the 245 default shares, about
/// 74 seats of a server's default 600, with queues of 50 requests. Sixteen
/// is a fifth of the level's seats and a third of one queue, so one
/// draining node is never refused for its own burst and several draining
/// at once share the level fairly; and it is enough that the request
/// round trip, not the window, bounds a drain (16 evictions of a few
/// milliseconds each is thousands a second, against `kubectl drain`'s 5).
pub const MAX_IN_FLIGHT: usize = 16;
/// How long no eviction goes out after a throttling 429 that names no
/// Retry-After.
pub const THROTTLE_PAUSE: Duration = Duration::from_secs(1);

/// What the server made of one request, for the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedback {
    /// The server handled it (an eviction, a pod gone, a budget's refusal).
    Handled,
    /// A 429 without a budget's cause: the server is shedding load.
    Throttled { retry_after: Option<Duration> },
    /// It failed otherwise (5xx, no answer): says nothing about the load.
    Failed,
}

/// One request sent through the window: its place in the order of sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64);

/// The bound on evictions in flight; see the module doc.
#[derive(Debug, Clone)]
pub struct Window {
    /// Requests that may be in flight now (1..=`max`).
    limit: usize,
    max: usize,
    in_flight: usize,
    /// Answers counted toward the next increase.
    credit: usize,
    /// Requests sent so far.
    sent: u64,
    /// The `sent` count at the last cut: a throttled request sent before it
    /// was answered by a server the cut already slowed down for.
    cut_after: u64,
    /// No request goes out before this.
    paused_until: Option<Instant>,
}

impl Window {
    /// A window of at most `max` requests (at least 1), open wide.
    pub fn new(max: usize) -> Window {
        let max = max.max(1);
        Window {
            limit: max,
            max,
            in_flight: 0,
            credit: 0,
            sent: 0,
            cut_after: 0,
            paused_until: None,
        }
    }

    /// Requests that may be in flight at once now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Requests sent and not answered yet.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether another request may go out at `now`.
    pub fn open(&self, now: Instant) -> bool {
        self.in_flight < self.limit && self.paused_until.is_none_or(|until| now >= until)
    }

    /// When a pause (a server's Retry-After) ends, if one lasts beyond `now`.
    pub fn resumes_at(&self, now: Instant) -> Option<Instant> {
        self.paused_until.filter(|until| *until > now)
    }

    /// A request goes out.
    pub fn send(&mut self) -> Ticket {
        self.in_flight += 1;
        self.sent += 1;
        Ticket(self.sent)
    }

    /// The request of `ticket` was answered at `now`.
    pub fn answered(&mut self, ticket: Ticket, feedback: Feedback, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match feedback {
            // Answers to requests sent before the last cut came from the
            // server the cut slowed down for: they do not grow it back.
            Feedback::Handled if ticket.0 > self.cut_after => {
                if self.limit < self.max {
                    self.credit += 1;
                    if self.credit >= self.limit {
                        self.limit += 1;
                        self.credit = 0;
                    }
                }
            }
            Feedback::Throttled { retry_after } => {
                if ticket.0 > self.cut_after {
                    self.limit = (self.limit / 2).max(1);
                    self.credit = 0;
                    self.cut_after = self.sent;
                }
                let until = now + retry_after.unwrap_or(THROTTLE_PAUSE);
                self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
            }
            Feedback::Handled | Feedback::Failed => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn opens_wide_and_holds_at_most_its_limit() {
        let now = Instant::now();
        let mut w = Window::new(4);
        let tickets: Vec<Ticket> = (0..4)
            .map(|_| {
                assert!(w.open(now));
                w.send()
            })
            .collect();
        assert_eq!(w.in_flight(), 4);
        assert!(!w.open(now), "four in flight: the window is full");
        w.answered(tickets[0], Feedback::Handled, now);
        assert!(w.open(now));
        assert_eq!(w.limit(), 4, "never beyond its maximum");
        assert_eq!(Window::new(0).limit(), 1, "at least one request");
    }

    #[test]
    fn throttling_halves_once_per_window_and_pauses_for_retry_after() {
        let now = Instant::now();
        let mut w = Window::new(16);
        let first: Vec<Ticket> = (0..16).map(|_| w.send()).collect();
        // Every request of the burst is throttled: one cut, not sixteen.
        for t in &first {
            w.answered(*t, Feedback::Throttled { retry_after: None }, now);
        }
        assert_eq!(w.limit(), 8);
        assert_eq!(w.in_flight(), 0);
        assert!(!w.open(now), "paused");
        assert_eq!(w.resumes_at(now), Some(now + THROTTLE_PAUSE));
        assert!(!w.open(now + THROTTLE_PAUSE - ms(1)));
        assert!(w.open(now + THROTTLE_PAUSE));
        assert_eq!(w.resumes_at(now + THROTTLE_PAUSE), None);
        // A request sent after the cut and throttled cuts again; the
        // server's Retry-After is honoured, the longest one wins.
        let later = now + THROTTLE_PAUSE;
        let t = w.send();
        let u = w.send();
        w.answered(
            t,
            Feedback::Throttled {
                retry_after: Some(ms(3000)),
            },
            later,
        );
        w.answered(
            u,
            Feedback::Throttled {
                retry_after: Some(ms(10)),
            },
            later,
        );
        assert_eq!(w.limit(), 4, "one cut for t and u, sent together");
        assert_eq!(w.resumes_at(later), Some(later + ms(3000)));
        // Down to one, never zero.
        for _ in 0..5 {
            let t = w.send();
            w.answered(t, Feedback::Throttled { retry_after: None }, later);
        }
        assert_eq!(w.limit(), 1);
    }

    #[test]
    fn handled_answers_grow_it_back_by_one_a_window() {
        let now = Instant::now();
        let mut w = Window::new(16);
        let t = w.send();
        let older: Vec<Ticket> = (0..15).map(|_| w.send()).collect();
        w.answered(t, Feedback::Throttled { retry_after: None }, now);
        assert_eq!(w.limit(), 8);
        // The rest of the burst the server throttled does not count.
        for t in older {
            w.answered(t, Feedback::Handled, now);
        }
        assert_eq!(w.limit(), 8);
        let mut limits = Vec::new();
        for _ in 0..(8 + 9 + 10) {
            let t = w.send();
            w.answered(t, Feedback::Handled, now);
            limits.push(w.limit());
        }
        // Eight answers to reach 9, nine more to reach 10, ten to reach 11.
        assert_eq!(limits[6], 8);
        assert_eq!(limits[7], 9);
        assert_eq!(limits[15], 9);
        assert_eq!(limits[16], 10);
        assert_eq!(limits[26], 11);
        // Failures say nothing about the load.
        let t = w.send();
        w.answered(t, Feedback::Failed, now);
        assert_eq!(w.limit(), 11);
        assert!(!w.open(now), "still paused by the 429");
        assert!(w.open(now + THROTTLE_PAUSE));
        // Back to the maximum, and no further.
        for _ in 0..500 {
            let t = w.send();
            w.answered(t, Feedback::Handled, now);
        }
        assert_eq!(w.limit(), 16);
    }
}
