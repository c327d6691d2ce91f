//! The rollout's decisions as one pure function: given the resource, every Node as the
//! cache has it, the global stop switch and the time, what the status should say and
//! which nodes to change now. The controller does the I/O around it; tests drive it
//! directly.
//!
//! The order of writes is what makes a restart safe: a new revision (its targets snapshot)
//! and a batch advance are written to the status before any node of it is changed, and a
//! node is changed in one patch that sets its assignment and records the previous one
//! (guarded by the Node's resourceVersion). A node carrying this revision's record is never
//! changed again.

mod budget;
pub mod conditions;
pub mod gates;
pub mod nofallback;
pub mod owner;
pub mod revision;
pub mod settings;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::nodeview::{assignment_ref, NodeRecord, NodeView};
use budget::Budget;
use conditions::{set_condition, ConditionType, PauseReason};
use gates::{GateResult, PodsState};
use kp_contract::rollout::{
    FailureReason, NodeCounts, NodeFailure, Phase, RolloutSpec, RolloutStatus,
};
use owner::{Claim, Me, OtherRollout};
use settings::Settings;

pub use revision::needs_new_revision;

/// Longest wait before the rollout is looked at again while something is in flight (reads
/// the cache only: no API request).
pub const MAX_REQUEUE: Duration = Duration::from_secs(60);

/// The outcome of looking up the ConfigMap a new revision rolls out.
#[derive(Clone, Debug)]
pub enum ConfigLookup {
    /// Not needed (no new revision due).
    NotNeeded,
    Found {
        uid: String,
        /// The trial the config's payload gives a node (its `configTrialDuration`).
        trial: Result<nofallback::NoFallback, nofallback::TrialError>,
    },
    Missing(String),
}

/// Everything the decision depends on.
pub struct Inputs<'a> {
    pub name: &'a str,
    /// The rollout's UID (a rollout deleted and created again is another owner).
    pub uid: Option<&'a str>,
    /// The other rollouts, for who owns which node.
    pub others: &'a [OtherRollout],
    /// Marked to take nodes from older rollouts that have not finished.
    pub supersede: bool,
    pub generation: Option<i64>,
    pub spec: &'a RolloutSpec,
    pub status: &'a RolloutStatus,
    /// Failures the operator resumed past: (revision, count), from the resume annotation.
    pub acknowledged: Option<(u32, u32)>,
    pub nodes: &'a [NodeView],
    pub now: SystemTime,
    /// The global stop switch is on.
    pub halted: bool,
    pub config: ConfigLookup,
    pub pods: &'a dyn Fn(&str) -> PodsState,
}

/// One node to change: its assignment and the record, in one patch guarded by the Node's
/// resourceVersion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Touch {
    pub node: String,
    pub resource_version: String,
    /// The new assignment annotation (None: remove it, the local config).
    pub assignment: Option<String>,
    pub record: NodeRecord,
}

/// The decision.
#[derive(Clone, Debug)]
pub struct Plan {
    pub status: RolloutStatus,
    pub touches: Vec<Touch>,
    /// Nodes whose pods must be listed to decide their last gate.
    pub pods_wanted: Vec<String>,
    /// Look again after this long (None: on the next change only).
    pub requeue: Option<Duration>,
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

struct Decider<'a> {
    inp: &'a Inputs<'a>,
    settings: Settings,
    st: RolloutStatus,
    now: String,
    touches: Vec<Touch>,
    pods_wanted: Vec<String>,
    requeue: Option<Duration>,
}

impl<'a> Decider<'a> {
    /// This rollout's identity and current revision, for [`owner::claim`].
    fn me(&self) -> Me<'a> {
        Me {
            name: self.inp.name,
            uid: self.inp.uid,
            revision: self.st.revision,
            started: revision::current(&self.st)
                .and_then(|r| humantime::parse_rfc3339_weak(&r.started).ok()),
        }
    }

    fn wake_after(&mut self, after: Duration) {
        let after = after.min(MAX_REQUEUE);
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    fn plan(self) -> Plan {
        Plan {
            status: self.st,
            touches: self.touches,
            pods_wanted: self.pods_wanted,
            requeue: self.requeue,
        }
    }
}

