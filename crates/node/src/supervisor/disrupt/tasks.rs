//! The tasks of a disruptive change, beside the loop: the drain (cordon,
//! evict until the pods are gone or `--drain-timeout`) and the health gate
//! (the new kubelet's healthz, then uncordon). What they write to the
//! record is decided in `decide` (`attempt`, `drained`, `gave_up`).

use super::*;

/// The health gate: wait for healthz at `addr`, uncordon if `record` says
/// we cordoned the node, then write `then` (or clear the record).
pub(super) struct Gate {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub drainer: Option<Drainer>,
    pub addr: Option<SocketAddr>,
    /// The record, in phase `HealthGate`.
    pub record: DisruptionRecord,
    /// The change was applied by a drain (counted as completed).
    pub was_drain: bool,
    pub then: Option<DisruptionRecord>,
}

impl Gate {
    pub(super) async fn run(self) -> Option<TaskDone> {
        let Gate {
            store,
            metrics,
            drainer,
            addr,
            record,
            was_drain,
            then,
        } = self;
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
                d.event(
                    EventType::Normal,
                    "Uncordoned",
                    &format!(
                        "kubelet healthy with the new config; uncordoned after the {} change ({})",
                        record.class,
                        record.fields.join(", ")
                    ),
                )
                .await;
            }
        }
        if let Some(d) = &drainer {
            // Only what we set is cleared (lifecycle::Drainer::lifecycle).
            let change = format!("{} change ({})", record.class, record.fields.join(", "));
            let (to, message) = match (&then, was_drain) {
                (None, true) => (
                    Lifecycle::Ended,
                    format!("kubelet healthy with the new config after the drain for the {change}; the node is back in service"),
                ),
                (Some(_), _) => (
                    Lifecycle::Interrupted,
                    format!("the drain for the {change} stopped: the change now needs a new node and is held"),
                ),
                (None, false) => (
                    Lifecycle::Interrupted,
                    format!("the drain for the {change} stopped: the kubelet runs the wanted config without it"),
                ),
            };
            d.lifecycle(to, &message).await;
        }
        if was_drain {
            metrics.disruption.drain(DrainResult::Completed);
        }
        save_async(&store, then).await;
        Some(TaskDone::Settled)
    }
}

/// One drain attempt of the change `rec` names (attempt counted already).
pub(super) struct Drain {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub drainer: Drainer,
    pub timeout: Duration,
    pub retry: Duration,
    pub rec: DisruptionRecord,
}

impl Drain {
    pub(super) async fn run(self) -> Option<TaskDone> {
        let Drain {
            store,
            metrics,
            drainer,
            timeout,
            retry,
            mut rec,
        } = self;
        save_async(&store, Some(rec.clone())).await;
        let what = format!("{} change ({})", rec.class, rec.fields.join(", "));
        drainer
            .event(
                EventType::Normal,
                "DrainStarted",
                &format!("draining the node for the {what}; attempt {}", rec.attempts),
            )
            .await;
        drainer
            .lifecycle(
                Lifecycle::Started,
                &format!(
                    "kubelet-pivot drains the node for the {what}; attempt {}",
                    rec.attempts
                ),
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
                            &format!("cordoned for the {what}"),
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
                let attempt = rec.attempts;
                save_async(&store, Some(decide::drained(rec))).await;
                let message = format!("every pod left; {evicted} pod(s) evicted in attempt {attempt} for the {what}; restarting the kubelet with the new config");
                drainer.event(EventType::Normal, "Drained", &message).await;
                drainer.lifecycle(Lifecycle::Completed, &message).await;
                Some(TaskDone::Drained)
            }
            Err((failure, result)) => {
                warn!(reason = %failure.message, kind = failure.kind.as_str(), "drain did not finish; nothing forced, the node is uncordoned and the drain is tried again later");
                metrics.disruption.drain(result);
                if rec.cordoned_by_us {
                    match drainer.uncordon().await {
                        Ok(()) => rec.cordoned_by_us = false,
                        Err(err) => {
                            warn!(err = %kp_runtime::api_error::shown(&err), "cannot uncordon the node after the drain gave up; the next try or settle will")
                        }
                    }
                }
                let rec = decide::gave_up(rec, &failure, retry, std::time::SystemTime::now());
                let message = format!(
                    "attempt {} of the drain for the {what} did not finish: {}; next try at {}",
                    rec.attempts,
                    failure.message,
                    rec.retry_at.as_deref().unwrap_or("soon")
                );
                save_async(&store, Some(rec)).await;
                drainer.lifecycle(Lifecycle::Failed, &message).await;
                Some(TaskDone::GaveUp)
            }
        }
    }
}
