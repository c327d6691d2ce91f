//! Who is asking: every request of every kubelet-pivot client carries
//! `User-Agent: kubelet-pivot/VERSION (COMPONENT)`, so that API server audit
//! logs and priority-and-fairness flow schemas can tell the supervisor, the
//! rollout controller and the CLI apart (kube-rs sends no User-Agent of its
//! own).

use http::header::{HeaderValue, USER_AGENT};

/// The program a client belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Supervisor,
    RolloutController,
    Cli,
}

impl Component {
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Supervisor => "supervisor",
            Component::RolloutController => "rollout-controller",
            Component::Cli => "cli",
        }
    }
}

/// `kubelet-pivot/0.1.0 (supervisor)`.
pub fn user_agent(component: Component) -> String {
    format!(
        "kubelet-pivot/{} ({})",
        env!("CARGO_PKG_VERSION"),
        component.as_str()
    )
}

/// Sets the User-Agent of every request `config`'s client makes.
pub fn identify(config: &mut kube::Config, component: Component) {
    config.headers.retain(|(name, _)| name != USER_AGENT);
    if let Ok(value) = HeaderValue::from_str(&user_agent(component)) {
        config.headers.push((USER_AGENT, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_the_version_and_the_component() {
        assert_eq!(
            user_agent(Component::RolloutController),
            format!(
                "kubelet-pivot/{} (rollout-controller)",
                env!("CARGO_PKG_VERSION")
            )
        );
    }
}
