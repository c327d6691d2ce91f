//! testkit: a strict fake Kubernetes API server for kubelet-pivot's integration tests, benches
//! and demo.
//!
//! The tests use it as a dev-dependency (`use testkit::ApiServer;`, or `use testkit as apiserver;`
//! where they name it `apiserver::...`); the binary `kubelet-pivot-test-apiserver` serves it for
//! kubectl by hand and for `scripts/demo.sh`. It speaks HTTP/1.1 on `127.0.0.1` (port 0 unless
//! [`ApiServer::start_on`] is given one; a thread per connection, keep-alive, `Content-Length` bodies, chunked watch
//! streams) and serves Nodes (with the `status` subresource), ConfigMaps, Events (core/v1 and
//! events.k8s.io/v1), Namespaces, Pods (with `status` and the policy/v1 `eviction`
//! subresource), PodDisruptionBudgets (policy/v1, with `status`), Leases
//! (coordination.k8s.io/v1), CustomResourceDefinitions (apiextensions.k8s.io/v1, with
//! `status`) and the resources they define, with the real API server's semantics, as far as
//! kube-rs and kubectl can observe them:
//!
//! - one global, monotonically increasing resourceVersion; uid (UUID v4), resourceVersion and
//!   creationTimestamp on every object (PodDisruptionBudgets, CustomResourceDefinitions and
//!   custom objects carry `metadata.generation`, as on a v1.32 server, bumped also when a
//!   delete marks them for their finalizers); an update that changes nothing is not written
//!   (no new resourceVersion, no watch event), as etcd3's GuaranteedUpdate does; PUT with a
//!   stale resourceVersion is 409 Conflict, a create of an existing name 409 AlreadyExists,
//!   and an object being deleted may lose finalizers but not gain them;
//! - errors are `Status` objects with the real messages, reasons, details and causes;
//! - label selectors with the grammar and validation of k8s.io/apimachinery/pkg/labels (`=`,
//!   `==`, `!=`, `in`, `notin`, `key`, `!key`, `>`, `<`; invalid keys, values and syntax are
//!   400 with the real texts), field selectors per kind (`metadata.name` and
//!   `metadata.namespace` everywhere);
//! - watches replay from a bounded per-resource history (the watch cache), answer a too-old
//!   resourceVersion with a single `ERROR` event carrying a 410 `Expired` Status, send BOOKMARKs
//!   on request, honour `timeoutSeconds`, field and label selectors (an object that stops
//!   matching is seen as DELETED, one that starts matching as ADDED), and `sendInitialEvents`;
//! - PATCH with JSON merge patch (RFC 7386), strategic merge patch (the merge keys of
//!   k8s.io/api: Node status conditions and addresses by `type`, ownerReferences by `uid`,
//!   finalizers and podCIDRs as sets, other lists replaced; directives `$patch`, `$retainKeys`,
//!   `$deleteFromPrimitiveList`, `$setElementOrder` (accepted, order not enforced)) and JSON patch
//!   (RFC 6902, all six operations); server-side apply (`application/apply-patch+yaml`) is NOT
//!   implemented and answered with 415 listing what is;
//! - `nodes/NAME` cannot change status and `nodes/NAME/status` cannot change spec (metadata
//!   changes through the status subresource are kept, as on the real server); likewise for
//!   pods and PodDisruptionBudgets;
//! - Pods (module `pods`): validated (containers with names and images, ...) and defaulted
//!   like the real server's (no ServiceAccount admission: no token volume), created
//!   `Pending` whatever status is sent (use [`ApiServer::create_pod`] for a running pod, or
//!   `pods/NAME/status`), spec immutable but for images and the like; field selectors
//!   `spec.nodeName`, `status.phase`, ...; a delete returns the deleted pod. There is no
//!   kubelet: a graceful delete removes a pod at once, unless
//!   [`ApiServer::set_pod_termination_delay`] makes it terminate (deletionTimestamp, then
//!   gone after the delay);
//! - evictions (`POST pods/NAME/eviction`, policy/v1 or v1beta1 Eviction) as
//!   pkg/registry/core/pod/storage/eviction.go: terminal, pending and terminating pods are
//!   deleted directly; else the one PodDisruptionBudget selecting the pod must allow a
//!   disruption (429 TooManyRequests with the DisruptionBudget cause if not, 429 "still being
//!   processed" while its observedGeneration lags, 500 for more than one PDB), which is
//!   decremented and records the pod in `disruptedPods`; the pod gets the `DisruptionTarget`
//!   condition and is deleted; the answer is 201 with a Success Status. There is no
//!   disruption controller: a PDB's status is what [`ApiServer::create_pdb`],
//!   [`ApiServer::set_pdb_disruptions_allowed`] or a client wrote to `/status`;
//! - Leases (module `leases`): `spec.leaseDurationSeconds` > 0, `spec.leaseTransitions` >= 0,
//!   `acquireTime`/`renewTime` MicroTimes (RFC 3339 with exactly six fractional digits, a
//!   Go `time.Parse` error otherwise; served in UTC), `strategy`/`preferredHolder` dropped (the
//!   CoordinatedLeaderElection gate is off); a node may write only its own Lease in
//!   `kube-node-lease` (Node authorizer and NodeRestriction);
//! - CustomResourceDefinitions (module `crd`, schemas in module `schema`): validated as
//!   v1 requires (name `PLURAL.GROUP`, scope, names, exactly one storage version, a
//!   structural `openAPIV3Schema` for every version, valid defaults, immutable group and
//!   plural, immutable scope and kind once established, ...), defaulted (singular, listKind,
//!   conversion `None`), then established at once by a second write (`acceptedNames`,
//!   `NamesAccepted` and `Established`; the create's answer has neither, as on a real
//!   server); a delete answers the definition marked for deletion (the cleanup finalizer,
//!   `Terminating`), deletes its objects and removes it. [`ApiServer::create_crd`];
//! - custom resources (module `custom`): served at
//!   `/apis/GROUP/VERSION/[namespaces/NS/]PLURAL[/NAME[/status]]` for every served version
//!   while the definition is established (404 before and after), listed by discovery
//!   (`/apis`, `/apis/GROUP`, `/apis/GROUP/VERSION` with names, short names, categories and
//!   the `status` subresource, so that `kubectl get SHORTNAME` works); unknown fields pruned
//!   (`unknown field "spec.foo"` as a warning, or 400 with `fieldValidation=Strict`; honouring
//!   `x-kubernetes-preserve-unknown-fields`), nulls of non-nullable fields dropped, defaults
//!   applied, then validated against the version's schema with kube-openapi's messages
//!   (type, nullable, enum, required, minimum/maximum (exclusive too), multipleOf,
//!   minLength/maxLength, minItems/maxItems, minProperties/maxProperties, items,
//!   additionalProperties, x-kubernetes-int-or-string, `format: date-time`); generation 1 on
//!   create, incremented by changes outside metadata (and status); with the status
//!   subresource a create drops `status`, the object's writes keep the stored one and
//!   `/status` writes change only `status` (not metadata, unlike built-in kinds); strategic
//!   merge patch is 415 as for any custom resource; field selectors `metadata.name` and
//!   `metadata.namespace`;
//! - like servers since v1.24 (DynamicKubeletConfig removed), `spec.configSource` and
//!   `status.config` are dropped from Nodes unless the stored node already has them (a node
//!   that keeps one gets the real "spec.configSource: the feature is removed" warning);
//!   [`ApiServer::keep_config_source`] turns this off (an old server) and then validates them;
//! - immutable ConfigMaps reject changes of data/binaryData/immutable with the real 422;
//! - namespaces must exist (NamespaceLifecycle admission): `default`, `kube-system`,
//!   `kube-public`, `kube-node-lease`, `kubelet-config` and `kubelet-pivot` do; deleting a
//!   namespace deletes the namespaced objects in it (custom ones too);
//! - server-side field validation (`fieldValidation=Strict|Warn|Ignore`, default Warn) for
//!   unknown fields of these kinds, and `dryRun=All`;
//! - a node simulator ([`NodeSim`], module `nodesim`): thousands of in-process nodes that
//!   follow kubelet-pivot's status contract (the `kubelet-pivot.io/config-source`
//!   assignment, the `kubelet-pivot.io/config-status` report and the `KubeletConfigOK`
//!   condition), with [`Script`]ed failures (crash-loop rollback, never Ready, deleted,
//!   drain first, stuck); its writes go straight into the state (watch events and new
//!   resourceVersions, but no [`ApiServer::requests`] entries);
//! - bearer-token authentication: a wrong token is 401; a request without credentials is the
//!   old insecure port's `system:unsecured` (client-go never sends credentials over plain HTTP,
//!   so kubectl could not work otherwise), or with [`ApiServer::require_token`] the anonymous
//!   user (may read /version and the health endpoints only, 403 elsewhere). The default token
//!   ([`DEFAULT_USER`]) may do anything but what [`ApiServer::deny`] forbids;
//! - node credentials (module `nodeauth`; [`ApiServer::node_token`],
//!   [`ApiServer::write_node_kubeconfig`], [`ApiServer::node_kubeconfig_in`]): the user
//!   `system:node:NODE` (groups `system:nodes`, `system:authenticated`), authorized by the Node
//!   authorizer of v1.32 (AuthorizeNodeWithSelectors on: a node reads only pods bound to it, and
//!   lists or watches pods only with `fieldSelector=spec.nodeName=NODE`; see
//!   [`ApiServer::authorize_node_with_selectors`]) plus the RBAC of the project's
//!   `manifests/10-rbac.yaml` (ConfigMaps in `kubelet-config`, Nodes get/list/watch/patch,
//!   `nodes/status` patch, Events create/patch), then restricted by the NodeRestriction
//!   admission plugin (only its own Node, not its taints or restricted labels; delete, evict and
//!   update the status only of pods bound to it; create only its mirror pods). Everything else
//!   (PodDisruptionBudgets, DaemonSets, ReplicaSets, other namespaces' ConfigMaps, ...) is 403
//!   with the real message and the Node authorizer's reason; [`ApiServer::deny`] applies on
//!   top.
//!
//! Deviations worth knowing: answers are always JSON (whatever the Accept header prefers);
//! protobuf request bodies are decoded for ConfigMap, Namespace, PodDisruptionBudget and
//! Eviction only (what `kubectl create` and `kubectl drain` send), others (`kubectl run`) get
//! 415; over plain HTTP kubectl sends no token, so a node kubeconfig gives kubectl the
//! insecure port's user, not the node's (kube-rs and curl do send it); no Table output (kubectl falls back to client-side printing), aggregated discovery requests get
//! the legacy documents with `Content-Type: application/json` (kubectl falls back), no OpenAPI
//! documents (404; kubectl's generators, annotate, patch and get do not need them), no
//! managedFields, no `limit`/`continue` paging (full lists), no deletecollection, and injected
//! 429s carry a Status body (the real priority-and-fairness filter answers text/plain).
//! Custom resources: `pattern` and string formats other than date-time are not checked (no
//! regular expression engine), nor `x-kubernetes-validations` (CEL), list-type semantics,
//! the completeness rule of structural schemas or `selectableFields`; webhook conversion is
//! accepted but not performed (every version serves the stored object with its own
//! apiVersion); defaults are applied on writes, not on reads; names conflicts between
//! definitions are not detected; a definition's cleanup deletes objects whatever their
//! finalizers, and watches of its resource end (without those DELETED events) when it is
//! deleted or changes kind, scope, names or storage version. Field error values that Go
//! prints as structs are shortened (`[]apiextensions.CustomResourceDefinitionVersion{...}`).
//!
//! Kube-rs 5's client retries 429s itself by default (15 times, backing off up to 1000 s), so an
//! eviction refused by a PodDisruptionBudget only reaches the caller that way if
//! `Config::default_retry` is false.
//!
//! Fault injection and observation: [`ApiServer::fail_next`], [`ApiServer::set_delay`],
//! [`ApiServer::drop_watches`], [`ApiServer::stop`], [`ApiServer::restart_on_same_port`],
//! [`ApiServer::deny`], [`ApiServer::compact_history`], [`ApiServer::requests`],
//! [`ApiServer::open_watches`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

mod crd;
mod custom;
mod labels;
mod leases;
mod nodeauth;
mod nodesim;
mod pods;
mod schema;

pub use nodesim::{NodeSim, Script, SimOptions};

/// Watch events kept per resource (the watch cache); older resourceVersions get 410 Expired.
pub const DEFAULT_HISTORY_LIMIT: usize = 1000;
/// How often a watch that asked for bookmarks gets one, unless changed.
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(1);
/// The bearer token written into the kubeconfig; a request carrying another one is 401.
pub const DEFAULT_TOKEN: &str = "kubelet-pivot-test-token";
/// The user the token authenticates as (appears in 403 messages).
pub const DEFAULT_USER: &str = "kubelet-pivot-test";
/// Who a request without credentials is, unless [`ApiServer::require_token`] is on: the user
/// of kube-apiserver's old insecure (plain HTTP) port.
pub const INSECURE_PORT_USER: &str = "system:unsecured";
/// Who a request without credentials is with [`ApiServer::require_token`].
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// Namespaces that exist when the server starts (`kubelet-pivot` holds the rollout
/// controller's Lease).
pub const DEFAULT_NAMESPACES: [&str; 6] = [
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "kubelet-config",
    "kubelet-pivot",
];
/// The resourceVersion of an empty server (a real cluster never starts at 0; 0 means "any").
const INITIAL_RESOURCE_VERSION: u64 = 100;
/// The server version reported by /version.
const SERVER_MAJOR: &str = "1";
const SERVER_MINOR: &str = "32";
const SERVER_GIT_VERSION: &str = "v1.32.4";
/// corev1.MaxSecretSize, the limit on a ConfigMap's data plus binaryData.
const MAX_CONFIGMAP_BYTES: usize = 1024 * 1024;
/// Largest request body accepted (the real server's limit is 3 MiB).
const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// How long a watch from a resourceVersion newer than the server's waits for it (then 504).
const FRESHNESS_WAIT: Duration = Duration::from_secs(3);
/// Longest a watch sleeps before re-checking its deadlines.
const WATCH_POLL: Duration = Duration::from_millis(200);
/// A client that does not read its responses for this long is disconnected.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The annotation on the bookmark that ends the initial events of `sendInitialEvents=true`.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";
/// Accepted PATCH content types, in the order the real server lists them.
const PATCH_TYPES: &str =
    "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json";
/// Accepted body content types for POST and PUT.
const BODY_TYPES: &str = "application/json, application/yaml, application/vnd.kubernetes.protobuf";

// ------------------------------------------------------------------------------------------
// Public API
// ------------------------------------------------------------------------------------------

/// One request as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    /// The path without the query, e.g. `/api/v1/namespaces/kubelet-config/configmaps`.
    pub path: String,
    /// The raw query string (percent-encoded), without `?`.
    pub query: String,
    /// True for `watch=true`/`watch=1` requests.
    pub watch: bool,
    pub content_type: Option<String>,
    /// The request body (lossy UTF-8).
    pub body: String,
    /// The HTTP status answered (200 for a watch stream, even one that carries an ERROR).
    pub status: u16,
}

impl RequestRecord {
    /// The decoded value of query parameter `key`, if present.
    pub fn query_param(&self, key: &str) -> Option<String> {
        parse_query(&self.query).remove(key)
    }
}

/// The fake API server. Every method takes `&self`; share it with `Arc` if threads need it.
/// Dropping it stops it.
pub struct ApiServer {
    shared: Arc<Shared>,
    port: u16,
    acceptor: Mutex<Option<Acceptor>>,
    /// The thread that finishes pod terminations (started by the first termination delay).
    reaper: Mutex<Option<JoinHandle<()>>>,
}

impl ApiServer {
    /// Starts a server on `127.0.0.1:0` (a free port) with the default namespaces and no
    /// objects.
    pub fn start() -> ApiServer {
        Self::start_on(0).unwrap_or_else(|err| panic!("fake API server: {err}"))
    }

