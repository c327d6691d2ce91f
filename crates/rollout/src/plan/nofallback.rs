//! How long a changed node must run the config without falling back before it counts as
//! done (`healthGates.noFallbackFor`): the spec's value when the operator set one, else the
//! config's own `configTrialDuration` (read from the ConfigMap's payload), else the
//! kubelet-pivot default trial. By default a node is done only once its supervisor could no
//! longer fall back. The value in force is recorded in the revision (`status.history`).

use std::time::Duration;

use kp_kubelet_config::{
    ConfigError, FieldValue, KubeletConfig, CONFIG_TRIAL_DURATION_FIELD,
    DEFAULT_CONFIG_TRIAL_DURATION,
};

use super::super::window::parse_duration;
use kp_contract::rollout::{NoFallbackSource, RevisionRecord};

/// The gate's length and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoFallback {
    pub duration: Duration,
    pub source: NoFallbackSource,
}

/// Why the config's trial duration cannot be read from its payload.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrialError {
    #[error("the config cannot be read, so neither can its {CONFIG_TRIAL_DURATION_FIELD}: {0}")]
    Unreadable(String),
    #[error("its {CONFIG_TRIAL_DURATION_FIELD} ({0}) is negative")]
    Negative(String),
}

impl From<ConfigError> for TrialError {
    fn from(err: ConfigError) -> TrialError {
        TrialError::Unreadable(err.to_string())
    }
}

