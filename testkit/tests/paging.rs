//! List paging (`limit` and `continue`) as a v1.32 server pages lists: pages, tokens,
//! `remainingItemCount`, snapshots, selectors, node credentials, invalid and expired tokens,
//! through raw HTTP (exact answers) and kube-rs (the client kubelet-pivot uses).

mod support;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::Api;
use serde_json::{json, Value};
use support::{admin, item_names, next_event, raw, status_of, summary, watch};
use testkit::ApiServer;

const PODS: &str = "/api/v1/namespaces/default/pods";

/// A server with nodes `node-a` and `node-b`.
fn cluster() -> ApiServer {
    let server = ApiServer::start();
    for node in ["node-a", "node-b"] {
        server.create_node(node, std::iter::empty::<(&str, &str)>());
    }
    server
}

fn pod(server: &ApiServer, namespace: &str, name: &str, node: &str) -> Value {
    server.create_pod(
        namespace,
        name,
        node,
        json!({"app": "web"}),
        Some("ReplicaSet"),
        json!({}),
    )
}

/// A GET with the admin token; panics unless it is answered `code`.
fn get(server: &ApiServer, path: &str, code: u16) -> Value {
    let (got, body) = raw(server, &server.token(), "GET", path, None);
    assert_eq!(got, code, "GET {path}: {body}");
    body
}

fn continue_of(list: &Value) -> Option<String> {
    list["metadata"]["continue"].as_str().map(str::to_string)
}

fn remaining_of(list: &Value) -> Option<i64> {
    list["metadata"]["remainingItemCount"].as_i64()
}

/// Follows the continue tokens of `path` (which has a `limit`); returns every page.
fn all_pages(server: &ApiServer, path: &str) -> Vec<Value> {
    let mut pages = vec![get(server, path, 200)];
    while let Some(token) = pages.last().and_then(continue_of) {
        pages.push(get(server, &format!("{path}&continue={token}"), 200));
        assert!(pages.len() < 100, "the pages never end");
    }
    pages
}

