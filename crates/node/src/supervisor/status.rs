//! Status publishing: the holder record, the status line for logs and
//! systemd's STATUS=.

use super::*;

impl Driver {
    /// Our holder record as of now: the kubelet we run (if any) and the
    /// inode whose locked description it holds.
    fn record_now(&self, kubelet: Option<crate::kubelet::child::Kubelet>) -> HolderRecord {
        let since = kp_contract::time::rfc3339(self.holder_since_time);
        let mut rec = HolderRecord::new(self.rank(), self.me, since);
        if let Some(k) = kubelet {
            rec.kubelet_pid = Some(k.id.pid);
            rec.kubelet_start_time = Some(k.id.start_time);
        }
        rec.lock_file = Some(self.lock.kubelet_key());
        rec
    }
    /// Writes our record inline (a few hundred bytes, no fsync: runtime
    /// state), on the path to a spawn. False when it could not be written.
    pub(super) fn write_record_now(
        &mut self,
        kubelet: Option<crate::kubelet::child::Kubelet>,
    ) -> bool {
        let rec = self.record_now(kubelet);
        let key = rec.lock_file;
        match rec.write(&self.state) {
            Ok(()) => {
                self.lock.recorded = key;
                true
            }
            Err(err) => {
                error!(%err, "cannot write the holder record; until it is written, a supervisor that takes a replaced lock file cannot see this kubelet (check the state directory's disk)");
                false
            }
        }
    }
    pub(super) async fn write_holder(&mut self) {
        let rec = self.record_now(self.pivot.kubelet());
        let key = rec.lock_file;
        let state = self.state.clone();
        match tokio::task::spawn_blocking(move || rec.write(&state)).await {
            Ok(Ok(())) => self.lock.recorded = key,
            Ok(Err(err)) => {
                warn!(%err, "failed to write the holder record; `status` will be wrong until the next write")
            }
            Err(err) => warn!(%err, "holder record writer task failed"),
        }
    }
    pub(super) fn status_line(&self) -> String {
        match &self.pivot.state {
            State::Waiting => match HolderRecord::read(&self.state) {
                Ok(Some(r)) if r.is_live() && r.supervisor() != self.me => {
                    format!("standing by: lock held by {} pid {}", r.rank(), r.pid)
                }
                _ if self.lock.acquiring.is_some() => STANDING_BY_UNKNOWN.to_string(),
                _ => "waiting for the lock".to_string(),
            },
            State::Deferring { to, .. } => format!("standing by: handing the lock to {to}"),
            State::Holding(Run::Clearing) => {
                "holding the lock; waiting for the recorded holder's kubelet to be gone".to_string()
            }
            State::Holding(Run::Starting) => "starting kubelet".to_string(),
            State::Holding(Run::Running(k)) => format!("running kubelet pid {}", k.pid),
            State::Holding(Run::Backoff { delay, .. }) => {
                format!(
                    "kubelet exited; restarting in {}",
                    humantime::format_duration(*delay)
                )
            }
            State::Stopping {
                kubelet, purpose, ..
            } => {
                let why = match purpose {
                    StopPurpose::Yield(c) => format!("yielding to {c}"),
                    StopPurpose::Shutdown => "shutting down".to_string(),
                    StopPurpose::Restart => "restart requested".to_string(),
                    StopPurpose::LockLost => "lock file lost".to_string(),
                };
                format!("stopping kubelet pid {}: {why}", kubelet.pid)
            }
            State::Exited(code) => format!("exited with code {code}"),
        }
    }
    pub(super) fn publish_status(&mut self) {
        let mut line = self.status_line();
        // Between a handover and the new holder's record (or after a holder
        // died, until we get the lock) the holder is unknown for a moment:
        // keep saying whom we stand by for instead of flapping.
        if line == STANDING_BY_UNKNOWN && self.last_status.starts_with(STANDING_BY) {
            line = self.last_status.clone();
        }
        if line != self.last_status {
            info!(rank = %self.rank(), yields = self.pivot.yields, "{line}");
            self.last_status = line.clone();
        }
        if matches!(self.pivot.state, State::Holding(Run::Running(_))) {
            self.notifier.ready();
        }
        self.notifier.status(&line);
    }
}
