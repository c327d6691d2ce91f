//! Several rollouts over the same nodes: who owns which node, and the shared budget.

use super::*;

/// Two rollouts over the same nodes, stepped in turn, each seeing the other as the
/// controller's cache would.
struct Two {
    nodes: Vec<NodeView>,
    rollouts: Vec<(String, String, RolloutSpec, RolloutStatus, bool)>,
    now: SystemTime,
    patches: BTreeMap<String, usize>,
    /// Nodes report a new config active at once.
    heal: bool,
}

impl Two {
    fn new(n: usize) -> Two {
        let w = World::new(n);
        Two {
            nodes: w.nodes,
            rollouts: Vec::new(),
            now: w.now,
            patches: BTreeMap::new(),
            heal: true,
        }
    }

    fn add(&mut self, name: &str, uid: &str, config: &str) {
        let mut spec = spec();
        spec.config.name = config.into();
        self.rollouts.push((
            name.into(),
            uid.into(),
            spec,
            RolloutStatus::default(),
            false,
        ));
    }

    fn others(&self, skip: usize) -> Vec<OtherRollout> {
        self.rollouts
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != skip)
            .map(|(_, (name, uid, _, st, supersedes))| OtherRollout {
                supersedes: *supersedes,
                name: name.clone(),
                uid: Some(uid.clone()),
                started: revision::current(st).and_then(|c| kp_contract::time::parse(&c.started)),
                active: st.phase.owns_its_nodes(),
                targets: st.batches.iter().flatten().cloned().collect(),
            })
            .collect()
    }

    fn step(&mut self, i: usize) {
        self.now += Duration::from_secs(1);
        let others = self.others(i);
        let pods = |_: &str| PodsState::Ready;
        let (name, uid, spec, status, supersede) = &self.rollouts[i];
        let config = if needs_new_revision(spec, status) {
            ConfigLookup::Found {
                uid: format!("uid-{}", spec.config.name),
                trial: nofallback::trial_of(&payload("")),
            }
        } else {
            ConfigLookup::NotNeeded
        };
        let p = plan(&Inputs {
            name,
            uid: Some(uid),
            others: &others,
            supersede: *supersede,
            generation: Some(1),
            spec,
            status,
            acknowledged: None,
            nodes: &self.nodes,
            now: self.now,
            halted: false,
            config,
            pods: &pods,
        });
        self.rollouts[i].3 = p.status;
        for t in &p.touches {
            *self.patches.entry(t.node.clone()).or_default() += 1;
            let view = self.nodes.iter_mut().find(|n| n.name == t.node).unwrap();
            apply(view, t);
            if self.heal {
                healthy(view);
            }
        }
    }

    fn phase(&self, i: usize) -> Phase {
        self.rollouts[i].3.phase
    }

    fn condition(&self, i: usize, kind: &str) -> Option<kp_contract::rollout::RolloutCondition> {
        self.rollouts[i]
            .3
            .conditions
            .iter()
            .find(|c| c.type_ == kind)
            .cloned()
    }
}

#[test]
fn a_finished_rollout_never_takes_nodes_back_from_a_newer_one() {
    let mut t = Two::new(6);
    t.add("r1", "u1", "cfg-b");
    for _ in 0..40 {
        t.step(0);
    }
    assert_eq!(t.phase(0), Phase::Completed);
    t.add("r2", "u2", "cfg-c");
    for _ in 0..40 {
        t.step(1);
        t.step(0);
    }
    assert_eq!(t.phase(1), Phase::Completed);
    assert!(
        t.patches.values().all(|n| *n == 2),
        "each node once by each rollout: {:?}",
        t.patches
    );
    assert!(t
        .nodes
        .iter()
        .all(|n| n.assignment.as_deref() == Some("kc/cfg-c:kubelet")));
    let superseded = t.condition(0, "Superseded").unwrap();
    assert_eq!(superseded.status, "True", "{superseded:?}");
    assert!(superseded.message.contains("r2"), "{superseded:?}");
}

