//! The disruption flow, free of I/O: given what one config check read (the
//! running config reached or a change to it, the store's record, whether a
//! drain or gate task runs, the node's policy) and the time, what to do:
//! hold, drain, restart, resume, gate or forget. The driver
//! (`disrupt::mod`) gathers the inputs and carries the decision out; the
//! drain task's record changes (`attempt`, `drained`, `gave_up`) are here
//! too. Every arm is unit-tested below.
//!
//! ```text
//!  change, action:      record (same target)            decision
//!  no class / restart   any                             Restart
//!  hold                 Held                            StillHeld
//!  hold                 other (cordoned by us?)         Hold (uncordon first)
//!  drain, task runs     any                             Draining
//!  drain                BackingOff, retryAt not due     BackingOff
//!  drain                drained (Restarting/HealthGate) RestartDrained
//!  drain                none / other                    Drain (resume: cordon kept)
//!  reached:             none                            Idle
//!  reached, task runs   not Evicting                    Tending
//!  reached              not cordoned, not drained       Forget
//!  reached              otherwise                       Gate
//! ```

use std::time::{Duration, SystemTime};

use crate::cluster::drain::Failure;
use crate::config::store::{ConfigSource, DisruptionRecord, DrainPhase};
use kp_contract::time::rfc3339;
use kp_kubelet_config::disruption::{Action, Change, Class, Policy};
use kp_kubelet_config::HASH_ALGORITHM;

/// Longest wait between retries: 32 × `--drain-retry`.
const RETRY_DOUBLINGS: u32 = 5;
/// The bound of a record's `lastError`.
const MAX_LAST_ERROR: usize = 512;

/// The config a change brings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::supervisor) struct Target {
    pub hash: String,
    /// Its source (`None`: the local config).
    pub source: Option<ConfigSource>,
}

/// What the config check found.
#[derive(Debug, Clone, Copy)]
pub(in crate::supervisor) enum Wanted<'a> {
    /// The running kubelet runs the resolved config: a record left from a
    /// drain is finished.
    Reached,
    /// The resolved config (`target`) differs from the running one.
    Changed {
        target: &'a Target,
        change: &'a Change,
        /// The node's policy (command line and node overrides).
        policy: &'a Policy,
    },
}

/// Everything the decision depends on.
#[derive(Debug, Clone, Copy)]
pub(in crate::supervisor) struct Inputs<'a> {
    pub wanted: Wanted<'a>,
    /// The change waiting or in progress, as the store has it.
    pub record: Option<&'a DisruptionRecord>,
    /// A drain or health-gate task runs.
    pub task_running: bool,
    /// An API server is configured (a drain needs one).
    pub api: bool,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::supervisor) enum Decision {
    /// Reached, no record: nothing pending.
    Idle,
    /// Reached while a task runs for the record (a gate, or a drain that
    /// restarted): let it finish; the record is what we know.
    Tending(DisruptionRecord),
    /// Reached before anything was done to the node (not cordoned by us,
    /// not drained): the change is gone; clear its record (stopping a task).
    Forget(DrainPhase),
    /// Reached after a drain (or with the node cordoned by us): stop any
    /// task, gate on the kubelet's health, uncordon, clear the record.
    Gate(DisruptionRecord),
    /// Restart the kubelet in place (`classified`: the change has a class
    /// whose action is a restart; else no disruptive field changed).
    Restart { classified: bool },
    /// Held already for this target: keep waiting for a new node.
    StillHeld(DisruptionRecord),
    /// Hold the change (stopping any task): write `held`; when an earlier
    /// drain cordoned the node (`uncordon`), gate and uncordon first.
    Hold {
        held: DisruptionRecord,
        uncordon: Option<Box<DisruptionRecord>>,
    },
    /// A drain (or gate) task runs: let it work.
    Draining,
    /// The last drain gave up; the next one is not due yet.
    BackingOff(DisruptionRecord),
    /// Drained already (a restart was cut short): restart now.
    RestartDrained(DisruptionRecord),
    /// Start a drain (a new one, a retry, or the resumption of another
    /// holder's: whether we cordoned the node is kept).
    Drain(DisruptionRecord),
}

