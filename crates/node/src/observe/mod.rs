//! What kubelet-pivot tells an operator on the node: the `status` command ([`status`]),
//! the checks of the operator commands before they start ([`preflight`]) and sd_notify
//! ([`notify`]). Metrics are [`crate::metrics`]'s.
//!
//! May read: `pivot` (holder record, claims, lock record), `config` (store views),
//! `cluster` (the API row), `procfs`, `safefs`. Only reads: nothing here changes the
//! node's state.

pub mod notify;
pub mod preflight;
pub mod status;
