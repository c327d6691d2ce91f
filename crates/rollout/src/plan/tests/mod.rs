//! The plan driven directly: a fake fleet of NodeViews, a clock, and the status fed back.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::nodeview::{ConfigCondition, ConfigStatus, Reported};
use kp_contract::rollout::{ConfigMapKey, FailureReason, IntOrPercent, RolloutSpec};

mod owners;
pub(crate) mod undo;

const ZONE: &str = "topology.kubernetes.io/zone";

fn spec() -> RolloutSpec {
    serde_json::from_value(serde_json::json!({
        "config": {"namespace": "kc", "name": "cfg-b"},
        "canary": 1,
        "batch": "50%",
        "maxUnavailable": {"value": 10},
        "healthGates": {"podsReady": false, "configActiveTimeout": "60s", "nodeReadyTimeout": "60s", "noFallbackFor": "0s"},
    }))
    .unwrap()
}

fn node(name: &str, zone: &str) -> NodeView {
    NodeView {
        name: name.into(),
        resource_version: "1".into(),
        labels: BTreeMap::from([(ZONE.to_string(), zone.to_string())]),
        assignment: Some("kc/cfg-a:kubelet".into()),
        status: None,
        condition: None,
        ready: true,
        unschedulable: false,
        record: None,
    }
}

fn reported(name: &str) -> Reported {
    Reported {
        namespace: "kc".into(),
        name: name.into(),
        key: "kubelet".into(),
        uid: format!("uid-{name}"),
    }
}

/// The node applied the touch and reports `cfg` active and healthy.
fn apply(view: &mut NodeView, touch: &Touch) {
    view.assignment = touch.assignment.clone();
    view.record = Some(touch.record.clone());
}

fn healthy(view: &mut NodeView) {
    let cfg = view
        .assignment
        .as_deref()
        .map(|a| a.split(['/', ':']).nth(1).unwrap().to_string());
    view.status = Some(ConfigStatus {
        active: cfg.as_deref().map(reported),
        assigned: cfg.as_deref().map(reported),
        last_known_good: None,
        error: None,
    });
    view.condition = Some(ConfigCondition {
        status: "True".into(),
        reason: "passing all checks".into(),
        message: String::new(),
    });
}

fn fell_back(view: &mut NodeView) {
    view.status = Some(ConfigStatus {
        active: Some(reported("cfg-a")),
        assigned: Some(reported("cfg-b")),
        last_known_good: Some(reported("cfg-a")),
        error: Some("assigned config is known bad (crash loop)".into()),
    });
    view.condition = Some(ConfigCondition {
        status: "False".into(),
        reason: "crash loop".into(),
        message: String::new(),
    });
}

/// A fleet, a rollout and a clock, stepped by hand (the events' tests drive it too).
pub(crate) struct World {
    pub(crate) spec: RolloutSpec,
    pub(crate) status: RolloutStatus,
    nodes: Vec<NodeView>,
    pub(crate) now: SystemTime,
    pub(crate) halted: bool,
    ack: Option<(u32, u32)>,
    /// The ConfigMap's payload (the KubeletConfiguration cfg-b).
    payload: String,
}

/// A KubeletConfiguration with `extra` fields.
fn payload(extra: &str) -> String {
    format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{extra}")
}

impl World {
    fn new(n: usize) -> World {
        let zones = ["a", "b", "c"];
        World {
            spec: spec(),
            status: RolloutStatus::default(),
            nodes: (0..n)
                .map(|i| node(&format!("n{i:02}"), zones[i % 3]))
                .collect(),
            now: UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            halted: false,
            ack: None,
            payload: payload("eventBurst: 22\n"),
        }
    }

