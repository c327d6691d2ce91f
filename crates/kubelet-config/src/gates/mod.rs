//! The kubelet's feature gates per minor version: which gates a kubelet
//! binary knows, their defaults, and which are locked (GA or deprecated with
//! `LockToDefault`), from upstream's versioned specs
//! (`pkg/features/kube_features.go` and the component-base gates; the data
//! and its source are in `kubelet_gates.txt`).
//!
//! - [`KubeletVersion`]: a `kubelet --version` answer (`Kubernetes v1.35.2`);
//! - [`GateModel`]: the gates one minor knows; [`GateModel::for_version`]
//!   picks the nearest modelled minor and says so when it is not exact;
//! - [`GateModel::in_force`]: the config's `featureGates` applied as the
//!   kubelet's `SetFromMap` applies them (unknown and locked gates refused),
//!   giving the [`GatesInForce`] the gate-dependent rules follow;
//! - [`ValidationTarget`]: a model plus the [`HostFacts`] of the node the
//!   config is for.

use std::collections::BTreeMap;
use std::fmt;

mod table;
mod target;

pub use target::{CgroupVersion, HostFacts, ValidationTarget};

/// The kubelet minors modelled (1.x), oldest first.
pub const SUPPORTED_MINORS: [u32; 4] = [33, 34, 35, 36];

/// `AllAlpha` / `AllBeta`: upstream's special keys that set every alpha
/// (beta) gate not set by name.
const ALL_ALPHA: &str = "AllAlpha";
const ALL_BETA: &str = "AllBeta";

/// A gate's maturity at a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
    Ga,
    Deprecated,
}

/// A gate at one version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateSpec {
    pub stage: Stage,
    pub default: bool,
    /// `LockToDefault`: setting another value is refused.
    pub locked: bool,
}

/// A kubelet's version, as `kubelet --version` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeletVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KubeletVersion {
    /// Reads `Kubernetes v1.35.2`, `v1.35.2`, `1.35` or
    /// `v1.36.0-rc.1+abc`: the first word that is a version.
    pub fn parse(text: &str) -> Option<KubeletVersion> {
        text.split_whitespace().find_map(Self::parse_word)
    }

    fn parse_word(word: &str) -> Option<KubeletVersion> {
        let word = word.strip_prefix('v').unwrap_or(word);
        let core = word.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let number = |p: Option<&str>| -> Option<u32> {
            let p = p?;
            if p.is_empty() || p.len() > 9 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            p.parse().ok()
        };
        let major = number(parts.next())?;
        let minor = number(parts.next())?;
        let patch = match parts.next() {
            None => 0,
            some => number(some)?,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(KubeletVersion {
            major,
            minor,
            patch,
        })
    }
}

impl fmt::Display for KubeletVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The gates a kubelet of one minor version knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateModel {
    minor: u32,
    gates: BTreeMap<&'static str, GateSpec>,
}

impl GateModel {
    /// The model of 1.`minor`, if modelled.
    pub fn for_minor(minor: u32) -> Option<GateModel> {
        SUPPORTED_MINORS
            .contains(&minor)
            .then(|| GateModel::build(minor))
    }

    /// The newest model.
    pub fn newest() -> GateModel {
        static NEWEST: std::sync::OnceLock<GateModel> = std::sync::OnceLock::new();
        NEWEST
            .get_or_init(|| GateModel::build(SUPPORTED_MINORS[SUPPORTED_MINORS.len() - 1]))
            .clone()
    }

    fn build(minor: u32) -> GateModel {
        let gates = table::rows()
            .iter()
            .filter_map(|row| row.at(minor).map(|spec| (row.name, spec)))
            .collect();
        GateModel { minor, gates }
    }

    /// The model for a kubelet of `version`: its own minor's when modelled,
    /// otherwise the nearest (the newest for a newer minor, the oldest for
    /// an older one), with a warning that says which.
    pub fn for_version(version: KubeletVersion) -> (GateModel, Option<String>) {
        let oldest = SUPPORTED_MINORS[0];
        let newest = SUPPORTED_MINORS[SUPPORTED_MINORS.len() - 1];
        if version.major == 1 {
            if let Some(model) = GateModel::for_minor(version.minor) {
                return (model, None);
            }
        }
        let (minor, how) = if version.major > 1 || version.minor > newest {
            (newest, "newer than")
        } else {
            (oldest, "older than")
        };
        let warning = format!(
            "kubelet {version} is {how} the feature-gate models of this build \
             (1.{oldest} to 1.{newest}); validating against 1.{minor}'s gates"
        );
        (GateModel::build(minor), Some(warning))
    }

