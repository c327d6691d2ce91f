//! Leases, CustomResourceDefinitions and custom resources, through kube-rs (the client
//! kubelet-pivot uses), a raw HTTP client where the exact answer matters, and Debian's
//! kubectl for discovery when it is installed.

#![recursion_limit = "256"]

mod support;

use std::process::Command;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use kube::Api;
use serde_json::{json, Value};
use support::{
    admin, client_from, item_names, next_event, request, request_as, status_of, summary, watch,
    Answer,
};
use testkit::ApiServer;

const GROUP: &str = "kubelet-pivot.io";
const VERSION: &str = "v1alpha1";
const KIND: &str = "KubeletConfigRollout";
const PLURAL: &str = "kubeletconfigrollouts";
const CRD_NAME: &str = "kubeletconfigrollouts.kubelet-pivot.io";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const ROLLOUTS: &str = "/apis/kubelet-pivot.io/v1alpha1/kubeletconfigrollouts";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kubelet-pivot/leases";
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";

// ------------------------------------------------------------------------------------------
// Fixtures
// ------------------------------------------------------------------------------------------

/// A definition of the shape kube-rs's `CustomResource` derive (schemars 1) emits for the
/// rollout: nullable options, integer formats, a map, an int-or-string, an enum, a list, a
/// nested object with defaults, and the status subresource.
fn rollout_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "names": {
                "categories": [],
                "kind": KIND,
                "plural": PLURAL,
                "shortNames": ["kcr"],
                "singular": "kubeletconfigrollout",
            },
            "scope": "Cluster",
            "versions": [{
                "additionalPrinterColumns": [],
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "description": "Auto-generated derived type for RolloutSpec via `CustomResource`",
                    "title": KIND,
                    "type": "object",
                    "required": ["spec"],
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["config"],
                            "properties": {
                                "config": {"type": "string", "minLength": 1, "maxLength": 63},
                                "canary": {"type": "integer", "format": "uint32", "minimum": 0.0, "default": 1},
                                "batch": {"type": "integer", "format": "uint32", "minimum": 0.0, "nullable": true},
                                "selector": {"type": "object", "additionalProperties": {"type": "string"}},
                                "maxUnavailable": {"x-kubernetes-int-or-string": true},
                                "strategy": {"type": "string", "enum": ["Rolling", "Zonal"], "default": "Rolling"},
                                "zones": {"type": "array", "maxItems": 3, "items": {"type": "string"}},
                                "health": {
                                    "type": "object",
                                    "default": {},
                                    "properties": {
                                        "timeoutSeconds": {"type": "integer", "format": "int64", "default": 300},
                                        "ratio": {"type": "number", "format": "double", "maximum": 1.0},
                                    },
                                },
                                "paused": {"type": "boolean", "nullable": true},
                            },
                        },
                        "status": {
                            "type": "object",
                            "nullable": true,
                            "properties": {
                                "phase": {"type": "string", "nullable": true},
                                "updated": {"type": "integer", "format": "uint32", "minimum": 0.0},
                                "conditions": {"type": "array", "items": {
                                    "type": "object",
                                    "required": ["type", "status"],
                                    "properties": {
                                        "type": {"type": "string"},
                                        "status": {"type": "string"},
                                        "lastTransitionTime": {"type": "string", "format": "date-time"},
                                    },
                                }},
                            },
                        },
                    },
                }},
            }],
        },
    })
}

fn rollout(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kubelet-pivot.io/v1alpha1", "kind": KIND, "metadata": {"name": name}, "spec": spec})
}

fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

fn post(server: &ApiServer, path: &str, body: &Value) -> Answer {
    request(server, "POST", path, JSON, Some(body))
}

fn get(server: &ApiServer, path: &str) -> Answer {
    request(server, "GET", path, JSON, None)
}

fn patch(server: &ApiServer, path: &str, content_type: &str, body: &Value) -> Answer {
    request(server, "PATCH", path, content_type, Some(body))
}