    /// Starts a server on `127.0.0.1:PORT` (0: a free port) with the default namespaces and no
    /// objects; `Err` if the port cannot be bound.
    pub fn start_on(port: u16) -> io::Result<ApiServer> {
        let listener = TcpListener::bind(("127.0.0.1", port)).map_err(|err| {
            io::Error::new(
                err.kind(),
                format!("failed to bind 127.0.0.1:{port}: {err}"),
            )
        })?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new()),
            changed: Condvar::new(),
            conns: Mutex::new(ConnRegistry::default()),
            next_conn: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        let acceptor = Acceptor::spawn(listener, Arc::clone(&shared));
        Ok(ApiServer {
            shared,
            port,
            acceptor: Mutex::new(Some(acceptor)),
            reaper: Mutex::new(None),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The bearer token the server requires.
    pub fn token(&self) -> String {
        self.lock().token.clone()
    }

    /// Writes a kubeconfig for this server (static token, TLS verification off, namespace
    /// `default`) to `path`.
    pub fn write_kubeconfig(&self, path: &Path) {
        self.write_kubeconfig_with(path, &self.token());
    }

    /// A kubeconfig like [`ApiServer::write_kubeconfig`]'s, with another bearer token.
    fn write_kubeconfig_with(&self, path: &Path, token: &str) {
        let text = format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: fake\n  cluster:\n    server: {url}\n    insecure-skip-tls-verify: true\n\
             users:\n\
             - name: fake\n  user:\n    token: {token}\n\
             contexts:\n\
             - name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
             current-context: fake\n",
            url = self.url(),
        );
        std::fs::write(path, text)
            .unwrap_or_else(|err| panic!("failed to write kubeconfig {}: {err}", path.display()));
    }

    /// Writes a kubeconfig for this server to `<dir>/kubeconfig` and returns its path.
    pub fn kubeconfig_in(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        self.write_kubeconfig(&path);
        path
    }

    /// The next `n` non-watch requests are answered with a Status of HTTP `code` (500
    /// InternalError, 429 TooManyRequests with `Retry-After: 1`, 503, 504, 409, 403, ...)
    /// instead of being served.
    pub fn fail_next(&self, n: usize, code: u16) {
        self.lock().faults.push_back(Fault {
            remaining: n,
            code,
            method: None,
            path_prefix: None,
        });
    }

    /// Like [`ApiServer::fail_next`], for requests with this method (`""` = any) whose path
    /// starts with `path_prefix`; these may be watch requests (the watch then fails before
    /// its stream starts).
    pub fn fail_next_matching(&self, n: usize, code: u16, method: &str, path_prefix: &str) {
        self.lock().faults.push_back(Fault {
            remaining: n,
            code,
            method: (!method.is_empty()).then(|| method.to_ascii_uppercase()),
            path_prefix: Some(path_prefix.to_string()),
        });
    }

    /// Delays every response (including the start of watch streams) by `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    /// Ends every open watch stream now (cleanly, as a server-side timeout does) and closes
    /// its connection.
    pub fn drop_watches(&self) {
        self.lock().drop_epoch += 1;
        self.shared.changed.notify_all();
    }

    /// Sends a BOOKMARK now on every open watch that asked for bookmarks.
    pub fn send_bookmark(&self) {
        self.lock().bookmark_epoch += 1;
        self.shared.changed.notify_all();
    }

    /// How often watches that asked for bookmarks get one.
    pub fn set_bookmark_interval(&self, interval: Duration) {
        self.lock().bookmark_interval = interval;
        self.shared.changed.notify_all();
    }

    /// `true`: an old server that keeps (and validates) Node `spec.configSource` and
    /// `status.config`; `false` (the default): they are dropped as since v1.24.
    pub fn keep_config_source(&self, keep: bool) {
        self.lock().keep_config_source = keep;
    }

    /// Number of watch events kept per resource.
    pub fn set_history_limit(&self, limit: usize) {
        let mut state = self.lock();
        state.history_limit = limit.max(1);
        let limit = state.history_limit;
        for history in state.histories.values_mut() {
            history.trim(limit);
        }
    }

    /// Forgets all watch history (like an etcd compaction plus a watch cache re-list): a
    /// watch from any resourceVersion before now gets 410 Expired.
    pub fn compact_history(&self) {
        let mut state = self.lock();
        let rv = state.rv;
        for history in state.histories.values_mut() {
            history.events.clear();
            history.floor = rv;
            history.evicted = false;
        }
    }

    /// Shuts down: closes the listener and every connection; clients see connection refused.
    /// The stored objects are kept for [`ApiServer::restart_on_same_port`].
    pub fn stop(&self) {
        let acceptor = self
            .acceptor
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        if let Some(acceptor) = acceptor {
            acceptor.stop(self.port);
        }
        self.lock().stop_epoch += 1;
        self.shared.changed.notify_all();
        let mut conns = self.shared.lock_conns();
        conns.epoch += 1;
        for (_, stream) in conns.streams.drain() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Stops (if running) and listens again on the same port, with the same objects and
    /// resourceVersions (like an API server restart in front of the same etcd).
    pub fn restart_on_same_port(&self) {
        self.stop();
        let listener = bind_with_retry(self.port);
        let acceptor = Acceptor::spawn(listener, Arc::clone(&self.shared));
        *self
            .acceptor
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(acceptor);
    }

    /// Restarts like [`ApiServer::restart_on_same_port`], but the watch history is lost (a new
    /// watch cache in front of an etcd that moved on meanwhile): the resourceVersion advances
    /// and every watch from a resourceVersion before the restart gets 410 Expired, so clients
    /// must re-list. Objects, UIDs and their resourceVersions are kept.
    pub fn restart_losing_history(&self) {
        self.stop();
        {
            let mut state = self.lock();
            // Other writers (leases, other nodes) kept etcd's revision moving.
            state.rv += 1;
        }
        self.compact_history();
        let listener = bind_with_retry(self.port);
        let acceptor = Acceptor::spawn(listener, Arc::clone(&self.shared));
        *self
            .acceptor
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(acceptor);
    }

    /// Whether the server is listening.
    pub fn is_running(&self) -> bool {
        self.acceptor
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .is_some()
    }

    /// Every request served so far, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.lock().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    /// Number of open watch streams whose path starts with `path_prefix`.
    pub fn open_watches(&self, path_prefix: &str) -> usize {
        self.lock()
            .watches
            .values()
            .filter(|record| record.path.starts_with(path_prefix))
            .count()
    }

    /// The requests of the open watch streams.
    pub fn open_watch_records(&self) -> Vec<RequestRecord> {
        self.lock().watches.values().cloned().collect()
    }

    /// Requests to any verb on `resource` (e.g. `configmaps`, `nodes/status`) are refused
    /// with the real RBAC 403 message; `verb` is `get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete` or `*`; `namespace` `None` means every namespace.
    pub fn deny(&self, verb: &str, resource: &str, namespace: Option<&str>) {
        self.lock().denies.push(Deny {
            verb: verb.to_string(),
            resource: resource.to_string(),
            namespace: namespace.map(str::to_string),
        });
    }

    /// Removes every [`ApiServer::deny`] rule.
    pub fn allow_all(&self) {
        self.lock().denies.clear();
    }

    /// `true`: a request without credentials is `system:anonymous` (may read /version and
    /// the health endpoints only; 403 elsewhere), as on a secure port. `false` (the default):
    /// it is served as `system:unsecured`, like kube-apiserver's old plain-HTTP port, because
    /// client-go (kubectl) never sends credentials over plain HTTP. A wrong token is 401 either
    /// way.
    pub fn require_token(&self, require: bool) {
        self.lock().require_token = require;
    }

    /// The user name that appears in 403 messages.
    pub fn set_user(&self, user: &str) {
        self.lock().user = user.to_string();
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Creates a namespace.
    pub fn create_namespace(&self, name: &str) -> Value {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        self.helper(|state| {
            state.create(
                &Target::cluster(Resource::Namespaces),
                body,
                &Opts::default(),
            )
        })
    }

    /// Creates a Node with these annotations and the Ready condition.
    pub fn create_node<K, V>(
        &self,
        name: &str,
        annotations: impl IntoIterator<Item = (K, V)>,
    ) -> Value
    where
        K: Into<String>,
        V: Into<String>,
    {
        let annotations: Map<String, Value> = annotations
            .into_iter()
            .map(|(k, v)| (k.into(), Value::String(v.into())))
            .collect();
        let body = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": annotations, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339(),
                }],
                "addresses": [{"type": "Hostname", "address": name}],
            },
        });
        self.helper(|state| state.create(&Target::cluster(Resource::Nodes), body, &Opts::default()))
    }

    /// The stored Node; panics if there is none.
    pub fn node(&self, name: &str) -> Value {
        self.try_node(name)
            .unwrap_or_else(|| panic!("fake API server has no node {name:?}"))
    }

    pub fn try_node(&self, name: &str) -> Option<Value> {
        self.lock()
            .get_served(&Target::object(Resource::Nodes, None, name))
    }

    /// Applies a JSON merge patch to `nodes/NAME` (or `nodes/NAME/status` if `status`) with
    /// the server's semantics; `Err` is the Status a client would get.
    pub fn patch_node(&self, name: &str, merge_patch: Value, status: bool) -> Result<Value, Value> {
        let mut target = Target::object(Resource::Nodes, None, name);
        if status {
            target.subresource = Some("status".to_string());
        }
        let patch = merge_patch.to_string().into_bytes();
        self.helper_result(|state| state.patch(&target, PatchKind::Merge, &patch, &Opts::default()))
    }

    /// Sets (`Some`) or removes (`None`) one annotation of a Node, as `kubectl annotate` does.
    pub fn set_node_annotation(&self, name: &str, key: &str, value: Option<&str>) -> Value {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.patch_node(name, patch, false)
            .unwrap_or_else(|status| panic!("failed to annotate node {name}: {status}"))
    }

    pub fn delete_node(&self, name: &str) {
        let target = Target::object(Resource::Nodes, None, name);
        self.helper(|state| state.delete(&target, None, &Opts::default()));
    }

    /// Creates a ConfigMap and returns it (with uid and resourceVersion).
    pub fn create_configmap(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
        immutable: bool,
    ) -> Value {
        let mut body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        });
        if immutable {
            body["immutable"] = Value::Bool(true);
        }
        let target = Target::collection(Resource::ConfigMaps, Some(namespace));
        self.helper(|state| state.create(&target, body, &Opts::default()))
    }

    /// Replaces a ConfigMap's data (an update, with all of the server's checks: an immutable
    /// ConfigMap gives `Err` with the 422 Status).
    pub fn update_configmap_data(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<Value, Value> {
        let target = Target::object(Resource::ConfigMaps, Some(namespace), name);
        let patch = json!([{"op": "add", "path": "/data", "value": data}]).to_string();
        self.helper_result(|state| {
            state.patch(&target, PatchKind::Json, patch.as_bytes(), &Opts::default())
        })
    }

    /// The stored ConfigMap, if any.
    pub fn configmap(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .get_served(&Target::object(Resource::ConfigMaps, Some(namespace), name))
    }

    pub fn delete_configmap(&self, namespace: &str, name: &str) {
        let target = Target::object(Resource::ConfigMaps, Some(namespace), name);
        self.helper(|state| state.delete(&target, None, &Opts::default()));
    }

    /// Every stored Event (core/v1 form), in namespace/name order.
    pub fn events(&self) -> Vec<Value> {
        let state = self.lock();
        state
            .objects(Resource::Events)
            .values()
            .map(|obj| with_type_meta(obj.clone(), Resource::Events, ApiGroup::Core))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    fn helper(&self, op: impl FnOnce(&mut State) -> Result<Outcome, ApiError>) -> Value {
        self.helper_result(op)
            .unwrap_or_else(|status| panic!("fake API server helper failed: {status}"))
    }

    fn helper_result(
        &self,
        op: impl FnOnce(&mut State) -> Result<Outcome, ApiError>,
    ) -> Result<Value, Value> {
        let result = {
            let mut state = self.lock();
            op(&mut state)
        };
        self.shared.changed.notify_all();
        result
            .map(|outcome| outcome.body)
            .map_err(|err| err.status())
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop();
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        let reaper = self
            .reaper
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        if let Some(reaper) = reaper {
            let _ = reaper.join();
        }
    }
}

// ------------------------------------------------------------------------------------------
// Listener, connections and shared state
// ------------------------------------------------------------------------------------------

struct Shared {
    state: Mutex<State>,
    /// Signalled on every change a watch may care about (writes, drops, bookmarks, stop).
    changed: Condvar,
    conns: Mutex<ConnRegistry>,
    next_conn: AtomicU64,
    /// Set when the ApiServer is dropped (ends the pod termination thread).
    closed: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking connection thread must not take the whole server down with it.
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn lock_conns(&self) -> MutexGuard<'_, ConnRegistry> {
        self.conns
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// Open connections, so that `stop` can close them.
#[derive(Default)]
struct ConnRegistry {
    /// Incremented by `stop`; a connection accepted under an older epoch is closed at once.
    epoch: u64,
    streams: HashMap<u64, TcpStream>,
}

struct Acceptor {
    stopping: Arc<AtomicBool>,
    /// The listening socket itself, as a stream, to shut it down: a `close` alone would leave
    /// it listening while a child process forked at that moment (a test running kubectl)
    /// still holds the descriptor, and would not wake the blocked `accept`.
    control: TcpStream,
    thread: JoinHandle<()>,
}

impl Acceptor {
    fn spawn(listener: TcpListener, shared: Arc<Shared>) -> Acceptor {
        let control = listener
            .try_clone()
            .map(|clone| TcpStream::from(OwnedFd::from(clone)))
            .unwrap_or_else(|err| panic!("fake API server: failed to clone the listener: {err}"));
        let stopping = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stopping);
        let epoch = shared.lock_conns().epoch;
        let thread = thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let shared = Arc::clone(&shared);
                thread::spawn(move || serve_connection(shared, stream, epoch));
            }
        });
        Acceptor {
            stopping,
            control,
            thread,
        }
    }

    fn stop(self, port: u16) {
        self.stopping.store(true, Ordering::SeqCst);
        // shutdown(2) on a listening socket stops it listening (new connections are refused)
        // and makes the blocked accept() return.
        let _ = self.control.shutdown(Shutdown::Both);
        // In case accept() was not woken: a connection wakes it (refused once shut down).
        let _ = TcpStream::connect(("127.0.0.1", port));
        let _ = self.thread.join();
    }
}

fn bind_with_retry(port: u16) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(listener) => return listener,
            Err(err) if Instant::now() < deadline => {
                let _ = err;
                thread::sleep(Duration::from_millis(20));
            }
            Err(err) => panic!("fake API server: failed to re-bind 127.0.0.1:{port}: {err}"),
        }
    }
}

fn serve_connection(shared: Arc<Shared>, stream: TcpStream, epoch: u64) {
    let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
    {
        let mut conns = shared.lock_conns();
        let Ok(clone) = stream.try_clone() else {
            return;
        };
        if conns.epoch != epoch {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        conns.streams.insert(id, clone);
    }
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = stream.set_nodelay(true);
    if let Ok(read_half) = stream.try_clone() {
        let mut reader = BufReader::new(read_half);
        let mut writer = stream;
        loop {
            let request = match read_request(&mut reader) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(err) => {
                    let status = ApiError::bad_request(format!("malformed HTTP request: {err}"));
                    let _ = write_json(&mut writer, status.code, &[], &status.status(), false);
                    break;
                }
            };
            match handle(&shared, request, &mut writer) {
                Ok(true) => {}
                Ok(false) | Err(_) => break,
            }
        }
        let _ = writer.shutdown(Shutdown::Both);
    }
    shared.lock_conns().streams.remove(&id);
}

// ------------------------------------------------------------------------------------------
// HTTP/1.1
// ------------------------------------------------------------------------------------------

struct HttpRequest {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// The value of the first header called `name` (case-insensitive) in `(name, value)` pairs.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

impl HttpRequest {
    fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    fn keep_alive(&self) -> bool {
        !self
            .header("connection")
            .is_some_and(|value| value.eq_ignore_ascii_case("close"))
    }
}

fn read_line(reader: &mut impl BufRead) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let n = reader.take(64 * 1024).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "line too long or truncated",
        ));
    }
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    String::from_utf8(line)
        .map(Some)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "non-UTF-8 header line"))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn read_request(reader: &mut impl BufRead) -> io::Result<Option<HttpRequest>> {
    let line = loop {
        match read_line(reader)? {
            None => return Ok(None),
            // Tolerate stray CRLFs between requests (RFC 9112 section 2.2).
            Some(line) if line.is_empty() => continue,
            Some(line) => break line,
        }
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid("bad request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(invalid("unsupported HTTP version"));
    }
    let mut headers = Vec::new();
    loop {
        let line = read_line(reader)?.ok_or_else(|| invalid("headers truncated"))?;
        if line.is_empty() {
            break;
        }
        let (key, value) = line.split_once(':').ok_or_else(|| invalid("bad header"))?;
        headers.push((key.trim().to_string(), value.trim().to_string()));
    }
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_string(), query.to_string()),
        None => (target.to_string(), String::new()),
    };
    let mut request = HttpRequest {
        method: method.to_string(),
        path: percent_decode(&path, false),
        query,
        headers,
        body: Vec::new(),
    };
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            let size_line = read_line(reader)?.ok_or_else(|| invalid("chunk truncated"))?;
            let size_text = size_line.split(';').next().unwrap_or("").trim();
            let size =
                usize::from_str_radix(size_text, 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailers, then the empty line.
                while !read_line(reader)?.unwrap_or_default().is_empty() {}
                break;
            }
            if request.body.len() + size > MAX_BODY_BYTES {
                return Err(invalid("body too large"));
            }
            let mut chunk = vec![0; size];
            reader.read_exact(&mut chunk)?;
            request.body.extend_from_slice(&chunk);
            read_line(reader)?;
        }
    } else if let Some(length) = request.header("content-length") {
        let length: usize = length.parse().map_err(|_| invalid("bad Content-Length"))?;
        if length > MAX_BODY_BYTES {
            return Err(invalid("body too large"));
        }
        request.body = vec![0; length];
        reader.read_exact(&mut request.body)?;
    }
    Ok(Some(request))
}

fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        410 => "Gone",
        413 => "Request Entity Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}

fn write_head(
    writer: &mut impl Write,
    code: u16,
    headers: &[(String, String)],
    framing: &str,
    keep_alive: bool,
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {code} {}\r\n", reason_phrase(code));
    head.push_str("Content-Type: application/json\r\n");
    head.push_str("Cache-Control: no-cache, private\r\n");
    head.push_str(&format!("Date: {}\r\n", http_date(SystemTime::now())));
    for (key, value) in headers {
        head.push_str(&format!("{key}: {value}\r\n"));
    }
    head.push_str(framing);
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    writer.write_all(head.as_bytes())
}

fn write_json(
    writer: &mut impl Write,
    code: u16,
    headers: &[(String, String)],
    body: &Value,
    keep_alive: bool,
) -> io::Result<()> {
    let mut bytes = body.to_string().into_bytes();
    bytes.push(b'\n');
    let framing = format!("Content-Length: {}\r\n", bytes.len());
    write_head(writer, code, headers, &framing, keep_alive)?;
    writer.write_all(&bytes)?;
    writer.flush()
}

/// Writes one watch event as its own chunk.
fn write_chunk(writer: &mut impl Write, event: &Value) -> io::Result<()> {
    let mut line = event.to_string();
    line.push('\n');
    write!(writer, "{:x}\r\n{line}\r\n", line.len())?;
    writer.flush()
}

fn finish_chunks(writer: &mut impl Write) -> io::Result<()> {
    writer.write_all(b"0\r\n\r\n")?;
    writer.flush()
}

fn percent_decode(text: &str, plus_is_space: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => (percent_decode(key, true), percent_decode(value, true)),
            None => (percent_decode(pair, true), String::new()),
        })
        .collect()
}

// ------------------------------------------------------------------------------------------
// Resources and request targets
// ------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Resource {
    Nodes,
    ConfigMaps,
    Events,
    Namespaces,
    Pods,
    PodDisruptionBudgets,
    Leases,
    CustomResourceDefinitions,
    /// The objects of a CustomResourceDefinition (module `crd`).
    Custom(&'static crd::CustomType),
}

/// Every built-in resource.
const RESOURCES: [Resource; 8] = [
    Resource::Nodes,
    Resource::ConfigMaps,
    Resource::Events,
    Resource::Namespaces,
    Resource::Pods,
    Resource::PodDisruptionBudgets,
    Resource::Leases,
    Resource::CustomResourceDefinitions,
];

