//! Status writes paced per rollout: a write that only updates counts waits until
//! [`STATUS_MIN_INTERVAL`] has passed since the last one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Least time between two status writes of one rollout that only update counts.
pub(super) const STATUS_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// When each rollout's status was last written.
#[derive(Debug, Default)]
pub(super) struct StatusPacing {
    written: Mutex<HashMap<String, Instant>>,
}

impl StatusPacing {
    /// Records a status write of `rollout` now.
    pub(super) fn wrote(&self, rollout: &str) {
        if let Ok(mut w) = self.written.lock() {
            w.insert(rollout.to_string(), Instant::now());
        }
    }

    /// How long to hold back a status write of `rollout` (None: write now); a write that
    /// comes with node changes is never held back.
    pub(super) fn hold_back(&self, rollout: &str, with_node_changes: bool) -> Option<Duration> {
        let since = self
            .written
            .lock()
            .ok()
            .and_then(|w| w.get(rollout).map(Instant::elapsed));
        hold_back(since, with_node_changes)
    }
}

/// The wait before a status write, `since` the last one.
fn hold_back(since: Option<Duration>, with_node_changes: bool) -> Option<Duration> {
    match since {
        Some(elapsed) if elapsed < STATUS_MIN_INTERVAL && !with_node_changes => {
            Some(STATUS_MIN_INTERVAL - elapsed)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counts_only_write_waits_out_the_interval() {
        let ms = Duration::from_millis;
        assert_eq!(hold_back(None, false), None, "never written");
        assert_eq!(hold_back(Some(ms(300)), false), Some(ms(700)));
        assert_eq!(hold_back(Some(ms(300)), true), None, "nodes changed");
        assert_eq!(hold_back(Some(STATUS_MIN_INTERVAL), false), None);
        assert_eq!(hold_back(Some(ms(5000)), false), None);
    }

    #[test]
    fn per_rollout() {
        let pacing = StatusPacing::default();
        assert_eq!(pacing.hold_back("r1", false), None);
        pacing.wrote("r1");
        assert!(pacing.hold_back("r1", false).is_some());
        assert_eq!(pacing.hold_back("r1", true), None);
        assert_eq!(pacing.hold_back("r2", false), None);
    }
}
