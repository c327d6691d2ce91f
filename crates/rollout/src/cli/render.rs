//! How a rollout looks in a terminal: phase, conditions, a progress bar per batch, the
//! failures; and the revision history.

use std::fmt::Write as _;

use super::super::plan::conditions::{ConditionType, PauseReason};
use kube::api::DynamicObject;
use kube::ResourceExt;

use kp_contract::rollout::{
    DecodeError, KubeletConfigRollout, NodeCounts, Phase, RevisionRecord, RolloutStatus,
};

/// Width of a progress bar in cells.
const BAR: usize = 30;
/// Failures listed in full (the rest are counted).
const FAILURES_SHOWN: usize = 10;

/// A bar of `BAR` cells: `#` done, `!` failed, `>` in progress, `.` pending.
pub fn bar(c: &NodeCounts) -> String {
    let total = c.total.max(1) as usize;
    let cells = |n: u32| (n as usize * BAR).div_ceil(total).min(BAR);
    let done = cells(c.done);
    let failed = cells(c.failed).min(BAR - done);
    let running = cells(c.in_progress).min(BAR - done - failed);
    let mut s = String::with_capacity(BAR + 2);
    s.push('[');
    s.push_str(&"#".repeat(done));
    s.push_str(&"!".repeat(failed));
    s.push_str(&">".repeat(running));
    s.push_str(&".".repeat(BAR - done - failed - running));
    s.push(']');
    s
}

fn counts_text(c: &NodeCounts) -> String {
    format!(
        "{} done, {} in progress, {} failed, {} pending of {}",
        c.done, c.in_progress, c.failed, c.pending, c.total
    )
}

fn batch_label(st: &RolloutStatus, i: usize) -> String {
    if st.has_canary && i == 0 {
        "canary".to_string()
    } else {
        let regular = st.batches.len() - usize::from(st.has_canary);
        format!("batch {}/{}", i + 1 - usize::from(st.has_canary), regular)
    }
}

/// The status of one rollout, as `kubectl pivot rollout status` prints it.
pub fn status_text(r: &KubeletConfigRollout) -> String {
    let name = r.metadata.name.as_deref().unwrap_or("?");
    let st = r.status.clone().unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(out, "ROLLOUT  {name}");
    let _ = writeln!(out, "CONFIG   {}", r.spec.config.annotation());
    let _ = writeln!(out, "PHASE    {}   revision {}", st.phase, st.revision);
    for c in st
        .conditions
        .iter()
        .filter(|c| c.status == "True" && c.type_ != ConditionType::Valid.as_str())
    {
        let _ = writeln!(out, "         {}: {} ({})", c.type_, c.reason, c.message);
    }
    if let Some(c) = st
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Valid.as_str() && c.status == "False")
    {
        let _ = writeln!(out, "INVALID  {}", c.message);
    }
    if let Some(h) = super::super::plan::revision::current(&st) {
        let _ = writeln!(out, "GATE     no fallback for {}", no_fallback_text(h));
    }
    if let Some(until) = &st.soak_until {
        let _ = writeln!(out, "SOAK     until {until}");
    }
    let _ = writeln!(out, "NODES    {}", counts_text(&st.counts));
    for (i, c) in st.batch_counts.iter().enumerate() {
        let marker = if i as u32 == st.current_batch {
            "*"
        } else {
            " "
        };
        let _ = writeln!(
            out,
            "{marker} {:<12} {} {:>3}/{:<3} done  {} in progress  {} failed",
            batch_label(&st, i),
            bar(c),
            c.done,
            c.total,
            c.in_progress,
            c.failed
        );
    }
    if !st.failures.is_empty() {
        let _ = writeln!(
            out,
            "FAILURES ({}, {} acknowledged)",
            st.failures.len(),
            st.acknowledged_failures
        );
        for f in st.failures.iter().take(FAILURES_SHOWN) {
            let _ = writeln!(
                out,
                "  {} [{}] {}: {}",
                f.node,
                batch_label(&st, f.batch as usize),
                f.reason.as_str(),
                f.message
            );
        }
        if st.failures.len() > FAILURES_SHOWN {
            let _ = writeln!(
                out,
                "  ... and {} more (-o json lists them)",
                st.failures.len() - FAILURES_SHOWN
            );
        }
    }
    out
}

