//! Pods, PodDisruptionBudgets, the eviction subresource, pod termination and node
//! credentials, through kube-rs (the client kubelet-pivot uses) and a raw HTTP client where
//! the exact answer matters.

mod support;

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use support::{admin, client_from, next_event, raw, status_of, watch, PATIENCE};
use testkit::ApiServer;

const NS: &str = "default";
const ME: &str = "node-a";
const OTHER: &str = "node-b";

// ------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------

/// A client with `node`'s credentials.
async fn node_client(server: &ApiServer, dir: &Path, node: &str) -> Client {
    client_from(&server.node_kubeconfig_in(dir, node)).await
}

/// A server with two nodes, `ME` and `OTHER`.
fn cluster() -> ApiServer {
    let server = ApiServer::start();
    for node in [ME, OTHER] {
        server.create_node(node, std::iter::empty::<(&str, &str)>());
    }
    server
}

fn web_pod(server: &ApiServer, name: &str, node: &str) -> Value {
    server.create_pod(
        NS,
        name,
        node,
        json!({"app": "web"}),
        Some("ReplicaSet"),
        json!({}),
    )
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ------------------------------------------------------------------------------------------
// Pods
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn pods_are_listed_by_field_and_label_selectors() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    web_pod(&server, "web-1", ME);
    web_pod(&server, "web-2", OTHER);
    server.create_namespace("apps");
    server.create_pod(
        "apps",
        "db-0",
        ME,
        json!({"app": "db"}),
        Some("StatefulSet"),
        json!({}),
    );
    server.create_pod(NS, "pending", "", json!({"app": "web"}), None, json!({}));
    let client = admin(&server, dir.path()).await;
    let all: Api<Pod> = Api::all(client.clone());

    let mine = all
        .list(&ListParams::default().fields(&format!("spec.nodeName={ME}")))
        .await
        .expect("list by node");
    assert_eq!(names(&mine.items), ["db-0", "web-1"]);
    let unbound = all
        .list(&ListParams::default().fields("spec.nodeName="))
        .await
        .expect("list unbound");
    assert_eq!(names(&unbound.items), ["pending"]);
    let running = all
        .list(&ListParams::default().fields("status.phase=Running,metadata.namespace=default"))
        .await
        .expect("list running");
    assert_eq!(names(&running.items), ["web-1", "web-2"]);
    let by_name = all
        .list(&ListParams::default().fields("metadata.name=web-2"))
        .await
        .expect("list by name");
    assert_eq!(names(&by_name.items), ["web-2"]);
    let web_here: Api<Pod> = Api::namespaced(client.clone(), NS);
    let web = web_here
        .list(
            &ListParams::default()
                .labels("app=web")
                .fields(&format!("spec.nodeName!={OTHER}")),
        )
        .await
        .expect("list by label");
    assert_eq!(names(&web.items), ["pending", "web-1"]);
    let err = status_of(
        all.list(&ListParams::default().fields("spec.bogus=1"))
            .await,
    );
    assert_eq!(err.code, 400);
    assert_eq!(err.message, "field label not supported: spec.bogus");

    // What the helper made, as a client sees it.
    let pod = web_here.get("web-1").await.expect("get web-1");
    let status = pod.status.expect("a status");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
    let owner = &pod.metadata.owner_references.expect("an owner")[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.api_version.as_str(),
            owner.name.as_str()
        ),
        ("ReplicaSet", "apps/v1", "web")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(server.pods_on(ME).len(), 2);
    assert!(server.pod(NS, "web-1").is_some());
}

