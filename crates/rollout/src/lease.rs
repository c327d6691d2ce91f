//! Leader election through a coordination.k8s.io/v1 Lease, as client-go's leaderelection
//! does it: a candidate takes the Lease when nobody holds it or when the holder's record
//! has not changed for a whole lease duration *as observed on the candidate's own clock*
//! (so clock skew between replicas does not matter); every write is a replace guarded by
//! the resourceVersion, so of two candidates exactly one wins. The leader renews every
//! retry period and stops acting when it could not renew within the renew deadline, which
//! is shorter than the lease duration: it has stopped before anyone else may start.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tracing::{info, warn};

use super::health::{Health, ReplicaRole};
use kp_contract::rollout::{ControllerFeatures, CONTROLLER_FEATURES_ANNOTATION};
use kp_runtime::retry::{Failure, Outage, Retry};

/// Timings, as client-go names them.
#[derive(Clone, Debug)]
pub struct LeaseTimings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Timings out of the order client-go requires (named by their flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimingsError {
    #[error("--lease-duration must be longer than --renew-deadline")]
    DurationNotAboveDeadline,
    #[error("--renew-deadline must be longer than --retry-period")]
    DeadlineNotAboveRetry,
    #[error("--retry-period must be more than 0")]
    NoRetryPeriod,
}

impl LeaseTimings {
    /// Checks the ordering client-go requires: duration > deadline > retry period.
    pub fn check(&self) -> Result<(), TimingsError> {
        if self.lease_duration <= self.renew_deadline {
            return Err(TimingsError::DurationNotAboveDeadline);
        }
        if self.renew_deadline <= self.retry_period {
            return Err(TimingsError::DeadlineNotAboveRetry);
        }
        if self.retry_period.is_zero() {
            return Err(TimingsError::NoRetryPeriod);
        }
        Ok(())
    }
}

/// Whether we still lead: the last successful renewal is within the renew deadline.
#[derive(Clone)]
pub struct Leadership {
    renewed: Arc<Mutex<Instant>>,
    deadline: Duration,
}

impl Leadership {
    pub fn is_valid(&self) -> bool {
        self.renewed
            .lock()
            .map(|t| t.elapsed() < self.deadline)
            .unwrap_or(false)
    }

    fn renewed_at(&self, at: Instant) {
        if let Ok(mut t) = self.renewed.lock() {
            *t = at;
        }
    }
}

/// A candidate for one Lease.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: LeaseTimings,
    /// The holder's record as last seen (resourceVersion) and when we saw it change.
    observed: Option<(String, Instant)>,
    /// The Lease as we last wrote it while holding it: a renewal replaces it at once (one
    /// PUT guarded by its resourceVersion, as client-go's fast path), and reads the Lease
    /// only when that write is refused.
    held: Option<Lease>,
    /// Told of every attempt (the liveness and readiness probes).
    health: Option<Health>,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Elector {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, timings: LeaseTimings) -> Elector {
        Elector {
            api,
            name: name.to_string(),
            identity: identity.to_string(),
            timings,
            observed: None,
            held: None,
            health: None,
        }
    }

    /// Reports every attempt, and the leadership, to `health`.
    pub fn with_health(mut self, health: Health) -> Elector {
        self.health = Some(health);
        self
    }

    /// One attempt, reported to the health state (answered: the Lease could be read and,
    /// if it was due, written; a refusal such as a 403 or a 500 is no answer).
    async fn attempt(&mut self) -> Result<bool, kube::Error> {
        let result = self.try_acquire_or_renew().await;
        if let Some(health) = &self.health {
            health.lease_attempt(result.is_ok());
        }
        result
    }

    /// Marks `lease` as taken by us, with what this build follows
    /// ([`ControllerFeatures`]); renewals keep it.
    fn mark(&self, lease: &mut Lease) {
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                CONTROLLER_FEATURES_ANNOTATION.to_string(),
                ControllerFeatures::annotation_for(&self.identity),
            );
    }

    fn spec(&self, acquire: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timings.lease_duration.as_secs().max(1) as i32),
            acquire_time: acquire,
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One attempt to take or keep the Lease; Ok(true) when we hold it now. While we hold
    /// it, one write: the Lease we last wrote, renewed; only if that is refused (409: it
    /// changed meanwhile) or fails is it read and decided again.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        if let Some(mut lease) = self.held.take() {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.renew_time = Some(now());
            match self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
            {
                Ok(written) => {
                    self.held = Some(written);
                    return Ok(true);
                }
                Err(err) => {
                    warn!(err = %kp_runtime::api_error::shown(&err), lease = %self.name, "renewing the leader lease was refused; reading it");
                }
            }
        }
        let started = Instant::now();
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let mut lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(Some(now()), 0)),
            };
            self.mark(&mut lease);
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(written) => {
                    self.held = Some(written);
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let rv = current
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() {
            let duration = spec
                .lease_duration_seconds
                .map_or(self.timings.lease_duration, |s| {
                    Duration::from_secs(s.max(0) as u64)
                });
            let seen_since = match &self.observed {
                Some((seen_rv, at)) if *seen_rv == rv => *at,
                _ => {
                    self.observed = Some((rv.clone(), started));
                    started
                }
            };
            if seen_since.elapsed() < duration {
                return Ok(false);
            }
            info!(holder = %holder, "the rollout controller lease expired; taking it over");
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquire = if ours {
            spec.acquire_time.clone()
        } else {
            Some(now())
        };
        let mut lease = current;
        lease.spec = Some(self.spec(acquire, transitions));
        self.mark(&mut lease);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.held = Some(written);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until we hold the Lease, then renews it in the background. The returned
    /// handle says whether we still lead; the receiver fires when leadership is lost.
    pub async fn lead(mut self) -> (Leadership, tokio::sync::oneshot::Receiver<()>) {
        // A candidate retries every retry period, and with cluster::retry's
        // backoff while the API server fails (quiet logs: a line a try for a
        // minute, then one a minute).
        let mut acquire = Retry::new(format!("taking the leader lease {}", self.name));
        loop {
            let attempt = Instant::now();
            let mut wait = self.timings.retry_period;
            match self.attempt().await {
                Ok(true) => {
                    acquire.succeeded();
                    break;
                }
                Ok(false) => acquire.succeeded(),
                Err(err) => wait = wait.max(acquire.failed_call(&err)),
            }
            tokio::time::sleep(wait.saturating_sub(attempt.elapsed())).await;
        }
        info!(identity = %self.identity, lease = %self.name, "became the rollout controller leader");
        if let Some(health) = &self.health {
            health.set_role(ReplicaRole::Leader { synced: false });
        }
        let leadership = Leadership {
            renewed: Arc::new(Mutex::new(Instant::now())),
            deadline: self.timings.renew_deadline,
        };
        let (lost_tx, lost_rx) = tokio::sync::oneshot::channel();
        let handle = leadership.clone();
        tokio::spawn(async move {
            // Renewals keep their period (the lease is lost after the renew
            // deadline otherwise); only their log is quiet.
            let mut renew = Outage::new(format!("renewing the leader lease {}", self.name));
            loop {
                tokio::time::sleep(self.timings.retry_period).await;
                let attempt = Instant::now();
                match self.attempt().await {
                    Ok(true) => {
                        renew.ok();
                        handle.renewed_at(attempt);
                    }
                    Ok(false) => {
                        warn!(lease = %self.name, "another replica holds the leader lease now");
                        break;
                    }
                    Err(err) => renew.failed(
                        &kp_runtime::api_error::shown(&err),
                        Failure::of(&err),
                        self.timings.retry_period,
                    ),
                }
                if !handle.is_valid() {
                    warn!(lease = %self.name, "could not renew the leader lease within the renew deadline");
                    break;
                }
            }
            let _ = lost_tx.send(());
        });
        (leadership, lost_rx)
    }

    /// Gives the Lease up (on a clean shutdown), so another replica need not wait it out.
    pub async fn release(api: &Api<Lease>, name: &str, identity: &str) {
        let Ok(Some(mut lease)) = api.get_opt(name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(identity) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        if let Err(err) = api.replace(name, &PostParams::default(), &lease).await {
            warn!(err = %kp_runtime::api_error::shown(&err), "cannot release the leader lease");
        }
    }
}
