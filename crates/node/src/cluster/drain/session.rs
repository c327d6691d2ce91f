//! One drain's eviction loop: the pods bound to the node are listed in
//! pages of [`PAGE_SIZE`] (`limit` + `continue`, `fieldSelector
//! spec.nodeName=NODE` as the Node authorizer requires) and then followed
//! by a watch from the list's resourceVersion (re-listed after a 410, with
//! backoff after other errors); once a list is complete, each pod that
//! must leave is asked to, several requests in flight at once (as many as
//! the [`Window`] allows: at most [`MAX_IN_FLIGHT`], fewer while the server
//! throttles), and asked again with backoff while the server refuses.
//! Memory is the [`NodePods`] set (a few hundred bytes per pod), one page
//! and the requests in flight.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered};
use futures::{FutureExt, StreamExt};
use kube::runtime::watcher::{self, Event, ListSemantic};
use kube::Api;
use tokio::time::Instant;
use tracing::{debug, info};

use super::answer::{self, Answer};
use super::pods::{Ask, DrainPod, NodePods, PodKey, Refusals};
use super::window::{Feedback, Ticket, Window, MAX_IN_FLIGHT};
use super::{Drainer, Failure, Progress, Round};
use crate::config::store::{BlockReason, BlockedPods, DrainFailure};
use crate::metrics::EvictionResult;
use kp_runtime::retry::{self, Retry};

/// Pods per list page.
pub const PAGE_SIZE: u32 = 500;
/// How often [`Session::step`] reports progress while pods remain.
pub const REPORT_EVERY: Duration = Duration::from_millis(500);
/// Backoff of a pod whose eviction was refused: 0.5 s doubling to 8 s.
const EVICT_BACKOFF: Duration = Duration::from_millis(500);
const EVICT_BACKOFF_MAX: Duration = Duration::from_secs(8);
/// Pods named in a log line or a timeout message.
const EXAMPLES: usize = 5;
/// Evictions accepted whose effect the watch has not shown yet, at most:
/// the evictions never outrun the watch by more than this, so a watch that
/// falls behind (the server drops a watcher that cannot keep up with its
/// history) does not make the drain re-list all pods again and again. An
/// eviction in flight counts (the server may have done it already).
const MAX_UNOBSERVED: usize = 64;
/// How long a drained node waits for the answers still in flight, so that
/// they are counted.
const SETTLE_IN_FLIGHT: Duration = Duration::from_secs(2);

type PodEvents = BoxStream<'static, Result<Event<DrainPod>, watcher::Error>>;

/// One eviction request, answered.
struct Sent {
    key: PodKey,
    /// `namespace/name`.
    pod: String,
    ticket: Ticket,
    answer: Answer,
}

/// The eviction requests in flight.
type InFlight = FuturesUnordered<BoxFuture<'static, Sent>>;

/// The delay before the `attempts`-th retry.
fn backoff(attempts: u8, retry_after: Option<Duration>) -> Duration {
    let doubled = EVICT_BACKOFF.saturating_mul(1 << u32::from(attempts.min(8)).saturating_sub(1));
    doubled
        .min(EVICT_BACKOFF_MAX)
        .max(retry_after.unwrap_or_default())
}

/// The last refusal of one kind: which pod, and the server's words.
#[derive(Debug, Clone)]
struct LastRefusal {
    pod: String,
    code: u16,
    message: String,
}

/// A drain in progress: see the module doc.
pub struct Session {
    drainer: Drainer,
    events: PodEvents,
    /// The backoff and quiet log of the list and watch of pods.
    watch_retry: Retry,
    /// The stream is not polled before this (after a failure).
    watch_until: Option<Instant>,
    pods: NodePods,
    /// Pods to ask now (stale entries are skipped).
    ready: VecDeque<PodKey>,
    /// Pods to ask again, by when.
    retries: BinaryHeap<Reverse<(Instant, PodKey)>>,
    /// How many evictions may be in flight now.
    window: Window,
    /// The eviction requests sent and not answered yet; they outlive a
    /// [`Session::step`] dropped at its deadline.
    in_flight: InFlight,
    evicted: usize,
    last: BTreeMap<BlockReason, LastRefusal>,
    /// Why the list or watch fails, while it does.
    list_error: Option<String>,
    /// Whether the pods the drain evicts unlike `kubectl drain`'s defaults
    /// were logged (once per drain).
    noted: bool,
}

