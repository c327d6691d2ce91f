//! Quiet, bounded retries against the API server, for every watch and call
//! of the supervisor, its drain, and the rollout controller.
//!
//! - [`Backoff`]: 0.5 s doubling with subtractive jitter to 10 s while the
//!   server does not answer, to 30 s while it answers with an error status;
//!   reset only by a success (a list that completed, a watch event, a call
//!   answered), never by the start of a new try (`Event::Init`).
//! - [`Outage`]: one log line per failed try during the first minute, then
//!   one summary line a minute, and one line when the server is back.
//! - [`Retry`] ties both to one kind of call, [`watch`] to one watch stream.
//!
//! kube-client's own ERROR line per failed request is filtered out by the
//! log setup (`observe::logging`): these are the lines an operator reads.

mod answers;
mod backoff;
mod outage;

pub use answers::{answers, client};
pub use backoff::{Backoff, Failure, FIRST, NO_ANSWER_CAP, STATUS_CAP};
pub use outage::{Line, Outage, LOUD_FOR, SUMMARY_EVERY};

use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use tracing::info;

/// The backoff and the outage log of one kind of call.
#[derive(Debug)]
pub struct Retry {
    backoff: Backoff,
    outage: Outage,
}

/// A failed try: the error, and the wait before the next one.
#[derive(Debug)]
pub struct Failed {
    pub error: kube::Error,
    pub retry_in: Duration,
}

impl Retry {
    /// `what` names the call in the log ("reporting the config status").
    pub fn new(what: impl Into<String>) -> Self {
        Retry {
            backoff: Backoff::new(),
            outage: Outage::new(what),
        }
    }

    /// Like [`Retry::new`], logged at debug level only.
    pub fn quiet(what: impl Into<String>) -> Self {
        Retry {
            backoff: Backoff::new(),
            outage: Outage::quiet(what),
        }
    }

    /// Records a success: the backoff starts again, and an outage is over.
    pub fn succeeded(&mut self) {
        self.backoff.reset();
        self.outage.ok();
    }

    /// Records a failed try (logging it if due); returns the wait before the next.
    pub fn failed(&mut self, error: &dyn std::fmt::Display, failure: Failure) -> Duration {
        let wait = self.backoff.failed(failure);
        if failure != Failure::Gone {
            self.outage.failed(error, failure, wait);
        }
        wait
    }

    /// Records a failed call; returns the wait before the next try.
    pub fn failed_call(&mut self, error: &kube::Error) -> Duration {
        self.failed(&crate::api_error::shown(error), Failure::of(error))
    }

    /// One try of `call`, recorded.
    pub async fn call<T, Fut>(&mut self, call: Fut) -> Result<T, Failed>
    where
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        match call.await {
            Ok(v) => {
                self.succeeded();
                Ok(v)
            }
            Err(error) => {
                let retry_in = self.failed_call(&error);
                Err(Failed { error, retry_in })
            }
        }
    }

    /// Tries `call` until it succeeds, waiting with backoff in between.
    pub async fn until_ok<T, F, Fut>(&mut self, mut call: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        loop {
            match self.call(call()).await {
                Ok(v) => return v,
                Err(failed) => tokio::time::sleep(failed.retry_in).await,
            }
        }
    }
}

/// A watch stream that retries quietly: an error is logged by an [`Outage`]
/// (named `what`) and the next poll of `stream` waits with backoff; the
/// backoff is reset by any event but `Event::Init` (which the watcher
/// yields before it tries to list, so it says nothing about the server),
/// and after a try that got no answer, by the client's next 2xx answer
/// ([`answers`]; a watch resumed after an outage yields nothing until
/// something changes). A 410 re-lists at once. Yields the events only.
pub fn watch<K, S>(stream: S, what: impl Into<String>) -> BoxStream<'static, Event<K>>
where
    K: Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    let what = what.into();
    watch_with(stream, Retry::new(what.clone()), what)
}

/// [`watch`] with its own [`Retry`] (e.g. [`Retry::quiet`]).
pub fn watch_with<K, S>(stream: S, retry: Retry, what: String) -> BoxStream<'static, Event<K>>
where
    K: Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    futures::stream::unfold(
        Watch {
            stream: stream.boxed(),
            retry,
            what,
            unanswered_since: None,
        },
        |mut w| async move {
            let event = w.next().await?;
            Some((event, w))
        },
    )
    .boxed()
}

/// How often a watch whose last try got no answer looks whether the server
/// answers again (see [`answers`]).
const LOOK_EVERY: Duration = Duration::from_secs(1);

struct Watch<K> {
    stream: BoxStream<'static, Result<Event<K>, watcher::Error>>,
    retry: Retry,
    what: String,
    /// The count of answers at the last failure, if it got no answer.
    unanswered_since: Option<u64>,
}

