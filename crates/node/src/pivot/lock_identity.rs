//! The lock file by identity: its directory's device and inode and its name.
//!
//! A path string differs between the host and a pod (`/var/run/lock` on the
//! host may be `/host/lock` in the container), so the identity is the lock
//! directory's device and inode and the file's name: a bind mount preserves
//! both. The lock file's own inode is not used: it may be replaced (see
//! `pivot::lock`), the directory and name stay. What the node records and
//! decides with it is in [`super::lock_record`].

use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The lock file by identity: its directory's device and inode, its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockIdentity {
    pub dir_dev: u64,
    pub dir_ino: u64,
    pub name: String,
}

impl LockIdentity {
    /// The identity of `path` (its directory must exist; the file need not).
    pub fn of(path: &Path) -> io::Result<LockIdentity> {
        let name = path
            .file_name()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("lock path {} names no file", path.display()),
                )
            })?
            .to_string_lossy()
            .into_owned();
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let meta = std::fs::metadata(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        Ok(LockIdentity {
            dir_dev: meta.dev(),
            dir_ino: meta.ino(),
            name,
        })
    }
}

impl fmt::Display for LockIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = (
            nix::sys::stat::major(self.dir_dev),
            nix::sys::stat::minor(self.dir_dev),
        );
        write!(
            f,
            "file {:?} in directory {major}:{minor} inode {}",
            self.name, self.dir_ino
        )
    }
}

/// A lock file as one supervisor names it: the path it was given (in its own
/// mount namespace) and the identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockRef {
    pub path: PathBuf,
    pub identity: LockIdentity,
}

impl LockRef {
    pub fn of(path: &Path) -> io::Result<LockRef> {
        Ok(LockRef {
            path: path.to_path_buf(),
            identity: LockIdentity::of(path)?,
        })
    }
}

impl fmt::Display for LockRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.path.display(), self.identity)
    }
}