/// Decides.
pub fn plan(inp: &Inputs) -> Plan {
    let mut st = inp.status.clone();
    st.observed_generation = inp.generation;
    let now = rfc3339(inp.now);
    let settings = match Settings::of(inp.spec) {
        Ok(mut s) => {
            s.no_fallback_for =
                nofallback::in_force(s.explicit_no_fallback, revision::current(&st));
            if let (Some(duration), Some(rec)) = (s.explicit_no_fallback, current_mut(&mut st)) {
                // The operator set (or changed) it mid-revision: the record shows the new one.
                nofallback::record(
                    rec,
                    nofallback::NoFallback {
                        duration,
                        source: kp_contract::rollout::NoFallbackSource::Spec,
                    },
                );
            }
            s
        }
        Err(err) => {
            st.phase = Phase::Invalid;
            set_condition(
                &mut st,
                ConditionType::Valid,
                false,
                "InvalidSpec",
                &err,
                &now,
            );
            return Plan {
                status: st,
                touches: Vec::new(),
                pods_wanted: Vec::new(),
                requeue: None,
            };
        }
    };
    set_condition(
        &mut st,
        ConditionType::Valid,
        true,
        "SpecValid",
        "the spec can be followed",
        &now,
    );
    let mut d = Decider {
        inp,
        settings,
        st,
        now,
        touches: Vec::new(),
        pods_wanted: Vec::new(),
        requeue: None,
    };
    let matching: BTreeMap<&str, &NodeView> = inp
        .nodes
        .iter()
        .filter(|n| n.matches(&inp.spec.node_selector))
        .map(|n| (n.name.as_str(), n))
        .collect();
    if needs_new_revision(inp.spec, &d.st) {
        start_revision(&mut d, &matching);
        return d.plan();
    }
    if revision::current(&d.st).is_none() {
        // undo with nothing rolled yet.
        d.st.phase = Phase::Undone;
        return d.plan();
    }
    if inp.spec.undo {
        undo(&mut d, &matching);
    } else {
        forward(&mut d, &matching);
    }
    d.plan()
}

/// The current revision's record, to update.
fn current_mut(st: &mut RolloutStatus) -> Option<&mut kp_contract::rollout::RevisionRecord> {
    let revision = st.revision;
    st.history
        .last_mut()
        .filter(|r| revision > 0 && r.revision == revision)
}

fn start_revision(d: &mut Decider, matching: &BTreeMap<&str, &NodeView>) {
    let inp = d.inp;
    match &inp.config {
        ConfigLookup::Found { uid, trial } => {
            let no_fallback = match nofallback::resolve(d.settings.explicit_no_fallback, trial) {
                Ok(no_fallback) => no_fallback,
                Err(err) => {
                    let msg = format!(
                        "cannot start a revision of {}: {err}",
                        inp.spec.config.annotation()
                    );
                    set_condition(
                        &mut d.st,
                        ConditionType::ConfigFound,
                        false,
                        "TrialDurationUnreadable",
                        &msg,
                        &d.now,
                    );
                    d.wake_after(Duration::from_secs(30));
                    return;
                }
            };
            let order = revision::snapshot(matching.values().copied(), &d.settings.topology_key);
            let batch = d.inp.spec.batch.resolve(order.len()).unwrap_or(1).max(1);
            revision::start(
                &mut d.st,
                d.inp.spec,
                order,
                batch,
                uid,
                no_fallback,
                &d.now,
            );
            d.st.phase = Phase::Progressing;
            set_condition(
                &mut d.st,
                ConditionType::ConfigFound,
                true,
                "Found",
                "the ConfigMap exists",
                &d.now,
            );
            let all_pending =
                d.st.batches
                    .iter()
                    .map(|b| NodeCounts {
                        total: b.len() as u32,
                        pending: b.len() as u32,
                        ..NodeCounts::default()
                    })
                    .collect();
            set_counts(&mut d.st, all_pending);
            // The snapshot is written before any node is changed.
            d.wake_after(Duration::ZERO);
        }
        ConfigLookup::Missing(err) => {
            let msg = format!(
                "cannot start a revision of {}: {err}",
                d.inp.spec.config.annotation()
            );
            set_condition(
                &mut d.st,
                ConditionType::ConfigFound,
                false,
                "ConfigMissing",
                &msg,
                &d.now,
            );
            d.wake_after(Duration::from_secs(30));
        }
        ConfigLookup::NotNeeded => d.wake_after(Duration::ZERO),
    }
}

fn acknowledged(d: &Decider) -> usize {
    match d.inp.acknowledged {
        Some((rev, n)) if rev == d.st.revision => (n as usize).min(d.st.failures.len()),
        _ => 0,
    }
}

