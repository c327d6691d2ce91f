//! How a rollout looks in a terminal: phase, conditions, a progress bar per batch, the
//! failures; and the revision history.

use std::fmt::Write as _;

use super::super::plan::conditions::{ConditionType, PauseReason};
use kube::api::DynamicObject;
use kube::ResourceExt;

use kp_contract::rollout::{
    DecodeError, KubeletConfigRollout, NodeCounts, Phase, RevisionRecord, RolloutCondition,
    RolloutStatus,
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

/// Whether the phase is an undo's: the pause and the soak of the revision being undone
/// no longer apply (the controller may not have cleared them yet).
fn undoing(phase: Phase) -> bool {
    matches!(phase, Phase::Undoing | Phase::Undone)
}

/// Whether a condition of `type_` with `status` and `reason` is in its happy state (not
/// worth a line): Valid and ConfigFound True; Conflict, Superseded and Paused False;
/// Complete True, or False only because the rollout is under way or being undone. A
/// condition type this build does not know is always shown.
fn happy(type_: &str, status: &str, reason: &str) -> bool {
    let Some(t) = ConditionType::ALL.into_iter().find(|t| t.as_str() == type_) else {
        return false;
    };
    match t {
        ConditionType::Valid | ConditionType::ConfigFound => status == "True",
        ConditionType::Conflict | ConditionType::Superseded | ConditionType::Paused => {
            status == "False"
        }
        ConditionType::Complete => {
            status == "True" || (status == "False" && COMPLETE_UNDER_WAY.contains(&reason))
        }
    }
}

/// The reasons of `Complete=False` that only say the rollout is not finished yet.
const COMPLETE_UNDER_WAY: [&str; 2] = ["InProgress", "Undo"];

/// The conditions not in their happy state, in the status's order; an undo's stale
/// `Paused` is left out.
pub fn problems(st: &RolloutStatus) -> Vec<&RolloutCondition> {
    st.conditions
        .iter()
        .filter(|c| !happy(&c.type_, &c.status, &c.reason))
        .filter(|c| !(undoing(st.phase) && c.type_ == ConditionType::Paused.as_str()))
        .collect()
}

/// `Paused: CanaryFailed (node-a2 ...)` for a condition that is True,
/// `ConfigFound=False: ConfigMissing (...)` otherwise; control characters escaped.
pub fn condition_text(c: &RolloutCondition) -> String {
    let head = if c.status == "True" {
        printable(&c.type_)
    } else {
        format!("{}={}", printable(&c.type_), printable(&c.status))
    };
    format!(
        "{head}: {} ({})",
        printable(&c.reason),
        printable(&c.message)
    )
}

/// `text` with control characters escaped: what the API server holds must not drive the
/// terminal.
pub(super) fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_debug().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// One line for a rollout, as `status --watch` prints it per change when stdout is not
/// a terminal: `rollout r1: Progressing, revision 1, batch 1/2: 2 done, ...; Paused: ...`.
pub fn status_line(r: &KubeletConfigRollout) -> String {
    let name = r.metadata.name.as_deref().unwrap_or("?");
    let st = r.status.clone().unwrap_or_default();
    let mut out = format!("rollout {name}: {}, revision {}", st.phase, st.revision);
    if (st.current_batch as usize) < st.batches.len() && !undoing(st.phase) {
        let _ = write!(out, ", {}", batch_label(&st, st.current_batch as usize));
    }
    let _ = write!(out, ": {}", counts_text(&st.counts));
    if let Some(until) = st.soak_until.as_ref().filter(|_| !undoing(st.phase)) {
        let _ = write!(out, "; soak until {until}");
    }
    for c in problems(&st) {
        let _ = write!(out, "; {}", condition_text(c));
    }
    out
}

/// The status of one rollout, as `kubectl pivot rollout status` prints it.
pub fn status_text(r: &KubeletConfigRollout) -> String {
    let name = r.metadata.name.as_deref().unwrap_or("?");
    let st = r.status.clone().unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(out, "ROLLOUT  {name}");
    let _ = writeln!(out, "CONFIG   {}", r.spec.config.annotation());
    let _ = writeln!(out, "PHASE    {}   revision {}", st.phase, st.revision);
    for c in problems(&st)
        .into_iter()
        .filter(|c| c.type_ != ConditionType::Valid.as_str())
    {
        let _ = writeln!(out, "         {}", condition_text(c));
    }
    if let Some(c) = st
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Valid.as_str() && c.status == "False")
    {
        let _ = writeln!(out, "INVALID  {}", printable(&c.message));
    }
    // The no-fallback gate holds a rollout going forward; an undo has none.
    if let Some(h) = super::super::plan::revision::current(&st).filter(|_| !undoing(st.phase)) {
        let _ = writeln!(out, "GATE     no fallback for {}", no_fallback_text(h));
    }
    if let Some(until) = st.soak_until.as_ref().filter(|_| !undoing(st.phase)) {
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
                printable(&f.message)
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
    let header = [
        "REVISION",
        "CONFIG",
        "RESULT",
        "CHANGED",
        "FAILED",
        "NO-FALLBACK-FOR",
        "STARTED",
        "FINISHED",
    ]
    .map(str::to_string);
    let rows = st.history.iter().map(|h| {
        let current = if h.revision == st.revision { "*" } else { "" };
        [
            format!("{}{current}", h.revision),
            h.config.annotation(),
            h.result.as_deref().unwrap_or("InProgress").to_string(),
            h.changed.to_string(),
            h.failed.to_string(),
            no_fallback_text(h),
            h.started.clone(),
            h.finished.as_deref().unwrap_or("-").to_string(),
        ]
    });
    aligned(std::iter::once(header).chain(rows).collect())
}

/// Columns as kubectl's printer sets them: each as wide as its widest cell, three
/// spaces apart, the last one not padded.
fn aligned<const N: usize>(rows: Vec<[String; N]>) -> String {
    let mut widths = [0; N];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 < N {
                let _ = write!(line, "{cell:<w$}   ");
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
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

#[cfg(test)]
mod tests {
    use super::*;
    use kp_contract::rollout::{ConfigMapKey, RolloutSpec};

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> RolloutCondition {
        RolloutCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: "2026-01-01T00:00:00Z".into(),
            observed_generation: Some(1),
        }
    }

    fn rollout(phase: Phase, conditions: Vec<RolloutCondition>) -> KubeletConfigRollout {
        let spec: RolloutSpec = serde_json::from_value(serde_json::json!({
            "config": ConfigMapKey {
                namespace: "kubelet-config".into(),
                name: "nope".into(),
                key: "kubelet".into(),
            }
        }))
        .expect("a spec");
        let mut r = KubeletConfigRollout::new("ghost", spec);
        r.status = Some(RolloutStatus {
            phase,
            conditions,
            soak_until: Some("2026-01-01T00:10:00Z".into()),
            ..RolloutStatus::default()
        });
        r
    }

    /// `r` at revision 1, started with a no-fallback gate.
    fn at_revision_one(mut r: KubeletConfigRollout) -> KubeletConfigRollout {
        let started = serde_json::from_value(serde_json::json!({
            "revision": 1,
            "config": {"namespace": "kubelet-config", "name": "nope", "key": "kubelet"},
            "started": "2026-01-01T00:00:00Z",
            "noFallbackFor": "10m",
        }))
        .expect("a revision record");
        if let Some(st) = r.status.as_mut() {
            st.revision = 1;
            st.history = vec![started];
        }
        r
    }

    fn healthy() -> Vec<RolloutCondition> {
        vec![
            cond("Valid", "True", "SpecValid", "the spec can be followed"),
            cond("ConfigFound", "True", "Found", "the ConfigMap exists"),
            cond("Conflict", "False", "NoConflict", "-"),
            cond("Superseded", "False", "NotSuperseded", "-"),
            cond("Paused", "False", "Running", "not paused"),
            cond("Complete", "False", "InProgress", "nodes remain"),
        ]
    }

    #[test]
    fn a_false_condition_is_shown_with_its_reason_and_message() {
        let mut conditions = healthy();
        conditions[1] = cond(
            "ConfigFound",
            "False",
            "ConfigMissing",
            "configmaps \"nope\" not found",
        );
        let r = rollout(Phase::Pending, conditions);
        let text = status_text(&r);
        assert!(
            text.contains("ConfigFound=False: ConfigMissing (configmaps \"nope\" not found)"),
            "{text}"
        );
        assert_eq!(problems(r.status.as_ref().unwrap()).len(), 1, "{text}");
        for quiet in ["Running", "InProgress", "NoConflict", "SpecValid"] {
            assert!(!text.contains(quiet), "{quiet} in {text}");
        }
        let line = status_line(&r);
        assert!(
            line.starts_with("rollout ghost: Pending, revision 0: 0 done,"),
            "{line}"
        );
        assert!(
            line.contains("; ConfigFound=False: ConfigMissing ("),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn every_unhappy_state_is_shown_and_unknown_types_always() {
        for (type_, status, reason) in [
            ("Valid", "Unknown", "x"),
            ("Conflict", "True", "OwnedByOther"),
            ("Superseded", "True", "Newer"),
            ("Paused", "True", "CanaryFailed"),
            ("Complete", "False", "NodesFailed"),
            ("Complete", "Unknown", "InProgress"),
            ("SomethingNew", "True", "Whatever"),
        ] {
            assert!(!happy(type_, status, reason), "{type_}={status} {reason}");
        }
        assert!(happy("Complete", "True", "AllNodesDone"));
        assert!(happy("Complete", "False", "Undo"));
    }

    #[test]
    fn an_undo_shows_neither_the_old_pause_nor_the_soak() {
        let mut conditions = healthy();
        conditions[4] = cond("Paused", "True", "CanaryFailed", "node-a2 fell back");
        conditions[5] = cond("Complete", "False", "Undo", "the revision is being undone");
        let paused = at_revision_one(rollout(Phase::Paused, conditions.clone()));
        let text = status_text(&paused);
        assert!(
            text.contains("Paused: CanaryFailed (node-a2 fell back)"),
            "{text}"
        );
        assert!(text.contains("SOAK     until"), "{text}");
        assert!(text.contains("GATE     no fallback for 10m"), "{text}");
        for phase in [Phase::Undoing, Phase::Undone] {
            let r = at_revision_one(rollout(phase, conditions.clone()));
            let text = status_text(&r);
            assert!(!text.contains("CanaryFailed"), "{text}");
            assert!(!text.contains("SOAK"), "{text}");
            assert!(!text.contains("GATE"), "{text}");
            let line = status_line(&r);
            assert!(
                !line.contains("CanaryFailed") && !line.contains("soak"),
                "{line}"
            );
        }
    }

    #[test]
    fn control_characters_from_the_server_are_escaped() {
        let c = cond("Paused", "True", "Manual", "a\u{1b}[2Jb\nc");
        assert_eq!(condition_text(&c), "Paused: Manual (a\\u{1b}[2Jb\\nc)");
    }

    #[test]
    fn history_columns_line_up_whatever_the_cells_widths() {
        let mut r = rollout(Phase::Progressing, vec![]);
        let record = |revision: u32, name: &str, finished: Option<&str>| {
            serde_json::from_value(serde_json::json!({
                "revision": revision,
                "config": {"namespace": "kubelet-config", "name": name, "key": "kubelet"},
                "started": "2026-01-01T00:00:00Z",
                "finished": finished,
                "result": finished.map(|_| "Completed"),
                "changed": 12,
            }))
            .expect("a record")
        };
        let long = "a-config-map-with-a-name-longer-than-forty-characters";
        if let Some(st) = r.status.as_mut() {
            st.revision = 2;
            st.history = vec![
                record(1, "short", Some("2026-01-01T00:05:00Z")),
                record(2, long, None),
            ];
        }
        let text = history_text(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        // Every column starts where its header does, on every line.
        for header in ["CONFIG", "RESULT", "CHANGED", "STARTED"] {
            let at = lines[0].find(header).expect(header);
            for line in &lines[1..] {
                assert!(
                    line[..at].ends_with("   ") && !line[at..].starts_with(' '),
                    "{header} not at {at} in {line:?}\n{text}"
                );
            }
        }
        assert!(lines[2].starts_with("2*   "), "{text}");
        assert!(lines[2].contains(long), "{text}");
    }
}
