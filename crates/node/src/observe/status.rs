//! `kubelet-pivot status`: who holds the lock, who waits, what config runs.
//! Reads only: it never opens the lock file (an open is what a holder
//! watches), creates, changes or deletes nothing; it looks at the holder
//! record, claims and /proc/locks through the same bounded, checked reads
//! as the supervisor, and says which section it could not read and why.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::store::{
    BadConfigs, BlockedPods, ConfigSource, DisruptionRecord, DropInBad, DropInRecord,
    DropInSnapshot, EffectiveRecord, Store, StoreError,
};
use crate::pivot::claims::{self, Claim, Cleanup};
use crate::pivot::holder::{HolderError, HolderRecord};
use crate::pivot::lock_identity::LockIdentity;
use crate::pivot::lock_record::{self, LockRecord, Mismatch};
use crate::pivot::role::Role;
use crate::pivot::state::StateDir;
use crate::procfs::{self, FileKey};
use crate::version::{self, BuildInfo};

/// Exit code of `status` when no live holder exists.
pub const EXIT_NO_HOLDER: i32 = 3;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HolderView {
    pub role: Role,
    pub generation: u32,
    pub pid: i32,
    pub kubelet_pid: Option<i32>,
    pub since: String,
    /// True when the recorded supervisor (pid and start time) no longer runs.
    pub stale: bool,
    /// The holder's build; `null` when its record has none (a build older
    /// than [`version::FIRST_RECORDED`]).
    pub build: Option<BuildInfo>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimView {
    pub role: Role,
    pub generation: u32,
    pub pid: i32,
    pub since: String,
    /// The claimant's build; `null` when its claim has none (a build older
    /// than [`version::FIRST_RECORDED`]).
    pub build: Option<BuildInfo>,
}

impl From<&Claim> for ClaimView {
    fn from(c: &Claim) -> Self {
        ClaimView {
            role: c.role,
            generation: c.generation,
            pid: c.pid,
            since: c.since.clone(),
            build: c.build.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockView {
    pub path: PathBuf,
    /// Whether the kernel shows the lock file as flocked right now.
    pub locked: bool,
    pub holder: Option<HolderView>,
    /// Live supervisors contending for (or holding) the lock.
    pub claims: Vec<ClaimView>,
    /// The lock file the node's supervisors use (`STATE/lock-file.json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_lock_file: Option<LockRecord>,
    /// The last supervisor that refused to start because it was given
    /// another lock file, until one starts with the node's again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<MismatchView>,
    /// Sections that could not be read, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<Unreadable>,
    /// Problems reading the state (corrupt record, ignored claims, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A lock mismatch: the record and its one-line explanation.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MismatchView {
    #[serde(flatten)]
    pub record: Mismatch,
    pub message: String,
}

/// A section of the state that could not be read.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unreadable {
    /// `stateDirectory`, `holder` or `claims`.
    pub section: &'static str,
    /// permission denied, corrupt, not a regular file, too large, ...
    pub kind: String,
    pub message: String,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigView {
    /// What the holder last applied: {origin, source, hashAlgorithm, hash, since}.
    pub active: Option<EffectiveRecord>,
    pub assigned: Option<ConfigSource>,
    pub last_known_good: Option<ConfigSource>,
    pub error: Option<String>,
    pub bad_configs: BadConfigs,
    /// A disruptive change in progress (drain) or held, and what it waits for.
    pub pending_change: Option<DisruptionRecord>,
    /// The kubelet's `--config-dir` drop-ins, when a holder recorded any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drop_ins: Option<DropInView>,
}

/// A drop-in set, by id and file names (its merged content stays in the
/// store).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DropInSetView {
    pub id: String,
    pub files: Vec<String>,
}

impl From<&DropInSnapshot> for DropInSetView {
    fn from(s: &DropInSnapshot) -> Self {
        DropInSetView {
            id: s.id.clone(),
            files: s.files.iter().map(|f| f.name.clone()).collect(),
        }
    }
}

impl std::fmt::Display for DropInSetView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({})",
            self.id.get(..12).unwrap_or(&self.id),
            self.files.join(", ")
        )
    }
}