/// Why the rollout must not change more nodes on its own account, if it must not.
fn auto_pause(d: &Decider) -> Option<(PauseReason, String)> {
    let unacked = &d.st.failures[acknowledged(d)..];
    if d.st.has_canary {
        if let Some(f) = unacked.iter().find(|f| f.batch == 0) {
            return Some((
                PauseReason::CanaryFailed,
                format!(
                    "canary node {} failed ({}): {}",
                    f.node,
                    f.reason.as_str(),
                    f.message
                ),
            ));
        }
    }
    if let Some(f) = unacked.iter().find(|f| f.reason == FailureReason::Fallback) {
        return Some((
            PauseReason::Fallback,
            format!(
                "node {} fell back to its last-known-good config: {}",
                f.node, f.message
            ),
        ));
    }
    if unacked.len() > d.inp.spec.max_failures as usize {
        return Some((
            PauseReason::MaxFailures,
            format!(
                "{} nodes failed, more than maxFailures {}",
                unacked.len(),
                d.inp.spec.max_failures
            ),
        ));
    }
    None
}

fn forward(d: &mut Decider, matching: &BTreeMap<&str, &NodeView>) {
    let joined = revision::reconcile_membership(&mut d.st, matching);
    if joined > 0 {
        if let Some(last) = d.st.history.last_mut() {
            last.result = None;
            last.finished = None;
        }
    }
    let rev = d.st.revision;
    let target = d.settings.target.clone();
    let uid = revision::current(&d.st).and_then(|r| r.config_uid.clone());
    let failed: BTreeSet<String> = d.st.failures.iter().map(|f| f.node.clone()).collect();
    let current = d.st.current_batch as usize;
    let mut pending: Vec<(usize, &NodeView)> = Vec::new();
    let mut in_flight: BTreeSet<&str> = BTreeSet::new();
    let mut changed = 0u32;
    let mut soonest: Option<Duration> = None;
    let mut new_failures = Vec::new();
    let mut batch_open = false;
    let mut per_batch = vec![NodeCounts::default(); d.st.batches.len()];
    let me = d.me();
    let mut blocked: Vec<(&str, String)> = Vec::new();
    let mut superseded: Vec<(&str, String)> = Vec::new();
    for (b, batch) in d.st.batches.iter().enumerate() {
        let counts = &mut per_batch[b];
        for name in batch {
            let Some(view) = matching.get(name.as_str()).copied() else {
                continue;
            };
            let record = match owner::claim(view, &me, d.inp.others, d.inp.supersede) {
                Claim::Superseded { by } => {
                    // Not this revision's target any more: a newer rollout changed it.
                    superseded.push((view.name.as_str(), by));
                    continue;
                }
                Claim::Ours(record) => Some(record),
                Claim::Free => None,
                Claim::Blocked { by } => {
                    counts.total += 1;
                    counts.pending += 1;
                    if b <= current {
                        blocked.push((view.name.as_str(), by));
                        batch_open = true;
                    }
                    continue;
                }
            };
            counts.total += 1;
            if failed.contains(name) {
                changed += 1;
                counts.failed += 1;
                continue;
            }
            let Some(record) = record else {
                counts.pending += 1;
                if b <= current {
                    pending.push((b, view));
                    batch_open |= b == current;
                }
                continue;
            };
            changed += 1;
            if view.fell_back_from(&target) {
                counts.failed += 1;
                new_failures.push(failure(
                    view,
                    FailureReason::Fallback,
                    view.describe(),
                    b,
                    &d.now,
                ));
                continue;
            }
            if b < current {
                counts.done += 1;
                continue;
            }
            let since = gates::changed_at(record, d.inp.now);
            let pods = (d.inp.pods)(name);
            let change = gates::Change {
                target: Some(&target),
                uid: uid.as_deref(),
                since,
                full: true,
            };
            match gates::evaluate(view, &change, d.inp.now, &d.settings, &pods) {
                GateResult::Passed => counts.done += 1,
                GateResult::Failed { reason, message } => {
                    counts.failed += 1;
                    new_failures.push(failure(view, reason, message, b, &d.now))
                }
                GateResult::Waiting { after, wants_pods } => {
                    counts.in_progress += 1;
                    in_flight.insert(view.name.as_str());
                    batch_open |= b == current;
                    if wants_pods {
                        d.pods_wanted.push(name.clone());
                    }
                    soonest = Some(soonest.map_or(after, |s| s.min(after)));
                }
            }
        }
    }
    if let Some(after) = soonest {
        d.wake_after(after);
    }
    report_owners(d, &blocked, &superseded);
    d.st.failures.extend(new_failures);
    d.st.acknowledged_failures = acknowledged(d) as u32;
    let pause = pause_reason(d);
    let window = crate::window::open_at(&d.settings.windows, d.inp.now);
    let blocked = pause.is_some() || window.is_err();
    // Change the pending nodes of the current batch (and any left behind) within budget.
    if !blocked {
        let mut budget = Budget::new(&d.settings, d.inp.nodes, &in_flight, d.inp.now);
        for (b, view) in &pending {
            if !budget.take(view) {
                continue;
            }
            per_batch[*b].pending -= 1;
            per_batch[*b].in_progress += 1;
            d.touches.push(Touch {
                node: view.name.clone(),
                resource_version: view.resource_version.clone(),
                assignment: Some(d.inp.spec.config.annotation()),
                record: NodeRecord {
                    rollout: d.inp.name.to_string(),
                    revision: rev,
                    previous: view.assignment.clone(),
                    at: d.now.clone(),
                    undone: false,
                    uid: d.inp.uid.map(str::to_string),
                    started: revision::current(&d.st).map(|r| r.started.clone()),
                },
            });
        }
        if d.touches.len() < pending.len() {
            // Budget exhausted: wait for nodes to come back (their changes wake us too).
            d.wake_after(Duration::from_secs(5));
        }
    }
    let touched = d.touches.len() as u32;
    let failed_count = d.st.failures.len() as u32;
    set_counts(&mut d.st, per_batch);
    if let Some(h) = d.st.history.last_mut() {
        h.changed = changed + touched;
        h.failed = failed_count;
    }
    // Advance past a batch whose nodes are all done or failed, after the soak.
    if !blocked && !batch_open && d.touches.is_empty() {
        advance(d);
    }
    set_phase(d, pause, window.err());
}

