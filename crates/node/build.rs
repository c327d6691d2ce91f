//! Gives the build its git commit, for `--version` and the version field of
//! the holder record and claims: `KUBELET_PIVOT_GIT_COMMIT` from the
//! environment if set (scripts/build-baseline.sh, packagers building from a
//! tarball), else `git rev-parse HEAD` when this crate is the top of a git
//! checkout, else "unknown". Never fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;

const ENV: &str = "KUBELET_PIVOT_GIT_COMMIT";
const UNKNOWN: &str = "unknown";

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The commit of the checkout whose top is `dir`, with the files whose
/// change means another commit (HEAD, the branch's ref, packed refs).
fn from_git(dir: &Path) -> Option<(String, Vec<PathBuf>)> {
    // Only our own checkout: a source tree exported into another
    // repository's work tree must not take that repository's commit.
    let top = PathBuf::from(git(dir, &["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    let commit = git(dir, &["rev-parse", "HEAD"])?;
    let mut watch = Vec::new();
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(dir, &["rev-parse", "--git-path", path]) {
            watch.push(dir.join(p));
        }
    }
    if let Some(reference) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(dir, &["rev-parse", "--git-path", &reference]) {
            watch.push(dir.join(p));
        }
    }
    Some((commit, watch))
}

fn main() {
    println!("cargo:rerun-if-env-changed={ENV}");
    println!("cargo:rerun-if-changed=build.rs");
    let commit = match std::env::var(ENV) {
        Ok(value) if !value.trim().is_empty() => value.trim().to_string(),
        _ => {
            let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
            match from_git(&dir) {
                Some((commit, watch)) => {
                    for path in watch.iter().filter(|p| p.exists()) {
                        println!("cargo:rerun-if-changed={}", path.display());
                    }
                    commit
                }
                None => UNKNOWN.to_string(),
            }
        }
    };
    println!("cargo:rustc-env={ENV}={commit}");
}
