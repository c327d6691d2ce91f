//! Backoff and retries against the API server: the backoff of a failed
//! watch (short after a connection failure, longer after an error status,
//! none after a 410), and the retry of a status patch.

use std::time::{Duration, SystemTime};

use kube::runtime::watcher;
use tracing::debug;

/// Retries of a status patch on conflict / throttling / server errors.
const PATCH_ATTEMPTS: u32 = 5;
/// First delay after a failed watch or list; it doubles up to
/// WATCH_BACKOFF_MAX after a connection failure (the node is then at most
/// about a second behind an API server that is back) and up to
/// WATCH_BACKOFF_API_MAX after an answer with an error status (403, 429,
/// 5xx: the server is up and asked us to wait), plus up to 25 % jitter. An
/// expired resourceVersion (410) is no failure: the re-list goes out at once.
const WATCH_BACKOFF: Duration = Duration::from_millis(100);
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(1);
const WATCH_BACKOFF_API_MAX: Duration = Duration::from_secs(10);

/// The backoff of one watch: failures delay the next poll of its stream;
/// any event and any 410 reset it.
pub(crate) struct WatchBackoff {
    delay: Duration,
    /// The stream is not polled before this.
    pub(crate) until: Option<tokio::time::Instant>,
}

impl WatchBackoff {
    pub(crate) fn new() -> Self {
        WatchBackoff {
            delay: WATCH_BACKOFF,
            until: None,
        }
    }

    pub(crate) fn ok(&mut self) {
        self.delay = WATCH_BACKOFF;
        self.until = None;
    }

    /// Records a failure; returns the wait before the next try (zero after
    /// a 410, which the watcher answers with a fresh list).
    pub(crate) fn failed(&mut self, err: &watcher::Error) -> Duration {
        if is_gone(err) {
            self.ok();
            return Duration::ZERO;
        }
        let cap = if is_api_error(err) {
            WATCH_BACKOFF_API_MAX
        } else {
            WATCH_BACKOFF_MAX
        };
        let base = self.delay.min(cap);
        let nanos = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let wait = base + base * (nanos % 250) / 1000;
        self.until = Some(tokio::time::Instant::now() + wait);
        self.delay = (base * 2).min(cap);
        wait
    }
}

/// Whether the server answered with an error status (rather than not at all).
fn is_api_error(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchError(_) => true,
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => api_code(e).is_some(),
        watcher::Error::NoResourceVersion => true,
    }
}

/// Whether a watch failed because its resourceVersion expired (410 Gone),
/// as an ERROR event in the stream or as the answer to the watch request.
fn is_gone(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => api_code(e) == Some(410),
        watcher::Error::NoResourceVersion => false,
    }
}

pub(super) fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Retries an API call on 409/429/5xx and transport errors with a short
/// exponential backoff.
pub(super) async fn retry<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(err) => {
                let retryable = match api_code(&err) {
                    Some(code) => code == 409 || code == 429 || code >= 500,
                    None => true,
                };
                if !retryable || attempt >= PATCH_ATTEMPTS {
                    return Err(err);
                }
                debug!(%err, attempt, "retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Box<kube::core::Status> {
        Box::new(serde_json::from_value(serde_json::json!({"code": code})).unwrap())
    }

    #[tokio::test]
    async fn watch_backoff_is_short_for_connection_failures_and_none_after_a_410() {
        let mut b = WatchBackoff::new();
        let refused = || {
            watcher::Error::WatchStartFailed(kube::Error::Service(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            ))))
        };
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            last = b.failed(&refused());
            assert!(last <= WATCH_BACKOFF_MAX * 5 / 4, "{last:?}");
        }
        assert!(last >= WATCH_BACKOFF_MAX, "{last:?}");
        // However long the outage was: an expired resourceVersion re-lists at once.
        let gone = watcher::Error::WatchError(status(410));
        assert!(is_gone(&gone));
        assert_eq!(b.failed(&gone), Duration::ZERO);
        assert!(b.until.is_none());
        assert!(is_gone(&watcher::Error::WatchStartFailed(
            kube::Error::Api(status(410))
        )));
        // A server that answers with errors is given more room.
        let mut api = Duration::ZERO;
        for _ in 0..20 {
            api = b.failed(&watcher::Error::InitialListFailed(kube::Error::Api(
                status(503),
            )));
        }
        assert!(api >= WATCH_BACKOFF_API_MAX, "{api:?}");
        // A connection failure after them waits no more than its own cap.
        assert!(b.failed(&refused()) <= WATCH_BACKOFF_MAX * 5 / 4);
        b.ok();
        assert!(b.failed(&refused()) <= WATCH_BACKOFF * 5 / 4);
    }
}