    /// [`for_version`](GateModel::for_version) for an optional version (a
    /// flag): without one, the newest model and no warning.
    pub fn for_flag(version: Option<KubeletVersion>) -> (GateModel, Option<String>) {
        match version {
            Some(version) => GateModel::for_version(version),
            None => (GateModel::newest(), None),
        }
    }

    /// The minor (1.x) modelled.
    pub fn minor(&self) -> u32 {
        self.minor
    }

    /// The number of gates known.
    pub fn len(&self) -> usize {
        self.gates.len()
    }

    /// Whether no gate is known (never, for a shipped model).
    pub fn is_empty(&self) -> bool {
        self.gates.is_empty()
    }

    /// A gate's spec, if known.
    pub fn gate(&self, name: &str) -> Option<GateSpec> {
        self.gates.get(name).copied()
    }

    /// Applies `requested` (the config's `featureGates`) as the kubelet's
    /// `SetFromMap` does: an unknown gate is refused
    /// (`unrecognized feature gate: NAME`), as is another value than the
    /// default for a locked gate (`cannot set feature gate NAME to VALUE,
    /// feature is locked to DEFAULT`). `AllAlpha`/`AllBeta` set every alpha
    /// (beta) gate that is not set by name. The gates in force are returned
    /// together with every refusal (upstream stops at the first unknown one).
    pub fn in_force(&self, requested: &BTreeMap<String, bool>) -> (GatesInForce, Vec<GateRefusal>) {
        let mut errors = Vec::new();
        let mut set: BTreeMap<&'static str, bool> = BTreeMap::new();
        for (name, &value) in requested {
            if name == ALL_ALPHA || name == ALL_BETA {
                continue;
            }
            match self.gates.get_key_value(name.as_str()) {
                None => errors.push(GateRefusal {
                    gate: name.clone(),
                    value,
                    reason: format!("unrecognized feature gate: {name}"),
                }),
                Some((_, spec)) if spec.locked && spec.default != value => {
                    errors.push(GateRefusal {
                        gate: name.clone(),
                        value,
                        reason: format!(
                            "cannot set feature gate {name} to {value}, feature is locked to {}",
                            spec.default
                        ),
                    })
                }
                Some((key, _)) => {
                    set.insert(key, value);
                }
            }
        }
        let all = |key: &str| requested.get(key).copied();
        let (all_alpha, all_beta) = (all(ALL_ALPHA), all(ALL_BETA));
        let enabled = self
            .gates
            .iter()
            .map(|(&name, spec)| {
                let by_stage = match spec.stage {
                    Stage::Alpha => all_alpha,
                    Stage::Beta => all_beta,
                    Stage::Ga | Stage::Deprecated => None,
                };
                let value = set.get(name).copied().or(by_stage).unwrap_or(spec.default);
                (name, value)
            })
            .collect();
        (
            GatesInForce {
                minor: self.minor,
                enabled,
            },
            errors,
        )
    }
}

/// A `featureGates` entry the kubelet refuses, with its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateRefusal {
    pub gate: String,
    pub value: bool,
    /// The kubelet's message (`unrecognized feature gate: NAME`).
    pub reason: String,
}

/// Whether each gate of a model is on, once the config's `featureGates`
/// are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatesInForce {
    minor: u32,
    enabled: BTreeMap<&'static str, bool>,
}

impl GatesInForce {
    /// The kubelet minor (1.x) whose defaults these are.
    pub fn minor(&self) -> u32 {
        self.minor
    }

