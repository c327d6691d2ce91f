//! Trusted directories: where kubelet-pivot keeps what it acts on (the
//! holder record, the claims, the checkpoint store).
//!
//! A directory is trusted when only kubelet-pivot's uid can change what it
//! names: it is opened with `O_NOFOLLOW|O_DIRECTORY` and checked through that
//! descriptor (a directory, owned by our effective uid, not writable by group
//! or others), and every ancestor up to `/` is owned by root or by us and is
//! either not writable by group or others, or sticky (like `/tmp`: others may
//! add entries there but cannot rename or remove ours). Nothing a local user
//! can do then replaces a trusted directory or a file in it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::safefs::fsutil;

/// Mode kubelet-pivot gives a trusted directory it creates.
pub const TRUSTED_DIR_MODE: u32 = 0o700;
/// Mode of ancestors it creates on the way.
const PARENT_DIR_MODE: u32 = 0o755;

/// Why a directory is not trusted. Each message names the path and says
/// what to do.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{what} {path} is a symlink; kubelet-pivot refuses to follow it. Remove it (kubelet-pivot creates the directory itself) or pass the real path")]
    Symlink { what: &'static str, path: PathBuf },
    #[error("{what} {path} is a {kind}, not a directory; remove it or pass another path")]
    NotDir {
        what: &'static str,
        path: PathBuf,
        kind: &'static str,
    },
    #[error("{what} {path} is owned by uid {uid}, not by uid {expected} (kubelet-pivot's); another user could plant files in it. Remove it, or `chown {expected} {path}` if you created it")]
    Owner {
        what: &'static str,
        path: PathBuf,
        uid: u32,
        expected: u32,
    },
    #[error("{what} {path} has mode {mode:04o}: group or others can write it and plant files; run `chmod go-w {path}`")]
    Writable {
        what: &'static str,
        path: PathBuf,
        mode: u32,
    },
    #[error("{what} {path} lies below {ancestor}, which {problem}; another user could replace it. Use a path below root-owned directories")]
    Ancestor {
        what: &'static str,
        path: PathBuf,
        ancestor: PathBuf,
        problem: String,
    },
    #[error("cannot {op} {what} {path}: {source}")]
    Io {
        op: &'static str,
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Our effective uid: the owner every trusted file and directory must have.
pub fn my_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Creates `path` (mode 0700; missing ancestors 0755) if it does not exist,
/// then verifies it. `what` names it in messages ("state directory").
pub fn ensure_dir(path: &Path, what: &'static str) -> Result<File, TrustError> {
    if std::fs::symlink_metadata(path).is_err() {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsutil::ensure_dir(parent, PARENT_DIR_MODE).map_err(|e| TrustError::Io {
                op: "create",
                what,
                path: parent.to_path_buf(),
                source: io::Error::new(e.io_error().kind(), e.io_error().to_string()),
            })?;
        }
        match std::fs::DirBuilder::new()
            .mode(TRUSTED_DIR_MODE)
            .create(path)
        {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(TrustError::Io {
                    op: "create",
                    what,
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
    verify_dir(path, what)
}

/// Verifies an existing directory; returns the descriptor it checked.
pub fn verify_dir(path: &Path, what: &'static str) -> Result<File, TrustError> {
    let dir = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(libc::ELOOP) => TrustError::Symlink {
                what,
                path: path.to_path_buf(),
            },
            // O_NOFOLLOW|O_DIRECTORY on a symlink fails with ENOTDIR.
            Some(libc::ENOTDIR) => match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => TrustError::Symlink {
                    what,
                    path: path.to_path_buf(),
                },
                m => TrustError::NotDir {
                    what,
                    path: path.to_path_buf(),
                    kind: m
                        .map(|m| fsutil::file_kind(&m.file_type()))
                        .unwrap_or("file"),
                },
            },
            _ => TrustError::Io {
                op: "open",
                what,
                path: path.to_path_buf(),
                source,
            },
        })?;
    let meta = dir.metadata().map_err(|source| TrustError::Io {
        op: "stat",
        what,
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(TrustError::NotDir {
            what,
            path: path.to_path_buf(),
            kind: fsutil::file_kind(&meta.file_type()),
        });
    }
    let me = my_uid();
    if meta.uid() != me {
        return Err(TrustError::Owner {
            what,
            path: path.to_path_buf(),
            uid: meta.uid(),
            expected: me,
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(TrustError::Writable {
            what,
            path: path.to_path_buf(),
            mode: meta.mode() & 0o7777,
        });
    }
    verify_ancestors(path, what, me)?;
    Ok(dir)
}

/// Every ancestor must be owned by root or us, and be either closed to
/// writes by others or sticky.
fn verify_ancestors(path: &Path, what: &'static str, me: u32) -> Result<(), TrustError> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|source| TrustError::Io {
                op: "resolve",
                what,
                path: path.to_path_buf(),
                source,
            })?
            .join(path)
    };
    for ancestor in absolute.ancestors().skip(1) {
        let meta = std::fs::metadata(ancestor).map_err(|source| TrustError::Io {
            op: "stat",
            what,
            path: ancestor.to_path_buf(),
            source,
        })?;
        let problem = if meta.uid() != 0 && meta.uid() != me {
            Some(format!("is owned by uid {}", meta.uid()))
        } else if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
            Some(format!(
                "is writable by group or others without the sticky bit (mode {:04o})",
                meta.mode() & 0o7777
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(TrustError::Ancestor {
                what,
                path: path.to_path_buf(),
                ancestor: ancestor.to_path_buf(),
                problem,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_and_accepts_a_private_directory() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("a/state");
        ensure_dir(&state, "state directory").unwrap();
        let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        verify_dir(&state, "state directory").unwrap();
    }

    #[test]
    fn refuses_symlink_writable_and_file() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        ensure_dir(&real, "state directory").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(matches!(
            verify_dir(&link, "state directory"),
            Err(TrustError::Symlink { .. })
        ));
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = verify_dir(&real, "state directory").unwrap_err();
        assert!(
            matches!(err, TrustError::Writable { mode: 0o777, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("chmod go-w"), "{err}");
        let file = d.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(matches!(
            verify_dir(&file, "state directory"),
            Err(TrustError::NotDir { .. })
        ));
    }

    #[test]
    fn refuses_a_writable_ancestor_without_sticky_bit() {
        let d = tempfile::tempdir().unwrap();
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let state = open.join("state");
        let err = ensure_dir(&state, "state directory").unwrap_err();
        assert!(matches!(err, TrustError::Ancestor { .. }), "{err}");
        // Sticky (like /tmp) is fine: others cannot rename or remove our entries.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        verify_dir(&state, "state directory").unwrap();
    }
}
