//! `kubelet-pivot checkpoint ...`: the operator's view of, and repairs to,
//! the checkpoint store. Writes take the store's writer lock.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::config::store::{ConfigSource, Store, StoreError, MAX_PAYLOAD};
use crate::safefs::fsutil::{self, Owner, ReadError, ReadPolicy};
use kp_kubelet_config::{KubeletConfig, ValidationTarget};

/// Most files a directory payload may hold (a ConfigMap holds a few keys).
const MAX_PAYLOAD_FILES: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot read {path}: {source}; nothing was assigned")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A payload file is not a regular file, or too large.
    #[error("{0}; nothing was assigned")]
    Payload(ReadError),
    #[error(
        "payload directory {path} has more than {MAX_PAYLOAD_FILES} files; nothing was assigned"
    )]
    TooManyFiles { path: String },
    #[error("payload has no key {key:?} (keys: {keys}); pass --key")]
    MissingKey { key: String, keys: String },
    #[error("{path} is not a valid KubeletConfiguration: {detail}; fix it, or pass --force to assign it anyway and watch the node roll back")]
    Invalid { path: String, detail: String },
    #[error("no checkpoint with UID {0}; see `kubelet-pivot checkpoint list`")]
    NoSuchUid(String),
    #[error(
        "checkpoint {0} is not marked bad: nothing to forget; see `kubelet-pivot checkpoint list`"
    )]
    NotBad(String),
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

/// How a payload file is read: any owner (the operator names it), never a
/// FIFO or a device (no hang, no endless read), at most what is left of
/// [`MAX_PAYLOAD`].
fn payload_policy(left: usize) -> ReadPolicy {
    ReadPolicy {
        what: "payload file",
        max_len: left as u64,
        owner: Owner::Any,
        private: false,
    }
}

fn read_error(path: &Path, source: std::io::Error) -> OperatorError {
    OperatorError::Read {
        path: path.display().to_string(),
        source,
    }
}

/// Reads one payload file (not following a symlink) within the budget.
fn read_payload_file(path: &Path, left: usize) -> Result<Vec<u8>, OperatorError> {
    match fsutil::read_bounded(path, &payload_policy(left)) {
        Ok(Some(data)) => Ok(data),
        Ok(None) => Err(read_error(
            path,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        )),
        Err(e) => Err(OperatorError::Payload(e)),
    }
}

/// Reads `PATH` of `checkpoint assign`: a file (stored under `key`) or a
/// directory of regular files (one key each), at most [`MAX_PAYLOAD`] bytes
/// in all. The path the operator gives may be a symlink (it is resolved
/// once); entries of a directory may not.
fn read_payload(path: &Path, key: &str) -> Result<BTreeMap<String, Vec<u8>>, OperatorError> {
    let resolved = fs::canonicalize(path).map_err(|e| read_error(path, e))?;
    let meta = fs::symlink_metadata(&resolved).map_err(|e| read_error(path, e))?;
    let mut files = BTreeMap::new();
    if !meta.is_dir() {
        files.insert(key.to_string(), read_payload_file(&resolved, MAX_PAYLOAD)?);
        return Ok(files);
    }
    let entries = fs::read_dir(&resolved).map_err(|e| read_error(path, e))?;
    let mut size = 0;
    for entry in entries {
        let entry = entry.map_err(|e| read_error(path, e))?;
        if files.len() >= MAX_PAYLOAD_FILES {
            return Err(OperatorError::TooManyFiles {
                path: path.display().to_string(),
            });
        }
        let data = read_payload_file(&entry.path(), MAX_PAYLOAD - size)?;
        size += data.len();
        files.insert(entry.file_name().to_string_lossy().into_owned(), data);
    }
    Ok(files)
}

fn payload_uid(files: &BTreeMap<String, Vec<u8>>) -> String {
    let mut h = Sha256::new();
    for (k, v) in files {
        h.update((k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_le_bytes());
        h.update(v);
    }
    let digest = h.finalize();
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("local-{hex}")
}

/// An operator's checkpoint command (the command line's `checkpoint` subcommands).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointCommand {
    /// List checkpoints with their state (assigned, last-known-good, bad).
    List,
    /// Show one checkpoint's source, state and files.
    Show { uid: String },
    /// Checkpoint a local payload and assign it.
    Assign(LocalAssign),
    /// Go back to the local config: clears the assignment.
    Reset,
    /// Remove a config (by UID) or a crash-looped drop-in set (by id) from the bad list.
    ForgetBad { uid: String },
}

/// A local payload to checkpoint and assign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalAssign {
    /// A KubeletConfiguration file, or a directory of ConfigMap-like key files.
    pub path: PathBuf,
    pub key: String,
    pub name: String,
    pub namespace: String,
    /// Default: "local-" + the first 16 hex digits of the payload's sha256.
    pub uid: Option<String>,
    pub resource_version: String,
    /// Assign even if the payload does not validate.
    pub force: bool,
    /// The kubelet the payload is validated for.
    pub target: ValidationTarget,
}

