//! The kubelet child process: spawn it ([`spawn`]: vfork-style, own process
//! group, PR_SET_PDEATHSIG, the inherited lock descriptor), signal its
//! group, tell when the group is gone, reap, back off ([`child`]); move the
//! kubelet's resource-manager checkpoints aside ([`state_files`]); check the
//! kubelet's own flags given after `--` and build the child's arguments
//! ([`flags`]); tell which kubelet configs are validated for: its version
//! ([`version`]) and the host facts it checks at start ([`host`]).
//!
//! May call: `procfs` (pid views), `safefs`. Decides nothing: the supervisor
//! says when to start and stop.

pub mod child;
pub mod flags;
pub mod health;
pub mod host;
pub mod spawn;
pub mod state_files;
pub mod version;
