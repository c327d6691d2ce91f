//! The trial of what runs: the stored trial clocks of a new assignment and
//! of a new `--config-dir` drop-in set, crash-loop counting and the
//! rollback it decides, and promotion to last-known-good.

use std::time::SystemTime;

use tracing::{info, warn};

use super::{boot_time, parse_time, Resolved};
use crate::config::store::{DropInTrial, EffectiveRecord, Store, StoreError, Trial};
use kp_contract::time::now_rfc3339;
use kp_kubelet_config::HASH_ALGORITHM;

/// Called by the holder after it applied `r`: starts a trial clock for a new
/// assignment (stored, not a file mtime), clears it when none is on trial,
/// does the same for the `--config-dir` drop-in set, and records what runs.
pub fn on_applied(store: &Store, r: &Resolved) -> Result<(), StoreError> {
    let _guard = store.lock()?;
    match r.on_trial() {
        Some(src) => {
            let current = store.trial()?;
            if current.as_ref().map(|t| &t.source) != Some(src) {
                info!(source = %src, "new assigned config: starting its trial period");
                store.set_trial(Some(&Trial {
                    source: src.clone(),
                    since: now_rfc3339(),
                }))?;
                store.set_startups(&[])?;
            }
        }
        None => {
            if store.trial()?.is_some() {
                store.set_trial(None)?;
                store.set_startups(&[])?;
            }
        }
    }
    record_drop_ins(store, r)?;
    // The document itself, so that a later build re-derives this config
    // under its own decoding and defaults (see `running`).
    let input = serde_json::to_vec(r.config.document()).unwrap_or_default();
    store.set_applied_input(&input)?;
    let record = EffectiveRecord {
        source: r.source.clone(),
        origin: r.origin.to_string(),
        hash_algorithm: HASH_ALGORITHM.to_string(),
        hash: r.hash(),
        class_hashes: Some(r.config.class_hashes()),
        input_sha256: Some(kp_kubelet_config::sha256_hex(&input)),
        error: r.error.as_ref().map(|e| e.to_string()),
        since: now_rfc3339(),
    };
    let unchanged = store.effective_record()?.is_some_and(|old| {
        EffectiveRecord {
            since: record.since.clone(),
            ..old
        } == record
    });
    if !unchanged {
        store.set_effective_record(&record)?;
    }
    Ok(())
}

/// The drop-in part of [`on_applied`] (store lock held): the set that runs
/// is kept as the one that ran; a set that is not last-known-good is on
/// trial (its clock starts once). The first set a node runs is its
/// last-known-good at once, as the local config is trusted: there is
/// nothing older to go back to, and a crash loop of the node's own config
/// would otherwise be blamed on it and "rolled back" to no drop-ins.
fn record_drop_ins(store: &Store, r: &Resolved) -> Result<(), StoreError> {
    let mut record = store.drop_in_record()?;
    let before = record.clone();
    match &r.drop_ins {
        Some(applied) => {
            record.applied = Some(applied.set.snapshot.clone());
            if record.last_known_good.is_none() {
                info!(drop_ins = %applied.describe(), "the first --config-dir drop-ins this node runs: they are its last-known-good set");
                record.last_known_good = Some(applied.set.snapshot.clone());
            }
            match r.drop_ins_on_trial(&record) {
                Some(on_trial) => {
                    if record.trial.as_ref().map(|t| t.id.as_str()) != Some(on_trial.id()) {
                        info!(drop_ins = %on_trial.describe(), "new --config-dir drop-ins: starting their trial period");
                        record.trial = Some(DropInTrial {
                            id: on_trial.id().to_owned(),
                            since: now_rfc3339(),
                            startups: Vec::new(),
                        });
                    }
                }
                None => record.trial = None,
            }
        }
        None => {
            record.applied = None;
            record.trial = None;
        }
    }
    if record != before {
        store.set_drop_in_record(&record)?;
    }
    Ok(())
}

/// A trial's crash count after one more kubelet exit: the exits within the
/// trial, counted from the latest of its start, boot and this holder's
/// start.
struct TrialCount {
    start: SystemTime,
    count: usize,
    /// The trial is still running and the count is over the threshold.
    over: bool,
}

fn count_crashes(
    since: &str,
    startups: &[String],
    holder_since: SystemTime,
    r: &Resolved,
    now: SystemTime,
) -> TrialCount {
    let start = parse_time(since).unwrap_or(now);
    let end = start + r.config.config_trial_duration();
    let mut window_start = start.max(holder_since);
    if let Some(boot) = boot_time() {
        window_start = window_start.max(boot);
    }
    let count = startups
        .iter()
        .filter_map(|s| parse_time(s))
        .filter(|t| *t >= window_start && *t <= end)
        .count();
    TrialCount {
        start,
        count,
        over: now <= end && count > r.config.crash_loop_threshold() as usize,
    }
}

fn crash_loop_reason(count: usize, r: &Resolved) -> String {
    format!(
        "crash loop: {count} kubelet restarts within the {} trial period (crashLoopThreshold {})",
        humantime::format_duration(r.config.config_trial_duration()),
        r.config.crash_loop_threshold()
    )
}

