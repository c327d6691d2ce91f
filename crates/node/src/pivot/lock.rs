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
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::procfs::FileKey;
use crate::safefs::fsutil::{self, file_kind};
use crate::safefs::trust::my_uid;

/// Mode of the lock file: only its owner (root) may open it, so no other
/// user can flock it (the kubelet creates it with the same mode).
/// The node's kubelet lock file when no `--lock-file` is given.
pub const DEFAULT_LOCK_FILE: &str = "/var/run/lock/kubelet.lock";

pub const LOCK_FILE_MODE: u32 = 0o600;
/// Mode of the lock directory when kubelet-pivot creates it.
pub const LOCK_DIR_MODE: u32 = 0o755;
/// How often a planted file is replaced before giving up (somebody keeps
/// planting it again in the instant between removal and creation).
const REPLACE_ATTEMPTS: usize = 10;

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
    #[error("lock directory {dir} does not exist{hint}")]
    NoDir { dir: PathBuf, hint: &'static str },
    #[error("cannot open lock file {path}: {source}; check that its directory is writable by kubelet-pivot")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot remove {kind} {path} planted by uid {uid} in place of the lock file: {source}; remove it by hand")]
    Planted {
        path: PathBuf,
        kind: &'static str,
        uid: u32,
        #[source]
        source: io::Error,
    },
    #[error("lock file {path} was planted again by another user {REPLACE_ATTEMPTS} times while kubelet-pivot replaced it; find who writes there")]
    Contested { path: PathBuf },
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

/// Checks the lock path without opening it: refuses a symlink or a
/// non-regular file that *we* own (an operator's mistake). A missing path
/// is fine (it will be created), and so is anything another user planted
/// there (it will be replaced, see [`LockFile::open`]).
pub fn check_path(path: &Path) -> Result<(), LockError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.uid() != my_uid() => Ok(()),
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

fn lock_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Whose lock directory kubelet-pivot may create when it is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingDir {
    /// The bootstrap with the documented default lock file: its directory
    /// (`/var/run/lock`) is a tmpfs a minimal host may not have yet.
    Create,
    /// Any other lock file of the bootstrap: a missing directory is a typo
    /// (a lock file nobody else uses), not something to create silently.
    RefuseTypo,
    /// A self-hosted supervisor: a missing directory is the host's not
    /// mounted into the pod (its kubelet would lock a private file).
    RefuseNotMounted,
}

/// Refuses a missing lock directory unless `missing` allows creating it.
pub fn check_dir(path: &Path, missing: MissingDir) -> Result<(), LockError> {
    let dir = lock_dir(path);
    if missing == MissingDir::Create || fs::symlink_metadata(dir).is_ok() {
        return Ok(());
    }
    let hint = match missing {
        MissingDir::Create | MissingDir::RefuseTypo => "; kubelet-pivot creates only the default lock file's directory. Check --lock-file for a typo (every supervisor of the node must use the same lock file) or create the directory (mode 0755)",
        MissingDir::RefuseNotMounted => " in this container; is the host's lock directory mounted into the pod (a hostPath volume at the path --lock-file names)? A self-hosted supervisor never creates it: its kubelet would lock a file no other supervisor of the node sees",
    };
    Err(LockError::NoDir {
        dir: dir.to_path_buf(),
        hint,
    })
}

/// Checks the lock path, creates its directory (0755) if missing, and
/// checks that we can write there (to create or replace the lock file).
pub fn prepare(path: &Path) -> Result<(), LockError> {
    check_path(path)?;
    let dir = lock_dir(path);
    if !dir.exists() {
        fsutil::ensure_dir(dir, LOCK_DIR_MODE).map_err(|e| LockError::CreateDir {
            path: dir.to_path_buf(),
            source: io::Error::new(e.io_error().kind(), e.io_error().to_string()),
        })?;
    }
    nix::unistd::access(
        dir,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .map_err(|errno| LockError::Open {
        path: path.to_path_buf(),
        source: io::Error::from(errno),
    })?;
    if let Ok(meta) = fs::metadata(dir) {
        if meta.mode() & 0o002 != 0 && meta.mode() & 0o1000 == 0 {
            tracing::warn!(dir = %dir.display(), mode = format_args!("{:04o}", meta.mode() & 0o7777),
                "the lock directory is world-writable without the sticky bit: any user can remove or replace the lock file; run `chmod +t` on it");
        }
    }
    Ok(())
}

/// Removes what another user planted at the lock path. Removing a name in
/// the lock directory never touches what a symlink points to.
fn remove_planted(path: &Path, meta: &fs::Metadata) -> Result<(), LockError> {
    let kind = file_kind(&meta.file_type());
    tracing::warn!(path = %path.display(), uid = meta.uid(), kind,
        "a {kind} owned by uid {} stands at the lock path; it is not trusted (another user could flock it): removing it and creating the lock file anew", meta.uid());
    let removed = if meta.is_dir() {
        fs::remove_dir(path)
    } else {
        fs::remove_file(path)
    };
    match removed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LockError::Planted {
            path: path.to_path_buf(),
            kind,
            uid: meta.uid(),
            source,
        }),
    }
}

