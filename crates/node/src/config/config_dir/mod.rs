//! The kubelet's `--config-dir` on this node (KEP-3983): reading the
//! drop-ins as the kubelet would, and choosing the set that is merged into
//! the effective config.
//!
//! The kubelet walks the directory (`filepath.WalkDir`: depth first, the
//! entries of each directory in lexical order, subdirectories included) and
//! merges every `*.conf` file it meets; other files are skipped. Each file
//! is a KubeletConfiguration with `apiVersion` and `kind`. Here the files
//! are untrusted input as well: the directory must be a trusted one (owned
//! by kubelet-pivot's uid, not writable by group or others, safe
//! ancestors), a drop-in must be a regular file of ours that is not
//! writable by group or others (a symlink, FIFO or device is refused, never
//! followed or read), and sizes and counts are bounded. Every error names
//! the file.
//!
//! The set that runs ([`merge`], in `choice`; its problems are logged once by
//! [`report`]): the directory's current set if it loads,
//! merges into a valid config and did not crash-loop before; else the set
//! that ran last (a refused change loses nothing); else the last-known-good
//! set; else none. The merge itself is the kubelet's
//! ([`KubeletConfig::with_drop_ins`]).

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use tracing::debug;

use crate::config::store::{DropInFile, DropInSnapshot, FileStamp, MAX_DROP_IN_LAYER};
use crate::safefs::fsutil::{self, Owner, ReadError, ReadPolicy};
use crate::safefs::trust::{self, TrustError};

mod choice;
mod report;

pub use choice::{merge, AppliedDropIns, DropInOrigin, DropInProblem, Merged};
use kp_kubelet_config::{sha256_hex, ConfigError, DropInLayer, KubeletConfig, MAX_CONFIG_BYTES};
pub use report::report;

/// The drop-in suffix the kubelet reads (`filepath.Ext(name) == ".conf"`).
pub const DROP_IN_SUFFIX: &str = ".conf";
/// Most `*.conf` drop-ins in one directory tree.
pub const MAX_DROP_INS: usize = 64;
/// Most directory entries looked at (drop-ins, other files, directories).
pub const MAX_ENTRIES: usize = 1024;
/// Deepest subdirectory walked.
pub const MAX_DEPTH: usize = 8;
/// Most bytes of all drop-ins together: one config's limit.
pub const MAX_TOTAL_BYTES: usize = MAX_CONFIG_BYTES;

const DIR_WHAT: &str = "--config-dir drop-in directory";
const FILE_WHAT: &str = "--config-dir drop-in";

#[derive(Debug, thiserror::Error)]
pub enum DropInError {
    #[error("cannot read {DIR_WHAT} {path}: {source}; the kubelet would not start with it either: create it or fix --config-dir after `--`")]
    Missing {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Untrusted(TrustError),
    #[error("cannot list {DIR_WHAT} {path}: {source}")]
    List {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{0}; a drop-in must be a regular file of kubelet-pivot's uid that group and others cannot write, of at most {MAX_CONFIG_BYTES} bytes")]
    File(ReadError),
    #[error(
        "{FILE_WHAT} {path} disappeared while it was read; it is read again on the next change"
    )]
    Vanished { path: PathBuf },
    #[error("{FILE_WHAT} {path} is empty; the kubelet refuses an empty drop-in: remove it, or give it apiVersion and kind")]
    Empty { path: PathBuf },
    #[error("{FILE_WHAT} {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: ConfigError,
    },
    #[error("{DIR_WHAT} {path} holds more than {limit} {what}; merge drop-ins or remove what the kubelet does not need")]
    TooMany {
        path: PathBuf,
        limit: usize,
        what: &'static str,
    },
    #[error("{DIR_WHAT} {path} nests subdirectories deeper than {MAX_DEPTH} levels")]
    TooDeep { path: PathBuf },
    #[error("the drop-ins of {DIR_WHAT} {path} are {what} larger than {limit} bytes")]
    TooLarge {
        path: PathBuf,
        what: &'static str,
        limit: usize,
    },
}

/// A drop-in set read from the directory.
#[derive(Debug, Clone)]
pub struct DropInSet {
    pub snapshot: DropInSnapshot,
    /// lstat stamps of the directories and drop-ins read, taken before
    /// each was read: equal stamps later mean the same set.
    pub stamps: Vec<(PathBuf, Option<FileStamp>)>,
}

impl DropInSet {
    /// A set from a checkpoint (no files behind it).
    pub fn from_snapshot(snapshot: DropInSnapshot) -> DropInSet {
        DropInSet {
            snapshot,
            stamps: Vec::new(),
        }
    }
}

