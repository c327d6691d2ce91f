//! What a config is validated for: the kubelet's gate model and the facts
//! of the host it will run on.

use super::GateModel;

/// The cgroup hierarchy of a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// The facts of the host the kubelet runs on that a config can fail
/// against at the kubelet's start; `None` where a fact is not known (the
/// checks that need it are then skipped, not guessed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// The cgroup version, with how it was told
    /// (`/sys/fs/cgroup is tmpfs`), for the refusal.
    pub cgroup: Option<(CgroupVersion, String)>,
}

impl HostFacts {
    /// Nothing known (a check off the node: `config check`, the rollout
    /// controller's precheck).
    pub fn unknown() -> HostFacts {
        HostFacts::default()
    }
}

/// The kubelet a config is validated for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationTarget {
    pub model: GateModel,
    pub host: HostFacts,
}

impl ValidationTarget {
    pub fn new(model: GateModel, host: HostFacts) -> ValidationTarget {
        ValidationTarget { model, host }
    }
}

impl Default for ValidationTarget {
    /// The newest model, host unknown.
    fn default() -> ValidationTarget {
        ValidationTarget::new(GateModel::newest(), HostFacts::unknown())
    }
}
