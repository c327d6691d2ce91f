//! Every arm of the disruption flow, without a store, a task or a clock.

use super::*;
use crate::config::store::{BlockReason, BlockedPods, DrainFailure};
use kp_kubelet_config::disruption::FieldChange;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

fn target(hash: &str) -> Target {
    Target {
        hash: hash.into(),
        source: None,
    }
}

fn change(class: Class) -> Change {
    Change {
        fields: vec![
            FieldChange {
                field: "maxPods".into(),
                class,
                state_file: None,
                reason: "test".into(),
            },
            FieldChange {
                field: "eventRecordQPS".into(),
                class: Class::InPlace,
                state_file: None,
                reason: "test".into(),
            },
        ],
    }
}

/// A record of a drain for `hash` in `phase`.
fn record(hash: &str, phase: DrainPhase) -> DisruptionRecord {
    DisruptionRecord {
        target_hash: hash.into(),
        hash_algorithm: HASH_ALGORITHM.into(),
        target: None,
        class: Class::Allocatable,
        action: Action::Drain,
        fields: vec!["maxPods".into()],
        phase,
        cordoned_by_us: false,
        since: rfc3339(at(0)),
        attempts: 1,
        retry_at: None,
        waiting_for: String::new(),
        last_error: None,
        blocked: Vec::new(),
        failure: None,
    }
}

/// The decision for `change` to "new" at `at(100)`.
fn on_change(
    change: &Change,
    record: Option<&DisruptionRecord>,
    task_running: bool,
    api: bool,
) -> Decision {
    let (t, p) = (target("new"), Policy::defaults());
    let inputs = Inputs {
        wanted: Wanted::Changed {
            target: &t,
            change,
            policy: &p,
        },
        record,
        task_running,
        api,
    };
    decide(&inputs, at(100))
}

/// The decision for a change of `class`, with an API server.
fn changed(class: Class, record: Option<&DisruptionRecord>, task_running: bool) -> Decision {
    on_change(&change(class), record, task_running, true)
}

fn reached(record: Option<&DisruptionRecord>, task_running: bool) -> Decision {
    let inputs = Inputs {
        wanted: Wanted::Reached,
        record,
        task_running,
        api: true,
    };
    decide(&inputs, at(100))
}

#[test]
fn a_change_without_class_restarts() {
    assert_eq!(
        on_change(&Change::default(), None, true, true),
        Decision::Restart { classified: false }
    );
}

#[test]
fn an_in_place_change_restarts() {
    assert_eq!(
        changed(Class::InPlace, None, false),
        Decision::Restart { classified: true }
    );
}

#[test]
fn a_drain_without_an_api_server_is_a_restart() {
    assert_eq!(
        on_change(&change(Class::Allocatable), None, false, false),
        Decision::Restart { classified: true }
    );
}

#[test]
fn a_node_replacing_change_is_held() {
    let Decision::Hold { held, uncordon } = changed(Class::NodeReplacing, None, false) else {
        panic!("held")
    };
    assert_eq!(uncordon, None);
    assert_eq!(held.phase, DrainPhase::Held);
    assert_eq!(held.action, Action::Hold);
    assert_eq!(held.class, Class::NodeReplacing);
    assert_eq!(held.target_hash, "new");
    assert_eq!(held.fields, vec!["maxPods".to_string()]);
    assert_eq!(held.since, rfc3339(at(100)));
    assert_eq!(held.attempts, 0);
    assert!(held.waiting_for.starts_with("a new node"));
}

#[test]
fn a_held_change_stays_held() {
    let mut r = record("new", DrainPhase::Held);
    r.action = Action::Hold;
    assert_eq!(
        changed(Class::NodeReplacing, Some(&r), true),
        Decision::StillHeld(r.clone())
    );
    // Held for another target: held anew.
    r.target_hash = "old".into();
    assert!(matches!(
        changed(Class::NodeReplacing, Some(&r), false),
        Decision::Hold { uncordon: None, .. }
    ));
}

