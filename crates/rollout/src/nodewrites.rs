//! Node writes the cache has not caught up with.
//!
//! Every node patch is guarded by the resourceVersion of the cached Node it was planned
//! from. Once the patch was applied (or refused with 409: the node changed since), that
//! copy is stale, and a plan made from it again would patch the node again, to be refused
//! with 409 each time. That happens whenever the reflector lags, most of all while the Node
//! watch backs off after an API outage: one PATCH per node every retry. A node whose cached
//! copy is the one a write was already guarded by is therefore left alone until the cache
//! delivers a newer copy (whose change event reconciles the rollouts again).

use std::collections::HashMap;
use std::sync::Mutex;

/// The resourceVersion each node's last write was guarded by.
#[derive(Debug, Default)]
pub struct NodeWrites {
    guarded_by: Mutex<HashMap<String, String>>,
}

impl NodeWrites {
    /// Whether the cached copy of `node` at `resource_version` is one we already wrote
    /// against: a patch planned from it would be refused.
    pub fn is_stale(&self, node: &str, resource_version: &str) -> bool {
        self.guarded_by
            .lock()
            .map(|m| m.get(node).is_some_and(|rv| rv == resource_version))
            .unwrap_or(false)
    }

    /// Records that a patch of `node` guarded by `resource_version` got an answer (applied,
    /// 409 or 404): that copy is stale from now on.
    pub fn written(&self, node: &str, resource_version: &str) {
        if let Ok(mut m) = self.guarded_by.lock() {
            m.insert(node.to_string(), resource_version.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_written_against_is_stale_until_a_newer_one_comes() {
        let w = NodeWrites::default();
        assert!(!w.is_stale("n1", "10"));
        w.written("n1", "10");
        assert!(w.is_stale("n1", "10"));
        assert!(!w.is_stale("n1", "11"), "the cache caught up");
        assert!(!w.is_stale("n2", "10"), "per node");
        w.written("n1", "11");
        assert!(!w.is_stale("n1", "10"));
        assert!(w.is_stale("n1", "11"));
    }
}
