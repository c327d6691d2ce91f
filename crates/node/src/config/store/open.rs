//! Opening the store: its trusted root and directories, their paths, the
//! symlink check below the root, file stamps and the writers' lock.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use super::{Store, StoreError, StoreLock, FILE_MODE, ROOT_WHAT};
use crate::safefs::trust::{self, TrustError};

/// Identity and version of a file as lstat sees it: device, inode, size,
/// modification and change times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    pub fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = fs::symlink_metadata(path).ok()?;
        Some(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

impl Store {
    /// Opens the store for writing, creating its directories (0700) if
    /// needed. The root and its subdirectories must be trusted directories
    /// (owned by our uid, not writable by group or others, no symlink, safe
    /// ancestors): another user must not be able to plant files in them.
    pub fn open(root: &Path) -> Result<Store, StoreError> {
        let store = Store {
            root: root.to_path_buf(),
            verified: true,
        };
        trust::ensure_dir(root, ROOT_WHAT)?;
        for dir in [
            store.meta_dir(),
            store.checkpoints_dir(),
            store.v1_dir(),
            store.effective_dir(),
        ] {
            store.check_no_symlink(&dir)?;
            trust::ensure_dir(&dir, "checkpoint store directory")?;
        }
        Ok(store)
    }

    /// Opens an existing store read-only (for `status`): nothing is created.
    /// Every read first verifies the root (a missing store reads as empty).
    pub fn open_read_only(root: &Path) -> Store {
        Store {
            root: root.to_path_buf(),
            verified: false,
        }
    }

    /// Read-only: whether the store exists, after checking that its root is
    /// a trusted directory. Always true for a store opened for writing.
    pub(super) fn check_root(&self) -> Result<bool, StoreError> {
        if self.verified {
            return Ok(true);
        }
        match trust::verify_dir(&self.root, ROOT_WHAT) {
            Ok(_) => Ok(true),
            Err(TrustError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub(super) fn meta_dir(&self) -> PathBuf {
        self.root.join("meta")
    }
    pub(super) fn checkpoints_dir(&self) -> PathBuf {
        self.root.join("checkpoints")
    }
    pub(super) fn v1_dir(&self) -> PathBuf {
        self.root.join("v1")
    }
    pub(super) fn effective_dir(&self) -> PathBuf {
        self.root.join("effective")
    }
    pub fn meta_path(&self) -> PathBuf {
        self.meta_dir()
    }
    pub fn effective_config_path(&self) -> PathBuf {
        self.effective_dir().join("kubelet-config.json")
    }

    /// Refuses a path below the root any component of which is a symlink.
    pub(super) fn check_no_symlink(&self, path: &Path) -> Result<(), StoreError> {
        let mut cur = PathBuf::new();
        for comp in path.components() {
            cur.push(comp);
            if matches!(comp, Component::RootDir | Component::Prefix(_)) {
                continue;
            }
            // Only components at or below the store root are ours to police.
            if !cur.starts_with(&self.root) {
                continue;
            }
            match fs::symlink_metadata(&cur) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(StoreError::Symlink { path: cur });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Serializes writers (supervisors and the operator CLI).
    pub fn lock(&self) -> Result<StoreLock, StoreError> {
        let path = self.root.join(".store.lock");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| StoreError::Lock {
                path: path.clone(),
                source: e,
            })?;
        loop {
            match fs2::FileExt::lock_exclusive(&file) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(StoreError::Lock { path, source: e }),
            }
        }
        Ok(StoreLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::store::test_source as src;

    #[test]
    fn symlinks_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        fs::write(elsewhere.path().join("assigned"), b"{}").unwrap();
        std::os::unix::fs::symlink(
            elsewhere.path().join("assigned"),
            d.path().join("meta/assigned"),
        )
        .unwrap();
        assert!(matches!(s.assigned(), Err(StoreError::Symlink { .. })));
        std::os::unix::fs::symlink(elsewhere.path(), d.path().join("checkpoints/u9")).unwrap();
        assert!(matches!(
            s.load_checkpoint(&src("u9", "1")),
            Err(StoreError::Symlink { .. })
        ));
    }

    #[test]
    fn an_untrusted_root_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("store");
        Store::open(&root).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
        let err = Store::open(&root).unwrap_err().to_string();
        assert!(err.contains("chmod go-w"), "{err}");
        let ro = Store::open_read_only(&root);
        assert!(matches!(ro.assigned(), Err(StoreError::Trust(_))));
        assert!(ro.list_checkpoints().is_empty());
        // A store that does not exist yet reads as empty.
        let missing = Store::open_read_only(&d.path().join("nope"));
        assert_eq!(missing.assigned().unwrap(), None);
        assert!(missing.bad_configs().unwrap().is_empty());
    }
}
