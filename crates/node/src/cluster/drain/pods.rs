//! The pods bound to the node as a drain sees them: each Pod decoded into
//! the few facts the drain decides on ([`DrainPod`]; the rest of the object
//! is skipped while it is parsed, never held), and the set of pods that
//! must leave the node ([`NodePods`]), kept from a paginated list and the
//! watch that follows it.
//!
//! Which pods stay follows `kubectl drain`'s filters
//! (k8s.io/kubectl/pkg/drain/filters.go): a pod whose *controller*
//! reference (the ownerReference with `controller: true`) is a DaemonSet
//! stays unless it is finished (Succeeded or Failed); a mirror pod
//! (annotation `kubernetes.io/config.mirror`) stays. Every other pod is
//! evicted, including pods without a controller and pods with emptyDir
//! volumes (`kubectl drain --force --delete-emptydir-data`).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use serde::de::IgnoredAny;
use serde::Deserialize;

use crate::config::store::BlockReason;

/// Annotation of a static pod's mirror (the kubelet owns it; eviction is
/// pointless).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// How many pods must still leave the node, as exact as the list and watch
/// allow: what a drain shows the cluster (a condition, an Event, `status`)
/// either is the count or says what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodCount {
    /// A complete list, and the watch since, show exactly this many.
    Exact(usize),
    /// The first list is being read: this many so far, more may follow.
    AtLeast(usize),
    /// A re-list (after the watch expired) is being read: `seen` so far,
    /// `before` when it started (some may have left since).
    Relisting { seen: usize, before: usize },
}

impl PodCount {
    /// Whether the count is the whole count.
    pub fn exact(self) -> bool {
        matches!(self, PodCount::Exact(_))
    }
}

impl std::fmt::Display for PodCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PodCount::Exact(n) => write!(f, "{n} pod(s) to leave the node"),
            PodCount::AtLeast(n) => {
                write!(f, "at least {n} pod(s) to leave the node, listing not finished")
            }
            PodCount::Relisting { seen, before } => write!(
                f,
                "at least {seen} pod(s) to leave the node, re-listing not finished ({before} before the re-list)"
            ),
        }
    }
}

/// What the drain needs to know of a pod, beyond its name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// A static pod's mirror.
    pub mirror: bool,
    /// Its controller reference names a DaemonSet.
    pub daemonset: bool,
    /// Succeeded or Failed.
    pub terminal: bool,
    /// Has a deletionTimestamp: on its way out, only waited for.
    pub deleting: bool,
    /// No controller reference: nothing re-creates it elsewhere.
    pub bare: bool,
    /// Has an emptyDir volume, whose data goes with the pod.
    pub local_storage: bool,
}

/// Why a pod bound to the node is not evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    Mirror,
    DaemonSet,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Mirror => "mirror pod",
            Skip::DaemonSet => "DaemonSet pod",
        }
    }
}

impl PodFacts {
    /// Why the drain leaves this pod alone, if it does (kubectl drain's
    /// daemonSetFilter and mirrorPodFilter).
    pub fn skip(&self) -> Option<Skip> {
        if self.daemonset && !self.terminal {
            return Some(Skip::DaemonSet);
        }
        if self.mirror {
            return Some(Skip::Mirror);
        }
        None
    }
}

/// A Pod as the drain lists and watches it: name, namespace, uid and
/// resourceVersion, and its [`PodFacts`]. Implements [`kube::Resource`] as
/// `v1 Pod`, so `Api<DrainPod>` lists and watches `/api/v1/pods`.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "RawPod")]
pub struct DrainPod {
    meta: ObjectMeta,
    pub facts: PodFacts,
}

impl DrainPod {
    pub fn namespace(&self) -> &str {
        self.meta.namespace.as_deref().unwrap_or_default()
    }
    pub fn name(&self) -> &str {
        self.meta.name.as_deref().unwrap_or_default()
    }
    pub fn uid(&self) -> &str {
        self.meta.uid.as_deref().unwrap_or_default()
    }
}