impl Resource {
    fn plural(self) -> &'static str {
        match self {
            Resource::Nodes => "nodes",
            Resource::ConfigMaps => "configmaps",
            Resource::Events => "events",
            Resource::Namespaces => "namespaces",
            Resource::Pods => "pods",
            Resource::PodDisruptionBudgets => "poddisruptionbudgets",
            Resource::Leases => "leases",
            Resource::CustomResourceDefinitions => "customresourcedefinitions",
            Resource::Custom(custom) => custom.plural,
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Resource::Nodes => "Node",
            Resource::ConfigMaps => "ConfigMap",
            Resource::Events => "Event",
            Resource::Namespaces => "Namespace",
            Resource::Pods => "Pod",
            Resource::PodDisruptionBudgets => "PodDisruptionBudget",
            Resource::Leases => "Lease",
            Resource::CustomResourceDefinitions => "CustomResourceDefinition",
            Resource::Custom(custom) => custom.kind,
        }
    }

    /// The kind of a list (`NodeList`; a CustomResourceDefinition's `spec.names.listKind`).
    fn list_kind(self) -> String {
        match self {
            Resource::Custom(custom) => custom.list_kind.to_string(),
            other => format!("{}List", other.kind()),
        }
    }

    fn namespaced(self) -> bool {
        match self {
            Resource::ConfigMaps
            | Resource::Events
            | Resource::Pods
            | Resource::PodDisruptionBudgets
            | Resource::Leases => true,
            Resource::Nodes | Resource::Namespaces | Resource::CustomResourceDefinitions => false,
            Resource::Custom(custom) => custom.namespaced,
        }
    }

    fn short_names(self) -> &'static [&'static str] {
        match self {
            Resource::Nodes => &["no"],
            Resource::ConfigMaps => &["cm"],
            Resource::Events => &["ev"],
            Resource::Namespaces => &["ns"],
            Resource::Pods => &["po"],
            Resource::PodDisruptionBudgets => &["pdb"],
            Resource::CustomResourceDefinitions => &["crd", "crds"],
            // A custom resource's come from its definition (module `crd`).
            Resource::Leases | Resource::Custom(_) => &[],
        }
    }

    /// The subresources served below an object (`nodes/NAME/status`, ...); a custom
    /// resource's `status` only when its definition enables it (checked by `crd`).
    fn subresources(self) -> &'static [&'static str] {
        match self {
            Resource::Nodes
            | Resource::PodDisruptionBudgets
            | Resource::CustomResourceDefinitions
            | Resource::Custom(_) => &["status"],
            Resource::Pods => &["status", "eviction"],
            Resource::ConfigMaps | Resource::Events | Resource::Namespaces | Resource::Leases => {
                &[]
            }
        }
    }

    /// The group whose version the object is stored in (Events: core/v1; a custom resource:
    /// its storage version).
    fn home_group(self) -> ApiGroup {
        match self {
            Resource::PodDisruptionBudgets => ApiGroup::PolicyV1,
            Resource::Leases => ApiGroup::CoordinationV1,
            Resource::CustomResourceDefinitions => ApiGroup::ApiextensionsV1,
            Resource::Custom(custom) => ApiGroup::Custom(custom.storage),
            _ => ApiGroup::Core,
        }
    }

    fn is_custom(self) -> bool {
        matches!(self, Resource::Custom(_))
    }

    fn from_plural(plural: &str) -> Option<Resource> {
        RESOURCES
            .into_iter()
            .find(|resource| resource.plural() == plural)
    }
}

/// The API group a request came through; Events are served by both core and events.k8s.io.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ApiGroup {
    Core,
    EventsV1,
    PolicyV1,
    CoordinationV1,
    ApiextensionsV1,
    /// A version of a CustomResourceDefinition's group.
    Custom(&'static crd::GroupVersion),
}

impl ApiGroup {
    fn group(self) -> &'static str {
        match self {
            ApiGroup::Core => "",
            ApiGroup::EventsV1 => "events.k8s.io",
            ApiGroup::PolicyV1 => "policy",
            ApiGroup::CoordinationV1 => "coordination.k8s.io",
            ApiGroup::ApiextensionsV1 => "apiextensions.k8s.io",
            ApiGroup::Custom(gv) => gv.group,
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            ApiGroup::Core => "v1",
            ApiGroup::EventsV1 => "events.k8s.io/v1",
            ApiGroup::PolicyV1 => "policy/v1",
            ApiGroup::CoordinationV1 => "coordination.k8s.io/v1",
            ApiGroup::ApiextensionsV1 => "apiextensions.k8s.io/v1",
            ApiGroup::Custom(gv) => gv.api_version,
        }
    }

    /// Whether `resource` is served through this group.
    fn serves(self, resource: Resource) -> bool {
        match self {
            ApiGroup::Core => matches!(
                resource,
                Resource::Nodes
                    | Resource::ConfigMaps
                    | Resource::Events
                    | Resource::Namespaces
                    | Resource::Pods
            ),
            ApiGroup::EventsV1 => resource == Resource::Events,
            ApiGroup::PolicyV1 => resource == Resource::PodDisruptionBudgets,
            ApiGroup::CoordinationV1 => resource == Resource::Leases,
            ApiGroup::ApiextensionsV1 => resource == Resource::CustomResourceDefinitions,
            ApiGroup::Custom(gv) => {
                matches!(resource, Resource::Custom(custom) if custom.group == gv.group)
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Target {
    group: ApiGroup,
    resource: Resource,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Target {
    fn cluster(resource: Resource) -> Target {
        Target::collection(resource, None)
    }

    fn collection(resource: Resource, namespace: Option<&str>) -> Target {
        Target {
            group: resource.home_group(),
            resource,
            namespace: namespace.map(str::to_string),
            name: None,
            subresource: None,
        }
    }

    fn object(resource: Resource, namespace: Option<&str>, name: &str) -> Target {
        Target {
            name: Some(name.to_string()),
            ..Target::collection(resource, namespace)
        }
    }

    /// `configmaps`, or `events.events.k8s.io` (the GroupResource string of messages).
    fn qualified(&self) -> String {
        match self.group {
            ApiGroup::Core => self.resource.plural().to_string(),
            group => format!("{}.{}", self.resource.plural(), group.group()),
        }
    }

    /// `nodes/status` or `configmaps` (what RBAC and `deny` match).
    fn rbac_resource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource.plural()),
            None => self.resource.plural().to_string(),
        }
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    fn key(&self) -> (String, String) {
        (
            self.namespace.clone().unwrap_or_default(),
            self.name().to_string(),
        )
    }

    fn is_status(&self) -> bool {
        self.subresource.as_deref() == Some("status")
    }

    fn is_eviction(&self) -> bool {
        self.subresource.as_deref() == Some("eviction")
    }
}

/// Parses the resource paths of the built-in groups (`/api/v1/...`,
/// `/apis/events.k8s.io/v1/...`, `/apis/policy/v1/...`, `/apis/coordination.k8s.io/v1/...`,
/// `/apis/apiextensions.k8s.io/v1/...`); custom resources are `crd::parse_target`'s.
fn parse_target(path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => (ApiGroup::Core, rest),
        ["apis", "events.k8s.io", "v1", rest @ ..] => (ApiGroup::EventsV1, rest),
        ["apis", "policy", "v1", rest @ ..] => (ApiGroup::PolicyV1, rest),
        ["apis", "coordination.k8s.io", "v1", rest @ ..] => (ApiGroup::CoordinationV1, rest),
        ["apis", "apiextensions.k8s.io", "v1", rest @ ..] => (ApiGroup::ApiextensionsV1, rest),
        _ => return None,
    };
    let (namespace, resource, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] if Resource::from_plural(plural).is_some() => {
            let resource = Resource::from_plural(plural)?;
            if !resource.namespaced() {
                return None;
            }
            (Some(ns.to_string()), resource, tail)
        }
        [plural, tail @ ..] => (None, Resource::from_plural(plural)?, tail),
        [] => return None,
    };
    if !group.serves(resource) {
        return None;
    }
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some(name.to_string()), None),
        [name, sub] if resource.subresources().contains(sub) => {
            (Some(name.to_string()), Some(sub.to_string()))
        }
        _ => return None,
    };
    // A namespaced resource has no objects outside a namespace (but lists across them).
    if resource.namespaced() && namespace.is_none() && name.is_some() {
        return None;
    }
    Some(Target {
        group,
        resource,
        namespace,
        name,
        subresource,
    })
}

