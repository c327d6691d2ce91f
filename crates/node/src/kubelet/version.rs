//! Which kubelet kubelet-pivot validates configs for: the version of the
//! kubelet binary it runs (`KUBELET --version`, run with a timeout, cached
//! by the binary's identity in the state directory), or `--kubelet-version`;
//! and the host facts the kubelet checks at start ([`host`](super::host)).
//!
//! Blocking: called before the async runtime starts (or from a blocking
//! thread), never in an async task. An unknown, unparsable or undetectable
//! version is a warning and the nearest modelled gate set, never a refusal:
//! a stand-in kubelet that does not answer `--version` keeps working. A
//! binary that did not answer is cached as such too, so that only its first
//! start waits for the timeout.
//!
//! `--version` runs with an empty environment but `PATH`: a binary that
//! takes `--version` for something else (a stand-in that ignores unknown
//! flags and starts) then sees none of the settings meant for the kubelet
//! child, and stdin, stderr are closed.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kp_kubelet_config::gates::{GateModel, KubeletVersion};
use serde::{Deserialize, Serialize};

use crate::safefs::fsutil::{self, Owner, ReadPolicy};

/// How long `KUBELET --version` may take.
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(5);
/// The cache's file name in the state directory.
pub const CACHE_FILE: &str = "kubelet-version.json";
/// Largest cache file read.
const MAX_CACHE: u64 = 4096;
/// Largest `--version` answer read.
const MAX_ANSWER: u64 = 4096;
/// How often a running `--version` is looked at.
const POLL: Duration = Duration::from_millis(10);

/// A binary's identity: a changed binary (an upgrade, even in place) has
/// another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BinaryIdentity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
}

impl BinaryIdentity {
    /// The identity of the file `path` names (following a symlink: it is
    /// the file that is executed).
    pub fn of(path: &Path) -> std::io::Result<BinaryIdentity> {
        let meta = std::fs::metadata(path)?;
        Ok(BinaryIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        })
    }
}

/// The cache file: the version a binary answered, or why it answered none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CacheRecord {
    binary: BinaryIdentity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure: Option<String>,
}

/// Longest failure kept in the cache (it is shown in a warning).
const MAX_FAILURE: usize = 300;

/// What the cache says about a binary.
enum Cached {
    Version(KubeletVersion),
    Failed(String),
}

/// Where the version came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSource {
    /// `--kubelet-version`.
    Flag,
    /// The cache, for this binary's identity.
    Cache,
    /// `KUBELET --version`, just now.
    Binary,
    /// Not known: the nearest model (the newest) with a warning.
    Unknown,
}

/// The kubelet version a supervisor validates for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub version: Option<KubeletVersion>,
    pub source: VersionSource,
    /// Why the model is not the binary's own minor, for a warning.
    pub warnings: Vec<String>,
}

impl Detected {
    /// The gate model for this version: the version's own minor when
    /// modelled, otherwise the nearest (with a warning added).
    pub fn model(&self) -> (GateModel, Vec<String>) {
        let mut warnings = self.warnings.clone();
        let model = match self.version {
            Some(version) => {
                let (model, warning) = GateModel::for_version(version);
                warnings.extend(warning);
                model
            }
            None => {
                let model = GateModel::newest();
                warnings.push(format!(
                    "the kubelet's version is unknown; validating against the newest \
                     feature-gate model (1.{}); pass --kubelet-version to say which",
                    model.minor()
                ));
                model
            }
        };
        (model, warnings)
    }
}

/// Reads `--kubelet-version` (`v1.35.2`, `1.35`).
pub fn parse_flag(text: &str) -> Result<KubeletVersion, String> {
    KubeletVersion::parse(text).ok_or_else(|| {
        format!("--kubelet-version {text:?} is not a Kubernetes version such as v1.35.2")
    })
}

