//! The simulator thread: assignments and timers, and how each node reacts to them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::patch::PatchKind;
use crate::resource::{Resource, Target};
use crate::store::{Opts, State};
use crate::unpoisoned::lock;

use super::script::{assignment_of, source_annotation, Assignment, Script, SimOptions};
use super::sim::{condition, ready, Action, Change, Inner, SimNode, Timer};
use super::{BATCH, CONDITION_TYPE, IDLE_POLL, KNOWN_BAD, STATUS_ANNOTATION};

struct Runner {
    inner: Arc<Inner>,
    timers: BinaryHeap<Reverse<Timer>>,
    seq: u64,
}

pub(super) fn run(inner: Arc<Inner>) {
    let mut runner = Runner {
        inner,
        timers: BinaryHeap::new(),
        seq: 0,
    };
    loop {
        let changes = {
            let mut queue = lock(&runner.inner.queue);
            loop {
                if queue.stop || runner.inner.shared.closed.load(Ordering::SeqCst) {
                    return;
                }
                if !queue.changes.is_empty() {
                    break std::mem::take(&mut queue.changes);
                }
                let now = Instant::now();
                let wait = match runner.timers.peek() {
                    Some(Reverse(timer)) if timer.at <= now => break Vec::new(),
                    Some(Reverse(timer)) => (timer.at - now).min(IDLE_POLL),
                    None => IDLE_POLL,
                };
                queue = runner
                    .inner
                    .wake
                    .wait_timeout(queue, wait)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|poison| poison.into_inner().0);
            }
        };
        runner.apply(changes);
        runner.fire_due();
    }
}

impl Runner {
    fn schedule(&mut self, node: &str, epoch: u64, after: Duration, action: Action) {
        self.seq += 1;
        self.timers.push(Reverse(Timer {
            at: Instant::now() + after,
            seq: self.seq,
            node: node.to_string(),
            epoch,
            action,
        }));
    }

    fn apply(&mut self, changes: Vec<Change>) {
        if changes.is_empty() {
            return;
        }
        let react_after = self.inner.options.react_after;
        let mut due = Vec::new();
        {
            let mut nodes = lock(&self.inner.nodes);
            for change in changes {
                match change {
                    Change::Assigned { node, value } => {
                        let Some(sim) = nodes.get_mut(&node) else {
                            continue;
                        };
                        sim.assignments.push(value);
                        sim.epoch += 1;
                        due.push((node, sim.epoch));
                    }
                    Change::ConfigMap { namespace, name } => {
                        // Nodes assigned the ConfigMap download it again.
                        let state = self.inner.shared.lock();
                        for (node_name, sim) in nodes.iter_mut() {
                            if sim.gone {
                                continue;
                            }
                            let target = Target::object(Resource::Nodes, None, node_name);
                            let Some(node) = state.stored(&target) else {
                                continue;
                            };
                            let assigned = matches!(
                                assignment_of(&source_annotation(node)),
                                Assignment::Remote(r) if r.namespace == namespace && r.name == name
                            );
                            if assigned {
                                sim.epoch += 1;
                                due.push((node_name.clone(), sim.epoch));
                            }
                        }
                    }
                }
            }
        }
        for (node, epoch) in due {
            self.schedule(&node, epoch, react_after, Action::React);
        }
    }

    /// Carries out the due timers, a batch per hold of the state lock.
    fn fire_due(&mut self) {
        loop {
            let now = Instant::now();
            let mut batch = Vec::new();
            while batch.len() < BATCH {
                match self.timers.peek() {
                    Some(Reverse(timer)) if timer.at <= now => {
                        if let Some(Reverse(timer)) = self.timers.pop() {
                            batch.push(timer);
                        }
                    }
                    _ => break,
                }
            }
            if batch.is_empty() {
                return;
            }
            let mut later = Vec::new();
            let mut done = 0;
            {
                let inner = Arc::clone(&self.inner);
                let mut nodes = lock(&inner.nodes);
                let mut state = inner.shared.lock();
                for timer in batch {
                    let Some(sim) = nodes.get_mut(&timer.node) else {
                        continue;
                    };
                    if sim.gone || sim.epoch != timer.epoch {
                        continue;
                    }
                    let ctx = Ctx {
                        state: &mut state,
                        name: &timer.node,
                        options: &inner.options,
                    };
                    let outcome = ctx.act(sim, timer.action);
                    if outcome.reacted {
                        done += 1;
                    }
                    if let Some((after, action)) = outcome.then {
                        later.push((timer.node.clone(), timer.epoch, after, action));
                    }
                }
            }
            self.inner.shared.changed.notify_all();
            for (node, epoch, after, action) in later {
                self.schedule(&node, epoch, after, action);
            }
            if done > 0 {
                self.inner.reacted.fetch_add(done, Ordering::SeqCst);
                let _guard = lock(&self.inner.reacted_lock);
                self.inner.reacted_changed.notify_all();
            }
        }
    }
}