#[test]
fn a_limit_pages_the_list_with_continue_tokens_and_remaining_counts() {
    let server = cluster();
    for i in 1..=7 {
        pod(&server, "default", &format!("web-{i}"), "node-a");
    }
    let rv = server.resource_version().to_string();
    let pages = all_pages(&server, &format!("{PODS}?limit=3"));
    let names: Vec<Vec<String>> = pages.iter().map(item_names).collect();
    assert_eq!(
        names,
        [
            vec!["web-1", "web-2", "web-3"],
            vec!["web-4", "web-5", "web-6"],
            vec!["web-7"],
        ]
    );
    assert_eq!(
        pages.iter().map(remaining_of).collect::<Vec<_>>(),
        [Some(4), Some(1), None]
    );
    for page in &pages {
        assert_eq!(page["kind"], "PodList");
        assert_eq!(page["metadata"]["resourceVersion"], json!(rv));
    }
    // The token is etcd3's: base64url JSON with the first page's resourceVersion and the key
    // after the last item.
    let token = continue_of(&pages[0]).expect("a token");
    assert!(token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    // Each page is one list request; a test can see their sizes.
    let seen: Vec<(Option<String>, Option<usize>)> = server
        .list_requests(PODS)
        .iter()
        .map(|r| (r.query_param("limit"), r.items))
        .collect();
    assert_eq!(
        seen,
        [
            (Some("3".to_string()), Some(3)),
            (Some("3".to_string()), Some(3)),
            (Some("3".to_string()), Some(1)),
        ]
    );
    assert_eq!(
        server.list_requests(PODS)[1].query_param("continue"),
        Some(token)
    );
}

#[test]
fn the_last_page_at_an_exact_boundary_has_no_token() {
    let server = cluster();
    for i in 1..=6 {
        pod(&server, "default", &format!("web-{i}"), "node-a");
    }
    let pages = all_pages(&server, &format!("{PODS}?limit=3"));
    assert_eq!(pages.len(), 2);
    assert_eq!(remaining_of(&pages[0]), Some(3));
    assert_eq!(item_names(&pages[1]), ["web-4", "web-5", "web-6"]);
    assert_eq!(continue_of(&pages[1]), None);
    assert!(pages[1]["metadata"].get("remainingItemCount").is_none());
    for limit in [6, 7, 500] {
        let whole = get(&server, &format!("{PODS}?limit={limit}"), 200);
        assert_eq!(item_names(&whole).len(), 6);
        assert_eq!(
            whole["metadata"],
            json!({"resourceVersion": server.resource_version().to_string()})
        );
    }
    // limit=0 (or negative) is no limit.
    assert_eq!(
        item_names(&get(&server, &format!("{PODS}?limit=0"), 200)).len(),
        6
    );
}

#[test]
fn continuations_see_the_first_pages_snapshot() {
    let server = cluster();
    for name in ["a", "b", "c", "d", "e"] {
        pod(&server, "default", name, "node-a");
    }
    let first = get(&server, &format!("{PODS}?limit=2"), 200);
    let rv = first["metadata"]["resourceVersion"].clone();
    let token = continue_of(&first).expect("a token");
    // Meanwhile: one created, one deleted, one changed, all after the first page.
    pod(&server, "default", "cc", "node-a");
    server.delete_pod("default", "d").expect("delete d");
    server.set_pod_phase("default", "e", "Succeeded");
    let rest = get(&server, &format!("{PODS}?limit=10&continue={token}"), 200);
    assert_eq!(item_names(&rest), ["c", "d", "e"]);
    assert_eq!(rest["metadata"]["resourceVersion"], rv);
    assert_eq!(rest["items"][2]["status"]["phase"], "Running");
    assert_eq!(continue_of(&rest), None);
    // A new list sees the present.
    let now = get(&server, &format!("{PODS}?limit=10"), 200);
    assert_eq!(item_names(&now), ["a", "b", "c", "cc", "e"]);
    assert_eq!(now["items"][4]["status"]["phase"], "Succeeded");
}

#[test]
fn a_field_selector_with_a_limit_pages_only_the_matching_pods() {
    let server = cluster();
    for (name, node) in [
        ("p1", "node-a"),
        ("p2", "node-b"),
        ("p3", "node-a"),
        ("p4", "node-a"),
        ("p5", "node-b"),
        ("p6", "node-a"),
        ("p7", "node-b"),
    ] {
        pod(&server, "default", name, node);
    }
    let path = "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&limit=2";
    let pages = all_pages(&server, path);
    let names: Vec<Vec<String>> = pages.iter().map(item_names).collect();
    // As etcd3: a full page is followed by a token while any pod comes after it (p7, on
    // node-b, here), so the last page is empty; with a selector there is no count.
    assert_eq!(
        names,
        [vec!["p1", "p3"], vec!["p4", "p6"], Vec::<&str>::new()]
    );
    assert!(pages.iter().all(|p| remaining_of(p).is_none()));
    assert_eq!(continue_of(&pages[2]), None);

    // A node may page its own pods (the Node authorizer looks at the field selector only).
    let node_token = server.node_token("node-a");
    let (code, first) = raw(&server, &node_token, "GET", path, None);
    assert_eq!(code, 200, "{first}");
    let token = continue_of(&first).expect("a token");
    let (code, second) = raw(
        &server,
        &node_token,
        "GET",
        &format!("{path}&continue={token}"),
        None,
    );
    assert_eq!(code, 200, "{second}");
    assert_eq!(item_names(&second), ["p4", "p6"]);
    // ... and not the others' pods, token or not.
    let (code, _) = raw(
        &server,
        &node_token,
        "GET",
        &format!("/api/v1/pods?limit=2&continue={token}"),
        None,
    );
    assert_eq!(code, 403);
}

#[test]
fn pages_cross_namespaces_and_cluster_scoped_lists() {
    let server = cluster();
    server.create_namespace("apps");
    pod(&server, "apps", "z", "node-a");
    pod(&server, "default", "a", "node-a");
    pod(&server, "default", "b", "node-a");
    let pages = all_pages(&server, "/api/v1/pods?limit=1");
    let names: Vec<Vec<String>> = pages.iter().map(item_names).collect();
    assert_eq!(names, [vec!["z"], vec!["a"], vec!["b"]]);
    assert_eq!(remaining_of(&pages[0]), Some(2));

    let nodes = all_pages(&server, "/api/v1/nodes?limit=1");
    let names: Vec<Vec<String>> = nodes.iter().map(item_names).collect();
    assert_eq!(names, [vec!["node-a"], vec!["node-b"]]);
    assert_eq!(nodes[0]["kind"], "NodeList");
}

#[test]
fn invalid_tokens_and_parameters_are_refused_with_the_real_messages() {
    let server = cluster();
    pod(&server, "default", "a", "node-a");
    pod(&server, "default", "b", "node-a");
    let body = get(&server, &format!("{PODS}?limit=1&continue=bogus"), 400);
    assert_eq!(body["reason"], "BadRequest");
    assert_eq!(
        body["message"],
        "invalid continue token: continue key is not valid: illegal base64 data at input byte 4"
    );
    // base64url of `{"v":"meta.k8s.io/v1","rv":0,"start":"a"}`.
    let body = get(
        &server,
        &format!("{PODS}?limit=1&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MCwic3RhcnQiOiJhIn0"),
        400,
    );
    assert_eq!(
        body["message"],
        "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
    );
    let first = get(&server, &format!("{PODS}?limit=1"), 200);
    let token = continue_of(&first).expect("a token");
    let body = get(
        &server,
        &format!("{PODS}?limit=1&continue={token}&resourceVersion=5"),
        400,
    );
    assert_eq!(
        body["message"],
        "specifying resource version is not allowed when using continue"
    );
    // resourceVersion=0 is allowed with a token.
    let next = get(
        &server,
        &format!("{PODS}?limit=1&continue={token}&resourceVersion=0"),
        200,
    );
    assert_eq!(item_names(&next), ["b"]);
    let body = get(
        &server,
        &format!("{PODS}?limit=1&continue={token}&resourceVersionMatch=NotOlderThan"),
        422,
    );
    assert_eq!(
        body["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided]"
    );
    let body = get(&server, &format!("{PODS}?limit=x"), 400);
    assert_eq!(
        body["message"],
        "strconv.ParseInt: parsing \"x\": invalid syntax"
    );
}

#[test]
fn a_continuation_whose_snapshot_is_gone_is_410_with_a_token_for_the_rest() {
    let server = cluster();
    for name in ["a", "b", "c", "d"] {
        pod(&server, "default", name, "node-a");
    }
    let first = get(&server, &format!("{PODS}?limit=2"), 200);
    let token = continue_of(&first).expect("a token");
    pod(&server, "default", "e", "node-a");
    server.compact_history();
    let body = get(&server, &format!("{PODS}?limit=2&continue={token}"), 410);
    assert_eq!(body["reason"], "Expired");
    assert_eq!(
        body["message"],
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
    );
    // Its token goes on from the same key, with the current objects.
    let retry = body["metadata"]["continue"]
        .as_str()
        .expect("a token in the Status");
    let rest = all_pages(&server, &format!("{PODS}?limit=2&continue={retry}"));
    let names: Vec<Vec<String>> = rest.iter().map(item_names).collect();
    assert_eq!(names, [vec!["c", "d"], vec!["e"]]);
    assert_eq!(
        rest[0]["metadata"]["resourceVersion"],
        json!(server.resource_version().to_string())
    );

    // A first page at a resourceVersion the history no longer covers (the legacy exact
    // semantics of limit with a resourceVersion).
    let body = get(&server, &format!("{PODS}?limit=2&resourceVersion=101"), 410);
    assert_eq!(
        body["message"],
        "The resourceVersion for the provided list is too old."
    );
}

#[test]
fn resource_version_zero_is_served_whole_and_watches_ignore_limit() {
    let server = cluster();
    for name in ["a", "b", "c"] {
        pod(&server, "default", name, "node-a");
    }
    // The watch cache serves resourceVersion=0 and ignores the limit.
    let whole = get(&server, &format!("{PODS}?limit=1&resourceVersion=0"), 200);
    assert_eq!(item_names(&whole), ["a", "b", "c"]);
    assert_eq!(continue_of(&whole), None);
    let mut stream = watch(&server, &format!("{PODS}?watch=true&limit=1"));
    let events: Vec<(String, String)> = (0..3).map(|_| summary(&next_event(&mut stream))).collect();
    assert_eq!(
        events,
        [
            ("ADDED".to_string(), "a".to_string()),
            ("ADDED".to_string(), "b".to_string()),
            ("ADDED".to_string(), "c".to_string()),
        ]
    );
}

#[tokio::test]
async fn kube_rs_pages_with_list_params() {
    let server = cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    for i in 1..=5 {
        pod(&server, "default", &format!("web-{i}"), "node-a");
    }
    let client = admin(&server, dir.path()).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut names = Vec::new();
    let mut params = ListParams::default().limit(2);
    loop {
        let page = pods.list(&params).await.expect("a page");
        assert!(page.items.len() <= 2);
        names.extend(page.items.iter().filter_map(|p| p.metadata.name.clone()));
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(names, ["web-1", "web-2", "web-3", "web-4", "web-5"]);
    let first = pods
        .list(&ListParams::default().limit(2))
        .await
        .expect("a page");
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let err = status_of(
        pods.list(&ListParams::default().limit(2).continue_token("bogus"))
            .await,
    );
    assert_eq!(err.code, 400);
    assert_eq!(
        err.message,
        "invalid continue token: continue key is not valid: illegal base64 data at input byte 4"
    );
}
