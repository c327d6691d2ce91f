//! The stored objects and the generic registry: one global resourceVersion, create, update,
//! patch, delete and list with the real server's metadata rules, dispatching to the
//! resources' strategies; plus the server's observations and injected faults.
//!
//! Layout: this file holds the state and its commit; `create`, `update` (and patch) and
//! `delete` the generic verbs; `strategy` the dispatch to the kinds' strategies.

mod create;
mod delete;
mod strategy;
mod update;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::decode::{decode_body, with_type_meta};
use crate::errors::ApiError;
use crate::rbac::Policy;
use crate::resource::{Resource, Target, RESOURCES};
use crate::watch::{History, HistoryEvent};
use crate::{
    crd, custom, pods, RequestRecord, DEFAULT_BOOKMARK_INTERVAL, DEFAULT_HISTORY_LIMIT,
    DEFAULT_NAMESPACES, DEFAULT_TOKEN, DEFAULT_USER,
};

/// The resourceVersion of an empty server (a real cluster never starts at 0; 0 means "any").
const INITIAL_RESOURCE_VERSION: u64 = 100;

pub(crate) type Key = (String, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

pub(crate) struct Fault {
    pub(crate) remaining: usize,
    pub(crate) code: u16,
    pub(crate) method: Option<String>,
    pub(crate) path_prefix: Option<String>,
}

pub(crate) struct Deny {
    pub(crate) verb: String,
    pub(crate) resource: String,
    pub(crate) namespace: Option<String>,
}

impl Deny {
    pub(crate) fn matches(&self, verb: &str, target: &Target) -> bool {
        (self.verb == "*" || self.verb == verb)
            && self.resource == target.rbac_resource()
            && (self.namespace.is_none() || self.namespace == target.namespace)
    }
}

pub(crate) struct State {
    pub(crate) rv: u64,
    pub(crate) store: BTreeMap<Resource, BTreeMap<Key, Value>>,
    pub(crate) histories: BTreeMap<Resource, History>,
    pub(crate) history_limit: usize,
    pub(crate) keep_config_source: bool,
    pub(crate) token: String,
    pub(crate) user: String,
    pub(crate) require_token: bool,
    pub(crate) denies: Vec<Deny>,
    pub(crate) faults: VecDeque<Fault>,
    /// Faults drawn at random for one client's requests (module `faults`).
    pub(crate) random_faults: Option<crate::faults::Draws>,
    /// Faults injected so far (queued and random): how `handle` tells an injected answer.
    pub(crate) injected: u64,
    /// While true, every request is recorded and its connection closed unanswered.
    pub(crate) outage: bool,
    pub(crate) delay: Duration,
    /// Held after an eviction is applied, before its answer is written (the watch
    /// already shows the pod gone).
    pub(crate) eviction_answer_delay: Duration,
    pub(crate) requests: Vec<RequestRecord>,
    pub(crate) watches: BTreeMap<u64, RequestRecord>,
    pub(crate) next_watch: u64,
    pub(crate) drop_epoch: u64,
    pub(crate) bookmark_epoch: u64,
    pub(crate) stop_epoch: u64,
    pub(crate) bookmark_interval: Duration,
    /// Node credentials: bearer token -> node name.
    pub(crate) node_tokens: BTreeMap<String, String>,
    /// The AuthorizeNodeWithSelectors feature gate (on by default since v1.32).
    pub(crate) node_selectors: bool,
    /// The RBAC objects that authorize node credentials besides the Node authorizer (the
    /// repository's top-level manifests unless a test changed them).
    pub(crate) rbac: Arc<Policy>,
    /// How long a bound pod takes to terminate after a graceful delete (zero: at once).
    pub(crate) pod_termination_delay: Duration,
    /// Pods being terminated, to be removed when due.
    pub(crate) terminations: Vec<pods::Termination>,
    /// Eviction requests in flight, their hold and their limit.
    pub(crate) evictions: crate::inflight::Evictions,
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
pub(crate) struct Opts {
    pub(crate) dry_run: bool,
    pub(crate) validation: FieldValidation,
    /// The node whose credentials made the request (NodeRestriction admission applies).
    pub(crate) node: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

/// A successful write or read.
pub(crate) struct Outcome {
    pub(crate) code: u16,
    pub(crate) body: Value,
    pub(crate) warnings: Vec<String>,
}

impl Outcome {
    pub(crate) fn ok(body: Value) -> Outcome {
        Outcome {
            code: 200,
            body,
            warnings: Vec::new(),
        }
    }
}

impl State {
    pub(crate) fn new() -> State {
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
            random_faults: None,
            injected: 0,
            outage: false,
            delay: Duration::ZERO,
            eviction_answer_delay: Duration::ZERO,
            requests: Vec::new(),
            watches: BTreeMap::new(),
            next_watch: 0,
            drop_epoch: 0,
            bookmark_epoch: 0,
            stop_epoch: 0,
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
            node_tokens: BTreeMap::new(),
            node_selectors: true,
            rbac: Policy::shipped().unwrap_or_else(|err| {
                panic!("the test API server cannot read the RBAC of the shipped manifests: {err}")
            }),
            pod_termination_delay: Duration::ZERO,
            terminations: Vec::new(),
            evictions: Default::default(),
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

    pub(crate) fn objects(&self, resource: Resource) -> &BTreeMap<Key, Value> {
        static EMPTY: BTreeMap<Key, Value> = BTreeMap::new();
        self.store.get(&resource).unwrap_or(&EMPTY)
    }

    pub(crate) fn stored(&self, target: &Target) -> Option<&Value> {
        self.objects(target.resource).get(&target.key())
    }

    /// A copy of the stored object `target` names; 404 NotFound if there is none.
    pub(crate) fn existing(&self, target: &Target) -> Result<Value, ApiError> {
        self.stored(target)
            .cloned()
            .ok_or_else(|| ApiError::not_found(target, target.name()))
    }

    /// The object as a client reading `target` sees it.
    pub(crate) fn get_served(&self, target: &Target) -> Option<Value> {
        self.stored(target)
            .map(|obj| with_type_meta(obj.clone(), target.resource, target.group))
    }

    /// Writes (or removes, for Deleted) an object with the next resourceVersion and records
    /// the watch event.
    pub(crate) fn commit(
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
    pub(crate) fn add_commit_hook(&mut self, hook: CommitHook) -> u64 {
        self.next_hook += 1;
        self.commit_hooks.push((self.next_hook, hook));
        self.next_hook
    }

    pub(crate) fn remove_commit_hook(&mut self, id: u64) {
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
}

pub(crate) fn object_key(obj: &Value) -> Key {
    (
        obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
    )
}

pub(crate) fn finalizers(obj: &Value) -> Vec<Value> {
    obj["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Whether the object is marked for deletion (has a `metadata.deletionTimestamp`).
pub(crate) fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

pub(crate) fn copy_field(obj: &mut Value, from: &Value, field: &str) {
    if let Some(map) = obj.as_object_mut() {
        match from.get(field) {
            Some(value) => map.insert(field.to_string(), value.clone()),
            None => map.remove(field),
        };
    }
}
