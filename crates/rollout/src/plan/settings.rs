//! A spec checked once and turned into numbers, before anything is planned.

use std::time::Duration;

use kp_contract::node_config::{parse_annotation, ConfigRef};
use kp_kubelet_config::DEFAULT_CONFIG_TRIAL_DURATION;

use super::super::window::{parse_duration, parse_windows, Window};
use kp_contract::rollout::{IntOrPercent, RolloutSpec};

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

impl Settings {
    /// Checks the spec; the error names the field and what it should look like.
    pub fn of(spec: &RolloutSpec) -> Result<Settings, String> {
        let target =
            parse_annotation(&spec.config.annotation()).map_err(|e| format!("config: {e}"))?;
        spec.batch
            .resolve(100)
            .map_err(|e| format!("batch: {e}"))
            .and_then(|n| {
                if n == 0 {
                    Err("batch: must be at least 1".to_string())
                } else {
                    Ok(())
                }
            })?;
        spec.max_unavailable
            .value
            .resolve(100)
            .map_err(|e| format!("maxUnavailable.value: {e}"))
            .and_then(|n| {
                if n == 0 {
                    Err("maxUnavailable.value: must be at least 1".to_string())
                } else {
                    Ok(())
                }
            })?;
        if spec.max_unavailable.topology_key.trim().is_empty() {
            return Err("maxUnavailable.topologyKey: must name a node label".to_string());
        }
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
