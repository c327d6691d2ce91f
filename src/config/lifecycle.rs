//! The local config lifecycle of the Dynamic Kubelet Configuration proposal:
//! which config runs (assigned, last-known-good or local), the trial period,
//! crash-loop detection and promotion to last-known-good.
//!
//! Only the lock holder calls the mutating functions; `status` resolves in
//! read-only mode.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tracing::{error, info, warn};

use crate::config::kubeconfig::{ConfigError, KubeletConfig, HASH_ALGORITHM, MAX_CONFIG_BYTES};
use crate::config::store::{ConfigSource, EffectiveRecord, Store, StoreError, Trial};
use crate::pivot::role::now_rfc3339;
use crate::safefs::fsutil::{self, Owner, ReadError, ReadPolicy};

/// Where the running config came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    Assigned,
    LastKnownGood,
    Local,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::Assigned => "assigned",
            Origin::LastKnownGood => "last-known-good",
            Origin::Local => "local",
        })
    }
}

/// The error texts of the v1.11 Dynamic Kubelet Configuration docs; the
/// details go to the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigStatusError {
    LoadFailed,
    ValidateFailed,
    /// The assigned config is in bad-configs (crash loop or earlier failure).
    KnownBad {
        reason: String,
    },
    Internal,
}

impl std::fmt::Display for ConfigStatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigStatusError::LoadFailed => {
                f.write_str("failed to load config, see Kubelet log for details")
            }
            ConfigStatusError::ValidateFailed => {
                f.write_str("failed to validate config, see Kubelet log for details")
            }
            // A config recorded bad for failing to load or validate keeps
            // reporting that cause's v1.11 text.
            ConfigStatusError::KnownBad { reason } if reason.starts_with(BAD_LOAD) => {
                ConfigStatusError::LoadFailed.fmt(f)
            }
            ConfigStatusError::KnownBad { reason } if reason.starts_with(BAD_VALIDATE) => {
                ConfigStatusError::ValidateFailed.fmt(f)
            }
            ConfigStatusError::KnownBad { reason } => {
                write!(
                    f,
                    "assigned config is known bad ({reason}), see Kubelet log for details"
                )
            }
            ConfigStatusError::Internal => {
                f.write_str("internal failure, see Kubelet log for details")
            }
        }
    }
}

/// Prefixes of the reasons recorded in bad-configs.
const BAD_LOAD: &str = "failed to load";
const BAD_VALIDATE: &str = "failed to validate";

/// The local config: the init file, or built-in defaults.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    pub path: Option<PathBuf>,
    pub config: KubeletConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum LocalConfigError {
    #[error("cannot read --init-config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file (a FIFO, a device), or larger than a config may be.
    #[error("{0}; pass a KubeletConfiguration file of at most {MAX_CONFIG_BYTES} bytes")]
    Unsafe(ReadError),
    #[error("--init-config {path} is invalid: {source}; fix it, or remove --init-config to run with built-in defaults")]
    Invalid {
        path: PathBuf,
        #[source]
        source: ConfigError,
    },
}

impl LocalConfig {
    /// Loads and validates the init config (every start), or the defaults.
    pub fn load(init: Option<&Path>) -> Result<LocalConfig, LocalConfigError> {
        let Some(path) = init else {
            return Ok(LocalConfig {
                path: None,
                config: KubeletConfig::defaults(),
            });
        };
        let bytes = read_init_config(path)?;
        let config =
            KubeletConfig::parse_and_validate(&bytes).map_err(|e| LocalConfigError::Invalid {
                path: path.to_path_buf(),
                source: e,
            })?;
        Ok(LocalConfig {
            path: Some(path.to_path_buf()),
            config,
        })
    }
}

/// Reads `--init-config`: the path the operator gives may be a symlink (it
/// is resolved once); the file must be a regular file (a FIFO or a device
/// is refused at once, never read) of at most [`MAX_CONFIG_BYTES`].
fn read_init_config(path: &Path) -> Result<Vec<u8>, LocalConfigError> {
    let read_error = |source| LocalConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let resolved = fs::canonicalize(path).map_err(read_error)?;
    let policy = ReadPolicy {
        what: "--init-config file",
        max_len: MAX_CONFIG_BYTES as u64,
        owner: Owner::Any,
        private: false,
    };
    match fsutil::read_bounded(&resolved, &policy) {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(read_error(std::io::ErrorKind::NotFound.into())),
        Err(e) => Err(LocalConfigError::Unsafe(e)),
    }
}

/// The outcome of resolving which config to run.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub origin: Origin,
    /// The remote source running (None for local).
    pub source: Option<ConfigSource>,
    pub config: KubeletConfig,
    pub error: Option<ConfigStatusError>,
    pub assigned: Option<ConfigSource>,
    pub last_known_good: Option<ConfigSource>,
}

