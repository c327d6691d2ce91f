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
mod forward;
pub mod gates;
pub mod nofallback;
pub mod owner;
mod report;
pub mod revision;
pub mod settings;
mod start;
mod undo;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::nodeview::{NodeRecord, NodeView};
use conditions::{set_condition, ConditionType};
use forward::forward;
use gates::PodsState;
use kp_contract::rollout::{Phase, RolloutSpec, RolloutStatus};
use kp_contract::time::rfc3339;
use owner::{Me, OtherRollout};
use settings::Settings;
use start::start_revision;
use undo::undo;

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
            started: revision::current(&self.st).and_then(|r| kp_contract::time::parse(&r.started)),
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
                &err.to_string(),
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
    let selector = inp.spec.selector();
    let matching: BTreeMap<&str, &NodeView> = inp
        .nodes
        .iter()
        .filter(|n| n.matches(&selector))
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

#[cfg(test)]
pub(crate) mod tests;
