//! Disruptive config changes while the kubelet runs: what a change of each
//! class does (restart, drain, hold), the drain and health-gate tasks, the
//! store record that lets another supervisor (or this one after a kill -9)
//! resume a drain, and what the Node shows meanwhile.
//!
//! The drain runs as one task beside the loop (cordon, evict until the pods
//! are gone or `--drain-timeout`); its end feeds `Input::Reload` (the
//! restart goes through the state machine like any other), and once the new
//! kubelet runs the gate task waits for its healthz and uncordons. Both
//! tasks are aborted before the lock is released; the record stays for the
//! next holder.
//!
//! What to do is decided by the pure `decide` (hold, drain, restart,
//! resume, gate, forget); this module gathers its inputs and carries the
//! decision out; the drain and gate tasks are in `tasks`.

mod decide;
mod tasks;

use super::*;

pub(super) use decide::parse_retry_at;
use decide::{Decision, Wanted};

use crate::cluster::drain::{Drainer, Failure, Lifecycle, Round};
use crate::config::running;
use crate::config::store::{DisruptionRecord, DrainFailure, DrainPhase};
use crate::kubelet::health;
use crate::metrics::DrainResult;
use kp_contract::node_config::{DisruptionReason, DisruptionReport};
use kp_kubelet_config::disruption::{Change, Policy};
use kp_runtime::events::EventType;
use kp_runtime::retry::Retry;

/// Knobs of disruptive changes (command line).
#[derive(Debug, Clone)]
pub struct DisruptionOptions {
    /// Action per class (defaults and `--disruption-action`).
    pub policy: Policy,
    pub drain_timeout: Duration,
    /// First wait after a drain gave up (doubles per try, up to 32×).
    pub drain_retry: Duration,
    /// The kubelet's root dir (state files).
    pub kubelet_root_dir: PathBuf,
}

/// healthz probes while gating.
const GATE_POLL: Duration = Duration::from_millis(500);

/// How a disruption task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskDone {
    /// Every pod left: restart the kubelet with the new config.
    Drained,
    /// Timed out or refused: uncordoned, retried later.
    GaveUp,
    /// The kubelet is healthy and the node uncordoned (if it was ours).
    Settled,
}

/// What the loop learned from the store in one config check.
pub(super) struct Pending {
    pub change: Change,
    pub policy: Policy,
    pub record: Option<DisruptionRecord>,
}

fn save(store: &Store, record: Option<&DisruptionRecord>) {
    if let Err(err) = store.lock().and_then(|_g| store.set_disruption(record)) {
        error!(%err, "cannot write the disruption record to the checkpoint store");
    }
}

async fn save_async(store: &Store, record: Option<DisruptionRecord>) {
    let store = store.clone();
    let _ = blocking(move || save(&store, record.as_ref())).await;
}

/// The Node's view of a record: reason and a message that does not change
/// with drain progress (one condition update and Event per step).
pub(super) fn report_of(record: &DisruptionRecord) -> DisruptionReport {
    let what = format!(
        "{} change ({}) needs action {}",
        record.class,
        record.fields.join(", "),
        record.action
    );
    match record.phase {
        DrainPhase::Held => DisruptionReport {
            reason: DisruptionReason::RollRequired,
            message: format!(
                "{what}: held, the node must be replaced (label {})",
                kp_contract::node_config::ROLL_REQUIRED_LABEL
            ),
        },
        DrainPhase::BackingOff => DisruptionReport {
            reason: match record.failure {
                None | Some(DrainFailure::Timeout) => DisruptionReason::DrainTimeout,
                Some(_) => DisruptionReason::DrainFailed,
            },
            message: format!(
                "{what}: the drain did not finish ({}); next try at {}",
                record.last_error.as_deref().unwrap_or("timeout"),
                record.retry_at.as_deref().unwrap_or("soon")
            ),
        },
        _ => DisruptionReport {
            reason: DisruptionReason::Draining,
            message: format!("{what}: draining the node"),
        },
    }
}

