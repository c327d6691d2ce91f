//! What `rollout start` checks before it creates or changes anything: the ConfigMap
//! exists, its payload passes the validator the node runs (kp-kubelet-config's
//! `parse` then `validate`, as the node's config lifecycle does), a mutable ConfigMap is
//! worth a warning, and the selector matches at least one node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams};
use kube::Client;

use crate::nodeview::NodeView;
use kp_contract::node_config::excerpt;
use kp_contract::rollout::{ConfigMapKey, NodeSelector};
use kp_kubelet_config::{ConfigError, KubeletConfig};

/// Why a ConfigMap's payload is not a config the node would run.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("no key {} (keys: {keys})", excerpt(.key))]
    NoKey { key: String, keys: String },
    #[error("{0}")]
    Invalid(#[source] ConfigError),
}

/// Why `rollout start` refused, before any change.
#[derive(Debug, thiserror::Error)]
pub enum PrecheckError {
    #[error(
        "configmap {namespace}/{name} not found: create it first (or start with --force: the \
         rollout then waits for it)"
    )]
    Missing { namespace: String, name: String },
    #[error("cannot read configmap {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kp_runtime::api_error::ApiError,
    },
    #[error(
        "configmap {namespace}/{name}: {source}; every node would refuse it (`kubelet-pivot \
         config check` shows each field); fix it, or start with --force to roll it out anyway"
    )]
    Payload {
        namespace: String,
        name: String,
        #[source]
        source: PayloadError,
    },
    #[error("no node matches the selector {0}: nothing to roll (kubectl get nodes -l ... lists what a selector matches; --force starts a rollout that waits for nodes to match)")]
    NoNodes(String),
    #[error("cannot list the nodes: {0}")]
    ListNodes(#[source] kp_runtime::api_error::ApiError),
}

/// What the checks found.
#[derive(Debug)]
pub struct Checked {
    /// The new config, validated; `None` when `--force` passed a missing ConfigMap or a
    /// payload that does not validate.
    pub config: Option<KubeletConfig>,
    /// The nodes the selector matches.
    pub nodes: Vec<Node>,
    /// What the operator should know but does not stop the start (printed on stderr).
    pub warnings: Vec<String>,
}

/// The payload's files: `data` and `binaryData`, as the node's download reads them.
fn files(cm: &ConfigMap) -> BTreeMap<&str, &[u8]> {
    let data = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_bytes()));
    let binary = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.0.as_slice()));
    data.chain(binary).collect()
}

/// The payload of `key`, parsed and validated as the node does it.
pub fn validated(cm: &ConfigMap, key: &str) -> Result<KubeletConfig, PayloadError> {
    parsed(cm, key).and_then(|c| c.validate().map(|()| c).map_err(PayloadError::Invalid))
}

/// The payload of `key`, parsed (not validated: what a node runs already passed).
pub fn parsed(cm: &ConfigMap, key: &str) -> Result<KubeletConfig, PayloadError> {
    let files = files(cm);
    let body = files.get(key).ok_or_else(|| PayloadError::NoKey {
        key: key.to_string(),
        keys: names(files.keys().copied()),
    })?;
    KubeletConfig::parse(body).map_err(PayloadError::Invalid)
}

/// The payload's plain YAML scalars read with the kubelet's YAML 1.1 meaning
/// (`serializeImagePulls: no`), at most 10, then how many more.
fn yaml_warnings(config: &KubeletConfig, key: &ConfigMapKey) -> Vec<String> {
    const SHOWN: usize = 10;
    let all = config.warnings();
    let mut out: Vec<String> = all
        .iter()
        .take(SHOWN)
        .map(|w| format!("configmap {}/{}: {w}", key.namespace, key.name))
        .collect();
    if all.len() > SHOWN {
        out.push(format!(
            "configmap {}/{}: {} more YAML 1.1 readings (kubelet-pivot config check shows them all)",
            key.namespace,
            key.name,
            all.len() - SHOWN
        ));
    }
    out
}

/// At most 10 keys, quoted, then how many more.
fn names<'a>(keys: impl Iterator<Item = &'a str>) -> String {
    const SHOWN: usize = 10;
    let keys: Vec<&str> = keys.collect();
    let mut out: Vec<String> = keys.iter().take(SHOWN).map(|k| excerpt(k)).collect();
    if keys.len() > SHOWN {
        out.push(format!("+{} more", keys.len() - SHOWN));
    }
    if out.is_empty() {
        "none".to_string()
    } else {
        out.join(", ")
    }
}

/// `pool=a,zone in (z1,z2)`, or `(none: every node)`.
pub fn selector_text(selector: &NodeSelector) -> String {
    if selector.is_empty() {
        return "(none: every node)".to_string();
    }
    selector.to_string()
}

/// The warning for a ConfigMap that is not immutable, if it is not.
pub fn mutable_warning(cm: &ConfigMap, key: &ConfigMapKey) -> Option<String> {
    (cm.immutable != Some(true)).then(|| {
        format!(
            "configmap {}/{} is mutable: an edit reaches every node that runs it at once, \
             outside any rollout; prefer an immutable ConfigMap (immutable: true) with a new \
             name per change",
            key.namespace, key.name
        )
    })
}

