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
//! [`ApiServer::rotate_node_token`], [`ApiServer::requests`],
//! [`ApiServer::list_requests`], [`ApiServer::open_watches`].
//!
//! Layout: this file holds [`ApiServer`]'s public surface; the machinery is in `server`
//! (listener and connections), `protocol` (HTTP/1.1), `router` (authentication, faults,
//! authorization, verbs), `resource` (resources, groups, paths), `store` (objects,
//! resourceVersions, the generic create/update/patch/delete/list), `watch` (watch cache and
//! streams), `list` (lists and their paging), `decode` (bodies into objects), `validation`
//! (names, labels, annotations),
//! `selectors`, `patch`, `errors`, `discovery`, `protobuf`, `clock` and `ids`; the kinds'
//! own rules in `nodes`, `configmaps`, `events`, `pods` (with PodDisruptionBudgets and
//! evictions), `leases`, `crd`, `custom` and `schema`; node identities, the Node authorizer
//! and NodeRestriction in `nodeauth`, RBAC from manifest files in `rbac`; the node simulator
//! in `nodesim`.

use std::collections::BTreeMap;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::clock::now_rfc3339;
use crate::decode::with_type_meta;
use crate::errors::ApiError;
use crate::patch::PatchKind;
use crate::protocol::parse_query;
use crate::resource::{ApiGroup, Resource, Target};
use crate::server::{bind_with_retry, Acceptor, ConnRegistry, Shared};
use crate::store::{Deny, Fault, Opts, Outcome, State};

mod clock;
mod configmaps;
mod crd;
mod custom;
mod decode;
mod discovery;
mod errors;
mod events;
mod faults;
mod ids;
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
mod validation;
mod watch;

pub use faults::RandomFaults;
pub use nodesim::{NodeSim, Script, SimOptions};
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

    /// Closes every open connection (watches and idle keep-alive ones alike), as an API
    /// server restart or a load balancer's idle timeout does: clients must connect (and, over
    /// HTTPS, shake hands) anew.
    pub fn drop_connections(&self) {
        self.shared.lock_conns().cut_all();
        self.shared.changed.notify_all();
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

    /// Drops the faults queued by [`ApiServer::fail_next`] and
    /// [`ApiServer::fail_next_matching`] that were not served yet.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// From now on, answers a random share of the requests whose User-Agent contains
    /// `faults.user_agent` (watches included) with one of `faults.codes`, reproducibly: the
    /// n-th such request's fate depends on the seed and n only (module `faults`). Queued
    /// faults ([`ApiServer::fail_next`]) go first. Replaces any earlier random faults.
    pub fn inject_random_faults(&self, faults: RandomFaults) {
        faults.check();
        self.lock().random_faults = Some(faults::Draws {
            spec: faults,
            drawn: 0,
        });
    }

    /// No more random faults.
    pub fn stop_random_faults(&self) {
        self.lock().random_faults = None;
    }

    /// The API server goes away until [`ApiServer::end_outage`]: every open connection
    /// (watches included) is cut, as when the server process dies, and every request
    /// after that is read, recorded ([`RequestRecord::outage`]) and its connection closed
    /// without an answer, which a client sees at once, as it sees a refused connection.
    /// Unlike [`ApiServer::stop`], the requests sent meanwhile can be counted.
    pub fn begin_outage(&self) {
        {
            let mut state = self.lock();
            state.outage = true;
            // Watch threads see the stop and end (their connections are cut below).
            state.stop_epoch += 1;
        }
        self.shared.changed.notify_all();
        self.shared.lock_conns().cut_all();
    }

    /// The API server is back (same objects, same resourceVersions, watch history kept).
    pub fn end_outage(&self) {
        self.lock().outage = false;
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
        conns.cut_all();
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

    /// The list requests answered 200 whose path starts with `path_prefix`, oldest first:
    /// each page of a paged list is one (see [`RequestRecord::items`], and its `limit` and
    /// `continue` through [`RequestRecord::query_param`]).
    pub fn list_requests(&self, path_prefix: &str) -> Vec<RequestRecord> {
        self.lock()
            .requests
            .iter()
            .filter(|record| record.is_list() && record.path.starts_with(path_prefix))
            .cloned()
            .collect()
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