// ------------------------------------------------------------------------------------------
// Errors: real Status objects
// ------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct ApiError {
    code: u16,
    reason: &'static str,
    message: String,
    details: Option<Value>,
    retry_after: Option<u32>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        if !self.reason.is_empty() {
            status["reason"] = json!(self.reason);
        }
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }

    fn headers(&self) -> Vec<(String, String)> {
        self.retry_after
            .map(|seconds| vec![("Retry-After".to_string(), seconds.to_string())])
            .unwrap_or_default()
    }

    fn resource_details(target: &Target, name: &str) -> Value {
        let mut details = json!({"name": name, "kind": target.resource.plural()});
        if target.group != ApiGroup::Core {
            details["group"] = json!(target.group.group());
        }
        details
    }

    fn not_found(target: &Target, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", target.qualified()),
        )
        .with_details(Self::resource_details(target, name))
    }

    fn namespace_not_found(namespace: &str) -> ApiError {
        let target = Target::cluster(Resource::Namespaces);
        ApiError::not_found(&target, namespace)
    }

    fn no_such_path() -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    fn already_exists(target: &Target, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", target.qualified()),
        )
        .with_details(Self::resource_details(target, name))
    }

    fn conflict(target: &Target, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                target.qualified()
            ),
        )
        .with_details(Self::resource_details(target, name))
    }

    fn modified(target: &Target, name: &str) -> ApiError {
        ApiError::conflict(
            target,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// [`ApiError::invalid`] for the object `name` of `target`'s kind and group.
    fn invalid_object(target: &Target, name: &str, errors: &[FieldError]) -> ApiError {
        ApiError::invalid(target.resource.kind(), target.group.group(), name, errors)
    }

    /// `errors.NewInvalid`: 422 with the field errors as causes.
    fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> ApiError {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let aggregate = match errors {
            [one] => one.to_string(),
            many => format!(
                "[{}]",
                many.iter()
                    .map(FieldError::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|err| json!({"reason": err.reason(), "message": err.body(), "field": err.field}))
            .collect();
        let mut details = json!({"name": name, "kind": kind, "causes": causes});
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        ApiError::new(
            422,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {aggregate}"),
        )
        .with_details(details)
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    fn method_not_allowed() -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    fn unsupported_media_type(accepted: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}"
            ),
        )
    }

    fn expired(message: String) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    fn internal(cause: &str) -> ApiError {
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {cause}"),
        )
        .with_details(json!({"causes": [{"message": cause}]}))
    }

    fn too_many_requests() -> ApiError {
        let mut err = ApiError::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
        .with_details(json!({"retryAfterSeconds": 1}));
        err.retry_after = Some(1);
        err
    }

    fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    fn forbidden(user: &str, verb: &str, target: &Target) -> ApiError {
        let scope = match &target.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        let why = format!(
            "User \"{user}\" cannot {verb} resource \"{}\" in API group \"{}\" {scope}",
            target.rbac_resource(),
            target.group.group()
        );
        let what = match &target.name {
            Some(name) => format!("{} \"{name}\"", target.qualified()),
            None => target.qualified(),
        };
        ApiError::new(403, "Forbidden", format!("{what} is forbidden: {why}"))
            .with_details(Self::resource_details(target, target.name()))
    }

    fn forbidden_path(user: &str, path: &str) -> ApiError {
        ApiError::new(
            403,
            "Forbidden",
            format!("forbidden: User \"{user}\" cannot get path \"{path}\""),
        )
        .with_details(json!({}))
    }

    fn timeout(message: String, retry_after: u32) -> ApiError {
        let mut err = ApiError::new(504, "Timeout", format!("Timeout: {message}"))
            .with_details(json!({"retryAfterSeconds": retry_after}));
        err.retry_after = Some(retry_after);
        err
    }

    /// The Status an injected fault of HTTP `code` answers `target` with.
    fn injected(code: u16, user: &str, verb: &str, target: Option<&Target>) -> ApiError {
        let generic = Target::cluster(Resource::Nodes);
        let t = target.unwrap_or(&generic);
        let name = t.name().to_string();
        match code {
            400 => ApiError::bad_request("injected fault: bad request"),
            401 => ApiError::unauthorized(),
            403 => match target {
                Some(t) => ApiError::forbidden(user, verb, t),
                None => ApiError::forbidden_path(user, "/"),
            },
            404 => ApiError::not_found(t, &name),
            409 => ApiError::modified(t, &name),
            410 => ApiError::expired("injected fault: resource version expired".to_string()),
            422 => ApiError::invalid_object(
                t,
                &name,
                &[FieldError::invalid("metadata", json!(""), "injected fault")],
            ),
            429 => ApiError::too_many_requests(),
            500 => ApiError::internal("injected fault"),
            503 => ApiError::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => ApiError::timeout(
                "request did not complete within the allotted timeout".to_string(),
                1,
            ),
            other => ApiError::new(
                other,
                if other >= 500 { "InternalError" } else { "" },
                format!("injected fault: HTTP {other}"),
            ),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

/// A `field.Error` of k8s.io/apimachinery.
#[derive(Clone, Debug)]
struct FieldError {
    field: String,
    kind: FieldErrorKind,
    detail: String,
}

#[derive(Clone, Debug)]
enum FieldErrorKind {
    Required,
    Invalid(Value),
    Forbidden,
    TooLong,
    Duplicate(Value),
    /// The value and the supported values.
    NotSupported(Value, Vec<String>),
    /// A value of the wrong JSON type (`field.TypeInvalid`): the value shown is the type.
    TypeInvalid(Value),
    /// Too many items or properties (`field.TooMany`): the actual number.
    TooMany(Value),
    /// An invalid value shown as Go's `%#v` prints it (a struct or slice).
    InvalidGo(String),
}

impl FieldError {
    fn required(field: &str, detail: &str) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::Required,
            detail: detail.to_string(),
        }
    }

    fn invalid(field: &str, value: Value, detail: &str) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::Invalid(value),
            detail: detail.to_string(),
        }
    }

    fn forbidden(field: &str, detail: &str) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::Forbidden,
            detail: detail.to_string(),
        }
    }

    fn too_long(field: &str, max: usize) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::TooLong,
            detail: format!("must have at most {max} bytes"),
        }
    }

    fn duplicate(field: &str, value: Value) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::Duplicate(value),
            detail: String::new(),
        }
    }

    fn not_supported(field: &str, value: Value, supported: &[&str]) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::NotSupported(
                value,
                supported.iter().map(|s| s.to_string()).collect(),
            ),
            detail: String::new(),
        }
    }

    fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid(_) => "FieldValueInvalid",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::Duplicate(_) => "FieldValueDuplicate",
            FieldErrorKind::NotSupported(..) => "FieldValueNotSupported",
            FieldErrorKind::TypeInvalid(_) => "FieldValueTypeInvalid",
            FieldErrorKind::TooMany(_) => "FieldValueTooMany",
            FieldErrorKind::InvalidGo(_) => "FieldValueInvalid",
        }
    }

    /// `ErrorBody()`: the message without the field path.
    fn body(&self) -> String {
        let mut body = match &self.kind {
            FieldErrorKind::Required => "Required value".to_string(),
            FieldErrorKind::Invalid(value) => format!("Invalid value: {value}"),
            FieldErrorKind::Forbidden => "Forbidden".to_string(),
            FieldErrorKind::TooLong => "Too long".to_string(),
            FieldErrorKind::Duplicate(value) => format!("Duplicate value: {value}"),
            FieldErrorKind::NotSupported(value, supported) => {
                let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                format!(
                    "Unsupported value: {value}: supported values: {}",
                    quoted.join(", ")
                )
            }
            FieldErrorKind::TypeInvalid(value) => format!("Invalid value: {value}"),
            FieldErrorKind::TooMany(value) => format!("Too many: {value}"),
            FieldErrorKind::InvalidGo(shown) => format!("Invalid value: {shown}"),
        };
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

// ------------------------------------------------------------------------------------------
// State: objects, watch history, faults, observations
// ------------------------------------------------------------------------------------------

type Key = (String, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventType {
    Added,
    Modified,
    Deleted,
}

#[derive(Clone, Debug)]
struct HistoryEvent {
    rv: u64,
    kind: EventType,
    object: Value,
    prev: Option<Value>,
}

/// A resource's watch cache: the last events, and what a watch can still resume from.
#[derive(Debug)]
struct History {
    events: VecDeque<HistoryEvent>,
    /// Every event after this resourceVersion is (or was, before an eviction) in `events`.
    floor: u64,
    evicted: bool,
}

impl History {
    fn new(floor: u64) -> History {
        History {
            events: VecDeque::new(),
            floor,
            evicted: false,
        }
    }

    /// `Some(oldest - 1)` if a watch from `rv` cannot be served (the watch cache's
    /// `resourceVersion < oldest-1` rule); that number is what the 410 message shows.
    fn too_old(&self, rv: u64) -> Option<u64> {
        let oldest = match (self.evicted, self.events.front()) {
            (true, Some(first)) => first.rv,
            _ => self.floor + 1,
        };
        (rv + 1 < oldest).then(|| oldest - 1)
    }

    fn trim(&mut self, limit: usize) {
        while self.events.len() > limit {
            if let Some(event) = self.events.pop_front() {
                self.floor = event.rv;
                self.evicted = true;
            }
        }
    }
}

struct Fault {
    remaining: usize,
    code: u16,
    method: Option<String>,
    path_prefix: Option<String>,
}

struct Deny {
    verb: String,
    resource: String,
    namespace: Option<String>,
}

impl Deny {
    fn matches(&self, verb: &str, target: &Target) -> bool {
        (self.verb == "*" || self.verb == verb)
            && self.resource == target.rbac_resource()
            && (self.namespace.is_none() || self.namespace == target.namespace)
    }
}

struct State {
    rv: u64,
    store: BTreeMap<Resource, BTreeMap<Key, Value>>,
    histories: BTreeMap<Resource, History>,
    history_limit: usize,
    keep_config_source: bool,
    token: String,
    user: String,
    require_token: bool,
    denies: Vec<Deny>,
    faults: VecDeque<Fault>,
    delay: Duration,
    requests: Vec<RequestRecord>,
    watches: BTreeMap<u64, RequestRecord>,
    next_watch: u64,
    drop_epoch: u64,
    bookmark_epoch: u64,
    stop_epoch: u64,
    bookmark_interval: Duration,
    /// Node credentials: bearer token -> node name.
    node_tokens: BTreeMap<String, String>,
    /// The AuthorizeNodeWithSelectors feature gate (on by default since v1.32).
    node_selectors: bool,
    /// How long a bound pod takes to terminate after a graceful delete (zero: at once).
    pod_termination_delay: Duration,
    /// Pods being terminated, to be removed when due.
    terminations: Vec<pods::Termination>,
    /// Observers of every committed write (the node simulator), by id.
    commit_hooks: Vec<(u64, CommitHook)>,
    next_hook: u64,
}

/// Called with the state lock held for every committed write: resource, event type, the
/// object as stored (or as it was, for a deletion) and the object before. It must not lock
/// the state.
type CommitHook = Box<dyn FnMut(Resource, EventType, &Value, Option<&Value>) + Send>;

/// Options of a write request.
#[derive(Clone, Debug, Default)]
struct Opts {
    dry_run: bool,
    validation: FieldValidation,
    /// The node whose credentials made the request (NodeRestriction admission applies).
    node: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

/// A successful write or read.
struct Outcome {
    code: u16,
    body: Value,
    warnings: Vec<String>,
}

impl Outcome {
    fn ok(body: Value) -> Outcome {
        Outcome {
            code: 200,
            body,
            warnings: Vec::new(),
        }
    }
}

impl State {
    fn new() -> State {
        let mut state = State {
            rv: INITIAL_RESOURCE_VERSION,
            store: BTreeMap::new(),
            histories: BTreeMap::new(),
            history_limit: DEFAULT_HISTORY_LIMIT,
            keep_config_source: false,
            token: DEFAULT_TOKEN.to_string(),
            user: DEFAULT_USER.to_string(),
            require_token: false,
            denies: Vec::new(),
            faults: VecDeque::new(),
            delay: Duration::ZERO,
            requests: Vec::new(),
            watches: BTreeMap::new(),
            next_watch: 0,
            drop_epoch: 0,
            bookmark_epoch: 0,
            stop_epoch: 0,
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
            node_tokens: BTreeMap::new(),
            node_selectors: true,
            pod_termination_delay: Duration::ZERO,
            terminations: Vec::new(),
            commit_hooks: Vec::new(),
            next_hook: 0,
        };
        for resource in RESOURCES {
            state.store.insert(resource, BTreeMap::new());
            state
                .histories
                .insert(resource, History::new(INITIAL_RESOURCE_VERSION));
        }
        for ns in DEFAULT_NAMESPACES {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            if let Err(err) = state.create(
                &Target::cluster(Resource::Namespaces),
                body,
                &Opts::default(),
            ) {
                panic!("fake API server: failed to create namespace {ns}: {err}");
            }
        }
        state
    }

    fn objects(&self, resource: Resource) -> &BTreeMap<Key, Value> {
        static EMPTY: BTreeMap<Key, Value> = BTreeMap::new();
        self.store.get(&resource).unwrap_or(&EMPTY)
    }

    fn stored(&self, target: &Target) -> Option<&Value> {
        self.objects(target.resource).get(&target.key())
    }

    /// A copy of the stored object `target` names; 404 NotFound if there is none.
    fn existing(&self, target: &Target) -> Result<Value, ApiError> {
        self.stored(target)
            .cloned()
            .ok_or_else(|| ApiError::not_found(target, target.name()))
    }

    /// The object as a client reading `target` sees it.
    fn get_served(&self, target: &Target) -> Option<Value> {
        self.stored(target)
            .map(|obj| with_type_meta(obj.clone(), target.resource, target.group))
    }

    /// Writes (or removes, for Deleted) an object with the next resourceVersion and records
    /// the watch event.
    fn commit(
        &mut self,
        resource: Resource,
        kind: EventType,
        mut object: Value,
        prev: Option<Value>,
    ) -> Value {
        self.rv += 1;
        object["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let key = object_key(&object);
        let objects = self.store.entry(resource).or_default();
        match kind {
            EventType::Deleted => {
                objects.remove(&key);
            }
            EventType::Added | EventType::Modified => {
                objects.insert(key, object.clone());
            }
        }
        for (_, hook) in &mut self.commit_hooks {
            hook(resource, kind, &object, prev.as_ref());
        }
        let prev_type = match resource {
            Resource::CustomResourceDefinitions => prev.as_ref().and_then(crd::custom_type),
            _ => None,
        };
        let limit = self.history_limit;
        let history = self
            .histories
            .entry(resource)
            .or_insert_with(|| History::new(INITIAL_RESOURCE_VERSION));
        history.events.push_back(HistoryEvent {
            rv: self.rv,
            kind,
            object: object.clone(),
            prev,
        });
        history.trim(limit);
        if resource == Resource::CustomResourceDefinitions {
            // The CRD controllers' work (names, establishing, serving, cleanup), done at once.
            crd::on_commit(self, kind, &object, prev_type);
        }
        object
    }

    /// Registers a [`CommitHook`]; returns its id for [`State::remove_commit_hook`].
    fn add_commit_hook(&mut self, hook: CommitHook) -> u64 {
        self.next_hook += 1;
        self.commit_hooks.push((self.next_hook, hook));
        self.next_hook
    }

    fn remove_commit_hook(&mut self, id: u64) {
        self.commit_hooks.retain(|(hook_id, _)| *hook_id != id);
    }

    /// Checks and normalises a request body (or a patched object) into the stored form.
    fn decode(
        &self,
        target: &Target,
        body: Value,
        opts: &Opts,
    ) -> Result<(Value, Vec<String>), ApiError> {
        if target.resource.is_custom() {
            custom::decode(self, target, body, opts)
        } else {
            decode_body(target, body, opts)
        }
    }

    fn namespace_exists(&self, namespace: &str) -> bool {
        self.objects(Resource::Namespaces)
            .contains_key(&(String::new(), namespace.to_string()))
    }

    // --- create -------------------------------------------------------------------------

    fn create(&mut self, target: &Target, body: Value, opts: &Opts) -> Result<Outcome, ApiError> {
        let (mut obj, mut warnings) = self.decode(target, body, opts)?;
        let meta = obj["metadata"].clone();
        // Name or generateName.
        let name = match meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            Some(name) => name.to_string(),
            None => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
                _ => {
                    return Err(ApiError::invalid_object(
                        target,
                        "",
                        &[FieldError::required(
                            "metadata.name",
                            "name or generateName is required",
                        )],
                    ))
                }
            },
        };
        obj["metadata"]["name"] = json!(name);
        // Namespace: from the URL; a different one in the body is a bad request.
        if target.resource.namespaced() {
            let url_ns = target.namespace.clone().unwrap_or_default();
            match meta.get("namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() && ns != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                _ => obj["metadata"]["namespace"] = json!(url_ns),
            }
        } else if let Some(map) = obj["metadata"].as_object_mut() {
            map.remove("namespace");
        }
        if meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty())
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if let Some(node) = &opts.node {
            nodeauth::admit_create(self, node, target, &obj)?;
        }
        if target.resource.is_custom() {
            custom::admit_create(self, target)?;
        }
        // System fields (FillObjectMetaSystemFields): set by the server, whatever was sent.
        if let Some(map) = obj["metadata"].as_object_mut() {
            map.insert("uid".to_string(), json!(uuid_v4()));
            map.insert("creationTimestamp".to_string(), json!(now_rfc3339()));
            for field in [
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
                "generation",
                "managedFields",
            ] {
                map.remove(field);
            }
        }
        warnings.extend(self.prepare(target, &mut obj, None));
        let errors = self.validate(target, &obj, None);
        if !errors.is_empty() {
            return Err(ApiError::invalid_object(target, &name, &errors));
        }
        let ns = target.namespace.clone().unwrap_or_default();
        if target.resource.namespaced() && !self.namespace_exists(&ns) {
            return Err(ApiError::namespace_not_found(&ns));
        }
        let created_target = Target {
            name: Some(name.clone()),
            ..target.clone()
        };
        if self.stored(&created_target).is_some() {
            return Err(ApiError::already_exists(target, &name));
        }
        let stored = if opts.dry_run {
            obj
        } else {
            self.commit(target.resource, EventType::Added, obj, None)
        };
        Ok(Outcome {
            code: 201,
            body: with_type_meta(stored, target.resource, target.group),
            warnings,
        })
    }

    // --- update and patch ---------------------------------------------------------------

    fn update(&mut self, target: &Target, body: Value, opts: &Opts) -> Result<Outcome, ApiError> {
        let old = self.existing(target)?;
        let (obj, warnings) = self.decode(target, body, opts)?;
        self.write_update(target, old, obj, warnings, opts)
    }

    fn patch(
        &mut self,
        target: &Target,
        kind: PatchKind,
        patch: &[u8],
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        if kind == PatchKind::Strategic && target.resource.is_custom() {
            // Custom resources have no Go struct tags to merge by.
            return Err(ApiError::unsupported_media_type(custom::PATCH_TYPES));
        }
        let old = self.existing(target)?;
        let served = with_type_meta(old.clone(), target.resource, target.group);
        let patched = match kind {
            PatchKind::Merge => {
                let patch: Value = serde_json::from_slice(patch)
                    .map_err(|err| ApiError::bad_request(format!("error decoding patch: {err}")))?;
                merge_patch(&served, &patch)
            }
            PatchKind::Strategic => {
                let patch: Value = serde_json::from_slice(patch)
                    .map_err(|err| ApiError::bad_request(format!("error decoding patch: {err}")))?;
                if !patch.is_object() {
                    return Err(ApiError::bad_request(
                        "unable to find api field in struct for the patch: the patch must be a JSON object",
                    ));
                }
                strategic_merge(&served, &patch, target.resource)?
            }
            PatchKind::Json => apply_json_patch(&served, patch)?,
        };
        if !patched.is_object() {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: the patched object is not a JSON object",
                target.resource.kind(),
                target.group.api_version(),
                target.resource.kind()
            )));
        }
        let (obj, warnings) = self.decode(target, patched, opts)?;
        self.write_update(target, old, obj, warnings, opts)
    }

    /// The common tail of PUT and PATCH: preconditions, strategy, validation, no-op check.
    fn write_update(
        &mut self,
        target: &Target,
        old: Value,
        mut obj: Value,
        mut warnings: Vec<String>,
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        let name = target.name().to_string();
        let meta = obj["metadata"].clone();
        if let Some(body_name) = meta.get("name").and_then(Value::as_str) {
            if !body_name.is_empty() && body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
        }
        if let Some(ns) = meta.get("namespace").and_then(Value::as_str) {
            if target.resource.namespaced()
                && !ns.is_empty()
                && Some(ns) != target.namespace.as_deref()
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let old_rv = old["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        match meta.get("resourceVersion").and_then(Value::as_str) {
            Some(rv) if !rv.is_empty() && rv != old_rv => {
                return Err(ApiError::modified(target, &name));
            }
            _ => {}
        }
        let mut errors = Vec::new();
        let old_uid = old["metadata"]["uid"].clone();
        match meta.get("uid").and_then(Value::as_str) {
            Some(uid) if !uid.is_empty() && Some(uid) != old_uid.as_str() => {
                errors.push(FieldError::invalid(
                    "metadata.uid",
                    json!(uid),
                    "field is immutable",
                ));
            }
            _ => {}
        }
        if let Some(node) = &opts.node {
            nodeauth::admit_update(node, target, &obj, &old)?;
        }
        // Fields the client cannot change (BeforeUpdate).
        if let Some(map) = obj["metadata"].as_object_mut() {
            map.insert("name".to_string(), json!(name));
            map.insert("uid".to_string(), old_uid);
            map.insert("resourceVersion".to_string(), json!(old_rv));
            for field in [
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "namespace",
            ] {
                match old["metadata"].get(field) {
                    Some(value) => map.insert(field.to_string(), value.clone()),
                    None => map.remove(field),
                };
            }
            map.remove("managedFields");
            map.remove("selfLink");
        }
        warnings.extend(self.prepare(target, &mut obj, Some(&old)));
        errors.extend(self.validate(target, &obj, Some(&old)));
        if !errors.is_empty() {
            return Err(ApiError::invalid_object(target, &name, &errors));
        }
        if obj == old {
            // Nothing changed: etcd is not written, no new resourceVersion, no event.
            return Ok(Outcome {
                code: 200,
                body: with_type_meta(old, target.resource, target.group),
                warnings,
            });
        }
        if opts.dry_run {
            return Ok(Outcome {
                code: 200,
                body: with_type_meta(obj, target.resource, target.group),
                warnings,
            });
        }
        let finalized = obj["metadata"]
            .get("deletionTimestamp")
            .is_some_and(|t| !t.is_null())
            && finalizers(&obj).is_empty();
        let kind = if finalized {
            EventType::Deleted
        } else {
            EventType::Modified
        };
        let stored = self.commit(target.resource, kind, obj, Some(old));
        Ok(Outcome {
            code: 200,
            body: with_type_meta(stored, target.resource, target.group),
            warnings,
        })
    }

    // --- delete -------------------------------------------------------------------------

    fn delete(
        &mut self,
        target: &Target,
        options: Option<&Value>,
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        let name = target.name().to_string();
        let old = self.existing(target)?;
        if let Some(node) = &opts.node {
            nodeauth::admit_delete(node, target, &old)?;
        }
        let uid = old["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let rv = old["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if let Some(pre) = options.and_then(|o| o.get("preconditions")) {
            if let Some(want) = pre.get("uid").and_then(Value::as_str) {
                if want != uid {
                    return Err(ApiError::conflict(
                        target,
                        &name,
                        &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
                    ));
                }
            }
            if let Some(want) = pre.get("resourceVersion").and_then(Value::as_str) {
                if want != rv {
                    return Err(ApiError::conflict(
                        target,
                        &name,
                        &format!(
                            "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rv}"
                        ),
                    ));
                }
            }
        }
        if target.resource == Resource::Pods {
            // Graceful deletion; the deleted object is returned (ReturnDeletedObject).
            return Ok(self.delete_pod(target, old, options, opts));
        }
        if opts.dry_run {
            return Ok(Outcome::ok(deleted_status(target, &name, &uid)));
        }
        if target.resource == Resource::CustomResourceDefinitions {
            return Ok(crd::delete(self, target, old));
        }
        if !finalizers(&old).is_empty() {
            // Finalizers: the object stays, marked for deletion, until they are removed.
            if old["metadata"]
                .get("deletionTimestamp")
                .is_some_and(|t| !t.is_null())
            {
                return Ok(Outcome::ok(with_type_meta(
                    old,
                    target.resource,
                    target.group,
                )));
            }
            let mut obj = old.clone();
            obj["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            // markAsDeleting: controllers see the deletion as a new generation.
            if let Some(generation) = old["metadata"]["generation"].as_i64().filter(|g| *g > 0) {
                obj["metadata"]["generation"] = json!(generation + 1);
            }
            let stored = self.commit(target.resource, EventType::Modified, obj, Some(old));
            return Ok(Outcome::ok(with_type_meta(
                stored,
                target.resource,
                target.group,
            )));
        }
        if target.resource == Resource::Namespaces {
            // The namespace controller's job, done at once: delete what the namespace holds.
            let namespaced: Vec<Resource> = self
                .store
                .keys()
                .copied()
                .filter(|resource| resource.namespaced())
                .collect();
            for resource in namespaced {
                let keys: Vec<Key> = self
                    .objects(resource)
                    .keys()
                    .filter(|(ns, _)| *ns == name)
                    .cloned()
                    .collect();
                for key in keys {
                    if let Some(obj) = self.objects(resource).get(&key).cloned() {
                        self.commit(resource, EventType::Deleted, obj.clone(), Some(obj));
                    }
                }
            }
        }
        self.commit(target.resource, EventType::Deleted, old.clone(), Some(old));
        Ok(Outcome::ok(deleted_status(target, &name, &uid)))
    }

    // --- strategies and validation ------------------------------------------------------

    /// PrepareForCreate / PrepareForUpdate of the resource's strategy; returns warnings.
    fn prepare(&self, target: &Target, obj: &mut Value, old: Option<&Value>) -> Vec<String> {
        let mut warnings = Vec::new();
        match target.resource {
            Resource::Nodes => {
                if let Some(old) = old {
                    if target.is_status() {
                        // nodeStatusStrategy: the spec cannot change through /status.
                        copy_field(obj, old, "spec");
                    } else {
                        // nodeStrategy: the status cannot change through the main resource.
                        copy_field(obj, old, "status");
                    }
                }
                if obj.get("spec").is_none_or(Value::is_null) {
                    obj["spec"] = json!({});
                }
                if obj.get("status").is_none_or(Value::is_null) {
                    obj["status"] = json!({});
                }
                if !self.keep_config_source {
                    // dropDisabledFields: kept only where the stored node already uses them.
                    let in_use = |pointer: &str| {
                        old.and_then(|o| o.pointer(pointer))
                            .is_some_and(|v| !v.is_null())
                    };
                    if !in_use("/spec/configSource") {
                        remove_field(obj, &["spec", "configSource"]);
                    }
                    if !in_use("/status/config") {
                        remove_field(obj, &["status", "config"]);
                    }
                    // WarningsOnCreate/Update look at the prepared object.
                    if obj
                        .pointer("/spec/configSource")
                        .is_some_and(|v| !v.is_null())
                    {
                        warnings.push("spec.configSource: the feature is removed".to_string());
                    }
                }
            }
            Resource::Namespaces => {
                if old.is_none() {
                    if obj.pointer("/spec/finalizers").is_none() {
                        obj["spec"] = json!({"finalizers": ["kubernetes"]});
                    }
                    obj["status"] = json!({"phase": "Active"});
                } else if let Some(old) = old {
                    copy_field(obj, old, "status");
                }
            }
            Resource::Pods => pods::prepare_pod(target, obj, old),
            Resource::PodDisruptionBudgets => pods::prepare_pdb(target, obj, old),
            Resource::Leases => leases::prepare(obj, old),
            Resource::CustomResourceDefinitions => crd::prepare(target, obj, old),
            Resource::Custom(_) => custom::prepare(self, target, obj, old),
            Resource::ConfigMaps | Resource::Events => {}
        }
        warnings
    }

    fn validate(&self, target: &Target, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        let name_errors = if target.resource == Resource::Namespaces {
            dns1123_label(name)
        } else {
            dns1123_subdomain(name)
        };
        if old.is_none() {
            for msg in name_errors {
                errors.push(FieldError::invalid("metadata.name", json!(name), &msg));
            }
        }
        validate_labels_annotations(obj, &mut errors);
        if let Some(old) = old.filter(|old| {
            old["metadata"]
                .get("deletionTimestamp")
                .is_some_and(|t| !t.is_null())
        }) {
            // ValidateObjectMetaUpdate: an object being deleted only loses finalizers.
            let before = finalizers(old);
            let added: Vec<String> = finalizers(obj)
                .iter()
                .filter(|f| !before.contains(f))
                .map(|f| format!("{:?}", f.as_str().unwrap_or("")))
                .collect();
            if !added.is_empty() {
                errors.push(FieldError::forbidden(
                    "metadata.finalizers",
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        added.join(", ")
                    ),
                ));
            }
        }
        match target.resource {
            Resource::ConfigMaps => {
                if let Some(old) = old {
                    validate_configmap_update(obj, old, &mut errors);
                }
                validate_configmap(obj, &mut errors);
            }
            Resource::Nodes => {
                if self.keep_config_source {
                    if let Some(source) = obj.pointer("/spec/configSource").filter(|v| !v.is_null())
                    {
                        validate_node_config_source(source, "spec.configSource", true, &mut errors);
                    }
                    if let Some(config) = obj.pointer("/status/config").filter(|v| !v.is_null()) {
                        for part in ["assigned", "active", "lastKnownGood"] {
                            if let Some(source) = config.get(part).filter(|v| !v.is_null()) {
                                validate_node_config_source(
                                    source,
                                    &format!("status.config.{part}"),
                                    false,
                                    &mut errors,
                                );
                            }
                        }
                    }
                }
            }
            Resource::Events => validate_event(obj, target.group, old, &mut errors),
            Resource::Pods => pods::validate_pod(obj, old, &mut errors),
            Resource::PodDisruptionBudgets => pods::validate_pdb(obj, old, &mut errors),
            Resource::Leases => leases::validate(obj, &mut errors),
            Resource::CustomResourceDefinitions => crd::validate(obj, old, &mut errors),
            Resource::Custom(_) => custom::validate(self, target, obj, &mut errors),
            Resource::Namespaces => {}
        }
        errors
    }

    // --- reads --------------------------------------------------------------------------

    fn list(&self, target: &Target, selector: &Selector) -> Value {
        let items: Vec<Value> = self
            .objects(target.resource)
            .iter()
            .filter(|((ns, _), _)| target.namespace.as_ref().is_none_or(|want| want == ns))
            .filter(|(_, obj)| selector.matches(obj, target.resource))
            .map(|(_, obj)| {
                // Items of a typed list carry no kind/apiVersion on the real server; those of
                // an unstructured (custom resource) list do.
                let mut item = with_type_meta(obj.clone(), target.resource, target.group);
                if let (Some(map), false) = (item.as_object_mut(), target.resource.is_custom()) {
                    map.remove("kind");
                    map.remove("apiVersion");
                }
                item
            })
            .collect();
        json!({
            "kind": target.resource.list_kind(),
            "apiVersion": target.group.api_version(),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": items,
        })
    }
}

fn object_key(obj: &Value) -> Key {
    (
        obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
    )
}

fn finalizers(obj: &Value) -> Vec<Value> {
    obj["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn copy_field(obj: &mut Value, from: &Value, field: &str) {
    if let Some(map) = obj.as_object_mut() {
        match from.get(field) {
            Some(value) => map.insert(field.to_string(), value.clone()),
            None => map.remove(field),
        };
    }
}

fn remove_field(obj: &mut Value, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cursor = obj;
    for part in parents {
        match cursor.get_mut(*part) {
            Some(next) => cursor = next,
            None => return,
        }
    }
    if let Some(map) = cursor.as_object_mut() {
        map.remove(*last);
    }
}

fn deleted_status(target: &Target, name: &str, uid: &str) -> Value {
    let mut details = ApiError::resource_details(target, name);
    details["uid"] = json!(uid);
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

// ------------------------------------------------------------------------------------------
// Decoding: type meta, unknown fields, JSON types, events.k8s.io conversion
// ------------------------------------------------------------------------------------------

/// What the decoder knows of a kind's fields (unknown ones are dropped and reported).
enum Shape {
    Any,
    Fields(&'static [(&'static str, Shape)]),
    /// An object with the fields of another table.
    Nested(&'static Shape),
    /// A list of objects with the fields of another table.
    ListOf(&'static Shape),
    /// A map whose values are objects with the fields of another table.
    MapOf(&'static Shape),
}

static OBJECT_META: Shape = Shape::Fields(&[
    ("name", Shape::Any),
    ("generateName", Shape::Any),
    ("namespace", Shape::Any),
    ("selfLink", Shape::Any),
    ("uid", Shape::Any),
    ("resourceVersion", Shape::Any),
    ("generation", Shape::Any),
    ("creationTimestamp", Shape::Any),
    ("deletionTimestamp", Shape::Any),
    ("deletionGracePeriodSeconds", Shape::Any),
    ("labels", Shape::Any),
    ("annotations", Shape::Any),
    ("ownerReferences", Shape::Any),
    ("finalizers", Shape::Any),
    ("managedFields", Shape::Any),
]);

static CONFIGMAP: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("data", Shape::Any),
    ("binaryData", Shape::Any),
    ("immutable", Shape::Any),
]);

static CONFIGMAP_REF: Shape = Shape::Fields(&[
    ("namespace", Shape::Any),
    ("name", Shape::Any),
    ("uid", Shape::Any),
    ("resourceVersion", Shape::Any),
    ("kubeletConfigKey", Shape::Any),
]);

static NODE_CONFIG_SOURCE: Shape = Shape::Fields(&[("configMap", Shape::Nested(&CONFIGMAP_REF))]);

static NODE_CONDITION: Shape = Shape::Fields(&[
    ("type", Shape::Any),
    ("status", Shape::Any),
    ("lastHeartbeatTime", Shape::Any),
    ("lastTransitionTime", Shape::Any),
    ("reason", Shape::Any),
    ("message", Shape::Any),
]);

static NODE_ADDRESS: Shape = Shape::Fields(&[("type", Shape::Any), ("address", Shape::Any)]);

static NODE_CONFIG_STATUS: Shape = Shape::Fields(&[
    ("assigned", Shape::Nested(&NODE_CONFIG_SOURCE)),
    ("active", Shape::Nested(&NODE_CONFIG_SOURCE)),
    ("lastKnownGood", Shape::Nested(&NODE_CONFIG_SOURCE)),
    ("error", Shape::Any),
]);

static NODE_SPEC: Shape = Shape::Fields(&[
    ("podCIDR", Shape::Any),
    ("podCIDRs", Shape::Any),
    ("providerID", Shape::Any),
    ("unschedulable", Shape::Any),
    ("taints", Shape::Any),
    ("configSource", Shape::Nested(&NODE_CONFIG_SOURCE)),
    ("externalID", Shape::Any),
]);

static NODE_STATUS: Shape = Shape::Fields(&[
    ("capacity", Shape::Any),
    ("allocatable", Shape::Any),
    ("phase", Shape::Any),
    ("conditions", Shape::ListOf(&NODE_CONDITION)),
    ("addresses", Shape::ListOf(&NODE_ADDRESS)),
    ("daemonEndpoints", Shape::Any),
    ("nodeInfo", Shape::Any),
    ("images", Shape::Any),
    ("volumesInUse", Shape::Any),
    ("volumesAttached", Shape::Any),
    ("config", Shape::Nested(&NODE_CONFIG_STATUS)),
    ("runtimeHandlers", Shape::Any),
    ("features", Shape::Any),
]);

static NODE: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("spec", Shape::Nested(&NODE_SPEC)),
    ("status", Shape::Nested(&NODE_STATUS)),
]);

