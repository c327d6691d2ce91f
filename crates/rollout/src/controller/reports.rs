//! How far the report of each unreadable rollout got (module
//! [`invalid`](crate::invalid)), so that it is made once per generation and error.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::invalid::{Key, Report};

/// The reports of the rollouts that cannot be read, by name.
#[derive(Debug, Default)]
pub(super) struct InvalidReports {
    by_name: Mutex<HashMap<String, Report>>,
}

impl InvalidReports {
    /// The report of `name` if it is about `key` (the same object, generation and error).
    pub(super) fn of(&self, name: &str, key: &Key) -> Option<Report> {
        self.by_name
            .lock()
            .ok()
            .and_then(|reports| reports.get(name).cloned())
            .filter(|r| r.key == *key)
    }

    /// Records how far the report of `name` got.
    pub(super) fn update(&self, name: String, report: Report) {
        if let Ok(mut reports) = self.by_name.lock() {
            reports.insert(name, report);
        }
    }

    /// `name` can be read (again).
    pub(super) fn forget(&self, name: &str) {
        if let Ok(mut reports) = self.by_name.lock() {
            reports.remove(name);
        }
    }

    /// Whether `name` cannot be read (as of its last reconcile).
    pub(super) fn contains(&self, name: &str) -> bool {
        self.by_name
            .lock()
            .is_ok_and(|reports| reports.contains_key(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(generation: i64, message: &str) -> Key {
        Key {
            uid: Some("u1".into()),
            generation: Some(generation),
            message: message.into(),
        }
    }

    #[test]
    fn a_report_is_of_one_generation_and_error() {
        let reports = InvalidReports::default();
        assert!(!reports.contains("r1"));
        let mut report = Report::new(key(1, "spec.batch: null"));
        report.event_done = true;
        reports.update("r1".into(), report.clone());
        assert!(reports.contains("r1"));
        assert_eq!(reports.of("r1", &key(1, "spec.batch: null")), Some(report));
        assert_eq!(
            reports.of("r1", &key(2, "spec.batch: null")),
            None,
            "edited"
        );
        assert_eq!(
            reports.of("r1", &key(1, "spec.canary: -1")),
            None,
            "another error"
        );
        assert_eq!(reports.of("r2", &key(1, "spec.batch: null")), None);
        reports.forget("r1");
        assert!(!reports.contains("r1"));
    }
}
