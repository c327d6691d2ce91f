//! Random faults for one client (by User-Agent), reproducible from the seed, and outages in
//! which requests are counted but not answered.

mod support;

use std::io::Read;

use testkit::{ApiServer, RandomFaults};

const CONTROLLER: &str = "kubelet-pivot/0.1.0 (rollout-controller)";
const CLI: &str = "kubelet-pivot/0.1.0 (cli)";

/// `GET path` with this User-Agent: the status code and the headers (`Name: value`), or
/// None when the connection was closed without an answer.
fn get_as(server: &ApiServer, user_agent: &str, path: &str) -> Option<(u16, Vec<String>)> {
    support::get_as_agent(server, user_agent, path).map(|a| {
        let headers = a.headers.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        (a.code, headers)
    })
}

/// The codes of `n` GETs of node n1 as the controller.
fn codes(server: &ApiServer, n: usize) -> Vec<u16> {
    (0..n)
        .map(|_| {
            get_as(server, CONTROLLER, "/api/v1/nodes/n1")
                .expect("an answer")
                .0
        })
        .collect()
}

fn faults(seed: u64) -> RandomFaults {
    RandomFaults {
        seed,
        per_mille: 300,
        codes: vec![429, 500],
        user_agent: "(rollout-controller)".into(),
    }
}

#[test]
fn random_faults_hit_only_the_client_named_and_follow_the_seed() {
    let server = ApiServer::start();
    server.create_node("n1", [("a", "b")]);
    let spec = faults(2026);
    server.inject_random_faults(spec.clone());
    let mut answered = Vec::new();
    for i in 0..60 {
        // The other client's requests, in between, are neither faulted nor counted.
        if i % 3 == 0 {
            let (code, _) = get_as(&server, CLI, "/api/v1/nodes/n1").expect("an answer");
            assert_eq!(code, 200);
        }
        let (code, headers) = get_as(&server, CONTROLLER, "/api/v1/nodes/n1").expect("an answer");
        if code == 429 {
            assert!(
                headers
                    .iter()
                    .any(|h| h.eq_ignore_ascii_case("Retry-After: 1")),
                "{headers:?}"
            );
        }
        answered.push(code);
    }
    let expected: Vec<u16> = (0..60).map(|n| spec.fault_for(n).unwrap_or(200)).collect();
    assert_eq!(answered, expected, "the faults follow the seed");
    assert!(answered.contains(&429) && answered.contains(&500) && answered.contains(&200));
    let records = server.requests();
    let injected: Vec<u16> = records
        .iter()
        .filter(|r| r.injected)
        .map(|r| r.status)
        .collect();
    assert_eq!(
        injected,
        expected
            .iter()
            .copied()
            .filter(|c| *c != 200)
            .collect::<Vec<_>>()
    );
    assert!(records
        .iter()
        .filter(|r| r.user_agent.as_deref() == Some(CLI))
        .all(|r| !r.injected && r.status == 200));

    // Another server with the same seed gives the same answers; another seed others.
    let again = ApiServer::start();
    again.create_node("n1", [("a", "b")]);
    again.inject_random_faults(spec);
    assert_eq!(codes(&again, 60), expected);
    again.inject_random_faults(faults(7));
    assert_ne!(codes(&again, 60), expected);
    again.stop_random_faults();
    assert_eq!(
        get_as(&again, CONTROLLER, "/api/v1/nodes/n1").map(|a| a.0),
        Some(200)
    );
}

#[test]
fn an_outage_cuts_open_watches_and_leaves_requests_unanswered_until_it_ends() {
    let server = ApiServer::start();
    server.create_node("n1", [("a", "b")]);
    let mut watch = support::watch(&server, "/api/v1/nodes?watch=true");
    let added = support::next_event(&mut watch);
    assert_eq!(added["type"], "ADDED");
    server.begin_outage();
    // The watch is cut: its stream ends.
    let mut rest = Vec::new();
    let _ = watch.read_to_end(&mut rest);
    for _ in 0..3 {
        assert_eq!(get_as(&server, CONTROLLER, "/api/v1/nodes/n1"), None);
    }
    let during: Vec<_> = server.requests().into_iter().filter(|r| r.outage).collect();
    assert_eq!(during.len(), 3, "{during:?}");
    assert!(during.iter().all(|r| r.status == 0 && !r.injected));
    server.end_outage();
    assert_eq!(
        get_as(&server, CONTROLLER, "/api/v1/nodes/n1").map(|a| a.0),
        Some(200)
    );
    assert_eq!(server.requests().iter().filter(|r| r.outage).count(), 3);
}
