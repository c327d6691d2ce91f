//! Pod deletion and termination: a graceful delete marks the pod, the reaper thread removes
//! it when due.

use std::sync::Weak;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use crate::clock::{now_rfc3339, rfc3339};
use crate::decode::with_type_meta;
use crate::resource::{ApiGroup, Resource, Target};
use crate::server::Shared;
use crate::store::{finalizers, is_deleting, EventType, Key, Opts, Outcome, State};
use crate::watch::WATCH_POLL;

use super::pod::is_terminal;

/// A pod being terminated, removed when due unless it was replaced meanwhile.
#[derive(Clone, Debug)]
pub(crate) struct Termination {
    key: Key,
    uid: String,
    due: Instant,
}

pub(super) fn success_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

pub(super) fn served_pod(obj: Value) -> Value {
    with_type_meta(obj, Resource::Pods, ApiGroup::Core)
}

impl State {
    /// A pod DELETE after its preconditions (rest.BeforeDelete with the pod strategy's
    /// CheckGracefulDelete): at once if the grace period is 0 (or the pod is unbound or
    /// terminal) or there is no termination delay, else marked for deletion.
    pub(crate) fn delete_pod(
        &mut self,
        target: &Target,
        old: Value,
        options: Option<&Value>,
        opts: &Opts,
    ) -> Outcome {
        let requested = options
            .and_then(|o| o.get("gracePeriodSeconds"))
            .and_then(Value::as_i64);
        let mut period = requested
            .or_else(|| old["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(0);
        if old["spec"]["nodeName"].as_str().unwrap_or("").is_empty() || is_terminal(&old) {
            period = 0;
        }
        if period < 0 {
            period = 1;
        }
        if opts.dry_run {
            return Outcome::ok(served_pod(old));
        }
        if is_deleting(&old) {
            let current = old["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(0);
            if current == 0 || (requested.is_some() && period == 0) {
                return self.remove_pod(old);
            }
            if requested.is_some() && period < current {
                // Only a shorter grace period may be given.
                return self.mark_terminating(target, old, period);
            }
            return Outcome::ok(served_pod(old));
        }
        if period == 0 || self.pod_termination_delay.is_zero() {
            return self.remove_pod(old);
        }
        self.mark_terminating(target, old, period)
    }

    /// Sets deletionTimestamp and deletionGracePeriodSeconds and schedules the removal.
    fn mark_terminating(&mut self, target: &Target, old: Value, period: i64) -> Outcome {
        let seconds = Duration::from_secs(period.unsigned_abs());
        let mut obj = old.clone();
        obj["metadata"]["deletionTimestamp"] = json!(rfc3339(SystemTime::now() + seconds));
        obj["metadata"]["deletionGracePeriodSeconds"] = json!(period);
        let stored = self.commit(Resource::Pods, EventType::Modified, obj, Some(old));
        let key = target.key();
        let uid = stored["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let due = Instant::now() + self.pod_termination_delay.min(seconds);
        match self
            .terminations
            .iter_mut()
            .find(|t| t.key == key && t.uid == uid)
        {
            Some(t) => t.due = t.due.min(due),
            None => self.terminations.push(Termination { key, uid, due }),
        }
        Outcome::ok(served_pod(stored))
    }

    /// The final delete (grace period 0): gone, or kept until its finalizers are removed.
    fn remove_pod(&mut self, old: Value) -> Outcome {
        if !finalizers(&old).is_empty() {
            if is_deleting(&old)
                && old["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0)
            {
                return Outcome::ok(served_pod(old));
            }
            let mut obj = old.clone();
            if !is_deleting(&obj) {
                obj["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            }
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            let stored = self.commit(Resource::Pods, EventType::Modified, obj, Some(old));
            return Outcome::ok(served_pod(stored));
        }
        let stored = self.commit(Resource::Pods, EventType::Deleted, old.clone(), Some(old));
        Outcome::ok(served_pod(stored))
    }

    /// Finishes the terminations due at `now`; returns whether anything changed and when the
    /// next one is due.
    pub(crate) fn finish_terminations(&mut self, now: Instant) -> (bool, Option<Instant>) {
        let (due, pending): (Vec<Termination>, Vec<Termination>) =
            std::mem::take(&mut self.terminations)
                .into_iter()
                .partition(|t| t.due <= now);
        self.terminations = pending;
        let mut changed = false;
        for termination in due {
            let Some(pod) = self.objects(Resource::Pods).get(&termination.key).cloned() else {
                continue;
            };
            if pod["metadata"]["uid"].as_str() == Some(termination.uid.as_str())
                && is_deleting(&pod)
            {
                self.remove_pod(pod);
                changed = true;
            }
        }
        (changed, self.terminations.iter().map(|t| t.due).min())
    }
}

/// The pod termination thread: removes terminating pods when due.
pub(super) fn reap(shared: Weak<Shared>) {
    loop {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut state = shared.lock();
        let (changed, next) = state.finish_terminations(Instant::now());
        if changed {
            shared.changed.notify_all();
        }
        let wait = next
            .map(|due| due.saturating_duration_since(Instant::now()))
            .unwrap_or(WATCH_POLL)
            .clamp(Duration::from_millis(1), WATCH_POLL);
        drop(
            shared
                .changed
                .wait_timeout(state, wait)
                .unwrap_or_else(|poison| poison.into_inner()),
        );
    }
}
