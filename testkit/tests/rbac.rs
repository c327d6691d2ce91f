//! RBAC from the repository's manifests, with the Node authorizer and NodeRestriction: what a
//! node's credentials may do with `kubectl apply -f manifests/` (the top-level files), and
//! with the opt-in `manifests/optional/node-rbac-without-node-authorizer.yaml` on top.

mod support;

use serde_json::{json, Value};
use support::{item_names, raw, request_as};
use testkit::rbac::{manifests_dir, Policy, Request, User};
use testkit::ApiServer;

const ME: &str = "node-a";
const OTHER: &str = "node-b";
const APP_NS: &str = "default";
const CONFIG_NS: &str = "kubelet-config";
const MERGE: &str = "application/merge-patch+json";

/// The opt-in file for clusters without the Node authorizer.
fn opt_in() -> std::path::PathBuf {
    manifests_dir().join("optional/node-rbac-without-node-authorizer.yaml")
}

/// Nodes `ME` and `OTHER`, a pod bound to each, a ConfigMap in `kubelet-config` and one in
/// `default`.
fn cluster() -> ApiServer {
    let server = ApiServer::start();
    for (node, pod) in [(ME, "mine"), (OTHER, "theirs")] {
        server.create_node(node, std::iter::empty::<(&str, &str)>());
        server.create_pod(
            APP_NS,
            pod,
            node,
            json!({"app": "web"}),
            Some("ReplicaSet"),
            json!({}),
        );
    }
    server.create_configmap(CONFIG_NS, "cfg", Default::default(), true);
    server.create_configmap(APP_NS, "app-cfg", Default::default(), true);
    server
}

/// GET `path` with `ME`'s credentials.
fn get(server: &ApiServer, path: &str) -> (u16, Value) {
    raw(server, &server.node_token(ME), "GET", path, None)
}

/// The reads the Node authorizer refuses a node since v1.32 (and what RBAC must not add),
/// all of which the opt-in manifest allows: (what, path).
const FOREIGN_READS: [(&str, &str); 4] = [
    ("list all pods", "/api/v1/pods"),
    (
        "read another node's pod",
        "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dtheirs",
    ),
    ("read another Node", "/api/v1/nodes/node-b"),
    ("list all Nodes", "/api/v1/nodes"),
];
/// A get of another node's pod: refused by the Node authorizer, and not granted by the opt-in
/// manifest either (it grants pods list and watch, which kubelet-pivot uses, not get).
const FOREIGN_POD: &str = "/api/v1/namespaces/default/pods/theirs";

/// What kubelet-pivot's supervisor does with the node's credentials (the status reports and
/// the drain), each answered 2xx: (what, method, path, content type, body).
fn supervisor_requests() -> Vec<(&'static str, &'static str, String, &'static str, Value)> {
    let json = "application/json";
    vec![
        (
            "get its own Node",
            "GET",
            format!("/api/v1/nodes/{ME}"),
            json,
            Value::Null,
        ),
        (
            "list and watch its own Node by name",
            "GET",
            format!("/api/v1/nodes?fieldSelector=metadata.name%3D{ME}"),
            json,
            Value::Null,
        ),
        (
            "annotate its own Node",
            "PATCH",
            format!("/api/v1/nodes/{ME}"),
            MERGE,
            json!({"metadata": {"annotations": {"kubelet-pivot.io/config-status": "{}"}}}),
        ),
        (
            "report the condition",
            "PATCH",
            format!("/api/v1/nodes/{ME}/status"),
            MERGE,
            json!({"status": {"conditions": [{"type": "KubeletConfigOK", "status": "True"}]}}),
        ),
        (
            "cordon itself",
            "PATCH",
            format!("/api/v1/nodes/{ME}"),
            MERGE,
            json!({"spec": {"unschedulable": true}}),
        ),
        (
            "post an Event",
            "POST",
            "/api/v1/namespaces/default/events".to_string(),
            json,
            json!({
                "metadata": {"generateName": "node-a."},
                "involvedObject": {"kind": "Node", "name": ME},
                "reason": "KubeletConfigOK", "message": "m", "type": "Normal",
            }),
        ),
        (
            "list its configs",
            "GET",
            format!("/api/v1/namespaces/{CONFIG_NS}/configmaps"),
            json,
            Value::Null,
        ),
        (
            "get its config",
            "GET",
            format!("/api/v1/namespaces/{CONFIG_NS}/configmaps/cfg"),
            json,
            Value::Null,
        ),
        (
            "list the pods bound to it",
            "GET",
            format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{ME}&limit=500"),
            json,
            Value::Null,
        ),
        (
            "evict a pod bound to it",
            "POST",
            "/api/v1/namespaces/default/pods/mine/eviction".to_string(),
            json,
            json!({
                "apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "mine", "namespace": APP_NS},
            }),
        ),
    ]
}

#[test]
fn the_shipped_rbac_gives_a_node_nothing_but_reading_kubelet_configs() {
    let policy = Policy::shipped().expect("the shipped manifests");
    let grants = policy.grants(&User::node(ME));
    let described: Vec<String> = grants
        .iter()
        .map(|g| format!("{:?}: {} ({})", g.namespace, g.rule, g.via))
        .collect();
    assert_eq!(
        described,
        ["Some(\"kubelet-config\"): apiGroups [\"\"] resources [\"configmaps\"] verbs [\"get\", \"list\", \"watch\"] (RoleBinding kubelet-config/kubelet-config-reader-nodes -> Role kubelet-config-reader)"]
    );
    // Nor does it give anything to any other user a kubelet's credentials could be.
    assert!(policy
        .grants(&User::new("system:anonymous", &["system:unauthenticated"]))
        .is_empty());
    assert!(!policy.allows(
        &User::service_account("default", "default"),
        &Request::new("get", "configmaps").namespace(CONFIG_NS)
    ));
}

