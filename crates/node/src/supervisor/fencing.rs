//! Fencing: reaping our kubelet, telling when its group is gone, and
//! killing what a previous holder left behind (its kubelet's group, and
//! leftovers holding its locked description) once that is proven.

use super::*;

use super::holder_watch::HolderWatch;

/// How often to complain about a process group that survives SIGKILL.
const UNKILLABLE_REPORT: Duration = Duration::from_secs(5);

/// What fencing remembers between looks.
#[derive(Default)]
pub(super) struct Fencing {
    /// A stopped supervisor that keeps the node without a kubelet, and
    /// since when we see it so (fenced after `STOPPED_PATIENCE`).
    stopped_seen: Option<(ProcessId, Instant)>,
    /// The last reason a takeover waited (logged when it changes).
    note: Option<String>,
    last_unkillable_report: Option<Instant>,
    /// While waiting: the exits of the recorded holder and its kubelet.
    pub(super) holder_watch: Option<HolderWatch>,
    /// Timed looks in a row that found no supervisor holding the lock (see
    /// `fence_dead_holder`).
    unheld_looks: u32,
}

/// A stopped supervisor seen again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stopped {
    /// Seen stopped for the first time (or another process than before).
    FirstSeen,
    /// Stopped, not for `STOPPED_PATIENCE` yet.
    Patience,
    /// Stopped for this long: fence it.
    Fence(Duration),
}

impl Fencing {
    /// `id` (a supervisor) is seen stopped at `now`.
    pub(super) fn stopped(&mut self, id: ProcessId, now: Instant) -> Stopped {
        let since = match self.stopped_seen {
            Some((seen, since)) if seen == id => since,
            _ => {
                self.stopped_seen = Some((id, now));
                return Stopped::FirstSeen;
            }
        };
        let stopped_for = now.duration_since(since);
        if stopped_for < STOPPED_PATIENCE {
            Stopped::Patience
        } else {
            Stopped::Fence(stopped_for)
        }
    }

    /// No stopped supervisor keeps the node without a kubelet.
    pub(super) fn none_stopped(&mut self) {
        self.stopped_seen = None;
    }

    /// Whether to complain (again) at `now` about a process group that
    /// survives SIGKILL: at most once per [`UNKILLABLE_REPORT`].
    pub(super) fn unkillable_report_due(&mut self, now: Instant) -> bool {
        if self
            .last_unkillable_report
            .is_some_and(|t| now.duration_since(t) < UNKILLABLE_REPORT)
        {
            return false;
        }
        self.last_unkillable_report = Some(now);
        true
    }

    /// Whether `why` (a takeover waits) differs from the last reason: then
    /// it is noted, and logged by the caller.
    pub(super) fn note(&mut self, why: String) -> bool {
        if self.note.as_deref() == Some(why.as_str()) {
            return false;
        }
        self.note = Some(why);
        true
    }

    /// The takeover is done: the next wait's reason is news again.
    pub(super) fn cleared(&mut self) {
        self.note = None;
        self.stopped_seen = None;
        self.unheld_looks = 0;
    }

    /// A timed look found (`held`) or did not find a supervisor holding
    /// the lock; whether to read /proc/locks now: from the second look in a
    /// row without one. A lock that no supervisor holds is, most of the
    /// time, between two of them (a handoff, a takeover): our flock is about
    /// to return, and a read of /proc/locks would block that very grant.
    pub(super) fn read_locks_now(&mut self, held: bool) -> bool {
        if held {
            self.unheld_looks = 0;
            return false;
        }
        self.unheld_looks = self.unheld_looks.saturating_add(1);
        self.unheld_looks >= 2
    }
}