/// `a, b, c (+N more)`.
fn some_names<'n>(names: impl Iterator<Item = &'n str>) -> String {
    let names: Vec<&str> = names.collect();
    let shown = names.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    match names.len() {
        n if n > 5 => format!("{shown} (+{} more)", n - 5),
        _ => shown,
    }
}

/// The Conflict condition (nodes an older, unfinished rollout owns: this one waits) and the
/// Superseded condition (nodes a newer rollout changed: no longer this one's targets).
fn report_owners(d: &mut Decider, blocked: &[(&str, String)], superseded: &[(&str, String)]) {
    let now = d.now.clone();
    let by = |list: &[(&str, String)]| {
        let mut owners: Vec<&str> = list.iter().map(|(_, o)| o.as_str()).collect();
        owners.sort_unstable();
        owners.dedup();
        owners.join(", ")
    };
    if blocked.is_empty() {
        set_condition(
            &mut d.st,
            ConditionType::Conflict,
            false,
            "NoConflict",
            "no node of the current batch is owned by another rollout",
            &now,
        );
    } else {
        let msg = format!(
            "waiting for rollout {} (older, not finished) on {} nodes: {}; annotate this rollout {}=true to take them now",
            by(blocked),
            blocked.len(),
            some_names(blocked.iter().map(|(n, _)| *n)),
            owner::SUPERSEDE_ANNOTATION
        );
        set_condition(
            &mut d.st,
            ConditionType::Conflict,
            true,
            "NodesOwnedByAnotherRollout",
            &msg,
            &now,
        );
        d.wake_after(Duration::from_secs(5));
    }
    if superseded.is_empty() {
        set_condition(
            &mut d.st,
            ConditionType::Superseded,
            false,
            "NotSuperseded",
            "no target was changed by a newer rollout",
            &now,
        );
    } else {
        let msg = format!(
            "{} nodes follow the newer rollout {} now and are no longer targets: {}",
            superseded.len(),
            by(superseded),
            some_names(superseded.iter().map(|(n, _)| *n))
        );
        set_condition(
            &mut d.st,
            ConditionType::Superseded,
            true,
            "NewerRollout",
            &msg,
            &now,
        );
    }
}

fn pause_reason(d: &Decider) -> Option<(PauseReason, String)> {
    if d.inp.halted {
        return Some((
            PauseReason::GlobalStop,
            "the global stop switch is on".to_string(),
        ));
    }
    if d.inp.spec.paused {
        return Some((PauseReason::Manual, "spec.paused is true".to_string()));
    }
    auto_pause(d)
}