fn causes(answer: &Answer) -> Vec<String> {
    answer.body["details"]["causes"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| {
                    format!(
                        "{}: {}",
                        c["field"].as_str().unwrap_or(""),
                        c["message"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

// ------------------------------------------------------------------------------------------
// Leases
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn leases_are_created_replaced_with_optimistic_concurrency_and_validated() {
    let server = ApiServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let leases: Api<Lease> = Api::namespaced(admin(&server, dir.path()).await, "kubelet-pivot");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "rollout-controller", "labels": {"app": "rollout"}},
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15,
            "renewTime": "2025-01-02T03:04:05.123456+01:00"},
    }))
    .expect("a Lease");
    let created = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create the Lease");
    let stored = server
        .lease("kubelet-pivot", "rollout-controller")
        .expect("stored");
    assert_eq!(
        stored["spec"]["renewTime"], "2025-01-02T02:04:05.123456Z",
        "MicroTimes are served in UTC with six digits"
    );
    let again = status_of(leases.create(&PostParams::default(), &lease).await);
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(
        again.message,
        "leases.coordination.k8s.io \"rollout-controller\" already exists"
    );

    // Replace with the current resourceVersion, then again with the stale one.
    let mut renewed = created.clone();
    renewed.spec.as_mut().expect("spec").holder_identity = Some("pod-b".into());
    let replaced = leases
        .replace("rollout-controller", &PostParams::default(), &renewed)
        .await
        .expect("replace");
    assert_ne!(
        replaced.metadata.resource_version,
        created.metadata.resource_version
    );
    let stale = status_of(
        leases
            .replace("rollout-controller", &PostParams::default(), &renewed)
            .await,
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"rollout-controller\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // Validation and decoding as the real server.
    let bad = post(
        &server,
        LEASES,
        &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "bad"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}}),
    );
    assert_eq!(bad.code, 422);
    assert_eq!(
        bad.message(),
        "Lease.coordination.k8s.io \"bad\" is invalid: [spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0, spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0]"
    );
    let bad_time = post(
        &server,
        LEASES,
        &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "bad"}, "spec": {"renewTime": "2025-01-02T03:04:05Z"}}),
    );
    assert_eq!(bad_time.code, 400);
    assert_eq!(
        bad_time.message(),
        "Lease in version \"v1\" cannot be handled as a Lease: parsing time \"2025-01-02T03:04:05Z\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"Z\" as \".000000\""
    );

    // Lists by label, field selectors as for any kind without its own.
    let listed = leases
        .list(&ListParams::default().labels("app=rollout"))
        .await
        .expect("list");
    assert_eq!(listed.items.len(), 1);
    let unknown = get(
        &server,
        &format!("{LEASES}?fieldSelector=spec.holderIdentity%3Dx"),
    );
    assert_eq!(unknown.code, 400);
    assert_eq!(
        unknown.message(),
        "\"spec.holderIdentity\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
    let discovery = get(&server, "/apis/coordination.k8s.io/v1");
    assert_eq!(discovery.body["resources"][0]["name"], "leases");
    assert_eq!(discovery.body["resources"][0]["namespaced"], true);
    let groups = get(&server, "/apis");
    assert!(groups.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .any(|g| g["name"] == "coordination.k8s.io"));
}

#[test]
fn lease_watches_see_renewals() {
    let server = ApiServer::start();
    server.create_lease(
        "kubelet-pivot",
        "rollout-controller",
        json!({"holderIdentity": "pod-a", "leaseDurationSeconds": 15}),
    );
    let rv = server.resource_version();
    let mut stream = watch(
        &server,
        &format!("{LEASES}?watch=true&resourceVersion={rv}"),
    );
    let renewed = patch(
        &server,
        &format!("{LEASES}/rollout-controller"),
        MERGE,
        &json!({"spec": {"renewTime": "2025-01-02T03:04:05.000001Z"}}),
    );
    assert_eq!(renewed.code, 200);
    let event = next_event(&mut stream);
    assert_eq!(
        summary(&event),
        ("MODIFIED".into(), "rollout-controller".into())
    );
    assert_eq!(event["object"]["kind"], "Lease");
    assert_eq!(
        event["object"]["spec"]["renewTime"],
        "2025-01-02T03:04:05.000001Z"
    );
}

#[test]
fn a_node_writes_only_its_own_lease_in_kube_node_lease() {
    let server = ApiServer::start();
    let token = server.node_token("node-a");
    let lease = |name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name}, "spec": {"holderIdentity": name}})
    };
    let path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let own = request_as(&server, &token, "POST", path, JSON, Some(&lease("node-a")));
    assert_eq!(own.code, 201);
    let other = request_as(&server, &token, "POST", path, JSON, Some(&lease("node-b")));
    assert_eq!(other.code, 403);
    assert_eq!(
        other.message(),
        "leases.coordination.k8s.io \"node-b\" is forbidden: can only access node lease with the same name as the requesting node"
    );
    let elsewhere = request_as(
        &server,
        &token,
        "POST",
        LEASES,
        JSON,
        Some(&lease("node-a")),
    );
    assert_eq!(elsewhere.code, 403);
    assert!(
        elsewhere
            .message()
            .ends_with("can only access leases in the \"kube-node-lease\" system namespace"),
        "{}",
        elsewhere.message()
    );
}

