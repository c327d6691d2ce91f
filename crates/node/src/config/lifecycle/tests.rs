//! Which config runs, its trial and rollback, with and without
//! `--config-dir` drop-ins.

use super::*;
use std::collections::BTreeMap;

use crate::config::store::test_source as src;

fn checkpoint(store: &Store, s: &ConfigSource, body: &str) {
    let mut files = BTreeMap::new();
    files.insert("kubelet".to_string(), body.as_bytes().to_vec());
    store.save_checkpoint(s, &files).unwrap();
}

/// One more kubelet exit, now: the rollback's reason, if any.
fn crash(store: &Store, r: &Resolved, since: SystemTime) -> Option<String> {
    on_crash(store, r, since, SystemTime::now()).unwrap()
}

const GOOD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 50\ncrashLoopThreshold: 1\nconfigTrialDuration: 10m\n";
const INVALID_HEAD: &str =
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
const INVALID: &str =
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nport: 70000\n";

#[test]
fn no_assignment_runs_local() {
    let d = tempfile::tempdir().unwrap();
    let store = Store::open(d.path()).unwrap();
    let local = LocalConfig::load(None).unwrap();
    let r = resolve(&store, &local, Access::Holder);
    assert_eq!(r.origin, Origin::Local);
    assert!(r.error.is_none());
}

#[test]
fn invalid_assignment_is_marked_bad_and_lkg_runs() {
    let d = tempfile::tempdir().unwrap();
    let store = Store::open(d.path()).unwrap();
    let local = LocalConfig::load(None).unwrap();
    let good = src("good", "1");
    checkpoint(&store, &good, GOOD);
    store.set_last_known_good(Some(&good)).unwrap();
    let bad = src("bad", "1");
    checkpoint(&store, &bad, INVALID);
    store.set_assigned(Some(&bad)).unwrap();
    let r = resolve(&store, &local, Access::Holder);
    assert_eq!(r.origin, Origin::LastKnownGood);
    assert!(matches!(
        r.error,
        Some(ConfigStatusError::ValidateFailed(_))
    ));
    const WORDS: &str =
        "failed to validate config: port (70000) must be between 1 and 65535, inclusive";
    assert_eq!(r.error.as_ref().unwrap().to_string(), WORDS);
    let entry = store.bad_entry(&bad).unwrap().unwrap();
    assert_eq!(
        entry.reason,
        "failed to validate: port (70000) must be between 1 and 65535, inclusive"
    );
    // Second resolve: known bad, not re-validated, the same words.
    let r = resolve(&store, &local, Access::Holder);
    assert!(matches!(r.error, Some(ConfigStatusError::KnownBad(_))));
    assert_eq!(r.error.as_ref().unwrap().to_string(), WORDS);
}

#[test]
fn an_unknown_field_is_refused_in_the_decoders_words() {
    let d = tempfile::tempdir().unwrap();
    let store = Store::open(d.path()).unwrap();
    let local = LocalConfig::load(None).unwrap();
    let bad = src("bad", "1");
    checkpoint(&store, &bad, &format!("{INVALID_HEAD}maxPodz: 3\n"));
    store.set_assigned(Some(&bad)).unwrap();
    for _ in 0..2 {
        let r = resolve(&store, &local, Access::Holder);
        assert_eq!(r.origin, Origin::Local);
        assert_eq!(
            r.error.unwrap().to_string(),
            "failed to load config: unknown field \"maxPodz\""
        );
    }
}

