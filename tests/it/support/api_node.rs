//! One node on the strict test API server (`testkit`): a [`Scene`], the server with the Node
//! registered, the node's credentials (a kubeconfig the server authorizes with its Node
//! authorizer, NodeRestriction and the RBAC of the top-level `manifests/*.yaml`), a kubelet
//! root dir and a free healthz port for the stand-in. Test files wrap it in their own `Node`
//! (or `Cluster`) with the helpers only they use.
//!
//! The wire names below are written out on purpose: the tests pin the format the node agent
//! and the controller exchange through the API server.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use serde_json::Value;
use testkit::ApiServer;

use super::{free_port, kubelet_config, Scene};

/// The Node of [`ApiNode`].
pub const NODE: &str = "node-a";
/// The namespace of the config ConfigMaps.
pub const NS: &str = "kubelet-config";
/// The Node annotation that assigns a config (`NS/NAME`).
pub const SOURCE_ANNOTATION: &str = kp_contract::node_config::SOURCE_ANNOTATION;
/// The Node annotation in which the node reports its config status.
pub const STATUS_ANNOTATION: &str = kp_contract::node_config::STATUS_ANNOTATION;
/// The Node condition of the config the node runs.
pub const CONDITION: &str = kp_contract::node_config::CONDITION_TYPE;

pub struct ApiNode {
    pub scene: Scene,
    pub server: ApiServer,
    /// The node's kubeconfig (`--kubeconfig`).
    pub kubeconfig: PathBuf,
    /// `<scene>/kubelet-root`, created: `--kubelet-root-dir`, and the stand-in's `--root-dir`.
    pub root_dir: PathBuf,
    /// A free TCP port on loopback for the stand-in's healthz server ([`ApiNode::config`]).
    pub healthz: u16,
}

impl ApiNode {
    /// The node with its credentials written into the scene.
    pub fn new() -> ApiNode {
        let scene = Scene::new();
        let server = ApiServer::start();
        server.create_node(NODE, std::iter::empty::<(&str, &str)>());
        let kubeconfig = server.node_kubeconfig_in(scene.path(), NODE);
        ApiNode::assemble(scene, server, kubeconfig)
    }

    /// The node whose kubeconfig is `<scene>/<rel>`, not written yet (the kubelet writes it
    /// after its TLS bootstrap).
    pub fn awaiting_credentials(rel: &str) -> ApiNode {
        let scene = Scene::new();
        let kubeconfig = scene.path().join(rel);
        ApiNode::from_parts(scene, ApiServer::start(), kubeconfig)
    }

    /// The node on `server` (an HTTPS one, say) with the kubeconfig `kubeconfig`: registers
    /// the Node, creates the kubelet root dir and picks the healthz port.
    pub fn from_parts(scene: Scene, server: ApiServer, kubeconfig: PathBuf) -> ApiNode {
        server.create_node(NODE, std::iter::empty::<(&str, &str)>());
        ApiNode::assemble(scene, server, kubeconfig)
    }

    /// The node on `server`, its Node registered: creates the kubelet root dir and picks the
    /// healthz port.
    fn assemble(scene: Scene, server: ApiServer, kubeconfig: PathBuf) -> ApiNode {
        let root_dir = scene.path().join("kubelet-root");
        fs::create_dir_all(&root_dir)
            .unwrap_or_else(|err| panic!("failed to create {}: {err}", root_dir.display()));
        ApiNode {
            scene,
            server,
            kubeconfig,
            root_dir,
            healthz: free_port(),
        }
    }

    /// A supervisor's argv: `role` (`bootstrap`, `self-hosted --generation N`, ...), then
    /// `--kubeconfig <kubeconfig> --node-name NODE --stop-timeout 2s`.
    pub fn node_args<'a>(&'a self, role: &[&'a str]) -> Vec<&'a str> {
        let mut args = role.to_vec();
        args.extend_from_slice(&[
            "--kubeconfig",
            self.kubeconfig_str(),
            "--node-name",
            NODE,
            "--stop-timeout",
            "2s",
        ]);
        args
    }

    /// The kubeconfig path as a flag value.
    pub fn kubeconfig_str(&self) -> &str {
        self.kubeconfig
            .to_str()
            .unwrap_or_else(|| panic!("kubeconfig {} is not UTF-8", self.kubeconfig.display()))
    }

    /// The kubelet root dir as a flag value.
    pub fn root_str(&self) -> &str {
        self.root_dir
            .to_str()
            .unwrap_or_else(|| panic!("root dir {} is not UTF-8", self.root_dir.display()))
    }

    /// A KubeletConfiguration serving healthz on [`ApiNode::healthz`], with `extra`.
    pub fn config(&self, extra: &str) -> String {
        kubelet_config(&format!("healthzPort: {}\n{extra}", self.healthz))
    }

    /// Creates the immutable ConfigMap `NS/name` with key `kubelet` = `config`; its uid.
    pub fn configmap(&self, name: &str, config: String) -> String {
        let data = BTreeMap::from([("kubelet".to_owned(), config)]);
        let cm = self.server.create_configmap(NS, name, data, true);
        cm["metadata"]["uid"]
            .as_str()
            .unwrap_or_else(|| panic!("no uid in {cm}"))
            .to_owned()
    }

    /// Assigns ConfigMap `NS/name` to the node.
    pub fn assign(&self, name: &str) {
        self.set_source(Some(name));
    }

    /// Sets the node's config-source annotation to `NS/name` (`None` removes it).
    pub fn set_source(&self, name: Option<&str>) {
        let value = name.map(|name| format!("{NS}/{name}"));
        self.server
            .set_node_annotation(NODE, SOURCE_ANNOTATION, value.as_deref());
    }

    /// The Node's [`CONDITION`], if reported.
    pub fn condition(&self) -> Option<Value> {
        condition_of(&self.server.node(NODE), CONDITION)
    }

    /// The one running kubelet and its config, `None` unless exactly one runs.
    pub fn running(&self) -> Option<(i32, String)> {
        match self.scene.running_kubelets().as_slice() {
            [pid] => Some((*pid, self.scene.config_of(*pid))),
            _ => None,
        }
    }
}

/// The condition `kind` of a Node object, if it has one.
pub fn condition_of(node: &Value, kind: &str) -> Option<Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

/// `struct NAME(ApiNode)` that dereferences to [`ApiNode`]: a test file's node, with the
/// helpers only that file uses in its own `impl NAME`.
#[allow(unused_macros)]
macro_rules! node_type {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        struct $name($crate::support::api_node::ApiNode);

        impl std::ops::Deref for $name {
            type Target = $crate::support::api_node::ApiNode;

            fn deref(&self) -> &Self::Target {
                &self.0
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use node_type;
