//! Everything that talks to the Kubernetes API server from the node: the client, kept
//! current as credentials appear and rotate ([`api`]); follow the own Node's
//! assignment, download and checkpoint ConfigMaps, report status ([`sync`]), drain the
//! node for a disruptive change ([`drain`]), the lock file condition
//! ([`lock_condition`]). The Node ↔ config translations are `kp_contract::node_config`,
//! retries and Events `kp_runtime`'s.
//!
//! May call: `config` (store, bounds checks), `metrics`, `pivot::role`, `safefs`. Runs
//! only while its supervisor holds the lock; never touches the lock or the kubelet.

pub mod api;
pub mod drain;
pub mod lock_condition;
pub mod sync;