/// The version to validate for: `flag` when given; otherwise the cached
/// answer for the binary's identity; otherwise `KUBELET --version` (then
/// cached, when `state_dir` is given). Never fails: what cannot be told is
/// a warning.
pub fn detect(
    flag: Option<KubeletVersion>,
    kubelet: &Path,
    state_dir: Option<&Path>,
    timeout: Duration,
) -> Detected {
    if let Some(version) = flag {
        return Detected {
            version: Some(version),
            source: VersionSource::Flag,
            warnings: Vec::new(),
        };
    }
    let mut warnings = Vec::new();
    let identity = match BinaryIdentity::of(kubelet) {
        Ok(identity) => Some(identity),
        Err(err) => {
            warnings.push(format!(
                "cannot look at the kubelet binary {}: {err}",
                kubelet.display()
            ));
            None
        }
    };
    let cache = state_dir.map(|dir| dir.join(CACHE_FILE));
    if let (Some(identity), Some(cache)) = (identity, &cache) {
        match read_cache(cache, identity) {
            Ok(Some(Cached::Version(version))) => {
                return Detected {
                    version: Some(version),
                    source: VersionSource::Cache,
                    warnings,
                }
            }
            Ok(Some(Cached::Failed(why))) => {
                warnings.push(format!(
                    "{why} (cached for this binary in {}; asked again once the binary changes)",
                    cache.display()
                ));
                return Detected {
                    version: None,
                    source: VersionSource::Unknown,
                    warnings,
                };
            }
            Ok(None) => {}
            Err(err) => warnings.push(format!("ignoring the kubelet version cache: {err}")),
        }
    }
    let answer = run_version(kubelet, timeout);
    if let (Some(identity), Some(cache)) = (identity, &cache) {
        if let Err(err) = write_cache(cache, identity, &answer) {
            warnings.push(format!("cannot cache the kubelet version: {err}"));
        }
    }
    match answer {
        Ok(version) => Detected {
            version: Some(version),
            source: VersionSource::Binary,
            warnings,
        },
        Err(err) => {
            warnings.push(err);
            Detected {
                version: None,
                source: VersionSource::Unknown,
                warnings,
            }
        }
    }
}

/// The cached version, if the cache is for this binary; the cache is
/// hostile input: a regular file of ours, not a symlink, bounded.
fn read_cache(path: &Path, identity: BinaryIdentity) -> Result<Option<Cached>, String> {
    let policy = ReadPolicy {
        what: "kubelet version cache",
        max_len: MAX_CACHE,
        owner: Owner::me(),
        private: true,
    };
    let Some(bytes) = fsutil::read_bounded(path, &policy).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let record: CacheRecord = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: not a kubelet version cache: {e}", path.display()))?;
    if record.binary != identity {
        return Ok(None);
    }
    match (record.version, record.failure) {
        (Some(version), None) => KubeletVersion::parse(&version)
            .map(|v| Some(Cached::Version(v)))
            .ok_or_else(|| format!("{}: {version:?} is not a version", path.display())),
        (None, Some(failure)) => Ok(Some(Cached::Failed(
            kp_contract::text::printable(kp_contract::text::prefix(&failure, MAX_FAILURE))
                .into_owned(),
        ))),
        _ => Err(format!("{}: needs a version or a failure", path.display())),
    }
}

fn write_cache(
    path: &Path,
    binary: BinaryIdentity,
    answer: &Result<KubeletVersion, String>,
) -> Result<(), String> {
    let record = match answer {
        Ok(version) => CacheRecord {
            binary,
            version: Some(version.to_string()),
            failure: None,
        },
        Err(why) => CacheRecord {
            binary,
            version: None,
            failure: Some(kp_contract::text::prefix(why, MAX_FAILURE).to_owned()),
        },
    };
    let data = serde_json::to_vec(&record).map_err(|e| e.to_string())?;
    fsutil::write_atomic(path, &data, 0o600).map_err(|e| e.to_string())
}

