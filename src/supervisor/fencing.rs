//! Fencing: reaping our kubelet, telling when its group is gone, and
//! killing what a previous holder left behind (its kubelet's group, and
//! leftovers holding its locked description) once that is proven.

use super::*;

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
    /// Kills whatever kubelet the previous holder left behind, and waits
    /// until its process group is gone, before ours may start.
    pub(super) async fn fence(&mut self) {
        let rec = match HolderRecord::read(&self.state) {
            Ok(Some(r)) if r.supervisor() != self.me => r,
            Ok(_) => {
                // A holder that yields or stops removes its record first.
                info!(rank = %self.rank(), "took the lock: it was free (no holder, or the holder released it)");
                return;
            }
            Err(err) => {
                warn!(%err, "took the lock; cannot read the previous holder record, nothing to fence");
                return;
            }
        };
        info!(rank = %self.rank(), previous = %rec.rank(), previous_pid = rec.pid, "took the lock: the previous holder is gone without releasing it (killed or crashed)");
        self.fence_kubelet_of(&rec).await;
    }
    /// While waiting: if the recorded holder is dead (its claim's flock is
    /// free AND its pid/start time are gone) but the lock is still held, the
    /// lock is held by leftovers of its kubelet (a helper process that
    /// inherited the locked descriptor and has no PDEATHSIG). Fence them from
    /// outside, or nobody would ever get the lock.
    /// While waiting: if the process that took the lock is gone but the lock
    /// is still held, it is held by descriptors it handed down: its kubelet's
    /// group (fenced by the holder record) and anything that escaped the
    /// group holding the same open file description (a helper that
    /// daemonized with the inherited descriptor). Fence both from outside,
    /// or nobody would get the lock until they exit by themselves.
    pub(super) async fn fence_dead_holder(&mut self) {
        let key = self.lock.key();
        let locks = procfs::read_locks().unwrap_or_default();
        let Some(taker) = locks
            .iter()
            .find(|e| !e.blocked && e.file == key)
            .map(|e| e.pid)
        else {
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
            return;
        }
        if let Some(rec) = rec.filter(|r| !r.is_live()) {
            let holder_claim_alive = self
                .live_claims(&locks)
                .iter()
                .any(|c| c.claim.process() == rec.supervisor());
            if !holder_claim_alive {
                self.fence_kubelet_of(&rec).await;
            }
        }
        let me = self.me.pid;
        let holders = fence::lock_holders(key, taker, me);
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
    pub(super) async fn fence_kubelet_of(&mut self, rec: &HolderRecord) {
        let k = match fence::prove(rec, fence::own_view_pgid()) {
            Ok(pgid) => ProcessId {
                pid: pgid,
                start_time: rec.kubelet_start_time.unwrap_or_default(),
            },
            Err(NotProven::NoKubelet | NotProven::Gone(_)) => return,
            Err(reason @ NotProven::Reused { .. }) => {
                debug!(%reason, "previous kubelet is gone");
                return;
            }
            Err(reason) => {
                let line = format!("not fencing the kubelet named by the holder record: {reason}");
                if self.reported.len() < MAX_REPORTED && self.reported.insert(line.clone()) {
                    error!("{line}");
                }
                return;
            }
        };
        warn!(pgid = k.pid, previous = %rec.rank(), "the previous holder's kubelet is still running; killing its process group before starting ours");
        let started = Instant::now();
        let mut last_report = started;
        loop {
            child::signal_view_group(k.pid, Signal::SIGKILL);
            child::reap_all();
            if child::view_group_gone(k.pid) {
                info!(pgid = k.pid, waited = ?started.elapsed(), "previous kubelet fenced");
                return;
            }
            if last_report.elapsed() >= UNKILLABLE_REPORT {
                last_report = Instant::now();
                error!(pgid = k.pid, "previous kubelet's process group survives SIGKILL; not starting ours until it is gone");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
