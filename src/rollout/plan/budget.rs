//! maxUnavailable per topology domain: how many more nodes may be changed now.

use std::collections::{BTreeMap, BTreeSet};

use super::super::nodeview::NodeView;
use super::settings::Settings;

/// What each domain may still take.
pub struct Budget {
    key: String,
    room: BTreeMap<String, isize>,
}

impl Budget {
    /// Unavailable per domain among the targets: nodes being changed (`in_flight`), not
    /// Ready, cordoned or draining; the limit from the domain's target count.
    pub fn new(
        settings: &Settings,
        targets: &BTreeMap<&str, &NodeView>,
        in_flight: &BTreeSet<&str>,
    ) -> Budget {
        let key = settings.topology_key.as_str();
        let mut size: BTreeMap<&str, usize> = BTreeMap::new();
        let mut down: BTreeMap<&str, usize> = BTreeMap::new();
        for (name, view) in targets {
            let domain = view.domain(key);
            *size.entry(domain).or_default() += 1;
            if in_flight.contains(name) || view.unavailable() {
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
