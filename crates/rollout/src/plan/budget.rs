//! maxUnavailable per topology domain: how many more nodes may be changed now.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::super::nodeview::{assignment_ref, NodeView};
use super::settings::Settings;

/// What each domain may still take.
pub struct Budget {
    key: String,
    room: BTreeMap<String, isize>,
    /// The nodes counted as unavailable: each already holds its share of its domain.
    down: BTreeSet<String>,
}

impl Budget {
    /// Unavailable per domain, over every node of the domain (the cluster's domain, not
    /// this rollout's share of it): nodes this rollout is changing (`in_flight`), nodes any
    /// rollout changed that do not show their assignment active yet (for at most the
    /// config-active timeout, after which such a node counts as failed, not as changing),
    /// and nodes not Ready, cordoned or draining, whoever made them so. A node that fell
    /// back to its last-known-good config has settled: its failure is known, and it
    /// counts only if it is unavailable. The limit is taken of the domain's size.
    pub fn new(
        settings: &Settings,
        nodes: &[NodeView],
        in_flight: &BTreeSet<&str>,
        now: SystemTime,
    ) -> Budget {
        let key = settings.topology_key.as_str();
        let mut size: BTreeMap<&str, usize> = BTreeMap::new();
        let mut used: BTreeMap<&str, usize> = BTreeMap::new();
        let mut down = BTreeSet::new();
        for view in nodes {
            let domain = view.domain(key);
            *size.entry(domain).or_default() += 1;
            if in_flight.contains(view.name.as_str())
                || view.unavailable()
                || changing(view, now, settings.config_active_timeout)
            {
                *used.entry(domain).or_default() += 1;
                down.insert(view.name.clone());
            }
        }
        let room = size
            .iter()
            .map(|(domain, n)| {
                let limit = settings.unavailable_limit(*n) as isize;
                let used = used.get(domain).copied().unwrap_or(0) as isize;
                (domain.to_string(), limit - used)
            })
            .collect();
        Budget {
            key: key.to_string(),
            room,
            down,
        }
    }

    /// Takes room for changing `view`; false when its domain has none. A node counted as
    /// unavailable already holds its share and takes no more: changing it (an undo
    /// reverting a node still on its way, a node not Ready) makes nothing less available.
    pub fn take(&mut self, view: &NodeView) -> bool {
        if self.down.contains(&view.name) || view.unavailable() {
            return true;
        }
        let room = self
            .room
            .entry(view.domain(&self.key).to_string())
            .or_insert(0);
        if *room <= 0 {
            return false;
        }
        *room -= 1;
        true
    }
}

/// Whether a rollout (any) changed `view` less than `timeout` ago and it does not show its
/// assignment active yet, nor has it fallen back from it (a node back on its last-known-good
/// config is done changing: its failure is known).
fn changing(view: &NodeView, now: SystemTime, timeout: Duration) -> bool {
    let Some(record) = view.record.as_ref() else {
        return false;
    };
    let recent = kp_contract::time::parse(&record.at)
        .and_then(|at| now.duration_since(at).ok())
        .is_some_and(|age| age < timeout);
    let assigned = assignment_ref(view.assignment.as_deref());
    let settled = view.shows_active(assigned.as_ref(), None)
        || assigned.as_ref().is_some_and(|a| view.fell_back_from(a));
    recent && !settled
}