#[tokio::test]
async fn pod_create_is_validated_defaulted_and_starts_pending() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    let pods: Api<Pod> = Api::namespaced(admin(&server, dir.path()).await, NS);

    let no_containers: Pod = serde_json::from_value(json!({
        "metadata": {"name": "empty"}, "spec": {"containers": []},
    }))
    .expect("a pod");
    let err = status_of(pods.create(&PostParams::default(), &no_containers).await);
    assert_eq!(err.code, 422);
    assert_eq!(err.reason, "Invalid");
    assert_eq!(
        err.message,
        "Pod \"empty\" is invalid: spec.containers: Required value"
    );

    let bad: Pod = serde_json::from_value(json!({
        "metadata": {"name": "bad"},
        "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "a"}]},
    }))
    .expect("a pod");
    let err = status_of(pods.create(&PostParams::default(), &bad).await);
    assert_eq!(
        err.message,
        "Pod \"bad\" is invalid: [spec.containers[1].name: Duplicate value: \"a\", spec.containers[1].image: Required value]"
    );

    // The status a client sends on create is replaced (Pending, with the QoS class).
    let good: Pod = serde_json::from_value(json!({
        "metadata": {"name": "good"},
        "spec": {"nodeName": ME, "containers": [{"name": "app", "image": "nginx"}]},
        "status": {"phase": "Running"},
    }))
    .expect("a pod");
    let created = pods
        .create(&PostParams::default(), &good)
        .await
        .expect("create");
    let status = created.status.expect("a status");
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let spec = created.spec.expect("a spec");
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(
        spec.containers[0].image_pull_policy.as_deref(),
        Some("Always")
    );

    // The spec is immutable but for images; the status is not changed through the pod.
    let err = status_of(
        pods.patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": OTHER}})),
        )
        .await,
    );
    assert_eq!(err.code, 422);
    assert!(err.message.starts_with("Pod \"good\" is invalid: spec: Forbidden: pod updates may not change fields other than"), "{}", err.message);
    let patched = pods
        .patch(
            "good",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}, "status": {"phase": "Failed"}})),
        )
        .await
        .expect("an image change");
    assert_eq!(
        patched.spec.expect("spec").containers[0].image.as_deref(),
        Some("nginx:1.27")
    );
    assert_eq!(
        patched.status.expect("status").phase.as_deref(),
        Some("Pending")
    );
    let running = pods
        .patch_status(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .expect("a status patch");
    assert_eq!(
        running.status.expect("status").phase.as_deref(),
        Some("Running")
    );
}

#[tokio::test]
async fn a_delete_removes_the_pod_and_returns_it() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    web_pod(&server, "web-1", ME);
    let pods: Api<Pod> = Api::namespaced(admin(&server, dir.path()).await, NS);
    let deleted = pods
        .delete("web-1", &DeleteParams::default())
        .await
        .expect("delete");
    let pod = deleted.left().expect("the deleted pod, not a Status");
    assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
    assert!(server.pod(NS, "web-1").is_none());
    let err = status_of(pods.get("web-1").await);
    assert_eq!(err.code, 404);
    assert_eq!(err.message, "pods \"web-1\" not found");
}

#[tokio::test]
async fn termination_delay_marks_the_pod_then_removes_it() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    web_pod(&server, "web-1", ME);
    web_pod(&server, "web-2", ME);
    server.set_pod_termination_delay(Duration::from_millis(700));
    let pods: Api<Pod> = Api::namespaced(admin(&server, dir.path()).await, NS);
    let rv = server.resource_version();
    let mut events = watch(
        &server,
        &format!("/api/v1/namespaces/default/pods?watch=true&fieldSelector=metadata.name%3Dweb-1&resourceVersion={rv}"),
    );

    let evicted = pods
        .evict("web-1", &EvictParams::default())
        .await
        .expect("evict");
    assert_eq!(evicted.code, 201);
    let terminating = server
        .pod(NS, "web-1")
        .expect("still there while terminating");
    assert!(
        terminating["metadata"]["deletionTimestamp"].is_string(),
        "{terminating}"
    );
    assert_eq!(terminating["metadata"]["deletionGracePeriodSeconds"], 30);
    let conditions = terminating["status"]["conditions"]
        .as_array()
        .expect("conditions");
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "DisruptionTarget" && c["reason"] == "EvictionByEvictionAPI"),
        "{terminating}"
    );
    // A second eviction of a terminating pod is fine (and changes nothing).
    pods.evict("web-1", &EvictParams::default())
        .await
        .expect("evict again");
    wait_for("web-1 to be gone", || server.pod(NS, "web-1").is_none()).await;
    // Watchers saw the condition, the deletion mark, then the deletion.
    let seen: Vec<(String, bool)> = (0..3)
        .map(|_| {
            let event = next_event(&mut events);
            let marked = event["object"]["metadata"]["deletionTimestamp"].is_string();
            (event["type"].as_str().unwrap_or("").to_string(), marked)
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("MODIFIED".to_string(), false),
            ("MODIFIED".to_string(), true),
            ("DELETED".to_string(), true)
        ]
    );

    // A grace period of 0 deletes at once, whatever the delay.
    let started = Instant::now();
    pods.delete(
        "web-2",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("delete now");
    assert!(server.pod(NS, "web-2").is_none());
    assert!(started.elapsed() < Duration::from_millis(500));

    // Unbound pods go at once too.
    server.create_pod(NS, "floating", "", json!({}), None, json!({}));
    server.delete_pod(NS, "floating").expect("delete");
    assert!(server.pod(NS, "floating").is_none());
}

