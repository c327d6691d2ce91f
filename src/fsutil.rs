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

/// Writes `data` to `path` atomically with file mode `mode`.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<(), FsError> {
    let (tmp, file) = create_temp_beside(path, mode)?;
    let result = write_and_commit(&tmp, file, path, data);
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

fn write_and_commit(tmp: &Path, mut file: File, path: &Path, data: &[u8]) -> Result<(), FsError> {
    file.write_all(data)
        .map_err(|e| FsError::io("write", tmp, e))?;
    commit_temp(tmp, &file, path)
}

/// fsyncs `file` (open on `tmp`), renames it to `path` and fsyncs the directory.
pub fn commit_temp(tmp: &Path, file: &File, path: &Path) -> Result<(), FsError> {
    file.sync_all().map_err(|e| FsError::io("fsync", tmp, e))?;
    fs::rename(tmp, path).map_err(|e| FsError::io("rename temp file onto", path, e))?;
    sync_dir(parent_of(path))
}

/// fsyncs a directory so a rename or unlink in it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), FsError> {
    let d = File::open(dir).map_err(|e| FsError::io("open directory", dir, e))?;
    d.sync_all()
        .map_err(|e| FsError::io("fsync directory", dir, e))
}

/// Removes a file and fsyncs its directory; a missing file is fine.
pub fn remove_durable(path: &Path) -> Result<(), FsError> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(parent_of(path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(FsError::io("remove", path, e)),
    }
}

/// Reads a file refusing symlinks (O_NOFOLLOW); `Ok(None)` when absent.
pub fn read_nofollow(path: &Path) -> Result<Option<Vec<u8>>, FsError> {
    use std::io::Read;
    let mut f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FsError::io("open", path, e)),
    };
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)
        .map_err(|e| FsError::io("read", path, e))?;
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
    fn read_nofollow_refuses_symlink() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("t");
        fs::write(&target, b"x").unwrap();
        let link = d.path().join("l");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(read_nofollow(&link).is_err());
        assert_eq!(read_nofollow(&target).unwrap().unwrap(), b"x");
        assert!(read_nofollow(&d.path().join("missing")).unwrap().is_none());
    }
}
