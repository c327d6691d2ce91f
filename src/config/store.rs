//! The dynamic-config checkpoint store under `--dynamic-config-dir`, shared
//! by every supervisor of the node:
//!
//! ```text
//! meta/assigned              ConfigSource JSON (absent = local config)
//! meta/last-known-good       ConfigSource JSON (absent = local config)
//! checkpoints/{uid}/{resourceVersion}/{key files}
//! v1/bad-configs.json        {uid: {time, reason, resourceVersion}}
//! v1/startups.json           [RFC 3339, ...] kubelet restarts after crashes in the trial
//! v1/trial.json              {source, since}: the stored trial clock
//! v1/effective.json          what runs: source, hash + algorithm, error
//! effective/kubelet-config.json   the file the kubelet is started with
//! ```
//!
//! Every file is written with `fsutil::write_atomic`; a checkpoint directory
//! is filled under a temp name and renamed into place, so readers (and a
//! crash at any instruction) see the old or the new state only. Directories
//! are 0700, files 0600, symlinks anywhere below the root are refused.
//! Writers serialize on a flock of `.store.lock` (held only while writing).
//!
//! Nothing in the store is trusted blindly: the root is a trusted directory
//! (`trust`: owned by our uid, not group/world-writable, safe ancestors),
//! and every file is read through `fsutil::read_bounded` (no symlink, no
//! FIFO or device, owned by our uid, not group/world-writable, capped at a
//! size fit for it: [`MAX_META_BYTES`], [`MAX_BAD_CONFIGS_BYTES`],
//! [`MAX_PAYLOAD`]).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::safefs::fsutil::{self, FsError, Owner, ReadError, ReadPolicy, TEMP_PREFIX};
use crate::safefs::trust::{self, TrustError};

pub const DIR_MODE: u32 = 0o700;
pub const FILE_MODE: u32 = 0o600;
/// Largest payload (all files of one checkpoint together).
pub const MAX_PAYLOAD: usize = 1024 * 1024;
/// Longest ConfigMap key.
const MAX_KEY_LEN: usize = 253;
/// Largest small JSON record (meta/assigned, meta/last-known-good,
/// v1/startups.json, v1/trial.json, v1/effective.json): each holds a config
/// source, a few timestamps or one error line, well under 4 KiB.
pub const MAX_META_BYTES: u64 = 64 * 1024;
/// Largest v1/bad-configs.json: one entry per bad config UID, each reason
/// capped at [`MAX_BAD_REASON`] bytes when written.
pub const MAX_BAD_CONFIGS_BYTES: u64 = MAX_PAYLOAD as u64;
/// Longest reason stored in bad-configs (the full text goes to the log).
pub const MAX_BAD_REASON: usize = 2048;
/// Largest effective config file: a payload plus the defaults filled in.
const MAX_EFFECTIVE_BYTES: u64 = 2 * MAX_PAYLOAD as u64;
/// What the store root is called in messages.
const ROOT_WHAT: &str = "checkpoint store (--dynamic-config-dir)";

/// A remote config source, as the Dynamic Kubelet Configuration proposal
/// serializes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigSource {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub kubelet_config_key: String,
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ConfigMap {}/{} (UID: {}, ResourceVersion: {})",
            self.namespace, self.name, self.uid, self.resource_version
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BadEntry {
    pub time: String,
    pub reason: String,
    pub resource_version: String,
}

pub type BadConfigs = BTreeMap<String, BadEntry>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trial {
    pub source: ConfigSource,
    /// RFC 3339 start of the trial (when this assignment was first applied).
    pub since: String,
}

