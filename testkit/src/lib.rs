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
//!   `limit` is ignored by watches;
//! - list paging (module `list`) as etcd3 pages: `limit=N` gives at most N items, and while
//!   objects remain a `metadata.continue` token (etcd3's encoding) and, without selectors,
//!   `metadata.remainingItemCount`; with a selector a full page is followed by a token
//!   whenever any object comes after it (so the last page may be empty). `continue` resumes
//!   after the last key at the first page's resourceVersion (a snapshot rebuilt from the
//!   history; once the history no longer covers it: 410 `Expired` with a token that goes on
//!   with the current objects, as after an etcd compaction); malformed tokens, and
//!   `resourceVersion` with `continue`, are 400 with the real messages; `resourceVersion=0`
//!   without `continue` is served whole, as the watch cache ignores `limit`. Every page is a
//!   [`RequestRecord`] with its item count ([`ApiServer::list_requests`]). Lists without
//!   `limit` or `continue` are of the current objects whatever their `resourceVersion`;
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
//! - HTTPS with x509 client certificates ([`ApiServer::start_https`], module `tls`): a CA
//!   minted at start, client certificates it issues ([`ApiServer::issue_client_cert`], short
//!   validity for rotation tests); a missing, foreign or expired certificate fails the
//!   handshake ([`ApiServer::failed_handshakes`]), a valid one authenticates as its Common
//!   Name (`system:node:NODE` is the node, as below); [`ApiServer::drop_connections`] closes
//!   every connection, so that clients shake hands anew;
//! - bearer-token authentication: a wrong token is 401; a request without credentials is the
//!   old insecure port's `system:unsecured` (client-go never sends credentials over plain HTTP,
//!   so kubectl could not work otherwise), or with [`ApiServer::require_token`] the anonymous
//!   user (may read /version and the health endpoints only, 403 elsewhere). The default token
//!   ([`DEFAULT_USER`]) may do anything but what [`ApiServer::deny`] forbids;
//! - node credentials (module `nodeauth`; [`ApiServer::node_token`],
//!   [`ApiServer::write_node_kubeconfig`], [`ApiServer::node_kubeconfig_in`]): the user
//!   `system:node:NODE` (groups `system:nodes`, `system:authenticated`), authorized by the Node
//!   authorizer of v1.32 (AuthorizeNodeWithSelectors on: a node reads only its own Node and the
//!   pods bound to it, and lists or watches pods only with `fieldSelector=spec.nodeName=NODE`;
//!   see [`ApiServer::authorize_node_with_selectors`]) plus RBAC evaluated from the
//!   repository's top-level `manifests/*.yaml` (module [`rbac`]: Roles, ClusterRoles and
//!   their bindings, what `kubectl apply -f manifests/` creates; the shipped files grant nodes
//!   only get/list/watch of ConfigMaps in `kubelet-config`; [`ApiServer::apply_rbac_manifest`]
//!   adds another file, [`ApiServer::set_rbac`] replaces the policy), then restricted by the
//!   NodeRestriction admission plugin (only its own Node, not its taints or restricted labels;
//!   delete, evict and update the status only of pods bound to it; create only its mirror
//!   pods). Everything else (other Nodes, other nodes' pods, PodDisruptionBudgets, DaemonSets,
//!   ReplicaSets, other namespaces' ConfigMaps, ...) is 403 with the real message and the Node
//!   authorizer's reason; [`ApiServer::deny`] applies on top. The default token is not subject
//!   to RBAC.
//!
//! Deviations worth knowing: answers are always JSON (whatever the Accept header prefers);
//! protobuf request bodies are decoded for ConfigMap, Namespace, PodDisruptionBudget and
//! Eviction only (what `kubectl create` and `kubectl drain` send), others (`kubectl run`) get
//! 415; over plain HTTP kubectl sends no token, so a node kubeconfig gives kubectl the
//! insecure port's user, not the node's (kube-rs and curl do send it); no Table output (kubectl falls back to client-side printing), aggregated discovery requests get
//! the legacy documents with `Content-Type: application/json` (kubectl falls back), no OpenAPI
//! documents (404; kubectl's generators, annotate, patch and get do not need them), no
//! managedFields, no deletecollection, list items ordered by (namespace, name) rather than
//! by the etcd key `namespace/name` (different only for namespaces such as `a` and `a-b`),
//! and injected 429s carry a Status body (the real priority-and-fairness filter answers
//! text/plain).
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
//! Fault injection and observation: [`ApiServer::fail_next`],
//! [`ApiServer::inject_random_faults`] (seeded, for one client by its User-Agent),
//! [`ApiServer::begin_outage`] / [`ApiServer::end_outage`], [`ApiServer::set_delay`],
//! [`ApiServer::drop_watches`], [`ApiServer::stop`], [`ApiServer::restart_on_same_port`],
//! [`ApiServer::deny`], [`ApiServer::compact_history`], [`ApiServer::drop_connections`],
//! [`ApiServer::rotate_node_token`], [`ApiServer::set_eviction_hold`],
//! [`ApiServer::limit_evictions_in_flight`] (API priority and fairness's 429, module
//! `inflight`), [`ApiServer::requests`],
//! [`ApiServer::list_requests`], [`ApiServer::open_watches`].
//!
//! Layout: this file holds [`ApiServer`]'s start, addresses, credentials and the helpers
//! its other `impl` blocks share; `control` its fault injection, outages, watch and history
//! control, stop and restart, and the requests it served; each kind's module (`nodes`,
//! `configmaps`, `events`, `pods`, `leases`, `crd`, `nodeauth`) its helpers for that kind.
//! The machinery is in `server`
//! (listener and connections), `protocol` (HTTP/1.1), `router` (authentication, faults,
//! authorization, verbs), `resource` (resources, groups, paths), `store` (objects,
//! resourceVersions, the generic create/update/patch/delete/list), `watch` (watch cache and
//! streams), `list` (lists and their paging), `decode` (bodies into objects), `validation`
//! (names, labels, annotations),
//! `selectors`, `patch`, `errors`, `discovery`, `protobuf`, `clock`, `ids`, `conditions`
//! (status conditions as controllers set them) and `unpoisoned`
//! (mutex locks that survive a panicked holder); the kinds'
//! own rules in `nodes`, `configmaps`, `events`, `pods` (with PodDisruptionBudgets and
//! evictions), `leases`, `crd`, `custom` and `schema`; node identities, the Node authorizer
//! and NodeRestriction in `nodeauth`, RBAC from manifest files in `rbac`; the node simulator
//! in `nodesim`.

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::errors::ApiError;
use crate::protocol::parse_query;
use crate::resource::{Resource, Target};
use crate::server::{Acceptor, ConnRegistry, Shared};
use crate::store::{Opts, Outcome, State};

