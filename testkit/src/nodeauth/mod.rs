//! Node credentials: a kubelet's identity (`system:node:NAME`, groups `system:nodes` and
//! `system:authenticated`), the Node authorizer, RBAC (module `rbac`: the Roles and bindings of
//! the repository's top-level `manifests/*.yaml`, or what a test set), and the NodeRestriction
//! admission plugin, as they apply to the resources this server serves.
//!
//! Authorization is the union of (plugin/pkg/auth/authorizer/node/node_authorizer.go, with
//! the AuthorizeNodeWithSelectors gate of v1.32 on unless
//! [`ApiServer::authorize_node_with_selectors`] turns it off):
//!
//! - the Node authorizer: its own Node (any verb but delete; others' only through RBAC);
//!   Leases: get/create/update/patch/delete (NodeRestriction: only its own, in
//!   `kube-node-lease`);
//!   pods: `get` of pods bound to the node, `list`/`watch` only with the field selector
//!   `spec.nodeName=NODE` (or of one pod bound to it, by `metadata.name`), `create`/`delete`
//!   (NodeRestriction narrows them), `pods/status` update/patch, `pods/eviction` create;
//!   configmaps: `get`/`list`/`watch` of one ConfigMap a pod bound to the node (or the Node's
//!   `spec.configSource`) references; core/v1 events: create/update/patch;
//! - RBAC ([`crate::rbac::Policy`]) for the user `system:node:NAME` and its groups. With the
//!   shipped manifests that is the Role `kubelet-config-reader` (get/list/watch of ConfigMaps
//!   in `kubelet-config`, bound to `system:nodes` in `manifests/10-rbac.yaml`) and nothing
//!   else; [`ApiServer::apply_rbac_manifest`] adds e.g. the opt-in
//!   `manifests/optional/node-rbac-without-node-authorizer.yaml`.
//!
//! Everything else (other Nodes, pods not bound to the node, PodDisruptionBudgets, Namespaces,
//! DaemonSets, ReplicaSets, any resource this server does not serve) is 403 with the real
//! message, plus the Node authorizer's reason where it gives one. NodeRestriction then limits
//! writes: a node may modify only its own Node (not its taints, not its configSource, not
//! `node-restriction.kubernetes.io/` or other non-kubelet `kubernetes.io`/`k8s.io` labels),
//! delete and evict only pods bound to it, update the status only of pods bound to it, and
//! create only mirror pods of itself.
//!
//! Layout: `identity` (authentication), `authorizer` (the Node authorizer and RBAC),
//! `admission` (NodeRestriction) and `api` ([`ApiServer`]'s helpers).
//!
//! [`ApiServer`]: crate::ApiServer
//! [`ApiServer::apply_rbac_manifest`]: crate::ApiServer::apply_rbac_manifest
//! [`ApiServer::authorize_node_with_selectors`]: crate::ApiServer::authorize_node_with_selectors

mod admission;
mod api;
mod authorizer;
mod identity;

pub(crate) use admission::{admit_create, admit_delete, admit_eviction, admit_update};
pub(crate) use authorizer::{authorize, Attrs};
pub(crate) use identity::{authenticate, node_user};

/// The annotation that makes a pod a mirror pod (of a static pod).
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The namespace of node Leases (NodeRestriction keeps a node's Lease writes there).
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
