//! Times as they are written on the wire and in records: RFC 3339, UTC, millisecond
//! precision.

use std::time::{Duration, SystemTime};

/// `t` as RFC 3339 UTC with milliseconds.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// RFC 3339 UTC timestamp of now, millisecond precision.
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// A timestamp read back: RFC 3339, with or without a fraction (earlier builds wrote
/// whole seconds), `None` when it is not one.
pub fn parse(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text).ok()
}

/// RFC 3339 UTC timestamp `d` from now.
pub fn rfc3339_after(d: Duration) -> String {
    rfc3339(SystemTime::now() + d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_with_milliseconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_500);
        assert_eq!(rfc3339(t), "1970-01-01T00:00:01.500Z");
        assert!(rfc3339_after(Duration::from_secs(60)) > now_rfc3339());
        assert_eq!(
            parse("1970-01-01T00:00:01Z"),
            Some(t - Duration::from_millis(500))
        );
        assert_eq!(parse(&rfc3339(t)), Some(t));
        assert_eq!(parse("yesterday"), None);
    }
}