static NAMESPACE: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("spec", Shape::Any),
    ("status", Shape::Any),
]);

static EVENT_CORE: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("involvedObject", Shape::Any),
    ("reason", Shape::Any),
    ("message", Shape::Any),
    ("source", Shape::Any),
    ("firstTimestamp", Shape::Any),
    ("lastTimestamp", Shape::Any),
    ("count", Shape::Any),
    ("type", Shape::Any),
    ("eventTime", Shape::Any),
    ("series", Shape::Any),
    ("action", Shape::Any),
    ("related", Shape::Any),
    ("reportingComponent", Shape::Any),
    ("reportingInstance", Shape::Any),
]);

static EVENT_V1: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("eventTime", Shape::Any),
    ("series", Shape::Any),
    ("reportingController", Shape::Any),
    ("reportingInstance", Shape::Any),
    ("action", Shape::Any),
    ("reason", Shape::Any),
    ("regarding", Shape::Any),
    ("related", Shape::Any),
    ("note", Shape::Any),
    ("type", Shape::Any),
    ("deprecatedSource", Shape::Any),
    ("deprecatedFirstTimestamp", Shape::Any),
    ("deprecatedLastTimestamp", Shape::Any),
    ("deprecatedCount", Shape::Any),
]);

fn shape_for(target: &Target) -> &'static Shape {
    match (target.resource, target.group) {
        (Resource::Nodes, _) => &NODE,
        (Resource::ConfigMaps, _) => &CONFIGMAP,
        (Resource::Namespaces, _) => &NAMESPACE,
        (Resource::Events, ApiGroup::EventsV1) => &EVENT_V1,
        (Resource::Events, _) => &EVENT_CORE,
        (Resource::Pods, _) => &pods::POD,
        (Resource::PodDisruptionBudgets, _) => &pods::PDB,
        (Resource::Leases, _) => &leases::LEASE,
        (Resource::CustomResourceDefinitions, _) => &crd::CRD,
        // Pruned against the definition's schema instead (module `custom`).
        (Resource::Custom(_), _) => &Shape::Any,
    }
}

/// Removes fields the kind does not have, recording their paths (`spec.foo`,
/// `status.conditions[0].bar`), as the strict JSON decoder reports them.
fn strip_unknown(value: &mut Value, shape: &Shape, prefix: &str, unknown: &mut Vec<String>) {
    match (shape, value) {
        (Shape::Any, _) => {}
        (Shape::Fields(fields), Value::Object(map)) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                match fields.iter().find(|(name, _)| *name == key) {
                    Some((_, inner)) => {
                        if let Some(child) = map.get_mut(&key) {
                            strip_unknown(child, inner, &path, unknown);
                        }
                    }
                    None => {
                        map.remove(&key);
                        unknown.push(path);
                    }
                }
            }
        }
        (Shape::ListOf(inner), Value::Array(items)) => {
            for (i, item) in items.iter_mut().enumerate() {
                strip_unknown(item, inner, &format!("{prefix}[{i}]"), unknown);
            }
        }
        (Shape::Nested(inner), value) => strip_unknown(value, inner, prefix, unknown),
        (Shape::MapOf(inner), Value::Object(map)) => {
            for (key, child) in map.iter_mut() {
                strip_unknown(child, inner, &format!("{prefix}.{key}"), unknown);
            }
        }
        _ => {}
    }
}

/// Server-side field validation of the unknown fields found while decoding: the warnings
/// (Warn), none (Ignore), or the 400 of Strict.
fn unknown_fields(
    unknown: &[String],
    validation: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let list: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match validation {
        FieldValidation::Strict if !list.is_empty() => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            list.join(", ")
        ))),
        FieldValidation::Warn => Ok(list),
        _ => Ok(Vec::new()),
    }
}

fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The JSON type errors the Go decoder would report, as `json: cannot unmarshal ...`.
fn check_types(obj: &Value, kind: &str) -> Result<(), String> {
    let unmarshal = |value: &Value, field: &str, want: &str| {
        Err(format!(
            "json: cannot unmarshal {} into Go struct field {field} of type {want}",
            go_type(value)
        ))
    };
    let string_map = |value: Option<&Value>, field: &str| -> Result<(), String> {
        match value {
            None | Some(Value::Null) => Ok(()),
            Some(Value::Object(map)) => match map.values().find(|v| !v.is_string()) {
                Some(bad) => unmarshal(bad, field, "string"),
                None => Ok(()),
            },
            Some(other) => unmarshal(other, field, "map[string]string"),
        }
    };
    let meta = &obj["metadata"];
    if !meta.is_null() && !meta.is_object() {
        return unmarshal(meta, &format!("{kind}.metadata"), "v1.ObjectMeta");
    }
    for field in [
        "name",
        "generateName",
        "namespace",
        "resourceVersion",
        "uid",
    ] {
        if let Some(value) = meta.get(field).filter(|v| !v.is_null() && !v.is_string()) {
            return unmarshal(value, &format!("ObjectMeta.metadata.{field}"), "string");
        }
    }
    string_map(meta.get("labels"), "ObjectMeta.metadata.labels")?;
    string_map(meta.get("annotations"), "ObjectMeta.metadata.annotations")?;
    match meta.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            if let Some(bad) = items.iter().find(|v| !v.is_string()) {
                return unmarshal(bad, "ObjectMeta.metadata.finalizers", "string");
            }
        }
        Some(other) => return unmarshal(other, "ObjectMeta.metadata.finalizers", "[]string"),
    }
    match kind {
        "ConfigMap" => {
            string_map(obj.get("data"), "ConfigMap.data")?;
            string_map(obj.get("binaryData"), "ConfigMap.binaryData")?;
            if let Some(Value::Object(map)) = obj.get("binaryData") {
                for value in map.values() {
                    if let Some(at) = value.as_str().and_then(base64_error) {
                        return Err(format!("illegal base64 data at input byte {at}"));
                    }
                }
            }
            if let Some(value) = obj
                .get("immutable")
                .filter(|v| !v.is_null() && !v.is_boolean())
            {
                return unmarshal(value, "ConfigMap.immutable", "bool");
            }
        }
        "Node" => {
            for field in ["spec", "status"] {
                if let Some(value) = obj.get(field).filter(|v| !v.is_null() && !v.is_object()) {
                    return unmarshal(
                        value,
                        &format!("Node.{field}"),
                        &format!("v1.Node{}", capitalize(field)),
                    );
                }
            }
            if let Some(value) = obj
                .pointer("/spec/unschedulable")
                .filter(|v| !v.is_null() && !v.is_boolean())
            {
                return unmarshal(value, "NodeSpec.spec.unschedulable", "bool");
            }
            for list in ["conditions", "addresses"] {
                match obj.pointer(&format!("/status/{list}")) {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(items)) => {
                        if let Some(bad) = items.iter().find(|v| !v.is_object()) {
                            return unmarshal(
                                bad,
                                &format!("NodeStatus.status.{list}"),
                                "v1.NodeCondition",
                            );
                        }
                    }
                    Some(other) => {
                        return unmarshal(
                            other,
                            &format!("NodeStatus.status.{list}"),
                            "[]v1.NodeCondition",
                        )
                    }
                }
            }
        }
        "Pod" | "PodDisruptionBudget" => pods::check_types(obj, kind)?,
        "Lease" => leases::check_types(obj)?,
        "CustomResourceDefinition" => crd::check_types(obj)?,
        _ => {}
    }
    Ok(())
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Byte offset of the first invalid character of standard base64 (with padding), if any.
fn base64_error(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let body_len = bytes.iter().rposition(|b| *b != b'=').map_or(0, |i| i + 1);
    if let Some(i) = bytes[..body_len]
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/'))
    {
        return Some(i);
    }
    let padding = bytes.len() - body_len;
    if bytes.len() & 3 != 0 || padding > 2 {
        return Some(bytes.len().saturating_sub(1).min(body_len));
    }
    None
}

/// Checks and normalises a request body (or a patched object) into the stored core/v1 form.
fn decode_body(
    target: &Target,
    body: Value,
    opts: &Opts,
) -> Result<(Value, Vec<String>), ApiError> {
    let kind = target.resource.kind();
    let cannot = |why: String| {
        ApiError::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: {why}"
        ))
    };
    if !body.is_object() {
        return Err(cannot(format!(
            "json: cannot unmarshal {} into Go value of type v1.{kind}",
            go_type(&body)
        )));
    }
    let api_version = target.group.api_version();
    if let Some(found) = body.get("apiVersion").and_then(Value::as_str) {
        if !found.is_empty() && found != api_version {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({found}) does not match the expected API version ({api_version})"
            )));
        }
    }
    if let Some(found) = body.get("kind").and_then(Value::as_str) {
        if !found.is_empty() && found != kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({found}) does not match the expected kind ({kind})"
            )));
        }
    }
    check_types(&body, kind).map_err(cannot)?;
    let mut obj = body;
    let mut unknown = Vec::new();
    strip_unknown(&mut obj, shape_for(target), "", &mut unknown);
    let warnings = unknown_fields(&unknown, opts.validation)?;
    if target.resource == Resource::Events && target.group == ApiGroup::EventsV1 {
        obj = rename_event_fields(obj, false);
    }
    if let Some(map) = obj.as_object_mut() {
        map.insert(
            "apiVersion".to_string(),
            json!(target.resource.home_group().api_version()),
        );
        map.insert("kind".to_string(), json!(kind));
        if !map.get("metadata").is_some_and(Value::is_object) {
            map.insert("metadata".to_string(), json!({}));
        }
    }
    Ok((obj, warnings))
}

/// core/v1 Event field ↔ events.k8s.io/v1 Event field.
const EVENT_FIELD_RENAMES: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Renames Event fields core → events.k8s.io (`to_v1`) or back.
fn rename_event_fields(obj: Value, to_v1: bool) -> Value {
    let Value::Object(map) = obj else { return obj };
    let renamed = map
        .into_iter()
        .map(|(key, value)| {
            let new_key = EVENT_FIELD_RENAMES
                .iter()
                .find(|(core, v1)| if to_v1 { core == &key } else { v1 == &key })
                .map(|(core, v1)| {
                    if to_v1 {
                        v1.to_string()
                    } else {
                        core.to_string()
                    }
                })
                .unwrap_or(key);
            (new_key, value)
        })
        .collect();
    Value::Object(renamed)
}

/// The stored (core/v1) object as served through `group`.
fn with_type_meta(obj: Value, resource: Resource, group: ApiGroup) -> Value {
    let mut obj = if resource == Resource::Events && group == ApiGroup::EventsV1 {
        rename_event_fields(obj, true)
    } else {
        obj
    };
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".to_string(), json!(group.api_version()));
        map.insert("kind".to_string(), json!(resource.kind()));
    }
    obj
}

// ------------------------------------------------------------------------------------------
// Validation (k8s.io/apimachinery/pkg/util/validation and pkg/apis/core/validation)
// ------------------------------------------------------------------------------------------

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}'")).collect();
    format!(
        "{msg} (e.g. {}, regex used for validation is '{fmt}')",
        examples.join(",  or ")
    )
}

fn is_dns_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

fn dns1123_label(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if text.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_dns_label(text) {
        errs.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

fn dns1123_subdomain(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if text.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if !text.split('.').all(is_dns_label) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            &format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*"),
            &["example.com"],
        ));
    }
    errs
}

