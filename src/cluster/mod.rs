//! Everything that talks to the Kubernetes API server: follow the own
//! Node's assignment, download and checkpoint ConfigMaps, report status
//! ([`sync`]), and the pure Node ↔ config translations ([`nodeconfig`]).
//!
//! May call: `config` (store, bounds checks), `safefs`. Runs only while its
//! supervisor holds the lock; never touches the lock or the kubelet.

pub mod nodeconfig;
pub mod sync;
