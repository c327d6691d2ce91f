//! [`ApiServer`]'s helpers for pods and PodDisruptionBudgets.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use crate::clock::now_rfc3339;
use crate::decode::with_type_meta;
use crate::ids::uuid_v4;
use crate::resource::{Resource, Target};
use crate::store::{EventType, Opts, Outcome};
use crate::unpoisoned;
use crate::ApiServer;

use super::pdb::set_disruption_allowed_condition;
use super::termination::{reap, served_pod};

/// The finalizer of [`ApiServer::create_stuck_terminating_pod`]'s pods: no controller
/// removes it.
pub const HOLD_FINALIZER: &str = "testkit.kubelet-pivot.io/hold";

/// The name of a pod's controller, from the pod's name (`web-7d4f9-x2x4q` -> `web-7d4f9`).
fn owner_name(pod: &str) -> String {
    pod.rsplit_once('-')
        .map_or(pod, |(prefix, _)| prefix)
        .to_string()
}

/// The status a kubelet reports for a running pod of [`ApiServer::create_pod`].
fn running_status(pod: &Value) -> Value {
    let now = now_rfc3339();
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "",
                "containerID": format!("containerd://{}", uuid_v4().replace('-', "")),
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    json!({
        "phase": "Running",
        "conditions": [
            condition("PodReadyToStartContainers"),
            condition("Initialized"),
            condition("Ready"),
            condition("ContainersReady"),
            condition("PodScheduled"),
        ],
        "hostIP": "10.0.0.1",
        "hostIPs": [{"ip": "10.0.0.1"}],
        "podIP": "10.244.0.10",
        "podIPs": [{"ip": "10.244.0.10"}],
        "startTime": now,
        "containerStatuses": statuses,
        "qosClass": pod["status"]["qosClass"],
    })
}

impl ApiServer {
    /// How long a graceful delete (or eviction) of a bound, non-terminal pod takes: zero (the
    /// default) removes the pod at once; otherwise the pod gets `metadata.deletionTimestamp`
    /// and `deletionGracePeriodSeconds` (a MODIFIED event) and is removed (DELETED) after
    /// `delay` or its grace period, whichever is shorter, as a kubelet would.
    pub fn set_pod_termination_delay(&self, delay: Duration) {
        self.lock().pod_termination_delay = delay;
        let mut reaper = unpoisoned::lock(&self.reaper);
        if reaper.is_none() && !delay.is_zero() {
            let shared = Arc::downgrade(&self.shared);
            *reaper = Some(thread::spawn(move || reap(shared)));
        }
    }

    /// Creates a pod with one container (`main`, `registry.k8s.io/pause:3.10`) bound to `node`
    /// and, if `node` is not empty, makes it Running and Ready as its kubelet would (a second
    /// write, through `pods/NAME/status`). `labels` and `annotations` are JSON objects (or
    /// null); `owner_kind` adds a controller ownerReference of that kind (apiVersion `apps/v1`
    /// for DaemonSet, ReplicaSet, StatefulSet and Deployment, `batch/v1` for Job, `v1` for
    /// Node, named after the pod's name without its last `-` part, or after the node).
    pub fn create_pod(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        labels: Value,
        owner_kind: Option<&str>,
        annotations: Value,
    ) -> Value {
        let body = self.pod_body(namespace, name, node, labels, owner_kind, annotations);
        self.create_bound(namespace, name, node, body, false)
    }

