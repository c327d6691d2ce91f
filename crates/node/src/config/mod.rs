//! The kubelet's configuration on this node.
//!
//! Owns the checkpoint store ([`store`]), the kubelet's `--config-dir`
//! drop-ins ([`config_dir`]), which config runs and its trial
//! ([`lifecycle`]), the next start prepared while waiting
//! ([`prepared`]) and the `checkpoint` operator commands ([`operator`]).
//!
//! May call: `safefs`. Fed by `cluster` (downloads) and the operator; read by
//! the supervisor, `observe`. The KubeletConfiguration itself is
//! `kp_kubelet_config`'s. Never calls the supervisor or the kubelet.

pub mod config_dir;
pub mod lifecycle;
pub mod operator;
pub mod prepared;
pub mod running;
pub mod store;
