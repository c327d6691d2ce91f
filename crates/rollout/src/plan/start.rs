//! A new revision: the targets snapshot, once the ConfigMap is found.

use std::collections::BTreeMap;
use std::time::Duration;

use super::conditions::{set_condition, ConditionType};
use super::report::set_counts;
use super::{nofallback, revision, ConfigLookup, Decider};
use crate::nodeview::NodeView;
use kp_contract::rollout::{NodeCounts, Phase};

pub(super) fn start_revision(d: &mut Decider, matching: &BTreeMap<&str, &NodeView>) {
    let inp = d.inp;
    match &inp.config {
        ConfigLookup::Found { uid, trial } => {
            let no_fallback = match nofallback::resolve(d.settings.explicit_no_fallback, trial) {
                Ok(no_fallback) => no_fallback,
                Err(err) => {
                    let msg = format!(
                        "cannot start a revision of {}: {err}",
                        inp.spec.config.annotation()
                    );
                    set_condition(
                        &mut d.st,
                        ConditionType::ConfigFound,
                        false,
                        "TrialDurationUnreadable",
                        &msg,
                        &d.now,
                    );
                    d.wake_after(Duration::from_secs(30));
                    return;
                }
            };
            let order = revision::snapshot(matching.values().copied(), &d.settings.topology_key);
            let batch = d.inp.spec.batch.resolve(order.len()).unwrap_or(1).max(1);
            revision::start(
                &mut d.st,
                d.inp.spec,
                order,
                batch,
                uid,
                no_fallback,
                &d.now,
            );
            d.st.phase = Phase::Progressing;
            set_condition(
                &mut d.st,
                ConditionType::ConfigFound,
                true,
                "Found",
                "the ConfigMap exists",
                &d.now,
            );
            let all_pending =
                d.st.batches
                    .iter()
                    .map(|b| NodeCounts {
                        total: b.len() as u32,
                        pending: b.len() as u32,
                        ..NodeCounts::default()
                    })
                    .collect();
            set_counts(&mut d.st, all_pending);
            // The snapshot is written before any node is changed.
            d.wake_after(Duration::ZERO);
        }
        ConfigLookup::Missing(err) => {
            let msg = format!(
                "cannot start a revision of {}: {err}",
                d.inp.spec.config.annotation()
            );
            set_condition(
                &mut d.st,
                ConditionType::ConfigFound,
                false,
                "ConfigMissing",
                &msg,
                &d.now,
            );
            d.wake_after(Duration::from_secs(30));
        }
        ConfigLookup::NotNeeded => d.wake_after(Duration::ZERO),
    }
}
