//! The evidence rule of I1: when a supervisor that took the lock may start
//! a kubelet.
//!
//! A flock guards an inode, not a path. Once somebody deletes or replaces
//! the lock file, "I hold the lock the path names" says nothing about a
//! kubelet that runs under the old inode. So the lock is necessary but not
//! sufficient; the holder record decides:
//!
//! * a supervisor writes its record (naming itself and the inode whose
//!   locked description its kubelet will inherit) **before** it spawns, and
//!   only through a *takeover*: under the takeover lock (`STATE/takeover.lock`,
//!   held for a read and a write), while it holds the lock the path names,
//!   and only if the record is absent, its own, of another boot, or names a
//!   supervisor that is gone (pid and start time) and whose kubelet is gone:
//!   the recorded kubelet's group has no live member (fenced first when
//!   proven) and the recorded inode is locked by nobody (a kubelet holds its
//!   inherited description until its last thread exits, so this holds
//!   across PID namespaces, where the kubelet may not be visible at all);
//! * a record that names a live supervisor other than us is never taken
//!   over: that supervisor's kubelet may run or be about to start. The
//!   supervisor that found it hands the lock over (`HolderAlive`) and waits
//!   again. Only the named supervisor removes it (after its kubelet's group
//!   is gone), or rewrites it;
//! * a live supervisor is concluded gone only from its process, never from
//!   the lock. The one exception is a supervisor that is *stopped* (SIGSTOP,
//!   state `T`) while it keeps the node without a kubelet (it holds the
//!   lock or the takeover lock, and no kubelet of its record runs): after
//!   [`STOPPED_PATIENCE`] it is fenced with SIGKILL, which a stopped process
//!   cannot ignore, and then it is gone like any other.
//!
//! So at any instant at most one record names a live supervisor, and every
//! kubelet started through kubelet-pivot is named by the record of a live
//! supervisor or holds the inode the record names: no second kubelet can
//! start beside it, whichever inode the path names.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::pivot::holder::HolderRecord;
use crate::pivot::role::Rank;
use crate::pivot::state::StateDir;
use crate::procfs::{FileKey, LockEntry, ProcessId};
use crate::safefs::trust::my_uid;

/// How long a stopped supervisor may keep the node without a kubelet (by
/// holding the lock or the takeover lock) before a waiting supervisor fences
/// it. With the 100 ms cadence of the waiters' checks and the kill, a node
/// waits well under the 1 s of I2.
pub const STOPPED_PATIENCE: Duration = Duration::from_millis(250);

/// What the holder record says about the supervisor that wants to start a
/// kubelet, gathered from `/proc` by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordFacts {
    /// No record (never written, or removed by a holder that stopped its
    /// kubelet before releasing), or one that cannot be read (logged).
    Absent,
    /// The record names us.
    Ours,
    /// The record's pids belong to another boot: nothing of it runs.
    OtherBoot,
    /// The supervisor it names runs (pid and start time).
    Live {
        rank: Rank,
        pid: i32,
        /// It is stopped (`T`/`t` in /proc/PID/stat).
        stopped: bool,
        /// A kubelet it names runs (pid and start time).
        kubelet_runs: bool,
    },
    /// The supervisor it names is gone.
    Dead {
        /// Its pid (in this /proc): the taker /proc/locks shows for the
        /// lock its kubelet inherited.
        pid: i32,
        /// The inode whose lock its kubelet inherited, if recorded.
        lock_file: Option<FileKey>,
    },
}

impl RecordFacts {
    /// Gathers the facts for `rec` as seen by `me`.
    pub fn of(rec: Option<&HolderRecord>, me: ProcessId) -> RecordFacts {
        let Some(rec) = rec else {
            return RecordFacts::Absent;
        };
        if rec.supervisor() == me {
            return RecordFacts::Ours;
        }
        if !rec.this_boot() {
            return RecordFacts::OtherBoot;
        }
        // A supervisor that was killed but is not gone yet (its threads stuck
        // in the kernel) runs no code again: its kubelet is fenced by the
        // record like a dead holder's.
        if rec.supervisor().is_alive() && !crate::procfs::doomed(rec.pid) {
            return RecordFacts::Live {
                rank: rec.rank(),
                pid: rec.pid,
                stopped: crate::procfs::stat(rec.pid).is_some_and(|s| matches!(s.state, 'T' | 't')),
                kubelet_runs: rec.kubelet().is_some_and(|k| k.is_alive()),
            };
        }
        RecordFacts::Dead {
            pid: rec.pid,
            lock_file: rec.lock_file,
        }
    }
}