/// What a holder last applied (for `status` and hash comparison).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveRecord {
    /// `None` = the local config (init file or defaults).
    pub source: Option<ConfigSource>,
    /// "assigned", "last-known-good" or "local".
    pub origin: String,
    pub hash_algorithm: String,
    pub hash: String,
    pub error: Option<String>,
    pub since: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The store root is not a trusted directory.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// A file in the store is not a private regular file of ours, or is
    /// too large.
    #[error("{0}; inspect it, then remove it (kubelet-pivot rewrites what it needs) or run `kubelet-pivot checkpoint reset`")]
    Unsafe(ReadError),
    #[error(
        "{path} is a symlink; kubelet-pivot refuses symlinks in the checkpoint store (remove it)"
    )]
    Symlink { path: PathBuf },
    #[error("{path} is corrupt ({reason}); it was not written by kubelet-pivot's atomic writer: inspect it, then remove it or run `kubelet-pivot checkpoint reset`")]
    Corrupt { path: PathBuf, reason: String },
    #[error("invalid payload key {key:?}: {reason}")]
    BadKey { key: String, reason: &'static str },
    #[error("payload of {size} bytes exceeds the {MAX_PAYLOAD}-byte limit")]
    TooLarge { size: usize },
    #[error("invalid {what} {value:?}: {reason}")]
    BadSource {
        what: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("checkpoint {uid}/{resource_version} not found in {dir}")]
    MissingCheckpoint {
        uid: String,
        resource_version: String,
        dir: PathBuf,
    },
    #[error("failed to lock the store ({path}): {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Validates a ConfigMap key used as a file name: `[-._a-zA-Z0-9]+`, not
/// `.` or `..`, at most 253 characters.
pub fn validate_key(key: &str) -> Result<(), StoreError> {
    let bad = |reason| {
        Err(StoreError::BadKey {
            key: key.to_string(),
            reason,
        })
    };
    if key.is_empty() {
        return bad("empty");
    }
    if key.len() > MAX_KEY_LEN {
        return bad("longer than 253 characters");
    }
    if key == "." || key == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if key.starts_with(TEMP_PREFIX) {
        return bad("reserved prefix");
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return bad("must consist of alphanumeric characters, '-', '_' or '.'");
    }
    Ok(())
}

/// uid and resourceVersion become directory names: same rules as keys.
fn validate_path_part(what: &'static str, value: &str) -> Result<(), StoreError> {
    validate_key(value).map_err(|e| match e {
        StoreError::BadKey { reason, .. } => StoreError::BadSource {
            what,
            value: value.to_string(),
            reason,
        },
        other => other,
    })
}

impl ConfigSource {
    pub fn validate(&self) -> Result<(), StoreError> {
        validate_path_part("uid", &self.uid)?;
        validate_path_part("resourceVersion", &self.resource_version)?;
        validate_key(&self.kubelet_config_key)?;
        if self.namespace.is_empty() || self.name.is_empty() {
            return Err(StoreError::BadSource {
                what: "namespace/name",
                value: format!("{}/{}", self.namespace, self.name),
                reason: "namespace and name are required",
            });
        }
        Ok(())
    }
}

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

/// Held while writing; released on drop.
pub struct StoreLock {
    _file: File,
}

#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    /// Opened for writing: the root was created or verified by `open`. A
    /// read-only store verifies its root before each read instead.
    verified: bool,
}

/// How a store file is read: what it is called and how large it may be.
fn policy(what: &'static str, max_len: u64) -> ReadPolicy {
    ReadPolicy {
        what,
        max_len,
        owner: Owner::me(),
        private: true,
    }
}

