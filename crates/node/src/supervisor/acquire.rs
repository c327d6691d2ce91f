//! Taking, keeping and handing over the lock: contention checks on hints
//! and re-checks, acquisition, deferral, replacement of the lock file, and
//! the confirmation that we hold the lock before acting as the holder.

use super::*;

use super::lock_side::{AcquireRx, Retake, RETAKE_PATIENCE};

/// How long a deferring supervisor waits in all for a contender that was
/// woken by its release but has not run yet (state R), before it takes the
/// lock back.
const STARVED_PATIENCE: Duration = Duration::from_secs(2);

/// A flock that returned this long before the loop saw it is reported: the
/// supervisor did not run meanwhile (a loaded node), and the node may have
/// been without a kubelet for that long.
const LATE_ACQUIRE: Duration = Duration::from_millis(100);

/// Takes the lock if it is free (`None`), else starts a thread blocked in
/// flock on the same descriptor and returns where its result will arrive.
pub(super) fn begin_acquire(lock: &LockFile) -> Result<Option<AcquireRx>, SupervisorError> {
    if lock.try_acquire()? {
        return Ok(None);
    }
    let waiter = lock.clone();
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("flock".into())
        .spawn(move || {
            let result = waiter.acquire_blocking().map(|()| Instant::now());
            // Nobody waits for it any more (the path was replaced while we
            // were blocked on the old file): let go of the old file's lock.
            if let Err(Ok(_)) = tx.send(result) {
                let _ = waiter.release();
            }
        })
        .map_err(|e| {
            SupervisorError::Lock(LockError::Flock {
                path: lock.path().to_path_buf(),
                source: e,
            })
        })?;
    Ok(Some(rx))
}

/// Whether a process without a claim that is blocked on the lock may count
/// as a contender (a plain kubelet): only if it runs as root or as our uid,
/// both its real and effective uid.
pub(super) fn may_contend(pid: i32, trusted: &[u32]) -> bool {
    match procfs::uids(pid) {
        Some((real, effective)) => trusted.contains(&real) && trusted.contains(&effective),
        None => false,
    }
}

/// Whether a contender may be yielded to now: not stopped (a frozen process
/// blocked in flock would never take the lock it is handed), not killed, and
/// not skipped after failing to take it before.
pub(super) fn eligible(pid: i32, skips: &Skips, now: Instant) -> bool {
    let stat = procfs::stat(pid);
    if matches!(stat.map(|s| s.state), Some('T' | 't')) {
        debug!(
            pid,
            "contender is stopped (SIGSTOP or traced); not yielding to it"
        );
        return false;
    }
    // Killed (a SIGKILL pending, or exiting): it runs no code again, though
    // it may take a while to be gone (a killed supervisor's inotify teardown
    // waited 350 ms for the kernel under load, chaos in issue 31), and its
    // claim stays locked until then. Waiting for it (or handing it the lock)
    // kept the node without a kubelet for all that time.
    if procfs::doomed(pid) {
        debug!(pid, "contender was killed; not yielding to it");
        return false;
    }
    !skips.is_skipped(pid, stat.map(|s| s.start_time), now)
}

