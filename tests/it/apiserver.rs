//! Tests of the fake API server (the `testkit` crate): real kubectl against it (the
//! v1.11 Dynamic Kubelet Configuration workflow, adapted to kubelet-pivot's annotation), and
//! direct HTTP checks that it answers and fails the way kube-apiserver does.

use crate::support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::kubectl::Kubectl;
use testkit::ApiServer;

const NODE: &str = "node-1";
const CONFIG_NS: &str = "kubelet-config";
const ANNOTATION: &str = "kubelet-pivot.io/config-source";
/// How long a test waits for something that should happen at once.
const PATIENCE: Duration = Duration::from_secs(5);

// ------------------------------------------------------------------------------------------
// A tiny HTTP/1.1 client
// ------------------------------------------------------------------------------------------

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        testkit::header(&self.headers, name)
    }

    /// Asserts a Failure Status with this code and reason; returns the message.
    fn assert_status(&self, code: u16, reason: &str) -> String {
        assert_eq!(self.status, code, "unexpected response: {}", self.body);
        assert_eq!(self.body["kind"], "Status", "not a Status: {}", self.body);
        assert_eq!(self.body["apiVersion"], "v1");
        assert_eq!(self.body["metadata"], json!({}));
        assert_eq!(self.body["status"], "Failure");
        assert_eq!(self.body["reason"], reason, "{}", self.body);
        assert_eq!(self.body["code"], code);
        self.body["message"]
            .as_str()
            .unwrap_or_else(|| panic!("Status without message: {}", self.body))
            .to_string()
    }
}

fn connect(server: &ApiServer) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", server.port()))
        .unwrap_or_else(|err| panic!("failed to connect to {}: {err}", server.url()));
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("set read timeout");
    stream
}

fn write_request(
    stream: &mut TcpStream,
    server: &ApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\nAccept: application/json\r\nConnection: close\r\nContent-Length: {}\r\n",
        server.port(),
        server.token(),
        body.len()
    );
    if let Some(content_type) = content_type {
        head.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .unwrap_or_else(|err| panic!("failed to send {method} {path}: {err}"));
}

fn read_head(reader: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("read status line");
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("read header");
        let line = line.trim_end();
        if line.is_empty() {
            return (status, headers);
        }
        let (key, value) = line.split_once(':').expect("header has a colon");
        headers.push((key.trim().to_string(), value.trim().to_string()));
    }
}

fn request(
    server: &ApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Response {
    request_bytes(server, method, path, content_type, body.as_bytes())
}

fn request_bytes(
    server: &ApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Response {
    let mut stream = connect(server);
    write_request(&mut stream, server, method, path, content_type, body);
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let length: usize = testkit::header(&headers, "content-length")
        .and_then(|value| value.parse().ok())
        .expect("response has a Content-Length");
    let mut bytes = vec![0; length];
    reader.read_exact(&mut bytes).expect("read body");
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|err| {
        panic!(
            "{method} {path}: body is not JSON ({err}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    Response {
        status,
        headers,
        body,
    }
}

fn get(server: &ApiServer, path: &str) -> Response {
    request(server, "GET", path, None, "")
}

/// A request with a JSON body.
fn send_json(server: &ApiServer, method: &str, path: &str, body: &Value) -> Response {
    request(
        server,
        method,
        path,
        Some("application/json"),
        &body.to_string(),
    )
}

fn post(server: &ApiServer, path: &str, body: &Value) -> Response {
    send_json(server, "POST", path, body)
}

fn put(server: &ApiServer, path: &str, body: &Value) -> Response {
    send_json(server, "PUT", path, body)
}

fn patch(server: &ApiServer, path: &str, content_type: &str, body: &Value) -> Response {
    request(server, "PATCH", path, Some(content_type), &body.to_string())
}

const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";

/// A watch stream: chunked JSON lines.
struct Watch {
    reader: BufReader<TcpStream>,
    status: u16,
}

impl Watch {
    fn open(server: &ApiServer, path_and_query: &str) -> Watch {
        let mut stream = connect(server);
        write_request(&mut stream, server, "GET", path_and_query, None, b"");
        let mut reader = BufReader::new(stream);
        let (status, headers) = read_head(&mut reader);
        if status == 200 {
            assert!(
                headers
                    .iter()
                    .any(|(key, value)| key.eq_ignore_ascii_case("transfer-encoding")
                        && value == "chunked"),
                "a watch stream is chunked: {headers:?}"
            );
        }
        Watch { reader, status }
    }

    /// The next event, or `None` once the server ended the stream; panics after `timeout`.
    fn next_within(&mut self, timeout: Duration) -> Option<Value> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout))
            .expect("set read timeout");
        let mut size_line = String::new();
        match self.reader.read_line(&mut size_line) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(err) => panic!("no watch event within {timeout:?}: {err}"),
        }
        let size = usize::from_str_radix(size_line.trim(), 16)
            .unwrap_or_else(|_| panic!("bad chunk size line {size_line:?}"));
        if size == 0 {
            return None;
        }
        let mut chunk = vec![0; size + 2];
        self.reader.read_exact(&mut chunk).expect("read chunk");
        let text = std::str::from_utf8(&chunk[..size]).expect("UTF-8 event");
        assert!(text.ends_with('\n'), "one JSON line per chunk: {text:?}");
        Some(serde_json::from_str(text).unwrap_or_else(|err| panic!("bad event {text:?}: {err}")))
    }

    fn next(&mut self) -> Value {
        self.next_within(PATIENCE)
            .expect("the watch stream ended, an event was expected")
    }

    /// Asserts the stream ends (cleanly) within `timeout`.
    fn assert_ends_within(&mut self, timeout: Duration) {
        if let Some(event) = self.next_within(timeout) {
            panic!("expected the stream to end, got {event}");
        }
    }
}

/// The next event that is not a BOOKMARK.
fn skip_bookmarks(watch: &mut Watch) -> Value {
    loop {
        let event = watch.next();
        if event["type"] != "BOOKMARK" {
            return event;
        }
    }
}

/// `(a, b)` as owned strings: what [`event_summary`] returns, for comparisons.
fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

