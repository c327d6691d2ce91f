//! The lock side of the driver: the lock file description we hold (or wait
//! on), the one our kubelet inherited when the path names another file
//! since, the inode our holder record names, the takeover lock, the flock
//! thread's answer, and the clocks of a replaced lock file.

use std::time::{Duration, Instant};

use tracing::{error, warn};

use crate::pivot::lock::{LockError, LockFile};
use crate::pivot::takeover::TakeoverLock;
use crate::procfs::FileKey;

/// A waiter blocked on a replaced lock file moves to the new file once it is
/// locked, or after this long if nobody locks it.
const REWAIT_GRACE: Duration = Duration::from_millis(500);
/// How long a holder keeps its kubelet while another supervisor holds the
/// re-created lock file (it hands it back: our record names us).
/// When flock returned (or why it failed).
pub(super) type AcquireRx =
    tokio::sync::oneshot::Receiver<Result<std::time::Instant, crate::pivot::lock::LockError>>;

pub(super) const RETAKE_PATIENCE: Duration = Duration::from_secs(2);

pub(super) struct LockSide {
    /// The lock file the path named when we opened it (held, or waited on).
    pub(super) file: LockFile,
    /// The locked description our running kubelet inherited, when the lock
    /// path has named another file since (we hold that one as `file`): kept
    /// locked until the kubelet's group is gone, because the holder record
    /// names it and waiters judge by it (see `pivot::takeover`).
    kubelet_lock: Option<LockFile>,
    /// The inode our holder record names (None: no record of ours).
    pub(super) recorded: Option<FileKey>,
    /// `STATE/takeover.lock`, held around a takeover of the holder record.
    pub(super) takeover: TakeoverLock,
    /// Where the flock thread's answer arrives, while blocked in flock.
    pub(super) acquiring: Option<AcquireRx>,
    /// While waiting: since when the path names another file than ours.
    replaced_since: Option<Instant>,
    /// Since when another supervisor holds the file the lock path names
    /// now while we hold the replaced one and run our kubelet.
    retake_since: Option<Instant>,
}

/// Another supervisor holds the re-created lock file: what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retake {
    /// Just seen: it hands the file back; the kubelet keeps running.
    First,
    /// Still within the patience: keep waiting.
    Waiting,
    /// It kept the file too long: our kubelet ends.
    GiveUp,
}

impl LockSide {
    pub(super) fn new(file: LockFile, takeover: TakeoverLock) -> LockSide {
        LockSide {
            file,
            kubelet_lock: None,
            recorded: None,
            takeover,
            acquiring: None,
            replaced_since: None,
            retake_since: None,
        }
    }

    /// Opens the file the path names now in place of ours.
    pub(super) fn reopen(&mut self, path: &std::path::Path) -> Result<(), LockError> {
        self.file = LockFile::open(path)?;
        Ok(())
    }

    /// The inode whose lock our kubelet holds (or the next one will).
    pub(super) fn kubelet_key(&self) -> FileKey {
        self.kubelet_lock
            .as_ref()
            .map_or_else(|| self.file.key(), LockFile::key)
    }

    /// We hold `fresh`, the file the path names now, in place of ours. Our
    /// running kubelet holds the old inode's description and our record
    /// names that inode: it stays locked until the kubelet is gone, so that
    /// nobody who takes the new file takes over while it runs (a flock
    /// guards an inode, not a path). Otherwise (no kubelet, or it holds an
    /// older one, kept already) nobody needs the old inode any more.
    pub(super) fn replace(&mut self, fresh: LockFile, kubelet_runs: bool) {
        self.retake_since = None;
        let old = std::mem::replace(&mut self.file, fresh);
        if kubelet_runs && self.kubelet_lock.is_none() {
            self.kubelet_lock = Some(old);
        } else {
            let _ = old.release();
        }
    }

    /// Lets go of the description a kubelet that is gone inherited (its
    /// inode is not the one the path names any more).
    pub(super) fn release_kubelet_lock(&mut self) {
        if let Some(old) = self.kubelet_lock.take() {
            if let Err(err) = old.release() {
                warn!(%err, "cannot release the lock of the replaced lock file");
            }
        }
    }

    /// Whether our descriptor still holds the lock. flock on a description
    /// that holds it succeeds at once; it fails when another description
    /// holds it (a kubelet or its child unlocked the inherited descriptor
    /// and somebody took the lock). When nobody holds it, this re-takes it.
    pub(super) fn still_locked(&self) -> bool {
        match self.file.try_acquire() {
            Ok(true) => true,
            Ok(false) => {
                error!(path = %self.file.path().display(), "another process holds the lock we held (our kubelet, or a process it started, unlocked the inherited descriptor); killing our kubelet at once and waiting for the lock again");
                false
            }
            Err(err) => {
                error!(%err, "cannot check that we still hold the lock; treating it as lost");
                false
            }
        }
    }