/// Item 6 of issue 32: a config that never reaches a kubelet changes nothing
/// that runs. A good config in its trial keeps running when a refused one is
/// assigned, and its trial goes on to promotion.
#[test]
fn a_refused_assignment_keeps_the_config_on_trial_running_and_its_trial_going() {
    let d = tempfile::tempdir().unwrap();
    let store = Store::open(d.path()).unwrap();
    let local = LocalConfig::load(None).unwrap();
    let lkg = src("lkg", "1");
    checkpoint(&store, &lkg, GOOD);
    store.set_last_known_good(Some(&lkg)).unwrap();
    let good = src("good", "1");
    checkpoint(
        &store,
        &good,
        &format!("{INVALID_HEAD}maxPods: 60\nconfigTrialDuration: 10m\n"),
    );
    store.set_assigned(Some(&good)).unwrap();
    let running = resolve(&store, &local, Access::Holder);
    on_applied(&store, &running).unwrap();
    assert_eq!(running.on_trial(), Some(&good));
    let since = store.trial().unwrap().unwrap().since;

    // Refused (invalid, then unknown field): the config on trial runs on.
    for (uid, body) in [("bad", INVALID), ("typo", "maxPodz: 3\n")] {
        let bad = src(uid, "1");
        checkpoint(&store, &bad, &format!("{INVALID_HEAD}{body}"));
        store.set_assigned(Some(&bad)).unwrap();
        for _ in 0..2 {
            let r = resolve(&store, &local, Access::Holder);
            assert_eq!(r.hash(), running.hash(), "{uid}: {}", r.describe());
            assert_eq!(
                (r.origin, r.source.as_ref()),
                (Origin::Assigned, Some(&good))
            );
            assert_eq!(r.assigned.as_ref(), Some(&bad));
            assert!(r.error.is_some(), "{uid}");
            assert_eq!(r.on_trial(), Some(&good));
            assert!(
                r.describe().starts_with("using previous, on trial"),
                "{}",
                r.describe()
            );
            on_applied(&store, &r).unwrap();
        }
        assert!(store.bad_entry(&bad).unwrap().is_some());
        // The trial clock did not start again.
        let trial = store.trial().unwrap().unwrap();
        assert_eq!(
            (trial.source, trial.since.as_str()),
            (good.clone(), since.as_str())
        );
    }

    // The trial ends: the config on trial is promoted, and still runs.
    let r = resolve(&store, &local, Access::Holder);
    assert!(trial_ends(&store, &r).is_some());
    assert!(!maybe_promote(&store, &r, SystemTime::now()).unwrap());
    let end = SystemTime::now() + Duration::from_secs(601);
    assert!(maybe_promote(&store, &r, end).unwrap());
    assert_eq!(store.last_known_good().unwrap(), Some(good.clone()));
    let r = resolve(&store, &local, Access::Holder);
    assert_eq!(
        (r.origin, r.source.as_ref()),
        (Origin::LastKnownGood, Some(&good))
    );
    assert_eq!(r.hash(), running.hash());
    assert!(r.error.is_some());

    // A crash loop of the config on trial still rolls back (here: to the
    // local config, the refused assignment being no candidate).
    let d = tempfile::tempdir().unwrap();
    let store = Store::open(d.path()).unwrap();
    checkpoint(&store, &good, GOOD);
    store.set_assigned(Some(&good)).unwrap();
    let r = resolve(&store, &local, Access::Holder);
    on_applied(&store, &r).unwrap();
    let bad = src("bad", "1");
    checkpoint(&store, &bad, INVALID);
    store.set_assigned(Some(&bad)).unwrap();
    let r = resolve(&store, &local, Access::Holder);
    assert_eq!(r.source.as_ref(), Some(&good));
    let since = SystemTime::now() - Duration::from_secs(1);
    assert_eq!(crash(&store, &r, since), None);
    assert!(crash(&store, &r, since).unwrap().contains("crash loop"));
    let r = resolve(&store, &local, Access::Holder);
    assert_eq!(r.origin, Origin::Local);
    assert!(store.bad_entry(&good).unwrap().is_some());
}

#[test]
fn read_only_resolve_does_not_write() {
    let d = tempfile::tempdir().unwrap();
    let store = Store::open(d.path()).unwrap();
    let local = LocalConfig::load(None).unwrap();
    let bad = src("bad", "1");
    checkpoint(&store, &bad, "not: [yaml");
    store.set_assigned(Some(&bad)).unwrap();
    let r = resolve(&store, &local, Access::ReadOnly);
    assert_eq!(r.origin, Origin::Local);
    assert!(matches!(r.error, Some(ConfigStatusError::LoadFailed(_))));
    assert!(store.bad_configs().unwrap().is_empty());
}

#[test]
fn crash_loop_marks_bad_then_promotion_path() {
    let d = tempfile::tempdir().unwrap();
    let store = Store::open(d.path()).unwrap();
    let local = LocalConfig::load(None).unwrap();
    let a = src("a", "1");
    checkpoint(&store, &a, GOOD);
    store.set_assigned(Some(&a)).unwrap();
    let r = resolve(&store, &local, Access::Holder);
    assert_eq!(r.on_trial(), Some(&a));
    on_applied(&store, &r).unwrap();
    let since = SystemTime::now() - Duration::from_secs(1);
    // threshold 1: the first restart is allowed, the second is a loop.
    assert_eq!(crash(&store, &r, since), None);
    let reason = crash(&store, &r, since).unwrap();
    assert!(reason.contains("crash loop"), "{reason}");
    let r2 = resolve(&store, &local, Access::Holder);
    assert_eq!(r2.origin, Origin::Local);
    assert!(matches!(r2.error, Some(ConfigStatusError::KnownBad(_))));
    let text = r2.error.unwrap().to_string();
    assert!(
        text.starts_with("assigned config is known bad: crash loop: 2 kubelet restarts"),
        "{text}"
    );
    // Not promoted: trial not over.
    assert!(!maybe_promote(&store, &r, SystemTime::now()).unwrap());
}

// --- --config-dir drop-ins ------------------------------------------

