//! `rollout start --dry-run`: per node, the change class and the action its supervisor
//! would take (restart in place, drain, hold for a new node), computed as the node
//! computes them: `disruption::classify` of the config the Node reports active against
//! the new one, then the node's [`Policy`] (the defaults with the Node's
//! `kubelet-pivot.io/disruption-actions` annotation). Where the running config cannot be
//! known from the cluster (the local config, a ConfigMap edited or deleted since), the
//! node says so instead.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::Api;
use kube::Client;
use serde::Serialize;
use serde_json::Value;

use super::precheck;
use super::render::printable;
use kp_contract::node_config::{excerpt, STATUS_ANNOTATION};
use kp_contract::rollout::ConfigMapKey;
use kp_kubelet_config::disruption::NODE_OVERRIDE_ANNOTATION;
use kp_kubelet_config::disruption::{self, Action, Class, Overrides, Policy};
use kp_kubelet_config::KubeletConfig;

/// The config source a Node reports active (its config-status annotation, else
/// `Node.status.config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Active {
    Remote {
        namespace: String,
        name: String,
        key: String,
        uid: String,
        resource_version: String,
    },
    /// The node's local config (init file or built-in defaults).
    Local,
    /// Nothing reported.
    NotReported,
}

impl Active {
    /// What a Node reports.
    pub fn of(node: &Node) -> Active {
        let annotation = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STATUS_ANNOTATION))
            .and_then(|t| serde_json::from_str::<Value>(t).ok());
        let status = || {
            node.status
                .as_ref()
                .and_then(|s| s.config.as_ref())
                .and_then(|c| serde_json::to_value(c).ok())
        };
        match annotation.or_else(status) {
            Some(v) => Active::from_status(&v),
            None => Active::NotReported,
        }
    }

    /// From a `{active, assigned, lastKnownGood, error}` document.
    fn from_status(v: &Value) -> Active {
        let Some(cm) = v.get("active").and_then(|a| a.get("configMap")) else {
            return Active::Local;
        };
        let text = |k: &str| cm.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Active::Remote {
            namespace: text("namespace"),
            name: text("name"),
            key: text("kubeletConfigKey"),
            uid: text("uid"),
            resource_version: text("resourceVersion"),
        }
    }

    /// `NAMESPACE/NAME:KEY`, `local`, or `-`.
    fn describe(&self) -> String {
        match self {
            Active::Remote {
                namespace,
                name,
                key,
                ..
            } => format!("{namespace}/{name}:{key}"),
            Active::Local => "local".to_string(),
            Active::NotReported => "-".to_string(),
        }
    }
}

/// What the node runs now, as far as the cluster shows it.
#[derive(Debug)]
pub enum Current {
    Known(Box<KubeletConfig>),
    /// Why it cannot be known.
    Unknown(String),
}

/// What the rollout would do to one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Outcome {
    /// The node runs the same effective config already: nothing restarts.
    Unchanged,
    /// `class` None: the config differs in no field the table classifies.
    Change {
        class: Option<Class>,
        action: Action,
        fields: Vec<String>,
    },
    Unknown {
        why: String,
    },
}

/// One node's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePlan {
    pub node: String,
    /// The config it reports active.
    pub current: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The Node's disruption-actions annotation could not be used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// How many nodes each outcome has.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub restart: usize,
    pub drain: usize,
    pub held: usize,
    pub unchanged: usize,
    pub unknown: usize,
}

impl Totals {
    pub fn of(plans: &[NodePlan]) -> Totals {
        let mut t = Totals::default();
        for p in plans {
            match &p.outcome {
                Outcome::Unchanged => t.unchanged += 1,
                Outcome::Unknown { .. } => t.unknown += 1,
                Outcome::Change { action, .. } => match action {
                    Action::Restart => t.restart += 1,
                    Action::Drain => t.drain += 1,
                    Action::Hold => t.held += 1,
                },
            }
        }
        t
    }

    /// `12 restart, 3 drain, 1 held` (then unchanged and unknown nodes, if any).
    pub fn text(&self) -> String {
        let mut out = format!(
            "{} restart, {} drain, {} held",
            self.restart, self.drain, self.held
        );
        if self.unchanged > 0 {
            let _ = write!(out, ", {} unchanged", self.unchanged);
        }
        if self.unknown > 0 {
            let _ = write!(out, ", {} unknown", self.unknown);
        }
        out
    }
}

/// The node's actions: the defaults, then its annotation (a refused annotation is
/// ignored by the node too; the note says so).
pub fn node_policy(node: &Node) -> (Policy, Option<String>) {
    let text = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_OVERRIDE_ANNOTATION));
    match text.map(|t| t.parse::<Overrides>()) {
        None => (Policy::defaults(), None),
        Some(Ok(o)) => (Policy::defaults().with(&o), None),
        Some(Err(err)) => (
            Policy::defaults(),
            Some(format!(
                "{NODE_OVERRIDE_ANNOTATION} ignored, as the node ignores it: {err}"
            )),
        ),
    }
}