/// Called by the holder when its kubelet exited without being asked to.
/// Records the restart against every config on trial (an assigned config,
/// a `--config-dir` drop-in set); when more than crashLoopThreshold
/// restarts fall in a trial period (counted from the latest of trial start,
/// boot and this holder's start), the config whose trial started last, the
/// newest change, is marked bad and the reason returned. The other trial's
/// count starts again: those crashes were the newer change's.
pub fn on_crash(
    store: &Store,
    r: &Resolved,
    holder_since: SystemTime,
) -> Result<Option<String>, StoreError> {
    if r.on_trial().is_none() && r.drop_ins.is_none() {
        return Ok(None);
    }
    let _guard = store.lock()?;
    let now = SystemTime::now();
    let stamp = now_rfc3339();
    let assigned = match r.on_trial() {
        Some(src) => store.trial()?.filter(|t| &t.source == src),
        None => None,
    };
    let mut record = store.drop_in_record()?;
    let on_trial_id = r.drop_ins_on_trial(&record).map(|d| d.id().to_owned());
    let drop_in_trial = record
        .trial
        .as_mut()
        .filter(|t| Some(&t.id) == on_trial_id.as_ref());
    if assigned.is_none() && drop_in_trial.is_none() {
        return Ok(None);
    }
    let mut assigned_startups = Vec::new();
    let assigned_count = match &assigned {
        Some(trial) => {
            assigned_startups = store.startups()?;
            assigned_startups.push(stamp.clone());
            Some(count_crashes(
                &trial.since,
                &assigned_startups,
                holder_since,
                r,
                now,
            ))
        }
        None => None,
    };
    let drop_in_count = drop_in_trial.map(|trial| {
        trial.startups.push(stamp.clone());
        count_crashes(&trial.since, &trial.startups, holder_since, r, now)
    });
    let blame_drop_ins = match (&assigned_count, &drop_in_count) {
        (Some(a), Some(d)) if a.over && d.over => d.start >= a.start,
        (_, Some(d)) => d.over,
        _ => false,
    };
    if blame_drop_ins {
        let count = drop_in_count.map_or(0, |d| d.count);
        let reason = crash_loop_reason(count, r);
        if let Some(id) = on_trial_id {
            warn!(drop_ins = %id, %reason, "marking the --config-dir drop-ins bad and going back to the last-known-good set");
            record.mark_bad(&id, &reason, &stamp);
        }
        record.trial = None;
        store.set_drop_in_record(&record)?;
        if assigned.is_some() {
            store.set_startups(&[])?;
        }
        return Ok(Some(reason));
    }
    if let (Some(src), Some(count)) = (r.on_trial(), &assigned_count) {
        if count.over {
            let reason = crash_loop_reason(count.count, r);
            warn!(source = %src, %reason, "marking the assigned config bad and rolling back to last-known-good");
            store.mark_bad(src, &reason, &stamp)?;
            store.set_startups(&[])?;
            store.set_trial(None)?;
            if let Some(trial) = record.trial.as_mut() {
                trial.startups.clear();
            }
            store.set_drop_in_record(&record)?;
            return Ok(Some(reason));
        }
    }
    if assigned.is_some() {
        store.set_startups(&assigned_startups)?;
    }
    if drop_in_count.is_some() {
        store.set_drop_in_record(&record)?;
    }
    Ok(None)
}

/// Called by the holder while its kubelet runs: an assigned config, and a
/// `--config-dir` drop-in set, that survived its trial period becomes
/// last-known-good. Returns whether anything was promoted.
pub fn maybe_promote(store: &Store, r: &Resolved) -> Result<bool, StoreError> {
    let assigned = promote_assigned(store, r)?;
    let drop_ins = promote_drop_ins(store, r)?;
    Ok(assigned || drop_ins)
}

/// When the earliest trial of what `r` runs ends (the assigned config's,
/// the drop-in set's), if one is under way: the holder looks again then.
pub fn trial_ends(store: &Store, r: &Resolved) -> Option<SystemTime> {
    let end = |since: &str| parse_time(since).map(|t| t + r.config.config_trial_duration());
    let assigned = r.on_trial().and_then(|src| {
        let trial = store.trial().ok().flatten()?;
        (&trial.source == src).then(|| end(&trial.since)).flatten()
    });
    let drop_ins = r.drop_ins.as_ref().and_then(|_| {
        let record = store.drop_in_record().ok()?;
        let applied = r.drop_ins_on_trial(&record)?;
        let trial = record.trial.as_ref().filter(|t| t.id == applied.id())?;
        end(&trial.since)
    });
    [assigned, drop_ins].into_iter().flatten().min()
}

fn trial_over(since: &str, r: &Resolved) -> bool {
    parse_time(since)
        .is_some_and(|start| SystemTime::now() >= start + r.config.config_trial_duration())
}

fn promote_assigned(store: &Store, r: &Resolved) -> Result<bool, StoreError> {
    let Some(src) = r.on_trial() else {
        return Ok(false);
    };
    let Some(trial) = store.trial()?.filter(|t| &t.source == src) else {
        return Ok(false);
    };
    if !trial_over(&trial.since, r) {
        return Ok(false);
    }
    let _guard = store.lock()?;
    store.set_last_known_good(Some(src))?;
    store.set_trial(None)?;
    store.set_startups(&[])?;
    info!(source = %src, "assigned config survived its trial period; it is now last-known-good");
    Ok(true)
}

fn promote_drop_ins(store: &Store, r: &Resolved) -> Result<bool, StoreError> {
    if r.drop_ins.is_none() {
        return Ok(false);
    }
    let record = store.drop_in_record()?;
    let Some(applied) = r.drop_ins_on_trial(&record) else {
        return Ok(false);
    };
    let over = record
        .trial
        .as_ref()
        .is_some_and(|t| t.id == applied.id() && trial_over(&t.since, r));
    if !over {
        return Ok(false);
    }
    let _guard = store.lock()?;
    let mut record = store.drop_in_record()?;
    record.last_known_good = Some(applied.set.snapshot.clone());
    record.trial = None;
    store.set_drop_in_record(&record)?;
    info!(drop_ins = %applied.describe(), "--config-dir drop-ins survived their trial period; they are now last-known-good");
    Ok(true)
}
