//! Taking over the holder record before a kubelet starts (the evidence rule
//! of I1, decided by `pivot::takeover`): while we hold the lock the path
//! names, under the takeover lock, the record must allow it; then our record
//! (naming the inode our kubelet will inherit) is written before the spawn.

use super::*;

use crate::pivot::takeover::{decide, needs_locks, Decision, RecordFacts};

impl Driver {
    /// One attempt, in `Holding(Clearing)`: `Cleared` when our record is
    /// written, `HolderAlive` when another live supervisor is recorded,
    /// `LockLost` when we do not hold the lock the path names, or nothing
    /// (look again at the next re-check, 5 ms).
    pub(super) fn try_clear(&mut self) -> Vec<Input> {
        if self.pivot.state != State::Holding(Run::Clearing) {
            return vec![];
        }
        let lost = self.confirm_holding();
        if !lost.is_empty() {
            return lost;
        }
        let guard = match self.lock.takeover.try_guard() {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                self.fence_stopped_takeover_holder();
                return vec![];
            }
            Err(err) => {
                self.note_wait(format!("cannot take the takeover lock: {err}"));
                return vec![];
            }
        };
        let rec = match HolderRecord::read(&self.state) {
            Ok(rec) => rec,
            Err(err) => {
                // Only our uid writes the state directory, atomically: a
                // record that cannot be read was damaged by hand. It names
                // nobody we could wait for.
                let line = format!("ignoring the holder record: {err}");
                if self.reported.first(&line) {
                    error!("{line}");
                }
                None
            }
        };
        let facts = RecordFacts::of(rec.as_ref(), self.me);
        // /proc/locks only where the rule looks at it (a dead holder's other
        // inode): each read waits for an RCU grace period under load and
        // blocks every flock on the node meanwhile (see `fence_dead_record`).
        let (locks, ours) = if needs_locks(&facts, self.lock.file.key()) {
            (
                procfs::read_locks().map_err(|e| e.to_string()),
                self.state_files(),
            )
        } else {
            (Ok(Vec::new()), Vec::new())
        };
        match decide(&facts, self.lock.file.key(), &locks, &ours) {
            Decision::Ours
            | Decision::TakeOver {
                fence_record: false,
            } => {}
            Decision::TakeOver { fence_record: true } => {
                if let Some(prev) = &rec {
                    if !self.fence_kubelet_of(prev) {
                        return vec![];
                    }
                }
            }
            Decision::HandOver { rank, pid } => {
                drop(guard);
                self.fencing.none_stopped();
                // Once per holder and lock file: a stopped holder whose
                // kubelet runs is handed the lock again every deferral round.
                let note = format!("hand over to {pid} on {}", self.lock.file.key());
                if self.fencing.note(note) {
                    info!(holder = %rank, holder_pid = pid, "took the lock, but the holder record names a live supervisor whose kubelet may run under a replaced lock file; handing the lock to it instead of starting a second kubelet");
                } else {
                    debug!(holder = %rank, holder_pid = pid, "handing the lock to the recorded holder again");
                }
                return vec![Input::HolderAlive(Contender::Holder { rank, pid })];
            }
            Decision::FenceStopped { pid } => {
                drop(guard);
                self.fence_stopped(pid, "the holder record names it and no kubelet of it runs");
                return vec![];
            }
            Decision::OldLockHeld { lock_file, taker } => {
                drop(guard);
                self.note_wait(format!(
                    "the previous holder is gone but the lock file it held ({lock_file}) is still locked (taken by pid {taker}; we hold {}): its kubelet may still run",
                    self.lock.file.key()
                ));
                if fence::taker_gone(taker) || procfs::doomed(taker) {
                    if let Some(prev) = &rec {
                        self.fence_kubelet_of(prev);
                    }
                    self.fence_leftovers(lock_file, taker);
                }
                return vec![];
            }
            Decision::Unknown => {
                drop(guard);
                self.note_wait(
                    "cannot read /proc/locks; not concluding that the previous kubelet is gone"
                        .into(),
                );
                return vec![];
            }
        }
        match &rec {
            Some(prev) if facts != RecordFacts::Ours => {
                info!(rank = %self.rank(), previous = %prev.rank(), previous_pid = prev.pid, "took the lock: the previous holder is gone without releasing it (killed or crashed)")
            }
            _ => {
                info!(rank = %self.rank(), "took the lock: it was free (no holder, or the holder released it)")
            }
        }
        // Best effort when the disk refuses the write (logged): a node
        // without a kubelet is no safer.
        self.write_record_now(None);
        drop(guard);
        self.fencing.cleared();
        vec![Input::Cleared]
    }

    /// Inodes of the state directory's files (claims, takeover lock): an
    /// old lock file's inode number found among them was reused.
    fn state_files(&self) -> Vec<procfs::FileKey> {
        let mut keys = vec![self.lock.takeover.key()];
        if let Ok(entries) = std::fs::read_dir(self.state.claims_dir()) {
            keys.extend(
                entries
                    .flatten()
                    .take(MAX_REPORTED)
                    .filter_map(|e| std::fs::symlink_metadata(e.path()).ok())
                    .map(|m| procfs::FileKey::of_metadata(&m)),
            );
        }
        keys
    }

    /// Logs why a takeover waits, once per reason.
    fn note_wait(&mut self, why: String) {
        if self.fencing.note(why.clone()) {
            warn!("not starting a kubelet yet: {why}");
        }
    }

    /// The takeover lock is busy: if its holder is a stopped supervisor
    /// (frozen in the middle of a takeover), it keeps the node without a
    /// kubelet; fence it after the patience.
    fn fence_stopped_takeover_holder(&mut self) {
        let key = self.lock.takeover.key();
        let locks = procfs::read_locks().unwrap_or_default();
        let Some(taker) = procfs::taker(&locks, key) else {
            return;
        };
        if self.live_claims(&locks).iter().any(|c| c.owner == taker) {
            self.fence_stopped(taker, "it holds the takeover lock");
        }
    }
}