/// What an action led to: whether it counts as a reaction, and the next timer.
struct Outcome {
    reacted: bool,
    then: Option<(Duration, Action)>,
}

impl Outcome {
    fn done() -> Outcome {
        Outcome {
            reacted: true,
            then: None,
        }
    }
}

/// One node acting on the state.
struct Ctx<'a> {
    state: &'a mut State,
    name: &'a str,
    options: &'a SimOptions,
}

fn describe(source: &Option<Value>) -> String {
    match source {
        Some(src) => format!(
            "UID: {}, ResourceVersion: {}",
            src["configMap"]["uid"].as_str().unwrap_or(""),
            src["configMap"]["resourceVersion"].as_str().unwrap_or("")
        ),
        None => "init".to_string(),
    }
}

/// The condition message of a node running its active config.
fn current(sim: &SimNode) -> String {
    format!("using current ({})", describe(&sim.active))
}

impl Ctx<'_> {
    fn node(&self) -> Option<&Value> {
        self.state
            .stored(&Target::object(Resource::Nodes, None, self.name))
    }

    fn patch(&mut self, status: bool, kind: PatchKind, patch: Value) {
        let mut target = Target::object(Resource::Nodes, None, self.name);
        if status {
            target.subresource = Some("status".to_string());
        }
        let bytes = patch.to_string().into_bytes();
        // A node deleted meanwhile is no error worth reporting.
        let _ = self.state.patch(&target, kind, &bytes, &Opts::default());
    }

    /// Writes the status annotation (and `spec.unschedulable`, if given), then the
    /// conditions; the condition's transition time moves only with status or reason.
    fn report(
        &mut self,
        sim: &SimNode,
        error: Option<&str>,
        condition_fields: (&str, &str, String),
        unschedulable: Option<bool>,
        ready_status: Option<bool>,
    ) {
        let config = json!({
            "active": sim.active,
            "assigned": sim.assigned,
            "lastKnownGood": sim.last_known_good,
            "error": error,
        });
        let mut meta_patch =
            json!({"metadata": {"annotations": {STATUS_ANNOTATION: config.to_string()}}});
        if let Some(cordon) = unschedulable {
            meta_patch["spec"] =
                json!({"unschedulable": if cordon { json!(true) } else { Value::Null }});
        }
        self.patch(false, PatchKind::Merge, meta_patch);
        let (status, reason, message) = condition_fields;
        let mut fresh = condition(status, reason, &message);
        if let Some(existing) = self.existing_condition(CONDITION_TYPE) {
            if existing["status"] == status && existing["reason"] == reason {
                fresh["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
        }
        let mut conditions = vec![fresh];
        if let Some(ready_now) = ready_status {
            let shown = self
                .existing_condition("Ready")
                .is_some_and(|c| c["status"] == if ready_now { "True" } else { "False" });
            if !shown {
                conditions.push(ready(ready_now));
            }
        }
        self.patch(
            true,
            PatchKind::Strategic,
            json!({"status": {"conditions": conditions}}),
        );
    }

    /// The running config is good: `True` / `passing all checks` / `using current (...)`.
    fn report_current(&mut self, sim: &SimNode, unschedulable: Option<bool>, ready: Option<bool>) {
        let fields = ("True", "passing all checks", current(sim));
        self.report(sim, None, fields, unschedulable, ready);
    }

    fn existing_condition(&self, kind: &str) -> Option<Value> {
        self.node()?["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind)
            .cloned()
    }

    fn act(mut self, sim: &mut SimNode, action: Action) -> Outcome {
        if self.node().is_none() {
            sim.gone = true;
            return Outcome {
                reacted: false,
                then: None,
            };
        }
        match action {
            Action::React => self.react(sim),
            Action::Fallback => {
                sim.active = sim.last_known_good.clone();
                let message = format!("using last-known-good ({})", describe(&sim.active));
                self.report(
                    sim,
                    Some(KNOWN_BAD),
                    ("False", KNOWN_BAD, message),
                    None,
                    Some(true),
                );
                Outcome::done()
            }
            Action::TrialEnd => {
                sim.last_known_good = sim.next.take();
                self.report_current(sim, None, None);
                Outcome::done()
            }
            Action::DrainDone => {
                let source = sim.next.take();
                self.apply_good(sim, source, Some(false), true)
            }
        }
    }

    fn react(&mut self, sim: &mut SimNode) -> Outcome {
        let value = self.node().map(source_annotation).unwrap_or_default();
        let assignment = assignment_of(&value);
        let script = sim.script.for_assignment(&assignment);
        match (&assignment, &script) {
            (_, Script::Ignores { .. }) => {
                return Outcome {
                    reacted: false,
                    then: None,
                }
            }
            (_, Script::DeletedOnAssignment { .. }) => {
                let target = Target::object(Resource::Nodes, None, self.name);
                let _ = self.state.delete(&target, None, &Opts::default());
                sim.gone = true;
                return Outcome::done();
            }
            _ => {}
        }
        let source = match assignment {
            Assignment::Local => {
                sim.active = None;
                sim.assigned = None;
                sim.last_known_good = None;
                self.report_current(sim, None, Some(true));
                return Outcome::done();
            }
            Assignment::Invalid(why) => {
                self.report(sim, Some(&why), ("False", &why, current(sim)), None, None);
                return Outcome::done();
            }
            Assignment::Remote(source) => source,
        };
        let target = Target::object(Resource::ConfigMaps, Some(&source.namespace), &source.name);
        let Some(config_map) = self.state.stored(&target) else {
            let cause = format!("configmaps \"{}\" not found", source.name);
            let reason = format!("failed to sync, desired config unclear, cause: {cause}");
            self.report(
                sim,
                Some(&cause),
                ("Unknown", &reason, current(sim)),
                None,
                None,
            );
            return Outcome::done();
        };
        let src = json!({"configMap": {
            "namespace": source.namespace,
            "name": source.name,
            "uid": config_map["metadata"]["uid"],
            "resourceVersion": config_map["metadata"]["resourceVersion"],
            "kubeletConfigKey": source.key,
        }});
        match script {
            Script::RollsBack { after, .. } => {
                sim.active = Some(src.clone());
                sim.assigned = Some(src);
                self.report_current(sim, None, Some(true));
                let after = after.unwrap_or(self.options.rollback_after);
                Outcome {
                    reacted: true,
                    then: Some((after, Action::Fallback)),
                }
            }
            Script::Drains { drain, .. } => {
                sim.assigned = Some(src.clone());
                sim.next = Some(src);
                let message = format!(
                    "{}; draining the node for a disruptive config change",
                    current(sim)
                );
                self.report(sim, None, ("False", "Draining", message), Some(true), None);
                Outcome {
                    reacted: true,
                    then: Some((drain, Action::DrainDone)),
                }
            }
            Script::NeverReady { .. } => self.apply_good(sim, Some(src), None, false),
            _ => self.apply_good(sim, Some(src), None, true),
        }
    }

    /// The config runs: reported active (and last-known-good, unless on trial).
    fn apply_good(
        &mut self,
        sim: &mut SimNode,
        source: Option<Value>,
        unschedulable: Option<bool>,
        ready_now: bool,
    ) -> Outcome {
        sim.active = source.clone();
        sim.assigned = source.clone();
        let on_trial = !self.options.trial.is_zero();
        if on_trial {
            sim.next = source;
        } else {
            sim.last_known_good = source;
        }
        self.report_current(sim, unschedulable, Some(ready_now));
        Outcome {
            reacted: true,
            then: on_trial.then_some((self.options.trial, Action::TrialEnd)),
        }
    }
}