    /// `n` pods bound to `node` (`{prefix}-0` .. `{prefix}-{n-1}`, ReplicaSet-owned,
    /// labelled `app=web`, Running) that are Terminating and never finish: each holds the
    /// finalizer [`HOLD_FINALIZER`] (whose controller does not exist) and was deleted, as a
    /// pod whose finalizer's controller is gone stays.
    ///
    /// The first pod goes the strict way (create, `pods/NAME/status`, delete, each validated
    /// as a client's request would be); the others are copies of it with their own name,
    /// uid, container id and resourceVersion, committed as writes (an ADDED event each):
    /// tens of thousands of pods in seconds, not minutes, in a debug build.
    pub fn create_stuck_terminating_pods(
        &self,
        namespace: &str,
        prefix: &str,
        node: &str,
        n: usize,
    ) {
        if n == 0 {
            return;
        }
        let first = format!("{prefix}-0");
        let mut body = self.pod_body(
            namespace,
            &first,
            node,
            json!({"app": "web"}),
            Some("ReplicaSet"),
            Value::Null,
        );
        body["metadata"]["finalizers"] = json!([HOLD_FINALIZER]);
        self.create_bound(namespace, &first, node, body, true);
        {
            let mut state = self.lock();
            let key = (namespace.to_string(), first);
            let template = state
                .objects(Resource::Pods)
                .get(&key)
                .cloned()
                .unwrap_or_else(|| panic!("pod {namespace}/{} not stored", key.1));
            for i in 1..n {
                let mut pod = template.clone();
                pod["metadata"]["name"] = json!(format!("{prefix}-{i}"));
                pod["metadata"]["uid"] = json!(uuid_v4());
                if let Some(status) = pod["status"]["containerStatuses"][0].as_object_mut() {
                    status.insert(
                        "containerID".into(),
                        json!(format!("containerd://{}", uuid_v4().replace('-', ""))),
                    );
                }
                state.commit(Resource::Pods, EventType::Added, pod, None);
            }
        }
        self.shared.changed.notify_all();
    }

