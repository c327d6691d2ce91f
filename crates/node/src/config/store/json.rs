//! Reading and writing store files: bounded reads of private regular files,
//! JSON records parsed with their path in the error, atomic writes.

use std::path::Path;

use serde::{de::DeserializeOwned, Serialize};

use super::{ConfigSource, SourceCheck, Store, StoreError, FILE_MODE};
use crate::safefs::fsutil::{self, Owner, ReadError, ReadPolicy};

/// How a store file is read: what it is called and how large it may be.
pub(super) fn policy(what: &'static str, max_len: u64) -> ReadPolicy {
    ReadPolicy {
        what,
        max_len,
        owner: Owner::me(),
        private: true,
    }
}

impl Store {
    /// Reads a store file through the bounded reader: a private regular
    /// file of ours, at most `max_len` bytes. `Ok(None)` when absent.
    pub(super) fn read_file(
        &self,
        path: &Path,
        what: &'static str,
        max_len: u64,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        if !self.check_root()? {
            return Ok(None);
        }
        self.check_no_symlink(path)?;
        fsutil::read_bounded(path, &policy(what, max_len)).map_err(|e| match e {
            ReadError::Symlink { path, .. } => StoreError::Symlink { path },
            other => StoreError::Unsafe(other),
        })
    }

    pub(super) fn read_json<T: DeserializeOwned>(
        &self,
        path: &Path,
        what: &'static str,
        max_len: u64,
    ) -> Result<Option<T>, StoreError> {
        let Some(bytes) = self.read_file(path, what, max_len)? else {
            return Ok(None);
        };
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(None);
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })
    }

    pub(super) fn write_json<T: Serialize>(
        &self,
        path: &Path,
        value: &T,
    ) -> Result<(), StoreError> {
        self.check_no_symlink(path)?;
        let data = serde_json::to_vec_pretty(value).map_err(|e| StoreError::Corrupt {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        fsutil::write_atomic(path, &data, FILE_MODE)?;
        Ok(())
    }

    pub(super) fn write_optional(
        &self,
        path: &Path,
        src: Option<&ConfigSource>,
    ) -> Result<(), StoreError> {
        match src {
            Some(s) => {
                s.validate()?;
                self.write_json(path, s)
            }
            None => Ok(fsutil::remove_durable(path)?),
        }
    }
}