#[test]
fn a_hold_after_a_drain_that_cordoned_uncordons_first() {
    let mut r = record("old", DrainPhase::BackingOff);
    r.cordoned_by_us = true;
    let Decision::Hold { held, uncordon } = changed(Class::NodeReplacing, Some(&r), true) else {
        panic!("held")
    };
    assert_eq!(uncordon, Some(Box::new(r)));
    assert_eq!(held.target_hash, "new");
    assert!(!held.cordoned_by_us);
}

#[test]
fn a_running_task_keeps_draining() {
    assert_eq!(changed(Class::Allocatable, None, true), Decision::Draining);
    let r = record("new", DrainPhase::Evicting);
    assert_eq!(
        changed(Class::Allocatable, Some(&r), true),
        Decision::Draining
    );
}

#[test]
fn a_new_change_starts_a_drain() {
    let Decision::Drain(rec) = changed(Class::Allocatable, None, false) else {
        panic!("drain")
    };
    assert_eq!(rec.phase, DrainPhase::Evicting);
    assert_eq!(rec.action, Action::Drain);
    assert_eq!(rec.class, Class::Allocatable);
    assert_eq!(rec.target_hash, "new");
    assert_eq!(rec.attempts, 0);
    assert!(!rec.cordoned_by_us);
}

#[test]
fn a_backing_off_drain_waits_for_its_retry() {
    let mut r = record("new", DrainPhase::BackingOff);
    r.retry_at = Some(rfc3339(at(101)));
    assert_eq!(
        changed(Class::Allocatable, Some(&r), false),
        Decision::BackingOff(r.clone())
    );
    // Due (or unreadable): drained again, with the count kept.
    for retry_at in [Some(rfc3339(at(100))), Some("soon".into()), None] {
        r.retry_at = retry_at;
        let Decision::Drain(rec) = changed(Class::Allocatable, Some(&r), false) else {
            panic!("drain")
        };
        assert_eq!(rec.phase, DrainPhase::Evicting);
        assert_eq!(rec.attempts, 1);
    }
}

#[test]
fn a_drain_for_another_target_resumes_with_the_new_one() {
    let mut r = record("old", DrainPhase::BackingOff);
    r.retry_at = Some(rfc3339(at(1000)));
    r.cordoned_by_us = true;
    r.class = Class::StateBound;
    r.fields = vec!["cpuManagerPolicy".into()];
    let Decision::Drain(rec) = changed(Class::Allocatable, Some(&r), false) else {
        panic!("drain")
    };
    assert_eq!(rec.target_hash, "new");
    assert_eq!(rec.class, Class::Allocatable);
    assert_eq!(rec.fields, vec!["maxPods".to_string()]);
    // Whether we cordoned, and the attempts so far, are kept.
    assert!(rec.cordoned_by_us);
    assert_eq!(rec.attempts, 1);
    assert_eq!(rec.since, r.since);
}

#[test]
fn an_interrupted_drain_resumes() {
    let mut r = record("new", DrainPhase::Evicting);
    r.cordoned_by_us = true;
    assert_eq!(
        changed(Class::Allocatable, Some(&r), false),
        Decision::Drain(r.clone())
    );
}

#[test]
fn a_drained_change_restarts() {
    for phase in [DrainPhase::Restarting, DrainPhase::HealthGate] {
        let r = record("new", phase);
        assert_eq!(
            changed(Class::Allocatable, Some(&r), false),
            Decision::RestartDrained(r)
        );
    }
}

#[test]
fn reached_without_a_record_is_idle() {
    assert_eq!(reached(None, false), Decision::Idle);
    assert_eq!(reached(None, true), Decision::Idle);
}

#[test]
fn reached_while_a_gate_runs_lets_it_finish() {
    let r = record("new", DrainPhase::HealthGate);
    assert_eq!(reached(Some(&r), true), Decision::Tending(r));
}

#[test]
fn reached_while_evicting_stops_the_drain() {
    // Not cordoned by us yet: nothing to undo.
    let r = record("new", DrainPhase::Evicting);
    assert_eq!(
        reached(Some(&r), true),
        Decision::Forget(DrainPhase::Evicting)
    );
    // Cordoned: gate and uncordon.
    let mut r = record("new", DrainPhase::Evicting);
    r.cordoned_by_us = true;
    assert_eq!(reached(Some(&r), true), Decision::Gate(r));
}