    /// One decision, fed back into the status; returns the touches (applied to the nodes).
    pub(crate) fn step(&mut self) -> Vec<Touch> {
        let pods = |_: &str| PodsState::Ready;
        let config = if needs_new_revision(&self.spec, &self.status) {
            ConfigLookup::Found {
                uid: "uid-cfg-b".into(),
                trial: nofallback::trial_of(&self.payload),
            }
        } else {
            ConfigLookup::NotNeeded
        };
        let plan = plan(&Inputs {
            name: "r1",
            uid: Some("uid-r1"),
            others: &[],
            supersede: false,
            generation: Some(1),
            spec: &self.spec,
            status: &self.status,
            acknowledged: self.ack,
            nodes: &self.nodes,
            now: self.now,
            halted: self.halted,
            config,
            pods: &pods,
        });
        self.status = plan.status;
        for t in &plan.touches {
            let view = self.nodes.iter_mut().find(|n| n.name == t.node).unwrap();
            apply(view, t);
        }
        plan.touches
    }

    fn names(touches: &[Touch]) -> Vec<String> {
        touches.iter().map(|t| t.node.clone()).collect()
    }

    pub(crate) fn heal_all(&mut self) {
        for n in &mut self.nodes {
            if n.record.is_some() {
                healthy(n);
            }
        }
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeView {
        self.nodes.iter_mut().find(|n| n.name == name).unwrap()
    }

    /// Steps (healing every changed node) until nothing more is touched and the phase is
    /// `phase`; returns every node touched on the way.
    pub(crate) fn run_until(&mut self, phase: Phase) -> Vec<String> {
        let mut touched = Vec::new();
        for _ in 0..100 {
            touched.extend(Self::names(&self.step()));
            self.heal_all();
            if self.status.phase == phase {
                return touched;
            }
        }
        panic!("never reached {phase:?}: {:?}", self.status);
    }
}

#[test]
fn a_revision_is_recorded_before_any_node_is_touched_then_the_canary_goes_alone() {
    let mut w = World::new(9);
    assert!(w.step().is_empty(), "the snapshot is written first");
    assert_eq!(w.status.revision, 1);
    assert!(w.status.has_canary);
    assert_eq!(w.status.batches[0].len(), 1);
    // 8 left in batches of 50% of 9 = 5 (rounded up).
    assert_eq!(
        w.status.batches.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![1, 5, 3]
    );
    let touched = w.step();
    assert_eq!(World::names(&touched), vec![w.status.batches[0][0].clone()]);
    let t = &touched[0];
    assert_eq!(t.assignment.as_deref(), Some("kc/cfg-b:kubelet"));
    assert_eq!(t.record.previous.as_deref(), Some("kc/cfg-a:kubelet"));
    // Not healthy yet: nothing else moves.
    assert!(w.step().is_empty());
    assert_eq!(w.status.counts.in_progress, 1);
    assert_eq!(w.status.phase, Phase::Progressing);
}

#[test]
fn batches_spread_across_zones_and_the_rollout_completes_touching_each_node_once() {
    let mut w = World::new(9);
    let touched = w.run_until(Phase::Completed);
    let mut sorted = touched.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 9, "every node once: {touched:?}");
    assert_eq!(touched.len(), 9, "no node twice: {touched:?}");
    // The first batch after the canary holds all three zones.
    let zones: std::collections::BTreeSet<_> = w.status.batches[1]
        .iter()
        .map(|n| w.nodes.iter().find(|v| &v.name == n).unwrap().labels[ZONE].clone())
        .collect();
    assert_eq!(zones.len(), 3);
    assert_eq!(w.status.counts.done, 9);
    assert_eq!(w.status.history[0].result.as_deref(), Some("Completed"));
    // Steps after completion touch nothing.
    assert!(w.step().is_empty());
}

#[test]
fn a_canary_fallback_pauses_before_the_first_batch() {
    let mut w = World::new(6);
    w.step();
    let canary = World::names(&w.step())[0].clone();
    fell_back(w.node_mut(&canary));
    assert!(w.step().is_empty());
    assert_eq!(w.status.phase, Phase::Paused);
    assert_eq!(w.status.failures[0].reason, FailureReason::Fallback);
    let paused = w
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Paused")
        .unwrap();
    assert_eq!(paused.reason, "CanaryFailed");
    assert!(paused.message.contains("Fallback"), "{}", paused.message);
    assert_eq!(w.status.current_batch, 0);
    for _ in 0..3 {
        assert!(w.step().is_empty(), "stays paused");
    }
}

