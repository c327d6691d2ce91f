//! kubelet-pivot: decides which kubelet runs on a node.
//!
//! One folder per subsystem; the dependency direction is
//! `cluster` (and the operator) → `config` → [`supervisor`] → `kubelet`, with
//! [`pivot`] (the lock protocol) driven by the supervisor, [`observe`] reading
//! from all of them and [`safefs`] under everything. Nothing reaches around a
//! neighbour (see ARCHITECTURE.md).
//!
//! - [`pivot`]: lock file, holder record, claims, contention, fencing proofs,
//!   inotify hints, `/proc`, roles, the pure state machine;
//! - [`kubelet`]: the child process (spawn, signals, reap, backoff);
//! - [`config`]: checkpoint store, KubeletConfiguration, lifecycle, operator
//!   commands;
//! - [`cluster`]: the API server (sync, Node ↔ config);
//! - [`observe`]: status, metrics, logging, sd_notify, man pages;
//! - [`safefs`]: checked reads, atomic writes, trusted directories;
//! - [`supervisor`], [`signals`], [`cli`]: the driver, early signals, flags;
//! - [`version`]: the build's version, commit and protocol version.

pub mod cluster;
pub mod config;
pub mod kubelet;
pub mod metrics;
pub mod observe;
pub mod pivot;
pub mod procfs;
pub mod safefs;
pub mod signals;
pub mod supervisor;
pub mod version;