// ------------------------------------------------------------------------------------------
// CustomResourceDefinitions
// ------------------------------------------------------------------------------------------

#[test]
fn definitions_are_validated_like_the_real_server() {
    let server = ApiServer::start();
    let refused = |crd: Value| {
        let answer = post(&server, CRDS, &crd);
        assert_eq!(answer.code, 422, "{}", answer.body);
        assert_eq!(answer.body["reason"], "Invalid");
        answer
    };
    let mut wrong_name = rollout_crd();
    wrong_name["metadata"]["name"] = json!("rollouts.kubelet-pivot.io");
    let answer = refused(wrong_name);
    assert_eq!(
        answer.message(),
        "CustomResourceDefinition.apiextensions.k8s.io \"rollouts.kubelet-pivot.io\" is invalid: metadata.name: Invalid value: \"rollouts.kubelet-pivot.io\": must be spec.names.plural+\".\"+spec.group"
    );

    let mut no_storage = rollout_crd();
    no_storage["spec"]["versions"][0]["storage"] = json!(false);
    let answer = refused(no_storage);
    assert!(
        answer
            .message()
            .ends_with("spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion{...}: must have exactly one version marked as storage version"),
        "{}",
        answer.message()
    );

    let mut no_schema = rollout_crd();
    no_schema["spec"]["versions"][0]
        .as_object_mut()
        .expect("version")
        .remove("schema");
    assert_eq!(
        causes(&refused(no_schema)),
        ["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"]
    );

    let mut untyped = rollout_crd();
    untyped["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["zones"] = json!({"items": {"type": "string"}});
    assert_eq!(
        causes(&refused(untyped)),
        ["spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[zones].type: Required value: must not be empty for specified object fields"]
    );

    let mut bad_scope = rollout_crd();
    bad_scope["spec"]["scope"] = json!("Global");
    assert_eq!(
        causes(&refused(bad_scope)),
        ["spec.scope: Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\""]
    );

    let mut bad_default = rollout_crd();
    bad_default["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["canary"]["default"] = json!("one");
    assert_eq!(
        causes(&refused(bad_default)),
        ["spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[canary].default: Invalid value: \"string\": in body must be of type integer: \"string\""]
    );

    let mut no_group = rollout_crd();
    no_group["spec"]["group"] = json!("rollouts");
    no_group["metadata"]["name"] = json!("kubeletconfigrollouts.rollouts");
    assert_eq!(
        causes(&refused(no_group)),
        ["spec.group: Invalid value: \"rollouts\": should be a domain with at least one dot"]
    );
    assert!(server.crd(CRD_NAME).is_none());
}

#[tokio::test]
async fn a_definition_is_established_served_and_discovered() {
    let server = ApiServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let client = admin(&server, dir.path()).await;
    // Before the definition: the path is not served.
    let before = get(&server, ROLLOUTS);
    assert_eq!(before.code, 404);
    assert_eq!(
        before.message(),
        "the server could not find the requested resource"
    );
    let rollouts: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    assert_eq!(
        status_of(rollouts.list(&ListParams::default()).await).code,
        404
    );

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition =
        serde_json::from_value(rollout_crd()).expect("a CustomResourceDefinition");
    let created = crds
        .create(&PostParams::default(), &crd)
        .await
        .expect("create the CRD");
    // The answer is the object as written; the controllers establish it right after.
    let status = created.status.expect("a status");
    assert_eq!(status.stored_versions, Some(vec![VERSION.to_string()]));
    assert!(status.conditions.unwrap_or_default().is_empty());
    let stored = crds.get(CRD_NAME).await.expect("get the CRD");
    let status = stored.status.expect("status");
    let conditions: Vec<(String, String)> = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conditions,
        [
            ("NamesAccepted".to_string(), "True".to_string()),
            ("Established".to_string(), "True".to_string())
        ]
    );
    let accepted = status.accepted_names.expect("accepted names");
    assert_eq!(accepted.short_names, Some(vec!["kcr".to_string()]));
    assert_eq!(
        accepted.list_kind.as_deref(),
        Some("KubeletConfigRolloutList")
    );
    assert_eq!(stored.metadata.generation, Some(1));

    // Discovery.
    let groups = get(&server, "/apis");
    let group = groups.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["name"] == GROUP)
        .cloned()
        .expect("the group in /apis");
    assert_eq!(
        group["preferredVersion"]["groupVersion"],
        "kubelet-pivot.io/v1alpha1"
    );
    let resources = get(&server, "/apis/kubelet-pivot.io/v1alpha1");
    assert_eq!(resources.body["kind"], "APIResourceList");
    let entries = resources.body["resources"].as_array().expect("resources");
    assert_eq!(entries[0]["name"], PLURAL);
    assert_eq!(entries[0]["singularName"], "kubeletconfigrollout");
    assert_eq!(entries[0]["namespaced"], false);
    assert_eq!(entries[0]["kind"], KIND);
    assert_eq!(entries[0]["shortNames"], json!(["kcr"]));
    assert_eq!(entries[1]["name"], "kubeletconfigrollouts/status");
    assert_eq!(
        get(&server, "/apis/kubelet-pivot.io").body["kind"],
        "APIGroup"
    );
    let crd_discovery = get(&server, "/apis/apiextensions.k8s.io/v1");
    assert_eq!(
        crd_discovery.body["resources"][0]["shortNames"],
        json!(["crd", "crds"])
    );

    // Served now; deleting the definition deletes its objects and the path.
    let list = rollouts
        .list(&ListParams::default())
        .await
        .expect("list rollouts");
    assert!(list.items.is_empty());
    assert_eq!(
        post(
            &server,
            ROLLOUTS,
            &rollout("r1", json!({"config": "kubelet-config/a"}))
        )
        .code,
        201
    );
    let deleted = crds
        .delete(CRD_NAME, &DeleteParams::default())
        .await
        .expect("delete the CRD");
    let marked = deleted.left().expect("the marked definition");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(server.crd(CRD_NAME).is_none());
    assert_eq!(get(&server, &format!("{ROLLOUTS}/r1")).code, 404);
    assert_eq!(get(&server, "/apis/kubelet-pivot.io/v1alpha1").code, 404);

    // Created again: empty.
    server.create_crd(rollout_crd());
    assert!(item_names(&get(&server, ROLLOUTS).body).is_empty());
}

