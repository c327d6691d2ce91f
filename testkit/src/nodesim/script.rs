//! How the simulated nodes behave ([`SimOptions`], [`Script`]) and what an assignment says.

use std::time::Duration;

use serde_json::Value;

use super::{DEFAULT_KEY, SOURCE_ANNOTATION};

/// How the simulated nodes behave in time.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// From seeing an assignment to reporting on it (a kubelet restart's worth).
    pub react_after: Duration,
    /// How long a new config runs before it becomes the last-known-good one (zero: at once).
    pub trial: Duration,
    /// How long a config that crash-loops stays active before the fallback, unless the
    /// script says otherwise.
    pub rollback_after: Duration,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            react_after: Duration::from_millis(20),
            trial: Duration::ZERO,
            rollback_after: Duration::from_millis(50),
        }
    }
}

/// How a node handles an assignment. `on` names the config (`NAMESPACE/NAME[:KEY]`) the
/// script applies to; `None` means every remote config. Other assignments are handled as
/// [`Script::Healthy`] does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Script {
    /// Applies every config and reports it.
    Healthy,
    /// The config starts (reported active, on trial), crash-loops, and after `after`
    /// ([`SimOptions::rollback_after`] if `None`) the node falls back to its last-known-good
    /// config and reports the assigned one as known bad.
    RollsBack {
        on: Option<String>,
        after: Option<Duration>,
    },
    /// The config is applied and reported, but the node's `Ready` condition turns `False`
    /// until it is assigned another config.
    NeverReady { on: Option<String> },
    /// The node is deleted (as a node-replacing controller would) when assigned the config.
    DeletedOnAssignment { on: Option<String> },
    /// A disruptive change: the node is cordoned (`spec.unschedulable`) and reports
    /// `KubeletConfigOK` `False` / `Draining` for `drain`, then applies the config,
    /// uncordons and reports it.
    Drains { on: Option<String>, drain: Duration },
    /// The node never reports on the config (a stuck node).
    Ignores { on: Option<String> },
}

impl Script {
    fn on(&self) -> Option<&Option<String>> {
        match self {
            Script::Healthy => None,
            Script::RollsBack { on, .. }
            | Script::NeverReady { on }
            | Script::DeletedOnAssignment { on }
            | Script::Drains { on, .. }
            | Script::Ignores { on } => Some(on),
        }
    }

    /// The script that applies to `assignment`.
    pub(super) fn for_assignment(&self, assignment: &Assignment) -> Script {
        let Assignment::Remote(assigned) = assignment else {
            return Script::Healthy;
        };
        match self.on() {
            Some(None) => self.clone(),
            Some(Some(on)) if parse_source(on).ok().as_ref() == Some(assigned) => self.clone(),
            _ => Script::Healthy,
        }
    }
}

/// A ConfigMap key a node is assigned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ConfigRef {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) key: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Assignment {
    Local,
    Remote(ConfigRef),
    Invalid(String),
}

fn parse_source(value: &str) -> Result<ConfigRef, String> {
    let value = value.trim();
    let invalid =
        || format!("invalid {SOURCE_ANNOTATION} {value:?}: expected NAMESPACE/NAME[:KEY]");
    let (namespace, rest) = value.split_once('/').ok_or_else(invalid)?;
    let (name, key) = rest.split_once(':').unwrap_or((rest, DEFAULT_KEY));
    if namespace.is_empty() || name.is_empty() || key.is_empty() || name.contains('/') {
        return Err(invalid());
    }
    Ok(ConfigRef {
        namespace: namespace.to_string(),
        name: name.to_string(),
        key: key.to_string(),
    })
}

pub(super) fn assignment_of(value: &str) -> Assignment {
    if value.trim().is_empty() {
        return Assignment::Local;
    }
    match parse_source(value) {
        Ok(source) => Assignment::Remote(source),
        Err(why) => Assignment::Invalid(why),
    }
}

pub(super) fn source_annotation(node: &Value) -> String {
    node["metadata"]["annotations"][SOURCE_ANNOTATION]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_parse_like_the_node() {
        assert_eq!(assignment_of(""), Assignment::Local);
        assert_eq!(assignment_of("  "), Assignment::Local);
        assert_eq!(
            assignment_of("kubelet-config/cfg-b"),
            Assignment::Remote(ConfigRef {
                namespace: "kubelet-config".into(),
                name: "cfg-b".into(),
                key: "kubelet".into()
            })
        );
        assert!(matches!(assignment_of("nonsense"), Assignment::Invalid(_)));
        let script = Script::RollsBack {
            on: Some("kubelet-config/cfg-b".into()),
            after: None,
        };
        assert_eq!(
            script.for_assignment(&assignment_of("kubelet-config/cfg-b:kubelet")),
            script
        );
        assert_eq!(
            script.for_assignment(&assignment_of("kubelet-config/cfg-a")),
            Script::Healthy
        );
    }
}