/// What a supervisor that holds the lock the path names may do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write our record and start: nothing recorded runs. `fence_record`:
    /// the dead holder's kubelet, named by the record, is to be fenced
    /// (killed once proven, its group gone) first.
    TakeOver { fence_record: bool },
    /// The record is ours already.
    Ours,
    /// A live supervisor is recorded: hand the lock to it.
    HandOver { rank: Rank, pid: i32 },
    /// A live supervisor is recorded that is stopped and runs no kubelet:
    /// fence it (SIGKILL) once it has been so for [`STOPPED_PATIENCE`].
    FenceStopped { pid: i32 },
    /// The dead holder's inode is still locked: its kubelet (or something
    /// that inherited the kubelet's descriptor) may still run. Wait; fence
    /// the leftovers of `taker` if that process is gone.
    OldLockHeld { lock_file: FileKey, taker: i32 },
    /// `/proc/locks` could not be read: nothing can be concluded; look again.
    Unknown,
}

/// The rule (see the module doc). `my_lock` is the inode we hold; `locks`
/// is `/proc/locks` as read after the record; `other_files` are inodes that
/// name other files now (our state directory's: claim files, the takeover
/// lock), so a recorded inode among them was reused after the old lock file
/// was deleted.
pub fn decide(
    facts: &RecordFacts,
    my_lock: FileKey,
    locks: &Result<Vec<LockEntry>, String>,
    other_files: &[FileKey],
) -> Decision {
    match facts {
        RecordFacts::Absent => Decision::TakeOver {
            fence_record: false,
        },
        // Nothing of another boot runs; the record's proof says so (and
        // logs its refusal, which an operator may want to see).
        RecordFacts::OtherBoot => Decision::TakeOver { fence_record: true },
        RecordFacts::Ours => Decision::Ours,
        RecordFacts::Live {
            pid,
            stopped: true,
            kubelet_runs: false,
            ..
        } => Decision::FenceStopped { pid: *pid },
        RecordFacts::Live { rank, pid, .. } => Decision::HandOver {
            rank: *rank,
            pid: *pid,
        },
        RecordFacts::Dead { pid, lock_file } => {
            let Some(old) = lock_file.filter(|k| *k != my_lock && !other_files.contains(k)) else {
                // Same inode: we hold it, so no description of the dead
                // holder's does (its kubelet unlocked or closed it): only
                // the record's proof can find that kubelet.
                return Decision::TakeOver { fence_record: true };
            };
            let Ok(locks) = locks else {
                return Decision::Unknown;
            };
            // Only a lock the dead holder took counts: once the old file is
            // gone, its inode number is reused (measured: a claim file
            // created right after got it), and a lock on the new file is
            // somebody else's. A taker not visible from here (0) may be it.
            let its = |e: &&LockEntry| !e.blocked && e.file == old && (e.pid == *pid || e.pid == 0);
            match locks.iter().find(its) {
                Some(e) => Decision::OldLockHeld {
                    lock_file: old,
                    taker: e.pid,
                },
                None => Decision::TakeOver { fence_record: true },
            }
        }
    }
}

/// Whether [`decide`] looks at `/proc/locks` and the other files for these
/// facts: only for a dead holder whose kubelet inherited another inode than
/// the one we hold. Elsewhere the caller may pass empty lists and skip the
/// read, which takes the kernel's file-lock rwsem for writing.
pub fn needs_locks(facts: &RecordFacts, my_lock: FileKey) -> bool {
    matches!(facts, RecordFacts::Dead { lock_file: Some(old), .. } if *old != my_lock)
}

/// The takeover lock: `STATE/takeover.lock`, flock'ed for the read and the
/// write of a takeover, so that two supervisors holding two inodes of a
/// replaced lock path cannot both take over from the same record. Taken
/// without blocking; each supervisor opens it once.
#[derive(Debug)]
pub struct TakeoverLock {
    file: Arc<File>,
    path: PathBuf,
    key: FileKey,
}

