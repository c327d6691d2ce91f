//! Fencing: reaping our kubelet, telling when its group is gone, and
//! killing what a previous holder left behind (its kubelet's group, and
//! leftovers holding its locked description) once that is proven.

use super::*;

use super::holder_watch;

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
                    self.crashes_in_a_row += 1;
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
            if *killed {
                let now = Instant::now();
                if self
                    .last_unkillable_report
                    .is_none_or(|t| now.duration_since(t) >= UNKILLABLE_REPORT)
                {
                    self.last_unkillable_report = Some(now);
                    error!(pgid = kubelet.pgid(), "kubelet process group is still alive after SIGKILL (a process in uninterruptible sleep?); keeping the lock so that no second kubelet starts; check `ps -o pid,stat,wchan -g {}`", kubelet.pgid());
                }
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
    pub(super) async fn fence_dead_holder(&mut self) {
        let key = self.lock.key();
        if let Some((supervisor, kubelet)) = self.served_by_live_holder(key) {
            self.stopped_seen = None;
            if !self
                .holder_watch
                .as_ref()
                .is_some_and(|w| w.watches(supervisor, kubelet))
            {
                self.holder_watch = holder_watch::HolderWatch::open(supervisor, kubelet);
                match &self.holder_watch {
                    Some(_) => debug!(holder_pid = supervisor.pid, kubelet_pid = kubelet.pid, "watching the holder's and its kubelet's exits (no timed look while they run)"),
                    None => debug!(holder_pid = supervisor.pid, "cannot watch the holder's exit (not in our PID namespace?); looking every 100 ms"),
                }
            }
            return;
        }
        self.holder_watch = None;
        let locks = procfs::read_locks().unwrap_or_default();
        let Some(taker) = procfs::taker(&locks, key) else {
            self.stopped_seen = None;
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
                self.stopped_seen = None;
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
                if self.reported.len() < MAX_REPORTED && self.reported.insert(line.clone()) {
                    error!("{line}");
                }
                return true;
            }
        };
        let line = format!("the previous holder (gone) left its kubelet running: killing process group {pgid} before starting ours");
        if self.reported.len() < MAX_REPORTED && self.reported.insert(line.clone()) {
            warn!(previous = %rec.rank(), previous_pid = rec.pid, "{line}");
        }
        child::signal_view_group(pgid, Signal::SIGKILL);
        child::reap_all();
        if child::view_group_gone(pgid) {
            info!(pgid, "previous kubelet fenced");
            return true;
        }
        let now = Instant::now();
        if self
            .last_unkillable_report
            .is_none_or(|t| now.duration_since(t) >= UNKILLABLE_REPORT)
        {
            self.last_unkillable_report = Some(now);
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
            warn!(pid, ?pgid, taker, "the lock is held by a leftover of its dead taker (a process that inherited the locked descriptor and left the kubelet's process group); killing it");
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
            self.stopped_seen = None;
            return;
        };
        let id = ProcessId {
            pid,
            start_time: stat.start_time,
        };
        let now = Instant::now();
        let since = match self.stopped_seen {
            Some((seen, since)) if seen == id => since,
            _ => {
                self.stopped_seen = Some((id, now));
                debug!(
                    pid,
                    why, "a stopped supervisor keeps the node without a kubelet"
                );
                return;
            }
        };
        if now.duration_since(since) < STOPPED_PATIENCE {
            return;
        }
        warn!(pid, why, stopped_for = ?now.duration_since(since), "fencing a stopped supervisor that keeps the node without a kubelet: SIGKILL");
        if !child::signal_view_pid(pid, Signal::SIGKILL) {
            let line = format!("cannot fence stopped supervisor pid {pid} (not in our PID namespace); the node has no kubelet until it is resumed or killed");
            if self.reported.len() < MAX_REPORTED && self.reported.insert(line.clone()) {
                error!("{line}");
            }
        }
    }
}