/// A new revision cannot tell how long its nodes must not fall back: the config's trial
/// cannot be read and the spec sets no `noFallbackFor`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "healthGates.noFallbackFor defaults to the config's {CONFIG_TRIAL_DURATION_FIELD}, \
     but {0}; fix the config, or set healthGates.noFallbackFor"
)]
pub struct NoFallbackError(#[source] pub TrialError);

/// The trial a node gives the config in `payload` (a KubeletConfiguration, as the
/// supervisor reads it): its `configTrialDuration`, or the default when it has none.
pub fn trial_of(payload: &str) -> Result<NoFallback, TrialError> {
    KubeletConfig::check_bounds(payload.as_bytes())?;
    let config = KubeletConfig::parse(payload.as_bytes())?;
    match config.field(CONFIG_TRIAL_DURATION_FIELD) {
        Some(FieldValue::Duration(d)) => match d.to_std() {
            Some(duration) => Ok(NoFallback {
                duration,
                source: NoFallbackSource::ConfigTrialDuration,
            }),
            None => Err(TrialError::Negative(d.to_string())),
        },
        _ => Ok(NoFallback {
            duration: DEFAULT_CONFIG_TRIAL_DURATION,
            source: NoFallbackSource::Default,
        }),
    }
}

/// The value a new revision records: the spec's when set (the payload is then not needed),
/// else the payload's trial; an unreadable payload is an error naming the way out.
pub fn resolve(
    explicit: Option<Duration>,
    trial: &Result<NoFallback, TrialError>,
) -> Result<NoFallback, NoFallbackError> {
    if let Some(duration) = explicit {
        return Ok(NoFallback {
            duration,
            source: NoFallbackSource::Spec,
        });
    }
    trial.clone().map_err(NoFallbackError)
}

/// The value in force for the current revision: the spec's when set, else the one the
/// revision recorded (the default trial for a record without one, from an older build).
pub fn in_force(explicit: Option<Duration>, record: Option<&RevisionRecord>) -> Duration {
    explicit
        .or_else(|| {
            record
                .and_then(|r| r.no_fallback_for.as_deref())
                .and_then(|text| parse_duration("noFallbackFor", text).ok())
        })
        .unwrap_or(DEFAULT_CONFIG_TRIAL_DURATION)
}

/// Records `value` in the revision (an operator who sets the spec's value mid-revision sees
/// the new one there).
pub fn record(rec: &mut RevisionRecord, value: NoFallback) {
    rec.no_fallback_for = Some(humantime::format_duration(value.duration).to_string());
    rec.no_fallback_source = Some(value.source);
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn payload(extra: &str) -> String {
        format!("{HEAD}{extra}")
    }

    #[test]
    fn the_spec_value_wins_without_reading_the_payload() {
        let unreadable = Err(TrialError::Unreadable("garbage".into()));
        let got = resolve(Some(Duration::from_secs(5)), &unreadable).expect("explicit wins");
        assert_eq!(got.duration, Duration::from_secs(5));
        assert_eq!(got.source, NoFallbackSource::Spec);
        let trial = trial_of(&payload("configTrialDuration: 20m\n"));
        let got = resolve(Some(Duration::ZERO), &trial).expect("explicit wins");
        assert_eq!(got.duration, Duration::ZERO);
        assert_eq!(got.source, NoFallbackSource::Spec);
    }

    #[test]
    fn without_a_spec_value_the_payload_trial_applies() {
        let trial = trial_of(&payload("eventBurst: 5\nconfigTrialDuration: 90s\n"));
        let got = resolve(None, &trial).expect("resolves");
        assert_eq!(got.duration, Duration::from_secs(90));
        assert_eq!(got.source, NoFallbackSource::ConfigTrialDuration);
        // JSON payloads too, and a zero trial is a zero gate.
        let json = r#"{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "configTrialDuration": "0s"}"#;
        let got = resolve(None, &trial_of(json)).expect("resolves");
        assert_eq!(got.duration, Duration::ZERO);
        assert_eq!(got.source, NoFallbackSource::ConfigTrialDuration);
    }

    #[test]
    fn a_payload_without_a_trial_gets_the_default_trial() {
        let got = resolve(None, &trial_of(&payload("eventBurst: 5\n"))).expect("resolves");
        assert_eq!(got.duration, DEFAULT_CONFIG_TRIAL_DURATION);
        assert_eq!(got.duration, Duration::from_secs(600));
        assert_eq!(got.source, NoFallbackSource::Default);
    }

    #[test]
    fn a_malformed_trial_is_an_error_that_names_the_field_and_the_way_out() {
        for (extra, shown) in [
            ("configTrialDuration: banana\n", "configTrialDuration"),
            ("configTrialDuration: 10\n", "configTrialDuration"),
            ("configTrialDuration: -5m\n", "negative"),
        ] {
            let trial = trial_of(&payload(extra));
            assert!(trial.is_err(), "{extra}: {trial:?}");
            let err = resolve(None, &trial).expect_err(extra).to_string();
            assert!(err.contains(shown), "{extra}: {err}");
            assert!(err.contains("set healthGates.noFallbackFor"), "{err}");
        }
        // Not a KubeletConfiguration at all.
        let err = resolve(None, &trial_of("kind: Pod\n"))
            .expect_err("not a config")
            .to_string();
        assert!(err.contains("cannot be read"), "{err}");
        let err = resolve(None, &trial_of(": : :"))
            .expect_err("not YAML")
            .to_string();
        assert!(err.contains("noFallbackFor"), "{err}");
    }

    #[test]
    fn the_value_in_force_is_the_spec_then_the_record_then_the_default() {
        // A record as an older build wrote it: no noFallbackFor.
        let mut rec: RevisionRecord = serde_json::from_value(serde_json::json!({
            "revision": 1,
            "config": {"namespace": "ns", "name": "cfg"},
            "started": "2026-01-01T00:00:00Z",
        }))
        .expect("a record");
        assert_eq!(in_force(None, Some(&rec)), DEFAULT_CONFIG_TRIAL_DURATION);
        assert_eq!(in_force(None, None), DEFAULT_CONFIG_TRIAL_DURATION);
        record(
            &mut rec,
            NoFallback {
                duration: Duration::from_secs(150),
                source: NoFallbackSource::ConfigTrialDuration,
            },
        );
        assert_eq!(rec.no_fallback_for.as_deref(), Some("2m 30s"));
        assert_eq!(in_force(None, Some(&rec)), Duration::from_secs(150));
        assert_eq!(
            in_force(Some(Duration::from_secs(1)), Some(&rec)),
            Duration::from_secs(1)
        );
    }
}