impl<K> Watch<K> {
    async fn next(&mut self) -> Option<Event<K>> {
        loop {
            let item = match self.unanswered_since {
                None => self.stream.next().await?,
                // A watch that starts again yields nothing until something
                // changes: the client's count of answers says it is back.
                Some(at) => {
                    let mut look = tokio::time::interval(LOOK_EVERY);
                    look.tick().await;
                    let item = loop {
                        tokio::select! {
                            item = self.stream.next() => break Some(item),
                            _ = look.tick() => if answers() > at { break None },
                        }
                    };
                    match item {
                        Some(item) => item?,
                        None => {
                            self.unanswered_since = None;
                            self.retry.succeeded();
                            continue;
                        }
                    }
                }
            };
            match item {
                Ok(Event::Init) => return Some(Event::Init),
                Ok(event) => {
                    self.unanswered_since = None;
                    self.retry.succeeded();
                    return Some(event);
                }
                Err(err) => {
                    let failure = Failure::of_watch(&err);
                    let wait = self
                        .retry
                        .failed(&crate::api_error::shown_watch(&err, None), failure);
                    self.unanswered_since = (failure == Failure::NoAnswer).then(answers);
                    if failure == Failure::Gone {
                        info!(target: "kubelet_pivot::api", "{}: expired (410 Gone); listing again now", self.what);
                    }
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// [`Backoff`] as kube-runtime's controller takes it (its watch of the
/// main resource): kube-runtime cannot say how a try failed, so this waits
/// as after no answer (to [`NO_ANSWER_CAP`]); [`SharedBackoff::last_wait`]
/// tells the log what it chose.
#[derive(Debug, Clone, Default)]
pub struct SharedBackoff(std::sync::Arc<std::sync::Mutex<(Backoff, Duration)>>);

impl SharedBackoff {
    /// The wait chosen after the last failure.
    pub fn last_wait(&self) -> Duration {
        self.0.lock().map_or(Duration::ZERO, |g| g.1)
    }
}

impl Iterator for SharedBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let mut g = self.0.lock().ok()?;
        let wait = g.0.failed(Failure::NoAnswer);
        g.1 = wait;
        Some(wait)
    }
}

impl kube::runtime::utils::Backoff for SharedBackoff {
    fn reset(&mut self) {
        if let Ok(mut g) = self.0.lock() {
            g.0.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    fn refused() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        ))))
    }

    /// A watcher against a dead server, as kube-runtime's is: `Init` before
    /// every list try, then the failed list. Records when each list was tried.
    fn dead_server(
        tries: std::sync::Arc<std::sync::Mutex<Vec<Instant>>>,
        alive_after: Duration,
    ) -> impl Stream<Item = Result<Event<String>, watcher::Error>> + Send {
        let start = Instant::now();
        futures::stream::iter(0..).flat_map(move |_| {
            let now = Instant::now();
            tries.lock().unwrap().push(now);
            let second: Result<Event<String>, watcher::Error> = if now - start >= alive_after {
                Ok(Event::InitDone)
            } else {
                Err(refused())
            };
            futures::stream::iter([Ok(Event::Init), second])
        })
    }

    #[tokio::test(start_paused = true)]
    async fn init_does_not_reset_the_backoff_of_a_watch() {
        let tries = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let start = Instant::now();
        let mut events = watch(dead_server(tries.clone(), Duration::from_secs(60)), "test");
        loop {
            match events.next().await {
                Some(Event::InitDone) => break,
                Some(_) => {}
                None => panic!("ended"),
            }
        }
        let tries = tries.lock().unwrap().clone();
        // 0.5 s doubling to 10 s: about 10 tries in a minute, not hundreds.
        assert!((8..=13).contains(&tries.len()), "{}", tries.len());
        let gaps: Vec<Duration> = tries.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| *g <= NO_ANSWER_CAP), "{gaps:?}");
        assert!(
            gaps.last().unwrap() >= &(NO_ANSWER_CAP * 8 / 10),
            "{gaps:?}"
        );
        // The server was back at 60 s; the watch listed at most a cap later.
        let back = *tries.last().unwrap() - start;
        assert!(
            back >= Duration::from_secs(60) && back <= Duration::from_secs(70),
            "{back:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_resumed_without_events_ends_its_outage_on_the_next_answer() {
        let stream = futures::stream::iter([Err(refused())]).chain(futures::stream::pending());
        let mut w: Watch<String> = Watch {
            stream: stream.boxed(),
            retry: Retry::new("test"),
            what: "test".into(),
            unanswered_since: None,
        };
        let wait = Duration::from_secs(5);
        assert!(tokio::time::timeout(wait, w.next()).await.is_err());
        assert!(w.retry.outage.is_down(), "the failure was recorded");
        // The watch started again (no event), and the client got an answer.
        answers::record();
        assert!(tokio::time::timeout(wait, w.next()).await.is_err());
        assert!(!w.retry.outage.is_down(), "the outage did not end");
        assert!(w.unanswered_since.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_resets_only_on_success() {
        let mut r = Retry::new("test");
        let fail = || async {
            Err::<(), _>(kube::Error::Service(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            ))))
        };
        let mut last = Duration::ZERO;
        for _ in 0..8 {
            last = r.call(fail()).await.unwrap_err().retry_in;
        }
        assert!(last >= NO_ANSWER_CAP * 8 / 10);
        assert!(r.call(async { Ok::<_, kube::Error>(()) }).await.is_ok());
        assert!(r.call(fail()).await.unwrap_err().retry_in <= FIRST);
    }
}