/// Runs a checkpoint subcommand, printing to `out`.
pub fn run(
    dir: &Path,
    action: CheckpointCommand,
    out: &mut impl Write,
) -> Result<(), OperatorError> {
    match action {
        CheckpointCommand::List => {
            let store = Store::open_read_only(dir);
            let assigned = store.assigned()?;
            let lkg = store.last_known_good()?;
            let bad = store.bad_configs()?;
            writeln!(out, "{:<28} {:<16} STATE", "UID", "RESOURCEVERSION")?;
            for (uid, rv) in store.list_checkpoints() {
                let marks = marks(&uid, &rv, &assigned, &lkg, &bad);
                writeln!(out, "{uid:<28} {rv:<16} {}", marks.join(", "))?;
            }
            Ok(())
        }
        CheckpointCommand::Show { uid } => {
            let store = Store::open_read_only(dir);
            let versions: Vec<String> = store
                .list_checkpoints()
                .into_iter()
                .filter(|(u, _)| *u == uid)
                .map(|(_, rv)| rv)
                .collect();
            if versions.is_empty() {
                return Err(OperatorError::NoSuchUid(uid));
            }
            let assigned = store.assigned()?;
            let lkg = store.last_known_good()?;
            let bad = store.bad_configs()?;
            for rv in versions {
                let known = [&assigned, &lkg]
                    .into_iter()
                    .flatten()
                    .find(|a| a.uid == uid && a.resource_version == rv)
                    .cloned();
                let src = known.clone().unwrap_or(ConfigSource {
                    namespace: "?".into(),
                    name: "?".into(),
                    uid: uid.clone(),
                    resource_version: rv.clone(),
                    kubelet_config_key: "kubelet".into(),
                });
                writeln!(out, "UID {uid} RESOURCEVERSION {rv}")?;
                match &known {
                    Some(s) => writeln!(
                        out,
                        "SOURCE ConfigMap {}/{} key {}",
                        s.namespace, s.name, s.kubelet_config_key
                    )?,
                    // The store keeps a checkpoint's source only while it is
                    // assigned or last-known-good.
                    None => writeln!(out, "SOURCE unknown (neither assigned nor last-known-good)")?,
                }
                let marks = marks(&uid, &rv, &assigned, &lkg, &bad);
                let state = if marks.is_empty() {
                    "kept (neither assigned nor last-known-good nor bad)".to_string()
                } else {
                    marks.join(", ")
                };
                writeln!(out, "STATE {state}")?;
                for (key, data) in store.load_checkpoint(&src)? {
                    writeln!(out, "--- {key} ({} bytes)", data.len())?;
                    writeln!(out, "{}", String::from_utf8_lossy(&data))?;
                }
            }
            Ok(())
        }
        CheckpointCommand::Assign(LocalAssign {
            path,
            key,
            name,
            namespace,
            uid,
            resource_version,
            force,
            target,
        }) => {
            let files = read_payload(&path, &key)?;
            let size: usize = files.values().map(Vec::len).sum();
            if size > MAX_PAYLOAD {
                return Err(StoreError::TooLarge { size }.into());
            }
            let Some(body) = files.get(&key) else {
                return Err(OperatorError::MissingKey {
                    key,
                    keys: files.keys().cloned().collect::<Vec<_>>().join(", "),
                });
            };
            let checked =
                KubeletConfig::parse(body).and_then(|c| c.validate_for(&target).map(|()| c));
            for warning in checked.iter().flat_map(KubeletConfig::warnings) {
                writeln!(out, "warning: {warning}")?;
            }
            if let Err(e) = checked {
                if !force {
                    return Err(OperatorError::Invalid {
                        path: path.display().to_string(),
                        detail: e.to_string(),
                    });
                }
                writeln!(out, "warning: assigning an invalid config (--force): {e}")?;
            }
            let src = ConfigSource {
                namespace,
                name,
                uid: uid.unwrap_or_else(|| payload_uid(&files)),
                resource_version,
                kubelet_config_key: key,
            };
            let store = Store::open(dir)?;
            let _guard = store.lock()?;
            store.save_checkpoint(&src, &files)?;
            store.set_assigned(Some(&src))?;
            writeln!(out, "assigned {src}")?;
            Ok(())
        }
        CheckpointCommand::Reset => {
            let store = Store::open(dir)?;
            let _guard = store.lock()?;
            store.set_assigned(None)?;
            writeln!(out, "assignment cleared: the node runs its local config")?;
            Ok(())
        }
        CheckpointCommand::ForgetBad { uid } => {
            let store = Store::open(dir)?;
            let _guard = store.lock()?;
            if store.forget_bad(&uid)? {
                writeln!(
                    out,
                    "forgot bad config {uid}; it will be tried again if assigned"
                )?;
                return Ok(());
            }
            // A crash-looped --config-dir drop-in set, by its id (or the
            // first 12 or more hex digits `status` shows).
            let mut record = store.drop_in_record()?;
            let matching: Vec<String> = record
                .bad
                .keys()
                .filter(|id| uid.len() >= 12 && id.starts_with(uid.as_str()))
                .cloned()
                .collect();
            match matching.as_slice() {
                [id] => {
                    record.bad.remove(id);
                    store.set_drop_in_record(&record)?;
                    writeln!(
                        out,
                        "forgot bad --config-dir drop-in set {id}; it will be tried again while the directory holds it"
                    )?;
                    Ok(())
                }
                _ if store.list_checkpoints().iter().any(|(u, _)| *u == uid) => {
                    Err(OperatorError::NotBad(uid))
                }
                _ => Err(OperatorError::NoSuchUid(uid)),
            }
        }
    }
}

/// A checkpoint's states, as `checkpoint list` and `show` print them.
fn marks(
    uid: &str,
    rv: &str,
    assigned: &Option<ConfigSource>,
    lkg: &Option<ConfigSource>,
    bad: &crate::config::store::BadConfigs,
) -> Vec<String> {
    let is = |s: &Option<ConfigSource>| {
        s.as_ref()
            .is_some_and(|s| s.uid == uid && s.resource_version == rv)
    };
    let mut marks = Vec::new();
    if is(assigned) {
        marks.push("assigned".to_string());
    }
    if is(lkg) {
        marks.push("last-known-good".to_string());
    }
    if let Some(b) = bad.get(uid).filter(|b| b.resource_version == rv) {
        marks.push(format!("bad since {}: {}", b.time, b.reason));
    }
    marks
}
