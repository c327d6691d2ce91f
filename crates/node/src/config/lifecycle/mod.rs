//! The local config lifecycle of the Dynamic Kubelet Configuration proposal:
//! which config runs (assigned, last-known-good or local), the trial period,
//! crash-loop detection and promotion to last-known-good.
//!
//! Only the lock holder calls the mutating functions; `status` resolves in
//! read-only mode. Which config runs is decided here (`resolve`); its trial,
//! crash loops and promotion are in `trial`, around the pure verdict of
//! `verdict` (which trial to blame, whether a trial is over).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tracing::{debug, error, warn};

use crate::config::config_dir::{self, AppliedDropIns, DropInError, DropInOrigin};
use crate::config::store::{ConfigSource, DropInRecord, Store};
use crate::safefs::fsutil::{self, Owner, ReadError, ReadPolicy};
use kp_contract::time::now_rfc3339;
use kp_kubelet_config::{ConfigError, KubeletConfig, ValidationTarget, MAX_CONFIG_BYTES};

mod status_error;
#[cfg(test)]
mod tests;
mod trial;
mod verdict;

pub use status_error::{BadCause, ConfigStatusError, Detail};
use status_error::{BAD_LOAD, BAD_VALIDATE};
pub use trial::{maybe_promote, on_applied, on_crash, trial_ends};

pub use kp_contract::node_config::Origin;

/// The node's own config inputs: the init file (or built-in defaults), the
/// base when no config is assigned, and the kubelet's `--config-dir`,
/// whose drop-ins are merged over whichever config runs.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    pub path: Option<PathBuf>,
    pub config: KubeletConfig,
    /// The kubelet's `--config-dir` (taken from its arguments).
    pub config_dir: Option<PathBuf>,
    /// The kubelet every config is validated for (its feature-gate model
    /// and the host's facts): the init config, the drop-ins, each assigned
    /// config.
    pub target: Arc<ValidationTarget>,
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
    #[error("{0} (and the checkpoint store holds no earlier drop-ins to run instead)")]
    DropIns(DropInError),
    #[error("the --config-dir drop-ins merged into --init-config do not validate: {0}; fix the drop-ins (and the checkpoint store holds no earlier ones to run instead)")]
    DropInsInvalid(ConfigError),
}

impl LocalConfig {
    /// Loads and validates the init config (every start), or the defaults,
    /// for the default [`ValidationTarget`] (the newest kubelet modelled,
    /// host unknown).
    pub fn load(init: Option<&Path>) -> Result<LocalConfig, LocalConfigError> {
        LocalConfig::load_for(init, ValidationTarget::default())
    }

    /// [`load`](LocalConfig::load) for the kubelet `target`, which every
    /// later validation of this node's configs uses too.
    pub fn load_for(
        init: Option<&Path>,
        target: ValidationTarget,
    ) -> Result<LocalConfig, LocalConfigError> {
        let target = Arc::new(target);
        let Some(path) = init else {
            return Ok(LocalConfig {
                path: None,
                config: KubeletConfig::defaults(),
                config_dir: None,
                target,
            });
        };
        let bytes = read_init_config(path)?;
        let config = KubeletConfig::parse(&bytes)
            .and_then(|config| config.validate_for(&target).map(|()| config))
            .map_err(|e| LocalConfigError::Invalid {
                path: path.to_path_buf(),
                source: e,
            })?;
        // A few lines in the journal, not one per feature gate of a
        // generated file.
        const SHOWN: usize = 10;
        for warning in config.warnings().iter().take(SHOWN) {
            warn!(path = %path.display(), "{warning}");
        }
        if let Some(more) = config
            .warnings()
            .len()
            .checked_sub(SHOWN)
            .filter(|n| *n > 0)
        {
            warn!(path = %path.display(), "{more} more YAML 1.1 readings like these (kubelet-pivot config check shows them all)");
        }
        Ok(LocalConfig {
            path: Some(path.to_path_buf()),
            config,
            config_dir: None,
            target,
        })
    }