/// Cuts a reason to at most `max` bytes at a character boundary.
fn truncate_reason(reason: &str, max: usize) -> String {
    if reason.len() <= max {
        return reason.to_string();
    }
    let mut end = max;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... (truncated, see the log)", &reason[..end])
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
    fn check_root(&self) -> Result<bool, StoreError> {
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
    fn meta_dir(&self) -> PathBuf {
        self.root.join("meta")
    }
    fn checkpoints_dir(&self) -> PathBuf {
        self.root.join("checkpoints")
    }
    fn v1_dir(&self) -> PathBuf {
        self.root.join("v1")
    }
    fn effective_dir(&self) -> PathBuf {
        self.root.join("effective")
    }
    pub fn meta_path(&self) -> PathBuf {
        self.meta_dir()
    }
    pub fn effective_config_path(&self) -> PathBuf {
        self.effective_dir().join("kubelet-config.json")
    }

    /// Refuses a path below the root any component of which is a symlink.
    fn check_no_symlink(&self, path: &Path) -> Result<(), StoreError> {
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

    /// Reads a store file through the bounded reader: a private regular
    /// file of ours, at most `max_len` bytes. `Ok(None)` when absent.
    fn read_file(
        &self,
        path: &Path,
        what: &'static str,
        max_len: u64,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        if !self.check_root()? {
            return Ok(None);
        }
        self.check_no_symlink(path)?;
        fsutil::read_bounded(path, &policy(what, max_len)).map_err(|e| match e {
            ReadError::Symlink { path, .. } => StoreError::Symlink { path },
            other => StoreError::Unsafe(other),
        })
    }

    fn read_json<T: DeserializeOwned>(
        &self,
        path: &Path,
        what: &'static str,
        max_len: u64,
    ) -> Result<Option<T>, StoreError> {
        let Some(bytes) = self.read_file(path, what, max_len)? else {
            return Ok(None);
        };
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(None);
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })
    }

    fn write_json<T: Serialize>(&self, path: &Path, value: &T) -> Result<(), StoreError> {
        self.check_no_symlink(path)?;
        let data = serde_json::to_vec_pretty(value).map_err(|e| StoreError::Corrupt {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        fsutil::write_atomic(path, &data, FILE_MODE)?;
        Ok(())
    }

    fn write_optional(&self, path: &Path, src: Option<&ConfigSource>) -> Result<(), StoreError> {
        match src {
            Some(s) => {
                s.validate()?;
                self.write_json(path, s)
            }
            None => Ok(fsutil::remove_durable(path)?),
        }
    }

    /// A cheap fingerprint of everything `lifecycle::resolve` reads besides
    /// the immutable checkpoints: meta/assigned, meta/last-known-good and
    /// v1/bad-configs.json (each replaced by rename, so a change is a new
    /// inode). Equal stamps mean an earlier resolution still holds.
    pub fn input_stamp(&self) -> Vec<Option<FileStamp>> {
        [
            self.meta_dir().join("assigned"),
            self.meta_dir().join("last-known-good"),
            self.v1_dir().join("bad-configs.json"),
        ]
        .iter()
        .map(|p| FileStamp::of(p))
        .collect()
    }

    /// The stamp of the effective config file, if it exists.
    pub fn effective_stamp(&self) -> Option<FileStamp> {
        FileStamp::of(&self.effective_config_path())
    }

    pub fn assigned(&self) -> Result<Option<ConfigSource>, StoreError> {
        self.read_json(
            &self.meta_dir().join("assigned"),
            "assigned config record",
            MAX_META_BYTES,
        )
    }
    pub fn set_assigned(&self, src: Option<&ConfigSource>) -> Result<(), StoreError> {
        self.write_optional(&self.meta_dir().join("assigned"), src)
    }
    pub fn last_known_good(&self) -> Result<Option<ConfigSource>, StoreError> {
        self.read_json(
            &self.meta_dir().join("last-known-good"),
            "last-known-good config record",
            MAX_META_BYTES,
        )
    }
    pub fn set_last_known_good(&self, src: Option<&ConfigSource>) -> Result<(), StoreError> {
        self.write_optional(&self.meta_dir().join("last-known-good"), src)
    }

    pub fn bad_configs(&self) -> Result<BadConfigs, StoreError> {
        Ok(self
            .read_json(
                &self.v1_dir().join("bad-configs.json"),
                "bad-config list",
                MAX_BAD_CONFIGS_BYTES,
            )?
            .unwrap_or_default())
    }
    /// Whether this exact source (uid and resourceVersion) is known bad.
    pub fn bad_entry(&self, src: &ConfigSource) -> Result<Option<BadEntry>, StoreError> {
        Ok(self
            .bad_configs()?
            .remove(&src.uid)
            .filter(|e| e.resource_version == src.resource_version))
    }
    pub fn mark_bad(&self, src: &ConfigSource, reason: &str, time: &str) -> Result<(), StoreError> {
        let mut bad = self.bad_configs()?;
        bad.insert(
            src.uid.clone(),
            BadEntry {
                time: time.to_string(),
                reason: truncate_reason(reason, MAX_BAD_REASON),
                resource_version: src.resource_version.clone(),
            },
        );
        self.write_json(&self.v1_dir().join("bad-configs.json"), &bad)
    }
    /// Returns whether an entry was removed.
    pub fn forget_bad(&self, uid: &str) -> Result<bool, StoreError> {
        let mut bad = self.bad_configs()?;
        let removed = bad.remove(uid).is_some();
        if removed {
            self.write_json(&self.v1_dir().join("bad-configs.json"), &bad)?;
        }
        Ok(removed)
    }

    pub fn startups(&self) -> Result<Vec<String>, StoreError> {
        Ok(self
            .read_json(
                &self.v1_dir().join("startups.json"),
                "kubelet startup record",
                MAX_META_BYTES,
            )?
            .unwrap_or_default())
    }
    pub fn set_startups(&self, list: &[String]) -> Result<(), StoreError> {
        self.write_json(&self.v1_dir().join("startups.json"), &list)
    }

    pub fn trial(&self) -> Result<Option<Trial>, StoreError> {
        self.read_json(
            &self.v1_dir().join("trial.json"),
            "trial record",
            MAX_META_BYTES,
        )
    }
    pub fn set_trial(&self, trial: Option<&Trial>) -> Result<(), StoreError> {
        let path = self.v1_dir().join("trial.json");
        match trial {
            Some(t) => self.write_json(&path, t),
            None => Ok(fsutil::remove_durable(&path)?),
        }
    }

    pub fn effective_record(&self) -> Result<Option<EffectiveRecord>, StoreError> {
        self.read_json(
            &self.v1_dir().join("effective.json"),
            "effective config record",
            MAX_META_BYTES,
        )
    }
    pub fn set_effective_record(&self, rec: &EffectiveRecord) -> Result<(), StoreError> {
        self.write_json(&self.v1_dir().join("effective.json"), rec)
    }
    /// Writes the config file the kubelet is started with.
    /// Whether the effective config file holds exactly `bytes` (read-only:
    /// for a supervisor preparing its start while another holds the lock).
    pub fn effective_config_matches(&self, bytes: &[u8]) -> bool {
        let current = fsutil::read_bounded(
            &self.effective_config_path(),
            &policy("effective kubelet config", MAX_EFFECTIVE_BYTES),
        );
        current.ok().flatten().as_deref() == Some(bytes)
    }

    pub fn write_effective_config(&self, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let path = self.effective_config_path();
        self.check_no_symlink(&path)?;
        // Unchanged content needs no new file (and no fsyncs on the start
        // path). Anything unreadable (planted, too large) is replaced.
        let current = fsutil::read_bounded(
            &path,
            &policy("effective kubelet config", MAX_EFFECTIVE_BYTES),
        );
        if current.ok().flatten().as_deref() != Some(bytes) {
            fsutil::write_atomic(&path, bytes, FILE_MODE)?;
        }
        Ok(path)
    }

    fn checkpoint_dir(&self, uid: &str, rv: &str) -> PathBuf {
        self.checkpoints_dir().join(uid).join(rv)
    }

    /// Saves a payload as `checkpoints/{uid}/{resourceVersion}/`. The files
    /// go into a temp directory that is renamed into place; an existing
    /// checkpoint of the same uid and resourceVersion is kept (same version,
    /// same content).
    pub fn save_checkpoint(
        &self,
        src: &ConfigSource,
        files: &BTreeMap<String, Vec<u8>>,
    ) -> Result<(), StoreError> {
        src.validate()?;
        let size: usize = files.values().map(Vec::len).sum();
        if size > MAX_PAYLOAD {
            return Err(StoreError::TooLarge { size });
        }
        for key in files.keys() {
            validate_key(key)?;
        }
        let uid_dir = self.checkpoints_dir().join(&src.uid);
        self.check_no_symlink(&uid_dir)?;
        fsutil::ensure_dir(&uid_dir, DIR_MODE)?;
        let final_dir = uid_dir.join(&src.resource_version);
        self.check_no_symlink(&final_dir)?;
        if final_dir.is_dir() {
            return Ok(());
        }
        let tmp = uid_dir.join(format!(
            "{TEMP_PREFIX}{}.{}",
            src.resource_version,
            std::process::id()
        ));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(|e| FsError::io("remove stale temp dir", &tmp, e))?;
        }
        fsutil::ensure_dir(&tmp, DIR_MODE)?;
        for (key, data) in files {
            fsutil::write_atomic(&tmp.join(key), data, FILE_MODE)?;
        }
        fsutil::sync_dir(&tmp)?;
        fs::rename(&tmp, &final_dir)
            .map_err(|e| FsError::io("rename checkpoint into", &final_dir, e))?;
        fsutil::sync_dir(&uid_dir)?;
        Ok(())
    }

    /// Loads every file of a checkpoint.
    pub fn load_checkpoint(
        &self,
        src: &ConfigSource,
    ) -> Result<BTreeMap<String, Vec<u8>>, StoreError> {
        src.validate()?;
        let dir = self.checkpoint_dir(&src.uid, &src.resource_version);
        let missing = || StoreError::MissingCheckpoint {
            uid: src.uid.clone(),
            resource_version: src.resource_version.clone(),
            dir: self.checkpoints_dir(),
        };
        if !self.check_root()? {
            return Err(missing());
        }
        self.check_no_symlink(&dir)?;
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(missing()),
            Err(e) => return Err(FsError::io("read checkpoint directory", &dir, e).into()),
        };
        let mut files = BTreeMap::new();
        let mut size = 0usize;
        for entry in entries {
            let entry = entry.map_err(|e| FsError::io("read checkpoint directory", &dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(TEMP_PREFIX) {
                continue;
            }
            let path = entry.path();
            // The whole checkpoint shares one budget: each file may use what
            // the previous ones left.
            let left = (MAX_PAYLOAD - size) as u64;
            let data = self
                .read_file(&path, "checkpoint file", left)?
                .unwrap_or_default();
            size += data.len();
            files.insert(name, data);
        }
        Ok(files)
    }

    /// (uid, resourceVersion) of every checkpoint on disk.
    pub fn list_checkpoints(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if !matches!(self.check_root(), Ok(true)) {
            return out;
        }
        let Ok(uids) = fs::read_dir(self.checkpoints_dir()) else {
            return out;
        };
        for uid in uids.flatten() {
            let uid_name = uid.file_name().to_string_lossy().into_owned();
            if uid_name.starts_with(TEMP_PREFIX) {
                continue;
            }
            if let Ok(rvs) = fs::read_dir(uid.path()) {
                for rv in rvs.flatten() {
                    let rv_name = rv.file_name().to_string_lossy().into_owned();
                    if !rv_name.starts_with(TEMP_PREFIX) {
                        out.push((uid_name.clone(), rv_name));
                    }
                }
            }
        }
        out.sort();
        out
    }
}

/// A config source for unit tests of the store and its users.
#[cfg(test)]
pub(crate) fn test_source(uid: &str, rv: &str) -> ConfigSource {
    ConfigSource {
        namespace: "kube-system".into(),
        name: "my-node-config".into(),
        uid: uid.into(),
        resource_version: rv.into(),
        kubelet_config_key: "kubelet".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_source as src;

    #[test]
    fn meta_round_trip_and_absent_is_local() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("store")).unwrap();
        assert_eq!(s.assigned().unwrap(), None);
        s.set_assigned(Some(&src("u1", "5"))).unwrap();
        assert_eq!(s.assigned().unwrap(), Some(src("u1", "5")));
        s.set_assigned(None).unwrap();
        assert_eq!(s.assigned().unwrap(), None);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(d.path().join("store/meta"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn checkpoint_save_load_and_key_rules() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        let mut files = BTreeMap::new();
        files.insert("kubelet".to_string(), b"{}".to_vec());
        s.save_checkpoint(&src("u1", "5"), &files).unwrap();
        assert_eq!(s.load_checkpoint(&src("u1", "5")).unwrap(), files);
        assert_eq!(s.list_checkpoints(), vec![("u1".into(), "5".into())]);
        for bad in ["../x", "a/b", "..", "", "sp ace"] {
            let mut f = BTreeMap::new();
            f.insert(bad.to_string(), b"x".to_vec());
            assert!(
                s.save_checkpoint(&src("u2", "1"), &f).is_err(),
                "{bad:?} accepted"
            );
        }
        let mut big = BTreeMap::new();
        big.insert("kubelet".to_string(), vec![b' '; MAX_PAYLOAD + 1]);
        assert!(matches!(
            s.save_checkpoint(&src("u3", "1"), &big),
            Err(StoreError::TooLarge { .. })
        ));
        assert!(matches!(
            s.load_checkpoint(&src("nope", "1")),
            Err(StoreError::MissingCheckpoint { .. })
        ));
    }

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
    fn corrupt_meta_is_reported_with_path() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        fs::write(d.path().join("meta/assigned"), b"{\"namespace\":").unwrap();
        let err = s.assigned().unwrap_err().to_string();
        assert!(err.contains("meta/assigned"), "{err}");
        assert!(err.contains("corrupt"), "{err}");
    }

    #[test]
    fn bad_configs_track_resource_version() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        s.mark_bad(&src("u1", "5"), "crash loop", "2026-01-01T00:00:00Z")
            .unwrap();
        assert!(s.bad_entry(&src("u1", "5")).unwrap().is_some());
        assert!(s.bad_entry(&src("u1", "6")).unwrap().is_none());
        assert!(s.forget_bad("u1").unwrap());
        assert!(!s.forget_bad("u1").unwrap());
        assert!(s.bad_entry(&src("u1", "5")).unwrap().is_none());
    }

    #[test]
    fn planted_files_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        let assigned = d.path().join("meta/assigned");
        nix::unistd::mkfifo(&assigned, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = s.assigned().unwrap_err().to_string();
        assert!(
            err.contains("fifo") && err.contains("meta/assigned"),
            "{err}"
        );
        let bad = d.path().join("v1/bad-configs.json");
        let f = File::create(&bad).unwrap();
        f.set_len(64 * 1024 * 1024).unwrap();
        let err = s.bad_configs().unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
        // Group-writable: someone else may have written it.
        let lkg = d.path().join("meta/last-known-good");
        fs::write(&lkg, b"{}").unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&lkg, fs::Permissions::from_mode(0o666)).unwrap();
        let err = s.last_known_good().unwrap_err().to_string();
        assert!(err.contains("writable by group or others"), "{err}");
    }

    #[test]
    fn checkpoint_files_share_one_budget_and_must_be_regular() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        let mut files = BTreeMap::new();
        files.insert("kubelet".to_string(), b"{}".to_vec());
        s.save_checkpoint(&src("u1", "5"), &files).unwrap();
        let dir = d.path().join("checkpoints/u1/5");
        File::create(dir.join("big"))
            .unwrap()
            .set_len(MAX_PAYLOAD as u64)
            .unwrap();
        let err = s.load_checkpoint(&src("u1", "5")).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
        fs::remove_file(dir.join("big")).unwrap();
        nix::unistd::mkfifo(
            &dir.join("pipe"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let err = s.load_checkpoint(&src("u1", "5")).unwrap_err().to_string();
        assert!(err.contains("fifo"), "{err}");
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

    #[test]
    fn long_bad_reasons_are_truncated() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        let reason = "é".repeat(MAX_BAD_REASON);
        s.mark_bad(&src("u1", "5"), &reason, "2026-01-01T00:00:00Z")
            .unwrap();
        let stored = s.bad_entry(&src("u1", "5")).unwrap().unwrap().reason;
        assert!(stored.len() < MAX_BAD_REASON + 64, "{}", stored.len());
        assert!(stored.ends_with("(truncated, see the log)"));
    }
}