// ------------------------------------------------------------------------------------------
// Evictions and PodDisruptionBudgets
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn eviction_without_a_pdb_deletes_the_pod() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    web_pod(&server, "web-1", ME);
    let pods: Api<Pod> = Api::namespaced(admin(&server, dir.path()).await, NS);
    let status = pods
        .evict("web-1", &EvictParams::default())
        .await
        .expect("evict");
    assert_eq!(status.code, 201);
    assert!(status.is_success(), "{status:?}");
    assert!(server.pod(NS, "web-1").is_none());

    let err = status_of(pods.evict("web-1", &EvictParams::default()).await);
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "pods \"web-1\" not found");

    // The Eviction must name the pod of the URL.
    web_pod(&server, "web-2", ME);
    let token = server.token();
    let body =
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-3"}});
    let (code, answer) = raw(
        &server,
        &token,
        "POST",
        "/api/v1/namespaces/default/pods/web-2/eviction",
        Some(&body),
    );
    assert_eq!(code, 400, "{answer}");
    assert_eq!(
        answer["message"],
        "name in URL does not match name in Eviction object"
    );
    let (code, _) = raw(
        &server,
        &token,
        "GET",
        "/api/v1/namespaces/default/pods/web-2/eviction",
        None,
    );
    assert_eq!(code, 405);
}

#[tokio::test]
async fn a_pdb_without_disruptions_allowed_answers_429_until_raised() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    web_pod(&server, "web-1", ME);
    web_pod(&server, "web-2", ME);
    let pdb = server.create_pdb(NS, "web", json!({"app": "web"}), 0);
    assert_eq!(pdb["status"]["currentHealthy"], 2);
    assert_eq!(pdb["status"]["desiredHealthy"], 2);
    let pods: Api<Pod> = Api::namespaced(admin(&server, dir.path()).await, NS);

    let err = status_of(pods.evict("web-1", &EvictParams::default()).await);
    assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(
        err.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let causes = err.details.expect("details").causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].reason, "DisruptionBudget");
    assert_eq!(
        causes[0].message,
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    );
    assert!(server.pod(NS, "web-1").is_some(), "nothing evicted");

    server.set_pdb_disruptions_allowed(NS, "web", 1);
    pods.evict("web-1", &EvictParams::default())
        .await
        .expect("evict");
    assert!(server.pod(NS, "web-1").is_none());
    let pdb = server.pdb(NS, "web").expect("the PDB");
    assert_eq!(pdb["status"]["disruptionsAllowed"], 0, "{pdb}");
    assert!(pdb["status"]["disruptedPods"]["web-1"].is_string(), "{pdb}");
    let condition = &pdb["status"]["conditions"][0];
    assert_eq!(
        (
            condition["type"].as_str(),
            condition["status"].as_str(),
            condition["reason"].as_str()
        ),
        (
            Some("DisruptionAllowed"),
            Some("False"),
            Some("InsufficientPods")
        )
    );

    // The budget is spent: the next one is refused again.
    let err = status_of(pods.evict("web-2", &EvictParams::default()).await);
    assert_eq!(err.code, 429);

    // Through the typed client too.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(pods.clone().into_client(), NS);
    let typed = pdbs.get("web").await.expect("get the PDB");
    assert_eq!(typed.status.expect("status").disruptions_allowed, 0);
}