/// The outcome of moving from `current` to `target` under `policy`, as the node's
/// supervisor decides it (same effective hash: nothing restarts; no classified field: a
/// restart; else the policy's action for the most severe class).
pub fn outcome(current: &Current, target: &KubeletConfig, policy: &Policy) -> Outcome {
    let current = match current {
        Current::Known(c) => c,
        Current::Unknown(why) => return Outcome::Unknown { why: why.clone() },
    };
    if current.hash() == target.hash() {
        return Outcome::Unchanged;
    }
    let change = disruption::classify(current, target);
    let class = change.class();
    let action = class.map_or(Action::Restart, |c| policy.action(c));
    let fields = class.map(|c| change.fields_of(c)).unwrap_or_default();
    Outcome::Change {
        class,
        action,
        fields,
    }
}

/// What the node runs, from what it reports and the ConfigMaps as they are now.
pub fn current(active: &Active, configmaps: &BTreeMap<(String, String), Lookup>) -> Current {
    let unknown = |why: String| Current::Unknown(why);
    let (namespace, name, key, uid, rv) = match active {
        Active::Remote {
            namespace,
            name,
            key,
            uid,
            resource_version,
        } => (namespace, name, key, uid, resource_version),
        Active::Local => {
            return unknown(
                "runs its local config (init file or built-in defaults), which the cluster \
                 does not show"
                    .into(),
            )
        }
        Active::NotReported => {
            return unknown(format!(
                "reports no active config ({STATUS_ANNOTATION} missing): is kubelet-pivot running there?"
            ))
        }
    };
    let cm = match configmaps.get(&(namespace.clone(), name.clone())) {
        Some(Lookup::Found(cm)) => cm,
        Some(Lookup::Missing) => {
            return unknown(format!(
                "its active configmap {namespace}/{name} no longer exists"
            ))
        }
        Some(Lookup::Failed(err)) => {
            return unknown(format!("cannot read configmap {namespace}/{name}: {err}"))
        }
        None => return unknown(format!("configmap {namespace}/{name} was not read")),
    };
    let now_uid = cm.metadata.uid.as_deref().unwrap_or("");
    let now_rv = cm.metadata.resource_version.as_deref().unwrap_or("");
    if now_uid != uid {
        return unknown(format!(
            "configmap {namespace}/{name} was re-created since the node loaded it (uid {}, now {})",
            excerpt(uid),
            excerpt(now_uid)
        ));
    }
    if now_rv != rv {
        return unknown(format!(
            "configmap {namespace}/{name} changed since the node loaded it (resourceVersion {}, now {})",
            excerpt(rv),
            excerpt(now_rv)
        ));
    }
    match precheck::parsed(cm, key) {
        Ok(config) => Current::Known(Box::new(config)),
        Err(err) => unknown(format!("its active configmap {namespace}/{name}: {err}")),
    }
}

/// A ConfigMap a node reports active, as read now.
#[derive(Debug)]
pub enum Lookup {
    Found(Box<ConfigMap>),
    Missing,
    Failed(String),
}

/// Reads every ConfigMap the nodes report active, once each.
async fn lookups(client: &Client, actives: &[Active]) -> BTreeMap<(String, String), Lookup> {
    let mut out = BTreeMap::new();
    for a in actives {
        let Active::Remote {
            namespace, name, ..
        } = a
        else {
            continue;
        };
        let id = (namespace.clone(), name.clone());
        if out.contains_key(&id) || namespace.is_empty() || name.is_empty() {
            continue;
        }
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let found = match api.get_opt(name).await {
            Ok(Some(cm)) => Lookup::Found(Box::new(cm)),
            Ok(None) => Lookup::Missing,
            Err(err) => Lookup::Failed(err.to_string()),
        };
        out.insert(id, found);
    }
    out
}

/// The plan for every node, sorted by name. `target` None: the new config is missing or
/// does not validate (started with --force), so no node can be compared.
pub async fn plan(
    client: &Client,
    nodes: &[Node],
    target: Option<&KubeletConfig>,
) -> Vec<NodePlan> {
    let actives: Vec<Active> = nodes.iter().map(Active::of).collect();
    let configmaps = match target {
        Some(_) => lookups(client, &actives).await,
        None => BTreeMap::new(),
    };
    let mut plans: Vec<NodePlan> = nodes
        .iter()
        .zip(&actives)
        .map(|(node, active)| {
            let (policy, note) = node_policy(node);
            let outcome = match target {
                Some(t) => outcome(&current(active, &configmaps), t, &policy),
                None => Outcome::Unknown {
                    why: "the new config is missing or does not validate: the node would refuse it"
                        .into(),
                },
            };
            NodePlan {
                node: node.metadata.name.clone().unwrap_or_default(),
                current: active.describe(),
                outcome,
                note,
            }
        })
        .collect();
    plans.sort_by(|a, b| a.node.cmp(&b.node));
    plans
}