#[test]
fn kubectl_gets_custom_resources_by_short_name() {
    let server = ApiServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = server.kubeconfig_in(dir.path());
    let run = |args: &[&str]| {
        Command::new(std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into()))
            .args(args)
            .arg(format!(
                "--cache-dir={}",
                dir.path().join("cache").display()
            ))
            .env("KUBECONFIG", &kubeconfig)
            .output()
    };
    match run(&["version", "--client"]) {
        Ok(output) if output.status.success() => {}
        _ => {
            eprintln!("SKIPPED: kubectl is not installed; install the kubernetes-client package");
            return;
        }
    }
    server.create_crd(rollout_crd());
    assert_eq!(
        post(
            &server,
            ROLLOUTS,
            &rollout("r1", json!({"config": "kubelet-config/a"}))
        )
        .code,
        201
    );
    for resource in [
        "kcr",
        PLURAL,
        "kubeletconfigrollout",
        "kcr.kubelet-pivot.io",
    ] {
        let output = run(&["get", resource, "-o", "name"]).expect("run kubectl");
        assert!(
            output.status.success(),
            "kubectl get {resource}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            "kubeletconfigrollout.kubelet-pivot.io/r1"
        );
    }
    let output = run(&["get", "kcr", "r1", "-o", "jsonpath={.spec.strategy}"]).expect("run");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Rolling");
    let output = run(&["api-resources", "--api-group=kubelet-pivot.io"]).expect("run");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("kcr"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

// ------------------------------------------------------------------------------------------
// Custom objects
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn custom_objects_have_generations_and_a_status_subresource() {
    let server = ApiServer::start();
    server.create_crd(rollout_crd());
    let dir = tempfile::tempdir().expect("temp dir");
    let client = client_from(&server.kubeconfig_in(dir.path())).await;
    let ar = api_resource();
    let rollouts: Api<DynamicObject> = Api::all_with(client, &ar);
    let object = DynamicObject::new("r1", &ar).data(json!({
        "spec": {"config": "kubelet-config/a"},
        "status": {"phase": "Done"},
    }));
    let created = rollouts
        .create(&PostParams::default(), &object)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert!(
        created.data.get("status").is_none(),
        "a create cannot set the status"
    );
    // Defaults, nested ones included.
    assert_eq!(created.data["spec"]["canary"], 1);
    assert_eq!(created.data["spec"]["strategy"], "Rolling");
    assert_eq!(
        created.data["spec"]["health"],
        json!({"timeoutSeconds": 300})
    );

    // The spec changes: a new generation; the status sent with it is ignored.
    let mut changed = created.clone();
    changed.data["spec"]["canary"] = json!(5);
    changed.data["status"] = json!({"phase": "Sneaky"});
    let replaced = rollouts
        .replace("r1", &PostParams::default(), &changed)
        .await
        .expect("replace");
    assert_eq!(replaced.metadata.generation, Some(2));
    assert!(replaced.data.get("status").is_none());
    // The same content again: not written at all.
    let mut same = replaced.clone();
    same.data["status"] = json!({"phase": "Ignored"});
    let unchanged = rollouts
        .replace("r1", &PostParams::default(), &same)
        .await
        .expect("replace with the same");
    assert_eq!(
        unchanged.metadata.resource_version,
        replaced.metadata.resource_version
    );
    // Metadata only: no new generation.
    let labelled = rollouts
        .patch(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"wave": "1"}}})),
        )
        .await
        .expect("label");
    assert_eq!(labelled.metadata.generation, Some(2));
    // A stale replace.
    let stale = status_of(
        rollouts
            .replace("r1", &PostParams::default(), &changed)
            .await,
    );
    assert_eq!(stale.code, 409);
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on kubeletconfigrollouts.kubelet-pivot.io \"r1\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // The status subresource writes the status and nothing else, metadata included.
    let status = rollouts
        .patch_status(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": {"wave": "2"}},
                "spec": {"canary": 9},
                "status": {"phase": "Progressing", "updated": 3},
            })),
        )
        .await
        .expect("patch the status");
    assert_eq!(status.data["status"]["phase"], "Progressing");
    assert_eq!(status.data["spec"]["canary"], 5);
    assert_eq!(
        status.metadata.labels.as_ref().expect("labels")["wave"],
        "1"
    );
    assert_eq!(status.metadata.generation, Some(2));
    let invalid_status = status_of(
        rollouts
            .patch_status(
                "r1",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"updated": -1}})),
            )
            .await,
    );
    assert_eq!(invalid_status.code, 422);
    assert_eq!(
        invalid_status.message,
        "KubeletConfigRollout.kubelet-pivot.io \"r1\" is invalid: status.updated: Invalid value: -1: status.updated in body should be greater than or equal to 0"
    );

    // JSON patch works, strategic merge patch does not.
    let patched = rollouts
        .patch(
            "r1",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/config", "value": "kubelet-config/b"}
                ]))
                .expect("a JSON patch"),
            ),
        )
        .await
        .expect("JSON patch");
    assert_eq!(patched.data["spec"]["config"], "kubelet-config/b");
    assert_eq!(patched.metadata.generation, Some(3));
    let strategic = patch(
        &server,
        &format!("{ROLLOUTS}/r1"),
        STRATEGIC,
        &json!({"spec": {"canary": 2}}),
    );
    assert_eq!(strategic.code, 415);
    assert_eq!(strategic.body["reason"], "UnsupportedMediaType");
    assert_eq!(
        strategic.message(),
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json"
    );
    let json_patched = patch(
        &server,
        &format!("{ROLLOUTS}/r1"),
        JSON_PATCH,
        &json!([{"op": "test", "path": "/spec/canary", "value": 5}]),
    );
    assert_eq!(json_patched.code, 200);

    rollouts
        .delete("r1", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(status_of(rollouts.get("r1").await).code, 404);
}

