//! Everything that talks to the Kubernetes API server: the client, kept
//! current as credentials appear and rotate ([`api`]); follow the own
//! Node's assignment, download and checkpoint ConfigMaps, report status
//! ([`sync`]), drain the node for a disruptive change ([`drain`]), post
//! Events ([`events`]), the lock file condition ([`lock_condition`]), and the pure Node ↔ config translations
//! ([`nodeconfig`]).
//!
//! May call: `config` (store, bounds checks), `safefs`. Runs only while its
//! supervisor holds the lock; never touches the lock or the kubelet.

pub mod api;
pub mod drain;
pub mod lock_condition;
pub mod sync;
