//! Moving the kubelet's resource-manager checkpoints (`cpu_manager_state`,
//! `memory_manager_state` under the kubelet's root dir) aside before a
//! kubelet starts with a config they contradict. The kubelet refuses to
//! start when the checkpoint names another policy ("please drain this node
//! and delete the CPU manager checkpoint file … before restarting Kubelet");
//! kubelet-pivot never deletes one outright: it is moved, with a timestamp,
//! into a directory of kubelet-pivot's own (the checkpoint store), so an
//! operator can look at what the kubelet had.
//!
//! Only called while the kubelet is stopped. The file is never followed: a
//! rename moves whatever the name is (a symlink stays a symlink); across
//! file systems (a DaemonSet's separate hostPath mounts) the file is copied
//! through the bounded reader (regular files only, never a FIFO, at most
//! [`MAX_STATE_FILE`]) and unlinked only once the copy is durable.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::safefs::fsutil::{self, FsError, Owner, ReadError, ReadPolicy};

/// Largest state file copied across file systems (a memory manager state
/// of a large NUMA machine is tens of KiB).
pub const MAX_STATE_FILE: u64 = 16 * 1024 * 1024;
/// Moved files kept per state file name; older ones are removed.
pub const KEEP_PER_FILE: usize = 16;

/// One state file moved aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub name: String,
    pub from: PathBuf,
    pub to: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("cannot look at kubelet state file {path}: {source}")]
    Stat {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot move kubelet state file {from} to {to}: {source}")]
    Move {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("kubelet state file {path} cannot be copied across file systems: {source}; move it aside by hand (the kubelet refuses to start with it)")]
    Copy {
        path: PathBuf,
        #[source]
        source: ReadError,
    },
    #[error(transparent)]
    Fs(#[from] FsError),
}

/// Moves each of `names` that exists under `root_dir` into `dest_dir` as
/// `NAME.STAMP` (`stamp`: a file-name-safe time such as
/// `20261124T101500.123Z`). Returns what was moved; absent files are
/// skipped. `dest_dir` must exist and be kubelet-pivot's.
pub fn move_aside(
    root_dir: &Path,
    dest_dir: &Path,
    names: &[&str],
    stamp: &str,
) -> Result<Vec<Moved>, StateFileError> {
    let mut moved = Vec::new();
    for name in names {
        let from = root_dir.join(name);
        match fs::symlink_metadata(&from) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => return Err(StateFileError::Stat { path: from, source }),
        }
        let to = free_name(dest_dir, name, stamp);
        match fs::rename(&from, &to) {
            Ok(()) => {
                fsutil::sync_dir(dest_dir)?;
                fsutil::sync_dir(root_dir)?;
            }
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => copy_then_unlink(&from, &to)?,
            Err(source) => return Err(StateFileError::Move { from, to, source }),
        }
        prune(dest_dir, name);
        moved.push(Moved {
            name: (*name).to_string(),
            from,
            to,
        });
    }
    Ok(moved)
}

/// `NAME.STAMP`, or `NAME.STAMP-N` if that exists already.
fn free_name(dir: &Path, name: &str, stamp: &str) -> PathBuf {
    let base = dir.join(format!("{name}.{stamp}"));
    if fs::symlink_metadata(&base).is_err() {
        return base;
    }
    (1u32..)
        .map(|n| dir.join(format!("{name}.{stamp}-{n}")))
        .find(|p| fs::symlink_metadata(p).is_err())
        .unwrap_or(base)
}

fn copy_then_unlink(from: &Path, to: &Path) -> Result<(), StateFileError> {
    let policy = ReadPolicy {
        what: "kubelet state file",
        max_len: MAX_STATE_FILE,
        owner: Owner::me(),
        private: false,
    };
    let bytes = match fsutil::read_bounded(from, &policy) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(()),
        Err(source) => {
            return Err(StateFileError::Copy {
                path: from.to_path_buf(),
                source,
            })
        }
    };
    fsutil::write_atomic(to, &bytes, 0o600)?;
    fsutil::remove_durable(from)?;
    Ok(())
}

/// Keeps the newest [`KEEP_PER_FILE`] moved copies of `name` (names sort by
/// their stamp).
fn prune(dir: &Path, name: &str) {
    let prefix = format!("{name}.");
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut copies: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    copies.sort();
    let excess = copies.len().saturating_sub(KEEP_PER_FILE);
    for old in copies.into_iter().take(excess) {
        let _ = fsutil::remove_with(&dir.join(old), fsutil::Durability::Volatile);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_present_files_and_skips_absent_ones() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("kubelet");
        let dest = d.path().join("aside");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&dest).unwrap();
        fs::write(root.join("cpu_manager_state"), b"{\"policyName\":\"none\"}").unwrap();
        let moved = move_aside(
            &root,
            &dest,
            &["cpu_manager_state", "memory_manager_state"],
            "20261124T101500.000Z",
        )
        .unwrap();
        assert_eq!(moved.len(), 1);
        assert!(!root.join("cpu_manager_state").exists());
        assert_eq!(
            fs::read(dest.join("cpu_manager_state.20261124T101500.000Z")).unwrap(),
            b"{\"policyName\":\"none\"}"
        );
        // Same stamp again: a second name, nothing overwritten.
        fs::write(root.join("cpu_manager_state"), b"two").unwrap();
        let moved =
            move_aside(&root, &dest, &["cpu_manager_state"], "20261124T101500.000Z").unwrap();
        assert!(moved[0].to.to_string_lossy().ends_with("-1"));
    }

    #[test]
    fn a_symlink_is_moved_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("kubelet");
        let dest = d.path().join("aside");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&dest).unwrap();
        let target = d.path().join("precious");
        fs::write(&target, b"keep me").unwrap();
        std::os::unix::fs::symlink(&target, root.join("cpu_manager_state")).unwrap();
        let moved = move_aside(&root, &dest, &["cpu_manager_state"], "s").unwrap();
        assert!(fs::symlink_metadata(&moved[0].to)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&target).unwrap(), b"keep me");
    }

    #[test]
    fn only_the_newest_copies_are_kept() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("kubelet");
        let dest = d.path().join("aside");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&dest).unwrap();
        for i in 0..(KEEP_PER_FILE + 3) {
            fs::write(root.join("memory_manager_state"), format!("{i}")).unwrap();
            move_aside(
                &root,
                &dest,
                &["memory_manager_state"],
                &format!("2026{i:04}"),
            )
            .unwrap();
        }
        let left = fs::read_dir(&dest).unwrap().count();
        assert_eq!(left, KEEP_PER_FILE);
        assert!(dest
            .join(format!("memory_manager_state.2026{:04}", KEEP_PER_FILE + 2))
            .exists());
        assert!(!dest.join("memory_manager_state.20260000").exists());
    }
}
