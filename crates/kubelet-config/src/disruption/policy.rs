//! What a change of each class does on this node: restart the kubelet,
//! drain the node first, or hold the change. Defaults, overridden by the
//! supervisor's `--disruption-action` and the Node's
//! [`NODE_OVERRIDE_ANNOTATION`] (both parsed as [`Overrides`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{names, Class};
use kp_contract::node_config::excerpt;

/// The Node annotation overriding the per-class actions on one node, e.g.
/// `kubelet-pivot.io/disruption-actions: allocatable=restart`.
pub const NODE_OVERRIDE_ANNOTATION: &str = "kubelet-pivot.io/disruption-actions";

/// Longest override text accepted, in bytes: where it enters (the syncer
/// copying the Node's annotation, `--disruption-action`) and where it is
/// read back (`meta/node-overrides`). Four classes with the longest action
/// take about 100 bytes; whoever may patch the Node must not make the
/// store hold more.
pub const MAX_OVERRIDES_BYTES: usize = 1024;

/// What to do about a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Restart the kubelet with the new config.
    Restart,
    /// Cordon and drain the node, then restart the kubelet, then uncordon.
    Drain,
    /// Keep the running config; the change waits for a new node.
    Hold,
}

impl Action {
    pub const ALL: [Action; 3] = [Action::Restart, Action::Drain, Action::Hold];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Restart => "restart",
            Action::Drain => "drain",
            Action::Hold => "hold",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Action {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Action::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown disruption action {}; expected one of {}",
                    kp_contract::node_config::excerpt(s),
                    names(&Action::ALL, Action::as_str)
                )
            })
    }
}

/// An action per class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Policy {
    in_place: Action,
    allocatable: Action,
    state_bound: Action,
    node_replacing: Action,
}

impl Policy {
    /// in-place → restart, allocatable → drain, state-bound → drain,
    /// node-replacing → hold.
    pub fn defaults() -> Policy {
        Policy {
            in_place: Action::Restart,
            allocatable: Action::Drain,
            state_bound: Action::Drain,
            node_replacing: Action::Hold,
        }
    }

    fn slot(&mut self, class: Class) -> &mut Action {
        match class {
            Class::InPlace => &mut self.in_place,
            Class::Allocatable => &mut self.allocatable,
            Class::StateBound => &mut self.state_bound,
            Class::NodeReplacing => &mut self.node_replacing,
        }
    }

    /// The action for a change of `class`.
    pub fn action(&self, class: Class) -> Action {
        match class {
            Class::InPlace => self.in_place,
            Class::Allocatable => self.allocatable,
            Class::StateBound => self.state_bound,
            Class::NodeReplacing => self.node_replacing,
        }
    }

    /// This policy with `overrides` applied.
    pub fn with(&self, overrides: &Overrides) -> Policy {
        let mut policy = self.clone();
        for &(class, action) in overrides.pairs() {
            *policy.slot(class) = action;
        }
        policy
    }
}

impl Default for Policy {
    fn default() -> Policy {
        Policy::defaults()
    }
}

impl fmt::Display for Policy {
    /// `in-place=restart,allocatable=drain,state-bound=drain,node-replacing=hold`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = Class::ALL
            .into_iter()
            .map(|c| format!("{c}={}", self.action(c)))
            .collect();
        f.write_str(&pairs.join(","))
    }
}

/// Per-class actions that replace a policy's, e.g.
/// `"allocatable=restart,state-bound=restart"`. One per class, by class.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides(Vec<(Class, Action)>);

impl Overrides {
    /// The overrides, by class.
    pub fn pairs(&self) -> &[(Class, Action)] {
        &self.0
    }

    /// The override for `class`, if any.
    pub fn get(&self, class: Class) -> Option<Action> {
        self.0.iter().find(|(c, _)| *c == class).map(|(_, a)| *a)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromStr for Overrides {
    type Err = String;

    /// `CLASS=ACTION` items separated by commas and/or whitespace; the last
    /// of two items for one class wins; `""` is no override.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > MAX_OVERRIDES_BYTES {
            return Err(format!(
                "disruption actions {} are {} bytes long; at most {MAX_OVERRIDES_BYTES} are accepted",
                excerpt(s),
                s.len()
            ));
        }
        let mut pairs: Vec<(Class, Action)> = Vec::new();
        let items = s
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|item| !item.is_empty());
        for item in items {
            let (class, action) = item.split_once('=').ok_or_else(|| {
                format!(
                    "{} in disruption actions {} is not CLASS=ACTION",
                    excerpt(item),
                    excerpt(s)
                )
            })?;
            let class: Class = class.parse().map_err(|e| {
                format!(
                    "{e} (in {} of disruption actions {})",
                    excerpt(item),
                    excerpt(s)
                )
            })?;
            let action: Action = action.parse().map_err(|e| {
                format!(
                    "{e} (in {} of disruption actions {})",
                    excerpt(item),
                    excerpt(s)
                )
            })?;
            pairs.retain(|(c, _)| *c != class);
            pairs.push((class, action));
        }
        pairs.sort();
        Ok(Overrides(pairs))
    }
}