mod clock;
mod conditions;
mod configmaps;
mod control;
mod crd;
mod custom;
mod decode;
mod discovery;
mod errors;
mod events;
mod faults;
mod ids;
mod inflight;
mod labels;
mod leases;
mod list;
mod nodeauth;
mod nodes;
mod nodesim;
mod patch;
mod pods;
mod protobuf;
mod protocol;
pub mod rbac;
mod resource;
mod router;
mod schema;
mod selectors;
mod server;
mod store;
mod tls;
mod unpoisoned;
mod validation;
mod watch;

pub use faults::RandomFaults;
pub use nodesim::{NodeSim, Script, SimOptions};
pub use pods::HOLD_FINALIZER;
pub use protocol::header;
pub use tls::ClientCert;

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
    /// The `User-Agent` header, if sent.
    pub user_agent: Option<String>,
    /// The request body (lossy UTF-8).
    pub body: String,
    /// The HTTP status answered (200 for a watch stream, even one that carries an ERROR).
    pub status: u16,
    /// For a list answered 200: the number of items of this page (or of the whole list).
    pub items: Option<usize>,
    /// Answered with an injected fault ([`ApiServer::fail_next`],
    /// [`ApiServer::inject_random_faults`]) instead of being served.
    pub injected: bool,
    /// Received during an outage ([`ApiServer::begin_outage`]): not answered (`status` 0).
    pub outage: bool,
    /// For an eviction (`POST pods/NAME/eviction`): the evictions in flight when it arrived,
    /// itself included (see [`ApiServer::set_eviction_hold`]); 0 for other requests.
    pub evictions_in_flight: usize,
    /// When the server read it.
    pub received: Instant,
    /// When the server decided its answer (for a watch: when it was read).
    pub answered: Instant,
}