fn is_qualified_name_part(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

fn qualified_name(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = text.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

fn label_value(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if text.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !text.is_empty() && !is_qualified_name_part(text) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn config_map_key(text: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if text.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    let valid = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !valid {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if text == "." {
        errs.push("must not be '.'".to_string());
    } else if text == ".." {
        errs.push("must not be '..'".to_string());
    } else if text.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

fn validate_labels_annotations(obj: &Value, errors: &mut Vec<FieldError>) {
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        for (key, value) in labels {
            for msg in qualified_name(key) {
                errors.push(FieldError::invalid("metadata.labels", json!(key), &msg));
            }
            let value = value.as_str().unwrap_or("");
            for msg in label_value(value) {
                errors.push(FieldError::invalid("metadata.labels", json!(value), &msg));
            }
        }
    }
    if let Some(annotations) = obj["metadata"]["annotations"].as_object() {
        let mut total = 0;
        for (key, value) in annotations {
            for msg in qualified_name(&key.to_lowercase()) {
                errors.push(FieldError::invalid(
                    "metadata.annotations",
                    json!(key),
                    &msg,
                ));
            }
            total += key.len() + value.as_str().map_or(0, str::len);
        }
        if total > TOTAL_ANNOTATION_SIZE_LIMIT {
            errors.push(FieldError::too_long(
                "metadata.annotations",
                TOTAL_ANNOTATION_SIZE_LIMIT,
            ));
        }
    }
}

fn validate_configmap(obj: &Value, errors: &mut Vec<FieldError>) {
    let data = obj.get("data").and_then(Value::as_object);
    let binary = obj.get("binaryData").and_then(Value::as_object);
    let mut total = 0;
    for (key, value) in data.into_iter().flatten() {
        for msg in config_map_key(key) {
            errors.push(FieldError::invalid(
                &format!("data[{key}]"),
                json!(key),
                &msg,
            ));
        }
        if binary.is_some_and(|b| b.contains_key(key)) {
            errors.push(FieldError::invalid(
                &format!("data[{key}]"),
                json!(key),
                "duplicate of key present in binaryData",
            ));
        }
        total += value.as_str().map_or(0, str::len);
    }
    for (key, value) in binary.into_iter().flatten() {
        for msg in config_map_key(key) {
            errors.push(FieldError::invalid(
                &format!("binaryData[{key}]"),
                json!(key),
                &msg,
            ));
        }
        // Stored base64: the decoded size is about three quarters.
        total += value.as_str().map_or(0, |v| v.len() / 4 * 3);
    }
    if total > MAX_CONFIGMAP_BYTES {
        errors.push(FieldError::too_long("", MAX_CONFIGMAP_BYTES));
    }
}

/// ValidateConfigMapUpdate's immutability rules (Go's DeepEqual: a missing map differs from
/// an empty one).
fn validate_configmap_update(new: &Value, old: &Value, errors: &mut Vec<FieldError>) {
    if old.get("immutable") != Some(&Value::Bool(true)) {
        return;
    }
    const IMMUTABLE: &str = "field is immutable when `immutable` is set";
    if new.get("immutable") != Some(&Value::Bool(true)) {
        errors.push(FieldError::forbidden("immutable", IMMUTABLE));
    }
    let present = |obj: &Value, field: &str| obj.get(field).filter(|v| !v.is_null()).cloned();
    if present(new, "data") != present(old, "data") {
        errors.push(FieldError::forbidden("data", IMMUTABLE));
    }
    if present(new, "binaryData") != present(old, "binaryData") {
        errors.push(FieldError::forbidden("binaryData", IMMUTABLE));
    }
}

/// ValidateNodeConfigSourceSpec / validateNodeConfigSourceStatus (only on an old server).
fn validate_node_config_source(
    source: &Value,
    path: &str,
    spec: bool,
    errors: &mut Vec<FieldError>,
) {
    let Some(config_map) = source.get("configMap").filter(|v| !v.is_null()) else {
        errors.push(FieldError::invalid(
            path,
            source.clone(),
            "exactly one reference subfield must be non-nil",
        ));
        return;
    };
    let path = format!("{path}.configMap");
    let field = |name: &str| {
        config_map
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (uid, rv) = (field("uid"), field("resourceVersion"));
    if spec {
        if !uid.is_empty() {
            errors.push(FieldError::forbidden(
                &format!("{path}.uid"),
                "uid must not be set in spec",
            ));
        }
        if !rv.is_empty() {
            errors.push(FieldError::forbidden(
                &format!("{path}.resourceVersion"),
                "resourceVersion must not be set in spec",
            ));
        }
    } else {
        if uid.is_empty() {
            errors.push(FieldError::required(
                &format!("{path}.uid"),
                "uid must be set in status",
            ));
        }
        if rv.is_empty() {
            errors.push(FieldError::required(
                &format!("{path}.resourceVersion"),
                "resourceVersion must be set in status",
            ));
        }
    }
    let checks: [(&str, NameCheck); 3] = [
        ("namespace", dns1123_label),
        ("name", dns1123_subdomain),
        ("kubeletConfigKey", config_map_key),
    ];
    for (name, check) in checks {
        let value = field(name);
        let field_path = format!("{path}.{name}");
        if value.is_empty() {
            errors.push(FieldError::required(
                &field_path,
                &format!("{name} must be set"),
            ));
        } else {
            for msg in check(&value) {
                errors.push(FieldError::invalid(&field_path, json!(value), &msg));
            }
        }
    }
}

/// A name or key check returning the validation messages.
type NameCheck = fn(&str) -> Vec<String>;

fn is_zero_time(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    }
}

/// ValidateEventCreate / ValidateEventUpdate (the stored object is in core/v1 form; field
/// paths are those of the internal type, as in the real messages).
fn validate_event(obj: &Value, group: ApiGroup, old: Option<&Value>, errors: &mut Vec<FieldError>) {
    let text = |field: &str| {
        obj.get(field)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let namespace = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let involved_ns = obj["involvedObject"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mismatch = || {
        FieldError::invalid(
            "involvedObject.namespace",
            json!(involved_ns),
            "does not match event.namespace",
        )
    };
    if is_zero_time(obj.get("eventTime")) {
        let ok = if involved_ns.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == involved_ns
        };
        if !ok {
            errors.push(mismatch());
        }
    } else {
        if involved_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
            errors.push(mismatch());
        }
        let controller = text("reportingComponent");
        if controller.is_empty() {
            errors.push(FieldError::required("reportingController", ""));
        }
        for msg in qualified_name(&controller) {
            errors.push(FieldError::invalid(
                "reportingController",
                json!(controller),
                &msg,
            ));
        }
        for (field, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
            let value = text(field);
            if value.is_empty() {
                errors.push(FieldError::required(field, ""));
            }
            if value.len() > limit {
                errors.push(FieldError::invalid(
                    field,
                    json!(""),
                    &format!("can have at most {limit} characters"),
                ));
            }
        }
        if text("message").len() > 1024 {
            errors.push(FieldError::invalid(
                "message",
                json!(""),
                "can have at most 1024 characters",
            ));
        }
    }
    if group != ApiGroup::EventsV1 {
        return;
    }
    match old {
        None => {
            if let Some(series) = obj.get("series").filter(|v| !v.is_null()) {
                if series["count"].as_i64().unwrap_or(0) < 2 {
                    errors.push(FieldError::invalid(
                        "series.count",
                        json!(""),
                        "should be at least 2",
                    ));
                }
                if is_zero_time(series.get("lastObservedTime")) {
                    errors.push(FieldError::required("series.lastObservedTime", ""));
                }
            }
            if is_zero_time(obj.get("eventTime")) {
                errors.push(FieldError::required("eventTime", ""));
            }
            let kind = text("type");
            if kind != "Normal" && kind != "Warning" {
                errors.push(FieldError::invalid(
                    "type",
                    json!(""),
                    &format!("has invalid value: {kind}"),
                ));
            }
            for field in ["firstTimestamp", "lastTimestamp"] {
                if !is_zero_time(obj.get(field)) {
                    errors.push(FieldError::invalid(field, json!(""), "needs to be unset"));
                }
            }
            if obj["count"].as_i64().unwrap_or(0) != 0 {
                errors.push(FieldError::invalid("count", json!(""), "needs to be unset"));
            }
            let source = &obj["source"];
            if source["component"].as_str().is_some_and(|s| !s.is_empty())
                || source["host"].as_str().is_some_and(|s| !s.is_empty())
            {
                errors.push(FieldError::invalid(
                    "source",
                    json!(""),
                    "needs to be unset",
                ));
            }
        }
        Some(old) => {
            let immutable = [
                ("involvedObject", "involvedObject"),
                ("reason", "reason"),
                ("message", "message"),
                ("source", "source"),
                ("firstTimestamp", "firstTimestamp"),
                ("lastTimestamp", "lastTimestamp"),
                ("count", "count"),
                ("type", "type"),
                ("eventTime", "eventTime"),
                ("action", "action"),
                ("related", "related"),
                ("reportingComponent", "reportingController"),
                ("reportingInstance", "reportingInstance"),
            ];
            for (field, path) in immutable {
                let new_value = obj.get(field).filter(|v| !v.is_null());
                if new_value != old.get(field).filter(|v| !v.is_null()) {
                    errors.push(FieldError::invalid(
                        path,
                        new_value.cloned().unwrap_or(json!("")),
                        "field is immutable",
                    ));
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// Field and label selectors
// ------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

impl Requirement {
    fn matches(&self, lookup: impl Fn(&str) -> Option<String>) -> bool {
        let number = |key: &str| lookup(key).and_then(|v| v.parse::<i64>().ok());
        match self {
            Requirement::Equals(key, want) => lookup(key).as_deref() == Some(want.as_str()),
            Requirement::NotEquals(key, want) => lookup(key).as_deref() != Some(want.as_str()),
            Requirement::In(key, values) => lookup(key).is_some_and(|v| values.contains(&v)),
            Requirement::NotIn(key, values) => !lookup(key).is_some_and(|v| values.contains(&v)),
            Requirement::Exists(key) => lookup(key).is_some(),
            Requirement::NotExists(key) => lookup(key).is_none(),
            Requirement::GreaterThan(key, bound) => number(key).is_some_and(|n| n > *bound),
            Requirement::LessThan(key, bound) => number(key).is_some_and(|n| n < *bound),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Selector {
    fields: Vec<Requirement>,
    labels: Vec<Requirement>,
}

impl Selector {
    fn parse(query: &HashMap<String, String>, resource: Resource) -> Result<Selector, ApiError> {
        let mut selector = Selector::default();
        if let Some(text) = query.get("fieldSelector").filter(|t| !t.trim().is_empty()) {
            for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                let requirement = if let Some((key, value)) = term.split_once("!=") {
                    Requirement::NotEquals(key.trim().to_string(), value.trim().to_string())
                } else if let Some((key, value)) = term.split_once("==") {
                    Requirement::Equals(key.trim().to_string(), value.trim().to_string())
                } else if let Some((key, value)) = term.split_once('=') {
                    Requirement::Equals(key.trim().to_string(), value.trim().to_string())
                } else {
                    return Err(ApiError::bad_request(format!(
                        "invalid field selector: invalid selector: '{text}'; can't understand '{term}'"
                    )));
                };
                let (Requirement::Equals(key, _) | Requirement::NotEquals(key, _)) = &requirement
                else {
                    unreachable!("field selectors only have = and !=")
                };
                if !field_label_supported(resource, key) {
                    return Err(ApiError::bad_request(field_label_error(resource, key)));
                }
                selector.fields.push(requirement);
            }
        }
        if let Some(text) = query.get("labelSelector") {
            selector.labels = labels::parse(text).map_err(ApiError::bad_request)?;
        }
        Ok(selector)
    }

    fn for_name(name: &str) -> Selector {
        Selector {
            fields: vec![Requirement::Equals(
                "metadata.name".to_string(),
                name.to_string(),
            )],
            labels: Vec::new(),
        }
    }

    fn matches(&self, obj: &Value, resource: Resource) -> bool {
        self.fields
            .iter()
            .all(|req| req.matches(|key| field_value(obj, resource, key)))
            && self.labels.iter().all(|req| {
                req.matches(|key| {
                    obj["metadata"]["labels"]
                        .get(key)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
            })
    }
}

const EVENT_FIELD_LABELS: [&str; 10] = [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "type",
];

/// The message of the 400 for a field selector on a label `resource` does not support: the
/// core kinds' conversion functions say so, the others fall back to
/// runtime.DefaultMetaV1FieldSelectorConversion.
fn field_label_error(resource: Resource, key: &str) -> String {
    match resource {
        Resource::Leases | Resource::CustomResourceDefinitions | Resource::Custom(_) => format!(
            "{key:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        ),
        _ => format!("field label not supported: {key}"),
    }
}

fn field_label_supported(resource: Resource, key: &str) -> bool {
    match key {
        "metadata.name" | "metadata.namespace" => true,
        _ if resource == Resource::Pods => pods::POD_FIELD_LABELS.contains(&key),
        "spec.unschedulable" => resource == Resource::Nodes,
        "status.phase" => resource == Resource::Namespaces,
        "source" => resource == Resource::Events,
        other => resource == Resource::Events && EVENT_FIELD_LABELS.contains(&other),
    }
}

fn field_value(obj: &Value, resource: Resource, key: &str) -> Option<String> {
    let text = |value: &Value| Some(value.as_str().unwrap_or("").to_string());
    match key {
        "metadata.name" => text(&obj["metadata"]["name"]),
        "metadata.namespace" => text(&obj["metadata"]["namespace"]),
        "spec.unschedulable" => Some(
            obj["spec"]["unschedulable"]
                .as_bool()
                .unwrap_or(false)
                .to_string(),
        ),
        "status.phase" => text(&obj["status"]["phase"]),
        _ if resource == Resource::Pods => pods::pod_field_value(obj, key),
        "source" => text(&obj["source"]["component"]),
        other if resource == Resource::Events => {
            let pointer = format!("/{}", other.replace('.', "/"));
            text(obj.pointer(&pointer).unwrap_or(&Value::Null))
        }
        _ => None,
    }
}

// ------------------------------------------------------------------------------------------
// Patches
// ------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PatchKind {
    Merge,
    Strategic,
    Json,
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &Value, patch: &Value) -> Value {
    let Value::Object(patch) = patch else {
        return patch.clone();
    };
    let mut result = match target {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    for (key, value) in patch {
        if value.is_null() {
            result.remove(key);
        } else {
            let current = result.get(key).cloned().unwrap_or(Value::Null);
            result.insert(key.clone(), merge_patch(&current, value));
        }
    }
    Value::Object(result)
}

/// How a list field merges in a strategic merge patch (the `patchStrategy`/`patchMergeKey`
/// struct tags of k8s.io/api); lists without a tag are replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListStrategy {
    Replace,
    MergeKey(&'static str),
    MergePrimitives,
}

fn list_strategy(resource: Resource, path: &str) -> ListStrategy {
    match (resource, path) {
        (_, "metadata.finalizers") => ListStrategy::MergePrimitives,
        (_, "metadata.ownerReferences") => ListStrategy::MergeKey("uid"),
        (Resource::Nodes, "spec.podCIDRs") => ListStrategy::MergePrimitives,
        (Resource::Nodes, "status.conditions") => ListStrategy::MergeKey("type"),
        (Resource::Nodes, "status.addresses") => ListStrategy::MergeKey("type"),
        (Resource::Pods, _) => pods::pod_list_strategy(path),
        (Resource::PodDisruptionBudgets, "status.conditions") => ListStrategy::MergeKey("type"),
        _ => ListStrategy::Replace,
    }
}

/// Strategic merge patch of a built-in kind.
fn strategic_merge(original: &Value, patch: &Value, resource: Resource) -> Result<Value, ApiError> {
    let original = original.as_object().cloned().unwrap_or_default();
    let patch = patch.as_object().cloned().unwrap_or_default();
    Ok(Value::Object(
        smp_map(original, &patch, resource, "")?.unwrap_or_default(),
    ))
}

/// Merges `patch` into `orig`; `None` means the map was deleted (`$patch: delete`).
fn smp_map(
    mut orig: Map<String, Value>,
    patch: &Map<String, Value>,
    resource: Resource,
    path: &str,
) -> Result<Option<Map<String, Value>>, ApiError> {
    match patch.get("$patch") {
        None => {}
        Some(Value::String(directive)) if directive == "merge" => {}
        Some(Value::String(directive)) if directive == "delete" => return Ok(None),
        Some(Value::String(directive)) if directive == "replace" => {
            let mut replacement = patch.clone();
            replacement.remove("$patch");
            return smp_map(Map::new(), &replacement, resource, path);
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Unknown patch type: {other}, only merge, replace and delete are supported"
            )))
        }
    }
    let retain: Option<Vec<String>> = match patch.get("$retainKeys") {
        None => None,
        Some(Value::Array(keys)) if keys.iter().all(Value::is_string) => Some(
            keys.iter()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect(),
        ),
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid patch: $retainKeys must be a list of strings",
            ))
        }
    };
    for (key, value) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            // Element order is accepted but not enforced.
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let Value::Array(remove) = value else {
                return Err(ApiError::bad_request(
                    "invalid patch format of primitive list: $deleteFromPrimitiveList must be a list",
                ));
            };
            if let Some(Value::Array(list)) = orig.get_mut(field) {
                list.retain(|item| !remove.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(ApiError::bad_request(format!(
                "invalid patch: unknown patch directive {key}"
            )));
        }
        let child = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        if value.is_null() {
            orig.remove(key);
            continue;
        }
        let merged = match (orig.get(key), value) {
            (Some(Value::Object(current)), Value::Object(p)) => {
                smp_map(current.clone(), p, resource, &child)?.map(Value::Object)
            }
            (_, Value::Object(p)) => smp_map(Map::new(), p, resource, &child)?.map(Value::Object),
            (current, Value::Array(p)) => {
                let current = match current {
                    Some(Value::Array(items)) => items.clone(),
                    _ => Vec::new(),
                };
                Some(Value::Array(smp_list(
                    current,
                    p,
                    list_strategy(resource, &child),
                    resource,
                    &child,
                )?))
            }
            (_, scalar) => Some(scalar.clone()),
        };
        match merged {
            Some(merged) => orig.insert(key.clone(), merged),
            None => orig.remove(key),
        };
    }
    if let Some(keep) = retain {
        orig.retain(|key, _| keep.contains(key));
    }
    Ok(Some(orig))
}

fn smp_list(
    orig: Vec<Value>,
    patch: &[Value],
    strategy: ListStrategy,
    resource: Resource,
    path: &str,
) -> Result<Vec<Value>, ApiError> {
    let is_replace_directive =
        |item: &Value| item.get("$patch").and_then(Value::as_str) == Some("replace");
    let replace_all = patch.iter().any(is_replace_directive);
    let items: Vec<&Value> = patch
        .iter()
        .filter(|item| !is_replace_directive(item))
        .collect();
    match strategy {
        ListStrategy::Replace => Ok(items.into_iter().cloned().collect()),
        ListStrategy::MergePrimitives => {
            let mut result = if replace_all { Vec::new() } else { orig };
            for item in items {
                if !result.contains(item) {
                    result.push(item.clone());
                }
            }
            Ok(result)
        }
        ListStrategy::MergeKey(merge_key) => {
            let mut result = if replace_all { Vec::new() } else { orig };
            for item in items {
                let Value::Object(fields) = item else {
                    return Err(ApiError::bad_request(format!(
                        "invalid patch: element of {path} is not an object: {item}"
                    )));
                };
                let Some(key_value) = fields.get(merge_key) else {
                    return Err(ApiError::bad_request(format!(
                        "map: {item} does not contain declared merge key: {merge_key}"
                    )));
                };
                let position = result
                    .iter()
                    .position(|existing| existing.get(merge_key) == Some(key_value));
                if fields.get("$patch").and_then(Value::as_str) == Some("delete") {
                    result.retain(|existing| existing.get(merge_key) != Some(key_value));
                    continue;
                }
                match position {
                    Some(i) => {
                        let current = result[i].as_object().cloned().unwrap_or_default();
                        match smp_map(current, fields, resource, path)? {
                            Some(merged) => result[i] = Value::Object(merged),
                            None => {
                                result.remove(i);
                            }
                        }
                    }
                    None => {
                        if let Some(added) = smp_map(Map::new(), fields, resource, path)? {
                            result.push(Value::Object(added));
                        }
                    }
                }
            }
            Ok(result)
        }
    }
}

/// RFC 6902 JSON patch; errors are answered like the real server (decode errors 400, failed
/// operations 422 with the generic message).
fn apply_json_patch(doc: &Value, patch: &[u8]) -> Result<Value, ApiError> {
    let ops: Value =
        serde_json::from_slice(patch).map_err(|err| ApiError::bad_request(err.to_string()))?;
    let Value::Array(ops) = ops else {
        return Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
            go_type(&ops)
        )));
    };
    let mut doc = doc.clone();
    for op in &ops {
        json_patch_op(&mut doc, op).map_err(|cause| {
            // The real Status does not say why; the test log does.
            eprintln!("fake API server: JSON patch operation {op} failed: {cause}");
            ApiError::new(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            )
            .with_details(json!({}))
        })?;
    }
    Ok(doc)
}

fn json_patch_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let name = op.get("op").and_then(Value::as_str).unwrap_or("");
    let path = op
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{name} operation missing path"))?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| format!("{name} operation missing value"))
    };
    let from = || {
        op.get("from")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{name} operation missing from"))
    };
    match name {
        "add" => pointer_add(doc, path, value()?),
        "remove" => pointer_remove(doc, path).map(drop),
        "replace" => {
            let target = doc.pointer_mut(path).ok_or_else(|| {
                format!(
                    "replace operation does not apply: doc is missing key: {path}: missing value"
                )
            })?;
            *target = value()?;
            Ok(())
        }
        "move" => {
            let moved = pointer_remove(doc, from()?)?;
            pointer_add(doc, path, moved)
        }
        "copy" => {
            let from = from()?;
            let copied = doc
                .pointer(from)
                .cloned()
                .ok_or_else(|| format!("copy operation does not apply: doc is missing from path: {from}: missing value"))?;
            pointer_add(doc, path, copied)
        }
        "test" => {
            let want = value()?;
            match doc.pointer(path) {
                Some(found) if *found == want => Ok(()),
                _ => Err(format!("testing value {path} failed: test failed")),
            }
        }
        other => Err(format!("Unexpected kind: {other}")),
    }
}

fn unescape_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<(&str, String), String> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("invalid JSON pointer {path:?}"))?;
    Ok((parent, unescape_token(last)))
}

fn pointer_add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    let missing =
        || format!("add operation does not apply: doc is missing path: {path:?}: missing value");
    match doc.pointer_mut(parent).ok_or_else(missing)? {
        Value::Object(map) => {
            map.insert(last, value);
            Ok(())
        }
        Value::Array(items) => {
            let index = if last == "-" {
                items.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= items.len())
                    .ok_or_else(|| {
                        format!("add operation does not apply: index out of bounds: {path}")
                    })?
            };
            items.insert(index, value);
            Ok(())
        }
        _ => Err(missing()),
    }
}