/// A drain that `record` says was tried is abandoned (`why`): clears the
/// Node's lifecycle conditions if they show our drain (in a task of its own,
/// bounded: the loop does not wait for the API server).
fn interrupted(env: &Env<'_>, record: Option<&DisruptionRecord>, why: &str) {
    let (Some(r), Some(drainer)) = (record.filter(|r| r.attempts > 0), env.drainer()) else {
        return;
    };
    let message = format!(
        "the drain for the {} change ({}) stopped: {why}",
        r.class,
        r.fields.join(", ")
    );
    tokio::spawn(async move { drainer.lifecycle(Lifecycle::Interrupted, &message).await });
}

/// The disruptive change waiting or in progress, and the task that works
/// on it (a drain, or the health gate after the restart).
#[derive(Default)]
pub(super) struct Disruption {
    /// The drain or health-gate task.
    pub(super) task: Option<tokio::task::JoinHandle<Option<TaskDone>>>,
    /// The change, as last read.
    record: Option<DisruptionRecord>,
    /// Whether `record` was read in this holding: another holder may have
    /// changed or finished the change since ours ended.
    read: bool,
}

/// What disruption work needs from the rest of the supervisor.
pub(super) struct Env<'a> {
    pub store: &'a Store,
    pub metrics: &'a Arc<Metrics>,
    /// The newest API client (None: local-only, or no credentials yet).
    pub client: Option<kube::Client>,
    pub node: &'a str,
    pub opts: &'a DisruptionOptions,
    /// The config the running kubelet was started with (its healthz).
    pub applied: Option<&'a Resolved>,
}

impl Env<'_> {
    /// The API side of a drain (also posts Events), if an API server is configured.
    pub(super) fn drainer(&self) -> Option<Drainer> {
        self.client
            .clone()
            .map(|c| Drainer::new(c, self.node.to_string(), self.metrics.clone()))
    }

    /// Where the running kubelet's healthz answers (None: disabled).
    fn healthz(&self) -> Option<SocketAddr> {
        self.applied.and_then(|a| {
            let eff = a.config.effective();
            let bind = eff
                .get("healthzBindAddress")
                .and_then(|v| v.as_str())
                .unwrap_or("127.0.0.1")
                .to_string();
            let port = eff
                .get("healthzPort")
                .and_then(|v| v.as_u64())
                .unwrap_or(10248);
            health::probe_address(&bind, u16::try_from(port).unwrap_or(0))
        })
    }
}

impl Disruption {
    /// The Node's view of the current record, if any.
    pub(super) fn report(&self) -> Option<DisruptionReport> {
        self.record.as_ref().map(report_of)
    }

    /// A drain or gate task runs.
    pub(super) fn task_running(&self) -> bool {
        self.task.is_some()
    }

