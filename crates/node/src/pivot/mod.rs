//! The lock protocol: who runs the node's kubelet.
//!
//! Owns the lock file ([`lock`]) and which one the node uses
//! ([`lock_identity`]), the holder record ([`holder`]), the claims
//! ([`claims`]) in the trusted state directory ([`state`]), the record of the
//! node's lock file and a refusal ([`lock_record`]), when a holder
//! may start a kubelet ([`takeover`], the evidence rule of I1), the decision
//! whether to yield ([`contention`], pure), the proof needed before a
//! recorded kubelet is killed ([`fence`]), the inotify hints ([`watch`]),
//! roles and ranks ([`role`]) and the pure
//! state machine ([`machine`]) the supervisor drives.
//!
//! May call: `kubelet` (the child's facts the machine steps on), `procfs`, `safefs`,
//! `version`. Knows nothing of the kubelet's config, the API server or the supervisor.

pub mod claims;
pub mod contention;
pub mod fence;
pub mod holder;
pub mod lock;
pub mod lock_identity;
pub mod lock_record;
pub mod machine;
mod machine_display;
pub mod role;
pub mod state;
pub mod takeover;
pub mod watch;