/// The disruption flow's decision as of `now`.
pub(in crate::supervisor) fn decide(inputs: &Inputs<'_>, now: SystemTime) -> Decision {
    let record = inputs.record;
    let (target, change, policy) = match inputs.wanted {
        Wanted::Reached => return settle(record, inputs.task_running),
        Wanted::Changed {
            target,
            change,
            policy,
        } => (target, change, policy),
    };
    let Some(class) = change.class() else {
        return Decision::Restart { classified: false };
    };
    let same_target = record.is_some_and(|r| r.target_hash == target.hash);
    match action(policy, class, inputs.api) {
        Action::Restart => Decision::Restart { classified: true },
        Action::Hold => match record {
            Some(r) if same_target && r.phase == DrainPhase::Held => Decision::StillHeld(r.clone()),
            _ => {
                let mut held = new_record(target, change, class, Action::Hold, now);
                held.phase = DrainPhase::Held;
                held.waiting_for = "a new node (this change is not applied in place)".into();
                Decision::Hold {
                    held,
                    uncordon: record
                        .filter(|r| r.cordoned_by_us)
                        .map(|r| Box::new(r.clone())),
                }
            }
        },
        Action::Drain if inputs.task_running => Decision::Draining,
        Action::Drain => {
            let rec = match record {
                Some(r)
                    if r.phase == DrainPhase::BackingOff
                        && same_target
                        && !due(r.retry_at.as_deref(), now) =>
                {
                    return Decision::BackingOff(r.clone());
                }
                // Resume (ours after a restart, or another supervisor's):
                // keep whether we cordoned the node.
                Some(r) if !same_target => DisruptionRecord {
                    target_hash: target.hash.clone(),
                    target: target.source.clone(),
                    class,
                    fields: change.fields_of(class),
                    action: Action::Drain,
                    ..r.clone()
                },
                Some(r) => r.clone(),
                None => new_record(target, change, class, Action::Drain, now),
            };
            if rec.phase.drained() {
                return Decision::RestartDrained(rec);
            }
            Decision::Drain(DisruptionRecord {
                phase: DrainPhase::Evicting,
                ..rec
            })
        }
    }
}

/// The action a change of `class` gets: the policy's, except that a drain
/// without an API server is a restart.
fn action(policy: &Policy, class: Class, api: bool) -> Action {
    match policy.action(class) {
        Action::Drain if !api => Action::Restart,
        action => action,
    }
}

/// The running config is the resolved one.
fn settle(record: Option<&DisruptionRecord>, task_running: bool) -> Decision {
    let Some(record) = record else {
        return Decision::Idle;
    };
    if task_running && record.phase != DrainPhase::Evicting {
        return Decision::Tending(record.clone());
    }
    // A drain for a target that is no longer wanted ends here too.
    if !record.cordoned_by_us && !record.phase.drained() {
        return Decision::Forget(record.phase);
    }
    Decision::Gate(record.clone())
}

/// A new record for a change of `class` to `target`, first seen `now`.
fn new_record(
    target: &Target,
    change: &Change,
    class: Class,
    action: Action,
    now: SystemTime,
) -> DisruptionRecord {
    DisruptionRecord {
        target_hash: target.hash.clone(),
        hash_algorithm: HASH_ALGORITHM.to_string(),
        target: target.source.clone(),
        class,
        action,
        fields: change.fields_of(class),
        phase: DrainPhase::Evicting,
        cordoned_by_us: false,
        since: rfc3339(now),
        attempts: 0,
        retry_at: None,
        waiting_for: String::new(),
        last_error: None,
        blocked: Vec::new(),
        failure: None,
    }
}

/// A drain attempt begins.
pub(in crate::supervisor) fn attempt(mut rec: DisruptionRecord) -> DisruptionRecord {
    rec.attempts += 1;
    rec.waiting_for = "cordon".into();
    // What blocked an earlier attempt is no news for this one.
    rec.blocked.clear();
    rec
}

/// Every pod left: the kubelet restarts with the new config.
pub(in crate::supervisor) fn drained(mut rec: DisruptionRecord) -> DisruptionRecord {
    rec.blocked.clear();
    rec.failure = None;
    rec.phase = DrainPhase::Restarting;
    rec.waiting_for = "kubelet restart with the new config".into();
    rec
}

/// The drain gave up at `now` (the node uncordoned if it could be): tried
/// again after `retry` doubled per attempt.
pub(in crate::supervisor) fn gave_up(
    mut rec: DisruptionRecord,
    failure: &Failure,
    retry: Duration,
    now: SystemTime,
) -> DisruptionRecord {
    let wait = retry_delay(retry, rec.attempts);
    rec.phase = DrainPhase::BackingOff;
    rec.retry_at = Some(rfc3339(now + wait));
    rec.last_error = Some(kp_contract::node_config::bounded(
        &failure.message,
        MAX_LAST_ERROR,
    ));
    rec.failure = Some(failure.kind);
    rec.waiting_for = format!("next drain in {}", humantime::format_duration(wait));
    rec
}

/// Whether a task that ended as `done` restarts the kubelet (a drain that
/// finished while the kubelet runs).
pub(in crate::supervisor) fn restart_after(done: Option<super::TaskDone>, running: bool) -> bool {
    done == Some(super::TaskDone::Drained) && running
}

fn retry_delay(base: Duration, attempts: u32) -> Duration {
    base * 2u32.pow(attempts.saturating_sub(1).min(RETRY_DOUBLINGS))
}

/// A record's `retryAt`, whole seconds (earlier builds) or milliseconds.
pub(in crate::supervisor) fn parse_retry_at(t: &str) -> Option<SystemTime> {
    kp_contract::time::parse(t)
}

/// Whether a retry at `retry_at` is due at `now` (no time, or none that
/// reads: due).
fn due(retry_at: Option<&str>, now: SystemTime) -> bool {
    retry_at.and_then(parse_retry_at).is_none_or(|t| t <= now)
}

#[cfg(test)]
mod tests;
