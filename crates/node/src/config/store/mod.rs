//! The dynamic-config checkpoint store under `--dynamic-config-dir`, shared
//! by every supervisor of the node:
//!
//! ```text
//! meta/assigned              ConfigSource JSON (absent = local config)
//! meta/last-known-good       ConfigSource JSON (absent = local config)
//! checkpoints/{uid}/{resourceVersion}/{key files}
//! v1/bad-configs.json        {uid: {time, reason, resourceVersion}}
//! v1/startups.json           [RFC 3339, ...] kubelet restarts after crashes in the trial
//! v1/trial.json              {source, since}: the stored trial clock
//! v1/effective.json          what runs: source, hash + algorithm, error
//! v1/applied-input.json     the document of the config that runs
//! v1/disruption.json        a drain in progress / backing off, or a held change
//! v1/config-dir.json        --config-dir drop-ins: the set that ran, last-known-good, trial, bad
//! meta/node-overrides       the Node's per-class action override (from its annotation)
//! effective/kubelet-config.json   the file the kubelet is started with
//! state-files/NAME.STAMP    kubelet state files moved aside (newest 16 each)
//! ```
//!
//! Every file is written with `fsutil::write_atomic`; a checkpoint directory
//! is filled under a temp name and renamed into place, so readers (and a
//! crash at any instruction) see the old or the new state only. Directories
//! are 0700, files 0600, symlinks anywhere below the root are refused.
//! Writers serialize on a flock of `.store.lock` (held only while writing).
//!
//! Nothing in the store is trusted blindly: the root is a trusted directory
//! (`trust`: owned by our uid, not group/world-writable, safe ancestors),
//! and every file is read through `fsutil::read_bounded` (no symlink, no
//! FIFO or device, owned by our uid, not group/world-writable, capped at a
//! size fit for it: [`MAX_META_BYTES`], [`MAX_BAD_CONFIGS_BYTES`],
//! [`MAX_PAYLOAD`]).
//!
//! This module holds the [`Store`] handle and the store's limits; the rest
//! is split by job: the record types and source checks (`types`), errors
//! (`error`), opening, paths, trust and the writer lock (`open`), bounded
//! reads and atomic writes of JSON files (`json`), the small records
//! (assignment, last-known-good, bad configs, startups, trial, effective
//! config: `records`), the records of a disruptive change (`pending`) and
//! checkpoints (`checkpoints`).

mod checkpoints;
mod dropin_record;
mod error;
mod json;
mod open;
mod pending;
mod records;
mod types;

pub use dropin_record::{
    DropInBad, DropInFile, DropInRecord, DropInSnapshot, DropInTrial, MAX_BAD_DROP_IN_SETS,
    MAX_DROP_IN_LAYER,
};
pub use error::StoreError;
pub use open::FileStamp;
pub use pending::{BlockReason, BlockedPods, DisruptionRecord, DrainFailure, DrainPhase};
pub use types::{
    validate_key, BadConfigs, BadEntry, ConfigSource, EffectiveRecord, SourceCheck, Trial,
};

use std::fs::File;
use std::path::PathBuf;

pub const DIR_MODE: u32 = 0o700;
pub const FILE_MODE: u32 = 0o600;
/// Largest payload (all files of one checkpoint together).
pub const MAX_PAYLOAD: usize = 1024 * 1024;
/// Largest small JSON record (meta/assigned, meta/last-known-good,
/// v1/startups.json, v1/trial.json, v1/effective.json): each holds a config
/// source, a few timestamps or one error line, well under 4 KiB.
pub const MAX_META_BYTES: u64 = 64 * 1024;
/// Largest v1/bad-configs.json: one entry per bad config UID, each reason
/// capped at [`MAX_BAD_REASON`] bytes when written.
pub const MAX_BAD_CONFIGS_BYTES: u64 = MAX_PAYLOAD as u64;
/// Longest reason stored in bad-configs (the full text goes to the log).
pub const MAX_BAD_REASON: usize = 2048;
/// Largest effective config file: a payload plus the defaults filled in.
const MAX_EFFECTIVE_BYTES: u64 = 2 * MAX_PAYLOAD as u64;
/// What the store root is called in messages.
const ROOT_WHAT: &str = "checkpoint store (--dynamic-config-dir)";

/// Held while writing; released on drop.
pub struct StoreLock {
    _file: File,
}

#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    /// Opened for writing: the root was created or verified by `open`. A
    /// read-only store verifies its root before each read instead.
    verified: bool,
}

/// A config source for unit tests of the store and its users.
#[cfg(test)]
pub(crate) fn test_source(uid: &str, rv: &str) -> ConfigSource {
    ConfigSource {
        namespace: "kube-system".into(),
        name: "my-node-config".into(),
        uid: uid.into(),
        resource_version: rv.into(),
        kubelet_config_key: "kubelet".into(),
    }
}
