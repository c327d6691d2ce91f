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

use super::*;

use crate::cluster::drain::{Drainer, Failure, Round};
use crate::config::running;
use crate::config::store::{DisruptionRecord, DrainFailure, DrainPhase};
use crate::kubelet::health;
use crate::metrics::DrainResult;
use kp_contract::node_config::{DisruptionReason, DisruptionReport};
use kp_kubelet_config::disruption::{Action, Change, Policy};
use kp_kubelet_config::HASH_ALGORITHM;
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

/// Longest wait between retries: 32 × `--drain-retry`.
const RETRY_DOUBLINGS: u32 = 5;
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

fn retry_delay(base: Duration, attempts: u32) -> Duration {
    base * 2u32.pow(attempts.saturating_sub(1).min(RETRY_DOUBLINGS))
}

/// RFC 3339 with milliseconds. Earlier builds wrote whole seconds; both
/// read either form ([`parse_retry_at`], humantime's weak parser).
fn time_after(d: Duration) -> String {
    kp_contract::time::rfc3339_after(d)
}

/// A record's `retryAt`, whole seconds or fractional.
pub(super) fn parse_retry_at(t: &str) -> Option<std::time::SystemTime> {
    humantime::parse_rfc3339_weak(t).ok()
}

fn due(retry_at: Option<&str>) -> bool {
    retry_at
        .and_then(parse_retry_at)
        .is_none_or(|t| t <= std::time::SystemTime::now())
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

fn new_record(
    target: &Resolved,
    change: &Change,
    action: Action,
    phase: DrainPhase,
) -> Option<DisruptionRecord> {
    let class = change.class()?;
    Some(DisruptionRecord {
        target_hash: target.hash(),
        hash_algorithm: HASH_ALGORITHM.to_string(),
        target: target.source.clone(),
        class,
        action,
        fields: change.fields_of(class),
        phase,
        cordoned_by_us: false,
        since: now_rfc3339(),
        attempts: 0,
        retry_at: None,
        waiting_for: String::new(),
        last_error: None,
        blocked: Vec::new(),
        failure: None,
    })
}

impl Driver {
    /// The API side of a drain (also posts Events), if an API server is configured.
    pub(super) fn drainer(&self) -> Option<Drainer> {
        self.client()
            .map(|c| Drainer::new(c, self.opts.node_name.clone(), self.metrics.clone()))
    }

    /// Aborts a running drain or gate task (before the lock is released,
    /// and when the plan changes). Its record stays.
    pub(super) async fn stop_disruption_task(&mut self) {
        if let Some(task) = self.disrupt_task.take() {
            task.abort();
            let _ = task.await;
            self.metrics.disruption.set_draining(false);
        }
    }

    /// The running kubelet's config equals the resolved one: a record left
    /// from a drain (ours, or of a supervisor that died) is finished: gate
    /// on the kubelet's health and uncordon what we cordoned.
    pub(super) async fn settle(&mut self, record: Option<DisruptionRecord>) {
        let Some(record) = record else {
            self.disruption = None;
            self.metrics.disruption.set_held(false, false);
            return;
        };
        if self.disrupt_task.is_some() && !matches!(record.phase, DrainPhase::Evicting) {
            self.disruption = Some(record);
            return;
        }
        // A drain for a target that is no longer wanted ends here too.
        self.stop_disruption_task().await;
        self.metrics.disruption.set_held(false, false);
        if !record.cordoned_by_us && !record.phase.drained() {
            info!(
                phase = record.phase.as_str(),
                "the pending config change is gone; clearing its record"
            );
            save_async(&self.store, None).await;
            self.disruption = None;
            return;
        }
        self.start_gate(record, None);
    }

    /// Starts the health gate: wait for healthz, uncordon if ours, then
    /// write `then` (or clear the record).
    fn start_gate(&mut self, mut record: DisruptionRecord, then: Option<DisruptionRecord>) {
        let addr = self.applied.as_ref().and_then(|a| {
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
        });
        let drainer = self.drainer();
        let store = self.store.clone();
        let metrics = self.metrics.clone();
        let was_drain = record.phase.drained();
        record.phase = DrainPhase::HealthGate;
        record.waiting_for = match addr {
            Some(a) => format!("kubelet healthz at http://{a}/healthz, then uncordon"),
            None => "uncordon (healthz disabled)".to_string(),
        };
        self.disruption = Some(record.clone());
        self.disrupt_task = Some(tokio::spawn(async move {
            save_async(&store, Some(record.clone())).await;
            if let Some(a) = addr {
                while !health::healthy(a).await {
                    tokio::time::sleep(GATE_POLL).await;
                }
                info!(addr = %a, "kubelet is healthy");
            }
            if record.cordoned_by_us {
                if let Some(d) = &drainer {
                    // Until it is done: 0.5 s doubling to 10 s (30 s on
                    // error statuses), a log line a try for a minute, then one a minute.
                    Retry::new("uncordoning the node")
                        .until_ok(|| d.uncordon())
                        .await;
                    d.event(EventType::Normal, "Uncordoned", &format!("kubelet healthy with the new config; uncordoned after the {} change ({})", record.class, record.fields.join(", "))).await;
                }
            }
            if was_drain {
                metrics.disruption.drain(DrainResult::Completed);
            }
            save_async(&store, then).await;
            Some(TaskDone::Settled)
        }));
    }

    /// A change of the running config needs `action`: carry it out (or keep
    /// waiting). Returns the inputs to feed (a restart).
    pub(super) async fn on_disruptive(
        &mut self,
        resolved: &Resolved,
        pending: Pending,
    ) -> Vec<Input> {
        let Pending {
            change,
            policy,
            record,
        } = pending;
        let Some(class) = change.class() else {
            self.metrics.restart_for_config();
            return vec![Input::Reload];
        };
        let mut action = policy.action(class);
        if action == Action::Drain && self.client().is_none() {
            action = Action::Restart;
        }
        let same_target = record
            .as_ref()
            .is_some_and(|r| r.target_hash == resolved.hash());
        match action {
            Action::Restart => {
                info!(change = %running::describe(&change), "config change: restarting the kubelet in place");
                self.metrics.restart_for_config();
                vec![Input::Reload]
            }
            Action::Hold => {
                if same_target && record.as_ref().is_some_and(|r| r.phase == DrainPhase::Held) {
                    self.disruption = record;
                    return vec![];
                }
                self.stop_disruption_task().await;
                let Some(mut held) = new_record(resolved, &change, action, DrainPhase::Held) else {
                    return vec![];
                };
                held.waiting_for = "a new node (this change is not applied in place)".into();
                warn!(change = %running::describe(&change), "config change needs a new node: holding it; the running kubelet and its config stay");
                self.metrics.disruption.set_held(true, true);
                match record.filter(|r| r.cordoned_by_us) {
                    // Cordoned by an earlier drain: uncordon, then hold.
                    Some(old) => self.start_gate(old, Some(held)),
                    None => {
                        save_async(&self.store, Some(held.clone())).await;
                        self.disruption = Some(held);
                    }
                }
                vec![]
            }
            Action::Drain => {
                self.metrics.disruption.set_held(false, false);
                if self.disrupt_task.is_some() {
                    return vec![];
                }
                let mut rec = match record {
                    Some(r)
                        if r.phase == DrainPhase::BackingOff
                            && same_target
                            && !due(r.retry_at.as_deref()) =>
                    {
                        self.disruption = Some(r);
                        return vec![];
                    }
                    // Resume (ours after a restart, or another supervisor's):
                    // keep whether we cordoned the node.
                    Some(mut r) => {
                        if !same_target {
                            if let Some(class) = change.class() {
                                r.target_hash = resolved.hash();
                                r.target = resolved.source.clone();
                                r.class = class;
                                r.fields = change.fields_of(class);
                                r.action = action;
                            }
                        }
                        r
                    }
                    None => match new_record(resolved, &change, action, DrainPhase::Evicting) {
                        Some(r) => r,
                        None => return vec![],
                    },
                };
                if rec.phase.drained() {
                    // Drained already (a restart was cut short): restart now.
                    self.disruption = Some(rec);
                    self.metrics.restart_for_config();
                    return vec![Input::Reload];
                }
                rec.phase = DrainPhase::Evicting;
                self.start_drain(rec);
                vec![]
            }
        }
    }

    fn start_drain(&mut self, mut rec: DisruptionRecord) {
        let Some(drainer) = self.drainer() else {
            return;
        };
        let store = self.store.clone();
        let metrics = self.metrics.clone();
        let timeout = self.opts.disruption.drain_timeout;
        let retry = self.opts.disruption.drain_retry;
        rec.attempts += 1;
        rec.waiting_for = "cordon".into();
        // What blocked an earlier attempt is no news for this one.
        rec.blocked.clear();
        info!(class = %rec.class, fields = %rec.fields.join(", "), attempt = rec.attempts, timeout = ?timeout, "draining the node for a config change");
        self.disruption = Some(rec.clone());
        metrics.disruption.set_draining(true);
        self.disrupt_task = Some(tokio::spawn(async move {
            save_async(&store, Some(rec.clone())).await;
            let what = format!("{} change ({})", rec.class, rec.fields.join(", "));
            drainer
                .event(
                    EventType::Normal,
                    "DrainStarted",
                    &format!("draining the node for a {what}; attempt {}", rec.attempts),
                )
                .await;
            let deadline = tokio::time::Instant::now() + timeout;
            let mut failure: Option<Failure> = None;
            if !rec.cordoned_by_us {
                match drainer.cordon().await {
                    Ok(true) => {
                        rec.cordoned_by_us = true;
                        save_async(&store, Some(rec.clone())).await;
                        drainer
                            .event(
                                EventType::Normal,
                                "Cordoned",
                                &format!("cordoned for a {what}"),
                            )
                            .await;
                    }
                    Ok(false) => {}
                    Err(err) => {
                        failure = Some(Failure {
                            kind: match &err {
                                kube::Error::Api(s) if s.code == 403 => DrainFailure::Forbidden,
                                _ => DrainFailure::Refused,
                            },
                            message: format!("cannot cordon the node: {err}"),
                        })
                    }
                }
            }
            let mut session = drainer.session();
            let mut last_progress = None;
            let outcome = loop {
                if let Some(f) = failure.take() {
                    break Err((f, DrainResult::Failed));
                }
                let round = match tokio::time::timeout_at(deadline, session.step()).await {
                    Ok(round) => round,
                    Err(_) => Round::Pending(session.progress()),
                };
                match round {
                    Round::Drained { evicted } => break Ok(evicted),
                    Round::Failed(f) => break Err((f, DrainResult::Failed)),
                    Round::Pending(progress) => {
                        if tokio::time::Instant::now() >= deadline {
                            let f = Failure {
                                kind: DrainFailure::Timeout,
                                message: format!(
                                    "{} after --drain-timeout {} (for example {})",
                                    progress,
                                    humantime::format_duration(timeout),
                                    session.examples().join(", ")
                                ),
                            };
                            rec.blocked = progress.blocked;
                            break Err((f, DrainResult::Timeout));
                        }
                        if last_progress.as_ref() != Some(&progress) {
                            rec.waiting_for = progress.to_string();
                            rec.blocked = progress.blocked.clone();
                            save_async(&store, Some(rec.clone())).await;
                            last_progress = Some(progress);
                        }
                    }
                }
            };
            // The pods' list and watch end here, before the restart.
            drop(session);
            metrics.disruption.set_draining(false);
            match outcome {
                Ok(evicted) => {
                    rec.blocked.clear();
                    rec.failure = None;
                    rec.phase = DrainPhase::Restarting;
                    rec.waiting_for = "kubelet restart with the new config".into();
                    save_async(&store, Some(rec.clone())).await;
                    drainer.event(EventType::Normal, "Drained", &format!("{evicted} pod(s) evicted for a {what}; restarting the kubelet with the new config")).await;
                    Some(TaskDone::Drained)
                }
                Err((failure, result)) => {
                    let reason = failure.message;
                    warn!(%reason, kind = failure.kind.as_str(), "drain did not finish; nothing forced, the node is uncordoned and the drain is tried again later");
                    metrics.disruption.drain(result);
                    if rec.cordoned_by_us {
                        match drainer.uncordon().await {
                            Ok(()) => rec.cordoned_by_us = false,
                            Err(err) => {
                                warn!(%err, "cannot uncordon the node after the drain gave up; the next try or settle will")
                            }
                        }
                    }
                    let wait = retry_delay(retry, rec.attempts);
                    rec.phase = DrainPhase::BackingOff;
                    rec.retry_at = Some(time_after(wait));
                    rec.last_error = Some(kp_contract::node_config::bounded(&reason, 512));
                    rec.failure = Some(failure.kind);
                    rec.waiting_for = format!("next drain in {}", humantime::format_duration(wait));
                    save_async(&store, Some(rec)).await;
                    Some(TaskDone::GaveUp)
                }
            }
        }));
    }

    /// A disruption task ended.
    pub(super) async fn on_disruption_done(&mut self, done: Option<TaskDone>) -> Vec<Input> {
        self.disrupt_task = None;
        let store = self.store.clone();
        self.disruption = blocking(move || store.disruption().ok().flatten())
            .await
            .flatten();
        // A drain that gave up is tried again at the time its record names:
        // nothing else wakes the loop then (the record is not watched).
        if let Some(at) = super::config::retry_due(self.disruption.as_ref()) {
            debug!(retry_at = ?self.disruption.as_ref().and_then(|r| r.retry_at.as_deref()), "drain retry timer armed");
            self.config_due = Some(self.config_due.map_or(at, |due| due.min(at)));
        }
        if let Some(a) = self.applied.clone() {
            self.publish_report(&a);
        }
        match done {
            Some(TaskDone::Drained)
                if matches!(self.pivot.state, State::Holding(Run::Running(_))) =>
            {
                self.metrics.restart_for_config();
                vec![Input::Reload]
            }
            _ => vec![],
        }
    }

    /// Reads the store's record once per holding, before the first
    /// kubelet start reports: a holder taking over (or back) must not
    /// report a change that another holder finished or changed meanwhile,
    /// nor report none while one is pending.
    pub(super) async fn read_disruption(&mut self) {
        if self.disruption_read || self.disrupt_task.is_some() {
            return;
        }
        let store = self.store.clone();
        self.disruption = blocking(move || store.disruption().ok().flatten())
            .await
            .flatten();
        self.disruption_read = true;
    }

    /// The lock is released: what we knew of the change, and the report
    /// the next syncer would start from, end with our holding.
    pub(super) fn forget_disruption(&mut self) {
        self.disruption = None;
        self.disruption_read = false;
        self.reports.send_replace(None);
    }

    /// The Node's view of the current record, if any.
    pub(super) fn disruption_report(&self) -> Option<DisruptionReport> {
        self.disruption.as_ref().map(report_of)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_at_is_read_in_whole_seconds_and_in_milliseconds() {
        let older = parse_retry_at("2026-11-29T03:38:13Z").expect("whole seconds (earlier builds)");
        let newer = parse_retry_at("2026-11-29T03:38:13.609Z").expect("milliseconds");
        assert_eq!(
            newer.duration_since(older).expect("later"),
            Duration::from_millis(609)
        );
        // What this build writes, it reads back to the millisecond.
        let stamp = time_after(Duration::from_secs(2));
        assert!(stamp.contains('.'), "{stamp}");
        assert!(parse_retry_at(&stamp).is_some());
        assert!(!due(Some(&stamp)));
        assert!(due(Some("2026-01-01T00:00:00Z")));
        assert!(due(None));
    }
}
