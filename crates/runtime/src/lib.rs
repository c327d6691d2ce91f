//! What the node agent and the rollout controller share around the API server and their
//! own endpoints, with no knowledge of either:
//!
//! - [`agent`]: the client's identity (user agent, field manager) per component;
//! - [`client`]: building a client (identity, answer counting, no hidden retries);
//! - [`retry`]: quiet, bounded retries with backoff for requests and watches;
//! - [`events`]: posting a core/v1 Event on a Node;
//! - [`logging`]: log lines, plain (journald priorities) or JSON;
//! - [`exposition`], [`http`]: the Prometheus text format and the small HTTP server
//!   `/metrics`, `/healthz` and `/readyz` are served from.
//!
//! May depend on: `kp-contract`.

pub mod agent;
pub mod api_error;
pub mod client;
pub mod events;
pub mod exposition;
pub mod http;
pub mod logging;
pub mod retry;