/// A rollout that cannot be read as one (the controller skips it): what is wrong, and
/// what the controller last recorded in its status.
pub fn invalid_text(obj: &DynamicObject, err: &DecodeError) -> String {
    let name = obj.name_any();
    let mut out = String::new();
    let _ = writeln!(out, "ROLLOUT  {name}");
    let config = &obj.data["spec"]["config"];
    if let (Some(ns), Some(cm)) = (config["namespace"].as_str(), config["name"].as_str()) {
        let key = config["key"]
            .as_str()
            .unwrap_or(kp_contract::node_config::DEFAULT_KEY);
        let _ = writeln!(out, "CONFIG   {ns}/{cm}:{key}");
    }
    let _ = writeln!(out, "PHASE    {}", Phase::Invalid);
    let _ = writeln!(out, "INVALID  the object cannot be read: {err}");
    let _ = writeln!(
        out,
        "         the controller skips it until the field is fixed (kubectl edit kcr {name}) or it is deleted"
    );
    out
}

/// The revision history table.
pub fn history_text(r: &KubeletConfigRollout) -> String {
    let st = r.status.clone().unwrap_or_default();
    let mut out = format!(
        "{:<9} {:<40} {:<11} {:>8} {:>7}  {:<28} {:<20} {}\n",
        "REVISION",
        "CONFIG",
        "RESULT",
        "CHANGED",
        "FAILED",
        "NO-FALLBACK-FOR",
        "STARTED",
        "FINISHED"
    );
    for h in &st.history {
        let current = if h.revision == st.revision { "*" } else { " " };
        let _ = writeln!(
            out,
            "{:<9} {:<40} {:<11} {:>8} {:>7}  {:<28} {:<20} {}",
            format!("{}{current}", h.revision),
            h.config.annotation(),
            h.result.as_deref().unwrap_or("InProgress"),
            h.changed,
            h.failed,
            no_fallback_text(h),
            h.started,
            h.finished.as_deref().unwrap_or("-")
        );
    }
    out
}

/// A revision's `noFallbackFor` and its source: `10m (ConfigTrialDuration)`; `-` in a
/// record of an older build.
fn no_fallback_text(h: &RevisionRecord) -> String {
    match (&h.no_fallback_for, h.no_fallback_source) {
        (Some(value), Some(source)) => format!("{value} ({})", source.as_str()),
        (Some(value), None) => value.clone(),
        (None, _) => "-".to_string(),
    }
}

/// Whether a status --watch is over: nothing more will happen without the operator.
pub fn settled(r: &KubeletConfigRollout) -> bool {
    let st = r.status.clone().unwrap_or_default();
    let current =
        r.metadata.generation.is_some() && st.observed_generation == r.metadata.generation;
    current
        && matches!(
            st.phase,
            Phase::Completed
                | Phase::CompletedWithFailures
                | Phase::Undone
                | Phase::Paused
                | Phase::Halted
                | Phase::Invalid
        )
}

/// Exit status of `status`: 3 when the rollout paused because nodes failed, completed
/// with failed nodes, or cannot be followed.
pub fn exit_code(r: &KubeletConfigRollout) -> u8 {
    let st = r.status.clone().unwrap_or_default();
    let failure_pause = st.conditions.iter().any(|c| {
        c.type_ == ConditionType::Paused.as_str()
            && c.status == "True"
            && PauseReason::is_failure(&c.reason)
    });
    if matches!(st.phase, Phase::Invalid | Phase::CompletedWithFailures)
        || (st.phase == Phase::Paused && failure_pause)
    {
        3
    } else {
        0
    }
}
