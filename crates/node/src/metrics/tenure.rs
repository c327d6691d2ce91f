//! Why a kubelet restarted, and what a scrape reads whole.

use std::time::SystemTime;

use kp_contract::node_config::ConfigReport;

/// Why the kubelet was started again within one holder tenure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartReason {
    /// It exited on its own (crash or clean exit we did not ask for).
    Exited,
    /// The effective config changed.
    ConfigChanged,
    /// SIGHUP from the operator.
    Sighup,
}

impl RestartReason {
    pub(crate) const ALL: [RestartReason; 3] = [
        RestartReason::Exited,
        RestartReason::ConfigChanged,
        RestartReason::Sighup,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            RestartReason::Exited => "exited",
            RestartReason::ConfigChanged => "config_changed",
            RestartReason::Sighup => "sighup",
        }
    }
}

/// What the scrape-time families and restart counting need, behind one lock that a
/// scrape holds while it writes: a scrape sees each step of the state machine whole.
#[derive(Debug, Default)]
pub(crate) struct Tenure {
    /// Set when the running kubelet is stopped or lost; counted as a restart when the
    /// next kubelet of the same tenure starts.
    pub(crate) pending_restart: Option<RestartReason>,
    pub(crate) config: Option<ConfigReport>,
    /// The syncer's current error (None = in sync or no API server).
    pub(crate) sync_error: Option<String>,
    pub(crate) last_sync: Option<SystemTime>,
}
