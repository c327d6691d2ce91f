//! The state directory: where the supervisors of a node keep the holder
//! record and their claims. Only kubelet-pivot's uid can write it (see
//! `trust`), so nothing read from it was planted by a local user.
//!
//! Layout (default `<dynamic-config-dir>/lock`, shared by the bootstrap and
//! the DaemonSet through the checkpoint directory's mount):
//!
//! ```text
//! holder.json                      the holder record (0600)
//! takeover.lock                    flock'ed around a takeover of the record (0600)
//! claims/<pid>-<starttime>.json    one claim per live supervisor (0600, flocked by its owner)
//! ```

use std::path::{Path, PathBuf};

use crate::safefs::trust::{self, TrustError};

/// Name of the state directory inside the checkpoint directory.
pub const DEFAULT_SUBDIR: &str = "lock";

/// A state directory. `open` verifies it; `at` only names it (for readers
/// that must not create anything, such as `status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// The default state directory for a checkpoint directory.
    pub fn default_for(dynamic_config_dir: &Path) -> PathBuf {
        dynamic_config_dir.join(DEFAULT_SUBDIR)
    }

    /// Creates (0700) and verifies the directory and its claims directory.
    pub fn open(root: &Path) -> Result<StateDir, TrustError> {
        trust::ensure_dir(root, "state directory")?;
        let dir = StateDir {
            root: root.to_path_buf(),
        };
        trust::ensure_dir(&dir.claims_dir(), "claims directory")?;
        Ok(dir)
    }

    /// Names a state directory without creating or checking it.
    pub fn at(root: &Path) -> StateDir {
        StateDir {
            root: root.to_path_buf(),
        }
    }

    /// Verifies an existing state directory and its claims directory (for
    /// readers: nothing is created).
    pub fn verify(&self) -> Result<(), TrustError> {
        trust::verify_dir(&self.root, "state directory")?;
        trust::verify_dir(&self.claims_dir(), "claims directory")?;
        Ok(())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn holder_path(&self) -> PathBuf {
        self.root.join("holder.json")
    }

    pub fn takeover_path(&self) -> PathBuf {
        self.root.join("takeover.lock")
    }

    pub fn claims_dir(&self) -> PathBuf {
        self.root.join("claims")
    }
}
