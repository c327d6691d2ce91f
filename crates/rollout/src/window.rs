//! Maintenance windows (weekly, UTC) and the spec's duration texts.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kp_contract::rollout::MaintenanceWindow;

const DAY: u64 = 24 * 3600;
const WEEK: u64 = 7 * DAY;
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// A duration of the spec that cannot be read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{field}: {text:?} is not a duration like \"30s\" or \"10m\": {source}")]
pub struct DurationError {
    /// The spec field (`soak`, `healthGates.nodeReadyTimeout`).
    pub field: String,
    pub text: String,
    #[source]
    pub source: humantime::DurationError,
}

/// A maintenance window that cannot be followed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WindowError {
    #[error("start {0:?} is not a time of day like \"22:00\"")]
    Start(String),
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error("duration {0:?} must be more than 0 and at most 7 days")]
    Length(String),
    #[error("day {0:?} is not one of Mon, Tue, ..., Sun")]
    Day(String),
}

/// The window of a spec that cannot be followed, by its index.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("maintenanceWindows[{index}]: {source}")]
pub struct WindowsError {
    pub index: usize,
    #[source]
    pub source: WindowError,
}

/// A duration as the spec writes it (`"90s"`, `"10m"`, `"1h30m"`, `"0s"`).
pub fn parse_duration(field: &str, text: &str) -> Result<Duration, DurationError> {
    humantime::parse_duration(text.trim()).map_err(|source| DurationError {
        field: field.to_string(),
        text: text.to_string(),
        source,
    })
}

/// A window checked and turned into minutes of the week.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Seconds after Monday 00:00 UTC at which the window opens, one per day it opens.
    opens: Vec<u64>,
    length: u64,
}

/// Checks the windows of a spec.
pub fn parse_windows(windows: &[MaintenanceWindow]) -> Result<Vec<Window>, WindowsError> {
    windows
        .iter()
        .enumerate()
        .map(|(index, w)| parse_window(w).map_err(|source| WindowsError { index, source }))
        .collect()
}

fn parse_window(w: &MaintenanceWindow) -> Result<Window, WindowError> {
    let (h, m) = w
        .start
        .split_once(':')
        .and_then(|(h, m)| Some((h.parse::<u64>().ok()?, m.parse::<u64>().ok()?)))
        .filter(|(h, m)| *h < 24 && *m < 60)
        .ok_or_else(|| WindowError::Start(w.start.clone()))?;
    let length = parse_duration("duration", &w.duration)?.as_secs();
    if length == 0 || length > WEEK {
        return Err(WindowError::Length(w.duration.clone()));
    }
    let days: Vec<u64> = if w.days.is_empty() {
        (0..7).collect()
    } else {
        w.days
            .iter()
            .map(|d| {
                DAYS.iter()
                    .position(|name| name.eq_ignore_ascii_case(d.trim()))
                    .map(|p| p as u64)
                    .ok_or_else(|| WindowError::Day(d.clone()))
            })
            .collect::<Result<_, _>>()?
    };
    Ok(Window {
        opens: days
            .into_iter()
            .map(|d| d * DAY + h * 3600 + m * 60)
            .collect(),
        length,
    })
}

/// Seconds since Monday 00:00 UTC of the week `t` falls in (1970-01-01 was a Thursday).
fn week_offset(t: SystemTime) -> u64 {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    (secs + 3 * DAY) % WEEK
}

/// Whether `now` is inside a window (no windows: always), and if not, how long until the
/// next one opens.
pub fn open_at(windows: &[Window], now: SystemTime) -> Result<(), Duration> {
    if windows.is_empty() {
        return Ok(());
    }
    let t = week_offset(now);
    let mut next = u64::MAX;
    for w in windows {
        for &open in &w.opens {
            // Since the most recent opening at or before now (this week or last).
            let since = (t + WEEK - open) % WEEK;
            if since < w.length {
                return Ok(());
            }
            next = next.min(WEEK - since);
        }
    }
    Err(Duration::from_secs(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(day: u64, h: u64, m: u64) -> SystemTime {
        // 2024-01-01 was a Monday.
        UNIX_EPOCH + Duration::from_secs(1_704_067_200 + day * DAY + h * 3600 + m * 60)
    }

    fn window(days: &[&str], start: &str, duration: &str) -> Vec<Window> {
        parse_windows(&[MaintenanceWindow {
            days: days.iter().map(|d| d.to_string()).collect(),
            start: start.into(),
            duration: duration.into(),
        }])
        .unwrap()
    }

    #[test]
    fn no_windows_is_always_open() {
        assert_eq!(open_at(&[], at(2, 3, 4)), Ok(()));
    }

    #[test]
    fn daily_window_across_midnight() {
        let w = window(&[], "22:00", "4h");
        assert_eq!(open_at(&w, at(0, 23, 0)), Ok(()));
        assert_eq!(open_at(&w, at(1, 1, 59)), Ok(()));
        assert_eq!(
            open_at(&w, at(1, 2, 0)),
            Err(Duration::from_secs(20 * 3600))
        );
    }

    #[test]
    fn weekend_window_wraps_the_week() {
        let w = window(&["sun"], "23:00", "2h");
        assert_eq!(open_at(&w, at(6, 23, 30)), Ok(()));
        // Monday 00:30 is still inside Sunday's window (across the week's end).
        assert_eq!(open_at(&w, at(7, 0, 30)), Ok(()));
        assert_eq!(
            open_at(&w, at(7, 1, 0)),
            Err(Duration::from_secs(6 * DAY + 22 * 3600))
        );
    }

    #[test]
    fn bad_windows_are_refused_with_the_field() {
        for (days, start, duration, want) in [
            (vec!["Funday"], "22:00", "1h", "day \"Funday\""),
            (vec![], "25:00", "1h", "start \"25:00\""),
            (vec![], "22:00", "0s", "must be more than 0"),
            (vec![], "22:00", "8days", "at most 7 days"),
        ] {
            let err = parse_windows(&[MaintenanceWindow {
                days: days.into_iter().map(String::from).collect(),
                start: start.into(),
                duration: duration.into(),
            }])
            .unwrap_err()
            .to_string();
            assert!(err.starts_with("maintenanceWindows[0]: "), "{err}");
            assert!(err.contains(want), "{err}");
        }
    }
}