    /// The body [`ApiServer::create_pod`] posts.
    fn pod_body(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        labels: Value,
        owner_kind: Option<&str>,
        annotations: Value,
    ) -> Value {
        let mut metadata = json!({"name": name, "namespace": namespace});
        if !labels.is_null() {
            metadata["labels"] = labels;
        }
        if !annotations.is_null() {
            metadata["annotations"] = annotations;
        }
        let node_uid = (!node.is_empty())
            .then(|| self.try_node(node))
            .flatten()
            .and_then(|n| n["metadata"]["uid"].as_str().map(str::to_string));
        if let Some(kind) = owner_kind {
            let api_version = match kind {
                "DaemonSet" | "ReplicaSet" | "StatefulSet" | "Deployment" => "apps/v1",
                "Job" | "CronJob" => "batch/v1",
                _ => "v1",
            };
            let owner = if kind == "Node" {
                json!({
                    "apiVersion": api_version, "kind": kind, "name": node,
                    "uid": node_uid.clone().unwrap_or_else(uuid_v4), "controller": true,
                })
            } else {
                json!({
                    "apiVersion": api_version, "kind": kind, "name": owner_name(name),
                    "uid": uuid_v4(), "controller": true, "blockOwnerDeletion": true,
                })
            };
            metadata["ownerReferences"] = json!([owner]);
        }
        let mut spec =
            json!({"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]});
        if !node.is_empty() {
            spec["nodeName"] = json!(node);
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
    }

    /// Creates `body` and, bound to a node, makes it Running and Ready as its kubelet
    /// would; then deletes it if `delete` (as `DELETE pods/NAME` without options).
    fn create_bound(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        body: Value,
        delete: bool,
    ) -> Value {
        let target = Target::collection(Resource::Pods, Some(namespace));
        let object = Target::object(Resource::Pods, Some(namespace), name);
        let mut status_target = object.clone();
        status_target.subresource = Some("status".to_string());
        // Created and marked running under one lock: no client sees (and evicts, as a
        // drain does with a pending pod) the pod between the two writes.
        self.helper(|state| {
            let created = state.create(&target, body, &Opts::default())?;
            if node.is_empty() {
                return Ok(created);
            }
            let mut pod = created.body;
            pod["status"] = running_status(&pod);
            let running = state.update(&status_target, pod, &Opts::default())?;
            if !delete {
                return Ok(running);
            }
            state.delete(&object, None, &Opts::default())
        })
    }

    /// The stored pod, if any.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .get_served(&Target::object(Resource::Pods, Some(namespace), name))
    }

    /// Every pod bound to `node` (spec.nodeName), in namespace/name order.
    pub fn pods_on(&self, node: &str) -> Vec<Value> {
        self.lock()
            .objects(Resource::Pods)
            .values()
            .filter(|pod| pod["spec"]["nodeName"].as_str() == Some(node))
            .map(|pod| served_pod(pod.clone()))
            .collect()
    }

    /// How many pods are bound to `node` (without copying them: cheap enough to poll).
    pub fn pod_count_on(&self, node: &str) -> usize {
        self.lock()
            .objects(Resource::Pods)
            .values()
            .filter(|pod| pod["spec"]["nodeName"].as_str() == Some(node))
            .count()
    }

    /// Sets a pod's `status.phase` through `pods/NAME/status` (a terminal phase also makes
    /// the pod and its containers not ready).
    pub fn set_pod_phase(&self, namespace: &str, name: &str, phase: &str) -> Value {
        let mut target = Target::object(Resource::Pods, Some(namespace), name);
        target.subresource = Some("status".to_string());
        let terminal = matches!(phase, "Succeeded" | "Failed");
        self.helper(|state| {
            let mut pod = state.existing(&target)?;
            pod["status"]["phase"] = json!(phase);
            if terminal {
                for condition in pod["status"]["conditions"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
                        condition["status"] = json!("False");
                        condition["reason"] = json!("PodCompleted");
                    }
                }
                for status in pod["status"]["containerStatuses"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    status["ready"] = json!(false);
                }
            }
            state.update(&target, pod, &Opts::default())
        })
    }

    /// Deletes a pod as `DELETE pods/NAME` without options would (graceful, see
    /// [`ApiServer::set_pod_termination_delay`]); `Err` is the Status a client would get.
    pub fn delete_pod(&self, namespace: &str, name: &str) -> Result<Value, Value> {
        let target = Target::object(Resource::Pods, Some(namespace), name);
        self.helper_result(|state| state.delete(&target, None, &Opts::default()))
    }

    /// Creates a PodDisruptionBudget selecting pods by `match_labels` (a JSON object), with
    /// `spec.maxUnavailable` `disruptions_allowed` (at least 0), and writes its status as the
    /// disruption controller would: `disruptionsAllowed` as given (even negative), the ready
    /// matching pods as `currentHealthy`, `desiredHealthy` = currentHealthy - allowed (at
    /// least 0), `observedGeneration` current.
    pub fn create_pdb(
        &self,
        namespace: &str,
        name: &str,
        match_labels: Value,
        disruptions_allowed: i64,
    ) -> Value {
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": match_labels},
                "maxUnavailable": disruptions_allowed.max(0),
            },
        });
        let target = Target::collection(Resource::PodDisruptionBudgets, Some(namespace));
        self.helper(|state| state.create(&target, body, &Opts::default()));
        self.set_pdb_disruptions_allowed(namespace, name, disruptions_allowed)
    }

    /// Rewrites a PodDisruptionBudget's status for `disruptions_allowed` as
    /// [`ApiServer::create_pdb`] does (recounting the healthy pods; entries of
    /// `disruptedPods` for pods that are gone are dropped); panics if there is no such PDB.
    pub fn set_pdb_disruptions_allowed(
        &self,
        namespace: &str,
        name: &str,
        disruptions_allowed: i64,
    ) -> Value {
        let target = Target::object(Resource::PodDisruptionBudgets, Some(namespace), name);
        self.helper(|state| {
            let old = state.existing(&target)?;
            let mut pdb = old.clone();
            pdb["status"] = state.pdb_status_for(&old, disruptions_allowed);
            set_disruption_allowed_condition(&mut pdb);
            if pdb == old {
                return Ok(Outcome::ok(with_type_meta(
                    old,
                    target.resource,
                    target.group,
                )));
            }
            let stored = state.commit(target.resource, EventType::Modified, pdb, Some(old));
            Ok(Outcome::ok(with_type_meta(
                stored,
                target.resource,
                target.group,
            )))
        })
    }

    /// The stored PodDisruptionBudget, if any.
    pub fn pdb(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock().get_served(&Target::object(
            Resource::PodDisruptionBudgets,
            Some(namespace),
            name,
        ))
    }
}
