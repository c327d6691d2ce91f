//! The one way kubelet-pivot writes a file that matters: a temp file in the
//! same directory, fsync, rename over the target, fsync the directory. A
//! reader (or a crash at any instruction) sees the old or the new content,
//! never a mix.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Errors of file operations, naming the path.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("failed to {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl FsError {
    pub fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        FsError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// The underlying OS error.
    pub fn io_error(&self) -> &io::Error {
        match self {
            FsError::Io { source, .. } => source,
        }
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Temp files start with this prefix; readers listing a directory skip them.
pub const TEMP_PREFIX: &str = ".tmp.";

/// Creates a directory (and parents) with `mode`, leaving existing ones alone.
pub fn ensure_dir(path: &Path, mode: u32) -> Result<(), FsError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(|e| FsError::io("create directory", path, e))
}

/// Writes `data` to `path` atomically with file mode `mode`, durably.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<(), FsError> {
    write_atomic_with(path, data, mode, Durability::Durable)
}

/// Writes `data` to `path` atomically (temp file, rename), with the fsyncs
/// `durability` asks for.
pub fn write_atomic_with(
    path: &Path,
    data: &[u8],
    mode: u32,
    durability: Durability,
) -> Result<(), FsError> {
    let (tmp, mut file) = create_temp_beside(path, mode)?;
    let result = file
        .write_all(data)
        .map_err(|e| FsError::io("write", &tmp, e))
        .and_then(|()| commit_temp_with(&tmp, &file, path, durability));
    if result.is_err() {
        // Best effort: the temp file is garbage if the rename did not happen.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates a fresh temp file in the directory of `path`; the caller commits
/// it with [`commit_temp`]. Used where the file must be prepared (for example
/// locked) before it becomes visible under its real name.
pub fn create_temp_beside(path: &Path, mode: u32) -> Result<(PathBuf, File), FsError> {
    let dir = parent_of(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!("{TEMP_PREFIX}{name}.{}.{n}", std::process::id()));
    let file = OpenOptions::new()
        .write(true)
        .read(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(|e| FsError::io("create temp file", &tmp, e))?;
    // create_new honours the umask; set the mode explicitly.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| FsError::io("chmod temp file", &tmp, e))?;
    Ok((tmp, file))
}

/// fsyncs `file` (open on `tmp`), renames it to `path` and fsyncs the directory.
pub fn commit_temp(tmp: &Path, file: &File, path: &Path) -> Result<(), FsError> {
    file.sync_all().map_err(|e| FsError::io("fsync", tmp, e))?;
    fs::rename(tmp, path).map_err(|e| FsError::io("rename temp file onto", path, e))?;
    sync_dir(parent_of(path))
}

/// Whether a write must survive a power loss. Runtime state that is checked
/// for liveness on every read (the holder record, claims: a record of
/// another boot is never live) only needs atomicity, and skipping the
/// fsyncs keeps them off the handoff's critical path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the file and its directory (the checkpoint store, I4).
    Durable,
    /// Atomic rename only.
    Volatile,
}

/// Renames a prepared temp file into place, with or without fsyncs.
pub fn commit_temp_with(
    tmp: &Path,
    file: &File,
    path: &Path,
    durability: Durability,
) -> Result<(), FsError> {
    match durability {
        Durability::Durable => commit_temp(tmp, file, path),
        Durability::Volatile => {
            fs::rename(tmp, path).map_err(|e| FsError::io("rename temp file onto", path, e))
        }
    }
}

/// fsyncs a directory so a rename or unlink in it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), FsError> {
    let d = File::open(dir).map_err(|e| FsError::io("open directory", dir, e))?;
    d.sync_all()
        .map_err(|e| FsError::io("fsync directory", dir, e))
}

/// Removes a file and fsyncs its directory; a missing file is fine.
pub fn remove_durable(path: &Path) -> Result<(), FsError> {
    remove_with(path, Durability::Durable)
}

/// Removes a file, with the directory fsync `durability` asks for; a
/// missing file is fine.
pub fn remove_with(path: &Path, durability: Durability) -> Result<(), FsError> {
    match fs::remove_file(path) {
        Ok(()) if durability == Durability::Durable => sync_dir(parent_of(path)),
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(FsError::io("remove", path, e)),
    }
}

/// Who must own a file kubelet-pivot reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Any owner (operator input such as `checkpoint assign FILE`).
    Any,
    /// This uid (files in kubelet-pivot's own directories: its effective uid).
    Uid(u32),
    /// Root or the calling process's effective uid (files an operator's
    /// config names, such as a kubeconfig's client key).
    RootOrMe,
}

