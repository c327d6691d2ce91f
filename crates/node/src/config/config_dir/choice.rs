//! Which drop-in set runs: the directory's current set if it loads, merges into a valid
//! config and did not crash-loop before; else the set that ran last (a refused change
//! loses nothing); else the last-known-good set; else none.

use serde::Serialize;

use super::{DropInError, DropInSet};
use crate::config::store::{DropInRecord, DropInSnapshot};
use kp_kubelet_config::{ConfigError, DropInLayer, KubeletConfig, ValidationTarget};

/// Which drop-in set runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropInOrigin {
    /// What the directory holds now.
    Current,
    /// The set the last kubelet ran with (the directory's is refused).
    Previous,
    /// The set that survived its trial (the others are refused or bad).
    LastKnownGood,
}

impl std::fmt::Display for DropInOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DropInOrigin::Current => "current",
            DropInOrigin::Previous => "previous",
            DropInOrigin::LastKnownGood => "last-known-good",
        })
    }
}

/// The drop-in set merged into a config.
#[derive(Debug, Clone)]
pub struct AppliedDropIns {
    pub origin: DropInOrigin,
    pub set: DropInSet,
}

impl AppliedDropIns {
    pub fn id(&self) -> &str {
        &self.set.snapshot.id
    }

    /// `drop-ins 0123456789ab (10-a.conf, 20-b.conf)`, for messages.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self
            .set
            .snapshot
            .files
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        let origin = match self.origin {
            DropInOrigin::Current => String::new(),
            other => format!(", {other} set"),
        };
        format!(
            "--config-dir drop-ins {} ({}{origin})",
            self.set.snapshot.short_id(),
            names.join(", ")
        )
    }
}

/// Why the directory's current set does not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropInProblem {
    /// A drop-in or the directory cannot be read or parsed.
    Load(String),
    /// The drop-ins merged into the config do not validate.
    Validate(String),
    /// The set crash-looped in its trial before.
    KnownBad(String),
}

impl std::fmt::Display for DropInProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DropInProblem::Load(detail) => write!(f, "failed to load: {detail}"),
            DropInProblem::Validate(detail) => {
                write!(f, "merged into the config, they fail validation: {detail}")
            }
            DropInProblem::KnownBad(reason) => write!(f, "known bad: {reason}"),
        }
    }
}

/// A validation error of a merged config, with the drop-ins that set the
/// offending fields (or every drop-in, when none of them does).
fn blame(err: &ConfigError, snapshot: &DropInSnapshot) -> String {
    let offending: Vec<&str> = match err {
        ConfigError::Invalid(errors) => errors
            .iter()
            .map(|e| {
                let end = e.path.find(['.', '[']).unwrap_or(e.path.len());
                &e.path[..end]
            })
            .collect(),
        _ => Vec::new(),
    };
    let setters: Vec<&str> = snapshot
        .files
        .iter()
        .filter(|f| {
            f.fields
                .iter()
                .any(|field| offending.contains(&field.as_str()))
        })
        .map(|f| f.name.as_str())
        .collect();
    let names: Vec<&str> = if setters.is_empty() {
        snapshot.files.iter().map(|f| f.name.as_str()).collect()
    } else {
        setters
    };
    format!("{} (set by {})", err.reasons(), names.join(", "))
}

/// A config with the chosen drop-ins merged in.
#[derive(Debug, Clone)]
pub struct Merged {
    pub config: KubeletConfig,
    pub applied: Option<AppliedDropIns>,
    pub problem: Option<DropInProblem>,
}

/// Merges into `base` the first usable set of: the directory's `current`
/// set, the set that ran last, the last-known-good set; none if no set is
/// usable. A set is usable when it did not crash-loop in its trial and
/// merges into a config that validates.
pub fn merge(
    base: &KubeletConfig,
    current: Result<DropInSet, DropInError>,
    record: &DropInRecord,
    target: &ValidationTarget,
) -> Merged {
    let try_set = |set: &DropInSet| -> Result<KubeletConfig, DropInProblem> {
        if let Some(bad) = record.bad.get(&set.snapshot.id) {
            return Err(DropInProblem::KnownBad(bad.reason.clone()));
        }
        let layer = DropInLayer::from_map(set.snapshot.layer.clone())
            .map_err(|e| DropInProblem::Load(e.to_string()))?;
        let merged = base
            .with_drop_ins(&layer)
            .map_err(|e| DropInProblem::Validate(e.reasons()))?;
        merged
            .validate_for(target)
            .map_err(|e| DropInProblem::Validate(blame(&e, &set.snapshot)))?;
        Ok(merged)
    };
    let (problem, tried) = match current {
        Ok(set) => match try_set(&set) {
            Ok(config) => {
                return Merged {
                    config,
                    applied: Some(AppliedDropIns {
                        origin: DropInOrigin::Current,
                        set,
                    }),
                    problem: None,
                }
            }
            Err(problem) => (problem, Some(set.snapshot.id)),
        },
        Err(err) => (DropInProblem::Load(err.to_string()), None),
    };
    let fallbacks = [
        (DropInOrigin::Previous, &record.applied),
        (DropInOrigin::LastKnownGood, &record.last_known_good),
    ];
    for (origin, snapshot) in fallbacks {
        let Some(snapshot) = snapshot else { continue };
        if tried.as_deref() == Some(snapshot.id.as_str()) {
            continue;
        }
        let set = DropInSet::from_snapshot(snapshot.clone());
        if let Ok(config) = try_set(&set) {
            return Merged {
                config,
                applied: Some(AppliedDropIns { origin, set }),
                problem: Some(problem),
            };
        }
    }
    Merged {
        config: base.clone(),
        applied: None,
        problem: Some(problem),
    }
}