#[test]
fn with_the_shipped_manifests_a_node_may_not_read_other_nodes_or_their_pods() {
    let server = cluster();
    for (what, path) in FOREIGN_READS {
        let (code, body) = get(&server, path);
        assert_eq!(code, 403, "{what}: {body}");
        assert_eq!(body["reason"], "Forbidden", "{what}: {body}");
    }
    let (_, body) = get(&server, "/api/v1/pods");
    assert_eq!(body["message"], "pods is forbidden: User \"system:node:node-a\" cannot list resource \"pods\" in API group \"\" at the cluster scope: can only list/watch pods with spec.nodeName field selector");
    let (_, body) = get(&server, "/api/v1/nodes");
    assert_eq!(body["message"], "nodes is forbidden: User \"system:node:node-a\" cannot list resource \"nodes\" in API group \"\" at the cluster scope: node 'node-a' cannot read all nodes, only its own Node object");
    let (code, body) = get(&server, FOREIGN_POD);
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["message"], "pods \"theirs\" is forbidden: User \"system:node:node-a\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\": no relationship found between node 'node-a' and this object");
    // Watches too, and pods of one namespace without the field selector.
    let (code, _) = get(&server, "/api/v1/nodes?watch=true");
    assert_eq!(code, 403);
    let (code, _) = get(&server, "/api/v1/namespaces/default/pods");
    assert_eq!(code, 403);
    // ConfigMaps only in kubelet-config.
    let (code, body) = get(&server, "/api/v1/namespaces/default/configmaps/app-cfg");
    assert_eq!(code, 403, "{body}");

    // ... while everything the supervisor does is allowed.
    for (what, method, path, content_type, body) in supervisor_requests() {
        let body = (!body.is_null()).then_some(&body);
        let answer = request_as(
            &server,
            &server.node_token(ME),
            method,
            &path,
            content_type,
            body,
        );
        assert!(
            (200..300).contains(&answer.code),
            "{what}: {method} {path}: {} {}",
            answer.code,
            answer.body
        );
    }
}

#[test]
fn the_opt_in_manifest_widens_exactly_what_its_comment_says() {
    let server = cluster();
    server.apply_rbac_manifest(&opt_in());
    let (code, body) = get(&server, "/api/v1/pods");
    assert_eq!(code, 200, "{body}");
    assert_eq!(item_names(&body), ["mine", "theirs"]);
    for (what, path) in FOREIGN_READS {
        let (code, body) = get(&server, path);
        assert_eq!(code, 200, "{what} with the opt-in RBAC: {body}");
    }
    let (_, body) = get(&server, FOREIGN_READS[1].1);
    assert_eq!(item_names(&body), ["theirs"]);
    assert_eq!(get(&server, FOREIGN_POD).0, 403);
    // NodeRestriction still keeps writes to the node's own objects.
    let token = server.node_token(ME);
    let answer = request_as(
        &server,
        &token,
        "PATCH",
        "/api/v1/nodes/node-b",
        MERGE,
        Some(&json!({"spec": {"unschedulable": true}})),
    );
    assert_eq!(answer.code, 403, "{}", answer.body);
    assert_eq!(
        answer.message(),
        "nodes \"node-b\" is forbidden: node \"node-a\" is not allowed to modify node \"node-b\""
    );
    let (code, body) = raw(
        &server,
        &token,
        "POST",
        "/api/v1/namespaces/default/pods/theirs/eviction",
        Some(&json!({
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "theirs", "namespace": APP_NS},
        })),
    );
    assert_eq!(code, 403, "{body}");
    // It adds nothing about ConfigMaps, Secrets or deletions.
    let (code, _) = get(&server, "/api/v1/namespaces/default/configmaps/app-cfg");
    assert_eq!(code, 403);
    let (code, _) = raw(&server, &token, "DELETE", "/api/v1/nodes/node-b", None);
    assert_eq!(code, 403);
    let policy = server.rbac();
    let node = User::node(ME);
    for request in [
        Request::new("get", "secrets").namespace(CONFIG_NS),
        Request::new("delete", "pods")
            .namespace(APP_NS)
            .name("theirs"),
        Request::new("update", "nodes").name(OTHER),
        Request::new("create", "configmaps").namespace(CONFIG_NS),
    ] {
        assert!(!policy.allows(&node, &request), "{request}");
    }
}

#[test]
fn without_the_config_reader_role_a_node_cannot_list_its_configs() {
    // The RBAC is evaluated from the policy, not hard-coded: no Role, no ConfigMap list.
    let server = cluster();
    let path = "/api/v1/namespaces/kubelet-config/configmaps";
    assert_eq!(get(&server, path).0, 200);
    server.set_rbac(Policy::empty());
    let (code, body) = get(&server, path);
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["message"], "configmaps is forbidden: User \"system:node:node-a\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"kubelet-config\": No Object name found");
    // The Node authorizer's own rules are unaffected.
    assert_eq!(get(&server, "/api/v1/nodes/node-a").0, 200);
}