#[tokio::test]
async fn terminal_and_pending_pods_are_evicted_whatever_the_budget() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    web_pod(&server, "done", ME);
    server.set_pod_phase(NS, "done", "Succeeded");
    server.create_pod(NS, "waiting", "", json!({"app": "web"}), None, json!({}));
    server.create_pdb(NS, "web", json!({"app": "web"}), 0);
    let pods: Api<Pod> = Api::namespaced(admin(&server, dir.path()).await, NS);
    pods.evict("done", &EvictParams::default())
        .await
        .expect("evict the finished pod");
    pods.evict("waiting", &EvictParams::default())
        .await
        .expect("evict the pending pod");
    assert!(server.pod(NS, "done").is_none() && server.pod(NS, "waiting").is_none());
}

#[tokio::test]
async fn two_matching_pdbs_are_a_500() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    web_pod(&server, "web-1", ME);
    server.create_pdb(NS, "web-a", json!({"app": "web"}), 1);
    server.create_pdb(NS, "web-b", json!({"app": "web"}), 1);
    let pods: Api<Pod> = Api::namespaced(admin(&server, dir.path()).await, NS);
    let err = status_of(pods.evict("web-1", &EvictParams::default()).await);
    assert_eq!(err.code, 500);
    assert_eq!(err.message, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.");
    assert!(server.pod(NS, "web-1").is_some());
}

#[tokio::test]
async fn pdbs_are_served_with_status_and_processed_by_nobody() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    web_pod(&server, "web-1", ME);
    let client = admin(&server, dir.path()).await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 5},
    }))
    .expect("a PDB");
    let created = pdbs
        .create(&PostParams::default(), &pdb)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        created.status.expect("status").disruptions_allowed,
        0,
        "create resets the status"
    );

    // No disruption controller has observed it: evictions wait for it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let err = status_of(pods.evict("web-1", &EvictParams::default()).await);
    assert_eq!(err.code, 429);
    assert_eq!(
        err.details.expect("details").causes[0].message,
        "The disruption budget web is still being processed by the server."
    );

    // Write the status as the controller would.
    let status = json!({"status": {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}});
    pdbs.patch_status("web", &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("status");
    let err = status_of(
        pdbs.patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"disruptionsAllowed": -1}})),
        )
        .await,
    );
    assert_eq!(err.code, 422);
    assert_eq!(err.message, "PodDisruptionBudget.policy \"web\" is invalid: status.disruptionsAllowed: Invalid value: -1: must be greater than or equal to 0");
    pods.evict("web-1", &EvictParams::default())
        .await
        .expect("evict");

    let all: Api<PodDisruptionBudget> = Api::all(client);
    assert_eq!(
        all.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    let err = status_of(
        pdbs.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxUnavailable": 1}})),
        )
        .await,
    );
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains("minAvailable and maxUnavailable cannot be both set"),
        "{}",
        err.message
    );
}