    /// Adds the kubelet's `--config-dir`, checked at start as the init
    /// config is: its drop-ins must load and, merged into the local config,
    /// validate. A checkpoint store that holds a drop-in set that ran
    /// before (or a last-known-good one) lets the supervisor start anyway:
    /// that set runs, and the problem is reported (nothing is lost by
    /// restarting kubelet-pivot while a drop-in is broken).
    pub fn with_config_dir(
        mut self,
        dir: Option<&Path>,
        store_dir: &Path,
    ) -> Result<LocalConfig, LocalConfigError> {
        let Some(dir) = dir else {
            return Ok(self);
        };
        let checked = config_dir::load(dir)
            .map_err(LocalConfigError::DropIns)
            .and_then(|set| {
                let layer = kp_kubelet_config::DropInLayer::from_map(set.snapshot.layer)
                    .map_err(LocalConfigError::DropInsInvalid)?;
                let merged = self
                    .config
                    .with_drop_ins(&layer)
                    .map_err(LocalConfigError::DropInsInvalid)?;
                merged
                    .validate_for(&self.target)
                    .map_err(LocalConfigError::DropInsInvalid)
            });
        if let Err(err) = checked {
            let record = Store::open_read_only(store_dir)
                .drop_in_record()
                .unwrap_or_default();
            if record.applied.is_none() && record.last_known_good.is_none() {
                return Err(err);
            }
        }
        self.config_dir = Some(dir.to_path_buf());
        Ok(self)
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
    /// The `--config-dir` drop-ins merged into `config` (None: no
    /// `--config-dir`, or no usable drop-in set).
    pub drop_ins: Option<AppliedDropIns>,
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
        let base = match (&self.origin, &self.source) {
            (Origin::Assigned, Some(s)) if self.assigned.as_ref() != Some(s) => {
                format!("using previous, on trial ({s})")
            }
            (Origin::Assigned, Some(s)) => format!("using current ({s})"),
            (Origin::LastKnownGood, Some(s)) => format!("using last-known-good ({s})"),
            _ => "using local config".to_string(),
        };
        match &self.drop_ins {
            Some(d) => format!("{base} with {}", d.describe()),
            None => base,
        }
    }

    /// The drop-in set on trial: one that runs from the directory (or ran
    /// last) and is not last-known-good.
    fn drop_ins_on_trial<'a>(&'a self, record: &DropInRecord) -> Option<&'a AppliedDropIns> {
        self.drop_ins.as_ref().filter(|d| {
            d.origin != DropInOrigin::LastKnownGood
                && record.last_known_good.as_ref().map(|l| &l.id) != Some(&d.set.snapshot.id)
        })
    }
}

/// Whether `resolve` may write (mark bad) — only the lock holder may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Holder,
    ReadOnly,
}

/// Why a checkpointed config cannot run, in the loader's or the
/// validator's words.
enum SourceError {
    Load(Detail),
    Validate(Detail),
}

impl SourceError {
    /// The status error of an assigned config refused for this.
    fn status(&self) -> ConfigStatusError {
        match self {
            SourceError::Load(d) => ConfigStatusError::LoadFailed(d.clone()),
            SourceError::Validate(d) => ConfigStatusError::ValidateFailed(d.clone()),
        }
    }

    /// The reason recorded in bad-configs.
    fn bad_reason(&self) -> String {
        match self {
            SourceError::Load(d) => format!("{BAD_LOAD}: {d}"),
            SourceError::Validate(d) => format!("{BAD_VALIDATE}: {d}"),
        }
    }

    fn detail(&self) -> &Detail {
        match self {
            SourceError::Load(d) | SourceError::Validate(d) => d,
        }
    }
}

fn load_source(
    store: &Store,
    src: &ConfigSource,
    target: &ValidationTarget,
) -> Result<KubeletConfig, SourceError> {
    let files = store
        .load_checkpoint(src)
        .map_err(|e| SourceError::Load(Detail::new(&e.to_string())))?;
    let Some(bytes) = files.get(&src.kubelet_config_key) else {
        return Err(SourceError::Load(Detail::new(&format!(
            "checkpoint has no key {:?} (keys: {:?})",
            src.kubelet_config_key,
            files.keys().collect::<Vec<_>>()
        ))));
    };
    let config = KubeletConfig::parse(bytes).map_err(|e| SourceError::Load(Detail::of(&e)))?;
    config
        .validate_for(target)
        .map_err(|e| SourceError::Validate(Detail::of(&e)))?;
    Ok(config)
}

/// Decides which config runs: the assigned config, last-known-good or the
/// local config, with the `--config-dir` drop-ins merged in. In holder mode
/// an assigned config that fails to load or validate is recorded in
/// bad-configs with the reason.
pub fn resolve(store: &Store, local: &LocalConfig, access: Access) -> Resolved {
    let base = resolve_base(store, local, access);
    match &local.config_dir {
        Some(dir) => merge_drop_ins(store, dir, base, &local.target),
        None => base,
    }
}

