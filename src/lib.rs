//! kubelet-pivot: decides which kubelet runs on a node.
//!
//! Module map (one job each):
//! - [`lock`]: the flock'ed lock file; [`holder`]: who holds it;
//!   [`claims`]: who wants it; [`contention`]: whether to yield;
//!   [`watch`]: inotify hints (with polling fallback);
//! - [`child`]: the kubelet process group; [`pivot`]: the pure state
//!   machine; [`supervisor`]: the event loop that drives it;
//! - [`notify`]: systemd; [`status`]: the `status` command; [`cli`]: flags;
//!   [`logging`]: plain/JSON/journald lines; [`manpage`]: man pages and completions; [`metrics`] and
//!   [`metrics_http`]: `--metrics-address`;
//! - [`procfs`], [`fsutil`], [`role`]: small shared pieces.

pub mod child;
pub mod claims;
pub mod cli;
pub mod contention;
pub mod fence;
pub mod fsutil;
pub mod holder;
pub mod kubeconfig;
pub mod lifecycle;
pub mod lock;
pub mod logging;
pub mod manpage;
pub mod metrics;
pub mod metrics_http;
pub mod nodeconfig;
pub mod notify;
pub mod operator;
pub mod pivot;
pub mod prepared;
pub mod procfs;
pub mod role;
pub mod signals;
pub mod spawn;
pub mod state;
pub mod status;
pub mod store;
pub mod supervisor;
pub mod sync;
pub mod trust;
pub mod watch;