    /// Whether `gate` is on; a gate the model does not know is off.
    pub fn enabled(&self, gate: &str) -> bool {
        self.enabled.get(gate).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gates(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn versions_parse_as_kubelet_prints_them() {
        let v = |major, minor, patch| KubeletVersion {
            major,
            minor,
            patch,
        };
        assert_eq!(
            KubeletVersion::parse("Kubernetes v1.35.2\n"),
            Some(v(1, 35, 2))
        );
        assert_eq!(KubeletVersion::parse("v1.36.0-rc.1+abc"), Some(v(1, 36, 0)));
        assert_eq!(KubeletVersion::parse("1.34"), Some(v(1, 34, 0)));
        assert_eq!(
            KubeletVersion::parse("kubelet version 1.33.7"),
            Some(v(1, 33, 7))
        );
        for text in [
            "",
            "Kubernetes",
            "v1",
            "v1.x.2",
            "v1.35.2.9",
            "1..3",
            "v1.99999999999.0",
        ] {
            assert_eq!(KubeletVersion::parse(text), None, "{text:?}");
        }
        assert_eq!(v(1, 35, 2).to_string(), "v1.35.2");
    }

    #[test]
    fn every_supported_minor_has_a_model() {
        for minor in SUPPORTED_MINORS {
            let model = GateModel::for_minor(minor).unwrap();
            assert!(model.len() > 150, "1.{minor}: {} gates", model.len());
            assert_eq!(model.minor(), minor);
        }
        assert!(GateModel::for_minor(32).is_none());
        assert_eq!(GateModel::newest().minor(), 36);
    }

    #[test]
    fn the_nearest_model_is_used_with_a_warning() {
        let version = |minor| KubeletVersion {
            major: 1,
            minor,
            patch: 0,
        };
        let (model, warning) = GateModel::for_version(version(35));
        assert_eq!((model.minor(), warning), (35, None));
        let (model, warning) = GateModel::for_version(version(40));
        assert_eq!(model.minor(), 36);
        let warning = warning.unwrap();
        assert!(warning.contains("v1.40.0 is newer than"), "{warning}");
        assert!(
            warning.contains("validating against 1.36's gates"),
            "{warning}"
        );
        let (model, warning) = GateModel::for_version(version(30));
        assert_eq!(model.minor(), 33);
        assert!(warning.unwrap().contains("older than"));
        let (model, _) = GateModel::for_version(KubeletVersion {
            major: 2,
            minor: 0,
            patch: 0,
        });
        assert_eq!(model.minor(), 36);
        let (model, warning) = GateModel::for_flag(None);
        assert_eq!((model.minor(), warning), (36, None));
        assert_eq!(GateModel::for_flag(Some(version(34))).0.minor(), 34);
    }

    #[test]
    fn gates_follow_their_versioned_specs() {
        let at = |minor, gate| GateModel::for_minor(minor).unwrap().gate(gate);
        // KubeletCrashLoopBackOffMax: alpha from 1.32, beta (on) from 1.35.
        assert_eq!(
            at(34, "KubeletCrashLoopBackOffMax").map(|s| s.default),
            Some(false)
        );
        assert_eq!(
            at(35, "KubeletCrashLoopBackOffMax").map(|s| s.default),
            Some(true)
        );
        // NodeSwap: GA and locked from 1.34.
        assert!(!at(33, "NodeSwap").unwrap().locked);
        assert!(at(34, "NodeSwap").unwrap().locked);
        // Added in 1.35: unknown to 1.34.
        assert!(at(34, "EnvFiles").is_some() && at(33, "EnvFiles").is_none());
        // Removed: PodIndexLabel until 1.35.
        assert!(at(34, "PodIndexLabel").is_some() && at(35, "PodIndexLabel").is_none());
        // The component-base gates.
        for gate in [
            "LoggingAlphaOptions",
            "LoggingBetaOptions",
            "ContextualLogging",
        ] {
            assert!(at(36, gate).is_some(), "{gate}");
        }
        assert!(at(35, "ComponentSLIs").is_some_and(|s| s.locked));
        assert!(at(36, "ComponentSLIs").is_none());
    }

    #[test]
    fn unknown_and_locked_gates_are_refused_as_the_kubelet_words_it() {
        let model = GateModel::for_minor(35).unwrap();
        let (_, errors) = model.in_force(&gates(&[("NoSuchGate", true), ("MemoryManager", false)]));
        let errors: Vec<&str> = errors.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(
            errors,
            [
                "cannot set feature gate MemoryManager to false, feature is locked to true",
                "unrecognized feature gate: NoSuchGate",
            ]
        );
        // A locked gate set to its default is accepted (upstream warns).
        let (force, errors) = model.in_force(&gates(&[("MemoryManager", true)]));
        assert!(errors.is_empty());
        assert!(force.enabled("MemoryManager"));
    }

    #[test]
    fn gates_in_force_overlay_the_defaults() {
        let model = GateModel::for_minor(34).unwrap();
        let (force, _) = model.in_force(&gates(&[]));
        assert!(force.enabled("GracefulNodeShutdown"));
        assert!(!force.enabled("CustomCPUCFSQuotaPeriod"));
        assert!(!force.enabled("NoSuchGate"));
        let (force, _) = model.in_force(&gates(&[
            ("GracefulNodeShutdown", false),
            ("AllAlpha", true),
            ("MemoryQoS", false),
        ]));
        assert!(!force.enabled("GracefulNodeShutdown"));
        assert!(force.enabled("CustomCPUCFSQuotaPeriod"), "AllAlpha");
        assert!(
            !force.enabled("MemoryQoS"),
            "set by name wins over AllAlpha"
        );
        let (force, errors) = model.in_force(&gates(&[("AllBeta", false)]));
        assert!(errors.is_empty());
        assert!(!force.enabled("RotateKubeletServerCertificate"));
        assert!(force.enabled("MemoryManager"), "GA: not a beta gate");
    }
}
