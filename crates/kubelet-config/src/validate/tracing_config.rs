//! `tracing` (component-base's `TracingConfiguration`), as
//! `ValidateTracingConfiguration` checks it: a sampling rate between 0 and
//! one million per million, and an OTLP gRPC endpoint Go's `url.Parse`
//! reads, with a scheme gRPC dials (`dns`, `unix`, `unix-abstract`; a bare
//! `host:port` is `dns`).

use serde_json::{Map, Value};

use super::go_url;
use super::raw::{self, child, Width};
use super::Checker;

const FIELD: &str = "tracing";
const MAX_SAMPLING_RATE_PER_MILLION: i64 = 1_000_000;
/// The endpoint schemes upstream accepts.
pub(super) const ENDPOINT_SCHEMES: &[&str] = &["dns", "unix", "unix-abstract"];

pub(super) fn validate_tracing(effective: &Map<String, Value>, c: &mut Checker) {
    let Some(tracing) = raw::object(effective.get(FIELD), FIELD, c) else {
        return;
    };
    if let Some(rate) = raw::integer(tracing, "samplingRatePerMillion", FIELD, Width::Int32, c) {
        if !(0..=MAX_SAMPLING_RATE_PER_MILLION).contains(&rate) {
            c.push(
                &child(FIELD, "samplingRatePerMillion"),
                format_args!(
                    "({rate}) must be between 0 and {MAX_SAMPLING_RATE_PER_MILLION}, inclusive"
                ),
            );
        }
    }
    if let Some(endpoint) = raw::string(tracing, "endpoint", FIELD, c) {
        if let Err(why) = check_endpoint(endpoint) {
            c.push(
                &child(FIELD, "endpoint"),
                format_args!("({endpoint:?}) is invalid: {why}"),
            );
        }
    }
}

fn check_endpoint(endpoint: &str) -> Result<(), String> {
    // Upstream reads an endpoint without "//" as a dns target.
    let url = if endpoint.contains("//") {
        endpoint.to_owned()
    } else {
        format!("dns://{endpoint}")
    };
    let scheme = go_url::parse_scheme(&url)?;
    if ENDPOINT_SCHEMES.contains(&scheme.as_str()) {
        Ok(())
    } else {
        Err(format!(
            "unsupported scheme {scheme:?}: use dns, unix or unix-abstract (or host:port)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        for good in [
            "localhost:4317",
            "otel-collector.monitoring.svc:4317",
            "dns:///collector:4317",
            "DNS://8.8.8.8/collector:4317",
            "unix:///run/otel.sock",
            "unix-abstract://otel",
            "10.0.0.1:4317",
            "[::1]:4317",
            "",
        ] {
            assert_eq!(check_endpoint(good), Ok(()), "{good}");
        }
        for bad in [
            "http://collector:4317",
            "https://collector:4317",
            "//collector:4317",
            "dn%2s://localhost:4317",
            "collector:43a7",
            "dns://host name:4317",
            "dns://[::1:4317",
            "collector\n:4317",
            "dns://host/%zz",
            "unix-abstract:otel",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }
}