/// A held takeover lock; released when dropped.
#[derive(Debug)]
pub struct TakeoverGuard(Arc<File>);

impl Drop for TakeoverGuard {
    fn drop(&mut self) {
        let _ = fs2::FileExt::unlock(&*self.0);
    }
}

impl TakeoverLock {
    /// Opens (creating, 0600) the takeover lock in a verified state
    /// directory; refuses anything but a regular file of ours.
    pub fn open(state: &StateDir) -> io::Result<TakeoverLock> {
        let path = state.takeover_path();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let meta = file.metadata()?;
        if !meta.file_type().is_file() || meta.uid() != my_uid() || meta.mode() & 0o022 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is not a regular file of uid {} writable only by it; remove it",
                    path.display(),
                    my_uid()
                ),
            ));
        }
        Ok(TakeoverLock {
            key: FileKey::of_metadata(&meta),
            file: Arc::new(file),
            path,
        })
    }

    /// Takes the lock if nobody holds it.
    pub fn try_guard(&self) -> io::Result<Option<TakeoverGuard>> {
        match fs2::FileExt::try_lock_exclusive(&*self.file) {
            Ok(()) => Ok(Some(TakeoverGuard(self.file.clone()))),
            Err(e) if e.raw_os_error() == fs2::lock_contended_error().raw_os_error() => Ok(None),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("flock {}: {e}", self.path.display()),
            )),
        }
    }

    /// Device and inode (to find who holds it in /proc/locks).
    pub fn key(&self) -> FileKey {
        self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs;

    fn key(inode: u64) -> FileKey {
        FileKey {
            major: 0,
            minor: 42,
            inode,
        }
    }

    fn held(inode: u64, pid: i32) -> LockEntry {
        LockEntry {
            blocked: false,
            kind: "FLOCK".into(),
            pid,
            file: key(inode),
        }
    }

    fn live(stopped: bool, kubelet_runs: bool) -> RecordFacts {
        RecordFacts::Live {
            rank: Rank::self_hosted(3),
            pid: 50,
            stopped,
            kubelet_runs,
        }
    }

    #[test]
    fn a_live_recorded_supervisor_is_never_taken_over() {
        let locks = Ok(vec![]);
        for kubelet_runs in [false, true] {
            assert_eq!(
                decide(&live(false, kubelet_runs), key(1), &locks, &[]),
                Decision::HandOver {
                    rank: Rank::self_hosted(3),
                    pid: 50
                }
            );
        }
        // Stopped with its kubelet running: the node has its kubelet.
        assert!(matches!(
            decide(&live(true, true), key(1), &locks, &[]),
            Decision::HandOver { .. }
        ));
        // Stopped and no kubelet of it runs: it keeps the node without one.
        assert_eq!(
            decide(&live(true, false), key(1), &locks, &[]),
            Decision::FenceStopped { pid: 50 }
        );
    }

    #[test]
    fn the_locks_are_read_only_where_the_rule_looks_at_them() {
        // Wherever `needs_locks` says no, an unreadable /proc/locks (and a
        // held lock of every inode) changes nothing: the rule never looked.
        let unreadable: Result<Vec<LockEntry>, String> = Err("unread".into());
        let everything = Ok(vec![held(1, 99), held(7, 99)]);
        let facts = [
            RecordFacts::Absent,
            RecordFacts::Ours,
            RecordFacts::OtherBoot,
            live(false, true),
            live(true, false),
            RecordFacts::Dead {
                pid: 99,
                lock_file: None,
            },
            RecordFacts::Dead {
                pid: 99,
                lock_file: Some(key(1)),
            },
        ];
        for f in &facts {
            assert!(!needs_locks(f, key(1)), "{f:?}");
            assert_eq!(
                decide(f, key(1), &unreadable, &[]),
                decide(f, key(1), &everything, &[key(7)]),
                "{f:?}"
            );
        }
        let other_inode = RecordFacts::Dead {
            pid: 99,
            lock_file: Some(key(7)),
        };
        assert!(needs_locks(&other_inode, key(1)));
    }

    #[test]
    fn a_dead_holder_is_taken_over_only_once_its_inode_is_free() {
        let dead = RecordFacts::Dead {
            pid: 99,
            lock_file: Some(key(7)),
        };
        // Its kubelet still holds the old inode (the path names inode 1 now).
        assert_eq!(
            decide(&dead, key(1), &Ok(vec![held(1, 10), held(7, 99)]), &[]),
            Decision::OldLockHeld {
                lock_file: key(7),
                taker: 99
            }
        );
        // A waiter on the old inode does not hold it.
        let waiter = LockEntry {
            blocked: true,
            ..held(7, 12)
        };
        assert_eq!(
            decide(&dead, key(1), &Ok(vec![held(1, 10), waiter]), &[]),
            Decision::TakeOver { fence_record: true }
        );
        // The old file is gone and its inode number reused by another file that somebody
        // else locked (a new claim file, say): not the dead holder's lock.
        assert_eq!(
            decide(&dead, key(1), &Ok(vec![held(1, 10), held(7, 12)]), &[]),
            Decision::TakeOver { fence_record: true }
        );
        // ... also when the taker is not visible, if that inode names one of our files now.
        assert_eq!(
            decide(&dead, key(1), &Ok(vec![held(7, 0)]), &[key(7)]),
            Decision::TakeOver { fence_record: true }
        );
        // A taker in a PID namespace we cannot see may be the dead holder.
        assert!(matches!(
            decide(&dead, key(1), &Ok(vec![held(7, 0)]), &[]),
            Decision::OldLockHeld { .. }
        ));
        // /proc/locks unreadable (say, inflated past its cap by a local
        // user): absence cannot be concluded.
        assert_eq!(
            decide(&dead, key(1), &Err("too large".into()), &[]),
            Decision::Unknown
        );
        // The same inode as ours: we hold it, so nobody else does.
        assert_eq!(
            decide(&dead, key(7), &Err("too large".into()), &[]),
            Decision::TakeOver { fence_record: true }
        );
        // An old record without the inode: the record's proof only.
        assert_eq!(
            decide(
                &RecordFacts::Dead {
                    pid: 99,
                    lock_file: None
                },
                key(1),
                &Ok(vec![]),
                &[]
            ),
            Decision::TakeOver { fence_record: true }
        );
    }

    #[test]
    fn absent_ours_and_other_boot() {
        let locks = Ok(vec![]);
        assert_eq!(
            decide(&RecordFacts::Absent, key(1), &locks, &[]),
            Decision::TakeOver {
                fence_record: false
            }
        );
        assert_eq!(
            decide(&RecordFacts::OtherBoot, key(1), &locks, &[]),
            Decision::TakeOver { fence_record: true }
        );
        assert_eq!(
            decide(&RecordFacts::Ours, key(1), &locks, &[]),
            Decision::Ours
        );
    }

    #[test]
    fn facts_come_from_the_process_not_the_lock() {
        let me = procfs::self_id().unwrap();
        let rec = HolderRecord::new(Rank::BOOTSTRAP, me, "T".into());
        assert_eq!(RecordFacts::of(Some(&rec), me), RecordFacts::Ours);
        // Another live process (our parent, say) is live, whoever holds a lock.
        let parent = procfs::id_of(procfs::stat(me.pid).unwrap().ppid).unwrap();
        let theirs = HolderRecord::new(Rank::self_hosted(2), parent, "T".into());
        assert!(matches!(
            RecordFacts::of(Some(&theirs), me),
            RecordFacts::Live {
                pid,
                kubelet_runs: false,
                ..
            } if pid == parent.pid
        ));
        // The same pid with another start time is gone.
        let reused = HolderRecord {
            start_time: parent.start_time + 1,
            ..theirs
        };
        assert_eq!(
            RecordFacts::of(Some(&reused), me),
            RecordFacts::Dead {
                pid: parent.pid,
                lock_file: None
            }
        );
        assert_eq!(RecordFacts::of(None, me), RecordFacts::Absent);
    }

    #[test]
    fn the_takeover_lock_excludes_a_second_description() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        let a = TakeoverLock::open(&state).unwrap();
        let b = TakeoverLock::open(&state).unwrap();
        assert_eq!(a.key(), b.key());
        let guard = a.try_guard().unwrap().expect("free");
        assert!(b.try_guard().unwrap().is_none());
        drop(guard);
        assert!(b.try_guard().unwrap().is_some());
    }
}
