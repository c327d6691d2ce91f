//! A spec checked once and turned into numbers, before anything is planned.

use std::time::Duration;

use kp_contract::node_config::{parse_annotation, ConfigRef};
use kp_kubelet_config::DEFAULT_CONFIG_TRIAL_DURATION;

use super::super::window::{parse_duration, parse_windows, DurationError, Window, WindowsError};
use kp_contract::rollout::{IntOrPercent, PercentError, RolloutSpec, SelectorRequirement};

/// A spec that cannot be followed: the field, and what it should look like.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SpecError {
    /// The config's key does not make an assignment annotation (the parser says why).
    #[error("config: {0}")]
    Config(String),
    #[error("batch: {0}")]
    Batch(#[source] PercentError),
    #[error("batch: must be at least 1")]
    EmptyBatch,
    #[error("maxUnavailable.value: {0}")]
    MaxUnavailable(#[source] PercentError),
    #[error("maxUnavailable.value: must be at least 1")]
    NoneUnavailable,
    #[error("maxUnavailable.topologyKey: must name a node label")]
    TopologyKey,
    /// A `nodeSelectorExpressions` entry of the wrong shape or with a bad key or value.
    #[error("nodeSelectorExpressions[{index}]: {why}")]
    SelectorExpression { index: usize, why: String },
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error(transparent)]
    Windows(#[from] WindowsError),
}

/// The spec's durations, counts and windows, parsed.
#[derive(Clone, Debug)]
pub struct Settings {
    pub target: ConfigRef,
    pub soak: Duration,
    pub config_active_timeout: Duration,
    pub node_ready_timeout: Duration,
    /// The operator's `healthGates.noFallbackFor`, if set.
    pub explicit_no_fallback: Option<Duration>,
    /// The one in force for the current revision (see `nofallback::in_force`).
    pub no_fallback_for: Duration,
    pub pods_ready: bool,
    pub pods_ready_timeout: Duration,
    pub windows: Vec<Window>,
    pub topology_key: String,
    pub max_unavailable: IntOrPercent,
}

/// Each set-based requirement as the API server checks a LabelSelector's: its shape,
/// a qualified key, label values.
fn check_expressions(expressions: &[SelectorRequirement]) -> Result<(), SpecError> {
    use kp_kubelet_config::labels::{check_label_value, check_qualified_name};
    for (index, r) in expressions.iter().enumerate() {
        let why = r
            .shape_error()
            .or_else(|| {
                check_qualified_name(&r.key)
                    .err()
                    .map(|why| format!("key {:?}: {why}", r.key))
            })
            .or_else(|| {
                r.values.iter().find_map(|v| {
                    check_label_value(v)
                        .err()
                        .map(|why| format!("value {v:?}: {why}"))
                })
            });
        if let Some(why) = why {
            return Err(SpecError::SelectorExpression { index, why });
        }
    }
    Ok(())
}

impl Settings {
    /// Checks the spec; the error names the field and what it should look like.
    pub fn of(spec: &RolloutSpec) -> Result<Settings, SpecError> {
        let target = parse_annotation(&spec.config.annotation()).map_err(SpecError::Config)?;
        if spec.batch.resolve(100).map_err(SpecError::Batch)? == 0 {
            return Err(SpecError::EmptyBatch);
        }
        let unavailable = spec.max_unavailable.value.resolve(100);
        if unavailable.map_err(SpecError::MaxUnavailable)? == 0 {
            return Err(SpecError::NoneUnavailable);
        }
        if spec.max_unavailable.topology_key.trim().is_empty() {
            return Err(SpecError::TopologyKey);
        }
        check_expressions(&spec.node_selector_expressions)?;
        let gates = &spec.health_gates;
        let explicit_no_fallback = gates
            .no_fallback_for
            .as_deref()
            .map(|text| parse_duration("healthGates.noFallbackFor", text))
            .transpose()?;
        Ok(Settings {
            target,
            soak: parse_duration("soak", &spec.soak)?,
            config_active_timeout: parse_duration(
                "healthGates.configActiveTimeout",
                &gates.config_active_timeout,
            )?,
            node_ready_timeout: parse_duration(
                "healthGates.nodeReadyTimeout",
                &gates.node_ready_timeout,
            )?,
            explicit_no_fallback,
            no_fallback_for: explicit_no_fallback.unwrap_or(DEFAULT_CONFIG_TRIAL_DURATION),
            pods_ready: gates.pods_ready,
            pods_ready_timeout: parse_duration(
                "healthGates.podsReadyTimeout",
                &gates.pods_ready_timeout,
            )?,
            windows: parse_windows(&spec.maintenance_windows)?,
            topology_key: spec.max_unavailable.topology_key.clone(),
            max_unavailable: spec.max_unavailable.value.clone(),
        })
    }

    /// How many nodes of a domain with `domain_size` targets may be unavailable at once.
    pub fn unavailable_limit(&self, domain_size: usize) -> usize {
        self.max_unavailable.resolve_down(domain_size).unwrap_or(1)
    }
}