/// `v1/config-dir.json` without the merged contents.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DropInView {
    /// The set the last kubelet ran with.
    pub applied: Option<DropInSetView>,
    pub last_known_good: Option<DropInSetView>,
    /// The set on trial and since when.
    pub trial: Option<DropInTrialView>,
    /// Sets that crash-looped in their trial.
    pub bad: BTreeMap<String, DropInBad>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DropInTrialView {
    pub id: String,
    pub since: String,
    /// Kubelet exits counted in the trial.
    pub restarts: usize,
}

impl DropInView {
    fn of(record: &DropInRecord) -> Option<DropInView> {
        if *record == DropInRecord::default() {
            return None;
        }
        Some(DropInView {
            applied: record.applied.as_ref().map(DropInSetView::from),
            last_known_good: record.last_known_good.as_ref().map(DropInSetView::from),
            trial: record.trial.as_ref().map(|t| DropInTrialView {
                id: t.id.clone(),
                since: t.since.clone(),
                restarts: t.startups.len(),
            }),
            bad: record.bad.clone(),
        })
    }
}

impl ConfigView {
    /// Reads the checkpoint store without writing anything.
    pub fn from_store(dir: &Path) -> (ConfigView, Vec<String>) {
        let store = Store::open_read_only(dir);
        let mut warnings = Vec::new();
        let mut warn = |e: StoreError| warnings.push(e.to_string());
        let assigned = store.assigned().map_err(&mut warn).ok().flatten();
        let last_known_good = store.last_known_good().map_err(&mut warn).ok().flatten();
        let active = store.effective_record().map_err(&mut warn).ok().flatten();
        let bad_configs = store.bad_configs().map_err(&mut warn).unwrap_or_default();
        let pending_change = store.disruption().map_err(&mut warn).ok().flatten();
        let drop_ins = store
            .drop_in_record()
            .map_err(&mut warn)
            .ok()
            .and_then(|r| DropInView::of(&r));
        let view = ConfigView {
            pending_change,
            drop_ins,
            error: active.as_ref().and_then(|e| e.error.clone()),
            active,
            assigned,
            last_known_good,
            bad_configs,
        };
        (view, warnings)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    pub lock: LockView,
    pub config: ConfigView,
    /// What the holder's API access does (`STATE/api.json`); `null` when
    /// no holder recorded it.
    pub api: Option<crate::cluster::api::ApiStatus>,
    /// The build of this `status` command.
    pub build: BuildInfo,
}

impl StatusReport {
    pub fn has_live_holder(&self) -> bool {
        matches!(&self.lock.holder, Some(h) if !h.stale)
    }
}

fn is_locked(lock: &Path, locks: &[procfs::LockEntry]) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(lock) else {
        return false;
    };
    let key = FileKey::of_metadata(&meta);
    locks.iter().any(|e| !e.blocked && e.file == key)
}

fn holder_kind(err: &HolderError) -> String {
    match err {
        HolderError::Corrupt { .. } => "corrupt".to_string(),
        HolderError::Unsafe(e) => e.kind().to_string(),
        HolderError::Fs(e) if e.io_error().kind() == std::io::ErrorKind::PermissionDenied => {
            "permission denied".to_string()
        }
        HolderError::Fs(_) => "unreadable".to_string(),
    }
}

/// Gathers the lock state. Reads only.
pub fn lock_view(lock: &Path, state: &StateDir) -> LockView {
    let mut view = LockView {
        path: lock.to_path_buf(),
        locked: false,
        holder: None,
        claims: Vec::new(),
        node_lock_file: None,
        mismatch: None,
        unreadable: Vec::new(),
        warnings: Vec::new(),
    };
    let locks = match procfs::read_locks() {
        Ok(l) => l,
        Err(err) => {
            view.warnings
                .push(format!("cannot read /proc/locks: {err}"));
            Vec::new()
        }
    };
    view.locked = is_locked(lock, &locks);
    if let Err(err) = state.verify() {
        let kind = match &err {
            crate::safefs::trust::TrustError::Io { source, .. }
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                "permission denied"
            }
            crate::safefs::trust::TrustError::Io { source, .. }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                "missing (no supervisor has run with it yet)"
            }
            _ => "untrusted",
        };
        view.unreadable.push(Unreadable {
            section: "stateDirectory",
            kind: kind.to_string(),
            message: err.to_string(),
        });
        return view;
    }
    match HolderRecord::read(state) {
        Ok(Some(rec)) => {
            view.holder = Some(HolderView {
                role: rec.role,
                generation: rec.generation,
                pid: rec.pid,
                kubelet_pid: rec.kubelet_pid,
                since: rec.since.clone(),
                stale: !rec.is_live(),
                build: rec.build.clone(),
            })
        }
        Ok(None) => {}
        Err(err) => view.unreadable.push(Unreadable {
            section: "holder",
            kind: holder_kind(&err),
            message: err.to_string(),
        }),
    }
    lock_file_view(lock, state, &mut view);
    let scan = claims::scan(state, None, &locks, Cleanup::ReadOnly);
    view.claims = scan
        .live
        .iter()
        .map(|c| ClaimView::from(&c.claim))
        .collect();
    view.warnings
        .extend(scan.rejected.iter().map(ToString::to_string));
    view
}