/// Runs `kubelet --version` (stdin and stderr closed, at most
/// [`MAX_ANSWER`] bytes of its answer read) and parses the answer; killed
/// after `timeout`.
pub fn run_version(kubelet: &Path, timeout: Duration) -> Result<KubeletVersion, String> {
    let shown = kubelet.display();
    let mut command = Command::new(kubelet);
    command.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    let mut child = command
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {shown} --version: {e}"))?;
    let Some(stdout) = child.stdout.take() else {
        return Err(format!("{shown} --version: no output pipe"));
    };
    let reader = std::thread::spawn(move || {
        let mut answer = Vec::new();
        stdout
            .take(MAX_ANSWER)
            .read_to_end(&mut answer)
            .map(|_| answer)
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                // Killed and reaped; the reader then sees the pipe close
                // (unless a grandchild keeps it open: it is left behind).
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{shown} --version did not answer within {}s",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => return Err(format!("cannot wait for {shown} --version: {e}")),
        }
    };
    let answer = reader
        .join()
        .map_err(|_| format!("{shown} --version: the reader failed"))?
        .map_err(|e| format!("cannot read {shown} --version: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    let first = kp_contract::text::printable(kp_contract::text::prefix(text.trim(), 120));
    if !status.success() {
        return Err(format!("{shown} --version failed ({status}): {first:?}"));
    }
    KubeletVersion::parse(&text)
        .ok_or_else(|| format!("{shown} --version answered {first:?}, not a version"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    use super::*;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn v(minor: u32, patch: u32) -> KubeletVersion {
        KubeletVersion {
            major: 1,
            minor,
            patch,
        }
    }

    const SHORT: Duration = Duration::from_secs(5);

    #[test]
    fn the_binary_is_asked_and_the_answer_cached() {
        let d = tempfile::tempdir().unwrap();
        let kubelet = script(d.path(), "kubelet", "echo 'Kubernetes v1.35.2'");
        let got = detect(None, &kubelet, Some(d.path()), SHORT);
        assert_eq!(
            (got.version, got.source),
            (Some(v(35, 2)), VersionSource::Binary)
        );
        assert!(got.warnings.is_empty(), "{:?}", got.warnings);
        let again = detect(None, &kubelet, Some(d.path()), SHORT);
        assert_eq!(
            (again.version, again.source),
            (Some(v(35, 2)), VersionSource::Cache)
        );
        let mode = std::fs::metadata(d.path().join(CACHE_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_planted_cache_for_this_binary_is_used_and_a_changed_binary_asked_again() {
        let d = tempfile::tempdir().unwrap();
        let kubelet = script(d.path(), "kubelet", "echo 'Kubernetes v1.34.1'");
        let identity = BinaryIdentity::of(&kubelet).unwrap();
        write_cache(&d.path().join(CACHE_FILE), identity, &Ok(v(36, 0))).unwrap();
        let got = detect(None, &kubelet, Some(d.path()), SHORT);
        assert_eq!(
            (got.version, got.source),
            (Some(v(36, 0)), VersionSource::Cache)
        );
        // An upgrade in place: another size and mtime.
        script(d.path(), "kubelet", "echo 'Kubernetes v1.34.1'  # upgraded");
        let got = detect(None, &kubelet, Some(d.path()), SHORT);
        assert_eq!(
            (got.version, got.source),
            (Some(v(34, 1)), VersionSource::Binary)
        );
    }

    #[test]
    fn a_hostile_cache_is_ignored_with_a_warning() {
        let d = tempfile::tempdir().unwrap();
        let kubelet = script(d.path(), "kubelet", "echo v1.34.0");
        let cache = d.path().join(CACHE_FILE);
        // A symlink is not followed.
        let target = d.path().join("elsewhere");
        write_cache(
            &target,
            BinaryIdentity::of(&kubelet).unwrap(),
            &Ok(v(36, 0)),
        )
        .unwrap();
        std::os::unix::fs::symlink(&target, &cache).unwrap();
        let got = detect(None, &kubelet, Some(d.path()), SHORT);
        assert_eq!(got.version, Some(v(34, 0)));
        assert!(
            got.warnings.iter().any(|w| w.contains("symlink")),
            "{:?}",
            got.warnings
        );
        // Garbage, and a file too large.
        for bytes in [b"{not json".to_vec(), vec![b' '; 8192]] {
            std::fs::remove_file(&cache).unwrap();
            std::fs::write(&cache, &bytes).unwrap();
            std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o600)).unwrap();
            let got = detect(None, &kubelet, Some(d.path()), SHORT);
            assert_eq!(got.version, Some(v(34, 0)));
            assert!(got
                .warnings
                .iter()
                .any(|w| w.contains("ignoring the kubelet version cache")));
        }
    }

    #[test]
    fn the_kubelet_gets_an_empty_environment_but_path() {
        let d = tempfile::tempdir().unwrap();
        let kubelet = script(
            d.path(),
            "kubelet",
            "test -z \"$HOME$STANDIN_LOG\" && test -n \"$PATH\" && echo v1.34.2",
        );
        assert_eq!(run_version(&kubelet, SHORT), Ok(v(34, 2)));
    }

    #[test]
    fn the_flag_wins_and_is_parsed() {
        let d = tempfile::tempdir().unwrap();
        let kubelet = script(d.path(), "kubelet", "exit 3");
        let got = detect(
            Some(parse_flag("v1.33.4").unwrap()),
            &kubelet,
            Some(d.path()),
            SHORT,
        );
        assert_eq!(
            (got.version, got.source),
            (Some(v(33, 4)), VersionSource::Flag)
        );
        assert!(parse_flag("latest")
            .unwrap_err()
            .contains("not a Kubernetes version"));
    }

    #[test]
    fn a_kubelet_that_cannot_tell_gives_the_newest_model_and_a_warning() {
        let d = tempfile::tempdir().unwrap();
        for (name, body, needle) in [
            (
                "fails",
                "echo 'unknown flag: --version' >&2; exit 2",
                "failed",
            ),
            ("garbage", "echo 'stand-in kubelet'", "not a version"),
            ("hangs", "exec sleep 30", "did not answer within"),
        ] {
            let kubelet = script(d.path(), name, body);
            let timeout = Duration::from_millis(300);
            let got = detect(None, &kubelet, None, timeout);
            assert_eq!(
                (got.version, got.source),
                (None, VersionSource::Unknown),
                "{name}"
            );
            assert!(
                got.warnings.iter().any(|w| w.contains(needle)),
                "{name}: {:?}",
                got.warnings
            );
            let (model, warnings) = got.model();
            assert_eq!(model.minor(), GateModel::newest().minor());
            assert!(warnings
                .iter()
                .any(|w| w.contains("pass --kubelet-version")));
        }
        // A failure is cached for the binary: asked once.
        let marker = d.path().join("asked");
        let kubelet = script(
            d.path(),
            "once",
            &format!("echo asked >> {}; exit 2", marker.display()),
        );
        for _ in 0..2 {
            let got = detect(None, &kubelet, Some(d.path()), SHORT);
            assert_eq!(got.version, None);
            assert!(
                got.warnings.iter().any(|w| w.contains("failed")),
                "{:?}",
                got.warnings
            );
        }
        let got = detect(None, &kubelet, Some(d.path()), SHORT);
        assert!(got
            .warnings
            .iter()
            .any(|w| w.contains("cached for this binary")));
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "asked\n");
        let got = detect(
            None,
            Path::new("/nonexistent/kubelet"),
            Some(d.path()),
            SHORT,
        );
        assert_eq!(got.version, None);
        assert!(got
            .warnings
            .iter()
            .any(|w| w.contains("cannot look at the kubelet binary")));
    }

    #[test]
    fn an_unmodelled_version_uses_the_nearest_model_with_a_warning() {
        let detected = |version| Detected {
            version: Some(version),
            source: VersionSource::Flag,
            warnings: Vec::new(),
        };
        let (model, warnings) = detected(v(35, 0)).model();
        assert_eq!((model.minor(), warnings.len()), (35, 0));
        let (model, warnings) = detected(v(38, 0)).model();
        assert_eq!(model.minor(), 36);
        assert!(warnings[0].contains("newer than"), "{warnings:?}");
        let (model, _) = detected(v(29, 0)).model();
        assert_eq!(model.minor(), 33);
    }
}
