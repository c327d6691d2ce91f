//! `logging` (component-base's `LoggingConfiguration`), as `logsapi.Validate`
//! checks it after v1beta1 defaulting (an empty format is "text"): a known
//! format, verbosities klog accepts, `vmodule` only with the text format and
//! with usable file patterns, and values the kubelet's decoder reads.
//!
//! Rules that follow feature gates (the json format needs LoggingBetaOptions,
//! the split-stream options LoggingAlphaOptions) are not refused here:
//! [`gated_logging_settings`] lists what they apply to.

use serde_json::{Map, Value};

use super::super::duration::GoDuration;
use super::raw::{self, child, Width};
use super::Checker;

const FIELD: &str = "logging";
/// Log formats the kubelet registers (`text` always; `json` behind
/// LoggingBetaOptions).
pub(super) const LOG_FORMATS: &[&str] = &["text", "json"];
const DEFAULT_FORMAT: &str = "text";
/// klog takes a positive int32 verbosity, the field is a uint32.
const MAX_VERBOSITY: i64 = i32::MAX as i64;

pub(super) fn validate_logging(effective: &Map<String, Value>, c: &mut Checker) {
    let Some(logging) = raw::object(effective.get(FIELD), FIELD, c) else {
        return;
    };
    let format = match raw::string(logging, "format", FIELD, c) {
        None | Some("") => DEFAULT_FORMAT,
        Some(format) => format,
    };
    if !LOG_FORMATS.contains(&format) {
        c.push(
            &child(FIELD, "format"),
            format_args!("({format:?}) is not a supported log format: use \"text\" or \"json\""),
        );
    }
    check_flush_frequency(logging, c);
    check_verbosity(logging, "verbosity", FIELD, c);
    let vmodule_path = child(FIELD, "vmodule");
    if let Some(items) = raw::list(logging.get("vmodule"), &vmodule_path, c) {
        if !items.is_empty() && format != DEFAULT_FORMAT {
            c.push(
                &vmodule_path,
                format_args!("is only supported for the text log format, not {format:?}"),
            );
        }
        for (index, item) in items.iter().enumerate() {
            let path = format!("{vmodule_path}[{index}]");
            let empty = Map::new();
            let Some(entry) = raw::item(item, &path, &empty, c) else {
                continue;
            };
            let pattern = raw::string(entry, "filePattern", &path, c).unwrap_or("");
            let pattern_path = child(&path, "filePattern");
            if pattern.is_empty() {
                c.push(&pattern_path, "must not be empty");
            } else if pattern.contains(['=', ',']) {
                c.push(
                    &pattern_path,
                    format_args!("({pattern:?}) must not contain an equal sign or a comma"),
                );
            }
            check_verbosity(entry, "verbosity", &path, c);
        }
    }
    check_format_options(logging, c);
}

fn check_verbosity(map: &Map<String, Value>, key: &str, prefix: &str, c: &mut Checker) {
    if let Some(level) = raw::integer(map, key, prefix, Width::Uint32, c) {
        if level > MAX_VERBOSITY {
            c.push(
                &child(prefix, key),
                format_args!("({level}) must be <= {MAX_VERBOSITY}"),
            );
        }
    }
}

/// `flushFrequency` is a duration string or a number of nanoseconds.
fn check_flush_frequency(logging: &Map<String, Value>, c: &mut Checker) {
    let path = child(FIELD, "flushFrequency");
    match logging.get("flushFrequency") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => {
            if let Err(e) = GoDuration::parse(text) {
                c.push(&path, format_args!("({text:?}) is not a duration: {e}"));
            }
        }
        Some(Value::Number(n)) if n.as_i64().is_some() => {}
        Some(other) => c.push(
            &path,
            format_args!(
                "must be a duration string such as \"5s\" or a whole number of nanoseconds, \
                 found {}",
                super::super::fields::describe(other)
            ),
        ),
    }
}

/// `options.text` and `options.json`: decodable values (their use follows
/// LoggingAlphaOptions, see [`gated_logging_settings`]).
fn check_format_options(logging: &Map<String, Value>, c: &mut Checker) {
    let options_path = child(FIELD, "options");
    let Some(options) = raw::object(logging.get("options"), &options_path, c) else {
        return;
    };
    for format in LOG_FORMATS {
        let path = child(&options_path, format);
        let Some(routing) = raw::object(options.get(*format), &path, c) else {
            continue;
        };
        raw::boolean(routing, "splitStream", &path, c);
        if let Some(size) = routing.get("infoBufferSize") {
            if let Err(why) = raw::quantity(size) {
                c.push(
                    &child(&path, "infoBufferSize"),
                    format_args!("is invalid: {why}"),
                );
            }
        }
    }
}

/// A logging setting that needs a feature gate on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GatedSetting {
    /// The feature gate that must be on.
    pub(crate) gate: &'static str,
    /// Path of the setting, e.g. `logging.options.json.splitStream`.
    pub(crate) path: String,
    /// Its value, as the refusal quotes it.
    pub(crate) value: Value,
}

/// The logging settings of `effective` that upstream refuses unless a gate
/// is on: format `json` (LoggingBetaOptions), and `splitStream: true` or an
/// `infoBufferSize` that is not zero (unparsable counts as set; the
/// section's own rule refuses it too) under `options.text` /
/// `options.json` (LoggingAlphaOptions). The feature-gate rules check them
/// against the gates in force.
pub(crate) fn gated_logging_settings(effective: &Map<String, Value>) -> Vec<GatedSetting> {
    let mut out = Vec::new();
    let Some(logging) = effective.get(FIELD).and_then(Value::as_object) else {
        return out;
    };
    if let Some(format) = logging.get("format").filter(|f| f.as_str() == Some("json")) {
        out.push(GatedSetting {
            gate: "LoggingBetaOptions",
            path: child(FIELD, "format"),
            value: format.clone(),
        });
    }
    let options = logging.get("options").and_then(Value::as_object);
    for format in LOG_FORMATS {
        let Some(routing) = options
            .and_then(|o| o.get(*format))
            .and_then(Value::as_object)
        else {
            continue;
        };
        let path = child(&child(FIELD, "options"), format);
        if routing.get("splitStream").and_then(Value::as_bool) == Some(true) {
            out.push(GatedSetting {
                gate: "LoggingAlphaOptions",
                path: child(&path, "splitStream"),
                value: Value::Bool(true),
            });
        }
        let buffer = routing
            .get("infoBufferSize")
            .filter(|v| !raw::quantity(v).is_ok_and(|q| q.is_zero()));
        if let Some(size) = buffer {
            out.push(GatedSetting {
                gate: "LoggingAlphaOptions",
                path: child(&path, "infoBufferSize"),
                value: size.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gated_settings_are_listed() {
        let effective: Map<String, Value> = serde_json::from_str(
            r#"{"logging": {"format": "json", "options": {
                "json": {"splitStream": true, "infoBufferSize": "64Ki"},
                "text": {"splitStream": false, "infoBufferSize": "0"}}}}"#,
        )
        .expect("fixture is JSON");
        let paths: Vec<(&str, String)> = gated_logging_settings(&effective)
            .into_iter()
            .map(|s| (s.gate, s.path))
            .collect();
        assert_eq!(
            paths,
            vec![
                ("LoggingBetaOptions", "logging.format".to_owned()),
                (
                    "LoggingAlphaOptions",
                    "logging.options.json.splitStream".to_owned()
                ),
                (
                    "LoggingAlphaOptions",
                    "logging.options.json.infoBufferSize".to_owned()
                ),
            ]
        );
        assert!(gated_logging_settings(&Map::new()).is_empty());
    }
}
