//! What an operator can observe of the lock: `kubelet-pivot status -o json`, the holder record
//! `<state>/holder.json`, the claims in `<state>/claims/` and the flocks in /proc/locks. `<state>`
//! is the state directory, by default `<dynamic-config-dir>/lock` ([`Scene::state_dir`]).
//!
//! /proc/locks is parsed here, not with the product's `kp_node::procfs`, so that a bug in
//! the product's parser cannot hide a failure.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::{node_paths, pivot_bin, Scene};

/// How long [`status_by`] waits for a supervisor to create the node's lock file.
const LOCK_FILE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `kubelet-pivot status -o json` on the scene's node; returns its exit code and parsed
/// output.
pub fn status(scene: &Scene) -> (i32, Value) {
    status_by(&pivot_bin(), scene)
}

/// [`status`] run by another kubelet-pivot binary (an earlier build: tests/it/skew.rs).
/// Waits for the node's lock file first: `status` refuses one that does not exist (exit 2),
/// and a supervisor just spawned may not have created it yet.
pub fn status_by(bin: &Path, scene: &Scene) -> (i32, Value) {
    super::wait_until(
        LOCK_FILE_DEADLINE,
        "the node's lock file (status refuses a missing one)",
        || scene.lock().exists().then_some(()),
    );
    let mut cmd = Command::new(bin);
    cmd.args(["status", "-o", "json"]);
    let out = node_paths(&mut cmd, &scene.lock(), &scene.config_dir())
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("failed to run kubelet-pivot status: {err}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(&stdout).unwrap_or_else(|err| {
        panic!(
            "status -o json printed no JSON ({err}): {stdout:?}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let code = out
        .status
        .code()
        .unwrap_or_else(|| panic!("status killed by a signal: {:?}", out.status));
    (code, json)
}

/// The parsed output of `kubelet-pivot status -o json`, whatever its exit code.
pub fn status_json(scene: &Scene) -> Value {
    status(scene).1
}

/// Path of the holder record in the state directory `state`: `<state>/holder.json`.
pub fn holder_path(state: &Path) -> PathBuf {
    state.join("holder.json")
}

/// Reads the holder record: `Ok(None)` when there is none, `Err` when it cannot be read or is
/// not JSON.
fn read_holder_record(state: &Path) -> Result<Option<Value>, String> {
    let path = holder_path(state);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(format!("failed to read holder record {path:?}: {err}")),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|err| format!("holder record {path:?} is not JSON ({err}): {text}"))
}

/// The holder record in `state` as JSON; `None` when there is none or it cannot be read or
/// parsed (for pollers, which look again).
pub fn holder_record(state: &Path) -> Option<Value> {
    read_holder_record(state).ok().flatten()
}

/// The holder record in `state` as JSON, `None` when there is none; panics when it cannot be
/// read or is not JSON.
pub fn checked_holder_record(state: &Path) -> Option<Value> {
    read_holder_record(state).unwrap_or_else(|err| panic!("{err}"))
}

/// The claims directory in the state directory `state`: `<state>/claims`.
pub fn claims_dir(state: &Path) -> PathBuf {
    state.join("claims")
}

/// Pids that have a claim file `<pid>-<start time>.json` (live or not).
pub fn claim_pids(state: &Path) -> Vec<i32> {
    fs::read_dir(claims_dir(state))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| {
                    let name = entry.file_name();
                    let name = name.to_str()?.strip_suffix(".json")?.to_owned();
                    name.split_once('-')?.0.parse().ok()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The flocks in /proc/locks on the file now at `path`: `(blocked, pid)`.
pub fn flocks_on(path: &Path) -> Vec<(bool, i32)> {
    let Ok(meta) = fs::metadata(path) else {
        return Vec::new();
    };
    let (major, minor) = (
        nix::sys::stat::major(meta.dev()),
        nix::sys::stat::minor(meta.dev()),
    );
    let locks = fs::read_to_string("/proc/locks")
        .unwrap_or_else(|err| panic!("failed to read /proc/locks: {err}"));
    locks
        .lines()
        .filter_map(|line| {
            // `N: [->] FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`
            let mut words = line.split_whitespace().skip(1).peekable();
            let blocked = words.next_if_eq(&"->").is_some();
            if words.next()? != "FLOCK" {
                return None;
            }
            let pid = words.nth(2)?.parse::<i32>().ok()?;
            let mut dev_ino = words.next()?.split(':');
            let same = u64::from_str_radix(dev_ino.next()?, 16).ok()? == major
                && u64::from_str_radix(dev_ino.next()?, 16).ok()? == minor
                && dev_ino.next()?.parse::<u64>().ok()? == meta.ino();
            same.then_some((blocked, pid))
        })
        .collect()
}

/// Pids blocked in flock on the file now at `path` (the `N: -> FLOCK ...` lines).
pub fn blocked_on(path: &Path) -> Vec<i32> {
    flocks_on(path)
        .into_iter()
        .filter_map(|(blocked, pid)| blocked.then_some(pid))
        .collect()
}
