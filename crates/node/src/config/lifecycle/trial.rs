//! The trial of what runs: the stored trial clocks of a new assignment and
//! of a new `--config-dir` drop-in set, crash-loop counting and the
//! rollback it decides, and promotion to last-known-good.

use std::time::SystemTime;

use tracing::{info, warn};

use super::verdict::{self, Inputs, TrialFacts, Verdict};
use super::{boot_time, Resolved};
use crate::config::store::{DropInTrial, EffectiveRecord, Store, StoreError, Trial};
use kp_contract::time::now_rfc3339;
use kp_contract::time::parse as parse_time;
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

fn crash_loop_reason(count: usize, r: &Resolved) -> String {
    format!(
        "crash loop: {count} kubelet restarts within the {} trial period (crashLoopThreshold {})",
        humantime::format_duration(r.config.config_trial_duration()),
        r.config.crash_loop_threshold()
    )
}

/// Called by the holder when its kubelet exited without being asked to, at
/// `now`. Records the restart against every config on trial (an assigned
/// config, a `--config-dir` drop-in set) and carries out the verdict
/// ([`verdict::decide`]): a config that crash-looped in its trial is marked
/// bad and the reason returned; the other trial's count starts again.
pub fn on_crash(
    store: &Store,
    r: &Resolved,
    holder_since: SystemTime,
    now: SystemTime,
) -> Result<Option<String>, StoreError> {
    if r.on_trial().is_none() && r.drop_ins.is_none() {
        return Ok(None);
    }
    let _guard = store.lock()?;
    let stamp = kp_contract::time::rfc3339(now);
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
    if assigned.is_some() {
        assigned_startups = store.startups()?;
        assigned_startups.push(stamp.clone());
    }
    let drop_ins_on_trial = drop_in_trial.is_some();
    if let Some(trial) = drop_in_trial {
        trial.startups.push(stamp.clone());
    }
    let drop_in_facts = record
        .trial
        .as_ref()
        .filter(|_| drop_ins_on_trial)
        .map(|t| TrialFacts {
            since: &t.since,
            startups: &t.startups,
        });
    let inputs = Inputs {
        assigned: assigned.as_ref().map(|t| TrialFacts {
            since: &t.since,
            startups: &assigned_startups,
        }),
        drop_ins: drop_in_facts,
        holder_since,
        boot: boot_time(),
        trial: r.config.config_trial_duration(),
        threshold: r.config.crash_loop_threshold(),
    };
    match verdict::decide(&inputs, now) {
        Verdict::BlameDropIns { count } => {
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
            Ok(Some(reason))
        }
        Verdict::BlameAssigned { count } => {
            let reason = crash_loop_reason(count, r);
            if let Some(src) = r.on_trial() {
                warn!(source = %src, %reason, "marking the assigned config bad and rolling back to last-known-good");
                store.mark_bad(src, &reason, &stamp)?;
            }
            store.set_startups(&[])?;
            store.set_trial(None)?;
            if let Some(trial) = record.trial.as_mut() {
                trial.startups.clear();
            }
            store.set_drop_in_record(&record)?;
            Ok(Some(reason))
        }
        Verdict::Count { assigned, drop_ins } => {
            if assigned.is_some() {
                store.set_startups(&assigned_startups)?;
            }
            if drop_ins.is_some() {
                store.set_drop_in_record(&record)?;
            }
            Ok(None)
        }
    }
}

/// Called by the holder while its kubelet runs: an assigned config, and a
/// `--config-dir` drop-in set, that survived its trial period by `now`
/// becomes last-known-good. Returns whether anything was promoted.
pub fn maybe_promote(store: &Store, r: &Resolved, now: SystemTime) -> Result<bool, StoreError> {
    let assigned = promote_assigned(store, r, now)?;
    let drop_ins = promote_drop_ins(store, r, now)?;
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

fn trial_over(since: &str, r: &Resolved, now: SystemTime) -> bool {
    verdict::over(since, r.config.config_trial_duration(), now)
}

fn promote_assigned(store: &Store, r: &Resolved, now: SystemTime) -> Result<bool, StoreError> {
    let Some(src) = r.on_trial() else {
        return Ok(false);
    };
    let Some(trial) = store.trial()?.filter(|t| &t.source == src) else {
        return Ok(false);
    };
    if !trial_over(&trial.since, r, now) {
        return Ok(false);
    }
    let _guard = store.lock()?;
    store.set_last_known_good(Some(src))?;
    store.set_trial(None)?;
    store.set_startups(&[])?;
    info!(source = %src, "assigned config survived its trial period; it is now last-known-good");
    Ok(true)
}

fn promote_drop_ins(store: &Store, r: &Resolved, now: SystemTime) -> Result<bool, StoreError> {
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
        .is_some_and(|t| t.id == applied.id() && trial_over(&t.since, r, now));
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
