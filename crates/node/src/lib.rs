//! kp-node: the kubelet-pivot node agent, which decides which kubelet runs on a node.
//!
//! The top-level modules form layers; each may use the ones below it, never one above
//! (`tests/it/architecture.rs` keeps the modules of every crate free of cycles):
//!
//! 1. [`safefs`] (checked reads, atomic writes, trusted directories), [`procfs`]
//!    (`/proc` parsing), [`version`], [`signals`], [`latency`] (short scheduler slices);
//! 2. [`config`] (checkpoint store, which config runs, `--config-dir`, operator
//!    commands) and [`kubelet`] (the child process: spawn, signals, reap, backoff);
//! 3. [`pivot`] (the lock protocol and its pure state machine; it drives a kubelet
//!    child and reads no config);
//! 4. [`metrics`] (what every part records, and what a scrape reads);
//! 5. [`cluster`] (the API server: client, sync, drain, Node conditions);
//! 6. [`observe`] (`status`, sd_notify: reads everything, changes nothing);
//! 7. [`supervisor`]: the driver.
//!
//! The KubeletConfiguration model is `kp_kubelet_config`, the wire contract
//! `kp_contract`, the API plumbing shared with the rollout controller `kp_runtime`.

pub mod cluster;
pub mod config;
pub mod kubelet;
pub mod latency;
pub mod metrics;
pub mod observe;
pub mod pivot;
pub mod procfs;
pub mod safefs;
pub mod signals;
pub mod supervisor;
pub mod version;
