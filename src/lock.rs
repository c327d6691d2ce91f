//! The node's kubelet lock file: open it safely, flock it, and tell whether
//! the path still names the file we hold.
//!
//! flock(2) locks belong to the open file description. kubelet-pivot opens
//! the lock file once per process and keeps that descriptor for its whole
//! life: waiting again after a yield reuses it, so it never causes a second
//! `open` event that a holder could mistake for a contender.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::fsutil;
use crate::procfs::FileKey;

/// Mode of the lock file when kubelet-pivot creates it.
pub const LOCK_FILE_MODE: u32 = 0o600;
/// Mode of the lock directory when kubelet-pivot creates it.
pub const LOCK_DIR_MODE: u32 = 0o755;

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("lock file {path} is a symlink; kubelet-pivot refuses to follow it (it could point anywhere). Remove the symlink or pass --lock-file with the real path")]
    Symlink { path: PathBuf },
    #[error(
        "lock file {path} is a {kind}, not a regular file; remove it or pass another --lock-file"
    )]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("cannot create lock directory {path}: {source}; create it (mode 0755) or pass another --lock-file")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot open lock file {path}: {source}; check that its directory is writable by kubelet-pivot")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("flock on lock file {path} failed: {source}")]
    Flock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// An open lock file. Cloning shares the same open file description.
#[derive(Debug, Clone)]
pub struct LockFile {
    path: PathBuf,
    file: Arc<File>,
    key: FileKey,
}

fn file_kind(ft: &fs::FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

/// Checks the lock path without opening it: refuses symlinks and non-regular
/// files. A missing path is fine (it will be created).
pub fn check_path(path: &Path) -> Result<(), LockError> {
    match fs::symlink_metadata(path) {
        Ok(meta) => {
            let ft = meta.file_type();
            if ft.is_symlink() {
                return Err(LockError::Symlink {
                    path: path.to_path_buf(),
                });
            }
            if !ft.is_file() {
                return Err(LockError::NotRegular {
                    path: path.to_path_buf(),
                    kind: file_kind(&ft),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LockError::Open {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// Checks the lock path and creates its directory (0755) if missing, so
/// that claims can be written beside it before the lock file is opened.
pub fn prepare(path: &Path) -> Result<(), LockError> {
    check_path(path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            fsutil::ensure_dir(dir, LOCK_DIR_MODE).map_err(|e| LockError::CreateDir {
                path: dir.to_path_buf(),
                source: io::Error::new(e.io_error().kind(), e.io_error().to_string()),
            })?;
        }
    }
    Ok(())
}

impl LockFile {
    /// Opens (creating if needed) the lock file `O_RDWR|O_CREAT|O_CLOEXEC|O_NOFOLLOW`.
    pub fn open(path: &Path) -> Result<Self, LockError> {
        prepare(path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(LOCK_FILE_MODE)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    LockError::Symlink {
                        path: path.to_path_buf(),
                    }
                } else {
                    LockError::Open {
                        path: path.to_path_buf(),
                        source: e,
                    }
                }
            })?;
        let meta = file.metadata().map_err(|e| LockError::Open {
            path: path.to_path_buf(),
            source: e,
        })?;
        if !meta.file_type().is_file() {
            return Err(LockError::NotRegular {
                path: path.to_path_buf(),
                kind: file_kind(&meta.file_type()),
            });
        }
        Ok(LockFile {
            path: path.to_path_buf(),
            key: FileKey::of_metadata(&meta),
            file: Arc::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Device and inode of the file we hold open.
    pub fn key(&self) -> FileKey {
        self.key
    }

    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Blocks until the exclusive lock is ours. Call from a blocking thread.
    pub fn acquire_blocking(&self) -> Result<(), LockError> {
        loop {
            // fs2's method, named explicitly: std's File::lock shadows it.
            match fs2::FileExt::lock_exclusive(&*self.file) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(LockError::Flock {
                        path: self.path.clone(),
                        source: e,
                    })
                }
            }
        }
    }

    /// Takes the lock if it is free; `Ok(false)` when someone else holds it.
    pub fn try_acquire(&self) -> Result<bool, LockError> {
        match fs2::FileExt::try_lock_exclusive(&*self.file) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == fs2::lock_contended_error().raw_os_error() => Ok(false),
            Err(e) => Err(LockError::Flock {
                path: self.path.clone(),
                source: e,
            }),
        }
    }

    /// Releases the lock (for the whole open file description, including any
    /// copy a child inherited).
    pub fn release(&self) -> Result<(), LockError> {
        fs2::FileExt::unlock(&*self.file).map_err(|e| LockError::Flock {
            path: self.path.clone(),
            source: e,
        })
    }

    /// Whether the path still names the file we hold open: false after the
    /// file was deleted, renamed away or replaced.
    pub fn path_is_ours(&self) -> bool {
        let held_links = match self.file.metadata() {
            Ok(m) => m.nlink(),
            Err(_) => return false,
        };
        if held_links == 0 {
            return false;
        }
        match fs::symlink_metadata(&self.path) {
            Ok(m) => m.file_type().is_file() && FileKey::of_metadata(&m) == self.key,
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_symlink_and_directory() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        fs::write(&real, b"").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(matches!(
            LockFile::open(&link),
            Err(LockError::Symlink { .. })
        ));
        let dir = d.path().join("dir");
        fs::create_dir(&dir).unwrap();
        assert!(matches!(
            LockFile::open(&dir),
            Err(LockError::NotRegular {
                kind: "directory",
                ..
            })
        ));
    }

    #[test]
    fn creates_parent_and_detects_replacement() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b/kubelet.lock");
        let lock = LockFile::open(&p).unwrap();
        assert!(lock.try_acquire().unwrap());
        assert!(lock.path_is_ours());
        // A second open file description cannot take it.
        let other = LockFile::open(&p).unwrap();
        assert!(!other.try_acquire().unwrap());
        lock.release().unwrap();
        assert!(other.try_acquire().unwrap());
        fs::remove_file(&p).unwrap();
        assert!(!lock.path_is_ours());
        fs::write(&p, b"").unwrap();
        assert!(!lock.path_is_ours());
    }
}