    /// Aborts a running drain or gate task (before the lock is released,
    /// and when the plan changes). Its record stays.
    pub(super) async fn stop_task(&mut self, metrics: &Metrics) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
            metrics.disruption.set_draining(false);
        }
    }

    /// One config check found `wanted` and the store's `record`: decide
    /// ([`decide::decide`]) and carry it out. Returns the inputs to feed (a
    /// restart).
    pub(super) async fn on_check(
        &mut self,
        env: &Env<'_>,
        wanted: Wanted<'_>,
        record: Option<DisruptionRecord>,
    ) -> Vec<Input> {
        let inputs = decide::Inputs {
            wanted,
            record: record.as_ref(),
            task_running: self.task_running(),
            api: env.client.is_some(),
        };
        let decision = decide::decide(&inputs, std::time::SystemTime::now());
        let describe = || match wanted {
            Wanted::Changed { change, .. } => running::describe(change),
            Wanted::Reached => String::new(),
        };
        match decision {
            Decision::Idle => {
                self.record = None;
                env.metrics.disruption.set_held(false, false);
            }
            Decision::Tending(r) | Decision::StillHeld(r) => self.record = Some(r),
            Decision::Forget(phase) => {
                self.stop_task(env.metrics).await;
                interrupted(
                    env,
                    record.as_ref(),
                    "the config change it was for is no longer wanted",
                );
                env.metrics.disruption.set_held(false, false);
                info!(
                    phase = phase.as_str(),
                    "the pending config change is gone; clearing its record"
                );
                save_async(env.store, None).await;
                self.record = None;
            }
            Decision::Gate(r) => {
                self.stop_task(env.metrics).await;
                env.metrics.disruption.set_held(false, false);
                self.start_gate(env, r, None);
            }
            Decision::Restart { classified } => {
                if classified {
                    info!(change = %describe(), "config change: restarting the kubelet in place");
                }
                env.metrics.restart_for_config();
                return vec![Input::Reload];
            }
            Decision::Hold { held, uncordon } => {
                self.stop_task(env.metrics).await;
                warn!(change = %describe(), "config change needs a new node: holding it; the running kubelet and its config stay");
                env.metrics.disruption.set_held(true, true);
                match uncordon {
                    // Cordoned by an earlier drain: uncordon, then hold.
                    Some(old) => self.start_gate(env, *old, Some(held)),
                    None => {
                        interrupted(
                            env,
                            record.as_ref(),
                            "the change now needs a new node and is held",
                        );
                        save_async(env.store, Some(held.clone())).await;
                        self.record = Some(held);
                    }
                }
            }
            Decision::Draining => env.metrics.disruption.set_held(false, false),
            Decision::BackingOff(r) => {
                env.metrics.disruption.set_held(false, false);
                self.record = Some(r);
            }
            Decision::RestartDrained(r) => {
                env.metrics.disruption.set_held(false, false);
                self.record = Some(r);
                env.metrics.restart_for_config();
                return vec![Input::Reload];
            }
            Decision::Drain(r) => {
                env.metrics.disruption.set_held(false, false);
                self.start_drain(env, r);
            }
        }
        vec![]
    }

    /// Starts the health gate: wait for healthz, uncordon if ours, then
    /// write `then` (or clear the record).
    fn start_gate(
        &mut self,
        env: &Env<'_>,
        mut record: DisruptionRecord,
        then: Option<DisruptionRecord>,
    ) {
        let addr = env.healthz();
        let was_drain = record.phase.drained();
        record.phase = DrainPhase::HealthGate;
        record.waiting_for = match addr {
            Some(a) => format!("kubelet healthz at http://{a}/healthz, then uncordon"),
            None => "uncordon (healthz disabled)".to_string(),
        };
        self.record = Some(record.clone());
        let gate = tasks::Gate {
            store: env.store.clone(),
            metrics: env.metrics.clone(),
            drainer: env.drainer(),
            addr,
            record,
            was_drain,
            then,
        };
        self.task = Some(tokio::spawn(gate.run()));
    }

    fn start_drain(&mut self, env: &Env<'_>, rec: DisruptionRecord) {
        let Some(drainer) = env.drainer() else {
            return;
        };
        let timeout = env.opts.drain_timeout;
        let rec = decide::attempt(rec);
        info!(class = %rec.class, fields = %rec.fields.join(", "), attempt = rec.attempts, timeout = %humantime::format_duration(timeout), "draining the node for a config change");
        self.record = Some(rec.clone());
        env.metrics.disruption.set_draining(true);
        let drain = tasks::Drain {
            store: env.store.clone(),
            metrics: env.metrics.clone(),
            drainer,
            timeout,
            retry: env.opts.drain_retry,
            rec,
        };
        self.task = Some(tokio::spawn(drain.run()));
    }

    /// The task ended: the record as it left it. Returns whether the
    /// kubelet restarts now (a drain finished while it runs).
    pub(super) async fn on_task_done(
        &mut self,
        store: &Store,
        done: Option<TaskDone>,
        running: bool,
    ) -> bool {
        self.task = None;
        let store = store.clone();
        self.record = blocking(move || store.disruption().ok().flatten())
            .await
            .flatten();
        decide::restart_after(done, running)
    }

    /// Reads the store's record once per holding, before the first
    /// kubelet start reports: a holder taking over (or back) must not
    /// report a change that another holder finished or changed meanwhile,
    /// nor report none while one is pending.
    pub(super) async fn read_once(&mut self, store: &Store) {
        if self.read || self.task.is_some() {
            return;
        }
        let store = store.clone();
        self.record = blocking(move || store.disruption().ok().flatten())
            .await
            .flatten();
        self.read = true;
    }

    /// The record as a prepared start read it (see `read_once`).
    pub(super) fn know(&mut self, record: Option<DisruptionRecord>) {
        if self.read || self.task.is_some() {
            return;
        }
        self.record = record;
        self.read = true;
    }

    /// The lock is released: what we knew of the change ends with our
    /// holding.
    pub(super) fn forget(&mut self) {
        self.record = None;
        self.read = false;
    }

    /// The record as last read or written.
    pub(super) fn record(&self) -> Option<&DisruptionRecord> {
        self.record.as_ref()
    }
}