fn advance(d: &mut Decider) {
    let total = d.st.batches.len() as u32;
    if d.st.current_batch >= total {
        return;
    }
    let soak_until =
        d.st.soak_until
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok());
    match soak_until {
        None if !d.settings.soak.is_zero() && !current_batch_empty(d) => {
            let until = d.inp.now + d.settings.soak;
            d.st.soak_until = Some(rfc3339(until));
            d.wake_after(d.settings.soak);
        }
        Some(until) if until > d.inp.now => {
            d.wake_after(until.duration_since(d.inp.now).unwrap_or_default());
        }
        _ => {
            d.st.soak_until = None;
            d.st.current_batch += 1;
            // The advance is written before the next batch's nodes are changed.
            d.wake_after(Duration::ZERO);
        }
    }
}

fn current_batch_empty(d: &Decider) -> bool {
    d.st.batches
        .get(d.st.current_batch as usize)
        .is_none_or(Vec::is_empty)
}

fn set_phase(d: &mut Decider, pause: Option<(PauseReason, String)>, window: Option<Duration>) {
    let complete = d.st.current_batch as usize >= d.st.batches.len();
    d.st.phase = match (&pause, window) {
        (Some((PauseReason::GlobalStop, _)), _) => Phase::Halted,
        (Some(_), _) => Phase::Paused,
        (None, _) if complete && d.st.counts.in_progress == 0 && d.st.counts.failed > 0 => {
            Phase::CompletedWithFailures
        }
        (None, _) if complete && d.st.counts.in_progress == 0 => Phase::Completed,
        (None, Some(_)) => Phase::Waiting,
        (None, None) if d.st.soak_until.is_some() => Phase::Soaking,
        (None, None) => Phase::Progressing,
    };
    if let Some(wait) = window {
        if d.st.phase == Phase::Waiting {
            d.wake_after(wait);
        }
    }
    match &pause {
        Some((reason, message)) => set_condition(
            &mut d.st,
            ConditionType::Paused,
            true,
            reason.as_str(),
            message,
            &d.now.clone(),
        ),
        None => set_condition(
            &mut d.st,
            ConditionType::Paused,
            false,
            "Running",
            "not paused",
            &d.now.clone(),
        ),
    }
    let now = d.now.clone();
    if matches!(d.st.phase, Phase::Completed | Phase::CompletedWithFailures) {
        let config = d.inp.spec.config.annotation();
        let (ok, reason, msg) = if d.st.phase == Phase::Completed {
            (true, "AllNodesDone", format!("every target runs {config}"))
        } else {
            let failed: Vec<String> =
                d.st.failures
                    .iter()
                    .map(|f| format!("{} ({}: {})", f.node, f.reason.as_str(), f.message))
                    .collect();
            let shown = failed
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            let more = failed.len().saturating_sub(5);
            let more = if more > 0 {
                format!("; +{more} more")
            } else {
                String::new()
            };
            (
                false,
                "NodesFailed",
                format!(
                    "{} of {} targets do not run {config}: {shown}{more}",
                    d.st.counts.failed, d.st.counts.total
                ),
            )
        };
        set_condition(&mut d.st, ConditionType::Complete, ok, reason, &msg, &now);
        if let Some(h) = d.st.history.last_mut() {
            if h.result.is_none() {
                h.result = Some(d.st.phase.as_str().to_string());
                h.finished = Some(now.clone());
            }
        }
    } else {
        set_condition(
            &mut d.st,
            ConditionType::Complete,
            false,
            "InProgress",
            "nodes remain",
            &now,
        );
    }
    d.st.batch_text = Some(batch_text(&d.st));
}

fn batch_text(st: &RolloutStatus) -> String {
    let total = st.batches.len() as u32;
    let regular = total - u32::from(st.has_canary);
    if st.current_batch >= total {
        "done".to_string()
    } else if st.has_canary && st.current_batch == 0 {
        "canary".to_string()
    } else {
        let n = st.current_batch + 1 - u32::from(st.has_canary);
        format!("{n}/{regular}")
    }
}

