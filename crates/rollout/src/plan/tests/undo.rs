//! Issue 32 items 4 and 5: undo and resume act at once (the budget a failed node holds),
//! and a finished rollout is final (the global stop, an invalid field; the Events it
//! posts on the way are counted in `events`' tests).

use super::*;

/// 9 nodes in 3 zones (rollout order n00..n08, zones a, b, c in turn), a canary and
/// batches of 3, one node per zone unavailable at a time, and the 10 minutes a node has
/// to show its config active, as by default.
pub(crate) fn world() -> World {
    let mut w = World::new(9);
    w.spec.batch = IntOrPercent::Int(3);
    w.spec.max_unavailable.value = IntOrPercent::Int(1);
    w.spec.health_gates.config_active_timeout = "10m".into();
    w
}

fn paused(st: &RolloutStatus) -> (String, String) {
    st.conditions
        .iter()
        .find(|c| c.type_ == "Paused")
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_default()
}

/// The node reports its (reverted) assignment active and healthy.
fn heal(w: &mut World, name: &str) {
    healthy(w.node_mut(name));
}

/// Steps until the canary of `w` failed (it falls back as soon as it is changed).
fn canary_fails(w: &mut World) -> String {
    w.step();
    let canary = World::names(&w.step());
    assert_eq!(canary.len(), 1);
    fell_back(w.node_mut(&canary[0]));
    assert!(w.step().is_empty());
    assert_eq!(w.status.phase, Phase::Paused);
    assert_eq!(paused(&w.status), ("True".into(), "CanaryFailed".into()));
    canary[0].clone()
}

#[test]
fn undo_points_a_failed_canary_back_at_once_within_its_zones_budget() {
    let mut w = world();
    let canary = canary_fails(&mut w);
    // The canary, Ready on its last-known-good, holds no budget once its failure is known:
    // the undo reverts it in the same step, not after the 10 minutes of configActiveTimeout.
    w.spec.undo = true;
    let back = w.step();
    assert_eq!(World::names(&back), vec![canary.clone()], "{:?}", w.status);
    assert_eq!(back[0].assignment.as_deref(), Some("kc/cfg-a:kubelet"));
    assert_eq!(w.status.phase, Phase::Undoing);
    // The pause is over once the undo acts.
    assert_eq!(paused(&w.status), ("False".into(), "Undo".into()));
    assert!(w.status.history[0].undo_started.is_some());
    // The counts are the undo's, batch by batch: the canary on its way back, nothing else.
    assert_eq!(w.status.batch_counts[0].in_progress, 1);
    assert!(w.status.batch_counts[1..].iter().all(|c| c.total == 0));
    assert_eq!((w.status.counts.total, w.status.counts.in_progress), (1, 1));
    heal(&mut w, &canary);
    w.now += Duration::from_secs(1);
    assert!(w.step().is_empty());
    assert_eq!(w.status.phase, Phase::Undone);
    assert_eq!(w.status.counts.done, 1);
}

#[test]
fn undo_reverts_a_node_still_on_its_way_without_waiting_for_room() {
    let mut w = world();
    w.step();
    let canary = World::names(&w.step())[0].clone();
    // The canary never reports: it counts as changing, and holds zone a's one place.
    w.now += Duration::from_secs(30);
    assert!(w.step().is_empty());
    w.spec.undo = true;
    let back = w.step();
    assert_eq!(World::names(&back), vec![canary], "{:?}", w.status);
}

#[test]
fn a_healthy_node_reverted_by_undo_still_takes_room() {
    let mut w = world();
    w.spec.canary = 0;
    w.spec.batch = IntOrPercent::Int(9);
    w.run_until(Phase::Completed);
    w.spec.undo = true;
    // Nine healthy nodes, one place per zone: three at a time.
    assert_eq!(w.step().len(), 3);
    assert!(w.step().is_empty(), "the first three are on their way");
    w.heal_all();
    w.now += Duration::from_secs(1);
    assert_eq!(w.step().len(), 3);
}