#[test]
fn custom_objects_are_pruned_defaulted_and_validated_against_the_schema() {
    let server = ApiServer::start();
    server.create_crd(rollout_crd());
    // Unknown fields: pruned with a warning, or refused with fieldValidation=Strict.
    let body = rollout(
        "r1",
        json!({"config": "kubelet-config/a", "bogus": 1, "health": {"extra": true},
            "selector": {"zone": "a"}, "maxUnavailable": "10%", "zones": null, "canary": null,
            "batch": null}),
    );
    let strict = post(
        &server,
        &format!("{ROLLOUTS}?fieldValidation=Strict"),
        &body,
    );
    assert_eq!(strict.code, 400);
    assert_eq!(
        strict.message(),
        "strict decoding error: unknown field \"spec.bogus\", unknown field \"spec.health.extra\""
    );
    let created = post(&server, ROLLOUTS, &body);
    assert_eq!(created.code, 201, "{}", created.body);
    assert_eq!(
        created.header_values("Warning"),
        [
            "299 - \"unknown field \\\"spec.bogus\\\"\"",
            "299 - \"unknown field \\\"spec.health.extra\\\"\""
        ]
    );
    let spec = &created.body["spec"];
    assert!(spec.get("bogus").is_none());
    assert_eq!(spec["health"], json!({"timeoutSeconds": 300}));
    assert_eq!(spec["maxUnavailable"], "10%");
    assert!(
        spec.get("zones").is_none(),
        "a null is dropped unless nullable"
    );
    assert_eq!(spec["canary"], 1, "or defaulted");
    assert!(
        spec.get("batch").is_some_and(Value::is_null),
        "nullable keeps null"
    );

    // Type and value errors: 422 with the real messages and causes.
    let bad = post(
        &server,
        ROLLOUTS,
        &rollout(
            "r2",
            json!({"config": "", "canary": "string", "strategy": "Big", "zones": ["a", "b", "c", "d"],
                "maxUnavailable": true, "health": {"ratio": 1.5}, "selector": {"zone": 1}}),
        ),
    );
    assert_eq!(bad.code, 422);
    assert_eq!(bad.body["details"]["kind"], KIND);
    assert_eq!(bad.body["details"]["group"], GROUP);
    assert_eq!(
        causes(&bad),
        [
            "spec.canary: Invalid value: \"string\": spec.canary in body must be of type integer: \"string\"",
            "spec.config: Invalid value: \"\": spec.config in body should be at least 1 chars long",
            "spec.health.ratio: Invalid value: 1.5: spec.health.ratio in body should be less than or equal to 1",
            "spec.maxUnavailable: Invalid value: \"boolean\": spec.maxUnavailable in body must be of type integer,string: \"boolean\"",
            "spec.selector.zone: Invalid value: \"integer\": spec.selector.zone in body must be of type string: \"integer\"",
            "spec.strategy: Unsupported value: \"Big\": supported values: \"Rolling\", \"Zonal\"",
            "spec.zones: Too many: 4: must have at most 3 items",
        ]
    );
    let one = post(
        &server,
        ROLLOUTS,
        &rollout("r2", json!({"config": "x", "canary": "string"})),
    );
    assert_eq!(
        one.message(),
        "KubeletConfigRollout.kubelet-pivot.io \"r2\" is invalid: spec.canary: Invalid value: \"string\": spec.canary in body must be of type integer: \"string\""
    );
    let missing = post(&server, ROLLOUTS, &rollout("r2", json!({})));
    assert_eq!(causes(&missing), ["spec.config: Required value"]);
    let no_spec = post(
        &server,
        ROLLOUTS,
        &json!({"apiVersion": "kubelet-pivot.io/v1alpha1", "kind": KIND, "metadata": {"name": "r2"}}),
    );
    assert_eq!(causes(&no_spec), ["spec: Required value"]);

    // Type meta must match the request.
    let wrong_version = post(
        &server,
        ROLLOUTS,
        &json!({"apiVersion": "kubelet-pivot.io/v1", "kind": KIND, "metadata": {"name": "r3"}, "spec": {"config": "x"}}),
    );
    assert_eq!(wrong_version.code, 400);
    assert_eq!(
        wrong_version.message(),
        "the API version in the data (kubelet-pivot.io/v1) does not match the expected API version (kubelet-pivot.io/v1alpha1)"
    );
    let no_kind = post(
        &server,
        ROLLOUTS,
        &json!({"apiVersion": "kubelet-pivot.io/v1alpha1", "metadata": {"name": "r3"}}),
    );
    assert_eq!(no_kind.code, 400);
    assert!(no_kind
        .message()
        .starts_with("Object 'Kind' is missing in '"));
    let bad_name = post(&server, ROLLOUTS, &rollout("R_3", json!({"config": "x"})));
    assert_eq!(bad_name.code, 422);
    assert!(causes(&bad_name)[0]
        .starts_with("metadata.name: Invalid value: \"R_3\": a lowercase RFC 1123 subdomain"));
}

