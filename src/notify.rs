//! systemd notifications (sd_notify protocol). Harmless without
//! NOTIFY_SOCKET. The kubelet child never inherits NOTIFY_SOCKET.

use std::time::Duration;

use sd_notify::NotifyState;

#[derive(Debug, Default)]
pub struct Notifier {
    ready_sent: bool,
    last_status: String,
}

impl Notifier {
    pub fn new() -> Self {
        Self::default()
    }

    fn send(states: &[NotifyState<'_>]) {
        if let Err(err) = sd_notify::notify(false, states) {
            tracing::debug!(%err, "sd_notify failed");
        }
    }

    /// READY=1, once.
    pub fn ready(&mut self) {
        if !self.ready_sent {
            self.ready_sent = true;
            Self::send(&[NotifyState::Ready]);
        }
    }

    /// STATUS=..., only when it changed.
    pub fn status(&mut self, line: &str) {
        if self.last_status != line {
            self.last_status = line.to_string();
            Self::send(&[NotifyState::Status(line)]);
        }
    }

    pub fn stopping(&mut self) {
        Self::send(&[NotifyState::Stopping]);
    }

    pub fn watchdog(&self) {
        Self::send(&[NotifyState::Watchdog]);
    }

    /// Ping interval: half of WATCHDOG_USEC when systemd asked for pings.
    pub fn watchdog_interval() -> Option<Duration> {
        let mut usec = 0u64;
        if sd_notify::watchdog_enabled(false, &mut usec) && usec > 0 {
            Some(Duration::from_micros(usec / 2))
        } else {
            None
        }
    }
}
