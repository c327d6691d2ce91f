//! The store's error type.

use std::io;
use std::path::PathBuf;

use super::MAX_PAYLOAD;
use crate::safefs::fsutil::{FsError, ReadError};
use crate::safefs::trust::TrustError;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The store root is not a trusted directory.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// A file in the store is not a private regular file of ours, or is
    /// too large.
    #[error("{0}; inspect it, then remove it (kubelet-pivot rewrites what it needs) or run `kubelet-pivot checkpoint reset`")]
    Unsafe(ReadError),
    #[error(
        "{path} is a symlink; kubelet-pivot refuses symlinks in the checkpoint store (remove it)"
    )]
    Symlink { path: PathBuf },
    #[error("{path} is corrupt ({reason}); it was not written by kubelet-pivot's atomic writer: inspect it, then remove it or run `kubelet-pivot checkpoint reset`")]
    Corrupt { path: PathBuf, reason: String },
    #[error("invalid payload key {key:?}: {reason}")]
    BadKey { key: String, reason: &'static str },
    #[error("payload of {size} bytes exceeds the {MAX_PAYLOAD}-byte limit")]
    TooLarge { size: usize },
    /// A node override longer than the store records.
    #[error("the node override is {size} bytes long; at most {max} are recorded")]
    OverridesTooLong { size: usize, max: usize },
    #[error("invalid {what} {value:?}: {reason}")]
    BadSource {
        what: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("checkpoint {uid}/{resource_version} not found in {dir}")]
    MissingCheckpoint {
        uid: String,
        resource_version: String,
        dir: PathBuf,
    },
    #[error("failed to lock the store ({path}): {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
