//! Crash consistency of the checkpoint store (invariant I4): SIGKILL the real
//! `kubelet-pivot checkpoint assign` at random points while it writes a
//! checkpoint and meta/assigned, then check that the store loads to either
//! the old or the new state, never a corrupt or half-written one.
//!
//! CI runs CRASH_ITERATIONS (default 200); for a long run:
//! `CRASH_ITERATIONS=2000 cargo test --release --test it crash_consistency:: -- --nocapture`

use crate::support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kp_node::config::store::Store;
use rand::{Rng, SeedableRng};

fn payload(i: usize) -> String {
    // Big enough that writing and fsyncing it takes a while.
    let filler = "x".repeat(64 * 1024);
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: {}\nproviderID: {filler}\n",
        100 + i
    )
}

#[test]
fn store_survives_sigkill_at_any_point() {
    let iterations: usize = std::env::var("CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    println!(
        "crash consistency: {iterations} iterations, seed {seed} (CRASH_SEED={seed} to reproduce)"
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let store_dir = dir.path().join("store");
    // `checkpoint` creates no store: a supervisor would have made it (0700).
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&store_dir)
        .expect("store dir");
    let payload_dir = dir.path().join("payloads");
    std::fs::create_dir_all(&payload_dir).expect("payload dir");

    // Each payload i is assigned under UID "u{i}": the expected content of
    // every UID is known.
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    let mut previous: Option<String> = None;
    let (mut killed_mid_way, mut completed) = (0usize, 0usize);
    let started = Instant::now();
    for i in 0..iterations {
        let body = payload(i);
        let file = payload_dir.join(format!("p{i}.yaml"));
        std::fs::write(&file, &body).expect("write payload");
        let uid = format!("u{i}");
        expected.insert(uid.clone(), body);
        let mut child = Command::new(support::pivot_bin())
            .args(["checkpoint", "assign"])
            .arg(&file)
            .args(["--uid", &uid, "--dynamic-config-dir"])
            .arg(&store_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn assign");
        let delay = Duration::from_micros(rng.gen_range(0..25_000));
        std::thread::sleep(delay); // the random kill point, not synchronisation
        let _ = child.kill();
        let status = child.wait().expect("wait");
        if status.success() {
            completed += 1;
        } else {
            killed_mid_way += 1;
        }

        // The store must load: assigned is the old or the new source, and
        // its checkpoint is complete and exactly what was written.
        let store = Store::open_read_only(&store_dir);
        let assigned = store.assigned().unwrap_or_else(|e| {
            panic!("iteration {i} (seed {seed}): meta/assigned does not load: {e}")
        });
        let now = assigned.as_ref().map(|a| a.uid.clone());
        assert!(
            now == previous || now.as_deref() == Some(uid.as_str()),
            "iteration {i} (seed {seed}): assigned is {now:?}, expected the old {previous:?} or the new {uid}"
        );
        if let Some(src) = &assigned {
            let files = store.load_checkpoint(src).unwrap_or_else(|e| {
                panic!("iteration {i} (seed {seed}): assigned checkpoint does not load: {e}")
            });
            assert_eq!(
                files
                    .get("kubelet")
                    .map(|b| String::from_utf8_lossy(b).into_owned()),
                expected.get(&src.uid).cloned(),
                "iteration {i} (seed {seed}): checkpoint {} is not what was written",
                src.uid
            );
        }
        // Every complete checkpoint on disk is intact too.
        for (u, rv) in store.list_checkpoints() {
            let src = kp_node::config::store::ConfigSource {
                namespace: "local".into(),
                name: "local".into(),
                uid: u.clone(),
                resource_version: rv,
                kubelet_config_key: "kubelet".into(),
            };
            let files = store.load_checkpoint(&src).expect("checkpoint loads");
            assert_eq!(
                files
                    .get("kubelet")
                    .map(|b| String::from_utf8_lossy(b).into_owned()),
                expected.get(&u).cloned(),
                "iteration {i} (seed {seed}): checkpoint {u} is torn"
            );
        }
        previous = now;
    }
    println!(
        "crash consistency: {iterations} iterations in {:?}: {killed_mid_way} killed before finishing, {completed} completed, store always loaded old or new state",
        started.elapsed()
    );
    assert!(
        killed_mid_way > 0,
        "no iteration was killed mid-way: the test proved nothing"
    );
}