#[test]
fn custom_objects_are_listed_and_watched_with_selectors() {
    let server = ApiServer::start();
    server.create_crd(rollout_crd());
    for (name, wave) in [("r1", "1"), ("r2", "2"), ("r3", "2")] {
        let mut body = rollout(name, json!({"config": "kubelet-config/a"}));
        body["metadata"]["labels"] = json!({"wave": wave});
        assert_eq!(post(&server, ROLLOUTS, &body).code, 201);
    }
    let list = get(&server, &format!("{ROLLOUTS}?labelSelector=wave%3D2"));
    assert_eq!(list.body["kind"], "KubeletConfigRolloutList");
    assert_eq!(list.body["apiVersion"], "kubelet-pivot.io/v1alpha1");
    assert_eq!(item_names(&list.body), ["r2", "r3"]);
    assert_eq!(
        list.body["items"][0]["kind"], KIND,
        "items of a custom resource list keep their type meta"
    );
    let by_name = get(
        &server,
        &format!("{ROLLOUTS}?fieldSelector=metadata.name%3Dr3"),
    );
    assert_eq!(item_names(&by_name.body), ["r3"]);
    let unsupported = get(
        &server,
        &format!("{ROLLOUTS}?fieldSelector=spec.config%3Dx"),
    );
    assert_eq!(unsupported.code, 400);
    assert_eq!(
        unsupported.message(),
        "\"spec.config\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );

    let rv = server.resource_version();
    let mut stream = watch(
        &server,
        &format!("{ROLLOUTS}?watch=true&resourceVersion={rv}&labelSelector=wave%3D2&allowWatchBookmarks=true"),
    );
    // r1 joins the selection, r2 leaves it, r3 is deleted.
    assert_eq!(
        patch(
            &server,
            &format!("{ROLLOUTS}/r1"),
            MERGE,
            &json!({"metadata": {"labels": {"wave": "2"}}})
        )
        .code,
        200
    );
    assert_eq!(
        patch(
            &server,
            &format!("{ROLLOUTS}/r2"),
            MERGE,
            &json!({"metadata": {"labels": {"wave": "3"}}})
        )
        .code,
        200
    );
    assert_eq!(
        request(&server, "DELETE", &format!("{ROLLOUTS}/r3"), JSON, None).code,
        200
    );
    let events: Vec<(String, String)> = (0..3).map(|_| summary(&next_event(&mut stream))).collect();
    assert_eq!(
        events,
        [
            ("ADDED".to_string(), "r1".to_string()),
            ("DELETED".to_string(), "r2".to_string()),
            ("DELETED".to_string(), "r3".to_string())
        ]
    );
    server.send_bookmark();
    let bookmark = next_event(&mut stream);
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], KIND);
    assert_eq!(
        bookmark["object"]["apiVersion"],
        "kubelet-pivot.io/v1alpha1"
    );

    // A watch from before a compaction is told to re-list.
    server.compact_history();
    let mut expired = watch(
        &server,
        &format!("{ROLLOUTS}?watch=true&resourceVersion={rv}"),
    );
    let error = next_event(&mut expired);
    assert_eq!(error["type"], "ERROR");
    assert_eq!(error["object"]["code"], 410);
}

