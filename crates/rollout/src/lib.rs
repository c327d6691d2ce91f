//! The fleet layer: a `KubeletConfigRollout` resource rolls a kubelet config across the
//! nodes a selector picks, by setting each node's assignment annotation in stages (a
//! canary, then batches), gated on what the nodes report and paused by itself on failures.
//!
//! - [`types`]: the custom resource (the CRD is generated from it);
//! - [`nodeview`]: what is read off a Node, and the record written on it;
//! - [`nodewrites`]: cached Nodes already written against, left alone until the cache
//!   catches up;
//! - [`plan`]: the decisions, as one pure function;
//! - [`window`]: maintenance windows and durations;
//! - [`controller`]: the kube-runtime controller around the plan, and what it remembers
//!   between reconciles (each cache a type of its own);
//! - [`events`]: the Events a rollout's progress posts on it;
//! - [`invalid`]: a rollout the controller cannot read, reported on itself and skipped;
//! - [`recorder`]: posting those Events, one create each;
//! - [`metrics`], [`health`], [`serve`]: `/metrics`, `/healthz`, `/readyz`;
//! - [`lease`]: leader election through a coordination.k8s.io Lease;
//! - [`cli`]: `kubectl pivot rollout ...`.

pub mod cli;
pub mod configwatch;
pub mod controller;
pub mod events;
pub mod health;
pub mod invalid;
pub mod lease;
pub mod metrics;
pub mod nodeview;
pub mod nodewrites;
pub mod plan;
pub mod recorder;
pub mod serve;
pub mod window;

/// The rollout annotation where `resume` records the failures the operator has seen:
/// `REVISION/COUNT`.
pub const ACK_ANNOTATION: &str = "kubelet-pivot.io/acknowledged-failures";

/// Parses the [`ACK_ANNOTATION`] value.
pub fn parse_ack(text: &str) -> Option<(u32, u32)> {
    let (rev, n) = text.trim().split_once('/')?;
    Some((rev.parse().ok()?, n.parse().ok()?))
}

/// Defaults shared by the controller and the CLI.
pub mod controller_defaults {
    /// The controller's namespace (its Lease and the global stop switch).
    pub const NAMESPACE: &str = "kubelet-pivot";
    /// The ConfigMap whose existence halts every rollout.
    pub const STOP_CONFIGMAP: &str = "rollout-stop";
    /// The leader Lease's name.
    pub const LEASE_NAME: &str = "kubelet-pivot-rollout-controller";
}