impl Session {
    pub(super) fn new(drainer: Drainer) -> Session {
        Session {
            events: pod_events(&drainer),
            drainer,
            watch_retry: Retry::new("listing and watching the pods bound to this node"),
            watch_until: None,
            pods: NodePods::default(),
            ready: VecDeque::new(),
            retries: BinaryHeap::new(),
            window: Window::new(MAX_IN_FLIGHT),
            in_flight: FuturesUnordered::new(),
            evicted: 0,
            last: BTreeMap::new(),
            list_error: None,
            noted: false,
        }
    }

    /// Works until every pod that must leave has left ([`Round::Drained`]),
    /// the server refuses for good ([`Round::Failed`]), or [`REPORT_EVERY`]
    /// has passed ([`Round::Pending`]). Cancel-safe: the caller may drop it
    /// at its deadline (the requests in flight stay with the session).
    pub async fn step(&mut self) -> Round {
        let report_at = Instant::now() + REPORT_EVERY;
        loop {
            if self.pods.drained() {
                self.settle_in_flight().await;
                return Round::Drained {
                    evicted: self.evicted,
                };
            }
            let now = Instant::now();
            self.requeue(now);
            if now >= report_at {
                return Round::Pending(self.progress());
            }
            self.send_ready(now);
            let mut wake = self
                .retries
                .peek()
                .map_or(report_at, |Reverse((at, _))| (*at).min(report_at));
            if !self.ready.is_empty() {
                // Pods wait for the end of a pause the server asked for.
                if let Some(at) = self.window.resumes_at(now) {
                    wake = wake.min(at);
                }
            }
            let watching = self.watch_until.is_none();
            let resume = self.watch_until.unwrap_or(report_at);
            let answers = !self.in_flight.is_empty();
            tokio::select! {
                biased;
                ev = self.events.next(), if watching => {
                    if let Some(failure) = self.on_event(ev) {
                        return Round::Failed(failure);
                    }
                }
                () = tokio::time::sleep_until(resume), if !watching => {
                    self.watch_until = None;
                }
                Some(sent) = self.in_flight.next(), if answers => {
                    if let Some(failure) = self.on_answer(sent) {
                        return Round::Failed(failure);
                    }
                }
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// Every pod left: the answers still in flight are counted before the
    /// drain reports (the watch often shows a pod gone before its eviction's
    /// answer arrives, and the count of evictions must be true), for at
    /// most [`SETTLE_IN_FLIGHT`]. A refusal now changes nothing: its pod is
    /// gone. Cancel-safe, as [`step`](Self::step).
    async fn settle_in_flight(&mut self) {
        let until = Instant::now() + SETTLE_IN_FLIGHT;
        while !self.in_flight.is_empty() {
            tokio::select! {
                Some(sent) = self.in_flight.next() => {
                    // A fatal answer for a pod that left is moot.
                    let _ = self.on_answer(sent);
                }
                () = tokio::time::sleep_until(until) => return,
            }
        }
    }

    /// Sends the evictions of queued pods, as many as may be in flight.
    /// Evictions wait for the list's end (kubectl lists first too):
    /// evictions between pages would change what the next page's snapshot
    /// must be rebuilt from, and may outrun the server's history (410 on
    /// `continue`, a re-list from the start). Never more than
    /// [`MAX_UNOBSERVED`] ahead of the watch, in flight included.
    fn send_ready(&mut self, now: Instant) {
        while self.pods.current()
            && self.window.open(now)
            && self.pods.unobserved() < MAX_UNOBSERVED
        {
            let Some(key) = self.ready.pop_front() else {
                return;
            };
            let (namespace, name, refused) = match self.pods.get(&key) {
                Some(t) if !t.facts.deleting && !t.ask.sent() => {
                    (t.namespace.clone(), t.name.clone(), t.ask.refusals())
                }
                _ => continue,
            };
            self.pods.set_ask(&key, Ask::Asking(refused));
            let ticket = self.window.send();
            let drainer = self.drainer.clone();
            let uid = key.uid();
            self.in_flight.push(
                async move {
                    let result = drainer.evict(&namespace, &name, uid.as_deref()).await;
                    Sent {
                        key,
                        pod: format!("{namespace}/{name}"),
                        ticket,
                        answer: answer::of_result(result),
                    }
                }
                .boxed(),
            );
        }
    }

    /// Moves the pods whose backoff ended to the queue.
    fn requeue(&mut self, now: Instant) {
        while let Some(Reverse((at, _))) = self.retries.peek() {
            if *at > now {
                break;
            }
            if let Some(Reverse((_, key))) = self.retries.pop() {
                self.ready.push_back(key);
            }
        }
    }

    /// Applies one item of the list-and-watch stream.
    fn on_event(&mut self, ev: Option<Result<Event<DrainPod>, watcher::Error>>) -> Option<Failure> {
        match ev {
            Some(Ok(event)) => {
                // `Init` starts a list try: it says nothing about the server.
                if !matches!(event, Event::Init) {
                    self.watch_retry.succeeded();
                    self.list_error = None;
                }
                match event {
                    Event::Init => {
                        debug!("listing the pods bound to this node");
                        self.pods.begin_list();
                    }
                    Event::InitApply(pod) | Event::Apply(pod) => {
                        if let Some(key) = self.pods.apply(&pod) {
                            self.ready.push_back(key);
                        }
                    }
                    Event::Delete(pod) => self.pods.remove(&pod),
                    Event::InitDone => {
                        self.pods.end_list();
                        debug!(
                            pods = self.pods.remaining(),
                            "listed the pods bound to this node; watching them"
                        );
                        self.note_unlike_kubectl();
                    }
                }
                None
            }
            Some(Err(err)) => {
                if let Some(status) = forbidden(&err) {
                    return Some(Failure {
                        kind: DrainFailure::Forbidden,
                        message: format!(
                            "the node's credentials may not list or watch its pods: {}",
                            answer::cleaned(&status)
                        ),
                    });
                }
                let failure = retry::Failure::of_watch(&err);
                // Logged by watch_retry: a line a try for a minute, then a summary a minute.
                let wait = self
                    .watch_retry
                    .failed(&kp_runtime::api_error::shown_watch(&err, None), failure);
                if failure == retry::Failure::Gone {
                    info!("the watch of the pods bound to this node expired (410 Gone); re-listing them");
                } else {
                    self.list_error = Some(answer::cleaned(&err.to_string()));
                    self.watch_until = Some(Instant::now() + wait);
                }
                None
            }
            // The watcher never ends; if it did, start it again.
            None => {
                self.events = pod_events(&self.drainer);
                None
            }
        }
    }

    /// Applies the answer to one eviction request.
    fn on_answer(&mut self, sent: Sent) -> Option<Failure> {
        let Sent {
            key,
            pod,
            ticket,
            answer,
        } = sent;
        let (metric, feedback) = match &answer {
            Answer::Evicted => (EvictionResult::Evicted, Feedback::Handled),
            Answer::Gone => (EvictionResult::Gone, Feedback::Handled),
            Answer::Refused {
                reason: BlockReason::DisruptionBudget,
                ..
            } => (EvictionResult::Blocked, Feedback::Handled),
            Answer::Refused {
                reason: BlockReason::ServerError,
                code: 429,
                retry_after,
                ..
            } => (
                EvictionResult::Failed,
                Feedback::Throttled {
                    retry_after: *retry_after,
                },
            ),
            Answer::Refused { .. } | Answer::Fatal { .. } => {
                (EvictionResult::Failed, Feedback::Failed)
            }
        };
        self.drainer.metrics.disruption.eviction(metric);
        let before = self.window.limit();
        self.window.answered(ticket, feedback, Instant::now());
        if self.window.limit() < before {
            info!(
                in_flight = self.window.limit(),
                "the API server throttles the evictions (429 without a PodDisruptionBudget); sending fewer at once"
            );
        }
        // The watch may have shown the pod gone before the answer came.
        let refused = self.pods.get(&key).and_then(|t| t.ask.refusals());
        match answer {
            Answer::Evicted => {
                debug!(%pod, "evicted");
                self.pods.set_ask(&key, Ask::Asked);
                self.evicted += 1;
            }
            Answer::Gone => self.pods.set_ask(&key, Ask::Asked),
            Answer::Refused {
                reason,
                code,
                message,
                retry_after,
            } => {
                let attempts = refused.map_or(1, |r| r.attempts.saturating_add(1));
                if self.pods.get(&key).is_some() {
                    self.pods
                        .set_ask(&key, Ask::Refused(Refusals { attempts, reason }));
                    let delay = backoff(attempts, retry_after);
                    debug!(%pod, code, %message, reason = reason.describe(), retry_in = %humantime::format_duration(delay), "eviction refused; asking again later");
                    self.retries.push(Reverse((Instant::now() + delay, key)));
                }
                self.last.insert(reason, LastRefusal { pod, code, message });
            }
            Answer::Fatal { failure, message } => {
                return Some(Failure {
                    kind: failure,
                    message: format!("cannot evict pod {pod}: {message}"),
                })
            }
        }
        None
    }

    /// Logs, once, the pods this drain evicts that `kubectl drain` would
    /// refuse without `--force` or `--delete-emptydir-data`.
    fn note_unlike_kubectl(&mut self) {
        if self.noted {
            return;
        }
        self.noted = true;
        let pick = |f: fn(&super::pods::PodFacts) -> bool| {
            let mut n = 0usize;
            let mut names = Vec::new();
            for t in self
                .pods
                .iter()
                .filter(|t| f(&t.facts) && !t.facts.terminal)
            {
                n += 1;
                if names.len() < EXAMPLES {
                    names.push(t.key());
                }
            }
            (n, names.join(", "))
        };
        let (bare, bare_names) = pick(|f| f.bare);
        if bare > 0 {
            info!(pods = bare, examples = %bare_names, "evicting pods that declare no controller: nothing re-creates them (kubectl drain needs --force for these)");
        }
        let (local, local_names) = pick(|f| f.local_storage);
        if local > 0 {
            info!(pods = local, examples = %local_names, "evicting pods with emptyDir volumes: their data is deleted (kubectl drain needs --delete-emptydir-data for these)");
        }
    }

    /// Where the drain stands.
    pub fn progress(&self) -> Progress {
        let mut counts: BTreeMap<BlockReason, usize> = BTreeMap::new();
        for t in self.pods.iter() {
            if let Some(Refusals { reason, .. }) = t.ask.refusals() {
                if !t.facts.deleting {
                    *counts.entry(reason).or_default() += 1;
                }
            }
        }
        let blocked = counts
            .into_iter()
            .map(|(reason, pods)| {
                let last = self.last.get(&reason);
                BlockedPods {
                    reason,
                    pods,
                    example: last.map(|l| l.pod.clone()).unwrap_or_default(),
                    code: last.map_or(0, |l| l.code),
                    message: last.map(|l| l.message.clone()).unwrap_or_default(),
                }
            })
            .collect();
        Progress {
            remaining: self.pods.count(),
            evicted: self.evicted,
            blocked,
            list_error: self.list_error.clone(),
        }
    }

    /// A few of the pods still on the node (`namespace/name`).
    pub fn examples(&self) -> Vec<String> {
        let mut names: Vec<String> = self.pods.iter().take(EXAMPLES).map(|t| t.key()).collect();
        names.sort();
        names
    }
}

/// The list-and-watch of the pods bound to the drained node.
fn pod_events(drainer: &Drainer) -> PodEvents {
    let api: Api<DrainPod> = Api::all(drainer.client.clone());
    let config = watcher::Config::default()
        .fields(&format!("spec.nodeName={}", drainer.node))
        .page_size(PAGE_SIZE)
        // resourceVersion=0 is served from the watch cache, which may
        // ignore `limit`: list the most recent state, in pages.
        .list_semantic(ListSemantic::MostRecent);
    watcher::watcher(api, config).boxed()
}

/// The server's message when it answered the list or watch with 403.
fn forbidden(err: &watcher::Error) -> Option<String> {
    match err {
        watcher::Error::WatchError(status) if status.code == 403 => Some(status.message.clone()),
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
            if status.code == 403 =>
        {
            Some(status.message.clone())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_backoff_doubles_to_its_cap_and_honours_retry_after() {
        let delays: Vec<Duration> = (1..=7).map(|a| backoff(a, None)).collect();
        assert_eq!(
            delays,
            [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0].map(Duration::from_secs_f64)
        );
        assert_eq!(backoff(u8::MAX, None), EVICT_BACKOFF_MAX);
        assert_eq!(
            backoff(1, Some(Duration::from_secs(10))),
            Duration::from_secs(10)
        );
    }
}
