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
    /// As in libsystemd's sd_watchdog_enabled(3), WATCHDOG_PID is optional
    /// and, when set, must name us (the sd-notify crate requires it).
    pub fn watchdog_interval() -> Option<Duration> {
        watchdog_interval_from(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        )
    }
}

fn watchdog_interval_from(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|u| *u > 0)?;
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok() != Some(me) {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_interval_follows_libsystemd() {
        let half = Some(Duration::from_millis(100));
        assert_eq!(watchdog_interval_from(Some("200000"), None, 7), half);
        assert_eq!(watchdog_interval_from(Some("200000"), Some("7"), 7), half);
        assert_eq!(watchdog_interval_from(Some("200000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval_from(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval_from(Some("x"), None, 7), None);
        assert_eq!(watchdog_interval_from(None, Some("7"), 7), None);
    }
}
