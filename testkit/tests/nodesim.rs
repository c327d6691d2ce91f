//! Label selectors on Nodes (lists and watches, as the real server) and the node simulator
//! (`testkit::NodeSim`): the status contract of kubelet-pivot's nodes, scripted failures, and
//! thousands of nodes.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{item_names, next_event, request, summary, wait_until, watch, Answer};
use testkit::{ApiServer, NodeSim, Script, SimOptions};

const NODES: &str = "/api/v1/nodes";
const SOURCE: &str = "kubelet-pivot.io/config-source";
const STATUS: &str = "kubelet-pivot.io/config-status";
const CONFIG_NS: &str = "kubelet-config";
const KNOWN_BAD: &str = "assigned config is known bad: crash loop: 3 kubelet restarts within the 10m trial period (crashLoopThreshold 2)";

fn no_labels(_: usize) -> BTreeMap<String, String> {
    BTreeMap::new()
}

fn quick() -> SimOptions {
    SimOptions {
        react_after: Duration::from_millis(5),
        trial: Duration::ZERO,
        rollback_after: Duration::from_millis(20),
    }
}

fn config_map(server: &ApiServer, name: &str) -> Value {
    let mut data = BTreeMap::new();
    data.insert("kubelet".to_string(), format!("# {name}\n"));
    server.create_configmap(CONFIG_NS, name, data, false)
}

/// The node's status annotation, decoded.
fn reported(server: &ApiServer, node: &str) -> Value {
    let node = server.node(node);
    node["metadata"]["annotations"][STATUS]
        .as_str()
        .map(|text| serde_json::from_str(text).expect("status annotation JSON"))
        .unwrap_or(Value::Null)
}

