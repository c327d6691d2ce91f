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

use crate::config::dropin::{self, AppliedDropIns, DropInError, DropInOrigin, DropInProblem};
use crate::config::kubeconfig::{ConfigError, KubeletConfig, HASH_ALGORITHM, MAX_CONFIG_BYTES};
use crate::config::store::{
    ConfigSource, DropInRecord, DropInTrial, EffectiveRecord, Store, StoreError, Trial,
};
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
    /// A `--config-dir` drop-in cannot be read or parsed (the set that ran
    /// last, or last-known-good, runs instead).
    DropInLoadFailed,
    /// The drop-ins merged into the config do not validate.
    DropInValidateFailed,
    /// The directory's drop-in set crash-looped in its trial.
    DropInKnownBad {
        reason: String,
    },
}

impl From<&DropInProblem> for ConfigStatusError {
    fn from(problem: &DropInProblem) -> Self {
        match problem {
            DropInProblem::Load(_) => ConfigStatusError::DropInLoadFailed,
            DropInProblem::Validate(_) => ConfigStatusError::DropInValidateFailed,
            DropInProblem::KnownBad(reason) => ConfigStatusError::DropInKnownBad {
                reason: reason.clone(),
            },
        }
    }
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
            ConfigStatusError::DropInLoadFailed => {
                f.write_str("failed to load --config-dir drop-ins, see Kubelet log for details")
            }
            ConfigStatusError::DropInValidateFailed => f.write_str(
                "failed to validate config with --config-dir drop-ins, see Kubelet log for details",
            ),
            ConfigStatusError::DropInKnownBad { reason } => write!(
                f,
                "--config-dir drop-ins are known bad ({reason}), see Kubelet log for details"
            ),
        }
    }
}

/// Prefixes of the reasons recorded in bad-configs.
const BAD_LOAD: &str = "failed to load";
const BAD_VALIDATE: &str = "failed to validate";

