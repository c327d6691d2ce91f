//! Leases (coordination.k8s.io/v1), as pkg/registry/coordination/lease and
//! pkg/apis/coordination/validation of v1.32 have them: `spec.leaseDurationSeconds` greater
//! than 0, `spec.leaseTransitions` not negative, `acquireTime`/`renewTime` MicroTimes
//! (RFC 3339 with exactly six fractional digits, served in UTC), and `strategy` /
//! `preferredHolder` dropped unless the stored Lease has them (the CoordinatedLeaderElection
//! gate is off on v1.32). Optimistic concurrency, watches and selectors are the server's.

use serde_json::{json, Value};

use crate::clock::civil_from_days;
use crate::decode::{go_type, Shape, OBJECT_META};
use crate::errors::FieldError;
use crate::resource::{Resource, Target};
use crate::store::Opts;
use crate::ApiServer;

static LEASE_SPEC: Shape = Shape::Fields(&[
    ("holderIdentity", Shape::Any),
    ("leaseDurationSeconds", Shape::Any),
    ("acquireTime", Shape::Any),
    ("renewTime", Shape::Any),
    ("leaseTransitions", Shape::Any),
    ("strategy", Shape::Any),
    ("preferredHolder", Shape::Any),
]);

pub(crate) static LEASE: Shape = Shape::Fields(&[
    ("apiVersion", Shape::Any),
    ("kind", Shape::Any),
    ("metadata", Shape::Nested(&OBJECT_META)),
    ("spec", Shape::Nested(&LEASE_SPEC)),
]);

/// The layout of metav1.MicroTime (RFC3339Micro).
const MICRO_TIME_LAYOUT: &str = "2006-01-02T15:04:05.000000Z07:00";

/// The Go decoder's type errors for a Lease body.
pub(crate) fn check_types(obj: &Value) -> Result<(), String> {
    let unmarshal = |value: &Value, field: &str, want: &str| {
        let what = match value {
            Value::Number(n) => format!("number {n}"),
            other => go_type(other).to_string(),
        };
        Err(format!(
            "json: cannot unmarshal {what} into Go struct field {field} of type {want}"
        ))
    };
    let spec = match obj.get("spec") {
        None | Some(Value::Null) => return Ok(()),
        Some(spec @ Value::Object(_)) => spec,
        Some(other) => return unmarshal(other, "Lease.spec", "v1.LeaseSpec"),
    };
    for field in ["holderIdentity", "strategy", "preferredHolder"] {
        if let Some(value) = spec.get(field).filter(|v| !v.is_null() && !v.is_string()) {
            return unmarshal(value, &format!("LeaseSpec.spec.{field}"), "string");
        }
    }
    for field in ["leaseDurationSeconds", "leaseTransitions"] {
        let Some(value) = spec.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        let fits = value.as_i64().is_some_and(|n| i32::try_from(n).is_ok());
        if !fits {
            return unmarshal(value, &format!("LeaseSpec.spec.{field}"), "int32");
        }
    }
    for field in ["acquireTime", "renewTime"] {
        match spec.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => {
                parse_micro_time(text)?;
            }
            Some(other) => {
                return unmarshal(other, &format!("LeaseSpec.spec.{field}"), "string");
            }
        }
    }
    Ok(())
}

/// PrepareForCreate / PrepareForUpdate: MicroTimes in their served (UTC) form, fields of
/// disabled features dropped unless in use.
pub(crate) fn prepare(obj: &mut Value, old: Option<&Value>) {
    for field in ["strategy", "preferredHolder"] {
        let in_use = old
            .and_then(|o| o.pointer(&format!("/spec/{field}")))
            .is_some_and(|v| !v.is_null());
        if !in_use {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove(field);
            }
        }
    }
    for field in ["acquireTime", "renewTime"] {
        let normal = obj
            .pointer(&format!("/spec/{field}"))
            .and_then(Value::as_str)
            .and_then(|text| parse_micro_time(text).ok());
        if let Some(normal) = normal {
            obj["spec"][field] = json!(normal);
        }
    }
}

/// ValidateLeaseSpec (the metadata is the server's common validation).
pub(crate) fn validate(obj: &Value, errors: &mut Vec<FieldError>) {
    let spec = &obj["spec"];
    if let Some(duration) = spec["leaseDurationSeconds"].as_i64() {
        if duration <= 0 {
            errors.push(FieldError::invalid(
                "spec.leaseDurationSeconds",
                json!(duration),
                "must be greater than 0",
            ));
        }
    }
    if let Some(transitions) = spec["leaseTransitions"].as_i64() {
        if transitions < 0 {
            errors.push(FieldError::invalid(
                "spec.leaseTransitions",
                json!(transitions),
                "must be greater than or equal to 0",
            ));
        }
    }
    let strategy = spec["strategy"].as_str().unwrap_or("");
    if !strategy.is_empty() && strategy != "OldestEmulationVersion" {
        errors.push(FieldError::not_supported(
            "spec.strategy",
            json!(strategy),
            &["OldestEmulationVersion"],
        ));
    }
    if !spec["preferredHolder"].as_str().unwrap_or("").is_empty() && strategy.is_empty() {
        errors.push(FieldError::forbidden(
            "spec.preferredHolder",
            "may only be specified if `strategy` is defined",
        ));
    }
}