#[test]
fn a_gate_timeout_counts_toward_max_failures_and_resume_acknowledges() {
    let mut w = World::new(7);
    w.spec.canary = 0;
    w.spec.batch = IntOrPercent::Int(3);
    w.spec.max_failures = 1;
    w.step();
    let first = World::names(&w.step());
    assert_eq!(first.len(), 3);
    // Two of them never report; one is healthy.
    healthy(w.node_mut(&first[0]));
    w.now += Duration::from_secs(61);
    assert!(w.step().is_empty());
    assert_eq!(w.status.failures.len(), 2);
    assert!(w
        .status
        .failures
        .iter()
        .all(|f| f.reason == FailureReason::ConfigNotActive));
    assert_eq!(w.status.phase, Phase::Paused);
    assert_eq!(
        w.status
            .conditions
            .iter()
            .find(|c| c.type_ == "Paused")
            .unwrap()
            .reason,
        "MaxFailuresExceeded"
    );
    // Resume: the operator acknowledged both; the next batch goes.
    w.ack = Some((1, 2));
    let next = World::names(&w.step());
    let next = if next.is_empty() {
        World::names(&w.step())
    } else {
        next
    };
    assert_eq!(next.len(), 3, "{:?}", w.status);
    assert!(
        next.iter().all(|n| !first.contains(n)),
        "failed nodes are not touched again"
    );
    assert_eq!(w.status.acknowledged_failures, 2);
}

#[test]
fn undo_points_changed_nodes_back_at_their_own_previous_assignment() {
    let mut w = World::new(4);
    w.spec.canary = 0;
    w.spec.batch = IntOrPercent::Int(2);
    // One node ran its local config (no assignment) before.
    w.nodes[3].assignment = None;
    w.run_until(Phase::Completed);
    w.spec.undo = true;
    let back = w.step();
    assert_eq!(back.len(), 4);
    for t in &back {
        assert!(t.record.undone);
        assert_eq!(t.assignment, t.record.previous);
    }
    assert_eq!(back.iter().filter(|t| t.assignment.is_none()).count(), 1);
    assert_eq!(w.status.phase, Phase::Undoing);
    w.heal_all();
    assert!(w.step().is_empty());
    assert_eq!(w.status.phase, Phase::Undone);
    assert_eq!(w.status.history[0].result.as_deref(), Some("Undone"));
    assert!(w.step().is_empty(), "undone nodes are not touched again");
}

#[test]
fn a_node_that_joins_converges_and_a_node_that_leaves_is_dropped() {
    let mut w = World::new(4);
    w.run_until(Phase::Completed);
    let mut late = node("n99", "b");
    late.assignment = None;
    w.nodes.push(late);
    let touched = w.run_until(Phase::Completed);
    assert_eq!(touched, vec!["n99".to_string()]);
    assert_eq!(w.status.counts.total, 5);
    w.nodes.retain(|n| n.name != "n00");
    w.step();
    assert_eq!(w.status.counts.total, 4);
    assert!(w.status.batches.iter().flatten().all(|n| n != "n00"));
}

#[test]
fn max_unavailable_per_zone_bounds_each_wave() {
    let mut w = World::new(9);
    w.spec.canary = 0;
    w.spec.batch = IntOrPercent::Int(9);
    w.spec.max_unavailable.value = IntOrPercent::Int(1);
    w.step();
    let first = World::names(&w.step());
    assert_eq!(first.len(), 3, "one per zone: {first:?}");
    // A node already NotReady in zone a uses that zone's room.
    w.heal_all();
    let notready = w
        .nodes
        .iter()
        .find(|n| n.labels[ZONE] == "a" && n.record.is_none())
        .unwrap()
        .name
        .clone();
    w.node_mut(&notready).ready = false;
    let second = World::names(&w.step());
    assert!(
        second.iter().any(|n| n == &notready) || second.len() == 2,
        "{second:?}"
    );
}