impl Driver {
    /// The running kubelet's config equals the resolved one: a record left
    /// from a drain (ours, or of a supervisor that died) is finished: gate
    /// on the kubelet's health and uncordon what we cordoned.
    pub(super) async fn settle(&mut self, record: Option<DisruptionRecord>) {
        let env = self.config.disruption_env(&self.opts, &self.metrics);
        self.disruption
            .on_check(&env, Wanted::Reached, record)
            .await;
    }

    /// A change of the running config: carry out its class's action (or
    /// keep waiting). Returns the inputs to feed (a restart).
    pub(super) async fn on_disruptive(
        &mut self,
        resolved: &Resolved,
        pending: Pending,
    ) -> Vec<Input> {
        let target = decide::Target {
            hash: resolved.hash(),
            source: resolved.source.clone(),
        };
        let wanted = Wanted::Changed {
            target: &target,
            change: &pending.change,
            policy: &pending.policy,
        };
        let env = self.config.disruption_env(&self.opts, &self.metrics);
        self.disruption.on_check(&env, wanted, pending.record).await
    }

    /// A disruption task ended.
    pub(super) async fn on_disruption_done(&mut self, done: Option<TaskDone>) -> Vec<Input> {
        let running = matches!(self.pivot.state, State::Holding(Run::Running(_)));
        let restart = self
            .disruption
            .on_task_done(&self.config.store, done, running)
            .await;
        // A drain that gave up is tried again at the time its record names:
        // nothing else wakes the loop then (the record is not watched).
        if let Some(at) = retry_due(self.disruption.record()) {
            debug!(
                retry_at = self.disruption.record().and_then(|r| r.retry_at.as_deref()),
                "drain retry timer armed"
            );
            self.config.due_by(at);
        }
        if let Some(a) = self.config.applied.clone() {
            self.publish_report(&a);
        }
        if restart {
            self.metrics.restart_for_config();
            vec![Input::Reload]
        } else {
            vec![]
        }
    }

    /// The lock is released: what we knew of the change, and the report
    /// the next syncer would start from, end with our holding.
    pub(super) fn forget_disruption(&mut self) {
        self.disruption.forget();
        self.config.reports.send_replace(None);
    }
}

/// When a drain that backs off is tried again, if `record` is one.
pub(super) fn retry_due(
    record: Option<&crate::config::store::DisruptionRecord>,
) -> Option<Instant> {
    record
        .filter(|r| r.phase == crate::config::store::DrainPhase::BackingOff)
        .and_then(|r| r.retry_at.as_deref())
        .and_then(parse_retry_at)
        .map(super::due::instant_of)
}