// ------------------------------------------------------------------------------------------
// Node credentials
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_node_may_modify_only_its_own_node_and_not_its_taints() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes: Api<Node> = Api::all(node_client(&server, dir.path(), ME).await);

    // Reads: its own Node only (the Node authorizer; the shipped RBAC adds no Node rule).
    nodes.get(ME).await.expect("get its own node");
    let own = nodes
        .list(&ListParams::default().fields(&format!("metadata.name={ME}")))
        .await
        .expect("list its own node by name");
    assert_eq!(own.items.len(), 1);
    let err = status_of(nodes.get(OTHER).await);
    assert_eq!(err.message, "nodes \"node-b\" is forbidden: User \"system:node:node-a\" cannot get resource \"nodes\" in API group \"\" at the cluster scope: node 'node-a' cannot read 'node-b', only its own Node object");
    let err = status_of(nodes.list(&ListParams::default()).await);
    assert_eq!(err.message, "nodes is forbidden: User \"system:node:node-a\" cannot list resource \"nodes\" in API group \"\" at the cluster scope: node 'node-a' cannot read all nodes, only its own Node object");
    let cordon = Patch::Merge(json!({"spec": {"unschedulable": true}}));
    let own = nodes
        .patch(ME, &PatchParams::default(), &cordon)
        .await
        .expect("cordon itself");
    assert_eq!(own.spec.expect("spec").unschedulable, Some(true));
    nodes
        .patch_status(
            ME,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
        )
        .await
        .expect("patch its own status");

    let err = status_of(nodes.patch(OTHER, &PatchParams::default(), &cordon).await);
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        "nodes \"node-b\" is forbidden: node \"node-a\" is not allowed to modify node \"node-b\""
    );
    let err = status_of(
        nodes
            .patch_status(OTHER, &PatchParams::default(), &cordon)
            .await,
    );
    assert_eq!(err.code, 403);

    let taint = Patch::Merge(json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}));
    let err = status_of(nodes.patch(ME, &PatchParams::default(), &taint).await);
    assert_eq!(
        err.message,
        "nodes \"node-a\" is forbidden: node \"node-a\" is not allowed to modify taints"
    );
    let label = Patch::Merge(
        json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}),
    );
    let err = status_of(nodes.patch(ME, &PatchParams::default(), &label).await);
    assert_eq!(err.message, "nodes \"node-a\" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/control-plane");
    let label =
        Patch::Merge(json!({"metadata": {"labels": {"kubelet-pivot.io/roll-required": "true"}}}));
    nodes
        .patch(ME, &PatchParams::default(), &label)
        .await
        .expect("its own labels");

    let err = status_of(nodes.delete(OTHER, &DeleteParams::default()).await);
    assert_eq!(err.code, 403);
    assert_eq!(err.message, "nodes \"node-b\" is forbidden: User \"system:node:node-a\" cannot delete resource \"nodes\" in API group \"\" at the cluster scope");
    assert!(server.try_node(OTHER).is_some());
    assert!(server.node(OTHER)["spec"]["unschedulable"].is_null());
}

#[tokio::test]
async fn a_node_evicts_and_reads_only_its_own_pods() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    web_pod(&server, "mine", ME);
    web_pod(&server, "theirs", OTHER);
    let client = node_client(&server, dir.path(), ME).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let all: Api<Pod> = Api::all(client.clone());

    let err = status_of(pods.evict("theirs", &EvictParams::default()).await);
    assert_eq!(err.code, 403);
    assert_eq!(err.message, "pods \"theirs\" is forbidden: node node-a can only evict pods with spec.nodeName set to itself");
    let err = status_of(pods.delete("theirs", &DeleteParams::default()).await);
    assert_eq!(err.message, "pods \"theirs\" is forbidden: node \"node-a\" can only delete pods with spec.nodeName set to itself");
    assert!(server.pod(NS, "theirs").is_some());

    // AuthorizeNodeWithSelectors: list and watch only with spec.nodeName=<itself>.
    let mine = all
        .list(&ListParams::default().fields(&format!("spec.nodeName={ME}")))
        .await
        .expect("list own pods");
    assert_eq!(names(&mine.items), ["mine"]);
    let err = status_of(all.list(&ListParams::default()).await);
    assert_eq!(err.message, "pods is forbidden: User \"system:node:node-a\" cannot list resource \"pods\" in API group \"\" at the cluster scope: can only list/watch pods with spec.nodeName field selector");
    pods.get("mine").await.expect("get own pod");
    let err = status_of(pods.get("theirs").await);
    assert_eq!(err.message, "pods \"theirs\" is forbidden: User \"system:node:node-a\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\": no relationship found between node 'node-a' and this object");

    let status = pods
        .evict("mine", &EvictParams::default())
        .await
        .expect("evict own pod");
    assert_eq!(status.code, 201);
    assert!(server.pod(NS, "mine").is_none());
    // A pod that is gone is 404 for an eviction, and 403 for a get (no relationship left).
    let err = status_of(pods.evict("mine", &EvictParams::default()).await);
    assert_eq!(err.code, 404);
    assert_eq!(status_of(pods.get("mine").await).code, 403);

    let err = status_of(
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "sneaky"},
                "spec": {"nodeName": ME, "containers": [{"name": "c", "image": "x"}]},
            }))
            .expect("a pod"),
        )
        .await,
    );
    assert_eq!(err.message, "pods \"sneaky\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"node-a\" can only create mirror pods");

    // An older server (gate off) lets nodes read every pod.
    server.authorize_node_with_selectors(false);
    assert_eq!(
        all.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
}

