//! The `KubeletConfigRollout` custom resource (kubelet-pivot.io/v1alpha1): its spec as the
//! operator writes it and its status as the controller keeps it. The CRD in
//! `manifests/40-rollout-crd.yaml` is generated from these types (`kubelet-pivot rollout crd`).
//!
//! - `spec`: the spec, as the operator writes it;
//! - `selector`: which nodes a rollout targets ([`NodeSelector`]);
//! - `features`: what the controller holding the Lease follows ([`ControllerFeatures`]);
//! - `count`: a count or a percentage of nodes ([`IntOrPercent`]);
//! - `status`: the status, as the controller keeps it;
//! - `crd`: the CustomResourceDefinition generated from them;
//! - `decode`: reading a stored object, with the field that cannot be read.

mod count;
mod crd;
mod decode;
mod features;
mod selector;
mod spec;
mod status;

pub use count::{IntOrPercent, PercentError};
pub use crd::{crd, CrdError};
pub use decode::{decode, DecodeError};
pub use features::{
    ControllerFeatures, CONTROLLER_FEATURES, CONTROLLER_FEATURES_ANNOTATION,
    FEATURE_SELECTOR_EXPRESSIONS,
};
pub use selector::{NodeSelector, SelectorOperator, SelectorRequirement};
pub use spec::{
    ConfigMapKey, HealthGates, KubeletConfigRollout, MaintenanceWindow, MaxUnavailable, RolloutSpec,
};
pub use status::{
    FailureReason, NoFallbackSource, NodeCounts, NodeFailure, Phase, RevisionRecord,
    RolloutCondition, RolloutStatus,
};

/// The API group of the resource.
pub const GROUP: &str = "kubelet-pivot.io";
/// The label that spreads batches and bounds unavailability by default.
pub const DEFAULT_TOPOLOGY_KEY: &str = "topology.kubernetes.io/zone";
/// The largest count the spec takes (`canary`, `batch`, `maxUnavailable.value`,
/// `maxFailures`): more nodes than any cluster has. The CRD refuses larger ones.
pub const MAX_COUNT: u32 = 100_000;
/// A percentage of the spec (`batch`, `maxUnavailable.value`): 1% to 100%, digits only.
pub const PERCENT_PATTERN: &str = "^(100|[1-9][0-9]?)%$";
/// The largest generation the CRD accepts in `status.observedGeneration`: the largest
/// integer a float64 holds exactly (the API server compares bounds as float64).
pub const MAX_GENERATION: i64 = (1 << 53) - 1;