impl kube::Resource for DrainPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// The decoded subset of a Pod; everything else is skipped by the parser.
#[derive(Deserialize)]
struct RawPod {
    #[serde(default)]
    metadata: RawMeta,
    #[serde(default)]
    spec: Option<RawSpec>,
    #[serde(default)]
    status: Option<RawStatus>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<IgnoredAny>,
    annotations: Option<BTreeMap<String, IgnoredAny>>,
    owner_references: Option<Vec<RawOwner>>,
}

#[derive(Deserialize)]
struct RawOwner {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    controller: Option<bool>,
}

#[derive(Deserialize)]
struct RawSpec {
    #[serde(default)]
    volumes: Option<Vec<RawVolume>>,
}

#[derive(Deserialize)]
struct RawVolume {
    #[serde(default, rename = "emptyDir")]
    empty_dir: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct RawStatus {
    #[serde(default)]
    phase: Option<String>,
}

impl From<RawPod> for DrainPod {
    fn from(raw: RawPod) -> DrainPod {
        let m = raw.metadata;
        // metav1.GetControllerOf: the first reference with controller: true.
        let controller = m
            .owner_references
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|r| r.controller == Some(true));
        let phase = raw.status.and_then(|s| s.phase);
        let facts = PodFacts {
            mirror: m
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)),
            daemonset: controller.is_some_and(|r| r.kind == "DaemonSet"),
            terminal: matches!(phase.as_deref(), Some("Succeeded" | "Failed")),
            deleting: m.deletion_timestamp.is_some(),
            bare: controller.is_none(),
            local_storage: raw
                .spec
                .and_then(|s| s.volumes)
                .unwrap_or_default()
                .iter()
                .any(|v| v.empty_dir.is_some()),
        };
        DrainPod {
            meta: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                ..ObjectMeta::default()
            },
            facts,
        }
    }
}

/// A pod's key in [`NodePods`]: its uid, in 16 bytes when it is a UUID in
/// the canonical form the API server makes (lowercase, hyphenated), as text
/// otherwise.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PodKey {
    Uuid([u8; 16]),
    Uid(Arc<str>),
    /// A pod without a uid (no real server sends one): `namespace/name`.
    Name(Arc<str>),
}

/// Positions of the hyphens in a canonical UUID.
const UUID_HYPHENS: [usize; 4] = [8, 13, 18, 23];

impl PodKey {
    pub fn of(pod: &DrainPod) -> PodKey {
        match pod.uid() {
            "" => PodKey::Name(Arc::from(format!("{}/{}", pod.namespace(), pod.name()))),
            uid => parse_uuid(uid).map_or_else(|| PodKey::Uid(Arc::from(uid)), PodKey::Uuid),
        }
    }

    /// The uid as the server spelled it (for a precondition), if the pod
    /// has one.
    pub fn uid(&self) -> Option<String> {
        match self {
            PodKey::Uuid(bytes) => {
                let mut out = String::with_capacity(36);
                for (i, b) in bytes.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        out.push('-');
                    }
                    out.push_str(&format!("{b:02x}"));
                }
                Some(out)
            }
            PodKey::Uid(uid) => Some(uid.to_string()),
            PodKey::Name(_) => None,
        }
    }
}

/// A canonical UUID (36 characters, lowercase hex, hyphens at 8, 13, 18
/// and 23) as its 16 bytes; anything else is `None`, so that
/// [`PodKey::uid`] gives back exactly the text the server sent.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let raw = text.as_bytes();
    if raw.len() != 36 || UUID_HYPHENS.iter().any(|&i| raw[i] != b'-') {
        return None;
    }
    let mut digits = raw
        .iter()
        .enumerate()
        .filter(|(i, _)| !UUID_HYPHENS.contains(i));
    let mut out = [0u8; 16];
    for byte in &mut out {
        let mut value = 0u8;
        for _ in 0..2 {
            let (_, c) = digits.next()?;
            let nibble = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                _ => return None,
            };
            value = value << 4 | nibble;
        }
        *byte = value;
    }
    Some(out)
}