impl Owner {
    /// Owned by the calling process's effective uid.
    pub fn me() -> Owner {
        Owner::Uid(nix::unistd::geteuid().as_raw())
    }
}

/// What a file must be before kubelet-pivot reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPolicy {
    /// What the file holds, for messages ("holder record", "claim", ...).
    pub what: &'static str,
    /// Largest size accepted, in bytes.
    pub max_len: u64,
    pub owner: Owner,
    /// Refuse files writable by group or others.
    pub private: bool,
}

/// Why a file was not read. Every variant names the file and what it holds.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{what} {path} is a symlink; kubelet-pivot does not follow links here")]
    Symlink { what: &'static str, path: PathBuf },
    #[error(
        "{what} {path} is a {kind}, not a regular file; kubelet-pivot reads only regular files"
    )]
    NotRegular {
        what: &'static str,
        path: PathBuf,
        kind: &'static str,
    },
    #[error("{what} {path} is owned by uid {uid}, not by uid {expected} (kubelet-pivot's); it is not trusted")]
    Owner {
        what: &'static str,
        path: PathBuf,
        uid: u32,
        expected: u32,
    },
    #[error("{what} {path} is writable by group or others (mode {mode:04o}); it is not trusted")]
    Writable {
        what: &'static str,
        path: PathBuf,
        mode: u32,
    },
    #[error("{what} {path} is too large: more than {max} bytes")]
    TooLarge {
        what: &'static str,
        path: PathBuf,
        max: u64,
    },
    #[error("cannot read {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl ReadError {
    /// A short word for the kind of problem (permission, corrupt, ...), for
    /// `status` and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ReadError::Symlink { .. } => "symlink",
            ReadError::NotRegular { .. } => "not a regular file",
            ReadError::Owner { .. } | ReadError::Writable { .. } => "untrusted owner or mode",
            ReadError::TooLarge { .. } => "too large",
            ReadError::Io { source, .. } if source.kind() == io::ErrorKind::PermissionDenied => {
                "permission denied"
            }
            ReadError::Io { .. } => "unreadable",
        }
    }
}