#[test]
fn reached_with_a_change_gone_forgets_it() {
    for phase in [DrainPhase::Held, DrainPhase::BackingOff] {
        let r = record("new", phase);
        assert_eq!(reached(Some(&r), false), Decision::Forget(phase));
    }
}

#[test]
fn reached_after_a_drain_gates() {
    let r = record("new", DrainPhase::Restarting);
    assert_eq!(reached(Some(&r), false), Decision::Gate(r.clone()));
    let mut r = record("new", DrainPhase::BackingOff);
    r.cordoned_by_us = true;
    assert_eq!(reached(Some(&r), false), Decision::Gate(r));
}

#[test]
fn an_attempt_counts_and_forgets_what_blocked_the_last() {
    let mut r = record("new", DrainPhase::Evicting);
    r.blocked = vec![BlockedPods {
        reason: BlockReason::DisruptionBudget,
        pods: 1,
        example: "default/web".into(),
        code: 429,
        message: "budget".into(),
    }];
    let r = attempt(r);
    assert_eq!(r.attempts, 2);
    assert_eq!(r.waiting_for, "cordon");
    assert!(r.blocked.is_empty());
}

#[test]
fn a_drain_that_finished_restarts_the_kubelet() {
    let mut r = record("new", DrainPhase::Evicting);
    r.failure = Some(DrainFailure::Timeout);
    let r = drained(r);
    assert_eq!(r.phase, DrainPhase::Restarting);
    assert_eq!(r.failure, None);
    assert!(r.blocked.is_empty());
}

#[test]
fn a_drain_that_gave_up_backs_off_doubling() {
    let failure = Failure {
        kind: DrainFailure::Forbidden,
        message: "x".repeat(600),
    };
    let retry = Duration::from_secs(10);
    let mut r = record("new", DrainPhase::Evicting);
    for (attempts, wait) in [(1, 10), (2, 20), (3, 40), (6, 320), (9, 320)] {
        r.attempts = attempts;
        let after = gave_up(r.clone(), &failure, retry, at(0));
        assert_eq!(after.phase, DrainPhase::BackingOff);
        assert_eq!(
            after.retry_at,
            Some(rfc3339(at(wait))),
            "attempt {attempts}"
        );
        assert_eq!(after.failure, Some(DrainFailure::Forbidden));
        assert!(after.last_error.as_ref().is_some_and(|e| e.len() <= 512));
        assert!(after.waiting_for.starts_with("next drain in"));
    }
}

#[test]
fn only_a_finished_drain_restarts_a_running_kubelet() {
    assert!(restart_after(Some(super::super::TaskDone::Drained), true));
    assert!(!restart_after(Some(super::super::TaskDone::Drained), false));
    assert!(!restart_after(Some(super::super::TaskDone::GaveUp), true));
    assert!(!restart_after(Some(super::super::TaskDone::Settled), true));
    assert!(!restart_after(None, true));
}

#[test]
fn retry_at_is_read_in_whole_seconds_and_in_milliseconds() {
    let older = parse_retry_at("2026-11-29T03:38:13Z").expect("whole seconds (earlier builds)");
    let newer = parse_retry_at("2026-11-29T03:38:13.609Z").expect("milliseconds");
    assert_eq!(
        newer.duration_since(older).expect("later"),
        Duration::from_millis(609)
    );
    // What this build writes, it reads back to the millisecond.
    let stamp = rfc3339(at(2) + Duration::from_millis(5));
    assert!(stamp.contains('.'), "{stamp}");
    assert_eq!(
        parse_retry_at(&stamp),
        Some(at(2) + Duration::from_millis(5))
    );
    assert!(!due(Some(&stamp), at(2)));
    assert!(due(Some(&stamp), at(3)));
    assert!(due(Some("2026-01-01T00:00:00Z"), at(0)));
    assert!(due(None, at(0)));
}
