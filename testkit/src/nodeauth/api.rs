//! [`ApiServer`]'s helpers for node credentials and their authorization.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::rbac::Policy;
use crate::ApiServer;

impl ApiServer {
    /// The bearer token of `node`'s credentials (the same on every call): it authenticates as
    /// `system:node:NODE` in the groups `system:nodes` and `system:authenticated`, and is
    /// authorized like a kubelet's credentials by the Node authorizer, NodeRestriction and
    /// RBAC from the repository's top-level `manifests/*.yaml` (see the crate docs and
    /// [`ApiServer::apply_rbac_manifest`]). The node need not exist.
    pub fn node_token(&self, node: &str) -> String {
        let mut state = self.lock();
        if let Some((token, _)) = state.node_tokens.iter().find(|(_, n)| *n == node) {
            return token.clone();
        }
        let random: String = (0..16)
            .map(|_| format!("{:x}", rand::random::<u8>() & 15))
            .collect();
        let token = format!("kubelet-pivot-node-token.{random}");
        state.node_tokens.insert(token.clone(), node.to_string());
        token
    }

    /// Rotates `node`'s bearer token: the old one is refused (401) from now on, and the new
    /// one (returned) authenticates as the node.
    pub fn rotate_node_token(&self, node: &str) -> String {
        self.lock().node_tokens.retain(|_, n| n != node);
        self.node_token(node)
    }

    /// Writes a kubeconfig for this server whose user reads its bearer token from
    /// `token_file` (`tokenFile`), as a kubelet's credentials written by a provisioner are.
    pub fn write_token_file_kubeconfig(&self, path: &Path, token_file: &Path) {
        self.write_kubeconfig_for_user(path, &format!("tokenFile: {}", token_file.display()));
    }

    /// Writes a kubeconfig with `node`'s credentials ([`ApiServer::node_token`]) to `path`, in
    /// the format of [`ApiServer::write_kubeconfig`].
    pub fn write_node_kubeconfig(&self, path: &Path, node: &str) {
        let token = self.node_token(node);
        self.write_kubeconfig_with(path, &token);
    }

    /// Writes a kubeconfig with `node`'s credentials to `<dir>/kubeconfig-node-NODE` and
    /// returns its path.
    pub fn node_kubeconfig_in(&self, dir: &Path, node: &str) -> PathBuf {
        let path = dir.join(format!("kubeconfig-node-{node}"));
        self.write_node_kubeconfig(&path, node);
        path
    }

    /// The AuthorizeNodeWithSelectors feature gate of the Node authorizer: `true` (the
    /// default, as on v1.32 servers) restricts a node's pod reads to pods bound to it (`get`
    /// of such a pod, `list`/`watch` with the field selector `spec.nodeName=NODE`); `false`
    /// (an older server) lets a node get, list and watch every pod.
    pub fn authorize_node_with_selectors(&self, enabled: bool) {
        self.lock().node_selectors = enabled;
    }

    /// Adds the RBAC objects (Roles, ClusterRoles and their bindings) of a manifest file to
    /// the policy that authorizes node credentials, as `kubectl apply -f FILE` on top of the
    /// shipped manifests would; e.g. [`crate::rbac::manifests_dir`]`().join("optional/...")`.
    /// Panics if the file cannot be read or holds an RBAC object the API server would refuse.
    pub fn apply_rbac_manifest(&self, path: &Path) {
        let mut state = self.lock();
        Arc::make_mut(&mut state.rbac)
            .apply_file(path)
            .unwrap_or_else(|err| panic!("apply_rbac_manifest: {err}"));
    }

    /// Replaces the RBAC policy that authorizes node credentials (by default the repository's
    /// top-level manifests, [`Policy::shipped`]); [`Policy::empty`] leaves nodes nothing but
    /// the Node authorizer.
    pub fn set_rbac(&self, policy: Policy) {
        self.lock().rbac = Arc::new(policy);
    }

    /// The RBAC policy that authorizes node credentials.
    pub fn rbac(&self) -> Policy {
        Policy::clone(&self.lock().rbac)
    }
}