struct Node {
    _dir: tempfile::TempDir,
    store: Store,
    drop_ins: PathBuf,
    local: LocalConfig,
}

fn node(init: &str) -> Node {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let drop_ins = dir.path().join("kubelet.conf.d");
    fs::create_dir(&drop_ins).unwrap();
    fs::set_permissions(&drop_ins, fs::Permissions::from_mode(0o755)).unwrap();
    let init_path = dir.path().join("init.yaml");
    fs::write(&init_path, init).unwrap();
    let local = LocalConfig::load(Some(&init_path))
        .unwrap()
        .with_config_dir(Some(&drop_ins), store.root())
        .unwrap();
    Node {
        _dir: dir,
        store,
        drop_ins,
        local,
    }
}

impl Node {
    fn write(&self, name: &str, body: &str) {
        fs::write(
            self.drop_ins.join(name),
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}\n"
            ),
        )
        .unwrap();
    }
    fn resolve(&self) -> Resolved {
        resolve(&self.store, &self.local, Access::Holder)
    }
    /// Resolves and records it as applied, as the holder does at a start.
    fn apply(&self) -> Resolved {
        let r = self.resolve();
        on_applied(&self.store, &r).unwrap();
        r
    }
}

const INIT: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 50\ncrashLoopThreshold: 1\nconfigTrialDuration: 10m\n";

#[test]
fn drop_ins_are_merged_into_the_config_that_runs() {
    let n = node(INIT);
    n.write("10-pods.conf", "maxPods: 60");
    let r = n.apply();
    assert_eq!(r.config.effective()["maxPods"], 60);
    assert!(r.error.is_none());
    let applied = r.drop_ins.as_ref().unwrap();
    assert_eq!(applied.origin, DropInOrigin::Current);
    assert!(r.describe().contains("10-pods.conf"), "{}", r.describe());
    // The node's first set is its last-known-good: nothing to try.
    let record = n.store.drop_in_record().unwrap();
    assert_eq!(record.last_known_good.unwrap().id, applied.id());
    assert_eq!(record.applied.unwrap().id, applied.id());
    assert!(record.trial.is_none());
    // A change is on trial from its first start.
    n.write("20-more.conf", "maxPods: 61");
    let r = n.apply();
    let record = n.store.drop_in_record().unwrap();
    assert_eq!(record.trial.unwrap().id, r.drop_ins.as_ref().unwrap().id());
    assert_eq!(record.last_known_good.unwrap().id, applied.id());
}

#[test]
fn a_refused_drop_in_change_keeps_the_set_that_ran() {
    let n = node(INIT);
    n.write("10-pods.conf", "maxPods: 60");
    let ran = n.apply();
    // Invalid once merged: refused, the set that ran stays.
    n.write("20-port.conf", "port: 70000");
    let r = n.apply();
    assert_eq!(
        r.error.as_ref().unwrap().to_string(),
        "failed to validate config with --config-dir drop-ins: port (70000) must be between 1 and 65535, inclusive (set by 20-port.conf)"
    );
    assert_eq!(r.hash(), ran.hash());
    assert_eq!(r.drop_ins.as_ref().unwrap().origin, DropInOrigin::Previous);
    // Unparsable: the same, with the load text.
    n.write("20-port.conf", "port: [");
    let r = n.apply();
    assert!(matches!(
        r.error,
        Some(ConfigStatusError::DropInLoadFailed(_))
    ));
    assert_eq!(r.hash(), ran.hash());
    let text = r.error.unwrap().to_string();
    assert!(
        text.starts_with("failed to load --config-dir drop-ins: ") && text.contains("20-port.conf"),
        "{text}"
    );
    // Fixed: it runs.
    n.write("20-port.conf", "port: 10251");
    let r = n.apply();
    assert!(r.error.is_none());
    assert_eq!(r.config.effective()["port"], 10251);
    assert_eq!(r.config.effective()["maxPods"], 60);
}