fn condition(server: &ApiServer, node: &str, kind: &str) -> Value {
    server.node(node)["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or(Value::Null)
}

/// `{"configMap": ...}` of a stored ConfigMap, as a node reports it.
fn source_of(cm: &Value) -> Value {
    json!({"configMap": {
        "namespace": cm["metadata"]["namespace"],
        "name": cm["metadata"]["name"],
        "uid": cm["metadata"]["uid"],
        "resourceVersion": cm["metadata"]["resourceVersion"],
        "kubeletConfigKey": "kubelet",
    }})
}

fn uses(cm: &Value) -> String {
    format!(
        "using current (UID: {}, ResourceVersion: {})",
        cm["metadata"]["uid"].as_str().unwrap_or(""),
        cm["metadata"]["resourceVersion"].as_str().unwrap_or("")
    )
}

// ------------------------------------------------------------------------------------------
// Label selectors on nodes
// ------------------------------------------------------------------------------------------

fn list_nodes(server: &ApiServer, selector: &str) -> Answer {
    let query = selector
        .replace(' ', "%20")
        .replace('/', "%2F")
        .replace('=', "%3D");
    request(
        server,
        "GET",
        &format!("{NODES}?labelSelector={query}"),
        "application/json",
        None,
    )
}

#[test]
fn node_lists_honour_every_label_selector_operator() {
    let server = ApiServer::start();
    let sim = NodeSim::start(&server, quick());
    sim.add_nodes(6, "node-", |i| {
        let mut labels = BTreeMap::new();
        if i % 2 == 0 {
            labels.insert("pool".to_string(), "blue".to_string());
        }
        if i == 5 {
            labels.insert("pool".to_string(), "green".to_string());
        }
        labels.insert("rank".to_string(), i.to_string());
        labels
    });
    let list = |selector: &str| {
        let answer = list_nodes(&server, selector);
        assert_eq!(answer.code, 200, "{selector}: {}", answer.body);
        item_names(&answer.body)
    };
    assert_eq!(
        list("pool=blue"),
        ["node-00000", "node-00002", "node-00004"]
    );
    assert_eq!(list("pool==green"), ["node-00005"]);
    // `!=` and `notin` select nodes without the label too.
    assert_eq!(
        list("pool!=blue"),
        ["node-00001", "node-00003", "node-00005"]
    );
    assert_eq!(
        list("pool in (green,blue),rank notin (0,2)"),
        ["node-00004", "node-00005"]
    );
    assert_eq!(
        list("pool notin (blue)"),
        ["node-00001", "node-00003", "node-00005"]
    );
    assert_eq!(
        list("pool"),
        ["node-00000", "node-00002", "node-00004", "node-00005"]
    );
    assert_eq!(list("!pool"), ["node-00001", "node-00003"]);
    assert_eq!(list("rank>3"), ["node-00004", "node-00005"]);
    assert_eq!(
        list("topology.kubernetes.io/zone=zone-b"),
        ["node-00001", "node-00004"]
    );
    assert!(list("pool=").is_empty());

    let invalid = |selector: &str| {
        let answer = list_nodes(&server, selector);
        assert_eq!(answer.code, 400, "{selector}");
        assert_eq!(answer.body["reason"], "BadRequest");
        answer.message().to_string()
    };
    assert!(invalid("pool=a$b").starts_with(
        "unable to parse requirement: values[0][pool]: Invalid value: \"a$b\": a valid label must be"
    ));
    assert_eq!(
        invalid("pool in blue"),
        "unable to parse requirement: found 'blue', expected: '('"
    );
    assert_eq!(
        invalid("pool=blue,"),
        "found '', expected: identifier after ','"
    );
}

#[test]
fn a_watch_sees_a_relabelled_node_leave_and_join_its_selector() {
    let server = ApiServer::start();
    let sim = NodeSim::start(&server, quick());
    sim.add_nodes(2, "node-", |i| {
        let mut labels = BTreeMap::new();
        labels.insert(
            "pool".to_string(),
            if i == 0 { "blue" } else { "red" }.to_string(),
        );
        labels
    });
    let rv = server.resource_version();
    let mut stream = watch(
        &server,
        &format!("{NODES}?watch=true&resourceVersion={rv}&labelSelector=pool%3Dblue"),
    );
    let relabel = |node: &str, pool: &str| {
        server
            .patch_node(node, json!({"metadata": {"labels": {"pool": pool}}}), false)
            .expect("relabel");
    };
    relabel("node-00000", "red");
    let left = next_event(&mut stream);
    assert_eq!(summary(&left), ("DELETED".into(), "node-00000".into()));
    assert_eq!(
        left["object"]["metadata"]["labels"]["pool"], "blue",
        "the DELETED event carries the object as it last matched"
    );
    relabel("node-00001", "blue");
    assert_eq!(
        summary(&next_event(&mut stream)),
        ("ADDED".into(), "node-00001".into())
    );
    server.set_node_annotation("node-00001", "touched", Some("yes"));
    assert_eq!(
        summary(&next_event(&mut stream)),
        ("MODIFIED".into(), "node-00001".into())
    );
}

// ------------------------------------------------------------------------------------------
// The simulator
// ------------------------------------------------------------------------------------------

#[test]
fn simulated_nodes_report_the_local_config_and_then_their_assignments() {
    let server = ApiServer::start();
    let sim = NodeSim::start(&server, quick());
    let names = sim.add_nodes(3, "node-", no_labels);
    assert_eq!(names, ["node-00000", "node-00001", "node-00002"]);
    let node = server.node("node-00001");
    assert_eq!(
        node["metadata"]["labels"]["topology.kubernetes.io/zone"],
        "zone-b"
    );
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"],
        "node-00001"
    );
    assert_eq!(
        reported(&server, "node-00001"),
        json!({"active": null, "assigned": null, "lastKnownGood": null, "error": null})
    );
    let ok = condition(&server, "node-00001", "KubeletConfigOK");
    assert_eq!(
        (&ok["status"], &ok["reason"], &ok["message"]),
        (
            &json!("True"),
            &json!("passing all checks"),
            &json!("using current (init)")
        )
    );
    assert_eq!(condition(&server, "node-00001", "Ready")["status"], "True");

    let cm = config_map(&server, "cfg-a");
    server.clear_requests();
    let reacted = sim.reacted();
    server.set_node_annotation("node-00001", SOURCE, Some("kubelet-config/cfg-a"));
    assert!(sim.wait_reacted(reacted + 1, Duration::from_secs(5)));
    let src = source_of(&cm);
    assert_eq!(
        reported(&server, "node-00001"),
        json!({"active": src, "assigned": src, "lastKnownGood": src, "error": null})
    );
    let ok = condition(&server, "node-00001", "KubeletConfigOK");
    assert_eq!(ok["status"], "True");
    assert_eq!(ok["message"], uses(&cm));
    assert!(
        server.requests().is_empty(),
        "the simulator's writes are not HTTP requests"
    );
    assert_eq!(sim.assignments("node-00001"), ["kubelet-config/cfg-a"]);
    assert!(sim.assignments("node-00000").is_empty());

    // A new version of the ConfigMap is downloaded again.
    let mut data = BTreeMap::new();
    data.insert("kubelet".to_string(), "# changed\n".to_string());
    let updated = server
        .update_configmap_data(CONFIG_NS, "cfg-a", data)
        .expect("update");
    wait_until("the new resourceVersion reported", || {
        reported(&server, "node-00001")["active"] == source_of(&updated)
    });

    // Back to the local config.
    server.set_node_annotation("node-00001", SOURCE, None);
    wait_until("the local config reported", || {
        reported(&server, "node-00001")["active"].is_null()
            && condition(&server, "node-00001", "KubeletConfigOK")["message"]
                == "using current (init)"
    });
    assert_eq!(sim.assignments("node-00001"), ["kubelet-config/cfg-a", ""]);
}