impl Resolved {
    pub fn hash(&self) -> String {
        self.config.hash()
    }

    /// An assigned config that is not yet last-known-good is on trial.
    pub fn on_trial(&self) -> Option<&ConfigSource> {
        match (&self.origin, &self.source) {
            (Origin::Assigned, Some(src)) if self.last_known_good.as_ref() != Some(src) => {
                Some(src)
            }
            _ => None,
        }
    }

    pub fn describe(&self) -> String {
        match (&self.origin, &self.source) {
            (Origin::Assigned, Some(s)) => format!("using current ({s})"),
            (Origin::LastKnownGood, Some(s)) => format!("using last-known-good ({s})"),
            _ => "using local config".to_string(),
        }
    }
}

/// Whether `resolve` may write (mark bad) — only the lock holder may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Holder,
    ReadOnly,
}

enum SourceError {
    Load(String),
    Validate(String),
}

fn load_source(store: &Store, src: &ConfigSource) -> Result<KubeletConfig, SourceError> {
    let files = store
        .load_checkpoint(src)
        .map_err(|e| SourceError::Load(e.to_string()))?;
    let Some(bytes) = files.get(&src.kubelet_config_key) else {
        return Err(SourceError::Load(format!(
            "checkpoint has no key {:?} (keys: {:?})",
            src.kubelet_config_key,
            files.keys().collect::<Vec<_>>()
        )));
    };
    let config = KubeletConfig::parse(bytes).map_err(|e| SourceError::Load(e.to_string()))?;
    config
        .validate()
        .map_err(|e| SourceError::Validate(e.to_string()))?;
    Ok(config)
}

/// Decides which config runs. In holder mode an assigned config that fails
/// to load or validate is recorded in bad-configs with the reason.
pub fn resolve(store: &Store, local: &LocalConfig, access: Access) -> Resolved {
    let local_result = |assigned, last_known_good, error| Resolved {
        origin: Origin::Local,
        source: None,
        config: local.config.clone(),
        error,
        assigned,
        last_known_good,
    };
    let assigned = match store.assigned() {
        Ok(a) => a,
        Err(err) => {
            error!(%err, "cannot read the assigned config source; running the local config");
            return local_result(None, None, Some(ConfigStatusError::LoadFailed));
        }
    };
    let lkg = match store.last_known_good() {
        Ok(l) => l,
        Err(err) => {
            error!(%err, "cannot read the last-known-good config source; ignoring it");
            None
        }
    };
    let mut status_error = None;
    if let Some(src) = &assigned {
        match store.bad_entry(src) {
            Ok(Some(entry)) => {
                status_error = Some(ConfigStatusError::KnownBad {
                    reason: entry.reason.clone(),
                });
            }
            Ok(None) => match load_source(store, src) {
                Ok(config) => {
                    return Resolved {
                        origin: Origin::Assigned,
                        source: Some(src.clone()),
                        config,
                        error: None,
                        assigned: assigned.clone(),
                        last_known_good: lkg,
                    }
                }
                Err(SourceError::Load(detail)) => {
                    error!(source = %src, %detail, "failed to load the assigned config; falling back to last-known-good");
                    status_error = Some(ConfigStatusError::LoadFailed);
                    mark_bad(store, access, src, &format!("{BAD_LOAD}: {detail}"));
                }
                Err(SourceError::Validate(detail)) => {
                    error!(source = %src, %detail, "failed to validate the assigned config; falling back to last-known-good");
                    status_error = Some(ConfigStatusError::ValidateFailed);
                    mark_bad(store, access, src, &format!("{BAD_VALIDATE}: {detail}"));
                }
            },
            Err(err) => {
                error!(%err, "cannot read bad-configs; treating the assigned config as unusable");
                status_error = Some(ConfigStatusError::Internal);
            }
        }
    }
    if let Some(l) = &lkg {
        match load_source(store, l) {
            Ok(config) => {
                return Resolved {
                    origin: Origin::LastKnownGood,
                    source: Some(l.clone()),
                    config,
                    error: status_error,
                    assigned,
                    last_known_good: lkg,
                }
            }
            Err(SourceError::Load(d)) | Err(SourceError::Validate(d)) => {
                error!(source = %l, detail = %d, "last-known-good config is unusable; running the local config");
            }
        }
    }
    local_result(assigned, lkg, status_error)
}

fn mark_bad(store: &Store, access: Access, src: &ConfigSource, reason: &str) {
    if access != Access::Holder {
        return;
    }
    let res = store
        .lock()
        .and_then(|_guard| store.mark_bad(src, reason, &now_rfc3339()));
    if let Err(err) = res {
        error!(%err, source = %src, "failed to record the config as bad");
    }
}

fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s).ok()
}

/// Boot time from /proc/stat (`btime`).
pub fn boot_time() -> Option<SystemTime> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let secs: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// Called by the holder after it applied `r`: starts a trial clock for a new
/// assignment (stored, not a file mtime), clears it when none is on trial,
/// and records what runs.
pub fn on_applied(store: &Store, r: &Resolved) -> Result<(), StoreError> {
    let _guard = store.lock()?;
    match r.on_trial() {
        Some(src) => {
            let current = store.trial()?;
            if current.as_ref().map(|t| &t.source) != Some(src) {
                info!(source = %src, "new assigned config: starting its trial period");
                store.set_trial(Some(&Trial {
                    source: src.clone(),
                    since: now_rfc3339(),
                }))?;
                store.set_startups(&[])?;
            }
        }
        None => {
            if store.trial()?.is_some() {
                store.set_trial(None)?;
                store.set_startups(&[])?;
            }
        }
    }
    // The document itself, so that a later build re-derives this config
    // under its own decoding and defaults (see `running`).
    let input = serde_json::to_vec(r.config.document()).unwrap_or_default();
    store.set_applied_input(&input)?;
    let record = EffectiveRecord {
        source: r.source.clone(),
        origin: r.origin.to_string(),
        hash_algorithm: HASH_ALGORITHM.to_string(),
        hash: r.hash(),
        class_hashes: Some(r.config.class_hashes()),
        input_sha256: Some(crate::config::kubeconfig::sha256_hex(&input)),
        error: r.error.as_ref().map(|e| e.to_string()),
        since: now_rfc3339(),
    };
    let unchanged = store.effective_record()?.is_some_and(|old| {
        EffectiveRecord {
            since: record.since.clone(),
            ..old
        } == record
    });
    if !unchanged {
        store.set_effective_record(&record)?;
    }
    Ok(())
}

/// Called by the holder when its kubelet exited without being asked to.
/// Records the restart; when more than crashLoopThreshold restarts fall in
/// the trial period (counted from the latest of trial start, boot and this
/// holder's start), marks the config bad and returns the reason.
pub fn on_crash(
    store: &Store,
    r: &Resolved,
    holder_since: SystemTime,
) -> Result<Option<String>, StoreError> {
    let Some(src) = r.on_trial() else {
        return Ok(None);
    };
    let _guard = store.lock()?;
    let Some(trial) = store.trial()?.filter(|t| &t.source == src) else {
        return Ok(None);
    };
    let now = SystemTime::now();
    let trial_start = parse_time(&trial.since).unwrap_or(now);
    let duration = r.config.config_trial_duration();
    let trial_end = trial_start + duration;
    let mut window_start = trial_start.max(holder_since);
    if let Some(boot) = boot_time() {
        window_start = window_start.max(boot);
    }
    let mut startups = store.startups()?;
    startups.push(now_rfc3339());
    let count = startups
        .iter()
        .filter_map(|s| parse_time(s))
        .filter(|t| *t >= window_start && *t <= trial_end)
        .count();
    let threshold = r.config.crash_loop_threshold() as usize;
    if now <= trial_end && count > threshold {
        let reason = format!(
            "crash loop: {count} kubelet restarts within the {} trial period (crashLoopThreshold {threshold})",
            humantime::format_duration(duration)
        );
        warn!(source = %src, %reason, "marking the assigned config bad and rolling back to last-known-good");
        store.mark_bad(src, &reason, &now_rfc3339())?;
        store.set_startups(&[])?;
        store.set_trial(None)?;
        return Ok(Some(reason));
    }
    store.set_startups(&startups)?;
    Ok(None)
}

/// Called by the holder while its kubelet runs: an assigned config that
/// survived its trial period becomes last-known-good.
pub fn maybe_promote(store: &Store, r: &Resolved) -> Result<bool, StoreError> {
    let Some(src) = r.on_trial() else {
        return Ok(false);
    };
    let Some(trial) = store.trial()?.filter(|t| &t.source == src) else {
        return Ok(false);
    };
    let Some(start) = parse_time(&trial.since) else {
        return Ok(false);
    };
    if SystemTime::now() < start + r.config.config_trial_duration() {
        return Ok(false);
    }
    let _guard = store.lock()?;
    store.set_last_known_good(Some(src))?;
    store.set_trial(None)?;
    store.set_startups(&[])?;
    info!(source = %src, "assigned config survived its trial period; it is now last-known-good");
    Ok(true)
}