/// Runs the checks for a rollout of `key` to the nodes `selector` matches.
pub async fn check(
    client: &Client,
    key: &ConfigMapKey,
    selector: &NodeSelector,
    force: bool,
) -> Result<Checked, PrecheckError> {
    let mut warnings = Vec::new();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &key.namespace);
    let configmap = cms
        .get_opt(&key.name)
        .await
        .map_err(|source| PrecheckError::Read {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            source: source.into(),
        })?;
    let config = match &configmap {
        None if force => {
            warnings.push(format!(
                "configmap {}/{} not found; the rollout waits for it (--force)",
                key.namespace, key.name
            ));
            None
        }
        None => {
            return Err(PrecheckError::Missing {
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            })
        }
        Some(cm) => {
            warnings.extend(mutable_warning(cm, key));
            match validated(cm, &key.key) {
                Ok(config) => {
                    warnings.extend(yaml_warnings(&config, key));
                    Some(config)
                }
                Err(err) if force => {
                    warnings.push(format!(
                        "configmap {}/{}: {err}; rolled out anyway (--force): nodes will refuse it",
                        key.namespace, key.name
                    ));
                    None
                }
                Err(source) => {
                    return Err(PrecheckError::Payload {
                        namespace: key.namespace.clone(),
                        name: key.name.clone(),
                        source,
                    })
                }
            }
        }
    };
    let nodes = matching_nodes(client, selector).await?;
    if nodes.is_empty() {
        if !force {
            return Err(PrecheckError::NoNodes(selector_text(selector)));
        }
        warnings.push(format!(
            "no node matches the selector {} yet; the rollout takes the nodes that come to match it (--force)",
            selector_text(selector)
        ));
    }
    Ok(Checked {
        config,
        nodes,
        warnings,
    })
}

/// The nodes `selector` matches, as the controller matches them (the server filters by
/// label first).
async fn matching_nodes(
    client: &Client,
    selector: &NodeSelector,
) -> Result<Vec<Node>, PrecheckError> {
    let api: Api<Node> = Api::all(client.clone());
    let mut params = ListParams::default();
    if !selector.is_empty() {
        params = params.labels(&selector.to_string());
    }
    let list = api
        .list(&params)
        .await
        .map_err(|e| PrecheckError::ListNodes(e.into()))?;
    Ok(list
        .items
        .into_iter()
        .filter(|n| NodeView::of(n).matches(selector))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn cm(data: &[(&str, &str)], immutable: Option<bool>) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            immutable,
            ..ConfigMap::default()
        }
    }

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    #[test]
    fn yaml_1_1_readings_of_the_payload_are_warned_about_at_most_ten() {
        let key = ConfigMapKey {
            namespace: "kc".into(),
            name: "v2".into(),
            key: "kubelet".into(),
        };
        let one = format!("{HEAD}serializeImagePulls: no\n");
        let config = validated(&cm(&[("kubelet", &one)], None), "kubelet").expect("valid");
        assert_eq!(
            yaml_warnings(&config, &key),
            ["configmap kc/v2: serializeImagePulls: the unquoted no is read as false, as the \
              kubelet reads it; write false (YAML 1.1 reads no as false; YAML 1.2 as the string \"no\")"]
        );
        let gates: String = (0..12).map(|i| format!("  Gate{i}: on\n")).collect();
        let many = format!("{HEAD}featureGates:\n{gates}");
        let config = KubeletConfig::parse(many.as_bytes()).expect("parses");
        let warnings = yaml_warnings(&config, &key);
        assert_eq!(warnings.len(), 11, "{warnings:?}");
        assert!(
            warnings[10].contains("2 more YAML 1.1 readings"),
            "{warnings:?}"
        );
    }

    #[test]
    fn the_payload_is_validated_as_the_node_does_it() {
        let good = format!("{HEAD}maxPods: 50\n");
        assert!(validated(&cm(&[("kubelet", &good)], None), "kubelet").is_ok());
        let typo = format!("{HEAD}maxPodz: 50\n");
        let err = validated(&cm(&[("kubelet", &typo)], None), "kubelet").unwrap_err();
        assert_eq!(err.to_string(), "unknown field \"maxPodz\"");
        let port = format!("{HEAD}port: 70000\n");
        let err = validated(&cm(&[("kubelet", &port)], None), "kubelet").unwrap_err();
        assert!(
            err.to_string()
                .contains("port (70000) must be between 1 and 65535"),
            "{err}"
        );
        // What a node runs is parsed, not validated again.
        assert!(parsed(&cm(&[("kubelet", &port)], None), "kubelet").is_ok());
        let err = validated(&cm(&[("other", &good)], None), "kubelet").unwrap_err();
        assert_eq!(err.to_string(), "no key \"kubelet\" (keys: \"other\")");
        let mut binary = cm(&[], None);
        binary.binary_data = Some(BTreeMap::from([(
            "kubelet".to_string(),
            ByteString(good.into_bytes()),
        )]));
        assert!(validated(&binary, "kubelet").is_ok());
        let err = validated(&cm(&[], None), "kubelet").unwrap_err();
        assert_eq!(err.to_string(), "no key \"kubelet\" (keys: none)");
    }

    #[test]
    fn mutable_configmaps_are_named_and_selectors_shown() {
        let key = ConfigMapKey {
            namespace: "kc".into(),
            name: "v1".into(),
            key: "kubelet".into(),
        };
        let warning = mutable_warning(&cm(&[], None), &key).unwrap();
        assert!(
            warning.starts_with("configmap kc/v1 is mutable"),
            "{warning}"
        );
        assert!(mutable_warning(&cm(&[], Some(false)), &key).is_some());
        assert!(mutable_warning(&cm(&[], Some(true)), &key).is_none());
        let sel = super::super::selector::parse("pool=a,zone notin (z9)").unwrap();
        assert_eq!(selector_text(&sel), "pool=a,zone notin (z9)");
        assert_eq!(
            selector_text(&NodeSelector::default()),
            "(none: every node)"
        );
        let many: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
        assert!(names(many.iter().map(String::as_str)).ends_with(", +2 more"));
    }
}