fn event_summary(event: &Value) -> (String, String) {
    (
        event["type"].as_str().unwrap_or("").to_string(),
        event["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}

/// The `details` of a Status about ConfigMap `name`.
fn configmap_details(name: &str) -> Value {
    json!({"name": name, "kind": "configmaps"})
}

fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("no numeric resourceVersion in {obj}"))
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const CONFIGMAPS: &str = "/api/v1/namespaces/kubelet-config/configmaps";

// ------------------------------------------------------------------------------------------
// kubectl: the Dynamic Kubelet Configuration workflow
// ------------------------------------------------------------------------------------------

/// kubectl pointed at `server` (with its own kubeconfig and discovery cache); `None` (with
/// the reason printed) if kubectl is not installed.
fn kubectl_for(server: &ApiServer) -> Option<Kubectl> {
    Kubectl::new(|path| server.write_kubeconfig(path))
}

/// Writes a kubelet config to `kubelet` in kubectl's dir; returns its text and the
/// `--from-file=kubelet=<file>` argument.
fn kubelet_config_file(kubectl: &Kubectl) -> (String, String) {
    let file = kubectl.path("kubelet");
    let text = support::kubelet_config("maxPods: 50\n");
    std::fs::write(&file, &text).expect("write kubelet config");
    (text, format!("--from-file=kubelet={}", file.display()))
}

/// kubectl arguments `<verb> configmap my-node-config -n kubelet-config <extra..>`.
fn my_configmap<'a>(verb: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![verb, "configmap", "my-node-config", "-n", CONFIG_NS];
    args.extend_from_slice(extra);
    args
}

/// `kubectl create configmap --from-file` (plain and `--append-hash`), `kubectl annotate
/// node`, `kubectl get node -o json` and `kubectl get configmap -o yaml`. kubectl's generators,
/// annotate, patch and get need neither OpenAPI documents nor aggregated discovery: the
/// legacy discovery documents suffice, and kubectl >= 1.2x's protobuf create body is decoded.
#[test]
fn kubectl_creates_configmaps_and_annotates_the_node() {
    let server = ApiServer::start();
    server.create_node(NODE, [("kubernetes.io/os", "linux")]);
    let Some(kubectl) = kubectl_for(&server) else {
        return;
    };
    let (config_text, from_file) = kubelet_config_file(&kubectl);

    let out = kubectl.ok(&my_configmap("create", &[&from_file]));
    assert_eq!(out.trim(), "configmap/my-node-config created");
    let out = kubectl.ok(&my_configmap("create", &[&from_file, "--append-hash"]));
    let hashed = out
        .trim()
        .strip_prefix("configmap/")
        .and_then(|rest| rest.strip_suffix(" created"))
        .unwrap_or_else(|| panic!("unexpected output {out:?}"))
        .to_string();
    assert!(
        hashed.starts_with("my-node-config-") && hashed.len() == "my-node-config-".len() + 10,
        "--append-hash names the ConfigMap my-node-config-<10 chars>: {hashed}"
    );
    // Creating it again is the real AlreadyExists error (kubectl >= 1.2x wraps the message
    // in "error: failed to create configmap: ", 1.20 prints "Error from server (AlreadyExists): ").
    let err = kubectl.fails(&my_configmap("create", &[&from_file]));
    assert!(
        err.contains(r#"configmaps "my-node-config" already exists"#),
        "{err}"
    );
    let stored = server
        .configmap(CONFIG_NS, "my-node-config")
        .expect("the ConfigMap is stored");
    assert_eq!(stored["data"]["kubelet"], config_text.as_str());
    assert!(stored["metadata"]["uid"]
        .as_str()
        .is_some_and(|uid| uid.len() == 36));

    let source = format!("{ANNOTATION}=kubelet-config/my-node-config:kubelet");
    let out = kubectl.ok(&["annotate", "node", NODE, &source]);
    assert_eq!(out.trim(), format!("node/{NODE} annotated"));
    assert_eq!(
        server.node(NODE)["metadata"]["annotations"][ANNOTATION],
        "kubelet-config/my-node-config:kubelet"
    );
    // kubectl annotate sends a JSON merge patch.
    let annotate = server
        .requests()
        .into_iter()
        .rfind(|r| r.method == "PATCH")
        .expect("kubectl annotate patched the node");
    assert_eq!(annotate.path, format!("/api/v1/nodes/{NODE}"));
    assert_eq!(
        annotate.content_type.as_deref(),
        Some("application/merge-patch+json")
    );

    let node: Value = serde_json::from_str(&kubectl.ok(&["get", "node", NODE, "-o", "json"]))
        .expect("kubectl get -o json prints JSON");
    assert_eq!(node["kind"], "Node");
    assert_eq!(
        node["metadata"]["annotations"][ANNOTATION],
        "kubelet-config/my-node-config:kubelet"
    );
    assert_eq!(node["metadata"]["annotations"]["kubernetes.io/os"], "linux");

    let listed: Value =
        serde_yaml_ng::from_str(&kubectl.ok(&["get", "configmap", "-n", CONFIG_NS, "-o", "yaml"]))
            .expect("kubectl get -o yaml prints YAML");
    let names: Vec<&str> = listed["items"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, vec!["my-node-config", hashed.as_str()]);
    for item in listed["items"].as_array().into_iter().flatten() {
        assert_eq!(item["data"]["kubelet"], config_text.as_str());
    }
}

/// `kubectl patch node -p '{"spec":{"configSource":...}}'` (strategic merge, the default):
/// a current server drops the field with a warning (so kubectl reports no change); an old
/// server (`keep_config_source(true)`) stores it and validates it like v1.11 did.
#[test]
fn kubectl_patch_config_source_is_dropped_unless_the_server_is_old() {
    let server = ApiServer::start();
    server.create_node(NODE, [("kubernetes.io/os", "linux")]);
    let Some(kubectl) = kubectl_for(&server) else {
        return;
    };
    let source = json!({"spec": {"configSource": {"configMap": {
        "name": "my-node-config", "namespace": CONFIG_NS, "kubeletConfigKey": "kubelet"}}}})
    .to_string();

    let output = kubectl.run(&["patch", "node", NODE, "-p", &source]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.trim(), format!("node/{NODE} patched (no change)"));
    assert!(
        !stderr.contains("configSource"),
        "dropped before warnings are computed: {stderr}"
    );
    assert!(server.node(NODE)["spec"].get("configSource").is_none());
    let sent = server
        .requests()
        .into_iter()
        .rfind(|r| r.method == "PATCH")
        .expect("kubectl patch sent a PATCH");
    assert_eq!(
        sent.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );

    server.keep_config_source(true);
    let out = kubectl.ok(&["patch", "node", NODE, "-p", &source]);
    assert_eq!(out.trim(), format!("node/{NODE} patched"));
    assert_eq!(
        server.node(NODE)["spec"]["configSource"]["configMap"]["name"],
        "my-node-config"
    );
    // v1.11 validation: uid may not be set in spec.
    let with_uid = json!({"spec": {"configSource": {"configMap": {"uid": "x"}}}}).to_string();
    let err = kubectl.fails(&["patch", "node", NODE, "-p", &with_uid]);
    assert!(
        err.contains(r#"The Node "node-1" is invalid: spec.configSource.configMap.uid: Forbidden: uid must not be set in spec"#),
        "{err}"
    );

    // Back on a current server, a node that already has the field keeps it (dropDisabledFields
    // only drops it when the stored node does not use it), with the real warning.
    server.keep_config_source(false);
    let output = kubectl.run(&["annotate", "node", NODE, "touched=yes"]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("Warning: spec.configSource: the feature is removed"),
        "{stderr}"
    );
    assert!(server.node(NODE)["spec"].get("configSource").is_some());
}

/// An immutable ConfigMap: `kubectl patch` of its data fails with the real message.
/// (`kubectl create configmap` has no --immutable flag and `kubectl create -f` needs the
/// OpenAPI documents this server does not serve unless given `--validate=false`; so the
/// ConfigMap is made immutable with a patch.)
#[test]
fn kubectl_patch_of_an_immutable_configmap_fails() {
    let server = ApiServer::start();
    let Some(kubectl) = kubectl_for(&server) else {
        return;
    };
    let (_, from_file) = kubelet_config_file(&kubectl);
    kubectl.ok(&my_configmap("create", &[&from_file]));
    let out = kubectl.ok(&my_configmap("patch", &["-p", r#"{"immutable":true}"#]));
    assert_eq!(out.trim(), "configmap/my-node-config patched");

    let err = kubectl.fails(&my_configmap(
        "patch",
        &["-p", r#"{"data":{"kubelet":"maxPods: 10"}}"#],
    ));
    assert!(
        err.contains(
            "The ConfigMap \"my-node-config\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
        ),
        "{err}"
    );
    let err = kubectl.fails(&my_configmap(
        "patch",
        &["--type=merge", "-p", r#"{"immutable":false}"#],
    ));
    assert!(
        err.contains("immutable: Forbidden: field is immutable when `immutable` is set"),
        "{err}"
    );
    // Metadata stays mutable.
    kubectl.ok(&my_configmap("label", &["tier=node"]));
    let stored = server
        .configmap(CONFIG_NS, "my-node-config")
        .expect("stored");
    assert_eq!(stored["metadata"]["labels"]["tier"], "node");
    assert_eq!(stored["immutable"], true);
}

// ------------------------------------------------------------------------------------------
// Status objects
// ------------------------------------------------------------------------------------------

#[test]
fn errors_are_real_status_objects() {
    let server = ApiServer::start();
    server.create_configmap(CONFIG_NS, "cm", data(&[("k", "v")]), false);

    // 404
    let res = get(&server, &format!("{CONFIGMAPS}/missing"));
    let message = res.assert_status(404, "NotFound");
    assert_eq!(message, r#"configmaps "missing" not found"#);
    assert_eq!(res.body["details"], configmap_details("missing"));
    let res = get(&server, "/api/v1/nodes/missing");
    assert_eq!(
        res.assert_status(404, "NotFound"),
        r#"nodes "missing" not found"#
    );
    let res = get(&server, "/api/v1/secrets");
    assert_eq!(
        res.assert_status(404, "NotFound"),
        "the server could not find the requested resource"
    );

    // 409 AlreadyExists
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
    let res = post(&server, CONFIGMAPS, &body);
    assert_eq!(
        res.assert_status(409, "AlreadyExists"),
        r#"configmaps "cm" already exists"#
    );
    assert_eq!(res.body["details"], configmap_details("cm"));

    // 422 Invalid: a missing name, an invalid name.
    let res = post(
        &server,
        CONFIGMAPS,
        &json!({"kind": "ConfigMap", "metadata": {}}),
    );
    assert_eq!(
        res.assert_status(422, "Invalid"),
        r#"ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required"#
    );
    assert_eq!(
        res.body["details"]["causes"],
        json!([{"reason": "FieldValueRequired", "message": "Required value: name or generateName is required", "field": "metadata.name"}])
    );
    let res = post(
        &server,
        CONFIGMAPS,
        &json!({"metadata": {"name": "Bad_Name"}}),
    );
    let message = res.assert_status(422, "Invalid");
    assert!(
        message.starts_with(r#"ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain"#),
        "{message}"
    );
    let res = post(
        &server,
        CONFIGMAPS,
        &json!({"metadata": {"name": "x"}, "data": {"bad/key": "v"}}),
    );
    assert!(res
        .assert_status(422, "Invalid")
        .contains("data[bad/key]: Invalid value: \"bad/key\": a valid config key"));

    // 400: the body's namespace differs from the URL's (the real server's BadRequest).
    let res = post(
        &server,
        CONFIGMAPS,
        &json!({"metadata": {"name": "x", "namespace": "default"}}),
    );
    assert_eq!(
        res.assert_status(400, "BadRequest"),
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    // 404 for a namespace that does not exist (NamespaceLifecycle admission).
    let res = post(
        &server,
        "/api/v1/namespaces/nope/configmaps",
        &json!({"metadata": {"name": "x"}}),
    );
    assert_eq!(
        res.assert_status(404, "NotFound"),
        r#"namespaces "nope" not found"#
    );

    // 415 for a PATCH content type the server does not take (incl. server-side apply).
    for content_type in [
        "application/json",
        "application/apply-patch+yaml",
        "text/plain",
    ] {
        let res = patch(
            &server,
            &format!("{CONFIGMAPS}/cm"),
            content_type,
            &json!({}),
        );
        let message = res.assert_status(415, "UnsupportedMediaType");
        assert!(
            message.starts_with("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json"),
            "{message}"
        );
    }

    // 405 for a method the path does not serve.
    let res = request(&server, "PUT", CONFIGMAPS, Some("application/json"), "{}");
    assert_eq!(
        res.assert_status(405, "MethodNotAllowed"),
        "the server does not allow this method on the requested resource"
    );

    // 400 strict decoding when asked; a warning otherwise.
    let unknown = json!({"metadata": {"name": "typo"}, "datta": {}});
    let res = post(
        &server,
        &format!("{CONFIGMAPS}?fieldValidation=Strict"),
        &unknown,
    );
    assert_eq!(
        res.assert_status(400, "BadRequest"),
        r#"strict decoding error: unknown field "datta""#
    );
    let res = post(&server, CONFIGMAPS, &unknown);
    assert_eq!(res.status, 201);
    assert_eq!(
        res.header("Warning"),
        Some(r#"299 - "unknown field \"datta\"""#)
    );
    assert!(res.body.get("datta").is_none());
}

#[test]
fn authentication_and_rbac_failures_are_real() {
    let server = ApiServer::start();
    server.create_node(NODE, [("a", "b")]);
    let raw = |auth: Option<&str>, path: &str| -> (u16, Value) {
        let mut stream = connect(&server);
        let auth = auth
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).expect("send");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("read");
        let code = text[9..12].parse().expect("status code");
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        (code, serde_json::from_str(body).unwrap_or(Value::Null))
    };
    // A wrong token is 401 Unauthorized.
    let (code, body) = raw(Some("Bearer wrong"), "/api/v1/nodes");
    assert_eq!((code, body["reason"].as_str()), (401, Some("Unauthorized")));
    // No credentials: the insecure port's user, unless the token is required.
    assert_eq!(raw(None, "/api/v1/nodes").0, 200);
    server.require_token(true);
    let (code, body) = raw(None, "/api/v1/nodes");
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        r#"nodes is forbidden: User "system:anonymous" cannot list resource "nodes" in API group "" at the cluster scope"#
    );
    let (code, body) = raw(None, "/api");
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        r#"forbidden: User "system:anonymous" cannot get path "/api""#
    );
    assert_eq!(raw(None, "/version").0, 200);
    let token = format!("Bearer {}", server.token());
    assert_eq!(raw(Some(&token), "/api/v1/nodes").0, 200);

    // RBAC denial, with the verb, resource and namespace in the message.
    server.deny("get", "configmaps", Some(CONFIG_NS));
    let res = get(&server, &format!("{CONFIGMAPS}/my-node-config"));
    assert_eq!(
        res.assert_status(403, "Forbidden"),
        r#"configmaps "my-node-config" is forbidden: User "kubelet-pivot-test" cannot get resource "configmaps" in API group "" in the namespace "kubelet-config""#
    );
    assert_eq!(
        get(&server, CONFIGMAPS).status,
        200,
        "list is still allowed"
    );
    server.deny("patch", "nodes/status", None);
    let res = patch(
        &server,
        &format!("/api/v1/nodes/{NODE}/status"),
        MERGE,
        &json!({}),
    );
    assert!(res
        .assert_status(403, "Forbidden")
        .contains(r#"cannot patch resource "nodes/status" in API group "" at the cluster scope"#));
    server.allow_all();
    assert_eq!(
        get(&server, &format!("{CONFIGMAPS}/my-node-config")).status,
        404
    );
}

// ------------------------------------------------------------------------------------------
// Watches
// ------------------------------------------------------------------------------------------

#[test]
fn watch_resumes_after_a_resource_version_with_exactly_the_later_events() {
    let server = ApiServer::start();
    let first = server.create_configmap(CONFIG_NS, "a", data(&[("k", "1")]), false);
    let resume_from = rv_of(&first);
    server
        .update_configmap_data(CONFIG_NS, "a", data(&[("k", "2")]))
        .expect("update a");
    server.create_configmap(CONFIG_NS, "b", data(&[]), false);
    server.create_configmap("default", "elsewhere", data(&[]), false);
    server.delete_configmap(CONFIG_NS, "a");

    let mut watch = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&resourceVersion={resume_from}"),
    );
    assert_eq!(watch.status, 200);
    let mut seen = Vec::new();
    let mut rvs = Vec::new();
    for _ in 0..3 {
        let event = watch.next();
        rvs.push(rv_of(&event["object"]));
        assert_eq!(event["object"]["kind"], "ConfigMap");
        assert_eq!(event["object"]["apiVersion"], "v1");
        seen.push(event_summary(&event));
    }
    assert_eq!(
        seen,
        vec![
            pair("MODIFIED", "a"),
            pair("ADDED", "b"),
            pair("DELETED", "a"),
        ]
    );
    assert!(
        rvs.windows(2).all(|w| w[0] < w[1]),
        "increasing resourceVersions: {rvs:?}"
    );
    assert!(rvs[0] > resume_from);
    // Then live events, and nothing in between.
    server.create_configmap(CONFIG_NS, "c", data(&[]), false);
    assert_eq!(event_summary(&watch.next()), pair("ADDED", "c"));

    // Without a resourceVersion: the current objects as ADDED, then live.
    let mut fresh = Watch::open(&server, &format!("{CONFIGMAPS}?watch=1"));
    let names: Vec<(String, String)> = (0..2).map(|_| event_summary(&fresh.next())).collect();
    assert_eq!(names, vec![pair("ADDED", "b"), pair("ADDED", "c")]);
    server
        .update_configmap_data(CONFIG_NS, "b", data(&[("x", "y")]))
        .expect("update b");
    assert_eq!(event_summary(&fresh.next()), pair("MODIFIED", "b"));
}

#[test]
fn watch_from_a_too_old_resource_version_gets_a_410_error_event() {
    let server = ApiServer::start();
    server.set_history_limit(3);
    let first = server.create_configmap(CONFIG_NS, "a", data(&[]), false);
    for i in 0..5 {
        server.create_configmap(CONFIG_NS, &format!("n{i}"), data(&[]), false);
    }
    let mut watch = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&resourceVersion={}", rv_of(&first)),
    );
    assert_eq!(watch.status, 200, "the error comes inside a 200 stream");
    let event = watch.next();
    assert_eq!(event["type"], "ERROR");
    let status = &event["object"];
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "Expired");
    assert_eq!(status["code"], 410);
    let oldest_kept = server.resource_version() - 3 + 1;
    assert_eq!(
        status["message"],
        format!(
            "too old resource version: {} ({})",
            rv_of(&first),
            oldest_kept - 1
        )
    );
    watch.assert_ends_within(PATIENCE);
    assert_eq!(server.open_watches(CONFIGMAPS), 0);

    // After a compaction every earlier resourceVersion is too old.
    let now = server.resource_version();
    server.compact_history();
    let mut watch = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&resourceVersion={}", now - 1),
    );
    assert_eq!(watch.next()["object"]["code"], 410);
    // ... but the current one is fine.
    let mut watch = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&resourceVersion={now}"),
    );
    server.create_configmap(CONFIG_NS, "later", data(&[]), false);
    assert_eq!(event_summary(&watch.next()), pair("ADDED", "later"));
}

#[test]
fn bookmarks_arrive_only_when_asked() {
    let server = ApiServer::start();
    server.set_bookmark_interval(Duration::from_millis(100));
    server.create_configmap(CONFIG_NS, "a", data(&[]), false);
    let rv = server.resource_version();
    let mut watch = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"),
    );
    let bookmark = watch.next();
    assert_eq!(bookmark["type"], "BOOKMARK");
    let object = bookmark["object"].as_object().expect("object");
    assert_eq!(object["kind"], "ConfigMap");
    assert_eq!(object["apiVersion"], "v1");
    assert_eq!(rv_of(&bookmark["object"]), rv);
    assert_eq!(
        object.len(),
        3,
        "only kind, apiVersion and metadata: {bookmark}"
    );
    // After a change the bookmark carries the new resourceVersion (periodic bookmarks may
    // come before the change is seen).
    server.create_configmap(CONFIG_NS, "b", data(&[]), false);
    let added = skip_bookmarks(&mut watch);
    assert_eq!(event_summary(&added), pair("ADDED", "b"));
    let next = watch.next();
    assert_eq!(next["type"], "BOOKMARK");
    assert_eq!(rv_of(&next["object"]), server.resource_version());

    drop(watch);

    // On request, at once.
    server.set_bookmark_interval(Duration::from_secs(3600));
    let mut quiet = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"),
    );
    // Registered before its response head was written, so before `open` returned.
    assert_eq!(quiet.next()["type"], "ADDED", "b was created after {rv}");
    let asked = Instant::now();
    server.send_bookmark();
    assert_eq!(quiet.next()["type"], "BOOKMARK");
    assert!(asked.elapsed() < Duration::from_secs(1));

    // Not asked: none.
    server.set_bookmark_interval(Duration::from_millis(50));
    let mut plain = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&resourceVersion={rv}"),
    );
    server.send_bookmark();
    server.create_configmap(CONFIG_NS, "c", data(&[]), false);
    let first = plain.next();
    assert_eq!(
        first["type"], "ADDED",
        "no BOOKMARK without allowWatchBookmarks: {first}"
    );
}

#[test]
fn field_and_label_selectors_filter_watch_events() {
    let server = ApiServer::start();
    let rv = server.resource_version();
    let mut by_name = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&resourceVersion={rv}&fieldSelector=metadata.name%3Dmine"),
    );
    let mut by_label = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&resourceVersion={rv}&labelSelector=tier%3Dnode"),
    );
    server.create_configmap(CONFIG_NS, "other", data(&[]), false);
    server.create_configmap(CONFIG_NS, "mine", data(&[("k", "1")]), false);
    server
        .update_configmap_data(CONFIG_NS, "other", data(&[("k", "2")]))
        .expect("update");
    server
        .update_configmap_data(CONFIG_NS, "mine", data(&[("k", "3")]))
        .expect("update");
    let events: Vec<_> = (0..2).map(|_| event_summary(&by_name.next())).collect();
    assert_eq!(
        events,
        vec![pair("ADDED", "mine"), pair("MODIFIED", "mine")]
    );

    // A label change moves an object into and out of a label-selected watch.
    let label = |value: Option<&str>| {
        let body = json!({"metadata": {"labels": {"tier": value}}});
        let res = patch(&server, &format!("{CONFIGMAPS}/other"), MERGE, &body);
        assert_eq!(res.status, 200, "{}", res.body);
    };
    label(Some("node"));
    label(None);
    assert_eq!(event_summary(&by_label.next()), pair("ADDED", "other"));
    let gone = by_label.next();
    assert_eq!(event_summary(&gone), pair("DELETED", "other"));
    assert_eq!(
        gone["object"]["metadata"]["labels"]["tier"], "node",
        "the last matching state"
    );

    // The same selectors on a list.
    let listed = get(
        &server,
        &format!("{CONFIGMAPS}?fieldSelector=metadata.name%3Dmine"),
    );
    assert_eq!(listed.body["kind"], "ConfigMapList");
    assert_eq!(listed.body["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed.body["items"][0]["metadata"]["name"], "mine");
    assert!(listed.body["metadata"]["resourceVersion"]
        .as_str()
        .is_some());
    let bad = get(&server, &format!("{CONFIGMAPS}?fieldSelector=data.k%3D1"));
    assert_eq!(
        bad.assert_status(400, "BadRequest"),
        "field label not supported: data.k"
    );
}

#[test]
fn drop_watches_closes_every_stream_and_timeouts_close_one() {
    let server = ApiServer::start();
    let mut a = Watch::open(&server, &format!("{CONFIGMAPS}?watch=true"));
    let mut b = Watch::open(&server, "/api/v1/nodes?watch=true");
    support::wait_until(PATIENCE, "two open watches", || {
        (server.open_watches("/api/v1/") == 2).then_some(())
    });
    assert_eq!(server.open_watches(CONFIGMAPS), 1);
    assert_eq!(server.open_watches("/api/v1/nodes"), 1);
    server.drop_watches();
    a.assert_ends_within(PATIENCE);
    b.assert_ends_within(PATIENCE);
    support::wait_until(PATIENCE, "no open watches", || {
        (server.open_watches("/") == 0).then_some(())
    });
    let watches: Vec<_> = server.requests().into_iter().filter(|r| r.watch).collect();
    assert_eq!(watches.len(), 2);

    // timeoutSeconds ends a stream cleanly.
    let started = Instant::now();
    let mut timed = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&timeoutSeconds=1"),
    );
    timed.assert_ends_within(PATIENCE);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn fail_next_gives_the_injected_status_then_normal_service() {
    let server = ApiServer::start();
    server.create_node(NODE, [("a", "b")]);
    let path = format!("/api/v1/nodes/{NODE}");
    server.fail_next(2, 500);
    for _ in 0..2 {
        let res = get(&server, &path);
        assert_eq!(
            res.assert_status(500, "InternalError"),
            "Internal error occurred: injected fault"
        );
    }
    assert_eq!(get(&server, &path).status, 200);

    server.fail_next(1, 429);
    let res = get(&server, &path);
    res.assert_status(429, "TooManyRequests");
    assert_eq!(res.header("Retry-After"), Some("1"));
    assert_eq!(res.body["details"]["retryAfterSeconds"], 1);
    assert_eq!(get(&server, &path).status, 200);

    // Watches are not counted by fail_next...
    server.fail_next(1, 500);
    let mut watch = Watch::open(&server, "/api/v1/nodes?watch=true");
    assert_eq!(watch.status, 200);
    assert_eq!(event_summary(&watch.next()).0, "ADDED");
    assert_eq!(get(&server, &path).status, 500);
    // ... but can be failed on purpose.
    server.fail_next_matching(1, 503, "GET", "/api/v1/nodes");
    let failed = Watch::open(&server, "/api/v1/nodes?watch=true");
    assert_eq!(failed.status, 503);

    // A delay slows every response down.
    server.set_delay(Duration::from_millis(200));
    let started = Instant::now();
    assert_eq!(get(&server, &path).status, 200);
    assert!(started.elapsed() >= Duration::from_millis(200));
}

// ------------------------------------------------------------------------------------------
// Writes: patches, subresources, preconditions
// ------------------------------------------------------------------------------------------

#[test]
fn strategic_merge_patch_merges_node_conditions_by_type() {
    let server = ApiServer::start();
    server.create_node(NODE, [("a", "b")]);
    let status_path = format!("/api/v1/nodes/{NODE}/status");
    let condition = |kind: &str, status: &str| {
        json!({"type": kind, "status": status, "reason": "Test", "message": "m",
               "lastHeartbeatTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"})
    };
    let res = patch(
        &server,
        &status_path,
        STRATEGIC,
        &json!({"status": {"conditions": [condition("KubeletConfigOK", "True")]}}),
    );
    assert_eq!(res.status, 200, "{}", res.body);
    let types = |node: &Value| -> Vec<(String, String)> {
        node["status"]["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap_or("").to_string(),
                    c["status"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        types(&res.body),
        vec![pair("Ready", "True"), pair("KubeletConfigOK", "True")]
    );
    // Same type again: merged in place, other conditions kept.
    let res = patch(
        &server,
        &status_path,
        STRATEGIC,
        &json!({"status": {"conditions": [{"type": "KubeletConfigOK", "status": "False"}]}}),
    );
    assert_eq!(
        types(&res.body),
        vec![pair("Ready", "True"), pair("KubeletConfigOK", "False")]
    );
    assert_eq!(
        res.body["status"]["conditions"][1]["reason"], "Test",
        "unpatched fields stay"
    );
    // A merge patch replaces the whole list instead.
    let res = patch(
        &server,
        &status_path,
        MERGE,
        &json!({"status": {"conditions": [condition("Ready", "False")]}}),
    );
    assert_eq!(types(&res.body), vec![pair("Ready", "False")]);
    // $patch: delete removes one element by its merge key.
    patch(
        &server,
        &status_path,
        STRATEGIC,
        &json!({"status": {"conditions": [condition("KubeletConfigOK", "True")]}}),
    );
    let res = patch(
        &server,
        &status_path,
        STRATEGIC,
        &json!({"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}}),
    );
    assert_eq!(types(&res.body), vec![pair("KubeletConfigOK", "True")]);
    // An element without the merge key is rejected.
    let res = patch(
        &server,
        &status_path,
        STRATEGIC,
        &json!({"status": {"conditions": [{"status": "True"}]}}),
    );
    assert!(res
        .assert_status(400, "BadRequest")
        .contains("does not contain declared merge key: type"));
}

#[test]
fn json_patch_operations_work_and_fail_like_the_real_server() {
    let server = ApiServer::start();
    server.create_configmap(CONFIG_NS, "cm", data(&[("a", "1"), ("b", "2")]), false);
    let path = format!("{CONFIGMAPS}/cm");
    let ops = json!([
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "10"},
        {"op": "add", "path": "/data/c", "value": "3"},
        {"op": "remove", "path": "/data/b"},
        {"op": "copy", "from": "/data/c", "path": "/data/d"},
        {"op": "move", "from": "/data/d", "path": "/data/e"},
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/example.com~1k", "value": "v"},
    ]);
    let res = patch(&server, &path, JSON_PATCH, &ops);
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.body["data"], json!({"a": "10", "c": "3", "e": "3"}));
    assert_eq!(
        res.body["metadata"]["annotations"],
        json!({"example.com/k": "v"})
    );

    let res = patch(
        &server,
        &path,
        JSON_PATCH,
        &json!([{"op": "test", "path": "/data/a", "value": "nope"}]),
    );
    assert_eq!(
        res.assert_status(422, "Invalid"),
        "the server rejected our request due to an error in our request"
    );
    let res = patch(
        &server,
        &path,
        JSON_PATCH,
        &json!([{"op": "remove", "path": "/data/missing"}]),
    );
    res.assert_status(422, "Invalid");
    let res = patch(&server, &path, JSON_PATCH, &json!({"op": "add"}));
    res.assert_status(400, "BadRequest");
    assert_eq!(
        server.configmap(CONFIG_NS, "cm").expect("stored")["data"]["a"],
        "10"
    );
}

#[test]
fn node_status_subresource_is_isolated_from_the_main_resource() {
    let server = ApiServer::start();
    server.create_node(NODE, [("a", "b")]);
    let node_path = format!("/api/v1/nodes/{NODE}");
    // The main resource ignores status changes ...
    let res = patch(
        &server,
        &node_path,
        MERGE,
        &json!({"spec": {"unschedulable": true}, "status": {"phase": "Terminated"}}),
    );
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.body["spec"]["unschedulable"], true);
    assert!(res.body["status"].get("phase").is_none());
    // ... the status subresource ignores spec changes (metadata changes go through, as on
    // the real server).
    let res = patch(
        &server,
        &format!("{node_path}/status"),
        MERGE,
        &json!({"spec": {"unschedulable": false}, "status": {"phase": "Running"}, "metadata": {"labels": {"l": "v"}}}),
    );
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.body["spec"]["unschedulable"], true);
    assert_eq!(res.body["status"]["phase"], "Running");
    assert_eq!(res.body["metadata"]["labels"]["l"], "v");
    // A status-only change through the main resource is a no-op: same resourceVersion.
    let before = rv_of(&server.node(NODE));
    let res = patch(
        &server,
        &node_path,
        MERGE,
        &json!({"status": {"phase": "Pending"}}),
    );
    assert_eq!(rv_of(&res.body), before);
    // status.config is dropped like spec.configSource on a current server.
    let config = json!({"status": {"config": {"error": "x"}}});
    let res = patch(&server, &format!("{node_path}/status"), MERGE, &config);
    assert!(res.body["status"].get("config").is_none());
    server.keep_config_source(true);
    let res = patch(&server, &format!("{node_path}/status"), MERGE, &config);
    assert_eq!(res.body["status"]["config"]["error"], "x");
}

#[test]
fn resource_version_preconditions_conflict() {
    let server = ApiServer::start();
    let created = server.create_configmap(CONFIG_NS, "cm", data(&[("k", "1")]), false);
    let path = format!("{CONFIGMAPS}/cm");
    let stale = created.clone();
    server
        .update_configmap_data(CONFIG_NS, "cm", data(&[("k", "2")]))
        .expect("update");

    let mut body = stale.clone();
    body["data"]["k"] = json!("3");
    let res = put(&server, &path, &body);
    assert_eq!(
        res.assert_status(409, "Conflict"),
        r#"Operation cannot be fulfilled on configmaps "cm": the object has been modified; please apply your changes to the latest version and try again"#
    );
    assert_eq!(res.body["details"], configmap_details("cm"));
    // A patch that carries the stale resourceVersion conflicts too.
    let res = patch(
        &server,
        &path,
        MERGE,
        &json!({"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]}, "data": {"k": "4"}}),
    );
    res.assert_status(409, "Conflict");
    // With the current one (or none) it applies.
    let current = server.configmap(CONFIG_NS, "cm").expect("stored");
    let mut body = current.clone();
    body["data"]["k"] = json!("5");
    let res = put(&server, &path, &body);
    assert_eq!(res.status, 200, "{}", res.body);
    assert!(rv_of(&res.body) > rv_of(&current));
    assert_eq!(res.body["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        res.body["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );
    body["metadata"]
        .as_object_mut()
        .expect("meta")
        .remove("resourceVersion");
    body["data"]["k"] = json!("6");
    assert_eq!(
        put(&server, &path, &body).status,
        200,
        "an unconditional update"
    );
    // An update that changes nothing writes nothing.
    let now = server.configmap(CONFIG_NS, "cm").expect("stored");
    let res = put(&server, &path, &now);
    assert_eq!(rv_of(&res.body), rv_of(&now));
    // PUT of a missing object is 404 (no create-on-update for these kinds).
    let res = put(
        &server,
        &format!("{CONFIGMAPS}/missing"),
        &json!({"metadata": {"name": "missing"}}),
    );
    res.assert_status(404, "NotFound");
    // DELETE with a uid precondition.
    let res = request(
        &server,
        "DELETE",
        &path,
        Some("application/json"),
        r#"{"preconditions":{"uid":"other"}}"#,
    );
    assert!(res
        .assert_status(409, "Conflict")
        .contains("Precondition failed: UID in precondition: other"));
    let res = request(&server, "DELETE", &path, None, "");
    assert_eq!(res.status, 200);
    assert_eq!(res.body["status"], "Success");
    assert_eq!(res.body["details"]["uid"], created["metadata"]["uid"]);
    assert!(server.configmap(CONFIG_NS, "cm").is_none());
}

#[test]
fn immutable_configmaps_reject_data_changes_with_the_real_422() {
    let server = ApiServer::start();
    server.create_configmap(CONFIG_NS, "frozen", data(&[("kubelet", "a")]), true);
    let err = server
        .update_configmap_data(CONFIG_NS, "frozen", data(&[("kubelet", "b")]))
        .expect_err("immutable");
    assert_eq!(err["code"], 422);
    assert_eq!(
        err["message"],
        "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    assert_eq!(
        err["details"],
        json!({"name": "frozen", "kind": "ConfigMap", "causes": [{
            "reason": "FieldValueForbidden",
            "message": "Forbidden: field is immutable when `immutable` is set",
            "field": "data"}]})
    );
    let res = patch(
        &server,
        &format!("{CONFIGMAPS}/frozen"),
        MERGE,
        &json!({"immutable": false, "binaryData": {"b": "AAEC"}}),
    );
    assert_eq!(
        res.assert_status(422, "Invalid"),
        "ConfigMap \"frozen\" is invalid: [immutable: Forbidden: field is immutable when `immutable` is set, binaryData: Forbidden: field is immutable when `immutable` is set]"
    );
    // Metadata changes are allowed.
    let res = patch(
        &server,
        &format!("{CONFIGMAPS}/frozen"),
        MERGE,
        &json!({"metadata": {"annotations": {"k": "v"}}}),
    );
    assert_eq!(res.status, 200, "{}", res.body);
}

#[test]
fn events_are_created_and_validated_in_both_api_groups() {
    let server = ApiServer::start();
    server.create_node(NODE, [("a", "b")]);
    // What kube-runtime's Recorder posts (events.k8s.io/v1), for a Node: namespace default.
    let event = json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "node-1.17a1", "namespace": "default"},
        "eventTime": "2024-01-01T00:00:00.000000Z",
        "reportingController": "kubelet-pivot.io/agent",
        "reportingInstance": "node-1",
        "action": "Reconcile",
        "reason": "ConfigApplied",
        "note": "applied kubelet-config/my-node-config",
        "type": "Normal",
        "regarding": {"kind": "Node", "name": NODE, "apiVersion": "v1"},
    });
    let res = post(
        &server,
        "/apis/events.k8s.io/v1/namespaces/default/events",
        &event,
    );
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(res.body["apiVersion"], "events.k8s.io/v1");
    assert_eq!(res.body["note"], "applied kubelet-config/my-node-config");
    // The same Event through core/v1.
    let core = get(&server, "/api/v1/namespaces/default/events/node-1.17a1");
    assert_eq!(
        core.body["message"],
        "applied kubelet-config/my-node-config"
    );
    assert_eq!(core.body["involvedObject"]["name"], NODE);
    assert_eq!(core.body["reportingComponent"], "kubelet-pivot.io/agent");
    assert_eq!(server.events().len(), 1);

    // events.k8s.io/v1 requires eventTime, a valid type, and more.
    let mut bad = event.clone();
    bad["metadata"]["name"] = json!("bad");
    bad.as_object_mut().expect("object").remove("eventTime");
    bad["type"] = json!("Info");
    let res = post(
        &server,
        "/apis/events.k8s.io/v1/namespaces/default/events",
        &bad,
    );
    assert_eq!(
        res.assert_status(422, "Invalid"),
        r#"Event.events.k8s.io "bad" is invalid: [eventTime: Required value, type: Invalid value: "": has invalid value: Info]"#
    );
    // A cluster-scoped object's event outside default/kube-system does not validate.
    let core_event = json!({
        "metadata": {"name": "x"},
        "involvedObject": {"kind": "Node", "name": NODE},
        "reason": "R", "message": "m", "type": "Warning",
    });
    let res = post(
        &server,
        "/api/v1/namespaces/kubelet-config/events",
        &core_event,
    );
    assert!(res.assert_status(422, "Invalid").contains(
        r#"involvedObject.namespace: Invalid value: "": does not match event.namespace"#
    ));
    let res = post(&server, "/api/v1/namespaces/default/events", &core_event);
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(server.events().len(), 2);
}

/// legacyValidateEvent: a core/v1 Event with eventTime set has a message of at most 1024
/// bytes and a reason of at most 128, else 422 Invalid (what a Node Event is held to).
#[test]
fn core_events_with_event_time_are_held_to_the_message_and_reason_limits() {
    let server = ApiServer::start();
    server.create_node(NODE, [("a", "b")]);
    let event = |name: &str, reason: &str, message: &str| {
        json!({
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": NODE, "apiVersion": "v1"},
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingComponent": "kubelet-pivot",
            "reportingInstance": NODE,
            "action": "Sync",
            "reason": reason, "message": message, "type": "Warning",
        })
    };
    let path = "/api/v1/namespaces/default/events";
    let res = post(&server, path, &event("ok", "R", &"m".repeat(1024)));
    assert_eq!(res.status, 201, "{}", res.body);
    let res = post(&server, path, &event("long", "R", &"m".repeat(1025)));
    assert!(res
        .assert_status(422, "Invalid")
        .contains("message: Invalid value: \"\": can have at most 1024 characters"));
    let res = post(&server, path, &event("reason", &"r".repeat(129), "m"));
    assert!(res
        .assert_status(422, "Invalid")
        .contains("reason: Invalid value: \"\": can have at most 128 characters"));
    // Without eventTime the legacy limits do not apply.
    let mut legacy = event("legacy", "R", &"m".repeat(1500));
    legacy.as_object_mut().expect("object").remove("eventTime");
    let res = post(&server, path, &legacy);
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(server.events().len(), 2);
}

/// A Node deleted and created again with the same name is a new object: a new UID, and a
/// watch sees DELETED then ADDED.
#[test]
fn a_recreated_node_has_a_new_uid() {
    let server = ApiServer::start();
    let first = server.create_node(NODE, [(ANNOTATION, "kubelet-config/a")]);
    let mut watch = Watch::open(
        &server,
        &format!("/api/v1/nodes?watch=true&resourceVersion={}", rv_of(&first)),
    );
    server.delete_node(NODE);
    let second = server.create_node(NODE, [(ANNOTATION, "kubelet-config/a")]);
    assert_ne!(first["metadata"]["uid"], second["metadata"]["uid"]);
    assert_eq!(
        server.node(NODE)["metadata"]["uid"],
        second["metadata"]["uid"]
    );
    assert_eq!(event_summary(&watch.next()).0, "DELETED");
    let added = watch.next();
    assert_eq!(event_summary(&added).0, "ADDED");
    assert_eq!(
        added["object"]["metadata"]["uid"],
        second["metadata"]["uid"]
    );
}

/// A restart that loses the watch history: the objects stay, a watch from a resourceVersion
/// before the restart gets a 410 Expired ERROR event, a fresh list and watch from it work.
#[test]
fn restart_losing_history_expires_old_resource_versions() {
    let server = ApiServer::start();
    let node = server.create_node(NODE, [("a", "b")]);
    let old_rv = server.resource_version();
    server.restart_losing_history();
    assert!(server.is_running());
    assert!(server.resource_version() > old_rv);
    assert_eq!(
        server.node(NODE)["metadata"]["uid"],
        node["metadata"]["uid"]
    );
    let mut watch = Watch::open(
        &server,
        &format!("/api/v1/nodes?watch=true&resourceVersion={old_rv}"),
    );
    let error = watch.next();
    assert_eq!(error["type"], "ERROR", "{error}");
    assert_eq!(error["object"]["code"], 410, "{error}");
    assert_eq!(error["object"]["reason"], "Expired", "{error}");
    let list = get(&server, "/api/v1/nodes");
    assert_eq!(list.status, 200);
    let rv = list.body["metadata"]["resourceVersion"]
        .as_str()
        .expect("list resourceVersion")
        .to_string();
    let mut watch = Watch::open(
        &server,
        &format!("/api/v1/nodes?watch=true&resourceVersion={rv}"),
    );
    server.set_node_annotation(NODE, "a", Some("c"));
    assert_eq!(event_summary(&watch.next()).0, "MODIFIED");
}

#[test]
fn stop_makes_the_server_unreachable_and_restart_keeps_the_objects() {
    let server = ApiServer::start();
    server.create_node(NODE, [("a", "b")]);
    let rv = server.resource_version();
    let mut watch = Watch::open(&server, "/api/v1/nodes?watch=true");
    assert_eq!(event_summary(&watch.next()).0, "ADDED");
    server.stop();
    assert!(!server.is_running());
    let refused = TcpStream::connect(("127.0.0.1", server.port()));
    assert!(
        refused.is_err(),
        "connection refused after stop: {:?}",
        refused.as_ref().map(|s| (s.local_addr(), s.peer_addr()))
    );
    // The open watch is cut off (no clean end of the chunked body).
    let mut buf = [0u8; 64];
    let read = watch.reader.get_mut().read(&mut buf);
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

    server.restart_on_same_port();
    assert!(server.is_running());
    let node = get(&server, &format!("/api/v1/nodes/{NODE}"));
    assert_eq!(node.status, 200);
    assert_eq!(rv_of(&node.body), rv);
    let mut resumed = Watch::open(
        &server,
        &format!("/api/v1/nodes?watch=true&resourceVersion={rv}"),
    );
    server.set_node_annotation(NODE, "k", Some("v"));
    assert_eq!(event_summary(&resumed.next()).0, "MODIFIED");
}

#[test]
fn discovery_serves_the_legacy_documents() {
    let server = ApiServer::start();
    let version = get(&server, "/version");
    assert_eq!(version.body["major"], "1");
    let api = get(&server, "/api");
    assert_eq!(api.body["kind"], "APIVersions");
    assert_eq!(api.body["versions"], json!(["v1"]));
    let v1 = get(&server, "/api/v1");
    assert_eq!(v1.body["kind"], "APIResourceList");
    let find = |name: &str| {
        v1.body["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in /api/v1"))
    };
    assert_eq!(find("configmaps")["namespaced"], true);
    assert_eq!(find("configmaps")["shortNames"], json!(["cm"]));
    assert_eq!(find("nodes")["namespaced"], false);
    assert_eq!(
        find("nodes/status")["verbs"],
        json!(["get", "patch", "update"])
    );
    assert!(find("nodes")["verbs"]
        .as_array()
        .expect("verbs")
        .contains(&json!("watch")));
    let groups = get(&server, "/apis");
    assert_eq!(groups.body["kind"], "APIGroupList");
    assert_eq!(groups.body["groups"][0]["name"], "events.k8s.io");
    // Aggregated discovery is answered with the legacy document, as application/json.
    let mut stream = connect(&server);
    let head = "GET /api HTTP/1.1\r\nHost: x\r\nAccept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json\r\nConnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).expect("send");
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    assert_eq!(status, 200);
    assert!(headers.contains(&pair("Content-Type", "application/json")));
    let openapi = get(&server, "/openapi/v2");
    openapi.assert_status(404, "NotFound");
}

#[test]
fn requests_are_recorded() {
    let server = ApiServer::start();
    server.create_configmap(CONFIG_NS, "cm", data(&[]), true);
    let _ = get(&server, &format!("{CONFIGMAPS}/cm"));
    let _watch = Watch::open(
        &server,
        &format!("{CONFIGMAPS}?watch=true&fieldSelector=metadata.name%3Dother"),
    );
    let _ = patch(
        &server,
        &format!("{CONFIGMAPS}/cm"),
        MERGE,
        &json!({"metadata": {"labels": {"a": "b"}}}),
    );
    let records = server.requests();
    assert_eq!(records.len(), 3, "helpers are not requests: {records:?}");
    assert_eq!(
        (
            records[0].method.as_str(),
            records[0].watch,
            records[0].status
        ),
        ("GET", false, 200)
    );
    assert!(records[1].watch);
    assert_eq!(
        records[1].query_param("fieldSelector").as_deref(),
        Some("metadata.name=other")
    );
    assert_eq!(records[2].content_type.as_deref(), Some(MERGE));
    assert!(records[2].body.contains("labels"));
    // "No watch for this ConfigMap": none of the watches selects it.
    let watched_cm = records.iter().any(|r| {
        r.watch
            && r.query_param("fieldSelector")
                .is_none_or(|s| s.contains("metadata.name=cm"))
    });
    assert!(!watched_cm);
    assert_eq!(server.open_watches(CONFIGMAPS), 1);
    assert_eq!(server.open_watches("/api/v1/nodes"), 0);
}

/// Protobuf encoding, just enough for a ConfigMap in the `k8s\0` envelope.
fn pb_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn pb_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    pb_varint(out, (field << 3) | 2);
    pb_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn pb_map_entry(out: &mut Vec<u8>, field: u64, key: &str, value: &[u8]) {
    let mut entry = Vec::new();
    pb_bytes(&mut entry, 1, key.as_bytes());
    pb_bytes(&mut entry, 2, value);
    pb_bytes(out, field, &entry);
}

fn pb_envelope(kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::new();
    pb_bytes(&mut type_meta, 1, b"v1");
    pb_bytes(&mut type_meta, 2, kind.as_bytes());
    let mut out = b"k8s\0".to_vec();
    pb_bytes(&mut out, 1, &type_meta);
    pb_bytes(&mut out, 2, raw);
    out
}

/// kubectl >= 1.2x creates ConfigMaps with a protobuf body (Debian's 1.20 sends JSON).
#[test]
fn protobuf_configmap_bodies_are_decoded() {
    let server = ApiServer::start();
    let mut meta = Vec::new();
    pb_bytes(&mut meta, 1, b"from-protobuf");
    pb_bytes(&mut meta, 3, CONFIG_NS.as_bytes());
    pb_map_entry(&mut meta, 11, "tier", b"node");
    let mut configmap = Vec::new();
    pb_bytes(&mut configmap, 1, &meta);
    pb_map_entry(&mut configmap, 2, "kubelet", b"maxPods: 5\n");
    pb_map_entry(&mut configmap, 3, "blob", &[0, 1, 2]);
    pb_varint(&mut configmap, 4 << 3);
    pb_varint(&mut configmap, 1);
    let protobuf = Some("application/vnd.kubernetes.protobuf");
    let body = pb_envelope("ConfigMap", &configmap);
    let res = request_bytes(&server, "POST", CONFIGMAPS, protobuf, &body);
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(res.header("Content-Type"), Some("application/json"));
    assert_eq!(res.body["metadata"]["name"], "from-protobuf");
    assert_eq!(res.body["metadata"]["labels"], json!({"tier": "node"}));
    assert_eq!(res.body["data"], json!({"kubelet": "maxPods: 5\n"}));
    assert_eq!(res.body["binaryData"], json!({"blob": "AAEC"}));
    assert_eq!(res.body["immutable"], true);
    // Other kinds are not decoded: an explicit 415.
    let node = pb_envelope("Node", &[]);
    let res = request_bytes(&server, "POST", "/api/v1/nodes", protobuf, &node);
    assert!(res
        .assert_status(415, "UnsupportedMediaType")
        .contains("decodes protobuf for ConfigMap and Namespace only"));
    let res = request_bytes(&server, "POST", CONFIGMAPS, protobuf, b"{}");
    res.assert_status(400, "BadRequest");
}

#[test]
fn send_initial_events_and_dry_run() {
    let server = ApiServer::start();
    server.create_configmap(CONFIG_NS, "a", data(&[]), false);
    let streaming = "watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=";
    let mut watch = Watch::open(&server, &format!("{CONFIGMAPS}?{streaming}"));
    assert_eq!(event_summary(&watch.next()), pair("ADDED", "a"));
    let end = watch.next();
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"]["annotations"],
        json!({"k8s.io/initial-events-end": "true"})
    );
    assert_eq!(rv_of(&end["object"]), server.resource_version());
    server.create_configmap(CONFIG_NS, "b", data(&[]), false);
    assert_eq!(event_summary(&watch.next()), pair("ADDED", "b"));
    // Without its companions it is invalid.
    let res = get(
        &server,
        &format!("{CONFIGMAPS}?watch=true&sendInitialEvents=true"),
    );
    assert_eq!(
        res.assert_status(422, "Invalid"),
        r#"ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true]"#
    );

    // dryRun=All answers as if written, and writes nothing.
    let rv = server.resource_version();
    let res = post(
        &server,
        &format!("{CONFIGMAPS}?dryRun=All"),
        &json!({"metadata": {"name": "dry"}}),
    );
    assert_eq!(res.status, 201, "{}", res.body);
    assert!(server.configmap(CONFIG_NS, "dry").is_none());
    assert_eq!(server.resource_version(), rv);
}