#[test]
fn a_newer_rollout_waits_for_an_older_unfinished_one_and_says_so() {
    let mut t = Two::new(6);
    t.add("r1", "u1", "cfg-b");
    t.rollouts[0].2.paused = true;
    t.step(0);
    t.step(0);
    assert_eq!(t.phase(0), Phase::Paused);
    t.add("r2", "u2", "cfg-c");
    for _ in 0..10 {
        t.step(1);
    }
    assert!(t.patches.is_empty(), "r2 took r1's nodes: {:?}", t.patches);
    let conflict = t.condition(1, "Conflict").unwrap();
    assert_eq!(conflict.status, "True");
    assert!(
        conflict.message.contains("r1") && conflict.message.contains("supersede"),
        "{conflict:?}"
    );
    // Marked to supersede, it takes them; r1 then leaves them alone.
    t.rollouts[1].4 = true;
    t.rollouts[0].2.paused = false;
    for _ in 0..40 {
        t.step(1);
        t.step(0);
    }
    assert_eq!(t.phase(1), Phase::Completed);
    assert!(t
        .nodes
        .iter()
        .all(|n| n.assignment.as_deref() == Some("kc/cfg-c:kubelet")));
    assert!(t.patches.values().all(|n| *n == 1), "{:?}", t.patches);
}

#[test]
fn a_rollout_deleted_and_created_again_changes_the_nodes_again() {
    let mut t = Two::new(3);
    t.add("rx", "old", "cfg-b");
    for _ in 0..30 {
        t.step(0);
    }
    assert_eq!(t.phase(0), Phase::Completed);
    // Deleted, then created again under the same name with another config.
    t.rollouts.clear();
    t.add("rx", "new", "cfg-c");
    for _ in 0..30 {
        t.step(0);
    }
    assert_eq!(t.phase(0), Phase::Completed);
    assert!(t
        .nodes
        .iter()
        .all(|n| n.assignment.as_deref() == Some("kc/cfg-c:kubelet")));
    assert!(t.patches.values().all(|n| *n == 2), "{:?}", t.patches);
}

#[test]
fn the_zone_budget_counts_what_every_rollout_is_changing() {
    // Two pools in the same three zones, one rollout each, at most 1 node per zone unavailable.
    let mut t = Two::new(12);
    t.heal = false;
    for (i, n) in t.nodes.iter_mut().enumerate() {
        let pool = if i < 6 { "a" } else { "b" };
        n.labels.insert("pool".into(), pool.into());
    }
    for (name, uid, pool, cfg) in [("pa", "ua", "a", "cfg-b"), ("pb", "ub", "b", "cfg-c")] {
        t.add(name, uid, cfg);
        let spec = &mut t.rollouts.last_mut().unwrap().2;
        spec.node_selector = BTreeMap::from([("pool".to_string(), pool.to_string())]);
        spec.canary = 0;
        spec.batch = IntOrPercent::Percent("100%".into());
        spec.max_unavailable.value = IntOrPercent::Int(1);
    }
    let changing_per_zone = |t: &Two| {
        let mut per: BTreeMap<String, usize> = BTreeMap::new();
        for n in &t.nodes {
            if n.record.is_some() && n.condition.is_none() {
                *per.entry(n.labels[ZONE].clone()).or_default() += 1;
            }
        }
        per
    };
    for _ in 0..3 {
        t.step(0);
        t.step(1);
        let per = changing_per_zone(&t);
        assert!(per.values().all(|n| *n <= 1), "{per:?}");
    }
    assert_eq!(
        changing_per_zone(&t).len(),
        3,
        "each zone has one node in flight"
    );
    // The nodes of the first wave come back: the next wave may go, still one per zone.
    for n in &mut t.nodes {
        if n.record.is_some() {
            healthy(n);
        }
    }
    for _ in 0..3 {
        t.step(1);
        t.step(0);
        let per = changing_per_zone(&t);
        assert!(per.values().all(|n| *n <= 1), "{per:?}");
    }
}