/// Merges the drop-in set that runs (see [`config_dir::merge`]) into the
/// resolved base config. A drop-in problem is the status error unless the
/// base has one of its own.
fn merge_drop_ins(
    store: &Store,
    dir: &Path,
    mut base: Resolved,
    target: &ValidationTarget,
) -> Resolved {
    let record = store.drop_in_record().unwrap_or_else(|err| {
        error!(%err, "cannot read the --config-dir drop-in record; no earlier drop-ins to fall back on");
        DropInRecord::default()
    });
    let merged = config_dir::merge(&base.config, config_dir::load(dir), &record, target);
    config_dir::report(&merged);
    if base.error.is_none() {
        base.error = merged.problem.as_ref().map(ConfigStatusError::from);
    }
    base.config = merged.config;
    base.drop_ins = merged.applied;
    base
}

fn resolve_base(store: &Store, local: &LocalConfig, access: Access) -> Resolved {
    let local_result = |assigned, last_known_good, error| Resolved {
        origin: Origin::Local,
        source: None,
        config: local.config.clone(),
        error,
        assigned,
        last_known_good,
        drop_ins: None,
    };
    let assigned = match store.assigned() {
        Ok(a) => a,
        Err(err) => {
            error!(%err, "cannot read the assigned config source; running the local config");
            let error = ConfigStatusError::LoadFailed(Detail::new(&err.to_string()));
            return local_result(None, None, Some(error));
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
                status_error = Some(ConfigStatusError::KnownBad(BadCause::of(&entry.reason)));
            }
            Ok(None) => match load_source(store, src, &local.target) {
                Ok(config) => {
                    return Resolved {
                        origin: Origin::Assigned,
                        source: Some(src.clone()),
                        config,
                        error: None,
                        assigned: assigned.clone(),
                        last_known_good: lkg,
                        drop_ins: None,
                    }
                }
                Err(refused) => {
                    error!(source = %src, detail = %refused.detail(), "the assigned config is refused: it fails to load or validate; it never reaches a kubelet");
                    status_error = Some(refused.status());
                    mark_bad(store, access, src, &refused.bad_reason());
                }
            },
            Err(err) => {
                error!(%err, "cannot read bad-configs; treating the assigned config as unusable");
                status_error = Some(ConfigStatusError::Internal(Detail::new(&format!(
                    "cannot read bad-configs: {err}"
                ))));
            }
        }
    }
    // A refused assignment never reached a kubelet: what runs keeps running,
    // even a config still in its trial.
    if let Some((src, config)) = status_error
        .as_ref()
        .and_then(|_| still_on_trial(store, assigned.as_ref(), lkg.as_ref(), &local.target))
    {
        return Resolved {
            origin: Origin::Assigned,
            source: Some(src),
            config,
            error: status_error,
            assigned,
            last_known_good: lkg,
            drop_ins: None,
        };
    }
    if let Some(l) = &lkg {
        match load_source(store, l, &local.target) {
            Ok(config) => {
                return Resolved {
                    origin: Origin::LastKnownGood,
                    source: Some(l.clone()),
                    config,
                    error: status_error,
                    assigned,
                    last_known_good: lkg,
                    drop_ins: None,
                }
            }
            Err(unusable) => {
                error!(source = %l, detail = %unusable.detail(), "last-known-good config is unusable; running the local config");
            }
        }
    }
    local_result(assigned, lkg, status_error)
}

/// The earlier assignment whose trial is under way (the store's trial
/// record), when it is neither the refused assignment nor last-known-good,
/// is not known bad, and still loads and validates: it keeps running, and
/// its trial goes on.
fn still_on_trial(
    store: &Store,
    refused: Option<&ConfigSource>,
    lkg: Option<&ConfigSource>,
    target: &ValidationTarget,
) -> Option<(ConfigSource, KubeletConfig)> {
    let trial = store.trial().ok().flatten()?;
    let src = trial.source;
    if Some(&src) == refused || Some(&src) == lkg || !matches!(store.bad_entry(&src), Ok(None)) {
        return None;
    }
    let config = load_source(store, &src, target).ok()?;
    debug!(source = %src, "the config on trial keeps running while the assignment is refused");
    Some((src, config))
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