#[test]
fn a_missing_config_map_is_unknown_until_it_appears() {
    let server = ApiServer::start();
    let sim = NodeSim::start(&server, quick());
    sim.add_nodes(1, "node-", no_labels);
    server.set_node_annotation("node-00000", SOURCE, Some("kubelet-config/later"));
    wait_until("the Unknown condition", || {
        condition(&server, "node-00000", "KubeletConfigOK")["status"] == "Unknown"
    });
    let unknown = condition(&server, "node-00000", "KubeletConfigOK");
    assert_eq!(
        unknown["reason"],
        "failed to sync, desired config unclear, cause: configmaps \"later\" not found"
    );
    assert_eq!(unknown["message"], "using current (init)");
    assert!(reported(&server, "node-00000")["active"].is_null());
    let cm = config_map(&server, "later");
    wait_until("the config applied once it exists", || {
        reported(&server, "node-00000")["active"] == source_of(&cm)
    });
    assert_eq!(
        condition(&server, "node-00000", "KubeletConfigOK")["status"],
        "True"
    );
}

#[test]
fn a_crash_looping_config_is_rolled_back_to_the_last_known_good() {
    let server = ApiServer::start();
    let sim = NodeSim::start(&server, quick());
    sim.add_nodes(2, "node-", no_labels);
    let good = config_map(&server, "cfg-a");
    let bad = config_map(&server, "cfg-b");
    sim.script(
        "node-00000",
        Script::RollsBack {
            on: Some("kubelet-config/cfg-b".into()),
            after: Some(Duration::from_millis(30)),
        },
    );
    // Other assignments are healthy.
    server.set_node_annotation("node-00000", SOURCE, Some("kubelet-config/cfg-a"));
    wait_until("cfg-a active", || {
        reported(&server, "node-00000")["lastKnownGood"] == source_of(&good)
    });
    // Watch the node's reports: first the trial, then the fallback.
    let rv = server.resource_version();
    let mut stream = watch(
        &server,
        &format!(
            "{NODES}?watch=true&resourceVersion={rv}&fieldSelector=metadata.name%3Dnode-00000"
        ),
    );
    server.set_node_annotation("node-00000", SOURCE, Some("kubelet-config/cfg-b"));
    let mut saw_trial = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(Instant::now() < deadline, "no fallback seen");
        let event = next_event(&mut stream);
        let text = event["object"]["metadata"]["annotations"][STATUS]
            .as_str()
            .unwrap_or("null");
        let status: Value = serde_json::from_str(text).expect("JSON");
        if status["active"] == source_of(&bad) {
            saw_trial = true;
        }
        if status["error"] == KNOWN_BAD {
            assert_eq!(status["active"], source_of(&good));
            assert_eq!(status["assigned"], source_of(&bad));
            assert_eq!(status["lastKnownGood"], source_of(&good));
            break;
        }
    }
    assert!(saw_trial, "the bad config ran before the fallback");
    wait_until("the False condition", || {
        condition(&server, "node-00000", "KubeletConfigOK")["status"] == "False"
    });
    let failed = condition(&server, "node-00000", "KubeletConfigOK");
    assert_eq!(failed["reason"], KNOWN_BAD);
    assert_eq!(
        failed["message"],
        uses(&good).replace("using current", "using last-known-good")
    );
    // A node without a script takes cfg-b fine.
    server.set_node_annotation("node-00001", SOURCE, Some("kubelet-config/cfg-b"));
    wait_until("node-00001 on cfg-b", || {
        reported(&server, "node-00001")["lastKnownGood"] == source_of(&bad)
    });
}