#[tokio::test]
async fn a_node_may_not_read_pdbs_daemonsets_or_configmaps_outside_kubelet_config() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    server.create_pdb(NS, "web", json!({"app": "web"}), 1);
    for ns in ["kubelet-config", NS] {
        server.create_configmap(ns, "cfg", Default::default(), false);
    }
    let client = node_client(&server, dir.path(), ME).await;

    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let err = status_of(pdbs.list(&ListParams::default()).await);
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(err.message, "poddisruptionbudgets.policy is forbidden: User \"system:node:node-a\" cannot list resource \"poddisruptionbudgets\" in API group \"policy\" in the namespace \"default\"");

    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
    let err = status_of(daemonsets.get("agent").await);
    assert_eq!(err.code, 403);
    assert_eq!(err.message, "daemonsets.apps \"agent\" is forbidden: User \"system:node:node-a\" cannot get resource \"daemonsets\" in API group \"apps\" in the namespace \"kube-system\"");

    let allowed: Api<ConfigMap> = Api::namespaced(client.clone(), "kubelet-config");
    allowed
        .get("cfg")
        .await
        .expect("a ConfigMap in kubelet-config");
    assert_eq!(
        allowed
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    let denied: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let err = status_of(denied.get("cfg").await);
    assert_eq!(err.message, "configmaps \"cfg\" is forbidden: User \"system:node:node-a\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\": no relationship found between node 'node-a' and this object");
    let err = status_of(denied.list(&ListParams::default()).await);
    assert_eq!(err.message, "configmaps is forbidden: User \"system:node:node-a\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\": No Object name found");

    // Events may be created; the default token is unaffected by all this.
    let (code, _) = raw(
        &server,
        &server.node_token(ME),
        "POST",
        "/api/v1/namespaces/default/events",
        Some(&json!({
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Node", "name": ME},
            "reason": "Test", "message": "m", "type": "Normal",
        })),
    );
    assert_eq!(code, 201);
    let admin_pdbs: Api<PodDisruptionBudget> =
        Api::namespaced(admin(&server, dir.path()).await, NS);
    assert_eq!(
        admin_pdbs
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    // A token nobody issued is 401.
    let (code, _) = raw(
        &server,
        "kubelet-pivot-node-token.bogus",
        "GET",
        "/api/v1/nodes",
        None,
    );
    assert_eq!(code, 401);
}

/// Appends a protobuf field with a length-delimited value.
fn pb_bytes(out: &mut Vec<u8>, field: u8, bytes: &[u8]) {
    out.push(field << 3 | 2);
    out.push(u8::try_from(bytes.len()).expect("short"));
    out.extend_from_slice(bytes);
}

#[test]
fn kubectl_drain_style_protobuf_evictions_are_understood() {
    let server = cluster();
    web_pod(&server, "web-1", ME);
    // runtime.Unknown{TypeMeta{policy/v1, Eviction}, raw Eviction{metadata{name}, deleteOptions{grace 0}}}
    let mut type_meta = Vec::new();
    pb_bytes(&mut type_meta, 1, b"policy/v1");
    pb_bytes(&mut type_meta, 2, b"Eviction");
    let mut meta = Vec::new();
    pb_bytes(&mut meta, 1, b"web-1");
    let mut eviction = Vec::new();
    pb_bytes(&mut eviction, 1, &meta);
    pb_bytes(&mut eviction, 2, &[1 << 3, 0]);
    let mut body = b"k8s\0".to_vec();
    pb_bytes(&mut body, 1, &type_meta);
    pb_bytes(&mut body, 2, &eviction);

    let mut conn = std::net::TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    conn.set_read_timeout(Some(PATIENCE)).expect("read timeout");
    write!(
        conn,
        "POST /api/v1/namespaces/default/pods/web-1/eviction HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: Bearer {}\r\nContent-Type: application/vnd.kubernetes.protobuf\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        server.token(),
        body.len()
    )
    .expect("send");
    conn.write_all(&body).expect("send the body");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("the answer");
    assert!(answer.starts_with("HTTP/1.1 201 "), "{answer}");
    assert!(answer.contains(r#""status":"Success""#), "{answer}");
    assert!(server.pod(NS, "web-1").is_none());
}

#[test]
fn discovery_lists_pods_evictions_and_pdbs() {
    let server = ApiServer::start();
    let token = server.token();
    let (_, core) = raw(&server, &token, "GET", "/api/v1", None);
    let names: Vec<&str> = core["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for name in ["pods", "pods/eviction", "pods/status"] {
        assert!(names.contains(&name), "{names:?}");
    }
    let (_, groups) = raw(&server, &token, "GET", "/apis", None);
    assert!(groups["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .any(|g| g["name"] == "policy"));
    let (code, policy) = raw(&server, &token, "GET", "/apis/policy/v1", None);
    assert_eq!(code, 200);
    assert_eq!(policy["resources"][0]["name"], "poddisruptionbudgets");
    assert_eq!(policy["resources"][0]["shortNames"], json!(["pdb"]));
}

/// Evictions in flight are counted; held ones overlap; beyond the limit (or the next few
/// throttled) they are refused at once as API priority and fairness refuses: 429, text/plain,
/// `Retry-After: 1`, no Status and no budget's cause.
#[tokio::test]
async fn evictions_in_flight_are_counted_held_and_refused_beyond_the_limit() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["web-1", "web-2", "web-3"] {
        web_pod(&server, name, ME);
    }
    server.set_eviction_hold(Duration::from_millis(300));
    server.limit_evictions_in_flight(Some(2));
    let pods: Api<Pod> = Api::namespaced(admin(&server, dir.path()).await, NS);
    let evict = |name: &'static str| {
        let pods = pods.clone();
        async move { pods.evict(name, &EvictParams::default()).await }
    };
    let (a, b, c) = tokio::join!(evict("web-1"), evict("web-2"), evict("web-3"));
    let results = [a, b, c];
    let refused: Vec<&kube::Error> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(refused.len(), 1, "{results:?}");
    match refused[0] {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 429);
            assert_eq!(status.message, "Too many requests, please try again later.");
            assert!(status.details.is_none(), "{status:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.max_evictions_in_flight(), 3);
    let records: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/eviction"))
        .collect();
    let throttled: Vec<_> = records.iter().filter(|r| r.status == 429).collect();
    assert_eq!(throttled.len(), 1, "{records:?}");
    assert_eq!(throttled[0].evictions_in_flight, 3);
    assert!(
        throttled[0].answered - throttled[0].received < Duration::from_millis(300),
        "refused at once, not held"
    );
    for r in records.iter().filter(|r| r.status == 201) {
        assert!(
            r.answered - r.received >= Duration::from_millis(300),
            "{r:?}"
        );
    }
    // The next one, throttled, with the header kube-rs does not pass on.
    server.limit_evictions_in_flight(None);
    server.set_eviction_hold(Duration::ZERO);
    server.throttle_next_evictions(1);
    let left = ["web-1", "web-2", "web-3"]
        .into_iter()
        .find(|n| server.pod(NS, n).is_some())
        .expect("the refused pod is still there");
    let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": left}});
    let path = format!("/api/v1/namespaces/{NS}/pods/{left}/eviction");
    let answer = support::request_as(
        &server,
        &server.token(),
        "POST",
        &path,
        "application/json",
        Some(&body),
    );
    assert_eq!(answer.code, 429);
    assert_eq!(answer.body, Value::Null, "not a Status");
    assert!(
        answer
            .headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("retry-after") && v == "1"),
        "{:?}",
        answer.headers
    );
    let (code, _) = raw(&server, &server.token(), "POST", &path, Some(&body));
    assert_eq!(code, 201, "only the next one was throttled");
}
