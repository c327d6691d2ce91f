//! Pods, PodDisruptionBudgets and the `pods/eviction` subresource.
//!
//! Pods follow pkg/registry/core/pod: defaults of the versioned type and of the admission
//! plugins a real server runs (Priority, DefaultTolerationSeconds; not ServiceAccount: no
//! service account or token volume is added), a create resets the status to `Pending` with
//! the QoS class, `pods/NAME` cannot change the status and `pods/NAME/status` cannot change
//! the spec, the spec is immutable but for images, activeDeadlineSeconds, added tolerations
//! and terminationGracePeriodSeconds, and a delete returns the deleted object.
//!
//! There is no kubelet: a graceful delete of a bound pod removes it at once (DELETED), or,
//! with [`ApiServer::set_pod_termination_delay`], marks it (deletionTimestamp and
//! deletionGracePeriodSeconds, MODIFIED) and removes it when the delay (at most the grace
//! period) has passed, as a kubelet does when the containers have stopped.
//!
//! Evictions follow pkg/registry/core/pod/storage/eviction.go of v1.32 (including the
//! `DisruptionTarget` condition written before the delete), and PodDisruptionBudgets
//! pkg/registry/policy/poddisruptionbudget. There is no disruption controller: a PDB's status
//! is whatever was written to it (through `/status` or [`ApiServer::set_pdb_disruptions_allowed`]),
//!
//! Layout: `shapes` (the fields the decoder knows), `fields` (field selectors, merge keys),
//! `pod` and `pdb` (the two strategies), `termination` (deletes and the reaper thread),
//! `eviction` (the subresource) and `api` ([`ApiServer`]'s helpers).
//!
//! [`ApiServer`]: crate::ApiServer
//! [`ApiServer::set_pdb_disruptions_allowed`]: crate::ApiServer::set_pdb_disruptions_allowed
//! [`ApiServer::set_pod_termination_delay`]: crate::ApiServer::set_pod_termination_delay

mod api;
mod eviction;
mod fields;
mod pdb;
mod pod;
mod shapes;
mod termination;

pub use api::HOLD_FINALIZER;
pub(crate) use fields::{pod_field_value, pod_list_strategy, POD_FIELD_LABELS};
pub(crate) use pdb::{prepare_pdb, validate_pdb};
pub(crate) use pod::{prepare_pod, validate_pod};
pub(crate) use shapes::{check_types, PDB, POD};
pub(crate) use termination::Termination;