struct Walk {
    top: PathBuf,
    entries: usize,
    bytes: usize,
    files: Vec<DropInFile>,
    layer: DropInLayer,
    stamps: Vec<(PathBuf, Option<FileStamp>)>,
}

/// Reads the drop-ins of `dir` (the path given to `--config-dir`; it may
/// be a symlink to the directory, resolved once, as `--init-config` may).
/// Blocking I/O and parsing: run it off the event loop.
pub fn load(dir: &Path) -> Result<DropInSet, DropInError> {
    let top = fs::canonicalize(dir).map_err(|source| DropInError::Missing {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut walk = Walk {
        top: top.clone(),
        entries: 0,
        bytes: 0,
        files: Vec::new(),
        layer: DropInLayer::new(),
        stamps: Vec::new(),
    };
    walk_dir(&top, Path::new(""), 0, &mut walk)?;
    let layer_bytes = walk.layer.canonical_bytes();
    if layer_bytes.len() > MAX_DROP_IN_LAYER {
        return Err(DropInError::TooLarge {
            path: top,
            what: "merged",
            limit: MAX_DROP_IN_LAYER,
        });
    }
    let mut digest = Vec::new();
    for file in &walk.files {
        digest.extend_from_slice(file.name.as_bytes());
        digest.push(0);
        digest.extend_from_slice(file.sha256.as_bytes());
        digest.push(b'\n');
    }
    Ok(DropInSet {
        snapshot: DropInSnapshot {
            id: sha256_hex(&digest),
            files: walk.files,
            layer: walk.layer.as_map().clone(),
        },
        stamps: walk.stamps,
    })
}

fn walk_dir(dir: &Path, rel: &Path, depth: usize, walk: &mut Walk) -> Result<(), DropInError> {
    if depth > MAX_DEPTH {
        return Err(DropInError::TooDeep {
            path: walk.top.clone(),
        });
    }
    walk.stamps.push((dir.to_path_buf(), FileStamp::of(dir)));
    trust::verify_dir(dir, DIR_WHAT).map_err(DropInError::Untrusted)?;
    let list_error = |source| DropInError::List {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries: Vec<(OsString, fs::FileType)> = Vec::new();
    for entry in fs::read_dir(dir).map_err(list_error)? {
        let entry = entry.map_err(list_error)?;
        walk.entries += 1;
        if walk.entries > MAX_ENTRIES {
            return Err(DropInError::TooMany {
                path: walk.top.clone(),
                limit: MAX_ENTRIES,
                what: "entries",
            });
        }
        // The entry's own type: a symlink is a symlink, never followed.
        let kind = entry.file_type().map_err(list_error)?;
        entries.push((entry.file_name(), kind));
    }
    // Go's os.ReadDir order: by name, byte-wise.
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    for (name, kind) in entries {
        let path = dir.join(&name);
        let rel = rel.join(&name);
        if kind.is_dir() {
            walk_dir(&path, &rel, depth + 1, walk)?;
        } else if name.as_bytes().ends_with(DROP_IN_SUFFIX.as_bytes()) {
            read_drop_in(&path, &rel, walk)?;
        } else {
            debug!(path = %path.display(), "skipping a file that is not a *.conf drop-in (the kubelet skips it too)");
        }
    }
    Ok(())
}

fn read_drop_in(path: &Path, rel: &Path, walk: &mut Walk) -> Result<(), DropInError> {
    if walk.files.len() >= MAX_DROP_INS {
        return Err(DropInError::TooMany {
            path: walk.top.clone(),
            limit: MAX_DROP_INS,
            what: "*.conf drop-ins",
        });
    }
    walk.stamps.push((path.to_path_buf(), FileStamp::of(path)));
    let policy = ReadPolicy {
        what: FILE_WHAT,
        max_len: MAX_CONFIG_BYTES as u64,
        owner: Owner::me(),
        private: true,
    };
    let bytes = fsutil::read_bounded(path, &policy)
        .map_err(DropInError::File)?
        .ok_or_else(|| DropInError::Vanished {
            path: path.to_path_buf(),
        })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(DropInError::Empty {
            path: path.to_path_buf(),
        });
    }
    walk.bytes += bytes.len();
    if walk.bytes > MAX_TOTAL_BYTES {
        return Err(DropInError::TooLarge {
            path: walk.top.clone(),
            what: "together",
            limit: MAX_TOTAL_BYTES,
        });
    }
    let config = KubeletConfig::parse(&bytes).map_err(|source| DropInError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    walk.layer.push(&config);
    walk.files.push(DropInFile {
        name: rel.to_string_lossy().into_owned(),
        sha256: sha256_hex(&bytes),
        fields: config
            .document()
            .keys()
            .filter(|k| *k != "apiVersion" && *k != "kind")
            .cloned()
            .collect(),
    });
    Ok(())
}

/// Whether the directory still holds what `stamps` saw (a few lstats).
pub fn unchanged(stamps: &[(PathBuf, Option<FileStamp>)]) -> bool {
    stamps
        .iter()
        .all(|(path, stamp)| FileStamp::of(path) == *stamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::store::DropInRecord;
    use kp_kubelet_config::ValidationTarget;
    use std::os::unix::fs::PermissionsExt;

    const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    fn drop_in(dir: &Path, name: &str, body: &str) {
        let path = dir.join(name);
        fs::write(&path, format!("{HEADER}{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    }

    fn names(set: &DropInSet) -> Vec<&str> {
        set.snapshot.files.iter().map(|f| f.name.as_str()).collect()
    }

    fn base() -> KubeletConfig {
        KubeletConfig::parse_and_validate(format!("{HEADER}maxPods: 50\n").as_bytes()).unwrap()
    }

    #[test]
    fn drop_ins_are_read_in_the_kubelets_walk_order() {
        let d = dir();
        drop_in(d.path(), "20-b.conf", "maxPods: 20");
        drop_in(d.path(), "10-a.conf", "maxPods: 10\nport: 10251");
        fs::write(d.path().join("30-c.conf.swp"), "garbage").unwrap();
        fs::write(d.path().join("README"), "not a drop-in").unwrap();
        fs::create_dir(d.path().join("15-sub")).unwrap();
        drop_in(
            &d.path().join("15-sub"),
            "x.conf",
            "maxPods: 15\nreadOnlyPort: 10255",
        );
        let set = load(d.path()).unwrap();
        assert_eq!(names(&set), ["10-a.conf", "15-sub/x.conf", "20-b.conf"]);
        let merged = merge(
            &base(),
            Ok(set),
            &DropInRecord::default(),
            &ValidationTarget::default(),
        );
        assert!(merged.problem.is_none());
        let effective = merged.config.effective();
        assert_eq!(effective["maxPods"], 20);
        assert_eq!(effective["port"], 10251);
        assert_eq!(effective["readOnlyPort"], 10255);
    }

    #[test]
    fn the_id_follows_names_and_contents() {
        let d = dir();
        drop_in(d.path(), "10-a.conf", "maxPods: 10");
        let first = load(d.path()).unwrap();
        assert_eq!(load(d.path()).unwrap().snapshot.id, first.snapshot.id);
        assert!(unchanged(&first.stamps));
        drop_in(d.path(), "10-a.conf", "maxPods: 11");
        assert_ne!(load(d.path()).unwrap().snapshot.id, first.snapshot.id);
        assert!(!unchanged(&first.stamps));
        fs::rename(d.path().join("10-a.conf"), d.path().join("11-a.conf")).unwrap();
        assert_ne!(load(d.path()).unwrap().snapshot.id, first.snapshot.id);
        let empty = dir();
        assert!(load(empty.path()).unwrap().snapshot.files.is_empty());
    }

    #[track_caller]
    fn load_error(d: &Path) -> String {
        match load(d) {
            Err(e) => e.to_string(),
            Ok(set) => panic!("expected an error, got {:?}", names(&set)),
        }
    }

    #[test]
    fn bad_drop_ins_are_named() {
        let d = dir();
        drop_in(d.path(), "10-a.conf", "maxPods: 10");
        fs::write(d.path().join("20-b.conf"), "maxPods: 10\n").unwrap();
        let err = load_error(d.path());
        assert!(err.contains("20-b.conf") && err.contains("kind"), "{err}");
        drop_in(d.path(), "20-b.conf", "fooBar: 1");
        let err = load_error(d.path());
        assert!(err.contains("20-b.conf") && err.contains("fooBar"), "{err}");
        fs::write(d.path().join("20-b.conf"), "").unwrap();
        let err = load_error(d.path());
        assert!(err.contains("20-b.conf") && err.contains("empty"), "{err}");
        let missing = load_error(&d.path().join("nope"));
        assert!(missing.contains("nope"), "{missing}");
    }

    #[test]
    fn odd_files_are_refused_without_following_or_blocking() {
        let d = dir();
        drop_in(d.path(), "10-a.conf", "maxPods: 10");
        std::os::unix::fs::symlink(d.path().join("10-a.conf"), d.path().join("20-link.conf"))
            .unwrap();
        let err = load_error(d.path());
        assert!(
            err.contains("20-link.conf") && err.contains("symlink"),
            "{err}"
        );
        fs::remove_file(d.path().join("20-link.conf")).unwrap();
        // A symlink that is no drop-in is skipped, as the kubelet skips it.
        std::os::unix::fs::symlink("/etc", d.path().join("etc-link")).unwrap();
        assert_eq!(names(&load(d.path()).unwrap()), ["10-a.conf"]);
        nix::unistd::mkfifo(
            &d.path().join("30-fifo.conf"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let err = load_error(d.path());
        assert!(
            err.contains("30-fifo.conf") && err.contains("fifo"),
            "{err}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        fs::remove_file(d.path().join("30-fifo.conf")).unwrap();
        drop_in(d.path(), "40-open.conf", "maxPods: 1");
        fs::set_permissions(
            d.path().join("40-open.conf"),
            fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        let err = load_error(d.path());
        assert!(
            err.contains("40-open.conf") && err.contains("writable"),
            "{err}"
        );
        fs::remove_file(d.path().join("40-open.conf")).unwrap();
        let big = d.path().join("50-big.conf");
        fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES + 1]).unwrap();
        let err = load_error(d.path());
        assert!(
            err.contains("50-big.conf") && err.contains("too large"),
            "{err}"
        );
        fs::remove_file(&big).unwrap();
        // A directory others can write is not trusted.
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let err = load_error(d.path());
        assert!(err.contains("chmod go-w"), "{err}");
    }

    #[test]
    fn counts_and_depth_are_bounded() {
        let d = dir();
        for i in 0..=MAX_DROP_INS {
            drop_in(d.path(), &format!("{i:03}.conf"), "maxPods: 1");
        }
        assert!(load_error(d.path()).contains("more than 64"));
        let deep = dir();
        let mut path = deep.path().to_path_buf();
        for _ in 0..=MAX_DEPTH + 1 {
            path.push("d");
            fs::create_dir(&path).unwrap();
        }
        assert!(load_error(deep.path()).contains("deeper"));
    }

    fn snapshot(body: &str) -> DropInSnapshot {
        let d = dir();
        drop_in(d.path(), "10-a.conf", body);
        load(d.path()).unwrap().snapshot
    }

    #[test]
    fn a_refused_set_falls_back_to_the_set_that_ran_then_last_known_good() {
        let ran = snapshot("maxPods: 20");
        let good = snapshot("maxPods: 30");
        let mut record = DropInRecord {
            applied: Some(ran.clone()),
            last_known_good: Some(good.clone()),
            ..Default::default()
        };
        let invalid = DropInSet::from_snapshot(snapshot("port: 70000"));
        let m = merge(
            &base(),
            Ok(invalid.clone()),
            &record,
            &ValidationTarget::default(),
        );
        assert!(
            matches!(m.problem, Some(DropInProblem::Validate(ref d)) if d.contains("port") && d.contains("(set by 10-a.conf)")),
            "{:?}",
            m.problem
        );
        let applied = m.applied.unwrap();
        assert_eq!(applied.origin, DropInOrigin::Previous);
        assert_eq!(m.config.effective()["maxPods"], 20);
        // Unreadable: the same.
        let m = merge(
            &base(),
            Err(DropInError::Empty {
                path: "/x/10-a.conf".into(),
            }),
            &record,
            &ValidationTarget::default(),
        );
        assert!(
            matches!(m.problem, Some(DropInProblem::Load(ref d)) if d.contains("/x/10-a.conf"))
        );
        assert_eq!(m.applied.unwrap().origin, DropInOrigin::Previous);
        // The set that ran crash-looped: last-known-good.
        record.mark_bad(&ran.id, "crash loop", "T");
        let m = merge(
            &base(),
            Ok(DropInSet::from_snapshot(ran.clone())),
            &record,
            &ValidationTarget::default(),
        );
        assert!(matches!(m.problem, Some(DropInProblem::KnownBad(_))));
        assert_eq!(m.applied.unwrap().origin, DropInOrigin::LastKnownGood);
        assert_eq!(m.config.effective()["maxPods"], 30);
        // Nothing usable: the base alone, with the problem.
        let m = merge(
            &base(),
            Ok(invalid),
            &DropInRecord::default(),
            &ValidationTarget::default(),
        );
        assert!(m.applied.is_none() && m.problem.is_some());
        assert_eq!(m.config, base());
        // A good current set runs, whatever ran before.
        let m = merge(
            &base(),
            Ok(DropInSet::from_snapshot(good)),
            &record,
            &ValidationTarget::default(),
        );
        assert!(m.problem.is_none());
        assert_eq!(m.applied.unwrap().origin, DropInOrigin::Current);
    }
}
