//! The one way a kube client is built here, by the node agent and the rollout controller
//! and CLI alike.

use crate::agent::{self, Component};

/// The client of `config` for `component`: identified (user agent, field manager), every
/// 2xx answer counted ([`retry::answers`](crate::retry::answers)), and kube's own retry
/// layer off (429/503/504, up to 15 times, up to 1000 s apart): every caller has a
/// bounded backoff of its own, and a drain must see a PodDisruptionBudget's 429 to
/// report it and to ask again on its own schedule.
pub fn build(mut config: kube::Config, component: Component) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    crate::api_error::set_server(&config.cluster_url);
    agent::identify(&mut config, component);
    crate::retry::client(config)
}
