//! A timer with microsecond resolution for the looks at a contender about
//! to block (tokio's timers round up to the next millisecond, and a
//! handoff is a millisecond long). One timerfd, re-armed for each look and
//! awaited in the event loop like any other wake, so a signal or an inotify
//! event never waits behind a look; nothing is armed while no look is due.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::{Duration, Instant};

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The shortest wait armed: a timerfd armed with zero is disarmed.
const MIN_WAIT: Duration = Duration::from_micros(1);

struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// The timer. Without a timerfd (creation failed), waits fall back to
/// tokio's millisecond timers.
pub(super) struct PreciseTimer {
    fd: Option<AsyncFd<Fd>>,
}

impl std::fmt::Debug for PreciseTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreciseTimer")
            .field("timerfd", &self.fd.is_some())
            .finish()
    }
}

impl PreciseTimer {
    /// Must be called inside the tokio runtime (the fd is registered with
    /// its reactor).
    pub(super) fn new() -> Self {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(io::Error::from)
        .and_then(|t| {
            // SAFETY: the AsyncFd owns the TimerFd: its descriptor stays
            // open, and the same, until the AsyncFd is dropped.
            unsafe { AsyncFd::register_with_interest(Fd(t), Interest::READABLE) }
                .map_err(io::Error::from)
        });
        match fd {
            Ok(fd) => PreciseTimer { fd: Some(fd) },
            Err(err) => {
                tracing::warn!(%err, "no timerfd: looks at a contender about to block are made at millisecond resolution");
                PreciseTimer { fd: None }
            }
        }
    }

    /// Completes at `at` (a few microseconds after, on a quiet machine).
    pub(super) async fn until(&self, at: Instant) {
        let Some(fd) = &self.fd else {
            return tokio::time::sleep_until(at.into()).await;
        };
        let wait = at.saturating_duration_since(Instant::now()).max(MIN_WAIT);
        // Arming resets the expiry count: a stale expiry of an earlier arm
        // that lost its select is not read as this one.
        let armed = fd.get_ref().0.set(
            Expiration::OneShot(TimeSpec::from_duration(wait)),
            TimerSetTimeFlags::empty(),
        );
        if armed.is_err() {
            return tokio::time::sleep_until(at.into()).await;
        }
        loop {
            let Ok(mut ready) = fd.readable().await else {
                return tokio::time::sleep_until(at.into()).await;
            };
            let mut count = [0u8; 8];
            match ready.try_io(|fd| {
                nix::unistd::read(fd.get_ref().as_raw_fd(), &mut count).map_err(io::Error::from)
            }) {
                Ok(Ok(_)) => return,
                // Not expired yet (readiness was stale): wait again.
                Err(_would_block) => continue,
                Ok(Err(err)) => {
                    tracing::debug!(%err, "timerfd read failed; waiting on tokio's timer");
                    return tokio::time::sleep_until(at.into()).await;
                }
            }
        }
    }
}

/// Waits on `timer` until `at`, or forever without a moment.
pub(super) async fn until_opt(timer: &PreciseTimer, at: Option<Instant>) {
    match at {
        Some(at) => timer.until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn it_fires_at_its_moment_not_before() {
        let timer = PreciseTimer::new();
        assert!(timer.fd.is_some(), "timerfd available on Linux");
        for wait in [0, 1, 200, 1500] {
            let at = Instant::now() + Duration::from_micros(wait);
            timer.until(at).await;
            assert!(Instant::now() >= at, "fired before its moment");
        }
        // Its resolution is measured in benches/handoff.rs, not here.
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_rearmed_timer_ignores_an_earlier_expiry() {
        let timer = PreciseTimer::new();
        // Armed, then dropped before it was read (its select branch lost),
        // and expired meanwhile.
        {
            let first = timer.until(Instant::now() + Duration::from_micros(10));
            tokio::pin!(first);
            assert!(futures::poll!(first.as_mut()).is_pending());
        }
        std::thread::sleep(Duration::from_millis(1));
        let at = Instant::now() + Duration::from_millis(20);
        timer.until(at).await;
        assert!(Instant::now() >= at, "the stale expiry ended the new wait");
    }
}
