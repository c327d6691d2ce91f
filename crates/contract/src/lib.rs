//! The wire contract between the kubelet-pivot node agent and the rollout controller:
//! what each writes and the other reads, with no I/O.
//!
//! - [`node_config`]: the Node annotations (assignment, status, roll-required), the
//!   `KubeletConfigOK` condition, the config source and where a running config came from;
//! - [`rollout`]: the `KubeletConfigRollout` custom resource (the CRD is generated from it);
//! - [`text`]: bounded text (cuts on character boundaries);
//! - [`time`]: RFC 3339 timestamps.
//!
//! May depend on: serde, k8s-openapi and kube's derive only. Nothing in the workspace.

pub mod node_config;
pub mod rollout;
pub mod text;
pub mod time;