impl Driver {
    /// Reaps exited children; reports our kubelet's exit and, while
    /// stopping, whether its whole group is gone.
    pub(super) async fn reap(&mut self) -> Vec<Input> {
        let mut out = Vec::new();
        let current = self.pivot.kubelet();
        for (pid, how) in child::reap_all() {
            if Some(pid) == current.map(|k| k.pid) {
                if matches!(self.pivot.state, State::Stopping { .. }) {
                    info!(pid, %how, "kubelet exited");
                } else {
                    warn!(pid, %how, "kubelet exited unexpectedly");
                    self.config.crashed();
                    self.count_crash().await;
                }
                out.push(Input::KubeletExited { pid, how });
            } else {
                debug!(pid, %how, "reaped a process");
            }
        }
        out.extend(self.group_gone_input());
        out
    }
    pub(super) fn group_gone_input(&mut self) -> Option<Input> {
        if let State::Stopping {
            kubelet, killed, ..
        } = &self.pivot.state
        {
            if child::group_gone(kubelet.pgid()) {
                return Some(Input::GroupGone);
            }
            if *killed && self.fencing.unkillable_report_due(Instant::now()) {
                error!(pgid = kubelet.pgid(), "kubelet process group is still alive after SIGKILL (a process in uninterruptible sleep?); keeping the lock so that no second kubelet starts; check `ps -o pid,stat,wchan -g {}`", kubelet.pgid());
            }
        }
        None
    }
    /// While blocked in flock (every `DEAD_HOLDER_CHECK`): the lock's taker
    /// (its pid in /proc/locks) may keep the node without a kubelet.
    /// * It is gone (or it is the recorded holder and that record is dead),
    ///   yet the lock is held: by descriptors it handed down, its kubelet's
    ///   group (fenced by the holder record) and anything that escaped the
    ///   group with the same open file description (a helper that
    ///   daemonized with the inherited descriptor). Fence both from
    ///   outside, or nobody would get the lock until they exit by themselves.
    /// * It is a supervisor (verified claim) that is stopped and runs no
    ///   kubelet (a SIGSTOP that landed while its flock was granted, or
    ///   while its kubelet was down): fenced after `STOPPED_PATIENCE`.
    ///
    /// A dead (or killed) holder's leftovers are fenced first without
    /// /proc/locks (`fence_dead_record`); only the timed look (`HolderLook::Full`)
    /// goes on, and only when nothing of that holder is left: a supervisor
    /// holding the lock is found in the supervisors' fdinfo, and /proc/locks
    /// is read only when no supervisor has held it for two looks in a row.
    pub(super) async fn fence_dead_holder(&mut self, look: super::HolderLook) {
        let key = self.lock.file.key();
        if let Some((supervisor, kubelet)) = self.served_by_live_holder(key) {
            self.fencing.none_stopped();
            if !self
                .fencing
                .holder_watch
                .as_ref()
                .is_some_and(|w| w.watches(supervisor, kubelet))
            {
                self.fencing.holder_watch = HolderWatch::open(supervisor, kubelet);
                match &self.fencing.holder_watch {
                    Some(_) => debug!(holder_pid = supervisor.pid, kubelet_pid = kubelet.pid, "watching the holder's and its kubelet's exits (no timed look while they run)"),
                    None => debug!(holder_pid = supervisor.pid, "cannot watch the holder's exit (not in our PID namespace?); looking every 100 ms"),
                }
            }
            return;
        }
        self.fencing.holder_watch = None;
        if let Some(rec) = self.dead_record() {
            if self.fence_dead_record(&rec, key) {
                return;
            }
        }
        if look == super::HolderLook::Quick {
            return;
        }
        // A supervisor holding the lock is seen from its own fdinfo (the
        // common case: a live holder): /proc/locks only when none does.
        let holding = self.supervisor_holding(key);
        if !self.fencing.read_locks_now(holding.is_some()) && holding.is_none() {
            return;
        }
        if let Some(taker) = holding {
            let rec = match HolderRecord::read(&self.state) {
                Ok(Some(r)) if r.supervisor() != self.me => Some(r),
                _ => None,
            };
            let its_kubelet_runs = rec.as_ref().is_some_and(|r| {
                r.pid == taker.pid && r.is_live() && r.kubelet().is_some_and(|k| k.is_alive())
            });
            if claims::held_by(&self.state, taker, fence::holds) && !its_kubelet_runs {
                self.fence_stopped(taker.pid, "it holds the lock");
            } else {
                self.fencing.none_stopped();
            }
            return;
        }
        let locks = procfs::read_locks().unwrap_or_default();
        let Some(taker) = procfs::taker(&locks, key) else {
            self.fencing.none_stopped();
            return;
        };
        let rec = match HolderRecord::read(&self.state) {
            Ok(Some(r)) if r.supervisor() != self.me => Some(r),
            _ => None,
        };
        // The taker is gone, or it is the recorded holder and that record
        // is dead (its pid may have been reused since).
        let recorded_dead = rec.as_ref().is_some_and(|r| r.pid == taker && !r.is_live());
        if !fence::taker_gone(taker) && !recorded_dead {
            let its_kubelet_runs = rec.as_ref().is_some_and(|r| {
                r.pid == taker && r.is_live() && r.kubelet().is_some_and(|k| k.is_alive())
            });
            let verified = self.live_claims(&locks).iter().any(|c| c.owner == taker);
            if verified && !its_kubelet_runs {
                self.fence_stopped(taker, "it holds the lock");
            } else {
                self.fencing.none_stopped();
            }
            return;
        }
        if let Some(rec) = rec.filter(|r| !r.is_live()) {
            let holder_claim_alive = self
                .live_claims(&locks)
                .iter()
                .any(|c| c.claim.process() == rec.supervisor());
            if !holder_claim_alive {
                self.fence_kubelet_of(&rec);
            }
        }
        self.fence_leftovers(key, taker);
    }
    /// The supervisor (a claim file names it) that holds the flock it took
    /// on `key`, from the supervisors' /proc/PID/fdinfo; not us.
    pub(super) fn supervisor_holding(&self, key: procfs::FileKey) -> Option<ProcessId> {
        claims::claimed_pids(&self.state)
            .into_iter()
            .filter(|pid| *pid != self.me.pid)
            .find(|pid| fence::holds(*pid, key))
            .and_then(procfs::id_of)
    }
    /// The holder record, if it names another supervisor that is gone or
    /// killed (it runs no code again) and whose pid is not reused.
    fn dead_record(&self) -> Option<HolderRecord> {
        let rec = match HolderRecord::read(&self.state) {
            Ok(Some(rec)) if rec.supervisor() != self.me => rec,
            _ => return None,
        };
        let dead = !rec.is_live() || procfs::doomed(rec.pid);
        let reused = procfs::stat(rec.pid).is_some_and(|s| s.start_time != rec.start_time);
        (dead && !reused).then_some(rec)
    }
    /// Fences what the dead holder `rec` left: its kubelet's group (once
    /// proven, as `fence_kubelet_of`) and the leftovers that hold the locked
    /// description it took on `key` (a helper that inherited the kubelet's
    /// descriptor and left its group). They are found in /proc/PID/fdinfo,
    /// whose `lock:` lines name the taker: unlike /proc/locks, it takes no
    /// node-wide lock. A read of /proc/locks takes the kernel's file-lock
    /// rwsem for writing, which waits for an RCU grace period (measured in
    /// chaos under load: 100-250 ms) and meanwhile blocks every flock and
    /// every close of a locked file on the node, the very release of the
    /// lock we wait for among them (issue 31). Never a process with a claim
    /// file (a supervisor), never us. True when something of it was still
    /// there (killed now: the lock comes free once it is gone).
    fn fence_dead_record(&mut self, rec: &HolderRecord, key: procfs::FileKey) -> bool {
        let kubelet_left = !self.fence_kubelet_of(rec);
        let supervisors = claims::claimed_pids(&self.state);
        let leftovers: Vec<i32> = fence::lock_holders(key, rec.pid, self.me.pid)
            .into_iter()
            .filter(|pid| !supervisors.contains(pid))
            .collect();
        for pid in &leftovers {
            let pgid = procfs::stat(*pid).map(|s| s.pgrp);
            warn!(pid, pgid, taker = rec.pid, "the lock is held by a leftover of the dead holder (a process that inherited its locked descriptor and left the kubelet's process group); killing it");
            if !child::signal_view_pid(*pid, Signal::SIGKILL) {
                warn!(pid, "cannot signal the leftover (not in our PID namespace); the lock comes free when it exits");
            }
        }
        kubelet_left || !leftovers.is_empty()
    }
    /// Whether the holder record names a live supervisor (not us) whose
    /// kubelet runs, on the inode we wait on: then nothing can need fencing
    /// (a stopped holder whose kubelet runs is left alone), and the look at
    /// /proc/locks is skipped. Each read of /proc/locks takes the kernel's
    /// file-lock rwsem for writing, which waits for an RCU grace period and
    /// meanwhile stalls every flock and every close of a locked file on the
    /// node (measured under load: p99 31 ms, max 87 ms per read); a waiter
    /// looks every 100 ms for as long as it waits.
    fn served_by_live_holder(&self, key: procfs::FileKey) -> Option<(ProcessId, ProcessId)> {
        let Ok(Some(rec)) = HolderRecord::read(&self.state) else {
            return None;
        };
        let kubelet = rec.kubelet().filter(|k| k.is_alive())?;
        (rec.supervisor() != self.me && rec.lock_file == Some(key) && rec.is_live())
            .then_some((rec.supervisor(), kubelet))
    }
    /// Kills the kubelet a dead holder's record names, once `fence::prove`
    /// accepts it; true when nothing of it is left (or nothing can be
    /// proven), false while its group still has a live member (look again).
    /// Never blocks: the loop stays responsive (SIGTERM within 100 ms).
    pub(super) fn fence_kubelet_of(&mut self, rec: &HolderRecord) -> bool {
        let pgid = match fence::prove(rec, fence::own_view_pgid()) {
            Ok(pgid) => pgid,
            Err(NotProven::NoKubelet | NotProven::Gone(_)) => return true,
            Err(reason @ NotProven::Reused { .. }) => {
                debug!(%reason, "previous kubelet is gone");
                return true;
            }
            Err(reason) => {
                let line = format!("not fencing the kubelet named by the holder record: {reason}");
                if self.reported.first(&line) {
                    error!("{line}");
                }
                return true;
            }
        };
        let line = format!("the previous holder (gone) left its kubelet running: killing process group {pgid} before starting ours");
        if self.reported.first(&line) {
            warn!(previous = %rec.rank(), previous_pid = rec.pid, "{line}");
        }
        child::signal_view_group(pgid, Signal::SIGKILL);
        child::reap_all();
        if child::view_group_gone(pgid) {
            info!(pgid, "previous kubelet fenced");
            return true;
        }
        if self.fencing.unkillable_report_due(Instant::now()) {
            error!(pgid, "previous kubelet's process group survives SIGKILL; not starting ours until it is gone");
        }
        false
    }
    /// SIGKILLs the processes that hold the locked description of `key`
    /// taken by `taker` (gone): leftovers of a dead holder's kubelet (a
    /// helper that inherited the descriptor and left the kubelet's group).
    /// Never a supervisor with a verified claim, never ourselves.
    pub(super) fn fence_leftovers(&mut self, key: procfs::FileKey, taker: i32) {
        let holders = fence::lock_holders(key, taker, self.me.pid);
        if holders.is_empty() {
            return;
        }
        // Look again right before killing: the lock must still be the dead
        // taker's (another waiter may have fenced and taken it meanwhile),
        // and no supervisor with a verified claim is ever a leftover.
        let locks = procfs::read_locks().unwrap_or_default();
        if !locks
            .iter()
            .any(|e| !e.blocked && e.file == key && e.pid == taker)
        {
            return;
        }
        let supervisors: Vec<i32> = self.live_claims(&locks).iter().map(|c| c.owner).collect();
        for pid in holders.into_iter().filter(|p| !supervisors.contains(p)) {
            let pgid = procfs::stat(pid).map(|s| s.pgrp);
            warn!(pid, pgid, taker, "the lock is held by a leftover of its dead taker (a process that inherited the locked descriptor and left the kubelet's process group); killing it");
            if !child::signal_view_pid(pid, Signal::SIGKILL) {
                warn!(pid, "cannot signal the leftover (not in our PID namespace); the lock comes free when it exits");
            }
        }
    }
    /// `pid` is a supervisor (verified by the caller: our holder record
    /// names it, or it holds a verified claim) that is stopped while it
    /// keeps the node without a kubelet. Once it has been seen so for
    /// `STOPPED_PATIENCE`, it is fenced with SIGKILL (a stopped process
    /// cannot take the lock it holds, or start the kubelet it is about to;
    /// killed, it lets go of both, and a kubelet it may have spawned dies
    /// with it by PDEATHSIG and holds its inode until then).
    pub(super) fn fence_stopped(&mut self, pid: i32, why: &str) {
        let Some(stat) = procfs::stat(pid).filter(|s| matches!(s.state, 'T' | 't')) else {
            self.fencing.none_stopped();
            return;
        };
        let id = ProcessId {
            pid,
            start_time: stat.start_time,
        };
        let stopped_for = match self.fencing.stopped(id, Instant::now()) {
            Stopped::FirstSeen => {
                debug!(
                    pid,
                    why, "a stopped supervisor keeps the node without a kubelet"
                );
                return;
            }
            Stopped::Patience => return,
            Stopped::Fence(stopped_for) => stopped_for,
        };
        warn!(pid, why, stopped_for = %humantime::format_duration(stopped_for), "fencing a stopped supervisor that keeps the node without a kubelet: SIGKILL");
        if !child::signal_view_pid(pid, Signal::SIGKILL) {
            let line = format!("cannot fence stopped supervisor pid {pid} (not in our PID namespace); the node has no kubelet until it is resumed or killed");
            if self.reported.first(&line) {
                error!("{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pid: i32) -> ProcessId {
        ProcessId { pid, start_time: 1 }
    }

    #[test]
    fn a_stopped_supervisor_is_fenced_after_the_patience() {
        let mut f = Fencing::default();
        let now = Instant::now();
        assert_eq!(f.stopped(id(7), now), Stopped::FirstSeen);
        assert_eq!(
            f.stopped(id(7), now + STOPPED_PATIENCE / 2),
            Stopped::Patience
        );
        assert_eq!(
            f.stopped(id(7), now + STOPPED_PATIENCE),
            Stopped::Fence(STOPPED_PATIENCE)
        );
        // Another process (or the same pid reused) starts the clock anew.
        assert_eq!(f.stopped(id(8), now + STOPPED_PATIENCE), Stopped::FirstSeen);
        let reused = ProcessId {
            pid: 8,
            start_time: 2,
        };
        assert_eq!(
            f.stopped(reused, now + STOPPED_PATIENCE),
            Stopped::FirstSeen
        );
        // Seen running in between: anew too.
        f.none_stopped();
        assert_eq!(
            f.stopped(reused, now + STOPPED_PATIENCE),
            Stopped::FirstSeen
        );
    }

    #[test]
    fn proc_locks_is_read_only_on_the_second_look_without_a_supervisor_holder() {
        let mut f = Fencing::default();
        assert!(!f.read_locks_now(false));
        assert!(f.read_locks_now(false));
        assert!(f.read_locks_now(false));
        assert!(!f.read_locks_now(true));
        assert!(!f.read_locks_now(false));
        assert!(f.read_locks_now(false));
        f.cleared();
        assert!(!f.read_locks_now(false));
    }

    #[test]
    fn an_unkillable_group_is_reported_every_few_seconds() {
        let mut f = Fencing::default();
        let now = Instant::now();
        assert!(f.unkillable_report_due(now));
        assert!(!f.unkillable_report_due(now + UNKILLABLE_REPORT / 2));
        assert!(f.unkillable_report_due(now + UNKILLABLE_REPORT));
    }

    #[test]
    fn a_takeover_wait_is_noted_once_per_reason() {
        let mut f = Fencing::default();
        assert!(f.note("a".into()));
        assert!(!f.note("a".into()));
        assert!(f.note("b".into()));
        assert!(f.note("a".into()));
        f.cleared();
        assert!(f.note("a".into()));
        assert_eq!(f.stopped(id(7), Instant::now()), Stopped::FirstSeen);
        f.cleared();
        assert_eq!(f.stopped(id(7), Instant::now()), Stopped::FirstSeen);
    }
}
