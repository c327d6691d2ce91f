//! Running commands in the tests that drive shipped files (install.sh, manifests):
//! captured output, a readable dump of it, and the flags the binary declares.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};

pub use super::pivot_bin;

/// Runs `cmd` to completion with stdin null and stdout and stderr captured.
pub fn run(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|err| panic!("failed to run {:?}: {err}", cmd.get_program()))
}

/// Exit code, stdout and stderr of `output`, for assertion messages.
pub fn text(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Flags of `kubelet-pivot <sub> --help`: env variable -> (flag, default).
pub fn help_env(sub: &str) -> BTreeMap<String, (String, Option<String>)> {
    let mut cmd = Command::new(pivot_bin());
    cmd.args([sub, "--help"]).env_clear();
    let output = run(cmd);
    assert!(output.status.success(), "{sub} --help: {}", text(&output));
    let help = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut out = BTreeMap::new();
    let mut flag = String::new();
    let mut env: Option<String> = None;
    let mut default: Option<String> = None;
    let mut flush = |flag: &str, env: &mut Option<String>, default: &mut Option<String>| {
        if let Some(name) = env.take() {
            out.insert(name, (flag.to_owned(), default.take()));
        }
        *default = None;
    };
    for line in help.lines() {
        let trimmed = line.trim();
        if let Some(long) = trimmed
            .split_whitespace()
            .find(|word| word.starts_with("--"))
            .filter(|_| trimmed.starts_with('-'))
        {
            flush(&flag, &mut env, &mut default);
            flag = long.trim_end_matches(',').to_owned();
        }
        if let Some(rest) = trimmed.strip_prefix("[env: ") {
            env = Some(rest.split('=').next().unwrap_or_default().to_owned());
        }
        if let Some(rest) = trimmed.strip_prefix("[default: ") {
            default = Some(rest.trim_end_matches(']').to_owned());
        }
    }
    flush(&flag, &mut env, &mut default);
    assert!(
        out.contains_key("KUBELET_PIVOT_LOCK_FILE")
            && out.contains_key("KUBELET_PIVOT_STOP_TIMEOUT"),
        "could not read the env variables from {sub} --help:\n{help}"
    );
    out
}

/// Seconds of a duration as kubelet-pivot's own parser (humantime) reads it: `30s`, `1m30s`,
/// `1min 30s`, `500ms`; None if it is not one (a bare number has no unit and is not).
pub fn duration_secs(span: &str) -> Option<f64> {
    humantime::parse_duration(span.trim())
        .ok()
        .map(|d| d.as_secs_f64())
}
