//! The stored objects and the generic registry: one global resourceVersion, create, update,
//! patch, delete and list with the real server's metadata rules, dispatching to the
//! resources' strategies; plus the server's observations and injected faults.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::clock::now_rfc3339;
use crate::decode::{decode_body, with_type_meta};
use crate::errors::{ApiError, FieldError};
use crate::events::validate_event;
use crate::ids::{random_suffix, uuid_v4};
use crate::patch::{apply_json_patch, merge_patch, strategic_merge, PatchKind};
use crate::rbac::Policy;
use crate::resource::{Resource, Target, RESOURCES};
use crate::validation::{dns1123_label, dns1123_subdomain, validate_labels_annotations};
use crate::watch::{History, HistoryEvent};
use crate::{
    configmaps, crd, custom, leases, nodeauth, nodes, pods, RequestRecord,
    DEFAULT_BOOKMARK_INTERVAL, DEFAULT_HISTORY_LIMIT, DEFAULT_NAMESPACES, DEFAULT_TOKEN,
    DEFAULT_USER,
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

    // --- create -------------------------------------------------------------------------

    pub(crate) fn create(
        &mut self,
        target: &Target,
        body: Value,
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
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

    pub(crate) fn update(
        &mut self,
        target: &Target,
        body: Value,
        opts: &Opts,
    ) -> Result<Outcome, ApiError> {
        let old = self.existing(target)?;
        let (obj, warnings) = self.decode(target, body, opts)?;
        self.write_update(target, old, obj, warnings, opts)
    }

    pub(crate) fn patch(
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
        let finalized = is_deleting(&obj) && finalizers(&obj).is_empty();
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

    pub(crate) fn delete(
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
            if is_deleting(&old) {
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
                warnings.extend(nodes::prepare(target, obj, old, self.keep_config_source));
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
        if let Some(old) = old.filter(|old| is_deleting(old)) {
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
            Resource::ConfigMaps => configmaps::validate(obj, old, &mut errors),
            Resource::Nodes => {
                if self.keep_config_source {
                    nodes::validate_config_sources(obj, &mut errors);
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