impl Driver {
    pub(super) fn on_recheck(&mut self) -> Vec<Input> {
        match &self.pivot.state {
            State::Deferring { .. } => self.check_handover(),
            State::Holding(_) if self.lock.retaking() && !self.lock.file.path_is_ours() => {
                self.handle_replacement()
            }
            State::Holding(Run::Clearing) => {
                let inputs = self.check_contention();
                if inputs.is_empty() {
                    self.try_clear()
                } else {
                    inputs
                }
            }
            State::Holding(_) => self.check_contention(),
            _ => vec![],
        }
    }
    /// While blocked in flock: if the path names another file now, the file
    /// we wait on is obsolete (whoever holds it is not the node's holder any
    /// more, maybe a frozen process that got it): wait on the new file. The
    /// old flock thread lets go of the old file if it ever gets it.
    ///
    /// The holder re-creates and re-locks a replaced file before it lets go
    /// of the old one, so a waiter moves over only once the new file is
    /// locked (it then simply blocks there), or once it has stayed unlocked
    /// for [`REWAIT_GRACE`] (no holder took it): never racing the holder
    /// for the new file.
    pub(super) fn rewait_if_replaced(&mut self) -> Result<Option<Vec<Input>>, SupervisorError> {
        if self.lock.acquiring.is_none() || self.lock.file.path_is_ours() {
            self.lock.not_replaced();
            return Ok(None);
        }
        // A supervisor holding the new file is seen in its fdinfo; anybody
        // else only in /proc/locks, read once per replacement (every waiter
        // reading it every 100 ms until the grace ended stalled every flock
        // on the node for a second: chaos, issue 31).
        let new_is_locked = match std::fs::symlink_metadata(&self.opts.lock_path) {
            Ok(meta) => {
                let key = procfs::FileKey::of_metadata(&meta);
                self.supervisor_holding(key).is_some()
                    || (self.lock.first_look_at_replacement()
                        && procfs::read_locks()
                            .unwrap_or_default()
                            .iter()
                            .any(|e| !e.blocked && e.file == key))
            }
            Err(_) => false,
        };
        if !self.lock.move_over(Instant::now(), new_is_locked) {
            return Ok(None);
        }
        warn!(path = %self.lock.file.path().display(), "the lock file was replaced while we waited on the old one; waiting on the new one");
        self.lock.acquiring = None;
        self.lock.reopen(&self.opts.lock_path)?;
        self.watcher.rewatch_lock();
        self.start_acquire().map(Some)
    }
    pub(super) fn on_hint(&mut self, hint: Hint) -> Vec<Input> {
        debug!(%hint, "watch hint");
        match (&self.pivot.state, hint) {
            // Our kubelet is being killed because the lock was lost: nothing
            // to look at (and no reopening in a loop) until it is gone.
            (
                State::Stopping {
                    purpose: StopPurpose::LockLost,
                    ..
                },
                _,
            ) => vec![],
            (
                State::Holding(_) | State::Stopping { .. },
                Hint::LockChanged | Hint::Rescan | Hint::HolderChanged,
            ) if !self.lock.file.path_is_ours() => self.handle_replacement(),
            // Whether we still hold the lock (our kubelet may have unlocked
            // the descriptor it inherited: flock grants make no inotify
            // event) is looked at on every hint about the lock, the record
            // or the claims: whoever takes a free lock opens the file first,
            // or (a waiter already blocked in flock) hands it back and
            // reopens it (`poke_holder`). One flock call, no file read.
            (
                State::Holding(_) | State::Stopping { .. },
                Hint::HolderChanged
                | Hint::Rescan
                | Hint::LockOpened
                | Hint::LockChanged
                | Hint::ClaimsChanged,
            ) if !matches!(self.lock.file.try_acquire(), Ok(true)) => {
                self.lost_unless_handed_back()
            }
            (State::Holding(_), Hint::LockOpened) => {
                if self.opts.yield_on_any_open {
                    return vec![Input::Contended(Contender::AnyOpen)];
                }
                self.contention.opened(Instant::now());
                match self.contention.fast_target() {
                    Some(pid) => self.fast_look(pid),
                    None => self.check_contention(),
                }
            }
            (State::Holding(_), _) => self.check_contention(),
            (State::Deferring { .. }, _) => self.check_handover(),
            _ => vec![],
        }
    }
    /// On the watchdog's tick (the only timer of an idle holder): whether
    /// the lock path still names our file and we still hold its lock. A
    /// stat and a flock call: no file is read.
    pub(super) fn lock_check(&mut self) -> Vec<Input> {
        match &self.pivot.state {
            State::Stopping {
                purpose: StopPurpose::LockLost,
                ..
            } => vec![],
            State::Holding(_) | State::Stopping { .. } => {
                if !self.lock.file.path_is_ours() {
                    self.handle_replacement()
                } else if !matches!(self.lock.file.try_acquire(), Ok(true)) {
                    self.lost_unless_handed_back()
                } else {
                    vec![]
                }
            }
            _ => vec![],
        }
    }
    /// Looks at /proc/locks and the claims. /proc/locks is read first: a
    /// supervisor writes its claim before it opens the lock, so any waiter
    /// in that snapshot already has its claim on disk when the claims are
    /// listed. A waiter judged unclaimed is confirmed with a second read (it
    /// may have exited between the reads).
    pub(super) fn verdict(&mut self) -> Verdict {
        let first = self.judge_now();
        match first {
            // Acting on an absence (no claim for this waiter) needs a second
            // look: the waiter may have exited between the reads, or a large
            // /proc/locks may have been read torn.
            Verdict::Yield(Contender::Unclaimed { pid }) => match self.judge_now() {
                Verdict::Yield(Contender::Unclaimed { pid: again }) if again == pid => {
                    Verdict::Yield(Contender::Unclaimed { pid })
                }
                _ => Verdict::Quiet,
            },
            v => v,
        }
    }
    pub(super) fn judge_now(&mut self) -> Verdict {
        let locks = procfs::read_locks().unwrap_or_default();
        self.contention.looked_full(Instant::now());
        let claims = self.live_claims(&locks);
        self.contention
            .set_outranked(crate::pivot::contention::outranked_by(self.rank(), &claims).is_some());
        let trusted = [0, crate::safefs::trust::my_uid()];
        let now = Instant::now();
        let skips = self.contention.skips();
        judge(
            self.lock.file.key(),
            self.rank(),
            &claims,
            &locks,
            |pid| may_contend(pid, &trusted),
            |pid| eligible(pid, skips, now),
        )
    }
    /// Verified live claims of other supervisors; rejected claim files are
    /// reported once each, dead ones removed.
    pub(super) fn live_claims(&mut self, locks: &[procfs::LockEntry]) -> Vec<LiveClaim> {
        let scan = claims::scan(&self.state, Some(self.me), locks, Cleanup::RemoveDead);
        for rejected in scan.rejected {
            let line = rejected.to_string();
            if self.reported.first(&line) {
                warn!("{line}");
            }
        }
        scan.live
    }
    /// Holding: a fast look at the claimant `pid` (see `contention`). Seen
    /// asleep in flock on our lock file, it is confirmed by a full look
    /// before anything is decided; a fast look that cannot be made, or that
    /// the full look does not confirm, leaves full looks only.
    pub(super) fn fast_look(&mut self, pid: i32) -> Vec<Input> {
        match procfs::syscall::sleeps_in_flock(pid, self.lock.file.key()) {
            Ok(false) => vec![],
            Ok(true) => {
                let inputs = self.check_contention();
                if inputs.is_empty() {
                    debug!(
                        pid,
                        "claimant seen in flock, not confirmed by /proc/locks; full looks only"
                    );
                    self.contention.fast_failed();
                }
                inputs
            }
            Err(err) => {
                debug!(pid, %err, "cannot look at the claimant's threads; full looks only");
                self.contention.fast_failed();
                self.check_contention()
            }
        }
    }
    /// Holding: is a verified contender blocked on the lock (yield to it), or
    /// one that claimed but is not blocked yet (look again soon)?
    pub(super) fn check_contention(&mut self) -> Vec<Input> {
        if !matches!(self.pivot.state, State::Holding(_)) {
            return vec![];
        }
        match self.verdict() {
            Verdict::Yield(c) => {
                info!(contender = %c, "verified contender is blocked on the lock; yielding");
                self.contention.yielded();
                vec![Input::Contended(c)]
            }
            Verdict::Pending { rank, pid } => {
                // Fast re-checks for a while after a claimant appears, then
                // slow ones (see next_recheck): never a hot loop.
                if self.contention.claimant_pending(pid, Instant::now()) {
                    debug!(%rank, pid, "higher claim present but not blocked on the lock yet");
                }
                vec![]
            }
            Verdict::Quiet => {
                self.contention.quiet();
                vec![]
            }
        }
    }
    /// While deferring: has the contender taken the lock, or gone away?
    pub(super) fn check_handover(&mut self) -> Vec<Input> {
        let State::Deferring {
            to,
            since,
            patience,
        } = &self.pivot.state
        else {
            return vec![];
        };
        let key = self.lock.file.key();
        // Every few ms while deferring: the contender's own fdinfo says
        // whether it took the lock. A read of /proc/locks (did anybody?)
        // takes the kernel's file-lock rwsem for writing, waits for an RCU
        // grace period and blocks every flock and every close of a locked
        // file meanwhile; read back to back by several deferring waiters it
        // held a killed kubelet's exit (its locks' release) for 1.4 s
        // (chaos, issue 31). So: only at the end of the patience, or for a
        // contender whose pid is not known.
        let taken = match to {
            Contender::Claimant { pid, .. }
            | Contender::Unclaimed { pid }
            | Contender::Holder { pid, .. }
                if since.elapsed() < *patience =>
            {
                fence::holds(*pid, key)
            }
            _ => procfs::read_locks()
                .unwrap_or_default()
                .iter()
                .any(|e| !e.blocked && e.file == key),
        };
        if taken {
            debug!(contender = %to, "lock taken by another process");
            return vec![Input::HandoverSeen];
        }
        if since.elapsed() >= *patience {
            // Woken by our release but not run yet (a starved node): it is
            // not stuck, and taking the lock back would skip it for 10 s;
            // more patience, up to STARVED_PATIENCE in all.
            let starved = match to {
                Contender::Claimant { pid, .. } | Contender::Unclaimed { pid } => {
                    procfs::syscall::has_runnable_thread(*pid)
                }
                Contender::AnyOpen | Contender::Holder { .. } => false,
            };
            if starved && since.elapsed() < STARVED_PATIENCE {
                if self.fencing.note(format!("starved contender {to}")) {
                    info!(contender = %to, "the contender has not run since the lock was released (a loaded node); waiting for it up to {}", humantime::format_duration(STARVED_PATIENCE));
                }
                return vec![];
            }
            if let Contender::Holder { .. } = to {
                // The recorded holder did not take the replaced lock file
                // (slow, or stopped with its kubelet running): take it back
                // and look at the record again; never skipped, its kubelet
                // may run.
                debug!(holder = %to, "the recorded holder did not take the lock; looking at the record again");
                return vec![Input::HandoverSeen];
            }
            let skipped = match to {
                Contender::Claimant { pid, .. } | Contender::Unclaimed { pid } => {
                    let start = procfs::stat(*pid).map(|s| s.start_time);
                    Some(self.contention.skip(*pid, start, Instant::now()))
                }
                Contender::AnyOpen | Contender::Holder { .. } => None,
            };
            warn!(contender = %to, skipped_for = skipped.map(|d| tracing::field::display(humantime::format_duration(d))), "contender did not take the lock within {}; taking it back and not yielding to it again for a while", humantime::format_duration(*patience));
            self.metrics.takeback(TakebackReason::ContenderTimedOut);
            return vec![Input::HandoverSeen];
        }
        // Between our release and the contender's flock returning it is
        // neither blocked nor holding; only its death ends the wait early.
        let contender_pid = match to {
            Contender::Claimant { pid, .. }
            | Contender::Unclaimed { pid }
            | Contender::Holder { pid, .. } => Some(*pid),
            Contender::AnyOpen => None,
        };
        if let Some(pid) = contender_pid {
            if procfs::gone(pid) || procfs::doomed(pid) {
                info!(contender = %to, "contender died before taking the lock; taking it back");
                self.metrics.takeback(TakebackReason::ContenderDied);
                return vec![Input::HandoverSeen];
            }
        }
        vec![]
    }
    /// The flock thread's result, seen by the loop.
    pub(super) fn on_flock_returned(&mut self, at: Instant) -> Result<Vec<Input>, SupervisorError> {
        let late = at.elapsed();
        if late >= LATE_ACQUIRE {
            warn!(late_ms = late.as_millis() as u64, "the lock was granted {} before this supervisor could act on it (a loaded node: the process did not run)", humantime::format_duration(Duration::from_millis(late.as_millis() as u64)));
        }
        self.on_acquired()
    }
    pub(super) fn on_acquired(&mut self) -> Result<Vec<Input>, SupervisorError> {
        if !self.lock.file.path_is_ours() {
            warn!(path = %self.lock.file.path().display(), "the lock file was deleted or replaced while we waited; reopening it");
            let _ = self.lock.file.release();
            self.lock.reopen(&self.opts.lock_path)?;
            self.watcher.rewatch_lock();
            return self.start_acquire();
        }
        let defer_to = match self.verdict() {
            Verdict::Yield(c) => {
                info!(contender = %c, "got the lock but a higher contender is blocked on it; handing it over instead of racing it");
                Some(Deferral {
                    to: c,
                    patience: DEFER_TIMEOUT,
                })
            }
            Verdict::Pending { rank, pid } => {
                info!(%rank, pid, patience = %humantime::format_duration(PENDING_DEFER), "got the lock but a higher claimant is about to contend; handing it over instead of starting a kubelet");
                Some(Deferral {
                    to: Contender::Claimant { rank, pid },
                    patience: PENDING_DEFER,
                })
            }
            Verdict::Quiet => None,
        };
        self.holder_since_time = std::time::SystemTime::now();
        Ok(vec![Input::Acquired { defer_to }])
    }
    pub(super) fn start_acquire(&mut self) -> Result<Vec<Input>, SupervisorError> {
        match begin_acquire(&self.lock.file)? {
            None => self.on_acquired(),
            Some(rx) => {
                // Someone holds it: we stand by, blocked on the same descriptor.
                self.notifier.ready();
                self.lock.acquiring = Some(rx);
                Ok(vec![])
            }
        }
    }
    /// Before acting as the holder: the path must name the file we hold
    /// (a deleted or replaced one is re-created first) and our description
    /// must still hold its lock. Empty when all is well, else the inputs
    /// that say why not (`LockLost`).
    pub(super) fn confirm_holding(&mut self) -> Vec<Input> {
        if !self.lock.file.path_is_ours() {
            let inputs = self.handle_replacement();
            if !inputs.is_empty() {
                return inputs;
            }
        }
        if self.lock.still_locked() {
            vec![]
        } else {
            vec![Input::LockLost]
        }
    }
    /// Our descriptor does not hold the lock (any more): lost, except that a
    /// verified supervisor holding our inode while our kubelet runs does not
    /// count as a loss: our kubelet
    /// (or a process it started) unlocked the inherited descriptor, that
    /// supervisor took the free lock, finds the record naming us alive and
    /// hands the lock back; it starts nothing meanwhile, and we re-take the
    /// lock on a later look. Only this rare path reads /proc/locks (who holds
    /// it); anything else holding the lock ends our kubelet at once.
    fn lost_unless_handed_back(&mut self) -> Vec<Input> {
        if self.pivot.kubelet().is_some() && self.supervisor_holds(self.lock.file.key()) {
            info!(path = %self.lock.file.path().display(), "another supervisor holds our lock (our kubelet unlocked the inherited descriptor); it hands the lock back to the recorded holder, so the kubelet keeps running");
            return vec![];
        }
        if self.lock.still_locked() {
            vec![]
        } else {
            vec![Input::LockLost]
        }
    }
    /// Whether the process holding the lock of the file `key` names is a
    /// supervisor with a verified claim (it reads the holder record).
    fn supervisor_holds(&mut self, key: procfs::FileKey) -> bool {
        let locks = procfs::read_locks().unwrap_or_default();
        let Some(taker) = procfs::taker(&locks, key) else {
            return false;
        };
        self.live_claims(&locks).iter().any(|c| c.owner == taker)
    }
    pub(super) fn handle_replacement(&mut self) -> Vec<Input> {
        let path = self.opts.lock_path.clone();
        warn!(path = %path.display(), "lock file was deleted or replaced while we hold it; re-creating and re-locking it (the kubelet keeps running)");
        let fresh = match LockFile::open(&path) {
            Ok(f) => f,
            Err(err) => {
                error!(%err, "cannot re-create the lock file; killing our kubelet so that no second kubelet can start beside it");
                return vec![Input::LockLost];
            }
        };
        match fresh.try_acquire() {
            Ok(true) => {
                // Waiters on the old inode move to the new file once they
                // see it locked.
                let kubelet_runs = self.pivot.kubelet().is_some();
                self.lock.replace(fresh, kubelet_runs);
                self.watcher.rewatch_lock();
                info!(path = %path.display(), "re-created and re-locked the lock file");
                vec![]
            }
            Ok(false) if self.pivot.kubelet().is_some() && self.supervisor_holds(fresh.key()) => {
                // A waiter moved to the new file first (we were slow: a
                // loaded node). It is a supervisor: it starts nothing while
                // our record names us (see `pivot::takeover`) and hands the
                // file back, so our kubelet keeps running while we try again
                // every few milliseconds. Telling it from a plain kubelet
                // takes one read of /proc/locks (tens of ms at worst on a
                // loaded node); killing at once instead cost a kubelet
                // restart on every such race (measured in chaos: a restart
                // that no step justified).
                match self.lock.retake(Instant::now()) {
                    Retake::First => {
                        info!(path = %path.display(), "another supervisor took the re-created lock file first; it hands it back to the recorded holder (the kubelet keeps running)");
                        vec![]
                    }
                    Retake::Waiting => vec![],
                    Retake::GiveUp => {
                        error!(path = %path.display(), patience = %humantime::format_duration(RETAKE_PATIENCE), "another supervisor keeps the re-created lock file; killing our kubelet and waiting for the new lock");
                        vec![Input::LockLost]
                    }
                }
            }
            Ok(false) | Err(_) => {
                // Held by a process that reads no holder record (a plain
                // kubelet, or anything else): another kubelet may already
                // run, so ours ends at once.
                self.lock.retake_over();
                error!(path = %path.display(), "the lock file was replaced by one another process holds; killing our kubelet at once and waiting for the new lock");
                vec![Input::LockLost]
            }
        }
    }
}