/// The kind of a non-regular file, for messages.
pub fn file_kind(ft: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_file() {
        "regular file"
    } else if ft.is_dir() {
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

/// Opens `path` for reading without following a symlink, without blocking
/// (a FIFO opens at once instead of waiting for a writer) and without
/// becoming a controlling terminal, then checks with fstat that it is a
/// regular file of the expected owner and mode, no larger than the policy's
/// cap. Returns the file and the metadata it checked; `Ok(None)` when the
/// file does not exist.
pub fn open_checked(
    path: &Path,
    policy: &ReadPolicy,
) -> Result<Option<(File, fs::Metadata)>, ReadError> {
    use std::os::unix::fs::MetadataExt;
    let what = policy.what;
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(ReadError::Symlink {
                what,
                path: path.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(ReadError::Io {
                what,
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let meta = file.metadata().map_err(|source| ReadError::Io {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    let ft = meta.file_type();
    if !ft.is_file() {
        return Err(ReadError::NotRegular {
            what,
            path: path.to_path_buf(),
            kind: file_kind(&ft),
        });
    }
    let expected = match policy.owner {
        Owner::Any => None,
        Owner::Uid(uid) => Some(uid),
        Owner::RootOrMe => {
            let me = nix::unistd::geteuid().as_raw();
            (meta.uid() != 0).then_some(me)
        }
    };
    if let Some(expected) = expected {
        if meta.uid() != expected {
            return Err(ReadError::Owner {
                what,
                path: path.to_path_buf(),
                uid: meta.uid(),
                expected,
            });
        }
    }
    if policy.private && meta.mode() & 0o022 != 0 {
        return Err(ReadError::Writable {
            what,
            path: path.to_path_buf(),
            mode: meta.mode() & 0o7777,
        });
    }
    if meta.len() > policy.max_len {
        return Err(ReadError::TooLarge {
            what,
            path: path.to_path_buf(),
            max: policy.max_len,
        });
    }
    Ok(Some((file, meta)))
}

/// Reads a file through [`open_checked`]: never more than the policy's cap
/// (a file that grows while it is read is refused, not read whole).
/// `Ok(None)` when the file does not exist.
pub fn read_bounded(path: &Path, policy: &ReadPolicy) -> Result<Option<Vec<u8>>, ReadError> {
    use std::io::Read;
    let Some((file, meta)) = open_checked(path, policy)? else {
        return Ok(None);
    };
    let mut buf = Vec::with_capacity(meta.len().min(policy.max_len) as usize);
    file.take(policy.max_len.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|source| ReadError::Io {
            what: policy.what,
            path: path.to_path_buf(),
            source,
        })?;
    if buf.len() as u64 > policy.max_len {
        return Err(ReadError::TooLarge {
            what: policy.what,
            path: path.to_path_buf(),
            max: policy.max_len,
        });
    }
    Ok(Some(buf))
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_sets_mode() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f.json");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let leftovers: Vec<_> = fs::read_dir(d.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(TEMP_PREFIX))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn bounded_read_refuses_symlink_and_reads_the_target() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("t");
        fs::write(&target, b"x").unwrap();
        let link = d.path().join("l");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let policy = ReadPolicy {
            what: "test file",
            max_len: 10,
            owner: Owner::Any,
            private: false,
        };
        assert!(read_bounded(&link, &policy).is_err());
        assert_eq!(read_bounded(&target, &policy).unwrap().unwrap(), b"x");
        assert!(read_bounded(&d.path().join("missing"), &policy)
            .unwrap()
            .is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Whatever the size and the cap, a read returns the whole file when it
        /// fits and "too large" when it does not; it never returns more than the
        /// cap.
        #[test]
        fn bounded_reads_never_exceed_their_cap(len in 0usize..20_000, cap in 0u64..20_000) {
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join("f");
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            fs::write(&p, &data).unwrap();
            let policy = ReadPolicy { what: "test file", max_len: cap, owner: Owner::Any, private: false };
            match read_bounded(&p, &policy) {
                Ok(Some(got)) => {
                    proptest::prop_assert!(got.len() as u64 <= cap);
                    proptest::prop_assert_eq!(got, data);
                }
                Err(ReadError::TooLarge { max, .. }) => {
                    proptest::prop_assert_eq!(max, cap);
                    proptest::prop_assert!(len as u64 > cap);
                }
                other => proptest::prop_assert!(false, "unexpected {:?}", other.map(|o| o.map(|v| v.len()))),
            }
        }
    }

    #[test]
    fn odd_files_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let policy = ReadPolicy {
            what: "test file",
            max_len: 1 << 20,
            owner: Owner::Any,
            private: false,
        };
        assert!(matches!(
            read_bounded(&fifo, &policy),
            Err(ReadError::NotRegular { kind: "fifo", .. })
        ));
        assert!(matches!(
            read_bounded(Path::new("/dev/zero"), &policy),
            Err(ReadError::NotRegular {
                kind: "character device",
                ..
            })
        ));
        let link = d.path().join("link");
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        assert!(matches!(
            read_bounded(&link, &policy),
            Err(ReadError::Symlink { .. })
        ));
        let mine = d.path().join("mine");
        fs::write(&mine, b"x").unwrap();
        let other = ReadPolicy {
            owner: Owner::Uid(nix::unistd::geteuid().as_raw() + 1),
            ..policy
        };
        assert!(matches!(
            read_bounded(&mine, &other),
            Err(ReadError::Owner { .. })
        ));
    }
}
