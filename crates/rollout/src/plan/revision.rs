//! Revisions: when one starts, the targets snapshot split into canary and batches, and the
//! snapshot kept in step with nodes that join or leave.

use std::collections::{BTreeMap, BTreeSet};

use super::super::nodeview::NodeView;
use super::nofallback::{self, NoFallback};
use kp_contract::rollout::{RevisionRecord, RolloutSpec, RolloutStatus};

/// Revisions kept in the status.
pub const HISTORY_LIMIT: usize = 10;

/// Results a revision ends with.
pub const COMPLETED: &str = "Completed";
pub const UNDONE: &str = "Undone";
pub const SUPERSEDED: &str = "Superseded";

/// The current revision's record, if one started.
pub fn current(status: &RolloutStatus) -> Option<&RevisionRecord> {
    status
        .history
        .last()
        .filter(|r| status.revision > 0 && r.revision == status.revision)
}

/// Whether the spec asks for a revision that has not started: none yet, another config, or
/// the same config again after an undo (`undo` cleared).
pub fn needs_new_revision(spec: &RolloutSpec, status: &RolloutStatus) -> bool {
    if spec.undo {
        return false;
    }
    match current(status) {
        None => true,
        Some(r) => r.config != spec.config || r.result.as_deref() == Some(UNDONE),
    }
}

/// Target nodes in rollout order: domains interleaved (one node of each in turn, domains
/// and nodes by name), so that every batch spreads across the domains.
pub fn snapshot<'a>(
    targets: impl Iterator<Item = &'a NodeView>,
    topology_key: &str,
) -> Vec<String> {
    let mut by_domain: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for view in targets {
        by_domain
            .entry(view.domain(topology_key))
            .or_default()
            .push(view.name.as_str());
    }
    for names in by_domain.values_mut() {
        names.sort_unstable();
    }
    let longest = by_domain.values().map(Vec::len).max().unwrap_or(0);
    let mut order = Vec::with_capacity(by_domain.values().map(Vec::len).sum());
    for i in 0..longest {
        for names in by_domain.values() {
            if let Some(name) = names.get(i) {
                order.push((*name).to_string());
            }
        }
    }
    order
}

/// Splits the ordered targets: the canary first (when `canary` > 0), then batches of
/// `batch` (at least 1).
pub fn split(order: Vec<String>, canary: usize, batch: usize) -> (Vec<Vec<String>>, bool) {
    let canary = canary.min(order.len());
    let mut rest = order;
    let tail = rest.split_off(canary);
    let mut batches = Vec::new();
    let has_canary = canary > 0;
    if has_canary {
        batches.push(rest);
    }
    for chunk in tail.chunks(batch.max(1)) {
        batches.push(chunk.to_vec());
    }
    (batches, has_canary)
}

/// Starts revision `status.revision + 1` of `spec` at `now`: closes the current one as
/// superseded, snapshots the targets and resets the per-revision state.
pub fn start(
    status: &mut RolloutStatus,
    spec: &RolloutSpec,
    targets: Vec<String>,
    batch: usize,
    config_uid: &str,
    no_fallback: NoFallback,
    now: &str,
) {
    if let Some(last) = status.history.last_mut() {
        if last.result.is_none() {
            last.result = Some(SUPERSEDED.to_string());
            last.finished = Some(now.to_string());
        }
    }
    let (batches, has_canary) = split(targets, spec.canary as usize, batch);
    status.revision += 1;
    status.batches = batches;
    status.has_canary = has_canary;
    status.current_batch = 0;
    status.soak_until = None;
    status.failures.clear();
    status.acknowledged_failures = 0;
    let mut record = RevisionRecord {
        revision: status.revision,
        config: spec.config.clone(),
        config_uid: Some(config_uid.to_string()),
        started: now.to_string(),
        finished: None,
        result: None,
        undo_started: None,
        changed: 0,
        failed: 0,
        no_fallback_for: None,
        no_fallback_source: None,
    };
    nofallback::record(&mut record, no_fallback);
    status.history.push(record);
    let excess = status.history.len().saturating_sub(HISTORY_LIMIT);
    status.history.drain(..excess);
}

/// Keeps the snapshot in step with the cluster: drops nodes that are gone or no longer
/// match, and gives nodes that match but are in no batch a place: the last batch when it
/// has not started, else a new batch. Returns how many joined.
pub fn reconcile_membership(
    status: &mut RolloutStatus,
    matching: &BTreeMap<&str, &NodeView>,
) -> usize {
    let mut known = BTreeSet::new();
    for batch in &mut status.batches {
        batch.retain(|name| matching.contains_key(name.as_str()));
        known.extend(batch.iter().cloned());
    }
    let joined: Vec<String> = matching
        .keys()
        .filter(|name| !known.contains(**name))
        .map(|name| name.to_string())
        .collect();
    if joined.is_empty() {
        return 0;
    }
    let count = joined.len();
    let last_unstarted = status.batches.len() > (status.current_batch as usize) + 1;
    match status.batches.last_mut() {
        Some(last) if last_unstarted => last.extend(joined),
        _ => status.batches.push(joined),
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_puts_the_canary_first_and_chunks_the_rest() {
        let order: Vec<String> = (0..7).map(|i| format!("n{i}")).collect();
        let (batches, canary) = split(order.clone(), 1, 3);
        assert!(canary);
        assert_eq!(
            batches.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![1, 3, 3]
        );
        let (batches, canary) = split(order, 0, 5);
        assert!(!canary);
        assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), vec![5, 2]);
        let (batches, canary) = split(Vec::new(), 2, 5);
        assert!(!canary && batches.is_empty());
    }
}
