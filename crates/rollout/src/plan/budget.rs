//! maxUnavailable per topology domain: how many more nodes may be changed now.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::super::nodeview::{assignment_ref, NodeView};
use super::settings::Settings;

/// What each domain may still take.
pub struct Budget {
    key: String,
    room: BTreeMap<String, isize>,
}

impl Budget {
    /// Unavailable per domain, over every node of the domain (the cluster's domain, not
    /// this rollout's share of it): nodes this rollout is changing (`in_flight`), nodes any
    /// other rollout changed that do not show their assignment active yet (for at most the
    /// config-active timeout, after which such a node counts as failed, not as changing),
    /// and nodes not Ready, cordoned or draining, whoever made them so. The limit is taken
    /// of the domain's size.
    pub fn new(
        settings: &Settings,
        nodes: &[NodeView],
        in_flight: &BTreeSet<&str>,
        now: SystemTime,
    ) -> Budget {
        let key = settings.topology_key.as_str();
        let mut size: BTreeMap<&str, usize> = BTreeMap::new();
        let mut down: BTreeMap<&str, usize> = BTreeMap::new();
        for view in nodes {
            let domain = view.domain(key);
            *size.entry(domain).or_default() += 1;
            if in_flight.contains(view.name.as_str())
                || view.unavailable()
                || changing(view, now, settings.config_active_timeout)
            {
                *down.entry(domain).or_default() += 1;
            }
        }
        let room = size
            .iter()
            .map(|(domain, n)| {
                let limit = settings.unavailable_limit(*n) as isize;
                let used = down.get(domain).copied().unwrap_or(0) as isize;
                (domain.to_string(), limit - used)
            })
            .collect();
        Budget {
            key: key.to_string(),
            room,
        }
    }

    /// Takes room for changing `view`; false when its domain has none. A node that is
    /// unavailable already takes none.
    pub fn take(&mut self, view: &NodeView) -> bool {
        if view.unavailable() {
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
/// assignment active yet.
fn changing(view: &NodeView, now: SystemTime, timeout: Duration) -> bool {
    let Some(record) = view.record.as_ref() else {
        return false;
    };
    let recent = kp_contract::time::parse(&record.at)
        .and_then(|at| now.duration_since(at).ok())
        .is_some_and(|age| age < timeout);
    recent && !view.shows_active(assignment_ref(view.assignment.as_deref()).as_ref(), None)
}