/// The kubelet arguments with any user `--config` replaced by ours.
pub fn kubelet_args(user: &[std::ffi::OsString], config: &Path) -> Vec<std::ffi::OsString> {
    let mut out = Vec::with_capacity(user.len() + 2);
    let mut iter = user.iter();
    while let Some(arg) = iter.next() {
        let s = arg.to_string_lossy();
        if s == "--config" || s == "-config" {
            let given = iter.next();
            info!(given = ?given, effective = %config.display(), "replacing the kubelet's --config with the effective config file");
            continue;
        }
        if s.starts_with("--config=") || s.starts_with("-config=") {
            info!(given = %s, effective = %config.display(), "replacing the kubelet's --config with the effective config file");
            continue;
        }
        out.push(arg.clone());
    }
    out.push("--config".into());
    out.push(config.as_os_str().to_owned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::ffi::OsString;

    use crate::config::store::test_source as src;

    fn checkpoint(store: &Store, s: &ConfigSource, body: &str) {
        let mut files = BTreeMap::new();
        files.insert("kubelet".to_string(), body.as_bytes().to_vec());
        store.save_checkpoint(s, &files).unwrap();
    }

    const GOOD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 50\ncrashLoopThreshold: 1\nconfigTrialDuration: 10m\n";
    const INVALID: &str =
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nport: 70000\n";

    #[test]
    fn no_assignment_runs_local() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let local = LocalConfig::load(None).unwrap();
        let r = resolve(&store, &local, Access::Holder);
        assert_eq!(r.origin, Origin::Local);
        assert!(r.error.is_none());
    }

    #[test]
    fn invalid_assignment_is_marked_bad_and_lkg_runs() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let local = LocalConfig::load(None).unwrap();
        let good = src("good", "1");
        checkpoint(&store, &good, GOOD);
        store.set_last_known_good(Some(&good)).unwrap();
        let bad = src("bad", "1");
        checkpoint(&store, &bad, INVALID);
        store.set_assigned(Some(&bad)).unwrap();
        let r = resolve(&store, &local, Access::Holder);
        assert_eq!(r.origin, Origin::LastKnownGood);
        assert_eq!(r.error, Some(ConfigStatusError::ValidateFailed));
        assert_eq!(
            r.error.as_ref().unwrap().to_string(),
            "failed to validate config, see Kubelet log for details"
        );
        assert!(store.bad_entry(&bad).unwrap().is_some());
        // Second resolve: known bad, not re-validated.
        let r = resolve(&store, &local, Access::Holder);
        assert!(matches!(r.error, Some(ConfigStatusError::KnownBad { .. })));
        assert_eq!(
            r.error.as_ref().unwrap().to_string(),
            "failed to validate config, see Kubelet log for details"
        );
    }

    #[test]
    fn read_only_resolve_does_not_write() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let local = LocalConfig::load(None).unwrap();
        let bad = src("bad", "1");
        checkpoint(&store, &bad, "not: [yaml");
        store.set_assigned(Some(&bad)).unwrap();
        let r = resolve(&store, &local, Access::ReadOnly);
        assert_eq!(r.origin, Origin::Local);
        assert_eq!(r.error, Some(ConfigStatusError::LoadFailed));
        assert!(store.bad_configs().unwrap().is_empty());
    }

    #[test]
    fn crash_loop_marks_bad_then_promotion_path() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let local = LocalConfig::load(None).unwrap();
        let a = src("a", "1");
        checkpoint(&store, &a, GOOD);
        store.set_assigned(Some(&a)).unwrap();
        let r = resolve(&store, &local, Access::Holder);
        assert_eq!(r.on_trial(), Some(&a));
        on_applied(&store, &r).unwrap();
        let since = SystemTime::now() - Duration::from_secs(1);
        // threshold 1: the first restart is allowed, the second is a loop.
        assert_eq!(on_crash(&store, &r, since).unwrap(), None);
        let reason = on_crash(&store, &r, since).unwrap().unwrap();
        assert!(reason.contains("crash loop"), "{reason}");
        let r2 = resolve(&store, &local, Access::Holder);
        assert_eq!(r2.origin, Origin::Local);
        assert!(matches!(r2.error, Some(ConfigStatusError::KnownBad { .. })));
        // Not promoted: trial not over.
        assert!(!maybe_promote(&store, &r).unwrap());
    }

    #[test]
    fn replaces_user_config_flag() {
        let user: Vec<OsString> = [
            "--v=2",
            "--config",
            "/etc/k.yaml",
            "--config=/x",
            "--node-ip",
            "1.2.3.4",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let out = kubelet_args(&user, Path::new("/eff.json"));
        let out: Vec<String> = out
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            out,
            vec!["--v=2", "--node-ip", "1.2.3.4", "--config", "/eff.json"]
        );
    }
}
