//! `kubelet-pivot status`: who holds the lock, who waits, what config runs.
//! Reads only: it never opens the lock file (an open is what a holder
//! watches), it looks at the holder record, claims and /proc/locks.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::claims::{live_claims, Claim};
use crate::holder::{HolderError, HolderRecord};
use crate::procfs::{self, FileKey};
use crate::role::Role;
use crate::store::{Store, StoreError};

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
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimView {
    pub role: Role,
    pub generation: u32,
    pub pid: i32,
    pub since: String,
}

impl From<&Claim> for ClaimView {
    fn from(c: &Claim) -> Self {
        ClaimView {
            role: c.role,
            generation: c.generation,
            pid: c.pid,
            since: c.since.clone(),
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
    /// Problems reading the state (corrupt record, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigView {
    /// What the holder last applied: {origin, source, hashAlgorithm, hash, since}.
    pub active: Option<serde_json::Value>,
    pub assigned: Option<serde_json::Value>,
    pub last_known_good: Option<serde_json::Value>,
    pub error: Option<String>,
    pub bad_configs: serde_json::Value,
}

impl ConfigView {
    /// Reads the checkpoint store without writing anything.
    pub fn from_store(dir: &Path) -> (ConfigView, Vec<String>) {
        let store = Store::open_read_only(dir);
        let mut warnings = Vec::new();
        let mut warn = |e: StoreError| warnings.push(e.to_string());
        let json =
            |v: Option<crate::store::ConfigSource>| v.and_then(|v| serde_json::to_value(v).ok());
        let assigned = store.assigned().map_err(&mut warn).ok().flatten();
        let lkg = store.last_known_good().map_err(&mut warn).ok().flatten();
        let effective = store.effective_record().map_err(&mut warn).ok().flatten();
        let bad = store.bad_configs().map_err(&mut warn).unwrap_or_default();
        let view = ConfigView {
            error: effective.as_ref().and_then(|e| e.error.clone()),
            active: effective.and_then(|e| serde_json::to_value(e).ok()),
            assigned: json(assigned),
            last_known_good: json(lkg),
            bad_configs: serde_json::to_value(bad).unwrap_or_default(),
        };
        (view, warnings)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub lock: LockView,
    pub config: ConfigView,
}

impl Report {
    pub fn has_live_holder(&self) -> bool {
        matches!(&self.lock.holder, Some(h) if !h.stale)
    }
}

fn is_locked(lock: &Path) -> bool {
    let Ok(key) = FileKey::of_path(lock) else {
        return false;
    };
    procfs::read_locks()
        .map(|l| l.iter().any(|e| !e.blocked && e.file == key))
        .unwrap_or(false)
}

/// Gathers the lock state.
pub fn lock_view(lock: &Path) -> LockView {
    let mut warnings = Vec::new();
    let holder = match HolderRecord::read(lock) {
        Ok(Some(rec)) => Some(HolderView {
            role: rec.role,
            generation: rec.generation,
            pid: rec.pid,
            kubelet_pid: rec.kubelet_pid,
            since: rec.since.clone(),
            stale: !rec.is_live(),
        }),
        Ok(None) => None,
        Err(err @ HolderError::Corrupt { .. }) | Err(err @ HolderError::Fs(_)) => {
            warnings.push(err.to_string());
            None
        }
    };
    let claims = live_claims(lock, None)
        .iter()
        .map(|c| ClaimView::from(&c.claim))
        .collect();
    LockView {
        path: lock.to_path_buf(),
        locked: is_locked(lock),
        holder,
        claims,
        warnings,
    }
}

pub fn report(lock: &Path, store_dir: &Path) -> Report {
    let mut lock = lock_view(lock);
    let (config, warnings) = ConfigView::from_store(store_dir);
    lock.warnings.extend(warnings);
    Report { lock, config }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// Human-readable table.
pub fn write_table(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "LOCK      {}", r.lock.path.display())?;
    writeln!(
        out,
        "LOCKED    {}",
        if r.lock.locked { "yes" } else { "no" }
    )?;
    match &r.lock.holder {
        Some(h) => {
            let who = match h.role {
                Role::Bootstrap => "bootstrap".to_string(),
                Role::SelfHosted => format!("self-hosted gen {}", h.generation),
            };
            writeln!(
                out,
                "HOLDER    {who} pid {} kubelet pid {} since {}{}",
                h.pid,
                opt(h.kubelet_pid),
                h.since,
                if h.stale {
                    " (STALE: supervisor is gone)"
                } else {
                    ""
                }
            )?;
        }
        None => writeln!(out, "HOLDER    none")?,
    }
    if r.lock.claims.is_empty() {
        writeln!(out, "CLAIMS    none")?;
    } else {
        writeln!(out, "CLAIMS    ROLE         GEN  PID      SINCE")?;
        for c in &r.lock.claims {
            writeln!(
                out,
                "          {:<12} {:<4} {:<8} {}",
                c.role.to_string(),
                c.generation,
                c.pid,
                c.since
            )?;
        }
    }
    for w in &r.lock.warnings {
        writeln!(out, "WARNING   {w}")?;
    }
    let show = |v: &Option<serde_json::Value>| match v {
        Some(v) => v.to_string(),
        None => "local".to_string(),
    };
    writeln!(out, "CONFIG    active {}", show(&r.config.active))?;
    writeln!(out, "          assigned {}", show(&r.config.assigned))?;
    writeln!(
        out,
        "          last-known-good {}",
        show(&r.config.last_known_good)
    )?;
    writeln!(out, "          error {}", opt(r.config.error.as_deref()))?;
    Ok(())
}