#[test]
fn a_rollback_from_the_local_config_falls_back_to_init() {
    let server = ApiServer::start();
    let sim = NodeSim::start(&server, quick());
    sim.add_nodes(1, "node-", no_labels);
    config_map(&server, "cfg-b");
    sim.script(
        "node-00000",
        Script::RollsBack {
            on: None,
            after: None,
        },
    );
    server.set_node_annotation("node-00000", SOURCE, Some("kubelet-config/cfg-b"));
    wait_until("the fallback", || {
        condition(&server, "node-00000", "KubeletConfigOK")["message"]
            == "using last-known-good (init)"
    });
    let status = reported(&server, "node-00000");
    assert!(status["active"].is_null());
    assert!(status["lastKnownGood"].is_null());
    assert_eq!(status["error"], KNOWN_BAD);
}

#[test]
fn scripted_nodes_never_get_ready_are_deleted_or_ignore_assignments() {
    let server = ApiServer::start();
    let sim = NodeSim::start(&server, quick());
    sim.add_nodes(3, "node-", no_labels);
    let cm = config_map(&server, "cfg-b");
    let on = Some("kubelet-config/cfg-b".to_string());
    sim.script("node-00000", Script::NeverReady { on: on.clone() });
    sim.script("node-00001", Script::DeletedOnAssignment { on: on.clone() });
    sim.script("node-00002", Script::Ignores { on });
    for node in ["node-00000", "node-00001", "node-00002"] {
        server.set_node_annotation(node, SOURCE, Some("kubelet-config/cfg-b"));
    }
    wait_until("node-00000 not ready", || {
        condition(&server, "node-00000", "Ready")["status"] == "False"
    });
    assert_eq!(reported(&server, "node-00000")["active"], source_of(&cm));
    wait_until("node-00001 deleted", || {
        server.try_node("node-00001").is_none()
    });
    // node-00002 saw the assignment and said nothing.
    wait_until("node-00002 saw it", || {
        sim.assignments("node-00002") == ["kubelet-config/cfg-b"]
    });
    assert!(reported(&server, "node-00002")["assigned"].is_null());
    // Another config makes node-00000 ready again.
    config_map(&server, "cfg-c");
    server.set_node_annotation("node-00000", SOURCE, Some("kubelet-config/cfg-c"));
    wait_until("node-00000 ready", || {
        condition(&server, "node-00000", "Ready")["status"] == "True"
    });
}

