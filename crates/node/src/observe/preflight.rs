//! What an operator command (`status`, `checkpoint ...`) checks before it
//! reads or writes anything: that the node paths it was given exist (a typo
//! must not create a store no supervisor reads, nor report `NOT locked`
//! beside a live holder), and that it may read them (the state directory and
//! the store are root's and 0700: a non-root `status` would otherwise report
//! an empty node).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::config::store::Store;

/// Exit code of an operator command that needs root to read the node's state.
pub const EXIT_NEEDS_ROOT: i32 = 5;

/// A node path an operator command names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodePath {
    LockFile,
    Store,
    StateDir,
}

impl NodePath {
    fn name(self) -> &'static str {
        match self {
            NodePath::LockFile => "lock file",
            NodePath::Store => "checkpoint store",
            NodePath::StateDir => "state directory",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            NodePath::LockFile => "--lock-file",
            NodePath::Store => "--dynamic-config-dir",
            NodePath::StateDir => "--state-dir",
        }
    }
}

/// Why an operator command stops before it starts.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A path that does not exist: a typo, or no supervisor ever ran with it.
    #[error("the {} {} ({}) does not exist: check the path (a supervisor creates it when it starts; this command creates nothing)", .what.name(), .path.display(), .what.flag())]
    Missing { what: NodePath, path: PathBuf },
    /// The node's state is root's.
    #[error("{command} needs root: cannot read {} (permission denied); run it with sudo", .path.display())]
    NeedsRoot {
        command: &'static str,
        path: PathBuf,
    },
    /// Anything else that stops the look at a path.
    #[error("cannot read the {} {} ({}): {source}", .what.name(), .path.display(), .what.flag())]
    Io {
        what: NodePath,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Refusal {
    /// Whether this is the missing-root refusal (its own exit code).
    pub fn needs_root(&self) -> bool {
        matches!(self, Refusal::NeedsRoot { .. })
    }
}

/// Looks at `path`: `Ok(true)` when it exists and (a directory) can be
/// listed, `Ok(false)` when it does not exist.
fn look(command: &'static str, what: NodePath, path: &Path, list: bool) -> Result<bool, Refusal> {
    let result = std::fs::symlink_metadata(path).and_then(|meta| {
        if list && meta.is_dir() {
            std::fs::read_dir(path).map(drop)
        } else {
            Ok(())
        }
    });
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Err(Refusal::NeedsRoot {
            command,
            path: path.to_path_buf(),
        }),
        Err(source) => Err(Refusal::Io {
            what,
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn require(command: &'static str, what: NodePath, path: &Path, list: bool) -> Result<(), Refusal> {
    if look(command, what, path, list)? {
        Ok(())
    } else {
        Err(Refusal::Missing {
            what,
            path: path.to_path_buf(),
        })
    }
}

/// `status`: the lock file and the store must exist, the state directory
/// may be missing (no supervisor ran with it yet: `status` says so), and all
/// must be readable.
pub fn for_status(lock: &Path, state_dir: &Path, store: &Path) -> Result<(), Refusal> {
    const COMMAND: &str = "status";
    require(COMMAND, NodePath::LockFile, lock, false)?;
    look(COMMAND, NodePath::StateDir, state_dir, true)?;
    require(COMMAND, NodePath::Store, store, true)
}

/// `checkpoint ...`: the store must exist and be readable.
pub fn for_checkpoint(store: &Path) -> Result<(), Refusal> {
    require("checkpoint", NodePath::Store, store, true)
}

/// Why a store looks unused by any supervisor, for the warning of
/// `checkpoint assign`: no supervisor has ever started a kubelet with it.
/// Every supervisor records the config it starts a kubelet with in the
/// store (`v1/effective.json`) before the kubelet runs, so a store without
/// that record has never been a running supervisor's.
pub fn unused_store(store: &Path) -> Option<String> {
    match Store::open_read_only(store).effective_record() {
        Ok(Some(_)) => None,
        Ok(None) => Some(format!(
            "no supervisor has started a kubelet with the checkpoint store {} (it holds no effective-config record): the assignment waits for a supervisor started with --dynamic-config-dir {}",
            store.display(),
            store.display()
        )),
        // Unreadable: the command's own read reports it.
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_paths_are_refused_and_nothing_is_created() {
        let d = tempfile::tempdir().unwrap();
        let lock = d.path().join("lock");
        let store = d.path().join("store");
        let err = for_status(&lock, &store.join("lock"), &store).unwrap_err();
        assert!(
            matches!(
                err,
                Refusal::Missing {
                    what: NodePath::LockFile,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains(&lock.display().to_string()));
        std::fs::write(&lock, b"").unwrap();
        let err = for_status(&lock, &store.join("lock"), &store).unwrap_err();
        assert!(
            matches!(
                err,
                Refusal::Missing {
                    what: NodePath::Store,
                    ..
                }
            ),
            "{err}"
        );
        assert!(for_checkpoint(&store).is_err());
        assert!(!store.exists());
        std::fs::create_dir(&store).unwrap();
        for_status(&lock, &store.join("lock"), &store).unwrap();
        for_checkpoint(&store).unwrap();
        assert!(unused_store(&store).is_some());
    }
}