/// A pod's eviction refused `attempts` times, the last time for `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusals {
    pub attempts: u8,
    pub reason: BlockReason,
}

/// Where the drain stands with one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// To be asked (queued).
    Due,
    /// Refused; asked again after a backoff.
    Refused(Refusals),
    /// Its eviction request is in flight (after these refusals, if any).
    Asking(Option<Refusals>),
    /// The eviction was accepted, or the server said the pod was gone:
    /// waiting for the watch to see it leave.
    Asked,
}

impl Ask {
    /// The refusals so far of a pod refused or being asked again.
    pub fn refusals(self) -> Option<Refusals> {
        match self {
            Ask::Refused(r) | Ask::Asking(Some(r)) => Some(r),
            _ => None,
        }
    }

    /// Asked, or being asked: not to be asked again.
    pub fn sent(self) -> bool {
        matches!(self, Ask::Asking(_) | Ask::Asked)
    }
}

/// One pod that must leave the node.
#[derive(Debug)]
pub struct Tracked {
    pub namespace: Arc<str>,
    pub name: Box<str>,
    pub facts: PodFacts,
    pub ask: Ask,
    /// The list generation that last saw it (see [`NodePods::begin_list`]).
    seen: u32,
}

impl Tracked {
    /// Asked to leave (or being asked), and not yet seen leaving: an
    /// eviction in flight counts, since the server may have done it.
    fn unobserved(&self) -> bool {
        self.ask.sent() && !self.facts.deleting
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The pods bound to the node that must leave it, by [`PodKey`]. Pods the drain
/// leaves alone are not kept at all.
#[derive(Debug, Default)]
pub struct NodePods {
    pods: HashMap<PodKey, Tracked>,
    /// Namespace names, shared by their pods.
    namespaces: HashSet<Arc<str>>,
    generation: u32,
    /// A list is being read: pods it has not shown yet may be gone.
    listing: bool,
    /// A complete list has been read.
    listed: bool,
    /// Pods the list under way has shown so far (that must leave).
    seen_now: usize,
    /// Pods known when the list under way started (after a complete one).
    before_list: usize,
    /// Pods asked to leave (or being asked) whose leaving (a
    /// deletionTimestamp, or gone) the list and watch have not shown yet.
    unobserved: usize,
}

impl NodePods {
    /// A (re)list starts: every pod it does not show again is gone.
    pub fn begin_list(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.listing = true;
        self.seen_now = 0;
        self.before_list = self.pods.len();
    }

    /// The list is complete: pods it did not show are forgotten.
    pub fn end_list(&mut self) {
        let generation = self.generation;
        let mut left = 0;
        self.pods.retain(|_, t| {
            let keep = t.seen == generation;
            if !keep && t.unobserved() {
                left += 1;
            }
            keep
        });
        self.unobserved -= left;
        self.listing = false;
        self.listed = true;
    }

    /// A pod as listed or watched. Returns its key when it is new and must
    /// be asked to leave.
    pub fn apply(&mut self, pod: &DrainPod) -> Option<PodKey> {
        let key = PodKey::of(pod);
        if pod.facts.skip().is_some() {
            // A pod can turn into one the drain leaves alone (its
            // controller reference changed).
            self.forget(&key);
            return None;
        }
        if let Some(t) = self.pods.get_mut(&key) {
            let was = t.unobserved();
            t.facts = pod.facts;
            if t.seen != self.generation {
                self.seen_now += 1;
            }
            t.seen = self.generation;
            if was && !t.unobserved() {
                self.unobserved -= 1;
            }
            return None;
        }
        let namespace = self.intern(pod.namespace());
        let tracked = Tracked {
            namespace,
            name: pod.name().into(),
            facts: pod.facts,
            ask: Ask::Due,
            seen: self.generation,
        };
        let due = !pod.facts.deleting;
        self.seen_now += 1;
        self.pods.insert(key.clone(), tracked);
        due.then_some(key)
    }

    /// A pod was deleted.
    pub fn remove(&mut self, pod: &DrainPod) {
        self.forget(&PodKey::of(pod));
    }

    fn forget(&mut self, key: &PodKey) {
        if let Some(t) = self.pods.remove(key) {
            if t.unobserved() {
                self.unobserved -= 1;
            }
            if t.seen == self.generation {
                self.seen_now = self.seen_now.saturating_sub(1);
            }
        }
    }

    /// Records where the drain stands with a pod (if it is still there).
    pub fn set_ask(&mut self, key: &PodKey, ask: Ask) {
        if let Some(t) = self.pods.get_mut(key) {
            let was = t.unobserved();
            t.ask = ask;
            match (was, t.unobserved()) {
                (false, true) => self.unobserved += 1,
                (true, false) => self.unobserved -= 1,
                _ => {}
            }
        }
    }

    /// Pods asked to leave (or being asked) whose leaving the watch has
    /// not shown yet.
    pub fn unobserved(&self) -> usize {
        self.unobserved
    }

    fn intern(&mut self, namespace: &str) -> Arc<str> {
        if let Some(ns) = self.namespaces.get(namespace) {
            return ns.clone();
        }
        let ns: Arc<str> = Arc::from(namespace);
        self.namespaces.insert(ns.clone());
        ns
    }

    pub fn get(&self, key: &PodKey) -> Option<&Tracked> {
        self.pods.get(key)
    }

    /// Pods still to leave the node, as far as known (see [`NodePods::count`]).
    pub fn remaining(&self) -> usize {
        self.pods.len()
    }

    /// How many pods must still leave the node, and how sure that number
    /// is: exact once a list was read to its end (and the watch followed
    /// it), a lower bound while a list is being read.
    pub fn count(&self) -> PodCount {
        match (self.listed, self.listing) {
            (true, false) => PodCount::Exact(self.pods.len()),
            (false, _) => PodCount::AtLeast(self.seen_now),
            (true, true) => PodCount::Relisting {
                seen: self.seen_now,
                before: self.before_list,
            },
        }
    }

    /// Whether the set is complete: a list was read to its end and no
    /// re-list is under way.
    pub fn current(&self) -> bool {
        self.listed && !self.listing
    }

    /// Whether a complete, current list shows no pod that must leave.
    pub fn drained(&self) -> bool {
        self.current() && self.pods.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Tracked> {
        self.pods.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> DrainPod {
        serde_json::from_value(v).unwrap()
    }

    fn named(name: &str, uid: &str, extra: serde_json::Value) -> DrainPod {
        let mut v = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "7"},
            "spec": {"nodeName": "node-a", "containers": [{"name": "main", "image": "x"}]},
            "status": {"phase": "Running"},
        });
        if let (Some(base), Some(more)) = (v.as_object_mut(), extra.as_object()) {
            for (k, val) in more {
                match (base.get_mut(k), val) {
                    (Some(serde_json::Value::Object(b)), serde_json::Value::Object(m)) => {
                        for (mk, mv) in m {
                            b.insert(mk.clone(), mv.clone());
                        }
                    }
                    _ => {
                        base.insert(k.clone(), val.clone());
                    }
                }
            }
        }
        pod(v)
    }

    fn owner(kind: &str, controller: Option<bool>) -> serde_json::Value {
        let mut o = json!({"apiVersion": "apps/v1", "kind": kind, "name": "x", "uid": "u"});
        if let Some(c) = controller {
            o["controller"] = json!(c);
        }
        o
    }

    #[test]
    fn decodes_only_the_facts_the_drain_needs() {
        let p = named(
            "web-1",
            "u-1",
            json!({
                "metadata": {
                    "annotations": {"a": "b", "big": "x".repeat(10_000)},
                    "ownerReferences": [owner("ReplicaSet", Some(true))],
                    "managedFields": [{"manager": "kubectl"}],
                    "deletionTimestamp": "2026-01-01T00:00:00Z",
                },
                "spec": {"volumes": [{"name": "cache", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}]},
            }),
        );
        assert_eq!(p.name(), "web-1");
        assert_eq!(p.namespace(), "default");
        assert_eq!(p.uid(), "u-1");
        assert_eq!(p.meta.resource_version.as_deref(), Some("7"));
        assert!(p.meta.annotations.is_none() && p.meta.managed_fields.is_none());
        assert_eq!(
            p.facts,
            PodFacts {
                deleting: true,
                local_storage: true,
                ..PodFacts::default()
            }
        );
        // Nulls and missing sections decode as absent.
        let bare = pod(
            json!({"metadata": {"name": "b", "annotations": null, "ownerReferences": null,
            "deletionTimestamp": null}, "spec": null, "status": null}),
        );
        assert_eq!(
            bare.facts,
            PodFacts {
                bare: true,
                ..PodFacts::default()
            }
        );
    }

    #[test]
    fn daemonset_pods_are_known_by_the_controller_reference_only() {
        let ds = named(
            "agent",
            "u",
            json!({"metadata": {"ownerReferences": [owner("DaemonSet", Some(true))]}}),
        );
        assert_eq!(ds.facts.skip(), Some(Skip::DaemonSet));
        // Not the controller: evicted, as kubectl drain does.
        for refs in [
            json!([owner("DaemonSet", None)]),
            json!([owner("DaemonSet", Some(false))]),
            json!([
                owner("DaemonSet", Some(false)),
                owner("ReplicaSet", Some(true))
            ]),
        ] {
            let p = named("x", "u", json!({"metadata": {"ownerReferences": refs}}));
            assert_eq!(p.facts.skip(), None, "{refs}");
        }
        // The first controller reference counts.
        let p = named(
            "x",
            "u",
            json!({"metadata": {"ownerReferences": [owner("ReplicaSet", Some(true)), owner("DaemonSet", Some(true))]}}),
        );
        assert_eq!(p.facts.skip(), None);
        assert!(!p.facts.bare);
        // A finished DaemonSet pod is evicted (kubectl deletes it too).
        let done = named(
            "agent",
            "u",
            json!({"metadata": {"ownerReferences": [owner("DaemonSet", Some(true))]},
                   "status": {"phase": "Failed"}}),
        );
        assert!(done.facts.terminal);
        assert_eq!(done.facts.skip(), None);
    }

    #[test]
    fn mirror_pods_are_skipped() {
        let p = named(
            "etcd",
            "u",
            json!({"metadata": {"annotations": {MIRROR_ANNOTATION: "abc"}}}),
        );
        assert_eq!(p.facts.skip(), Some(Skip::Mirror));
        let mut finished = p.clone();
        finished.facts.terminal = true;
        assert_eq!(finished.facts.skip(), Some(Skip::Mirror));
    }

    fn key(uid: &str) -> PodKey {
        PodKey::Uid(Arc::from(uid))
    }

    #[test]
    fn canonical_uuids_are_kept_in_16_bytes_and_given_back_as_sent() {
        let uid = "6a1b2c3d-0e4f-4a5b-8c9d-0123456789ab";
        let p = named("a", uid, json!({}));
        let k = PodKey::of(&p);
        assert!(matches!(k, PodKey::Uuid(_)), "{k:?}");
        assert_eq!(k.uid().as_deref(), Some(uid));
        // Anything that would not round-trip stays text.
        for other in [
            "6A1B2C3D-0E4F-4A5B-8C9D-0123456789AB",
            "6a1b2c3d0e4f4a5b8c9d0123456789ab",
            "6a1b2c3d-0e4f-4a5b-8c9d-0123456789ag",
            "u-1",
            "6a1b2c3d-0e4f-4a5b-8c9d-0123456789é",
        ] {
            let k = PodKey::of(&named("a", other, json!({})));
            assert!(matches!(k, PodKey::Uid(_)), "{other}: {k:?}");
            assert_eq!(k.uid().as_deref(), Some(other));
        }
        let nameless = pod(json!({"metadata": {"name": "a", "namespace": "ns"}}));
        assert_eq!(PodKey::of(&nameless), PodKey::Name(Arc::from("ns/a")));
        assert_eq!(PodKey::of(&nameless).uid(), None);
    }

    #[test]
    fn a_relist_forgets_pods_it_no_longer_shows_and_keeps_what_was_asked() {
        let mut pods = NodePods::default();
        assert!(!pods.drained(), "nothing is known before a list");
        pods.begin_list();
        let a = named("a", "u-a", json!({}));
        let b = named("b", "u-b", json!({}));
        let going = named(
            "c",
            "u-c",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        );
        let ds = named(
            "d",
            "u-d",
            json!({"metadata": {"ownerReferences": [owner("DaemonSet", Some(true))]}}),
        );
        assert_eq!(pods.apply(&a), Some(key("u-a")));
        assert_eq!(pods.apply(&b), Some(key("u-b")));
        assert_eq!(
            pods.apply(&going),
            None,
            "a deleting pod is only waited for"
        );
        assert_eq!(pods.apply(&ds), None);
        assert_eq!(pods.remaining(), 3, "the DaemonSet pod is not kept");
        assert!(!pods.drained(), "listing");
        pods.end_list();
        pods.set_ask(&key("u-a"), Ask::Asked);
        assert_eq!(pods.unobserved(), 1);
        // A watch event for a known pod changes its facts, not its state.
        assert_eq!(pods.apply(&a), None);
        assert_eq!(pods.get(&key("u-a")).map(|t| t.ask), Some(Ask::Asked));
        // The relist after a 410 no longer shows b and c.
        pods.begin_list();
        assert_eq!(pods.apply(&a), None);
        assert_eq!(pods.remaining(), 3, "kept until the list is complete");
        pods.end_list();
        assert_eq!(pods.remaining(), 1);
        assert_eq!(pods.get(&key("u-a")).map(|t| t.ask), Some(Ask::Asked));
        assert_eq!(pods.unobserved(), 1, "a has not been seen leaving");
        pods.remove(&a);
        assert_eq!(pods.unobserved(), 0);
        assert!(pods.drained());
        // Namespaces are shared, not copied per pod.
        pods.apply(&named("e", "u-e", json!({})));
        pods.apply(&named("f", "u-f", json!({})));
        let e = pods.get(&key("u-e")).map(|t| t.namespace.clone());
        let f = pods.get(&key("u-f")).map(|t| t.namespace.clone());
        assert!(matches!((e, f), (Some(e), Some(f)) if Arc::ptr_eq(&e, &f)));
        assert_eq!(
            pods.get(&key("u-e")).map(Tracked::key).as_deref(),
            Some("default/e")
        );
    }

    #[test]
    fn asked_pods_count_until_the_watch_shows_them_leaving() {
        let mut pods = NodePods::default();
        pods.begin_list();
        let a = named("a", "u-a", json!({}));
        let b = named("b", "u-b", json!({}));
        let c = named("c", "u-c", json!({}));
        for p in [&a, &b, &c] {
            pods.apply(p);
        }
        pods.end_list();
        for k in ["u-a", "u-b", "u-c"] {
            pods.set_ask(&key(k), Ask::Asked);
        }
        pods.set_ask(&key("u-c"), Ask::Asked);
        assert_eq!(pods.unobserved(), 3);
        // a: terminating (MODIFIED with a deletionTimestamp), then DELETED.
        let mut going = a.clone();
        going.facts.deleting = true;
        pods.apply(&going);
        assert_eq!(pods.unobserved(), 2);
        pods.remove(&going);
        assert_eq!(pods.unobserved(), 2);
        // b: DELETED at once.
        pods.remove(&b);
        assert_eq!(pods.unobserved(), 1);
        // c: missed by the watch; the re-list no longer shows it.
        pods.begin_list();
        pods.end_list();
        assert_eq!(pods.unobserved(), 0);
        assert!(pods.drained());
        // A refusal after an eviction cannot happen, but keeps the count right.
        pods.begin_list();
        pods.apply(&a);
        pods.end_list();
        pods.set_ask(&key("u-a"), Ask::Asked);
        pods.set_ask(&key("u-a"), Ask::Due);
        assert_eq!(pods.unobserved(), 0);
        // An eviction in flight counts from when it is sent: refused, it
        // no longer does; answered, it does until the watch shows the pod
        // leaving, which may come before the answer.
        pods.set_ask(&key("u-a"), Ask::Asking(None));
        assert_eq!(pods.unobserved(), 1);
        let refused = Refusals {
            attempts: 1,
            reason: BlockReason::DisruptionBudget,
        };
        pods.set_ask(&key("u-a"), Ask::Refused(refused));
        assert_eq!(pods.unobserved(), 0);
        pods.set_ask(&key("u-a"), Ask::Asking(Some(refused)));
        assert_eq!(pods.unobserved(), 1);
        assert_eq!(
            pods.get(&key("u-a")).and_then(|t| t.ask.refusals()),
            Some(refused)
        );
        let mut going = a.clone();
        going.facts.deleting = true;
        pods.apply(&going);
        assert_eq!(pods.unobserved(), 0, "seen leaving before the answer");
        pods.set_ask(&key("u-a"), Ask::Asked);
        assert_eq!(pods.unobserved(), 0);
    }

    #[test]
    fn the_count_is_exact_only_after_a_complete_list() {
        let mut pods = NodePods::default();
        assert_eq!(pods.count(), PodCount::AtLeast(0), "nothing listed yet");
        pods.begin_list();
        for i in 0..3 {
            pods.apply(&named(&format!("p{i}"), &format!("u-{i}"), json!({})));
        }
        assert_eq!(pods.count(), PodCount::AtLeast(3));
        assert_eq!(
            pods.count().to_string(),
            "at least 3 pod(s) to leave the node, listing not finished"
        );
        pods.end_list();
        assert_eq!(pods.count(), PodCount::Exact(3));
        assert!(pods.count().exact());
        assert_eq!(pods.count().to_string(), "3 pod(s) to leave the node");
        // A watch event keeps it exact.
        pods.remove(&named("p0", "u-0", json!({})));
        assert_eq!(pods.count(), PodCount::Exact(2));
        // A re-list counts what it has shown, and says what the count was before.
        pods.begin_list();
        pods.apply(&named("p1", "u-1", json!({})));
        pods.apply(&named("p9", "u-9", json!({})));
        // Seen twice in one list (a page boundary moved): counted once.
        pods.apply(&named("p9", "u-9", json!({})));
        assert_eq!(pods.count(), PodCount::Relisting { seen: 2, before: 2 });
        assert_eq!(
            pods.count().to_string(),
            "at least 2 pod(s) to leave the node, re-listing not finished (2 before the re-list)"
        );
        // A pod the list showed and that turned into one the drain leaves alone.
        let adopted = named(
            "p9",
            "u-9",
            json!({"metadata": {"ownerReferences": [owner("DaemonSet", Some(true))]}}),
        );
        pods.apply(&adopted);
        assert_eq!(pods.count(), PodCount::Relisting { seen: 1, before: 2 });
        pods.end_list();
        assert_eq!(pods.count(), PodCount::Exact(1), "p2 was not listed again");
    }

    #[test]
    fn a_pod_that_becomes_a_daemonset_pod_is_no_longer_waited_for() {
        let mut pods = NodePods::default();
        pods.begin_list();
        pods.apply(&named("a", "u-a", json!({})));
        pods.end_list();
        let adopted = named(
            "a",
            "u-a",
            json!({"metadata": {"ownerReferences": [owner("DaemonSet", Some(true))]}}),
        );
        assert_eq!(pods.apply(&adopted), None);
        assert!(pods.drained());
    }
}