fn pointer_remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(path)?;
    let missing =
        || format!("remove operation does not apply: doc is missing path: {path:?}: missing value");
    match doc.pointer_mut(parent).ok_or_else(missing)? {
        Value::Object(map) => map.remove(&last).ok_or_else(missing),
        Value::Array(items) => {
            let index = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i < items.len())
                .ok_or_else(missing)?;
            Ok(items.remove(index))
        }
        _ => Err(missing()),
    }
}

// ------------------------------------------------------------------------------------------
// Request handling
// ------------------------------------------------------------------------------------------

enum Routed {
    Json {
        code: u16,
        body: Value,
        headers: Vec<(String, String)>,
    },
    Text(u16, &'static str),
    Watch(WatchSpec),
}

impl Routed {
    fn error(err: ApiError) -> Routed {
        Routed::Json {
            code: err.code,
            body: err.status(),
            headers: err.headers(),
        }
    }

    fn ok(body: Value) -> Routed {
        Routed::Json {
            code: 200,
            body,
            headers: Vec::new(),
        }
    }
}

struct WatchSpec {
    target: Target,
    selector: Selector,
    /// `None`: start with the current objects (resourceVersion unset, "" or "0").
    from: Option<u64>,
    bookmarks: bool,
    timeout: Option<Duration>,
    send_initial_events: bool,
}

/// Serves one request; `Ok(false)` closes the connection.
fn handle(shared: &Arc<Shared>, request: HttpRequest, writer: &mut TcpStream) -> io::Result<bool> {
    let keep_alive = request.keep_alive();
    let query = parse_query(&request.query);
    let watch = query.get("watch").is_some_and(|v| v == "true" || v == "1");
    let mut record = RequestRecord {
        method: request.method.clone(),
        path: request.path.clone(),
        query: request.query.clone(),
        watch,
        content_type: request.header("content-type").map(str::to_string),
        body: String::from_utf8_lossy(&request.body).into_owned(),
        status: 0,
    };
    let delay = shared.lock().delay;
    if !delay.is_zero() {
        thread::sleep(delay);
    }
    let routed = {
        let mut state = shared.lock();
        route(&mut state, &request, &query, watch)
    };
    match routed {
        Routed::Json {
            code,
            body,
            headers,
        } => {
            record.status = code;
            shared.lock().requests.push(record);
            shared.changed.notify_all();
            write_json(writer, code, &headers, &body, keep_alive)?;
            Ok(keep_alive)
        }
        Routed::Text(code, text) => {
            record.status = code;
            shared.lock().requests.push(record);
            let head = format!(
                "HTTP/1.1 {code} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{text}",
                reason_phrase(code),
                text.len()
            );
            writer.write_all(head.as_bytes())?;
            writer.flush()?;
            Ok(keep_alive)
        }
        Routed::Watch(spec) => {
            run_watch(shared, spec, record, writer)?;
            Ok(false)
        }
    }
}

fn route(
    state: &mut State,
    request: &HttpRequest,
    query: &HashMap<String, String>,
    watch: bool,
) -> Routed {
    match route_inner(state, request, query, watch) {
        Ok(routed) => routed,
        Err(err) => Routed::error(err),
    }
}

/// Paths that `system:public-info-viewer` lets anyone (even anonymous) read.
const PUBLIC_PATHS: [&str; 4] = ["/version", "/healthz", "/livez", "/readyz"];

fn route_inner(
    state: &mut State,
    request: &HttpRequest,
    query: &HashMap<String, String>,
    watch: bool,
) -> Result<Routed, ApiError> {
    // Authentication: a wrong token is 401; no credentials is the insecure port's user
    // (client-go sends no credentials over plain HTTP) or, with `require_token`, anonymous;
    // a node token is the node's identity (system:node:NAME).
    let identity = nodeauth::authenticate(state, request.header("authorization"))?;
    let user = identity.user();
    let path = match request.path.trim_end_matches('/') {
        "" => "/",
        trimmed => trimmed,
    };
    let target = parse_target(path).or_else(|| crd::parse_target(state, path));
    let verb = target.as_ref().map(|t| verb_for(&request.method, t, watch));
    inject_fault(state, request, watch, target.as_ref(), verb.flatten())?;

    if PUBLIC_PATHS.contains(&path) {
        if request.method != "GET" {
            return Err(ApiError::method_not_allowed());
        }
        return Ok(match path {
            "/version" => Routed::ok(version_info()),
            _ => Routed::Text(200, "ok"),
        });
    }
    let Some(target) = target else {
        if user.is_none() {
            return Err(ApiError::forbidden_path(ANONYMOUS_USER, path));
        }
        if let Some(node) = identity.node() {
            // A resource this server does not serve: nothing lets a node at it.
            if let Some(attrs) = nodeauth::Attrs::from_path(&request.method, path, query, watch) {
                return Err(attrs.forbidden(&nodeauth::node_user(node), ""));
            }
        }
        if request.method != "GET" {
            return Err(ApiError::method_not_allowed());
        }
        let host = request.header("host").unwrap_or("127.0.0.1");
        return discovery(state, path, host)
            .map(Routed::ok)
            .ok_or_else(ApiError::no_such_path);
    };
    let verb = verb.flatten().ok_or_else(ApiError::method_not_allowed)?;
    let user = user.unwrap_or_else(|| ANONYMOUS_USER.to_string());
    if user == ANONYMOUS_USER || state.denies.iter().any(|deny| deny.matches(verb, &target)) {
        return Err(ApiError::forbidden(&user, verb, &target));
    }
    if let Some(node) = identity.node() {
        nodeauth::authorize(state, node, &nodeauth::Attrs::new(verb, &target, query))?;
    }
    let mut opts = write_options(query)?;
    opts.node = identity.node().map(str::to_string);
    match verb {
        "get" => state
            .get_served(&target)
            .map(Routed::ok)
            .ok_or_else(|| ApiError::not_found(&target, target.name())),
        "list" => {
            let selector = Selector::parse(query, target.resource)?;
            Ok(Routed::ok(state.list(&target, &selector)))
        }
        "watch" => watch_spec(target, query).map(Routed::Watch),
        "create" if target.is_eviction() => {
            let body = request_body(request, &target)?;
            respond(state.evict(&target, body, &opts))
        }
        "create" => {
            let body = request_body(request, &target)?;
            respond(state.create(&target, body, &opts))
        }
        "update" => {
            let body = request_body(request, &target)?;
            respond(state.update(&target, body, &opts))
        }
        "patch" => {
            let kind = patch_kind(request.header("content-type"))?;
            respond(state.patch(&target, kind, &request.body, &opts))
        }
        "delete" => {
            let options: Option<Value> = if request.body.is_empty() {
                None
            } else {
                Some(serde_json::from_slice(&request.body).map_err(|err| {
                    ApiError::bad_request(format!(
                        "couldn't get version/kind; json parse error: {err}"
                    ))
                })?)
            };
            respond(state.delete(&target, options.as_ref(), &opts))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// The RBAC verb of a request, `None` if the method is not served on that path.
fn verb_for(method: &str, target: &Target, watch: bool) -> Option<&'static str> {
    let object = target.name.is_some();
    if target.is_eviction() {
        // pods/eviction is create-only.
        return (method == "POST").then_some("create");
    }
    match (method, object) {
        ("GET", _) if watch => Some("watch"),
        ("GET", true) => Some("get"),
        ("GET", false) => Some("list"),
        ("POST", false) if target.subresource.is_none() => {
            // Creating needs a namespace for namespaced kinds.
            (!target.resource.namespaced() || target.namespace.is_some()).then_some("create")
        }
        ("PUT", true) => Some("update"),
        ("PATCH", true) => Some("patch"),
        ("DELETE", true) if target.subresource.is_none() => Some("delete"),
        _ => None,
    }
}

fn inject_fault(
    state: &mut State,
    request: &HttpRequest,
    watch: bool,
    target: Option<&Target>,
    verb: Option<&str>,
) -> Result<(), ApiError> {
    let position = state.faults.iter().position(|fault| {
        fault.remaining > 0
            && match &fault.path_prefix {
                None => !watch,
                Some(prefix) => {
                    request.path.starts_with(prefix.as_str())
                        && fault.method.as_ref().is_none_or(|m| *m == request.method)
                }
            }
    });
    let Some(position) = position else {
        return Ok(());
    };
    let code = state.faults[position].code;
    state.faults[position].remaining -= 1;
    if state.faults[position].remaining == 0 {
        state.faults.remove(position);
    }
    let user = nodeauth::authenticate(state, request.header("authorization"))
        .ok()
        .and_then(|identity| identity.user())
        .unwrap_or_else(|| ANONYMOUS_USER.to_string());
    Err(ApiError::injected(
        code,
        &user,
        verb.unwrap_or("get"),
        target,
    ))
}

fn write_options(query: &HashMap<String, String>) -> Result<Opts, ApiError> {
    let dry_run = match query.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
            )))
        }
    };
    let validation = match query.get("fieldValidation").map(String::as_str) {
        None | Some("") | Some("Warn") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
            )))
        }
    };
    Ok(Opts {
        dry_run,
        validation,
        node: None,
    })
}

fn media_type(content_type: Option<&str>) -> String {
    content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn request_body(request: &HttpRequest, target: &Target) -> Result<Value, ApiError> {
    let parse_error = |err: String| {
        ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {err}"
        ))
    };
    let _ = target;
    match media_type(request.header("content-type")).as_str() {
        "" | "application/json" | "*/*" => {
            serde_json::from_slice(&request.body).map_err(|err| parse_error(err.to_string()))
        }
        "application/yaml" => serde_yaml_ng::from_slice(&request.body)
            .map_err(|err| ApiError::bad_request(format!("error converting YAML to JSON: {err}"))),
        "application/vnd.kubernetes.protobuf" => {
            let kind = if target.is_eviction() {
                "Eviction"
            } else {
                target.resource.kind()
            };
            protobuf::decode(&request.body, kind).map_err(|err| match err {
                protobuf::Error::UnsupportedKind(found) => ApiError::unsupported_media_type(&format!(
                    "{BODY_TYPES} (this fake server decodes protobuf for ConfigMap and Namespace only, besides PodDisruptionBudget and Eviction for kubectl create pdb and drain; not {found})"
                )),
                protobuf::Error::Malformed(why) => ApiError::bad_request(format!(
                    "{kind} in version \"v1\" cannot be handled as a {kind}: {why}"
                )),
            })
        }
        _ => Err(ApiError::unsupported_media_type(BODY_TYPES)),
    }
}

fn patch_kind(content_type: Option<&str>) -> Result<PatchKind, ApiError> {
    match media_type(content_type).as_str() {
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
        "application/json-patch+json" => Ok(PatchKind::Json),
        _ => Err(ApiError::unsupported_media_type(PATCH_TYPES)),
    }
}

fn respond(result: Result<Outcome, ApiError>) -> Result<Routed, ApiError> {
    let outcome = result?;
    let headers = outcome
        .warnings
        .iter()
        .map(|warning| {
            let escaped = warning.replace('\\', "\\\\").replace('"', "\\\"");
            ("Warning".to_string(), format!("299 - \"{escaped}\""))
        })
        .collect();
    Ok(Routed::Json {
        code: outcome.code,
        body: outcome.body,
        headers,
    })
}

fn watch_spec(mut target: Target, query: &HashMap<String, String>) -> Result<WatchSpec, ApiError> {
    let mut selector = Selector::parse(query, target.resource)?;
    if let Some(name) = target.name.take() {
        // The deprecated watch of a single object is a watch with a name selector.
        selector.fields.extend(Selector::for_name(&name).fields);
    }
    let from =
        match query.get("resourceVersion").map(String::as_str) {
            None | Some("") | Some("0") => None,
            Some(text) => Some(text.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {text:?}"))
            })?),
        };
    let flag = |key: &str| query.get(key).is_some_and(|v| v == "true" || v == "1");
    let bookmarks = flag("allowWatchBookmarks");
    let send_initial_events = flag("sendInitialEvents");
    if send_initial_events {
        let mut errors = Vec::new();
        if query.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
            errors.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !bookmarks {
            errors.push(FieldError::forbidden(
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks to true",
            ));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", &errors));
        }
    }
    let timeout = match query.get("timeoutSeconds") {
        None => None,
        Some(text) => Some(Duration::from_secs(text.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("invalid timeoutSeconds: {text:?}"))
        })?)),
    };
    Ok(WatchSpec {
        target,
        selector,
        from,
        bookmarks,
        timeout,
        send_initial_events,
    })
}

// ------------------------------------------------------------------------------------------
// Watch streams
// ------------------------------------------------------------------------------------------

fn watch_event(kind: &str, object: Value) -> Value {
    json!({"type": kind, "object": object})
}

fn bookmark(target: &Target, rv: u64, initial_events_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_events_end {
        metadata["annotations"] = json!({INITIAL_EVENTS_END: "true"});
    }
    watch_event(
        "BOOKMARK",
        json!({
            "kind": target.resource.kind(),
            "apiVersion": target.group.api_version(),
            "metadata": metadata,
        }),
    )
}

/// The event a watcher with `spec`'s namespace and selectors sees for a stored change.
fn visible_event(event: &HistoryEvent, spec: &WatchSpec) -> Option<Value> {
    let resource = spec.target.resource;
    if let Some(ns) = &spec.target.namespace {
        if event.object["metadata"]["namespace"].as_str() != Some(ns.as_str()) {
            return None;
        }
    }
    let now = spec.selector.matches(&event.object, resource);
    let before = event
        .prev
        .as_ref()
        .is_some_and(|prev| spec.selector.matches(prev, resource));
    let served = |obj: Value| with_type_meta(obj, resource, spec.target.group);
    let (kind, object) = match event.kind {
        EventType::Added if now => ("ADDED", event.object.clone()),
        EventType::Deleted if now => ("DELETED", event.object.clone()),
        EventType::Modified if now && before => ("MODIFIED", event.object.clone()),
        EventType::Modified if now => ("ADDED", event.object.clone()),
        EventType::Modified if before => {
            // It stopped matching: a DELETED with the old content at the new resourceVersion.
            let mut old = event.prev.clone()?;
            old["metadata"]["resourceVersion"] = json!(event.rv.to_string());
            ("DELETED", old)
        }
        _ => return None,
    };
    Some(watch_event(kind, served(object)))
}

fn run_watch(
    shared: &Arc<Shared>,
    spec: WatchSpec,
    mut record: RequestRecord,
    writer: &mut TcpStream,
) -> io::Result<()> {
    let resource = spec.target.resource;
    let mut state = shared.lock();
    if let Some(rv) = spec.from {
        // A resourceVersion from the future: wait for it like the watch cache, then 504.
        let deadline = Instant::now() + FRESHNESS_WAIT;
        let stop_epoch = state.stop_epoch;
        while rv > state.rv && Instant::now() < deadline && state.stop_epoch == stop_epoch {
            state = shared
                .changed
                .wait_timeout(state, WATCH_POLL)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|poison| poison.into_inner().0);
        }
        if rv > state.rv {
            let err = ApiError::timeout(
                format!("Too large resource version: {rv}, current: {}", state.rv),
                1,
            );
            record.status = err.code;
            state.requests.push(record);
            drop(state);
            return write_json(writer, err.code, &err.headers(), &err.status(), false);
        }
    }
    let mut initial = Vec::new();
    let mut cursor = state.rv;
    let mut expired = false;
    match spec.from {
        Some(rv) if !spec.send_initial_events => {
            let too_old = state.histories.get(&resource).and_then(|h| h.too_old(rv));
            match too_old {
                Some(oldest) => {
                    let err =
                        ApiError::expired(format!("too old resource version: {rv} ({oldest})"));
                    initial.push(watch_event("ERROR", err.status()));
                    expired = true;
                }
                None => cursor = rv,
            }
        }
        _ => {
            for obj in state.objects(resource).values() {
                let in_namespace =
                    spec.target.namespace.as_ref().is_none_or(|ns| {
                        obj["metadata"]["namespace"].as_str() == Some(ns.as_str())
                    });
                if in_namespace && spec.selector.matches(obj, resource) {
                    let served = with_type_meta(obj.clone(), resource, spec.target.group);
                    initial.push(watch_event("ADDED", served));
                }
            }
            if spec.send_initial_events {
                initial.push(bookmark(&spec.target, state.rv, true));
            }
        }
    }
    record.status = 200;
    state.requests.push(record.clone());
    let watch_id = state.next_watch;
    state.next_watch += 1;
    if !expired {
        state.watches.insert(watch_id, record);
    }
    let epochs = (state.stop_epoch, state.drop_epoch, state.bookmark_epoch);
    drop(state);

    let result = stream_watch(shared, &spec, writer, initial, expired, cursor, epochs);
    shared.lock().watches.remove(&watch_id);
    result
}