#[test]
fn namespaced_custom_resources_need_their_namespace() {
    let server = ApiServer::start();
    let mut crd = rollout_crd();
    crd["spec"]["scope"] = json!("Namespaced");
    server.create_crd(crd);
    let in_ns = "/apis/kubelet-pivot.io/v1alpha1/namespaces/kubelet-pivot/kubeletconfigrollouts";
    assert_eq!(
        post(&server, in_ns, &rollout("r1", json!({"config": "x"}))).code,
        201
    );
    let gone_ns = "/apis/kubelet-pivot.io/v1alpha1/namespaces/nowhere/kubeletconfigrollouts";
    let refused = post(&server, gone_ns, &rollout("r1", json!({"config": "x"})));
    assert_eq!(refused.code, 404);
    assert_eq!(refused.message(), "namespaces \"nowhere\" not found");
    // Across namespaces.
    assert_eq!(item_names(&get(&server, ROLLOUTS).body), ["r1"]);
    // No object outside a namespace.
    assert_eq!(get(&server, &format!("{ROLLOUTS}/r1")).code, 404);
    assert_eq!(
        server
            .custom_object(
                "kubelet-pivot.io/v1alpha1",
                PLURAL,
                Some("kubelet-pivot"),
                "r1"
            )
            .expect("stored")["spec"]["canary"],
        1
    );
}