/// The dry run as a table: a header, a line per node, the totals.
pub fn text(name: &str, config: &ConfigMapKey, plans: &[NodePlan]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "dry run: rollout {name} would roll {} to {} node(s); nothing was changed",
        config.annotation(),
        plans.len()
    );
    let column = |f: fn(&NodePlan) -> &str, title: &str| {
        plans
            .iter()
            .map(|p| printable(f(p)).chars().count())
            .max()
            .unwrap_or(0)
            .max(title.len())
    };
    let (nodes, width) = (
        column(|p| &p.node, "NODE"),
        column(|p| &p.current, "CURRENT"),
    );
    let _ = writeln!(
        out,
        "{:<nodes$} {:<width$} {:<14} {:<8} DETAIL",
        "NODE", "CURRENT", "CLASS", "ACTION"
    );
    for p in plans {
        let (class, action, detail) = match &p.outcome {
            Outcome::Unchanged => (
                "-".to_string(),
                "none".to_string(),
                "runs the same effective config already".to_string(),
            ),
            Outcome::Change {
                class,
                action,
                fields,
            } => (
                class.map_or("none".to_string(), |c| c.to_string()),
                action.to_string(),
                fields.join(", "),
            ),
            Outcome::Unknown { why } => ("unknown".into(), "-".into(), why.clone()),
        };
        let mut detail = printable(&detail);
        if let Some(note) = &p.note {
            let _ = write!(detail, " ({})", printable(note));
        }
        let _ = writeln!(
            out,
            "{:<nodes$} {:<width$} {:<14} {:<8} {}",
            printable(&p.node),
            printable(&p.current),
            class,
            action,
            detail.trim_end()
        );
    }
    let _ = writeln!(out, "{}", Totals::of(plans).text());
    let _ = writeln!(
        out,
        "(actions: the defaults with each Node's {NODE_OVERRIDE_ANNOTATION}; a supervisor's \
         --disruption-action and --config-dir drop-ins are not visible from the cluster)"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn config(body: &str) -> KubeletConfig {
        KubeletConfig::parse_and_validate(format!("{HEAD}{body}").as_bytes()).expect("valid")
    }

    fn node(name: &str, annotations: &[(&str, String)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.clone()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn status(active: Value) -> (&'static str, String) {
        (
            STATUS_ANNOTATION,
            json!({"active": active, "assigned": null, "lastKnownGood": null, "error": null})
                .to_string(),
        )
    }

    fn remote(name: &str, uid: &str, rv: &str) -> Value {
        json!({"configMap": {"namespace": "kc", "name": name, "uid": uid,
            "resourceVersion": rv, "kubeletConfigKey": "kubelet"}})
    }

    fn cm(uid: &str, rv: &str, body: &str) -> Lookup {
        Lookup::Found(Box::new(ConfigMap {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "kubelet".to_string(),
                format!("{HEAD}{body}"),
            )])),
            ..ConfigMap::default()
        }))
    }

    #[test]
    fn the_active_source_is_read_from_the_status_annotation() {
        let n = node("a", &[status(remote("v1", "u1", "7"))]);
        assert_eq!(
            Active::of(&n),
            Active::Remote {
                namespace: "kc".into(),
                name: "v1".into(),
                key: "kubelet".into(),
                uid: "u1".into(),
                resource_version: "7".into()
            }
        );
        assert_eq!(
            Active::of(&node("b", &[status(Value::Null)])),
            Active::Local
        );
        assert_eq!(Active::of(&node("c", &[])), Active::NotReported);
        // A node that writes Node.status.config (and no annotation) is read there.
        let mut n = node("d", &[]);
        n.status = Some(
            serde_json::from_value(json!({"config": {"active": remote("v3", "u3", "9")}}))
                .expect("a NodeStatus"),
        );
        assert!(
            matches!(Active::of(&n), Active::Remote { name, resource_version, .. }
            if name == "v3" && resource_version == "9")
        );
    }

    #[test]
    fn the_table_lines_up_and_says_what_it_cannot_see() {
        let plans = vec![
            NodePlan {
                node: "a-rather-long-node-name-1".into(),
                current: "kc/v1:kubelet".into(),
                outcome: Outcome::Change {
                    class: Some(Class::Allocatable),
                    action: Action::Drain,
                    fields: vec!["maxPods".into(), "kubeReserved.memory".into()],
                },
                note: Some("annotation ignored".into()),
            },
            NodePlan {
                node: "b\u{1b}".into(),
                current: "local".into(),
                outcome: Outcome::Unknown {
                    why: "local".into(),
                },
                note: None,
            },
        ];
        let key = ConfigMapKey {
            namespace: "kc".into(),
            name: "v2".into(),
            key: "kubelet".into(),
        };
        let t = text("r1", &key, &plans);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "dry run: rollout r1 would roll kc/v2:kubelet to 2 node(s); nothing was changed"
        );
        let class_at = lines[1].find("CLASS").expect("CLASS");
        assert_eq!(lines[2].find("allocatable"), Some(class_at), "{t}");
        assert_eq!(lines[3].find("unknown"), Some(class_at), "{t}");
        assert!(
            lines[2].ends_with("maxPods, kubeReserved.memory (annotation ignored)"),
            "{t}"
        );
        assert!(lines[3].starts_with("b\\u{1b} "), "{t}");
        assert_eq!(lines[4], "0 restart, 1 drain, 0 held, 1 unknown");
        assert!(lines[5].contains("--disruption-action"), "{t}");
    }

    #[test]
    fn each_node_gets_its_class_and_action_or_says_why_not() {
        let target = config("maxPods: 50\neventBurst: 20\n");
        let cms = BTreeMap::from([
            (
                ("kc".to_string(), "same".to_string()),
                cm("u0", "1", "maxPods: 50\neventBurst: 20\n"),
            ),
            (
                ("kc".to_string(), "events".to_string()),
                cm("u1", "1", "maxPods: 50\n"),
            ),
            (
                ("kc".to_string(), "pods".to_string()),
                cm("u2", "1", "maxPods: 40\neventBurst: 20\n"),
            ),
            (
                ("kc".to_string(), "edited".to_string()),
                cm("u3", "9", "maxPods: 40\n"),
            ),
            (("kc".to_string(), "gone".to_string()), Lookup::Missing),
        ]);
        let plan = |active: Value, annotations: &[(&str, String)]| {
            let mut all = vec![status(active)];
            all.extend(annotations.iter().cloned());
            let n = node("n", &all);
            let (policy, note) = node_policy(&n);
            (
                outcome(&current(&Active::of(&n), &cms), &target, &policy),
                note,
            )
        };
        assert_eq!(plan(remote("same", "u0", "1"), &[]).0, Outcome::Unchanged);
        assert_eq!(
            plan(remote("events", "u1", "1"), &[]).0,
            Outcome::Change {
                class: Some(Class::InPlace),
                action: Action::Restart,
                fields: vec!["eventBurst".into()]
            }
        );
        assert_eq!(
            plan(remote("pods", "u2", "1"), &[]).0,
            Outcome::Change {
                class: Some(Class::Allocatable),
                action: Action::Drain,
                fields: vec!["maxPods".into()]
            }
        );
        // The node's own actions apply.
        let overridden = plan(
            remote("pods", "u2", "1"),
            &[(NODE_OVERRIDE_ANNOTATION, "allocatable=restart".into())],
        );
        assert!(matches!(
            overridden.0,
            Outcome::Change {
                action: Action::Restart,
                ..
            }
        ));
        let refused = plan(
            remote("pods", "u2", "1"),
            &[(NODE_OVERRIDE_ANNOTATION, "allocatable=reboot".into())],
        );
        assert!(matches!(
            refused.0,
            Outcome::Change {
                action: Action::Drain,
                ..
            }
        ));
        assert!(refused.1.unwrap().contains("ignored"));
        let why = |o: Outcome| match o {
            Outcome::Unknown { why } => why,
            other => panic!("known: {other:?}"),
        };
        assert!(why(plan(remote("edited", "u3", "8"), &[]).0)
            .contains("changed since the node loaded it"));
        assert!(why(plan(remote("edited", "other", "9"), &[]).0).contains("re-created"));
        assert!(why(plan(remote("gone", "u", "1"), &[]).0).contains("no longer exists"));
        assert!(why(plan(Value::Null, &[]).0).contains("local config"));
    }

    #[test]
    fn totals_count_every_outcome() {
        let p = |outcome: Outcome| NodePlan {
            node: "n".into(),
            current: "-".into(),
            outcome,
            note: None,
        };
        let change = |action| Outcome::Change {
            class: Some(Class::InPlace),
            action,
            fields: vec![],
        };
        let mut plans: Vec<NodePlan> = (0..12).map(|_| p(change(Action::Restart))).collect();
        plans.extend((0..3).map(|_| p(change(Action::Drain))));
        plans.push(p(change(Action::Hold)));
        assert_eq!(Totals::of(&plans).text(), "12 restart, 3 drain, 1 held");
        plans.push(p(Outcome::Unchanged));
        plans.push(p(Outcome::Unknown { why: "x".into() }));
        assert_eq!(
            Totals::of(&plans).text(),
            "12 restart, 3 drain, 1 held, 1 unchanged, 1 unknown"
        );
    }
}