impl LockFile {
    /// Opens (creating if needed) the lock file `O_RDWR|O_CLOEXEC|O_NOFOLLOW`
    /// and checks it through the descriptor: a regular file owned by our uid
    /// with mode 0600. A file of another user at the path (planted in a
    /// world-writable lock directory) is removed and replaced; our own file
    /// with a wider mode is narrowed to 0600.
    pub fn open(path: &Path) -> Result<Self, LockError> {
        prepare(path)?;
        let me = my_uid();
        for _ in 0..REPLACE_ATTEMPTS {
            let file = match fs::symlink_metadata(path) {
                Ok(meta) if meta.uid() != me => {
                    remove_planted(path, &meta)?;
                    continue;
                }
                Ok(_) => Self::open_existing(path)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => Self::create_new(path)?,
                Err(source) => {
                    return Err(LockError::Open {
                        path: path.to_path_buf(),
                        source,
                    })
                }
            };
            let Some(file) = file else { continue };
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
            if meta.uid() != me {
                // Swapped between the lstat and the open: look again.
                continue;
            }
            if meta.mode() & 0o7777 != LOCK_FILE_MODE {
                tracing::warn!(path = %path.display(), mode = format_args!("{:04o}", meta.mode() & 0o7777),
                    "lock file mode is not 0600; narrowing it so that no other user can open and flock it");
                file.set_permissions(fs::Permissions::from_mode(LOCK_FILE_MODE))
                    .map_err(|e| LockError::Open {
                        path: path.to_path_buf(),
                        source: e,
                    })?;
            }
            return Ok(LockFile {
                path: path.to_path_buf(),
                key: FileKey::of_metadata(&meta),
                file: Arc::new(file),
            });
        }
        Err(LockError::Contested {
            path: path.to_path_buf(),
        })
    }

    /// Opens an existing file of ours; `None` when it vanished or became a
    /// symlink in between (the caller looks again).
    fn open_existing(path: &Path) -> Result<Option<File>, LockError> {
        match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
        {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                // A symlink now: ours is refused, another user's replaced.
                check_path(path)?;
                Ok(None)
            }
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => Err(LockError::NotRegular {
                path: path.to_path_buf(),
                kind: "directory",
            }),
            Err(source) => Err(LockError::Open {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Creates the file exclusively; `None` when somebody created one first.
    fn create_new(path: &Path) -> Result<Option<File>, LockError> {
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(LOCK_FILE_MODE)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
        {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            Err(source) => Err(LockError::Open {
                path: path.to_path_buf(),
                source,
            }),
        }
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

    /// Opens the file we hold open once more (through `/proc/self/fd`, so
    /// it is our inode whatever the path names now) and closes it: an
    /// IN_OPEN event for whoever watches it. A waiter that took the lock and
    /// hands it back to the recorded holder wakes the holder this way (its
    /// kubelet had unlocked the inherited descriptor; the holder re-takes
    /// the free lock on that event instead of on a timer).
    pub fn poke(&self) {
        let fd_path = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        if let Err(err) = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&fd_path)
        {
            tracing::warn!(%err, path = %self.path.display(), "cannot reopen the lock file to wake its recorded holder; it re-takes the lock on its next event or watchdog tick");
        }
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
    fn a_missing_lock_directory_is_created_only_when_allowed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("typo").join("kubelet.lock");
        let err = check_dir(&p, MissingDir::RefuseTypo)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("typo") && err.contains(&*d.path().to_string_lossy()),
            "{err}"
        );
        let err = check_dir(&p, MissingDir::RefuseNotMounted)
            .unwrap_err()
            .to_string();
        assert!(err.contains("mounted"), "{err}");
        check_dir(&p, MissingDir::Create).unwrap();
        assert!(!p.parent().unwrap().exists());
        check_dir(&d.path().join("kubelet.lock"), MissingDir::RefuseNotMounted).unwrap();
    }

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
    fn another_users_file_at_the_path_is_replaced_and_ours_narrowed() {
        use std::os::unix::fs::PermissionsExt;
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("kubelet.lock");
        fs::write(&p, b"planted").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o666)).unwrap();
        nix::unistd::chown(&p, Some(65534.into()), Some(65534.into())).unwrap();
        let lock = LockFile::open(&p).unwrap();
        let meta = fs::metadata(&p).unwrap();
        // A new file (inode numbers may be reused, contents are not).
        assert!(fs::read(&p).unwrap().is_empty());
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o600));
        assert_eq!(lock.key(), FileKey::of_metadata(&meta));
        // Our own file with a wide mode is kept and narrowed.
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        let again = LockFile::open(&p).unwrap();
        assert_eq!(again.key(), lock.key());
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o600);
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