impl fmt::Display for Overrides {
    /// `allocatable=restart,state-bound=restart`; parses back to the same.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self.0.iter().map(|(c, a)| format!("{c}={a}")).collect();
        f.write_str(&items.join(","))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn parse(s: &str) -> Result<Overrides, String> {
        s.parse()
    }

    #[test]
    fn defaults_restart_drain_drain_hold() {
        let policy = Policy::defaults();
        assert_eq!(policy.action(Class::InPlace), Action::Restart);
        assert_eq!(policy.action(Class::Allocatable), Action::Drain);
        assert_eq!(policy.action(Class::StateBound), Action::Drain);
        assert_eq!(policy.action(Class::NodeReplacing), Action::Hold);
        assert_eq!(Policy::default(), policy);
        assert_eq!(policy.with(&Overrides::default()), policy);
        assert_eq!(
            policy.to_string(),
            "in-place=restart,allocatable=drain,state-bound=drain,node-replacing=hold"
        );
        assert_eq!(
            serde_json::to_value(&policy).expect("serializes"),
            serde_json::json!({"in-place": "restart", "allocatable": "drain", "state-bound": "drain", "node-replacing": "hold"})
        );
    }

    #[test]
    fn overrides_parse_and_apply() {
        let overrides = parse("allocatable=restart,state-bound=restart").expect("valid");
        let policy = Policy::defaults().with(&overrides);
        assert_eq!(policy.action(Class::Allocatable), Action::Restart);
        assert_eq!(policy.action(Class::StateBound), Action::Restart);
        assert_eq!(policy.action(Class::NodeReplacing), Action::Hold);
        assert_eq!(overrides.get(Class::InPlace), None);
        // Commas and/or whitespace.
        assert_eq!(
            parse(" state-bound=restart \n allocatable=restart, "),
            Ok(overrides.clone())
        );
        assert_eq!(
            parse("node-replacing=drain,,in-place=hold").map(|o| o.pairs().len()),
            Ok(2)
        );
        // Duplicates: the last wins.
        let dup = parse("allocatable=hold,allocatable=restart").expect("valid");
        assert_eq!(dup.pairs(), [(Class::Allocatable, Action::Restart)]);
        // Empty: no overrides.
        assert!(parse("").expect("valid").is_empty());
        assert!(parse(" , ").expect("valid").is_empty());
        assert_eq!(Overrides::default().to_string(), "");
    }

    #[test]
    fn overrides_errors_quote_bounded_escaped_excerpts() {
        let long = "allocatable=restart ".repeat(100);
        let err = parse(&long).expect_err("over the cap");
        assert!(err.contains("2000 bytes long; at most 1024"), "{err}");
        assert!(err.len() < 400, "{} bytes: {err}", err.len());
        let bad: String = "x\u{1b}[7m\n".repeat(100) + "=drain";
        let err = parse(&bad).expect_err("bad class");
        assert!(err.len() < 1000, "{} bytes: {err}", err.len());
        assert!(!err.chars().any(char::is_control), "{err:?}");
    }

    #[test]
    fn bad_overrides_name_the_part_and_the_valid_values() {
        let err = parse("allocatable=restart,pods=drain").expect_err("bad class");
        assert!(
            err.contains("\"pods\"") && err.contains("\"pods=drain\""),
            "{err}"
        );
        assert!(
            err.contains("in-place, allocatable, state-bound, node-replacing"),
            "{err}"
        );
        let err = parse("allocatable=reboot").expect_err("bad action");
        assert!(
            err.contains("\"reboot\"") && err.contains("restart, drain, hold"),
            "{err}"
        );
        let err = parse("allocatable").expect_err("no =");
        assert!(
            err.contains("\"allocatable\"") && err.contains("CLASS=ACTION"),
            "{err}"
        );
        assert!(parse("allocatable = restart").is_err());
        assert!(parse("Allocatable=restart").is_err());
    }

    proptest! {
        #[test]
        fn prop_overrides_round_trip(
            items in prop::collection::vec((0usize..4, 0usize..3), 0..8),
            separator in prop::sample::select(vec![",", " ", ", ", "\t", ",\n"]),
        ) {
            let text: Vec<String> = items
                .iter()
                .map(|&(c, a)| format!("{}={}", Class::ALL[c], Action::ALL[a]))
                .collect();
            let overrides = parse(&text.join(separator)).expect("valid");
            prop_assert_eq!(parse(&overrides.to_string()), Ok(overrides.clone()));
            for class in Class::ALL {
                let last = items.iter().rev().find(|&&(c, _)| Class::ALL[c] == class);
                prop_assert_eq!(overrides.get(class), last.map(|&(_, a)| Action::ALL[a]));
            }
        }
    }
}
