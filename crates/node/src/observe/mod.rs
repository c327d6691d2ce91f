//! What kubelet-pivot tells the outside: the `status` command ([`status`]),
//! metrics and their HTTP endpoint ([`metrics`], [`scraped`],
//! [`disruption_metrics`], [`exposition`], [`metrics_http`]), the HTTP server that
//! endpoint and the rollout controller's share ([`http`]), log
//! lines ([`logging`]), sd_notify ([`notify`]), man pages and completions
//! ([`manpage`]).
//!
//! May read: `pivot` (holder record, claims, machine states), `config`
//! (store views). Only reads: nothing here changes the node's state.

pub mod notify;
pub mod status;
