//! Before a supervisor claims: the lock file it was given is the node's
//! (`pivot::lock_record`), and a self-hosted one sees the host's paths.
//! A refusal is said every way an operator looks: one log line naming both
//! lock files, `STATE/lock-mismatch.json` for `status`, the Node condition
//! `KubeletLockFile` where an API server is configured, and the exit code
//! [`EXIT_LOCK_MISMATCH`] (systemd and the DaemonSet then show it failing).

use std::path::Path;
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

use super::{Options, SupervisorError};
use crate::cluster::lock_condition::{self, LockCondition};
use crate::pivot::claims::{self, Cleanup};
use crate::pivot::lock::MissingDir;
use crate::pivot::lock::DEFAULT_LOCK_FILE;
use crate::pivot::lock_identity::LockRef;
use crate::pivot::lock_record::{self, LockRecord, LockVerdict};
use crate::pivot::role::Role;
use crate::pivot::state::StateDir;
use crate::pivot::takeover::TakeoverLock;
use crate::procfs::{self, ProcessId};
use kp_contract::time::now_rfc3339;

/// Exit code of a supervisor that refuses its lock file or misses the
/// host's paths.
pub const EXIT_LOCK_MISMATCH: i32 = 4;
/// How long to wait for the takeover lock (held for a few milliseconds
/// around a takeover of the holder record) before deciding without it.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

/// What may happen to a missing lock directory for this supervisor.
pub(super) fn missing_dir(opts: &Options) -> MissingDir {
    match opts.rank.role {
        Role::SelfHosted => MissingDir::RefuseNotMounted,
        Role::Bootstrap if opts.lock_path == Path::new(DEFAULT_LOCK_FILE) => MissingDir::Create,
        Role::Bootstrap => MissingDir::RefuseTypo,
    }
}

/// A self-hosted supervisor refuses to run on a checkpoint store (or state
/// directory) the container does not have: it would create a private one
/// and run a kubelet no other supervisor of the node knows of.
pub(super) fn host_paths(opts: &Options) -> Result<(), SupervisorError> {
    if opts.rank.role != Role::SelfHosted {
        return Ok(());
    }
    // A state directory inside the store (the default) is created on first
    // use; one elsewhere is a host path of its own.
    let state_apart = !opts.state_dir.starts_with(&opts.store_dir);
    for (what, path, check) in [
        (
            "checkpoint store (--dynamic-config-dir)",
            &opts.store_dir,
            true,
        ),
        (
            "state directory (--state-dir)",
            &opts.state_dir,
            state_apart,
        ),
    ] {
        if check && std::fs::symlink_metadata(path).is_err() {
            return Err(SupervisorError::HostPaths(format!(
                "the {what} {} does not exist in this container; is the host's directory mounted into the pod (a hostPath volume)? A self-hosted supervisor never creates it: its kubelet would run beside the host's without either knowing",
                path.display()
            )));
        }
    }
    Ok(())
}

/// The outcome of [`check`].
pub(super) enum Checked {
    /// Go on and claim with this lock file.
    Go(LockRef),
    /// Refused (said in the log and the mismatch record); the Node condition
    /// is the caller's to report, with the message.
    Refused(String),
}

/// Decides, under the takeover lock, whether our lock file is the node's;
/// records it when it may be. The caller claims before releasing `guard`'s
/// hold (returned with the verdict) so a second supervisor deciding at the
/// same moment sees our claim.
pub(super) async fn check(
    opts: &Options,
    state: &StateDir,
    takeover: &TakeoverLock,
    me: ProcessId,
) -> Result<(Checked, Option<crate::pivot::takeover::TakeoverGuard>), SupervisorError> {
    let ours = LockRef::of(&opts.lock_path).map_err(|e| {
        SupervisorError::HostPaths(format!(
            "cannot tell which lock file {} is: {e}",
            opts.lock_path.display()
        ))
    })?;
    let guard = guard(takeover).await;
    let locks = procfs::read_locks().unwrap_or_default();
    let scan = claims::scan(state, Some(me), &locks, Cleanup::ReadOnly);
    let record = match lock_record::read_record(state) {
        Ok(r) => r,
        Err(err) => {
            warn!(%err, "ignoring the lock file record");
            None
        }
    };
    let this_boot = record.as_ref().is_some_and(LockRecord::this_boot);
    let verdict = lock_record::decide(
        &ours,
        opts.rank,
        record.as_ref(),
        this_boot,
        &scan.live,
        &now_rfc3339(),
    );
    match verdict {
        LockVerdict::Refuse(mismatch) => {
            let message = mismatch.message();
            error!(given = %mismatch.given, node = %mismatch.node, "LOCK MISMATCH: {message}");
            if let Err(err) = lock_record::write_mismatch(state, &mismatch) {
                warn!(%err, "cannot record the lock mismatch for `status`");
            }
            Ok((Checked::Refused(message), None))
        }
        LockVerdict::Record { replaced } => {
            if let Some(old) = replaced {
                warn!(old = %old.lock, new = %ours, "the node's lock file was {} (recorded by {} at {}); no running supervisor uses it any more, so {} is recorded as the node's lock file now", old.lock, old.recorded_by, old.since, ours);
            }
            let rec = LockRecord::new(ours.clone(), opts.rank, now_rfc3339());
            if let Err(err) = lock_record::write_record(state, &rec) {
                warn!(%err, "cannot record the node's lock file; a supervisor given another one will not be refused while this one is down");
            }
            Ok((Checked::Go(ours), guard))
        }
        LockVerdict::Agree => Ok((Checked::Go(ours), guard)),
    }
}

/// Whether an earlier refusal was cleared (to report the condition True).
pub(super) fn clear_refusal(state: &StateDir) -> bool {
    let cleared = lock_record::clear_mismatch(state);
    if cleared {
        info!("this supervisor uses the node's lock file: the earlier lock mismatch is cleared");
    }
    cleared
}

/// Reports the condition if an API server is configured.
pub(super) async fn report(
    client: Option<kube::Client>,
    node: &str,
    condition: LockCondition,
    message: &str,
) {
    if let Some(client) = client {
        lock_condition::report(client, node, condition, message).await;
    }
}

async fn guard(takeover: &TakeoverLock) -> Option<crate::pivot::takeover::TakeoverGuard> {
    let deadline = Instant::now() + TAKEOVER_WAIT;
    loop {
        match takeover.try_guard() {
            Ok(Some(g)) => return Some(g),
            Ok(None) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(None) => {
                warn!(
                    "the takeover lock stayed held for {}; checking the lock file without it",
                    humantime::format_duration(TAKEOVER_WAIT)
                );
                return None;
            }
            Err(err) => {
                warn!(%err, "cannot take the takeover lock; checking the lock file without it");
                return None;
            }
        }
    }
}