#[test]
fn a_disruptive_change_drains_the_node_first() {
    let server = ApiServer::start();
    let sim = NodeSim::start(&server, quick());
    sim.add_nodes(1, "node-", no_labels);
    let cm = config_map(&server, "cfg-b");
    sim.script(
        "node-00000",
        Script::Drains {
            on: None,
            drain: Duration::from_millis(300),
        },
    );
    server.set_node_annotation("node-00000", SOURCE, Some("kubelet-config/cfg-b"));
    wait_until("the drain", || {
        condition(&server, "node-00000", "KubeletConfigOK")["reason"] == "Draining"
    });
    let node = server.node("node-00000");
    assert_eq!(node["spec"]["unschedulable"], true);
    assert_eq!(
        condition(&server, "node-00000", "KubeletConfigOK")["status"],
        "False"
    );
    wait_until("the config applied after the drain", || {
        reported(&server, "node-00000")["active"] == source_of(&cm)
    });
    let node = server.node("node-00000");
    assert!(node["spec"].get("unschedulable").is_none());
    let ok = condition(&server, "node-00000", "KubeletConfigOK");
    assert_eq!(
        (ok["status"].clone(), ok["message"].clone()),
        (json!("True"), json!(uses(&cm)))
    );
}

#[test]
fn a_node_that_joins_later_reports_and_follows_its_assignment() {
    let server = ApiServer::start();
    let sim = NodeSim::start(&server, SimOptions::default());
    sim.add_nodes(1, "node-", no_labels);
    let mut labels = BTreeMap::new();
    labels.insert("pool".to_string(), "late".to_string());
    sim.add_node("late-node", labels);
    let node = server.node("late-node");
    assert_eq!(node["metadata"]["labels"]["pool"], "late");
    assert_eq!(
        condition(&server, "late-node", "KubeletConfigOK")["message"],
        "using current (init)"
    );
    let cm = config_map(&server, "cfg-a");
    server.set_node_annotation("late-node", SOURCE, Some("kubelet-config/cfg-a:kubelet"));
    wait_until("the late node applied cfg-a", || {
        reported(&server, "late-node")["active"] == source_of(&cm)
    });
    // With a trial period, the last-known-good follows only after it.
    drop(sim);
    let sim = NodeSim::start(
        &server,
        SimOptions {
            trial: Duration::from_millis(500),
            ..quick()
        },
    );
    sim.add_node("trial-node", BTreeMap::new());
    server.set_node_annotation("trial-node", SOURCE, Some("kubelet-config/cfg-a"));
    wait_until("active on trial", || {
        reported(&server, "trial-node")["active"] == source_of(&cm)
    });
    assert!(reported(&server, "trial-node")["lastKnownGood"].is_null());
    wait_until("last-known-good after the trial", || {
        reported(&server, "trial-node")["lastKnownGood"] == source_of(&cm)
    });
}

#[test]
fn five_thousand_simulated_nodes_react_to_an_assignment_within_seconds() {
    const N: usize = 5000;
    let server = ApiServer::start();
    let sim = NodeSim::start(&server, SimOptions::default());
    let started = Instant::now();
    let names = sim.add_nodes(N, "node-", no_labels);
    let created = started.elapsed();
    let cm = config_map(&server, "cfg-a");
    let assigned = Instant::now();
    for name in &names {
        server.set_node_annotation(name, SOURCE, Some("kubelet-config/cfg-a"));
    }
    assert!(
        sim.wait_reacted(N as u64, Duration::from_secs(30)),
        "only {} of {N} nodes reacted",
        sim.reacted()
    );
    let reacted = assigned.elapsed();
    eprintln!("{N} nodes: created in {created:?}, assigned and reported in {reacted:?}");
    assert!(
        reacted < Duration::from_secs(10),
        "{N} nodes took {reacted:?} to react"
    );
    let src = source_of(&cm);
    for name in [&names[0], &names[N / 2], &names[N - 1]] {
        assert_eq!(reported(&server, name)["active"], src);
    }
    let list = list_nodes(&server, "topology.kubernetes.io/zone=zone-a");
    assert_eq!(item_names(&list.body).len(), N.div_ceil(3));
}