#[test]
fn undo_drops_the_soak_and_the_pause() {
    let mut w = world();
    w.spec.soak = "10m".into();
    w.spec.paused = false;
    w.step();
    w.step();
    w.heal_all();
    assert!(w.step().is_empty());
    assert_eq!(w.status.phase, Phase::Soaking);
    assert!(w.status.soak_until.is_some());
    w.spec.undo = true;
    assert_eq!(w.step().len(), 1);
    assert_eq!(w.status.phase, Phase::Undoing);
    assert_eq!(w.status.soak_until, None);
    assert_eq!(paused(&w.status).0, "False");
    // A rollout paused by hand is undone too, and no longer shows the pause.
    let mut w = world();
    w.step();
    w.step();
    w.spec.paused = true;
    w.step();
    assert_eq!(paused(&w.status), ("True".into(), "Manual".into()));
    w.spec.undo = true;
    w.step();
    assert_eq!(paused(&w.status), ("False".into(), "Undo".into()));
}

#[test]
fn resume_after_a_fallback_goes_on_with_the_next_batch_at_once() {
    let mut w = world();
    w.step();
    let canary = World::names(&w.step());
    w.heal_all();
    w.step();
    let first = World::names(&w.step());
    assert_eq!(first, vec!["n01", "n02", "n03"], "{:?}", w.status.batches);
    assert_eq!(w.status.batches[2], vec!["n04", "n05", "n06"]);
    // n03 (zone a) falls back; the others are healthy.
    for n in ["n01", "n02"] {
        heal(&mut w, n);
    }
    fell_back(w.node_mut("n03"));
    w.now += Duration::from_secs(1);
    assert!(w.step().is_empty());
    assert_eq!(paused(&w.status), ("True".into(), "Fallback".into()));
    // Resume: n03, Ready on its last-known-good, holds no place of zone a any more, so
    // the whole next batch goes (n06 is in zone a), long before configActiveTimeout.
    w.ack = Some((1, 1));
    let mut next = World::names(&w.step());
    if next.is_empty() {
        next = World::names(&w.step());
    }
    assert_eq!(next, vec!["n04", "n05", "n06"], "{:?}", w.status);
    assert_eq!(canary.len(), 1);
}

#[test]
fn a_fallen_back_node_that_is_not_ready_still_holds_its_place() {
    let mut w = world();
    w.spec.canary = 0;
    w.step();
    assert_eq!(World::names(&w.step()), vec!["n00", "n01", "n02"]);
    for n in ["n01", "n02"] {
        heal(&mut w, n);
    }
    fell_back(w.node_mut("n00"));
    w.node_mut("n00").ready = false;
    w.step();
    w.ack = Some((1, 1));
    w.step();
    let next = World::names(&w.step());
    assert!(
        !next.contains(&"n03".to_string()),
        "zone a is full: {next:?}"
    );
}

#[test]
fn the_global_stop_halts_running_and_paused_rollouts_only() {
    // Running: halted.
    let mut w = world();
    w.step();
    w.halted = true;
    assert!(w.step().is_empty());
    assert_eq!(w.status.phase, Phase::Halted);
    // Paused by hand: halted too.
    w.halted = false;
    w.spec.paused = true;
    w.step();
    assert_eq!(w.status.phase, Phase::Paused);
    w.halted = true;
    w.step();
    assert_eq!(w.status.phase, Phase::Halted);
    // Completed, CompletedWithFailures and Undone keep their phase.
    let mut w = world();
    w.run_until(Phase::Completed);
    let before = w.status.clone();
    w.halted = true;
    assert!(w.step().is_empty());
    assert_eq!(w.status, before, "nothing of the status changes");
    w.halted = false;
    w.spec.undo = true;
    w.run_until(Phase::Undone);
    let before = w.status.clone();
    w.halted = true;
    assert!(w.step().is_empty());
    assert_eq!(w.status, before);
    let mut w = world();
    canary_fails(&mut w);
    w.ack = Some((1, 1));
    for _ in 0..20 {
        w.step();
        for n in w.nodes.clone().iter().filter(|n| n.record.is_some()) {
            if n.name != w.status.batches[0][0] {
                heal(&mut w, &n.name);
            }
        }
    }
    assert_eq!(w.status.phase, Phase::CompletedWithFailures);
    w.halted = true;
    w.step();
    assert_eq!(w.status.phase, Phase::CompletedWithFailures);
    // A node that joins a finished rollout has work to do: the stop holds it.
    let mut late = node("n99", "b");
    late.assignment = None;
    w.nodes.push(late);
    w.step();
    assert_eq!(w.status.phase, Phase::Halted);
}
