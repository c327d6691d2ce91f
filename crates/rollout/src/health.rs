//! `/healthz` and `/readyz` of the rollout controller.
//!
//! - **healthz** (liveness): the Lease loop is turning. Every replica, leader or standby,
//!   tries the Lease every retry period; an attempt counts whether the API server answered
//!   or not (an API outage must not get healthy replicas restarted: restarting cannot fix
//!   it). A loop that made no attempt for [`LIVENESS_ATTEMPTS`] lease durations is stuck.
//! - **readyz** (readiness): the replica can do its job now. The leader is ready once its
//!   caches (Nodes, the stop switch) have synced; a standby is ready while a Lease attempt
//!   succeeded within a lease duration (it read the Lease: it would see it expire and
//!   could take over; a 403 or a 500 does not count). Nothing routes traffic by it (there is no Service): it
//!   tells `kubectl get pods` which replicas are fit, and a rolling update of the
//!   Deployment waits for the new replica to be.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many lease durations without a Lease attempt make a replica not alive.
pub const LIVENESS_ATTEMPTS: u32 = 3;

/// What this replica does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaRole {
    /// Trying to take the Lease.
    Standby,
    /// Holding the Lease; `synced` once its caches are.
    Leader { synced: bool },
}

#[derive(Debug)]
struct State {
    role: ReplicaRole,
    /// The last Lease attempt, and whether the API server answered it.
    attempt: Instant,
    answered: Option<Instant>,
}

/// An answer to a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    Ok(String),
    Failing(String),
}

/// Shared by the Lease loop, the controller and the HTTP server.
#[derive(Clone, Debug)]
pub struct Health {
    state: Arc<Mutex<State>>,
    lease_duration: Duration,
}

impl Health {
    pub fn new(lease_duration: Duration) -> Health {
        Health {
            state: Arc::new(Mutex::new(State {
                role: ReplicaRole::Standby,
                attempt: Instant::now(),
                answered: None,
            })),
            lease_duration,
        }
    }

    /// A Lease attempt ended; `answered`: it succeeded (the Lease read, and written when
    /// due), whether or not this replica holds the Lease now.
    pub fn lease_attempt(&self, answered: bool) {
        self.lease_attempt_at(answered, Instant::now());
    }

    fn lease_attempt_at(&self, answered: bool, now: Instant) {
        if let Ok(mut s) = self.state.lock() {
            s.attempt = now;
            if answered {
                s.answered = Some(now);
            }
        }
    }

    pub fn set_role(&self, role: ReplicaRole) {
        if let Ok(mut s) = self.state.lock() {
            s.role = role;
        }
    }

    pub fn liveness(&self) -> Probe {
        self.liveness_at(Instant::now())
    }

    pub fn readiness(&self) -> Probe {
        self.readiness_at(Instant::now())
    }

    fn liveness_at(&self, now: Instant) -> Probe {
        let Ok(s) = self.state.lock() else {
            return Probe::Failing("the health state is poisoned".into());
        };
        let limit = self.lease_duration.saturating_mul(LIVENESS_ATTEMPTS);
        let since = now.saturating_duration_since(s.attempt);
        if since > limit {
            Probe::Failing(format!(
                "no Lease attempt for {} (limit {}): the Lease loop is stuck",
                humantime::format_duration(std::time::Duration::from_secs(since.as_secs())),
                humantime::format_duration(limit)
            ))
        } else {
            Probe::Ok("ok".into())
        }
    }

    fn readiness_at(&self, now: Instant) -> Probe {
        if let Probe::Failing(why) = self.liveness_at(now) {
            return Probe::Failing(why);
        }
        let Ok(s) = self.state.lock() else {
            return Probe::Failing("the health state is poisoned".into());
        };
        match s.role {
            ReplicaRole::Leader { synced: true } => Probe::Ok("leader, caches synced".into()),
            ReplicaRole::Leader { synced: false } => {
                Probe::Failing("leader, caches not synced yet".into())
            }
            ReplicaRole::Standby => match s.answered {
                Some(at) if now.saturating_duration_since(at) <= self.lease_duration => {
                    Probe::Ok("standby, the API server answers".into())
                }
                _ => Probe::Failing(format!(
                    "standby, the API server answered no Lease attempt within {}",
                    humantime::format_duration(self.lease_duration)
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failing(p: Probe) -> bool {
        matches!(p, Probe::Failing(_))
    }

    #[test]
    fn a_standby_is_ready_while_answered_and_a_leader_once_synced() {
        let h = Health::new(Duration::from_secs(15));
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        assert!(!failing(h.liveness_at(at(0))));
        assert!(failing(h.readiness_at(at(0))), "no answer yet");
        h.lease_attempt_at(true, at(1));
        assert!(!failing(h.readiness_at(at(1))));
        // The API server stops answering: still alive, no longer ready.
        h.lease_attempt_at(false, at(10));
        h.lease_attempt_at(false, at(20));
        assert!(!failing(h.liveness_at(at(20))));
        assert!(failing(h.readiness_at(at(20))));
        h.set_role(ReplicaRole::Leader { synced: false });
        assert!(failing(h.readiness_at(at(20))));
        h.set_role(ReplicaRole::Leader { synced: true });
        assert!(!failing(h.readiness_at(at(20))));
        // The Lease loop stops turning: neither alive nor ready.
        assert!(!failing(h.liveness_at(at(65))));
        assert!(failing(h.liveness_at(at(66))));
        assert!(failing(h.readiness_at(at(66))));
    }
}