#[test]
fn custom_objects_with_finalizers_wait_for_them() {
    let server = ApiServer::start();
    server.create_crd(rollout_crd());
    let mut body = rollout("r1", json!({"config": "kubelet-config/a"}));
    body["metadata"]["finalizers"] = json!(["kubelet-pivot.io/rollout"]);
    assert_eq!(post(&server, ROLLOUTS, &body).code, 201);
    let path = format!("{ROLLOUTS}/r1");
    let marked = request(&server, "DELETE", &path, JSON, None);
    assert_eq!(marked.code, 200);
    assert!(marked.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        marked.body["metadata"]["generation"], 2,
        "marking for deletion is a new generation"
    );
    let more = patch(
        &server,
        &path,
        MERGE,
        &json!({"metadata": {"finalizers": ["kubelet-pivot.io/rollout", "other"]}}),
    );
    assert_eq!(more.code, 422);
    assert_eq!(
        causes(&more),
        ["metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"other\"}"]
    );
    let done = patch(
        &server,
        &path,
        MERGE,
        &json!({"metadata": {"finalizers": null}}),
    );
    assert_eq!(done.code, 200);
    assert_eq!(get(&server, &path).code, 404);
}

#[test]
fn definitions_are_updated_with_immutable_names_and_new_generations() {
    let server = ApiServer::start();
    server.create_crd(rollout_crd());
    let path = format!("{CRDS}/{CRD_NAME}");
    let renamed = patch(
        &server,
        &path,
        MERGE,
        &json!({"spec": {"names": {"shortNames": ["kcr", "rollout"]}}}),
    );
    assert_eq!(renamed.code, 200, "{}", renamed.body);
    assert_eq!(renamed.body["metadata"]["generation"], 2);
    let crd = server.crd(CRD_NAME).expect("stored");
    assert_eq!(
        crd["status"]["acceptedNames"]["shortNames"],
        json!(["kcr", "rollout"])
    );
    let discovery = get(&server, "/apis/kubelet-pivot.io/v1alpha1");
    assert_eq!(
        discovery.body["resources"][0]["shortNames"],
        json!(["kcr", "rollout"])
    );
    // Labels are metadata: no new generation.
    let labelled = patch(
        &server,
        &path,
        MERGE,
        &json!({"metadata": {"labels": {"a": "b"}}}),
    );
    assert_eq!(labelled.body["metadata"]["generation"], 2);
    let immutable = patch(
        &server,
        &path,
        JSON_PATCH,
        &json!([
            {"op": "replace", "path": "/spec/scope", "value": "Namespaced"},
            {"op": "replace", "path": "/spec/names/kind", "value": "Rollout"},
        ]),
    );
    assert_eq!(immutable.code, 422);
    assert_eq!(
        causes(&immutable),
        [
            "spec.scope: Invalid value: \"Namespaced\": field is immutable",
            "spec.names.kind: Invalid value: \"Rollout\": field is immutable"
        ]
    );
    // A second served version is discovered, the storage version preferred by priority.
    let mut v1 = rollout_crd()["spec"]["versions"][0].clone();
    v1["name"] = json!("v1");
    v1["storage"] = json!(false);
    let versions = json!([rollout_crd()["spec"]["versions"][0], v1]);
    let added = patch(
        &server,
        &path,
        MERGE,
        &json!({"spec": {"versions": versions}}),
    );
    assert_eq!(added.code, 200, "{}", added.body);
    let group = get(&server, "/apis/kubelet-pivot.io");
    assert_eq!(group.body["preferredVersion"]["version"], "v1");
    assert_eq!(
        post(
            &server,
            "/apis/kubelet-pivot.io/v1/kubeletconfigrollouts",
            &json!({"apiVersion": "kubelet-pivot.io/v1", "kind": KIND, "metadata": {"name": "r1"},
                "spec": {"config": "x"}}),
        )
        .code,
        201
    );
    let old_version = get(&server, &format!("{ROLLOUTS}/r1"));
    assert_eq!(old_version.body["apiVersion"], "kubelet-pivot.io/v1alpha1");
}