/// The node's own config inputs: the init file (or built-in defaults), the
/// base when no config is assigned, and the kubelet's `--config-dir`,
/// whose drop-ins are merged over whichever config runs.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    pub path: Option<PathBuf>,
    pub config: KubeletConfig,
    /// The kubelet's `--config-dir` (taken from its arguments).
    pub config_dir: Option<PathBuf>,
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
    /// Loads and validates the init config (every start), or the defaults.
    pub fn load(init: Option<&Path>) -> Result<LocalConfig, LocalConfigError> {
        let Some(path) = init else {
            return Ok(LocalConfig {
                path: None,
                config: KubeletConfig::defaults(),
                config_dir: None,
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
            config_dir: None,
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
        let checked = dropin::load(dir)
            .map_err(LocalConfigError::DropIns)
            .and_then(|set| {
                let layer = crate::config::kubeconfig::DropInLayer::from_map(set.snapshot.layer)
                    .map_err(LocalConfigError::DropInsInvalid)?;
                let merged = self
                    .config
                    .with_drop_ins(&layer)
                    .map_err(LocalConfigError::DropInsInvalid)?;
                merged.validate().map_err(LocalConfigError::DropInsInvalid)
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

/// Decides which config runs: the assigned config, last-known-good or the
/// local config, with the `--config-dir` drop-ins merged in. In holder mode
/// an assigned config that fails to load or validate is recorded in
/// bad-configs with the reason.
pub fn resolve(store: &Store, local: &LocalConfig, access: Access) -> Resolved {
    let base = resolve_base(store, local, access);
    match &local.config_dir {
        Some(dir) => merge_drop_ins(store, dir, base),
        None => base,
    }
}

/// Merges the drop-in set that runs (see [`dropin::merge`]) into the
/// resolved base config. A drop-in problem is the status error unless the
/// base has one of its own.
fn merge_drop_ins(store: &Store, dir: &Path, mut base: Resolved) -> Resolved {
    let record = store.drop_in_record().unwrap_or_else(|err| {
        error!(%err, "cannot read the --config-dir drop-in record; no earlier drop-ins to fall back on");
        DropInRecord::default()
    });
    let merged = dropin::merge(&base.config, dropin::load(dir), &record);
    dropin::report(&merged);
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
                        drop_ins: None,
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
                    drop_ins: None,
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
/// does the same for the `--config-dir` drop-in set, and records what runs.
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
    record_drop_ins(store, r)?;
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

/// The drop-in part of [`on_applied`] (store lock held): the set that runs
/// is kept as the one that ran; a set that is not last-known-good is on
/// trial (its clock starts once). The first set a node runs is its
/// last-known-good at once, as the local config is trusted: there is
/// nothing older to go back to, and a crash loop of the node's own config
/// would otherwise be blamed on it and "rolled back" to no drop-ins.
fn record_drop_ins(store: &Store, r: &Resolved) -> Result<(), StoreError> {
    let mut record = store.drop_in_record()?;
    let before = record.clone();
    match &r.drop_ins {
        Some(applied) => {
            record.applied = Some(applied.set.snapshot.clone());
            if record.last_known_good.is_none() {
                info!(drop_ins = %applied.describe(), "the first --config-dir drop-ins this node runs: they are its last-known-good set");
                record.last_known_good = Some(applied.set.snapshot.clone());
            }
            match r.drop_ins_on_trial(&record) {
                Some(on_trial) => {
                    if record.trial.as_ref().map(|t| t.id.as_str()) != Some(on_trial.id()) {
                        info!(drop_ins = %on_trial.describe(), "new --config-dir drop-ins: starting their trial period");
                        record.trial = Some(DropInTrial {
                            id: on_trial.id().to_owned(),
                            since: now_rfc3339(),
                            startups: Vec::new(),
                        });
                    }
                }
                None => record.trial = None,
            }
        }
        None => {
            record.applied = None;
            record.trial = None;
        }
    }
    if record != before {
        store.set_drop_in_record(&record)?;
    }
    Ok(())
}

/// A trial's crash count after one more kubelet exit: the exits within the
/// trial, counted from the latest of its start, boot and this holder's
/// start.
struct TrialCount {
    start: SystemTime,
    count: usize,
    /// The trial is still running and the count is over the threshold.
    over: bool,
}

fn count_crashes(
    since: &str,
    startups: &[String],
    holder_since: SystemTime,
    r: &Resolved,
    now: SystemTime,
) -> TrialCount {
    let start = parse_time(since).unwrap_or(now);
    let end = start + r.config.config_trial_duration();
    let mut window_start = start.max(holder_since);
    if let Some(boot) = boot_time() {
        window_start = window_start.max(boot);
    }
    let count = startups
        .iter()
        .filter_map(|s| parse_time(s))
        .filter(|t| *t >= window_start && *t <= end)
        .count();
    TrialCount {
        start,
        count,
        over: now <= end && count > r.config.crash_loop_threshold() as usize,
    }
}

fn crash_loop_reason(count: usize, r: &Resolved) -> String {
    format!(
        "crash loop: {count} kubelet restarts within the {} trial period (crashLoopThreshold {})",
        humantime::format_duration(r.config.config_trial_duration()),
        r.config.crash_loop_threshold()
    )
}

/// Called by the holder when its kubelet exited without being asked to.
/// Records the restart against every config on trial (an assigned config,
/// a `--config-dir` drop-in set); when more than crashLoopThreshold
/// restarts fall in a trial period (counted from the latest of trial start,
/// boot and this holder's start), the config whose trial started last, the
/// newest change, is marked bad and the reason returned. The other trial's
/// count starts again: those crashes were the newer change's.
pub fn on_crash(
    store: &Store,
    r: &Resolved,
    holder_since: SystemTime,
) -> Result<Option<String>, StoreError> {
    if r.on_trial().is_none() && r.drop_ins.is_none() {
        return Ok(None);
    }
    let _guard = store.lock()?;
    let now = SystemTime::now();
    let stamp = now_rfc3339();
    let assigned = match r.on_trial() {
        Some(src) => store.trial()?.filter(|t| &t.source == src),
        None => None,
    };
    let mut record = store.drop_in_record()?;
    let on_trial_id = r.drop_ins_on_trial(&record).map(|d| d.id().to_owned());
    let drop_in_trial = record
        .trial
        .as_mut()
        .filter(|t| Some(&t.id) == on_trial_id.as_ref());
    if assigned.is_none() && drop_in_trial.is_none() {
        return Ok(None);
    }
    let mut assigned_startups = Vec::new();
    let assigned_count = match &assigned {
        Some(trial) => {
            assigned_startups = store.startups()?;
            assigned_startups.push(stamp.clone());
            Some(count_crashes(
                &trial.since,
                &assigned_startups,
                holder_since,
                r,
                now,
            ))
        }
        None => None,
    };
    let drop_in_count = drop_in_trial.map(|trial| {
        trial.startups.push(stamp.clone());
        count_crashes(&trial.since, &trial.startups, holder_since, r, now)
    });
    let blame_drop_ins = match (&assigned_count, &drop_in_count) {
        (Some(a), Some(d)) if a.over && d.over => d.start >= a.start,
        (_, Some(d)) => d.over,
        _ => false,
    };
    if blame_drop_ins {
        let count = drop_in_count.map_or(0, |d| d.count);
        let reason = crash_loop_reason(count, r);
        if let Some(id) = on_trial_id {
            warn!(drop_ins = %id, %reason, "marking the --config-dir drop-ins bad and going back to the last-known-good set");
            record.mark_bad(&id, &reason, &stamp);
        }
        record.trial = None;
        store.set_drop_in_record(&record)?;
        if assigned.is_some() {
            store.set_startups(&[])?;
        }
        return Ok(Some(reason));
    }
    if let (Some(src), Some(count)) = (r.on_trial(), &assigned_count) {
        if count.over {
            let reason = crash_loop_reason(count.count, r);
            warn!(source = %src, %reason, "marking the assigned config bad and rolling back to last-known-good");
            store.mark_bad(src, &reason, &stamp)?;
            store.set_startups(&[])?;
            store.set_trial(None)?;
            if let Some(trial) = record.trial.as_mut() {
                trial.startups.clear();
            }
            store.set_drop_in_record(&record)?;
            return Ok(Some(reason));
        }
    }
    if assigned.is_some() {
        store.set_startups(&assigned_startups)?;
    }
    if drop_in_count.is_some() {
        store.set_drop_in_record(&record)?;
    }
    Ok(None)
}

/// Called by the holder while its kubelet runs: an assigned config, and a
/// `--config-dir` drop-in set, that survived its trial period becomes
/// last-known-good. Returns whether anything was promoted.
pub fn maybe_promote(store: &Store, r: &Resolved) -> Result<bool, StoreError> {
    let assigned = promote_assigned(store, r)?;
    let drop_ins = promote_drop_ins(store, r)?;
    Ok(assigned || drop_ins)
}

fn trial_over(since: &str, r: &Resolved) -> bool {
    parse_time(since)
        .is_some_and(|start| SystemTime::now() >= start + r.config.config_trial_duration())
}

fn promote_assigned(store: &Store, r: &Resolved) -> Result<bool, StoreError> {
    let Some(src) = r.on_trial() else {
        return Ok(false);
    };
    let Some(trial) = store.trial()?.filter(|t| &t.source == src) else {
        return Ok(false);
    };
    if !trial_over(&trial.since, r) {
        return Ok(false);
    }
    let _guard = store.lock()?;
    store.set_last_known_good(Some(src))?;
    store.set_trial(None)?;
    store.set_startups(&[])?;
    info!(source = %src, "assigned config survived its trial period; it is now last-known-good");
    Ok(true)
}

fn promote_drop_ins(store: &Store, r: &Resolved) -> Result<bool, StoreError> {
    if r.drop_ins.is_none() {
        return Ok(false);
    }
    let record = store.drop_in_record()?;
    let Some(applied) = r.drop_ins_on_trial(&record) else {
        return Ok(false);
    };
    let over = record
        .trial
        .as_ref()
        .is_some_and(|t| t.id == applied.id() && trial_over(&t.since, r));
    if !over {
        return Ok(false);
    }
    let _guard = store.lock()?;
    let mut record = store.drop_in_record()?;
    record.last_known_good = Some(applied.set.snapshot.clone());
    record.trial = None;
    store.set_drop_in_record(&record)?;
    info!(drop_ins = %applied.describe(), "--config-dir drop-ins survived their trial period; they are now last-known-good");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

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

    // --- --config-dir drop-ins ------------------------------------------

    struct Node {
        _dir: tempfile::TempDir,
        store: Store,
        drop_ins: PathBuf,
        local: LocalConfig,
    }

    fn node(init: &str) -> Node {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store")).unwrap();
        let drop_ins = dir.path().join("kubelet.conf.d");
        fs::create_dir(&drop_ins).unwrap();
        fs::set_permissions(&drop_ins, fs::Permissions::from_mode(0o755)).unwrap();
        let init_path = dir.path().join("init.yaml");
        fs::write(&init_path, init).unwrap();
        let local = LocalConfig::load(Some(&init_path))
            .unwrap()
            .with_config_dir(Some(&drop_ins), store.root())
            .unwrap();
        Node {
            _dir: dir,
            store,
            drop_ins,
            local,
        }
    }

    impl Node {
        fn write(&self, name: &str, body: &str) {
            fs::write(
                self.drop_ins.join(name),
                format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}\n"),
            )
            .unwrap();
        }
        fn resolve(&self) -> Resolved {
            resolve(&self.store, &self.local, Access::Holder)
        }
        /// Resolves and records it as applied, as the holder does at a start.
        fn apply(&self) -> Resolved {
            let r = self.resolve();
            on_applied(&self.store, &r).unwrap();
            r
        }
    }

    const INIT: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 50\ncrashLoopThreshold: 1\nconfigTrialDuration: 10m\n";

    #[test]
    fn drop_ins_are_merged_into_the_config_that_runs() {
        let n = node(INIT);
        n.write("10-pods.conf", "maxPods: 60");
        let r = n.apply();
        assert_eq!(r.config.effective()["maxPods"], 60);
        assert!(r.error.is_none());
        let applied = r.drop_ins.as_ref().unwrap();
        assert_eq!(applied.origin, DropInOrigin::Current);
        assert!(r.describe().contains("10-pods.conf"), "{}", r.describe());
        // The node's first set is its last-known-good: nothing to try.
        let record = n.store.drop_in_record().unwrap();
        assert_eq!(record.last_known_good.unwrap().id, applied.id());
        assert_eq!(record.applied.unwrap().id, applied.id());
        assert!(record.trial.is_none());
        // A change is on trial from its first start.
        n.write("20-more.conf", "maxPods: 61");
        let r = n.apply();
        let record = n.store.drop_in_record().unwrap();
        assert_eq!(record.trial.unwrap().id, r.drop_ins.as_ref().unwrap().id());
        assert_eq!(record.last_known_good.unwrap().id, applied.id());
    }

    #[test]
    fn a_refused_drop_in_change_keeps_the_set_that_ran() {
        let n = node(INIT);
        n.write("10-pods.conf", "maxPods: 60");
        let ran = n.apply();
        // Invalid once merged: refused, the set that ran stays.
        n.write("20-port.conf", "port: 70000");
        let r = n.apply();
        assert_eq!(r.error, Some(ConfigStatusError::DropInValidateFailed));
        assert_eq!(r.hash(), ran.hash());
        assert_eq!(r.drop_ins.as_ref().unwrap().origin, DropInOrigin::Previous);
        // Unparsable: the same, with the load text.
        n.write("20-port.conf", "port: [");
        let r = n.apply();
        assert_eq!(r.error, Some(ConfigStatusError::DropInLoadFailed));
        assert_eq!(r.hash(), ran.hash());
        assert_eq!(
            r.error.unwrap().to_string(),
            "failed to load --config-dir drop-ins, see Kubelet log for details"
        );
        // Fixed: it runs.
        n.write("20-port.conf", "port: 10251");
        let r = n.apply();
        assert!(r.error.is_none());
        assert_eq!(r.config.effective()["port"], 10251);
        assert_eq!(r.config.effective()["maxPods"], 60);
    }

    #[test]
    fn a_crash_looping_drop_in_set_goes_back_to_last_known_good() {
        let n = node(INIT);
        n.write("10-pods.conf", "maxPods: 59");
        n.apply();
        // A change whose trial is over becomes last-known-good.
        n.write("10-pods.conf", "maxPods: 60");
        let good = n.apply();
        let mut record = n.store.drop_in_record().unwrap();
        record.trial.as_mut().unwrap().since = "2000-01-01T00:00:00Z".into();
        n.store.set_drop_in_record(&record).unwrap();
        assert!(maybe_promote(&n.store, &good).unwrap());
        let record = n.store.drop_in_record().unwrap();
        assert_eq!(
            record.last_known_good.unwrap().id,
            good.drop_ins.as_ref().unwrap().id()
        );
        assert!(record.trial.is_none());
        // A new set crash-loops: threshold 1, the second exit marks it bad.
        n.write("20-more.conf", "maxPods: 70");
        let bad = n.apply();
        assert_eq!(bad.config.effective()["maxPods"], 70);
        let since = SystemTime::now() - Duration::from_secs(1);
        assert_eq!(on_crash(&n.store, &bad, since).unwrap(), None);
        let reason = on_crash(&n.store, &bad, since).unwrap().unwrap();
        assert!(reason.contains("crash loop"), "{reason}");
        let record = n.store.drop_in_record().unwrap();
        assert!(record.bad.contains_key(bad.drop_ins.as_ref().unwrap().id()));
        assert!(record.trial.is_none());
        // The directory still holds it: last-known-good runs, reported.
        let r = n.apply();
        assert_eq!(r.config.effective()["maxPods"], 60);
        assert_eq!(
            r.drop_ins.as_ref().unwrap().origin,
            DropInOrigin::LastKnownGood
        );
        assert!(matches!(
            r.error,
            Some(ConfigStatusError::DropInKnownBad { .. })
        ));
        // Not on trial, so its exits count against nothing.
        assert_eq!(on_crash(&n.store, &r, since).unwrap(), None);
        // The assigned config was not blamed.
        assert!(n.store.bad_configs().unwrap().is_empty());
    }

    #[test]
    fn the_newest_change_is_blamed_for_a_crash_loop() {
        let since = SystemTime::now() - Duration::from_secs(1);
        let trial_of = |n: &Node| n.store.drop_in_record().unwrap().trial;
        // A drop-in change, then an assignment: both on trial, the
        // assignment is newer and is blamed.
        let n = node(INIT);
        n.write("10-pods.conf", "maxPods: 60");
        n.apply();
        n.write("20-more.conf", "maxPods: 61");
        n.apply();
        std::thread::sleep(Duration::from_millis(5));
        let a = src("a", "1");
        checkpoint(&n.store, &a, GOOD);
        n.store.set_assigned(Some(&a)).unwrap();
        let r = n.apply();
        assert_eq!(r.on_trial(), Some(&a));
        assert!(trial_of(&n).is_some());
        assert_eq!(on_crash(&n.store, &r, since).unwrap(), None);
        assert!(on_crash(&n.store, &r, since).unwrap().is_some());
        assert!(n.store.bad_entry(&a).unwrap().is_some());
        assert!(n.store.drop_in_record().unwrap().bad.is_empty());
        // The drop-in trial's count starts again.
        assert_eq!(trial_of(&n).unwrap().startups.len(), 0);

        // An assignment, then a drop-in change: the drop-ins are blamed.
        let n = node(INIT);
        n.write("10-pods.conf", "maxPods: 60");
        n.apply();
        checkpoint(&n.store, &a, GOOD);
        n.store.set_assigned(Some(&a)).unwrap();
        n.apply();
        std::thread::sleep(Duration::from_millis(5));
        n.write("20-more.conf", "maxPods: 61");
        let r = n.apply();
        assert_eq!(r.on_trial(), Some(&a));
        assert_eq!(on_crash(&n.store, &r, since).unwrap(), None);
        assert!(on_crash(&n.store, &r, since).unwrap().is_some());
        assert!(n.store.bad_entry(&a).unwrap().is_none());
        let record = n.store.drop_in_record().unwrap();
        assert!(record.bad.contains_key(r.drop_ins.as_ref().unwrap().id()));
        assert!(n.store.startups().unwrap().is_empty());
    }

    #[test]
    fn a_broken_config_dir_at_start_is_refused_unless_earlier_drop_ins_exist() {
        let n = node(INIT);
        n.write("10-bad.conf", "fooBar: 1");
        let local = LocalConfig::load(None).unwrap();
        let err = local
            .clone()
            .with_config_dir(Some(&n.drop_ins), n.store.root())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("10-bad.conf") && err.contains("fooBar"),
            "{err}"
        );
        n.write("10-bad.conf", "port: 70000");
        let err = local
            .clone()
            .with_config_dir(Some(&n.drop_ins), n.store.root())
            .unwrap_err()
            .to_string();
        assert!(err.contains("port"), "{err}");
        let missing = n.drop_ins.join("missing");
        assert!(local
            .clone()
            .with_config_dir(Some(&missing), n.store.root())
            .is_err());
        // Once a set ran, a restart with a broken directory runs that set.
        n.write("10-bad.conf", "maxPods: 70");
        n.apply();
        n.write("10-bad.conf", "port: 70000");
        let started = local
            .with_config_dir(Some(&n.drop_ins), n.store.root())
            .unwrap();
        let r = resolve(&n.store, &started, Access::Holder);
        assert_eq!(r.config.effective()["maxPods"], 70);
        assert_eq!(r.error, Some(ConfigStatusError::DropInValidateFailed));
    }
}