    /// While waiting: the path names our file (again).
    pub(super) fn not_replaced(&mut self) {
        self.replaced_since = None;
    }

    /// While waiting on a replaced file: whether to move to the new one
    /// now (it is locked: its holder re-created it; or it stayed unlocked
    /// for [`REWAIT_GRACE`]: no holder took it).
    pub(super) fn move_over(&mut self, now: Instant, new_is_locked: bool) -> bool {
        let first = *self.replaced_since.get_or_insert(now);
        if !new_is_locked && now.duration_since(first) < REWAIT_GRACE {
            return false;
        }
        self.replaced_since = None;
        true
    }

    /// Whether this is the first look at the file that replaced ours (no
    /// `move_over` since it was seen): who holds it is then worth a read of
    /// /proc/locks; later looks only see supervisors (their fdinfo).
    pub(super) fn first_look_at_replacement(&self) -> bool {
        self.replaced_since.is_none()
    }

    /// While waiting: the path names another file than ours.
    pub(super) fn replaced(&self) -> bool {
        self.replaced_since.is_some()
    }

    /// Holding: another supervisor holds the re-created lock file.
    pub(super) fn retake(&mut self, now: Instant) -> Retake {
        let since = *self.retake_since.get_or_insert(now);
        if now.duration_since(since) < RETAKE_PATIENCE {
            return if since == now {
                Retake::First
            } else {
                Retake::Waiting
            };
        }
        self.retake_since = None;
        Retake::GiveUp
    }

    /// Holding: the re-created lock file is ours, or lost for good.
    pub(super) fn retake_over(&mut self) {
        self.retake_since = None;
    }

    /// Holding: whether we wait for another supervisor to hand the
    /// re-created lock file back.
    pub(super) fn retaking(&self) -> bool {
        self.retake_since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pivot::state::StateDir;

    fn side(dir: &std::path::Path) -> LockSide {
        let state = StateDir::open(&dir.join("state")).expect("state dir");
        let takeover = TakeoverLock::open(&state).expect("takeover lock");
        let file = LockFile::open(&dir.join("kubelet.lock")).expect("lock file");
        LockSide::new(file, takeover)
    }

    #[test]
    fn a_replaced_file_is_left_once_locked_or_after_the_grace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = side(dir.path());
        let now = Instant::now();
        assert!(!s.move_over(now, false));
        assert!(s.replaced());
        assert!(!s.move_over(now + REWAIT_GRACE / 2, false));
        assert!(s.move_over(now + REWAIT_GRACE, false));
        assert!(!s.replaced());
        // Locked by its holder: at once.
        assert!(s.first_look_at_replacement());
        assert!(s.move_over(now, true));
        assert!(s.first_look_at_replacement());
        s.move_over(now, false);
        s.not_replaced();
        assert!(!s.replaced());
    }

    #[test]
    fn a_supervisor_holding_the_new_file_gets_some_patience() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = side(dir.path());
        let now = Instant::now();
        assert_eq!(s.retake(now), Retake::First);
        assert!(s.retaking());
        assert_eq!(s.retake(now + RETAKE_PATIENCE / 2), Retake::Waiting);
        assert_eq!(s.retake(now + RETAKE_PATIENCE), Retake::GiveUp);
        assert!(!s.retaking());
        assert_eq!(s.retake(now), Retake::First);
        s.retake_over();
        assert!(!s.retaking());
    }

    #[test]
    fn a_running_kubelet_keeps_the_old_inode_locked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = side(dir.path());
        assert!(s.file.try_acquire().expect("flock"));
        let old = s.file.key();
        assert_eq!(s.kubelet_key(), old);
        let path = dir.path().join("kubelet.lock");
        std::fs::remove_file(&path).expect("unlink");
        let fresh = LockFile::open(&path).expect("re-create");
        assert!(fresh.try_acquire().expect("flock"));
        s.replace(fresh, true);
        assert_ne!(s.file.key(), old);
        // The record keeps naming the inode the kubelet inherited.
        assert_eq!(s.kubelet_key(), old);
        s.release_kubelet_lock();
        assert_eq!(s.kubelet_key(), s.file.key());
    }

    #[test]
    fn without_a_kubelet_the_old_inode_goes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = side(dir.path());
        let path = dir.path().join("kubelet.lock");
        std::fs::remove_file(&path).expect("unlink");
        s.retake(Instant::now());
        s.replace(LockFile::open(&path).expect("re-create"), false);
        assert_eq!(s.kubelet_key(), s.file.key());
        assert!(!s.retaking());
    }
}
