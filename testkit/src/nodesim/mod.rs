//! An in-process simulator of nodes that follow kubelet-pivot's status contract (see
//! `src/cluster/nodeconfig.rs`), fast enough for thousands of nodes.
//!
//! The simulated nodes write straight into the server's state: their writes are not HTTP
//! requests (they do not appear in [`ApiServer::requests`]) but they are ordinary writes
//! (new resourceVersions, watch events, the server's validation). A node sees its
//! assignment through a commit hook on the state (no polling), and reacts after
//! [`SimOptions::react_after`] on a background thread with a timer queue:
//!
//! - assignment: the Node annotation `kubelet-pivot.io/config-source` =
//!   `NAMESPACE/NAME[:KEY]` (KEY `kubelet` by default); absent or empty is the local config;
//! - report: the Node annotation `kubelet-pivot.io/config-status` (JSON
//!   `{"active", "assigned", "lastKnownGood", "error"}`, sources as
//!   `{"configMap": {namespace, name, uid, resourceVersion, kubeletConfigKey}}` of the
//!   ConfigMap read) and the `KubeletConfigOK` condition (through `nodes/NAME/status`,
//!   merged by type): `True` / `passing all checks` / `using current (UID: U,
//!   ResourceVersion: RV)` (or `(init)` for the local config); `Unknown` / `failed to sync,
//!   desired config unclear, cause: configmaps "NAME" not found` while the ConfigMap is
//!   missing (the node reacts again when it appears or changes);
//! - [`Script`]s make a node misbehave for one assignment (`on`), or for every remote one
//!   (`on: None`): roll back after a crash loop, never become Ready, be deleted, drain
//!   first, or never report.
//!
//! A healthy node keeps its `Ready` condition `True` (`KubeletReady`).
//!
//! Layout: `script` (options, scripts, assignments), `sim` ([`NodeSim`] and the state it
//! shares with its thread) and `runner` (the thread).
//!
//! [`ApiServer::requests`]: crate::ApiServer::requests

mod runner;
mod script;
mod sim;

pub use script::{Script, SimOptions};
pub use sim::NodeSim;

use std::time::Duration;

/// The Node annotation that assigns a config.
pub const SOURCE_ANNOTATION: &str = "kubelet-pivot.io/config-source";
/// The Node annotation a node reports its config status in.
pub const STATUS_ANNOTATION: &str = "kubelet-pivot.io/config-status";
/// The Node condition a node reports its config in.
pub const CONDITION_TYPE: &str = "KubeletConfigOK";
/// The key of an assignment that names none.
const DEFAULT_KEY: &str = "kubelet";
/// The error of a config that crash-looped in its trial.
pub const KNOWN_BAD: &str = "assigned config is known bad: crash loop: 3 kubelet restarts within the 10m trial period (crashLoopThreshold 2)";
/// Zones of the default `topology.kubernetes.io/zone` labels, round robin.
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// Writes done under one hold of the state lock before HTTP requests get a turn.
const BATCH: usize = 200;
/// Longest the simulator sleeps before checking whether the server is gone.
const IDLE_POLL: Duration = Duration::from_millis(200);