/// The per-batch counts, and the rollout's counts as their sum.
fn set_counts(st: &mut RolloutStatus, per_batch: Vec<NodeCounts>) {
    st.counts = per_batch
        .iter()
        .fold(NodeCounts::default(), |sum, c| NodeCounts {
            total: sum.total + c.total,
            pending: sum.pending + c.pending,
            in_progress: sum.in_progress + c.in_progress,
            done: sum.done + c.done,
            failed: sum.failed + c.failed,
        });
    st.batch_counts = per_batch;
}

fn failure(
    view: &NodeView,
    reason: FailureReason,
    message: String,
    batch: usize,
    now: &str,
) -> NodeFailure {
    NodeFailure {
        node: view.name.clone(),
        reason,
        message: kp_contract::node_config::bounded(&message, 512),
        batch: batch as u32,
        time: now.to_string(),
    }
}

/// Points every node this revision changed back at the assignment it had before, within
/// the unavailability budget; done when all show it active.
fn undo(d: &mut Decider, matching: &BTreeMap<&str, &NodeView>) {
    let me = d.me();
    let mut waiting = 0u32;
    let mut back = 0u32;
    let mut in_flight: BTreeSet<&str> = BTreeSet::new();
    let mut to_undo: Vec<&NodeView> = Vec::new();
    let mut soonest = MAX_REQUEUE;
    // Later batches first: the newest changes are the least proven.
    for batch in d.st.batches.iter().rev() {
        for node in batch {
            let Some(view) = matching.get(node.as_str()).copied() else {
                continue;
            };
            let Some(record) = view.record.as_ref().filter(|r| owner::is_mine(r, &me)) else {
                continue;
            };
            if !record.undone {
                to_undo.push(view);
                continue;
            }
            let previous = assignment_ref(record.previous.as_deref());
            let since = gates::changed_at(record, d.inp.now);
            let change = gates::Change {
                target: previous.as_ref(),
                uid: None,
                since,
                full: false,
            };
            match gates::evaluate(view, &change, d.inp.now, &d.settings, &PodsState::Ready) {
                GateResult::Passed => back += 1,
                GateResult::Waiting { after, .. } => {
                    waiting += 1;
                    in_flight.insert(view.name.as_str());
                    soonest = soonest.min(after);
                }
                // An undo that does not take is reported, not retried.
                GateResult::Failed { .. } => back += 1,
            }
        }
    }
    if waiting > 0 {
        d.wake_after(soonest);
    }
    let halted = d.inp.halted;
    if !halted {
        let mut budget = Budget::new(&d.settings, d.inp.nodes, &in_flight, d.inp.now);
        let mut out_of_budget = false;
        for view in &to_undo {
            let Some(record) = view.record.clone() else {
                continue;
            };
            if !budget.take(view) {
                out_of_budget = true;
                continue;
            }
            d.touches.push(Touch {
                node: view.name.clone(),
                resource_version: view.resource_version.clone(),
                assignment: record.previous.clone(),
                record: NodeRecord {
                    at: d.now.clone(),
                    undone: true,
                    ..record
                },
            });
        }
        if out_of_budget {
            d.wake_after(Duration::from_secs(5));
        }
    }
    let now = d.now.clone();
    let left = to_undo.len() as u32 - d.touches.len() as u32;
    d.st.counts = NodeCounts {
        total: back + waiting + to_undo.len() as u32,
        pending: left,
        in_progress: waiting + d.touches.len() as u32,
        done: back,
        failed: 0,
    };
    if halted {
        d.st.phase = Phase::Halted;
        set_condition(
            &mut d.st,
            ConditionType::Paused,
            true,
            PauseReason::GlobalStop.as_str(),
            "the global stop switch is on",
            &now,
        );
    } else if left == 0 && waiting == 0 && d.touches.is_empty() {
        d.st.phase = Phase::Undone;
        set_condition(
            &mut d.st,
            ConditionType::Paused,
            false,
            "Running",
            "not paused",
            &now,
        );
        if let Some(h) = d.st.history.last_mut() {
            if h.result.as_deref() != Some(revision::UNDONE) {
                h.result = Some(revision::UNDONE.to_string());
                h.finished = Some(now.clone());
            }
        }
    } else {
        d.st.phase = Phase::Undoing;
    }
    set_condition(
        &mut d.st,
        ConditionType::Complete,
        false,
        "Undo",
        "the revision is being undone",
        &now,
    );
    d.st.batch_text = Some(
        if d.st.phase == Phase::Undone {
            "undone"
        } else {
            "undo"
        }
        .to_string(),
    );
}

#[cfg(test)]
mod tests;