fn stream_watch(
    shared: &Arc<Shared>,
    spec: &WatchSpec,
    writer: &mut TcpStream,
    initial: Vec<Value>,
    expired: bool,
    mut cursor: u64,
    (stop_epoch, drop_epoch, mut bookmark_epoch): (u64, u64, u64),
) -> io::Result<()> {
    let resource = spec.target.resource;
    write_head(writer, 200, &[], "Transfer-Encoding: chunked\r\n", false)?;
    for event in &initial {
        write_chunk(writer, event)?;
    }
    if expired {
        return finish_chunks(writer);
    }
    let deadline = spec.timeout.map(|timeout| Instant::now() + timeout);
    let mut last_bookmark = Instant::now();
    loop {
        let mut batch = Vec::new();
        let mut end = false;
        {
            let mut state = shared.lock();
            loop {
                if state.stop_epoch != stop_epoch {
                    // The server is stopping and closes the connection under us.
                    return Ok(());
                }
                if state.drop_epoch != drop_epoch || deadline.is_some_and(|d| Instant::now() >= d) {
                    end = true;
                    break;
                }
                let Some(history) = state.histories.get(&resource) else {
                    end = true;
                    break;
                };
                if history.too_old(cursor).is_some() {
                    // Too slow to keep up with the history: the real server drops the watch.
                    end = true;
                    break;
                }
                let after = cursor;
                for event in history.events.iter().filter(|e| e.rv > after) {
                    if let Some(visible) = visible_event(event, spec) {
                        batch.push(visible);
                    }
                    cursor = event.rv;
                }
                let due = last_bookmark + state.bookmark_interval;
                if spec.bookmarks
                    && (state.bookmark_epoch != bookmark_epoch || Instant::now() >= due)
                {
                    bookmark_epoch = state.bookmark_epoch;
                    last_bookmark = Instant::now();
                    cursor = cursor.max(state.rv);
                    batch.push(bookmark(&spec.target, state.rv, false));
                }
                if !batch.is_empty() {
                    break;
                }
                let mut wait = WATCH_POLL;
                if spec.bookmarks {
                    wait = wait.min(due.saturating_duration_since(Instant::now()));
                }
                if let Some(deadline) = deadline {
                    wait = wait.min(deadline.saturating_duration_since(Instant::now()));
                }
                state = shared
                    .changed
                    .wait_timeout(state, wait.max(Duration::from_millis(1)))
                    .map(|(guard, _)| guard)
                    .unwrap_or_else(|poison| poison.into_inner().0);
            }
        }
        for event in &batch {
            write_chunk(writer, event)?;
        }
        if end {
            return finish_chunks(writer);
        }
    }
}

// ------------------------------------------------------------------------------------------
// Discovery
// ------------------------------------------------------------------------------------------

const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

fn version_info() -> Value {
    json!({
        "major": SERVER_MAJOR,
        "minor": SERVER_MINOR,
        "gitVersion": SERVER_GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

fn resource_entry(resource: Resource) -> Value {
    let mut entry = json!({
        "name": resource.plural(),
        "singularName": resource.kind().to_lowercase(),
        "namespaced": resource.namespaced(),
        "kind": resource.kind(),
        "verbs": VERBS,
    });
    if !resource.short_names().is_empty() {
        entry["shortNames"] = json!(resource.short_names());
    }
    match resource {
        Resource::Pods => entry["categories"] = json!(["all"]),
        Resource::CustomResourceDefinitions => entry["categories"] = json!(["api-extensions"]),
        _ => {}
    }
    entry
}

/// The discovery entry of a `status` subresource.
fn status_entry(resource: Resource) -> Value {
    json!({
        "name": format!("{}/status", resource.plural()),
        "singularName": "",
        "namespaced": resource.namespaced(),
        "kind": resource.kind(),
        "verbs": ["get", "patch", "update"],
    })
}

/// An APIGroup entry: the group with its versions, the first one preferred.
fn group_versions_entry(group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|version| {
            let group_version = if group.is_empty() {
                version.to_string()
            } else {
                format!("{group}/{version}")
            };
            json!({"groupVersion": group_version, "version": version})
        })
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

fn group_entry(group: ApiGroup) -> Value {
    group_versions_entry(group.group(), &["v1"])
}

/// The built-in groups besides the core one.
const GROUPS: [ApiGroup; 4] = [
    ApiGroup::EventsV1,
    ApiGroup::PolicyV1,
    ApiGroup::CoordinationV1,
    ApiGroup::ApiextensionsV1,
];

/// The legacy discovery documents (also the answer to aggregated-discovery requests, which
/// clients then parse as legacy because of the plain `application/json` content type);
/// the groups of CustomResourceDefinitions come from module `crd`.
fn discovery(state: &State, path: &str, host: &str) -> Option<Value> {
    Some(match path {
        "/api" => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        }),
        "/api/v1" => json!({
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                resource_entry(Resource::ConfigMaps),
                resource_entry(Resource::Events),
                resource_entry(Resource::Namespaces),
                resource_entry(Resource::Nodes),
                status_entry(Resource::Nodes),
                resource_entry(Resource::Pods),
                {
                    "name": "pods/eviction",
                    "singularName": "",
                    "namespaced": true,
                    "group": "policy",
                    "version": "v1",
                    "kind": "Eviction",
                    "verbs": ["create"],
                },
                status_entry(Resource::Pods),
            ],
        }),
        "/apis" => {
            let mut groups: Vec<Value> = GROUPS.iter().map(|g| group_entry(*g)).collect();
            groups.extend(crd::discovery_groups(state));
            json!({
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": groups,
            })
        }
        _ => {
            let group = GROUPS
                .into_iter()
                .find(|g| path.strip_prefix("/apis/") == Some(g.group()))
                .map(|g| {
                    let mut entry = group_entry(g);
                    entry["kind"] = json!("APIGroup");
                    entry["apiVersion"] = json!("v1");
                    entry
                });
            if group.is_some() {
                return group;
            }
            let Some(group) = GROUPS
                .into_iter()
                .find(|g| path.strip_prefix("/apis/") == Some(g.api_version()))
            else {
                return crd::discovery(state, path);
            };
            let resources: Vec<Value> = match group {
                ApiGroup::PolicyV1 => vec![
                    resource_entry(Resource::PodDisruptionBudgets),
                    status_entry(Resource::PodDisruptionBudgets),
                ],
                ApiGroup::CoordinationV1 => vec![resource_entry(Resource::Leases)],
                ApiGroup::ApiextensionsV1 => vec![
                    resource_entry(Resource::CustomResourceDefinitions),
                    status_entry(Resource::CustomResourceDefinitions),
                ],
                _ => vec![resource_entry(Resource::Events)],
            };
            json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": group.api_version(),
                "resources": resources,
            })
        }
    })
}

// ------------------------------------------------------------------------------------------
// Small utilities: time, UUIDs, names
// ------------------------------------------------------------------------------------------

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's civil_from_days).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn unix_seconds(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `2006-01-02T15:04:05Z`, the form of metav1.Time.
fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// `time` as metav1.Time serialises it (whole seconds, UTC).
fn rfc3339(time: SystemTime) -> String {
    let secs = unix_seconds(time);
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn http_date(time: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = unix_seconds(time);
    let days = secs.div_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let rem = secs.rem_euclid(86_400);
    let mut out = String::new();
    let _ = write!(
        out,
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    out
}

/// A random (version 4) UUID, as metadata.uid.
fn uuid_v4() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The 5-character suffix of generateName (names.SimpleNameGenerator's alphabet).
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random::<usize>() % ALPHABET.len()] as char)
        .collect()
}

// ------------------------------------------------------------------------------------------
// Protobuf request bodies (kubectl's typed clients send them since 1.2x)
// ------------------------------------------------------------------------------------------

/// Decodes the `k8s\0` protobuf envelope (runtime.Unknown) of a ConfigMap, Namespace,
/// PodDisruptionBudget or Eviction into its JSON form; enough for `kubectl create configmap`,
/// `kubectl create namespace`, `kubectl create pdb` and `kubectl drain`'s evictions.
mod protobuf {
    use serde_json::{json, Map, Value};

    const MAGIC: &[u8] = b"k8s\0";

    pub(super) enum Error {
        UnsupportedKind(String),
        Malformed(String),
    }

    enum Wire<'a> {
        Varint(u64),
        Bytes(&'a [u8]),
        Fixed,
    }

    fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, Error> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *buf
                .get(*pos)
                .ok_or_else(|| Error::Malformed("truncated varint".to_string()))?;
            *pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::Malformed("varint too long".to_string()))
    }

    fn fields(buf: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, Error> {
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < buf.len() {
            let key = varint(buf, &mut pos)?;
            let wire = match key & 7 {
                0 => Wire::Varint(varint(buf, &mut pos)?),
                1 | 5 => {
                    pos += if key & 7 == 1 { 8 } else { 4 };
                    Wire::Fixed
                }
                2 => {
                    let len = usize::try_from(varint(buf, &mut pos)?)
                        .map_err(|_| Error::Malformed("length overflow".to_string()))?;
                    let bytes = buf
                        .get(pos..pos + len)
                        .ok_or_else(|| Error::Malformed("truncated field".to_string()))?;
                    pos += len;
                    Wire::Bytes(bytes)
                }
                other => return Err(Error::Malformed(format!("unsupported wire type {other}"))),
            };
            out.push((key >> 3, wire));
        }
        Ok(out)
    }

    fn text(bytes: &[u8]) -> Result<String, Error> {
        String::from_utf8(bytes.to_vec()).map_err(|_| Error::Malformed("invalid UTF-8".to_string()))
    }

    /// A `map<string, string>` (or bytes, base64-encoded) entry.
    fn map_entry(bytes: &[u8], base64_values: bool) -> Result<(String, Value), Error> {
        let mut key = String::new();
        let mut value = Value::String(String::new());
        for (field, wire) in fields(bytes)? {
            match (field, wire) {
                (1, Wire::Bytes(b)) => key = text(b)?,
                (2, Wire::Bytes(b)) if base64_values => value = json!(super::base64_encode(b)),
                (2, Wire::Bytes(b)) => value = json!(text(b)?),
                _ => {}
            }
        }
        Ok((key, value))
    }

    fn insert_map_entry(
        obj: &mut Value,
        field: &str,
        bytes: &[u8],
        base64_values: bool,
    ) -> Result<(), Error> {
        let (key, value) = map_entry(bytes, base64_values)?;
        if !obj.get(field).is_some_and(Value::is_object) {
            obj[field] = json!({});
        }
        obj[field][key] = value;
        Ok(())
    }

    fn push_string(obj: &mut Value, field: &str, bytes: &[u8]) -> Result<(), Error> {
        if !obj.get(field).is_some_and(Value::is_array) {
            obj[field] = json!([]);
        }
        if let Some(items) = obj[field].as_array_mut() {
            items.push(json!(text(bytes)?));
        }
        Ok(())
    }

    fn owner_reference(bytes: &[u8]) -> Result<Value, Error> {
        let mut owner = Map::new();
        for (field, wire) in fields(bytes)? {
            let name = match field {
                1 => "kind",
                3 => "name",
                4 => "uid",
                5 => "apiVersion",
                6 => "controller",
                7 => "blockOwnerDeletion",
                _ => continue,
            };
            match wire {
                Wire::Bytes(b) => owner.insert(name.to_string(), json!(text(b)?)),
                Wire::Varint(v) => owner.insert(name.to_string(), json!(v != 0)),
                Wire::Fixed => None,
            };
        }
        Ok(Value::Object(owner))
    }

    /// ObjectMeta; timestamps and managedFields are dropped (the server sets or drops them).
    fn object_meta(bytes: &[u8]) -> Result<Value, Error> {
        let mut meta = json!({});
        for (field, wire) in fields(bytes)? {
            match (field, wire) {
                // Go marshals empty strings too; JSON would omit them.
                (_, Wire::Bytes([])) => {}
                (1, Wire::Bytes(b)) => meta["name"] = json!(text(b)?),
                (2, Wire::Bytes(b)) => meta["generateName"] = json!(text(b)?),
                (3, Wire::Bytes(b)) => meta["namespace"] = json!(text(b)?),
                (5, Wire::Bytes(b)) => meta["uid"] = json!(text(b)?),
                (6, Wire::Bytes(b)) => meta["resourceVersion"] = json!(text(b)?),
                (11, Wire::Bytes(b)) => insert_map_entry(&mut meta, "labels", b, false)?,
                (12, Wire::Bytes(b)) => insert_map_entry(&mut meta, "annotations", b, false)?,
                (13, Wire::Bytes(b)) => {
                    if !meta.get("ownerReferences").is_some_and(Value::is_array) {
                        meta["ownerReferences"] = json!([]);
                    }
                    let owner = owner_reference(b)?;
                    if let Some(items) = meta["ownerReferences"].as_array_mut() {
                        items.push(owner);
                    }
                }
                (14, Wire::Bytes(b)) => push_string(&mut meta, "finalizers", b)?,
                _ => {}
            }
        }
        Ok(meta)
    }

    fn configmap(bytes: &[u8]) -> Result<Value, Error> {
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        for (field, wire) in fields(bytes)? {
            match (field, wire) {
                (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
                (2, Wire::Bytes(b)) => insert_map_entry(&mut obj, "data", b, false)?,
                (3, Wire::Bytes(b)) => insert_map_entry(&mut obj, "binaryData", b, true)?,
                (4, Wire::Varint(v)) => obj["immutable"] = json!(v != 0),
                _ => {}
            }
        }
        Ok(obj)
    }

    fn namespace(bytes: &[u8]) -> Result<Value, Error> {
        let mut obj = json!({"apiVersion": "v1", "kind": "Namespace"});
        for (field, wire) in fields(bytes)? {
            match (field, wire) {
                (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
                (2, Wire::Bytes(b)) => {
                    let mut spec = json!({});
                    for (field, wire) in fields(b)? {
                        if let (1, Wire::Bytes(f)) = (field, wire) {
                            push_string(&mut spec, "finalizers", f)?;
                        }
                    }
                    obj["spec"] = spec;
                }
                _ => {}
            }
        }
        Ok(obj)
    }

    /// intstr.IntOrString.
    fn int_or_string(bytes: &[u8]) -> Result<Value, Error> {
        let (mut is_string, mut int, mut string) = (false, 0i64, String::new());
        for (field, wire) in fields(bytes)? {
            match (field, wire) {
                (1, Wire::Varint(v)) => is_string = v == 1,
                (2, Wire::Varint(v)) => int = i64::from(v as i32),
                (3, Wire::Bytes(b)) => string = text(b)?,
                _ => {}
            }
        }
        Ok(if is_string { json!(string) } else { json!(int) })
    }

    /// metav1.LabelSelector.
    fn label_selector(bytes: &[u8]) -> Result<Value, Error> {
        let mut selector = json!({});
        for (field, wire) in fields(bytes)? {
            match (field, wire) {
                (1, Wire::Bytes(b)) => insert_map_entry(&mut selector, "matchLabels", b, false)?,
                (2, Wire::Bytes(b)) => {
                    let mut expr = json!({});
                    for (field, wire) in fields(b)? {
                        match (field, wire) {
                            (1, Wire::Bytes(k)) => expr["key"] = json!(text(k)?),
                            (2, Wire::Bytes(o)) => expr["operator"] = json!(text(o)?),
                            (3, Wire::Bytes(v)) => push_string(&mut expr, "values", v)?,
                            _ => {}
                        }
                    }
                    if !selector
                        .get("matchExpressions")
                        .is_some_and(Value::is_array)
                    {
                        selector["matchExpressions"] = json!([]);
                    }
                    if let Some(items) = selector["matchExpressions"].as_array_mut() {
                        items.push(expr);
                    }
                }
                _ => {}
            }
        }
        Ok(selector)
    }

    /// policy/v1 PodDisruptionBudget (`kubectl create pdb`); the status is dropped (a create
    /// resets it).
    fn pod_disruption_budget(bytes: &[u8]) -> Result<Value, Error> {
        let mut obj = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget"});
        for (field, wire) in fields(bytes)? {
            match (field, wire) {
                (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
                (2, Wire::Bytes(b)) => {
                    let mut spec = json!({});
                    for (field, wire) in fields(b)? {
                        match (field, wire) {
                            (1, Wire::Bytes(v)) => spec["minAvailable"] = int_or_string(v)?,
                            (2, Wire::Bytes(v)) => spec["selector"] = label_selector(v)?,
                            (3, Wire::Bytes(v)) => spec["maxUnavailable"] = int_or_string(v)?,
                            (4, Wire::Bytes(v)) => {
                                spec["unhealthyPodEvictionPolicy"] = json!(text(v)?)
                            }
                            _ => {}
                        }
                    }
                    obj["spec"] = spec;
                }
                _ => {}
            }
        }
        Ok(obj)
    }

    /// policy/v1 Eviction: metadata and deleteOptions.
    fn eviction(bytes: &[u8]) -> Result<Value, Error> {
        let mut obj = json!({"apiVersion": "policy/v1", "kind": "Eviction"});
        for (field, wire) in fields(bytes)? {
            match (field, wire) {
                (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
                (2, Wire::Bytes(b)) => obj["deleteOptions"] = delete_options(b)?,
                _ => {}
            }
        }
        Ok(obj)
    }

    fn delete_options(bytes: &[u8]) -> Result<Value, Error> {
        let mut options = json!({});
        for (field, wire) in fields(bytes)? {
            match (field, wire) {
                // int64 in two's complement.
                (1, Wire::Varint(v)) => options["gracePeriodSeconds"] = json!(v as i64),
                (2, Wire::Bytes(b)) => {
                    let mut pre = json!({});
                    for (field, wire) in fields(b)? {
                        match (field, wire) {
                            (1, Wire::Bytes(u)) => pre["uid"] = json!(text(u)?),
                            (2, Wire::Bytes(r)) => pre["resourceVersion"] = json!(text(r)?),
                            _ => {}
                        }
                    }
                    options["preconditions"] = pre;
                }
                (3, Wire::Varint(v)) => options["orphanDependents"] = json!(v != 0),
                (4, Wire::Bytes(b)) => options["propagationPolicy"] = json!(text(b)?),
                (5, Wire::Bytes(b)) => push_string(&mut options, "dryRun", b)?,
                _ => {}
            }
        }
        Ok(options)
    }

    /// Decodes a body whose kind must be `expected` (ConfigMap, Namespace or Eviction).
    pub(super) fn decode(body: &[u8], expected: &str) -> Result<Value, Error> {
        let envelope = body
            .strip_prefix(MAGIC)
            .ok_or_else(|| Error::Malformed("provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]".to_string()))?;
        let mut kind = String::new();
        let mut raw: &[u8] = &[];
        for (field, wire) in fields(envelope)? {
            match (field, wire) {
                (1, Wire::Bytes(type_meta)) => {
                    for (field, wire) in fields(type_meta)? {
                        if let (2, Wire::Bytes(k)) = (field, wire) {
                            kind = text(k)?;
                        }
                    }
                }
                (2, Wire::Bytes(bytes)) => raw = bytes,
                _ => {}
            }
        }
        match (kind.as_str(), expected) {
            ("ConfigMap", "ConfigMap") => configmap(raw),
            ("Namespace", "Namespace") => namespace(raw),
            ("Eviction", "Eviction") => eviction(raw),
            ("PodDisruptionBudget", "PodDisruptionBudget") => pod_disruption_budget(raw),
            _ => Err(Error::UnsupportedKind(kind)),
        }
    }
}

/// Standard base64 with padding.
fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