/// Parses a MicroTime as Go's `time.Parse(RFC3339Micro, text)` does and returns it in UTC
/// (`2006-01-02T15:04:05.000000Z`); `Err` is Go's message.
pub(crate) fn parse_micro_time(text: &str) -> Result<String, String> {
    let fail = |rest: &str, elem: &str| {
        format!("parsing time {text:?} as {MICRO_TIME_LAYOUT:?}: cannot parse {rest:?} as {elem:?}")
    };
    let out_of_range = |what: &str| Err(format!("parsing time {text:?}: {what} out of range"));
    let mut rest = text;
    let number = |rest: &mut &str, digits: usize, elem: &str| -> Result<i64, String> {
        let head = rest.get(..digits).unwrap_or("");
        if head.len() != digits || !head.bytes().all(|b| b.is_ascii_digit()) {
            return Err(fail(rest, elem));
        }
        *rest = &rest[digits..];
        head.parse::<i64>().map_err(|err| err.to_string())
    };
    let literal = |rest: &mut &str, lit: &str| -> Result<(), String> {
        match rest.strip_prefix(lit) {
            Some(tail) => {
                *rest = tail;
                Ok(())
            }
            None => Err(fail(rest, lit)),
        }
    };
    let year = number(&mut rest, 4, "2006")?;
    literal(&mut rest, "-")?;
    let month = number(&mut rest, 2, "01")?;
    literal(&mut rest, "-")?;
    let day = number(&mut rest, 2, "02")?;
    literal(&mut rest, "T")?;
    let hour = number(&mut rest, 2, "15")?;
    literal(&mut rest, ":")?;
    let minute = number(&mut rest, 2, "04")?;
    literal(&mut rest, ":")?;
    let second = number(&mut rest, 2, "05")?;
    let fraction = match rest.strip_prefix('.') {
        Some(tail) if tail.len() >= 6 && tail[..6].bytes().all(|b| b.is_ascii_digit()) => {
            rest = &tail[6..];
            tail[..6].to_string()
        }
        _ => return Err(fail(rest, ".000000")),
    };
    let offset_minutes = if let Some(tail) = rest.strip_prefix('Z') {
        rest = tail;
        0
    } else {
        let sign = match rest.as_bytes().first() {
            Some(b'+') => 1,
            Some(b'-') => -1,
            _ => return Err(fail(rest, "Z07:00")),
        };
        let zone = &rest[1..];
        let valid = zone.len() >= 5
            && zone.as_bytes()[2] == b':'
            && zone[..2].bytes().all(|b| b.is_ascii_digit())
            && zone[3..5].bytes().all(|b| b.is_ascii_digit());
        if !valid {
            return Err(fail(rest, "Z07:00"));
        }
        let hours: i64 = zone[..2].parse().unwrap_or(0);
        let minutes: i64 = zone[3..5].parse().unwrap_or(0);
        rest = &zone[5..];
        sign * (hours * 60 + minutes)
    };
    if !rest.is_empty() {
        return Err(format!("parsing time {text:?}: extra text: {rest:?}"));
    }
    if !(1..=12).contains(&month) {
        return out_of_range("month");
    }
    if day < 1 || day > days_in_month(year, month) {
        return out_of_range("day");
    }
    if hour > 23 {
        return out_of_range("hour");
    }
    if minute > 59 {
        return out_of_range("minute");
    }
    if second > 59 {
        return out_of_range("second");
    }
    let local = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    let utc = local - offset_minutes * 60;
    let (year, month, day) = civil_from_days(utc.div_euclid(86_400));
    let secs = utc.rem_euclid(86_400);
    Ok(format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{fraction}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    ))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's days_from_civil).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

impl ApiServer {
    /// The stored Lease, if any.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .get_served(&Target::object(Resource::Leases, Some(namespace), name))
    }

    /// Creates a Lease with this spec (through the server's checks; panics if refused).
    pub fn create_lease(&self, namespace: &str, name: &str, spec: Value) -> Value {
        let body = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        });
        let target = Target::collection(Resource::Leases, Some(namespace));
        self.helper(|state| state.create(&target, body, &Opts::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_times_parse_like_go() {
        assert_eq!(
            parse_micro_time("2024-02-29T23:30:00.123456-01:00").unwrap(),
            "2024-03-01T00:30:00.123456Z"
        );
        assert_eq!(
            parse_micro_time("2024-01-01T00:00:00Z").unwrap_err(),
            "parsing time \"2024-01-01T00:00:00Z\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"Z\" as \".000000\""
        );
        assert_eq!(
            parse_micro_time("2024-01-01 00:00:00.000000Z").unwrap_err(),
            "parsing time \"2024-01-01 00:00:00.000000Z\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \" 00:00:00.000000Z\" as \"T\""
        );
        assert!(parse_micro_time("2024-13-01T00:00:00.000000Z")
            .unwrap_err()
            .ends_with("month out of range"));
        assert!(parse_micro_time("2024-01-01T00:00:00.000000Zjunk")
            .unwrap_err()
            .ends_with("extra text: \"junk\""));
    }
}