#[test]
fn a_crash_looping_drop_in_set_goes_back_to_last_known_good() {
    let n = node(INIT);
    n.write("10-pods.conf", "maxPods: 59");
    n.apply();
    // A change whose trial is over becomes last-known-good.
    n.write("10-pods.conf", "maxPods: 60");
    let good = n.apply();
    let mut record = n.store.drop_in_record().unwrap();
    record.trial.as_mut().unwrap().since = "2000-01-01T00:00:00Z".into();
    n.store.set_drop_in_record(&record).unwrap();
    assert!(maybe_promote(&n.store, &good, SystemTime::now()).unwrap());
    let record = n.store.drop_in_record().unwrap();
    assert_eq!(
        record.last_known_good.unwrap().id,
        good.drop_ins.as_ref().unwrap().id()
    );
    assert!(record.trial.is_none());
    // A new set crash-loops: threshold 1, the second exit marks it bad.
    n.write("20-more.conf", "maxPods: 70");
    let bad = n.apply();
    assert_eq!(bad.config.effective()["maxPods"], 70);
    let since = SystemTime::now() - Duration::from_secs(1);
    assert_eq!(crash(&n.store, &bad, since), None);
    let reason = crash(&n.store, &bad, since).unwrap();
    assert!(reason.contains("crash loop"), "{reason}");
    let record = n.store.drop_in_record().unwrap();
    assert!(record.bad.contains_key(bad.drop_ins.as_ref().unwrap().id()));
    assert!(record.trial.is_none());
    // The directory still holds it: last-known-good runs, reported.
    let r = n.apply();
    assert_eq!(r.config.effective()["maxPods"], 60);
    assert_eq!(
        r.drop_ins.as_ref().unwrap().origin,
        DropInOrigin::LastKnownGood
    );
    assert!(matches!(
        r.error,
        Some(ConfigStatusError::DropInKnownBad(_))
    ));
    let text = r.error.as_ref().unwrap().to_string();
    assert!(
        text.starts_with("--config-dir drop-ins are known bad: crash loop: "),
        "{text}"
    );
    // Not on trial, so its exits count against nothing.
    assert_eq!(crash(&n.store, &r, since), None);
    // The assigned config was not blamed.
    assert!(n.store.bad_configs().unwrap().is_empty());
}

#[test]
fn the_newest_change_is_blamed_for_a_crash_loop() {
    let since = SystemTime::now() - Duration::from_secs(1);
    let trial_of = |n: &Node| n.store.drop_in_record().unwrap().trial;
    // A drop-in change, then an assignment: both on trial, the
    // assignment is newer and is blamed.
    let n = node(INIT);
    n.write("10-pods.conf", "maxPods: 60");
    n.apply();
    n.write("20-more.conf", "maxPods: 61");
    n.apply();
    std::thread::sleep(Duration::from_millis(5));
    let a = src("a", "1");
    checkpoint(&n.store, &a, GOOD);
    n.store.set_assigned(Some(&a)).unwrap();
    let r = n.apply();
    assert_eq!(r.on_trial(), Some(&a));
    assert!(trial_of(&n).is_some());
    assert_eq!(crash(&n.store, &r, since), None);
    assert!(crash(&n.store, &r, since).is_some());
    assert!(n.store.bad_entry(&a).unwrap().is_some());
    assert!(n.store.drop_in_record().unwrap().bad.is_empty());
    // The drop-in trial's count starts again.
    assert_eq!(trial_of(&n).unwrap().startups.len(), 0);

    // An assignment, then a drop-in change: the drop-ins are blamed.
    let n = node(INIT);
    n.write("10-pods.conf", "maxPods: 60");
    n.apply();
    checkpoint(&n.store, &a, GOOD);
    n.store.set_assigned(Some(&a)).unwrap();
    n.apply();
    std::thread::sleep(Duration::from_millis(5));
    n.write("20-more.conf", "maxPods: 61");
    let r = n.apply();
    assert_eq!(r.on_trial(), Some(&a));
    assert_eq!(crash(&n.store, &r, since), None);
    assert!(crash(&n.store, &r, since).is_some());
    assert!(n.store.bad_entry(&a).unwrap().is_none());
    let record = n.store.drop_in_record().unwrap();
    assert!(record.bad.contains_key(r.drop_ins.as_ref().unwrap().id()));
    assert!(n.store.startups().unwrap().is_empty());
}

#[test]
fn a_broken_config_dir_at_start_is_refused_unless_earlier_drop_ins_exist() {
    let n = node(INIT);
    n.write("10-bad.conf", "fooBar: 1");
    let local = LocalConfig::load(None).unwrap();
    let err = local
        .clone()
        .with_config_dir(Some(&n.drop_ins), n.store.root())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("10-bad.conf") && err.contains("fooBar"),
        "{err}"
    );
    n.write("10-bad.conf", "port: 70000");
    let err = local
        .clone()
        .with_config_dir(Some(&n.drop_ins), n.store.root())
        .unwrap_err()
        .to_string();
    assert!(err.contains("port"), "{err}");
    let missing = n.drop_ins.join("missing");
    assert!(local
        .clone()
        .with_config_dir(Some(&missing), n.store.root())
        .is_err());
    // Once a set ran, a restart with a broken directory runs that set.
    n.write("10-bad.conf", "maxPods: 70");
    n.apply();
    n.write("10-bad.conf", "port: 70000");
    let started = local
        .with_config_dir(Some(&n.drop_ins), n.store.root())
        .unwrap();
    let r = resolve(&n.store, &started, Access::Holder);
    assert_eq!(r.config.effective()["maxPods"], 70);
    assert!(matches!(
        r.error,
        Some(ConfigStatusError::DropInValidateFailed(_))
    ));
}