/// The node's lock file record and a refusal, if any; a warning when this
/// command's own `--lock-file` is not the node's.
fn lock_file_view(lock: &Path, state: &StateDir, view: &mut LockView) {
    match lock_record::read_record(state) {
        Ok(Some(rec)) => {
            let ours = LockIdentity::of(lock).ok();
            if rec.this_boot() && ours.as_ref() != Some(&rec.lock.identity) {
                view.warnings.push(format!(
                    "this command's --lock-file {} is not the node's lock file {} (recorded by {})",
                    lock.display(),
                    rec.lock,
                    rec.recorded_by
                ));
            }
            view.node_lock_file = Some(rec);
        }
        Ok(None) => {}
        Err(err) => view.warnings.push(err.to_string()),
    }
    match lock_record::read_mismatch(state) {
        Ok(Some(m)) => {
            view.mismatch = Some(MismatchView {
                message: m.message(),
                record: m,
            })
        }
        Ok(None) => {}
        Err(err) => view.warnings.push(err.to_string()),
    }
}

pub fn report(lock: &Path, state: &StateDir, store_dir: &Path) -> StatusReport {
    let mut lock = lock_view(lock, state);
    let (config, warnings) = ConfigView::from_store(store_dir);
    lock.warnings.extend(warnings);
    // Only the live holder's record: another supervisor's (an earlier
    // holder's, or one of a build that writes none) says nothing about now.
    let holder = lock.holder.as_ref().filter(|h| !h.stale).map(|h| h.pid);
    let api = match holder {
        Some(pid) if lock.unreadable.is_empty() => crate::cluster::api::ApiStatus::read(state)
            .unwrap_or_else(|err| {
                lock.warnings.push(err);
                None
            })
            .filter(|a| a.pid == Some(pid)),
        _ => None,
    };
    StatusReport {
        lock,
        config,
        api,
        build: BuildInfo::current(),
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// The active config record: origin, source, short hash, since.
fn describe_active(e: &EffectiveRecord) -> String {
    let what = match &e.source {
        Some(src) => format!("{}: {src}", e.origin),
        None => "local config".to_string(),
    };
    format!(
        "{what}, hash {}, since {}",
        e.hash.get(..12).unwrap_or(&e.hash),
        e.since
    )
}

/// Human-readable table.
pub fn write_table(r: &StatusReport, out: &mut impl Write) -> std::io::Result<()> {
    let locked = if r.lock.locked {
        "locked"
    } else {
        "NOT locked"
    };
    writeln!(out, "LOCK             {} ({locked})", r.lock.path.display())?;
    if let Some(m) = &r.lock.mismatch {
        writeln!(out, "LOCK MISMATCH    at {}: {}", m.record.at, m.message)?;
    }
    match &r.lock.holder {
        Some(h) => {
            let who = match h.role {
                Role::Bootstrap => "bootstrap".to_string(),
                Role::SelfHosted => format!("self-hosted gen {}", h.generation),
            };
            writeln!(
                out,
                "HOLDER           {who}, pid {}, kubelet pid {}, since {}{}",
                h.pid,
                opt(h.kubelet_pid),
                h.since,
                if h.stale {
                    " (STALE: supervisor is gone)"
                } else {
                    ""
                }
            )?;
            writeln!(
                out,
                "       VERSION   {}",
                version::describe(h.build.as_ref())
            )?;
        }
        None => match r.lock.unreadable.first() {
            Some(u) => writeln!(
                out,
                "HOLDER           unknown: {} unreadable ({}): {}",
                u.section, u.kind, u.message
            )?,
            None => writeln!(out, "HOLDER           none")?,
        },
    }
    if let Some(u) = r.lock.unreadable.iter().find(|u| u.section != "holder") {
        writeln!(
            out,
            "CLAIMS           unknown: {} unreadable ({})",
            u.section, u.kind
        )?;
    } else if r.lock.claims.is_empty() {
        writeln!(out, "CLAIMS           none")?;
    } else {
        writeln!(
            out,
            "CLAIMS           ROLE         GEN  PID      SINCE                     VERSION"
        )?;
        for c in &r.lock.claims {
            writeln!(
                out,
                "                 {:<12} {:<4} {:<8} {:<25} {}",
                c.role.to_string(),
                c.generation,
                c.pid,
                c.since,
                version::describe(c.build.as_ref())
            )?;
        }
    }
    for w in &r.lock.warnings {
        writeln!(out, "WARNING          {w}")?;
    }
    if let Some(api) = &r.api {
        writeln!(out, "API              {}", api.message)?;
    }
    let active = match &r.config.active {
        Some(v) => describe_active(v),
        None => "none recorded yet (no kubelet started with this store)".to_string(),
    };
    let source = |v: &Option<ConfigSource>| match v {
        Some(v) => v.to_string(),
        None => "none (local config)".to_string(),
    };
    writeln!(out, "CONFIG ACTIVE    {active}")?;
    writeln!(out, "       ASSIGNED  {}", source(&r.config.assigned))?;
    writeln!(
        out,
        "       LKG       {}",
        source(&r.config.last_known_good)
    )?;
    writeln!(out, "       ERROR     {}", opt(r.config.error.as_deref()))?;
    if r.config.bad_configs.is_empty() {
        writeln!(out, "       BAD       none")?;
    }
    for (i, (uid, entry)) in r.config.bad_configs.iter().enumerate() {
        write_bad(out, i, uid, entry)?;
    }
    if let Some(d) = &r.config.drop_ins {
        write_drop_ins(out, d)?;
    }
    write_pending(out, r.config.pending_change.as_ref())?;
    writeln!(out, "STATUS BUILD     {}", r.build)
}

/// The `--config-dir` drop-ins: the set that ran, its trial, last-known-good
/// and the sets that crash-looped.
fn write_drop_ins(out: &mut impl Write, d: &DropInView) -> std::io::Result<()> {
    let applied = match (&d.applied, &d.trial) {
        (Some(a), Some(t)) if t.id == a.id => format!(
            "{a}, on trial since {} ({} kubelet restarts)",
            t.since, t.restarts
        ),
        (Some(a), _) => a.to_string(),
        (None, _) => "none".to_string(),
    };
    writeln!(out, "DROP-INS RAN     {applied}")?;
    writeln!(out, "         LKG     {}", opt(d.last_known_good.as_ref()))?;
    for (i, (id, bad)) in d.bad.iter().enumerate() {
        writeln!(
            out,
            "{}{} since {}: {}",
            if i == 0 {
                "         BAD     "
            } else {
                "                 "
            },
            id.get(..12).unwrap_or(id),
            bad.time,
            bad.reason
        )?;
    }
    Ok(())
}

/// The pending disruptive change: class, action, phase, fields and what it
/// waits for.
fn write_pending(out: &mut impl Write, pending: Option<&DisruptionRecord>) -> std::io::Result<()> {
    let Some(p) = pending else {
        return writeln!(out, "PENDING CHANGE   none");
    };
    writeln!(
        out,
        "PENDING CHANGE   {} change, action {}, {} since {} (attempt {})",
        p.class,
        p.action,
        p.phase.as_str(),
        p.since,
        p.attempts
    )?;
    writeln!(out, "       FIELDS    {}", p.fields.join(", "))?;
    writeln!(out, "       WAITS FOR {}", p.waiting_for)?;
    if p.cordoned_by_us {
        writeln!(
            out,
            "       CORDONED  by kubelet-pivot (uncordoned when the change is done)"
        )?;
    }
    for b in &p.blocked {
        writeln!(out, "       BLOCKED   {}", describe_blocked(b))?;
    }
    match (&p.last_error, p.failure) {
        (Some(e), Some(kind)) => writeln!(out, "       LAST TRY  failed ({}): {e}", kind.as_str())?,
        (Some(e), None) => writeln!(out, "       LAST TRY  {e}")?,
        (None, _) => {}
    }
    if let Some(t) = &p.retry_at {
        writeln!(out, "       RETRY AT  {t}")?;
    }
    Ok(())
}

/// One reason pods of a drain are refused: how many, and the server's last
/// answer of that kind.
fn describe_blocked(b: &BlockedPods) -> String {
    let answer = match b.code {
        0 => "no answer".to_string(),
        code => format!("HTTP {code}"),
    };
    format!(
        "{} pod(s) {}, asked again with backoff; last: {}, {answer}: {}",
        b.pods,
        b.reason.describe(),
        b.example,
        b.message
    )
}

fn write_bad(
    out: &mut impl Write,
    i: usize,
    uid: &str,
    entry: &crate::config::store::BadEntry,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{}UID {uid} (ResourceVersion: {}) since {}: {}",
        if i == 0 {
            "       BAD       "
        } else {
            "                 "
        },
        entry.resource_version,
        entry.time,
        entry.reason
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::store::BadEntry;

    fn source(name: &str, uid: &str, rv: &str) -> ConfigSource {
        ConfigSource {
            namespace: "kubelet-config".into(),
            name: name.into(),
            uid: uid.into(),
            resource_version: rv.into(),
            kubelet_config_key: "kubelet".into(),
        }
    }

    #[test]
    fn a_pending_drain_says_what_blocks_it_and_why_it_failed() {
        use crate::config::store::{BlockReason, DrainFailure, DrainPhase};
        use kp_kubelet_config::disruption::{Action, Class};
        let mut record = DisruptionRecord {
            target_hash: "h".into(),
            hash_algorithm: "a".into(),
            target: None,
            class: Class::Allocatable,
            action: Action::Drain,
            fields: vec!["maxPods".into()],
            phase: DrainPhase::Evicting,
            cordoned_by_us: true,
            since: "T0".into(),
            attempts: 1,
            retry_at: None,
            waiting_for: "3 pod(s) to leave the node".into(),
            last_error: None,
            blocked: vec![
                BlockedPods {
                    reason: BlockReason::DisruptionBudget,
                    pods: 2,
                    example: "default/web-1".into(),
                    code: 429,
                    message:
                        "\"Cannot evict pod as it would violate the pod's disruption budget.\""
                            .into(),
                },
                BlockedPods {
                    reason: BlockReason::ServerError,
                    pods: 1,
                    example: "default/api-1".into(),
                    code: 503,
                    message: "\"the server is currently unable to handle the request\"".into(),
                },
            ],
            failure: None,
        };
        let text = |r: &DisruptionRecord| {
            let mut out = Vec::new();
            write_pending(&mut out, Some(r)).unwrap();
            String::from_utf8(out).unwrap()
        };
        let evicting = text(&record);
        for needle in [
            "BLOCKED   2 pod(s) blocked by a PodDisruptionBudget, asked again with backoff; last: default/web-1, HTTP 429: \"Cannot evict pod",
            "BLOCKED   1 pod(s) refused by API server errors, asked again with backoff; last: default/api-1, HTTP 503: \"the server is currently",
        ] {
            assert!(evicting.contains(needle), "missing {needle:?} in\n{evicting}");
        }
        record.phase = DrainPhase::BackingOff;
        record.blocked.clear();
        record.failure = Some(DrainFailure::MultipleBudgets);
        record.last_error = Some(
            "cannot evict pod default/web-1: more than one PodDisruptionBudget selects it".into(),
        );
        let failed = text(&record);
        assert!(
            failed.contains(
                "LAST TRY  failed (multiple PodDisruptionBudgets): cannot evict pod default/web-1"
            ),
            "{failed}"
        );
        assert!(!failed.contains("BLOCKED"), "{failed}");
    }

    #[test]
    fn table_describes_sources_and_bad_configs_in_words() {
        let src = source("cfg-a", "u-1", "7");
        let report = StatusReport {
            lock: LockView {
                path: PathBuf::from("/run/lock/kubelet.lock"),
                locked: true,
                holder: Some(HolderView {
                    role: Role::SelfHosted,
                    generation: 2,
                    pid: 10,
                    kubelet_pid: Some(11),
                    since: "T0".into(),
                    stale: false,
                    build: Some(BuildInfo {
                        version: "0.5.0".into(),
                        commit: "0123456789abcdef".into(),
                        protocol: 4,
                    }),
                }),
                claims: vec![ClaimView {
                    role: Role::Bootstrap,
                    generation: 0,
                    pid: 12,
                    since: "T5".into(),
                    build: None,
                }],
                node_lock_file: None,
                mismatch: Some({
                    let lock = |path: &str, ino| crate::pivot::lock_identity::LockRef {
                        path: path.into(),
                        identity: LockIdentity {
                            dir_dev: 0,
                            dir_ino: ino,
                            name: "kubelet.lock".into(),
                        },
                    };
                    let record = Mismatch {
                        refused: "self-hosted gen 3".into(),
                        given: lock("/host/typo/kubelet.lock", 7),
                        node: lock("/run/lock/kubelet.lock", 5),
                        used_by: "self-hosted gen 2, pid 10, is running".into(),
                        at: "T6".into(),
                    };
                    MismatchView {
                        message: record.message(),
                        record,
                    }
                }),
                unreadable: vec![],
                warnings: vec!["holder record is corrupt".into()],
            },
            config: ConfigView {
                active: Some(EffectiveRecord {
                    source: Some(src.clone()),
                    origin: "last-known-good".into(),
                    hash_algorithm: "sha256-canonical-json-v1".into(),
                    hash: "0123456789abcdef".into(),
                    class_hashes: None,
                    input_sha256: None,
                    error: None,
                    since: "T1".into(),
                }),
                pending_change: None,
                assigned: Some(source("cfg-b", "u-2", "9")),
                last_known_good: Some(src),
                error: Some("failed to validate config".into()),
                bad_configs: BadConfigs::from([(
                    "u-2".to_string(),
                    BadEntry {
                        time: "T2".into(),
                        reason: "crash loop".into(),
                        resource_version: "9".into(),
                    },
                )]),
                drop_ins: Some(DropInView {
                    applied: Some(DropInSetView {
                        id: "aa".repeat(32),
                        files: vec!["10-a.conf".into(), "sub/20-b.conf".into()],
                    }),
                    last_known_good: Some(DropInSetView {
                        id: "bb".repeat(32),
                        files: vec!["10-a.conf".into()],
                    }),
                    trial: Some(DropInTrialView {
                        id: "aa".repeat(32),
                        since: "T3".into(),
                        restarts: 1,
                    }),
                    bad: BTreeMap::from([(
                        "cc".repeat(32),
                        DropInBad {
                            time: "T4".into(),
                            reason: "crash loop".into(),
                        },
                    )]),
                }),
            },
            api: Some(crate::cluster::api::ApiStatus::waiting(Path::new(
                "/etc/kubernetes/kubelet.conf",
            ))),
            build: BuildInfo::current(),
        };
        let mut out = Vec::new();
        write_table(&report, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        for needle in [
            "/run/lock/kubelet.lock (locked)",
            "HOLDER           self-hosted gen 2, pid 10, kubelet pid 11, since T0",
            "       VERSION   0.5.0 (commit 0123456789ab, protocol 4)",
            "bootstrap    0    12       T5                        unknown (older than 0.5.0)",
            "STATUS BUILD     ",
            "WARNING          holder record is corrupt",
            "LOCK MISMATCH    at T6: self-hosted gen 3 was given lock file /host/typo/kubelet.lock",
            "API              waiting for /etc/kubernetes/kubelet.conf (the kubelet writes it after its TLS bootstrap)",
            "CONFIG ACTIVE    last-known-good: ConfigMap kubelet-config/cfg-a (UID: u-1, ResourceVersion: 7), hash 0123456789ab, since T1",
            "ASSIGNED  ConfigMap kubelet-config/cfg-b (UID: u-2, ResourceVersion: 9)",
            "ERROR     failed to validate config",
            "BAD       UID u-2 (ResourceVersion: 9) since T2: crash loop",
            "DROP-INS RAN     aaaaaaaaaaaa (10-a.conf, sub/20-b.conf), on trial since T3 (1 kubelet restarts)",
            "         LKG     bbbbbbbbbbbb (10-a.conf)",
            "         BAD     cccccccccccc since T4: crash loop",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        assert!(!text.contains('{'), "raw JSON in the table:\n{text}");
    }
}