impl RequestRecord {
    /// The decoded value of query parameter `key`, if present.
    pub fn query_param(&self, key: &str) -> Option<String> {
        parse_query(&self.query).remove(key)
    }

    /// Whether this is a list request answered 200 (a whole list or one page of it).
    pub fn is_list(&self) -> bool {
        self.items.is_some()
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
        Self::start_with(port, None)
    }

    /// Starts a server on `127.0.0.1:0` that speaks HTTPS only and authenticates clients by
    /// x509 certificates its own CA issued ([`ApiServer::issue_client_cert`]; module `tls`):
    /// a missing, foreign or expired client certificate fails the handshake
    /// ([`ApiServer::failed_handshakes`]). Bearer tokens still work on top of a valid
    /// certificate.
    pub fn start_https() -> ApiServer {
        let tls = tls::Tls::new().unwrap_or_else(|err| panic!("fake API server: {err}"));
        Self::start_with(0, Some(Arc::new(tls)))
            .unwrap_or_else(|err| panic!("fake API server: {err}"))
    }

    fn start_with(port: u16, tls: Option<Arc<tls::Tls>>) -> io::Result<ApiServer> {
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
            tls,
            failed_handshakes: AtomicU64::new(0),
        });
        let acceptor = Acceptor::spawn(listener, Arc::clone(&shared));
        Ok(ApiServer {
            shared,
            port,
            acceptor: Mutex::new(Some(acceptor)),
            reaper: Mutex::new(None),
        })
    }

    /// `http://127.0.0.1:PORT` (`https://` for [`ApiServer::start_https`]).
    pub fn url(&self) -> String {
        let scheme = if self.shared.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The CA certificate (PEM) of an HTTPS server: it signed the server's certificate and
    /// every client certificate. Panics for a plain HTTP server.
    pub fn ca_pem(&self) -> String {
        self.https().ca_pem()
    }

    /// A client certificate and key for `common_name` (`system:node:NODE` for a node's
    /// credentials), valid from a minute ago until `valid_for` from now (X.509 times are
    /// whole seconds). Panics for a plain HTTP server.
    pub fn issue_client_cert(&self, common_name: &str, valid_for: Duration) -> ClientCert {
        self.https()
            .issue(common_name, valid_for)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// TLS handshakes that failed so far (HTTPS).
    pub fn failed_handshakes(&self) -> u64 {
        self.shared.failed_handshakes.load(Ordering::SeqCst)
    }

    fn https(&self) -> &tls::Tls {
        self.shared
            .tls
            .as_deref()
            .unwrap_or_else(|| panic!("fake API server: not started with start_https"))
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
        self.write_kubeconfig_for_user(path, &format!("token: {token}"));
    }

    /// A kubeconfig like [`ApiServer::write_kubeconfig`]'s whose user stanza is `user` (one
    /// line, such as `token: T` or `tokenFile: F`).
    pub(crate) fn write_kubeconfig_for_user(&self, path: &Path, user: &str) {
        let text = format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: fake\n  cluster:\n    server: {url}\n    insecure-skip-tls-verify: true\n\
             users:\n\
             - name: fake\n  user:\n    {user}\n\
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
        let reaper = unpoisoned::lock(&self.reaper).take();
        if let Some(reaper) = reaper {
            let _ = reaper.join();
        }
    }
}