#[test]
fn global_stop_and_windows_hold_every_change() {
    let mut w = World::new(3);
    w.step();
    w.halted = true;
    assert!(w.step().is_empty());
    assert_eq!(w.status.phase, Phase::Halted);
    w.halted = false;
    // A window that is closed now (opens in an hour).
    let secs = w.now.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let hour = (secs / 3600 + 1) % 24;
    w.spec.maintenance_windows = vec![kp_contract::rollout::MaintenanceWindow {
        days: vec![],
        start: format!("{hour:02}:00"),
        duration: "30m".into(),
    }];
    assert!(w.step().is_empty());
    assert_eq!(w.status.phase, Phase::Waiting);
    w.now += Duration::from_secs(3600);
    assert_eq!(w.step().len(), 1, "the window opened");
}

#[test]
fn an_invalid_spec_touches_nothing_and_says_which_field() {
    let mut w = World::new(3);
    w.spec.soak = "soon".into();
    assert!(w.step().is_empty());
    assert_eq!(w.status.phase, Phase::Invalid);
    let valid = w
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Valid")
        .unwrap();
    assert!(valid.message.starts_with("soak: "), "{}", valid.message);
}

#[test]
fn soak_waits_between_batches() {
    let mut w = World::new(3);
    w.spec.soak = "5m".into();
    w.step();
    w.step();
    w.heal_all();
    assert!(w.step().is_empty());
    assert_eq!(w.status.phase, Phase::Soaking);
    assert!(w.step().is_empty(), "still soaking");
    w.now += Duration::from_secs(301);
    w.step();
    assert_eq!(w.status.current_batch, 1);
    assert_eq!(w.step().len(), 2);
}

#[test]
fn a_new_config_starts_a_new_revision_and_records_history() {
    let mut w = World::new(3);
    w.run_until(Phase::Completed);
    w.spec.config = ConfigMapKey {
        namespace: "kc".into(),
        name: "cfg-c".into(),
        key: "kubelet".into(),
    };
    w.step();
    assert_eq!(w.status.revision, 2);
    let touched = w.step();
    assert_eq!(
        touched[0].record.previous.as_deref(),
        Some("kc/cfg-b:kubelet")
    );
    assert_eq!(w.status.history.len(), 2);
}

/// Issue 22 item 8: without `noFallbackFor`, a node counts as done only once the config's
/// own `configTrialDuration` has passed since it was changed; the revision records it.
#[test]
fn by_default_a_node_is_done_only_after_the_configs_trial() {
    let mut w = World::new(3);
    w.spec.health_gates.no_fallback_for = None;
    w.payload = payload("configTrialDuration: 45s\n");
    assert!(w.step().is_empty(), "the snapshot is written first");
    let rec = w.status.history.last().cloned().expect("a revision");
    assert_eq!(rec.no_fallback_for.as_deref(), Some("45s"));
    assert_eq!(
        rec.no_fallback_source,
        Some(kp_contract::rollout::NoFallbackSource::ConfigTrialDuration)
    );
    let canary = World::names(&w.step());
    assert_eq!(canary.len(), 1);
    w.heal_all();
    // Active and Ready at once, but the trial runs for 45 s from the change.
    for _ in 0..44 {
        w.now += Duration::from_secs(1);
        assert!(w.step().is_empty());
        assert_eq!(w.status.counts.done, 0, "{:?}", w.status.counts);
        assert_eq!(w.status.current_batch, 0);
    }
    w.now += Duration::from_secs(1);
    w.step();
    assert_eq!(w.status.counts.done, 1);
    assert_eq!(w.status.current_batch, 1, "the next batch starts");
}

#[test]
fn a_config_without_a_trial_gets_the_default_trial_and_an_explicit_value_wins() {
    let mut w = World::new(3);
    w.spec.health_gates.no_fallback_for = None;
    w.step();
    let rec = w.status.history.last().cloned().expect("a revision");
    assert_eq!(rec.no_fallback_for.as_deref(), Some("10m"));
    assert_eq!(
        rec.no_fallback_source,
        Some(kp_contract::rollout::NoFallbackSource::Default)
    );
    w.step();
    w.heal_all();
    w.now += Duration::from_secs(300);
    w.step();
    assert_eq!(w.status.counts.done, 0);
    // The operator shortens it mid-revision: the node is done, the record says so.
    w.spec.health_gates.no_fallback_for = Some("1m".into());
    w.step();
    assert_eq!(w.status.counts.done, 1);
    let rec = w.status.history.last().cloned().expect("a revision");
    assert_eq!(rec.no_fallback_for.as_deref(), Some("1m"));
    assert_eq!(
        rec.no_fallback_source,
        Some(kp_contract::rollout::NoFallbackSource::Spec)
    );
}

#[test]
fn a_malformed_trial_in_the_payload_holds_the_revision_with_a_condition() {
    let mut w = World::new(3);
    w.spec.health_gates.no_fallback_for = None;
    w.payload = payload("configTrialDuration: soon\n");
    assert!(w.step().is_empty());
    assert_eq!(w.status.revision, 0, "no revision started");
    let c = w
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "ConfigFound")
        .cloned()
        .expect("a ConfigFound condition");
    assert_eq!(c.status, "False");
    assert_eq!(c.reason, "TrialDurationUnreadable");
    assert!(c.message.contains("configTrialDuration"), "{}", c.message);
    assert!(
        c.message.contains("set healthGates.noFallbackFor"),
        "{}",
        c.message
    );
    // An explicit value does not need the payload.
    w.spec.health_gates.no_fallback_for = Some("0s".into());
    w.step();
    assert_eq!(w.status.revision, 1);
    assert_eq!(World::names(&w.step()).len(), 1);
}

#[test]
fn every_condition_carries_the_generation_it_was_decided_on() {
    let mut w = World::new(6);
    w.run_until(Phase::Completed);
    let seen: Vec<&str> = w
        .status
        .conditions
        .iter()
        .map(|c| c.type_.as_str())
        .collect();
    assert!(!seen.is_empty());
    for c in &w.status.conditions {
        assert_eq!(c.observed_generation, Some(1), "{c:?}");
        assert!(
            ConditionType::ALL.iter().any(|t| t.as_str() == c.type_),
            "{} is not a ConditionType",
            c.type_
        );
    }
}

#[test]
fn the_crd_names_exactly_the_conditions_the_controller_sets() {
    let crd = serde_json::to_value(kp_contract::rollout::crd().unwrap()).unwrap();
    let described = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ["properties"]["conditions"]["items"]["description"]
        .as_str()
        .unwrap()
        .to_string();
    for t in ConditionType::ALL {
        assert!(
            described.contains(&format!("`{}`", t.as_str())),
            "{described}"
        );
    }
    let named = described.matches('`').count() / 2;
    assert_eq!(named, ConditionType::ALL.len(), "{described}");
    let item = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ["properties"]["conditions"]["items"]["properties"];
    assert!(item["observedGeneration"].is_object(), "{item}");
}

/// Issue 34: set-based requirements written by hand (kubectl apply) are checked as the
/// API server checks a LabelSelector's; a bad one makes the spec invalid with its index.
#[test]
fn selector_expressions_of_the_wrong_shape_make_the_spec_invalid() {
    use kp_contract::rollout::{SelectorOperator, SelectorRequirement};
    let mut s = spec();
    s.node_selector_expressions = vec![
        SelectorRequirement::new("gpu", SelectorOperator::Exists, &[]),
        SelectorRequirement::new("pool", SelectorOperator::In, &[]),
    ];
    let err = Settings::of(&s).unwrap_err().to_string();
    assert_eq!(
        err,
        "nodeSelectorExpressions[1]: pool: values must be non-empty when operator is In or NotIn"
    );
    s.node_selector_expressions = vec![SelectorRequirement::new(
        "-bad",
        SelectorOperator::DoesNotExist,
        &[],
    )];
    let err = Settings::of(&s).unwrap_err().to_string();
    assert!(
        err.starts_with("nodeSelectorExpressions[0]: key \"-bad\": "),
        "{err}"
    );
    s.node_selector_expressions = vec![SelectorRequirement::new(
        "pool",
        SelectorOperator::NotIn,
        &["a b"],
    )];
    assert!(Settings::of(&s).is_err());
    s.node_selector_expressions = vec![SelectorRequirement::new(
        "pool",
        SelectorOperator::NotIn,
        &["a"],
    )];
    assert!(Settings::of(&s).is_ok());
}
