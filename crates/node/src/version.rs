//! What this build is: its release version (Cargo.toml), git commit (from
//! build.rs) and the version of the on-disk protocol it reads and writes
//! (ARCHITECTURE.md, "Compatibility contract"). `--version` prints all
//! three; the holder record and each claim carry them ([`BuildInfo`]), so
//! `status` shows version skew on a node.

use serde::{Deserialize, Serialize};

/// Expands to the protocol version as a literal, so that it can be both a
/// constant and part of the `--version` text built at compile time.
macro_rules! protocol_version {
    () => {
        4
    };
}

/// The version of the on-disk protocol (lock, state directory, holder
/// record, claims, checkpoint store, node annotations, `status -o json`):
/// raised on every change of one of those formats, additive ones included,
/// so that two builds with the same number read and write the same bytes.
/// History in ARCHITECTURE.md ("Protocol versions").
pub const PROTOCOL_VERSION: u32 = protocol_version!();

/// The release version (Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit this build was made from, "unknown" when build.rs could
/// not tell (no git, not a checkout, and no `KUBELET_PIVOT_GIT_COMMIT`).
pub const GIT_COMMIT: &str = env!("KUBELET_PIVOT_GIT_COMMIT");

/// The text after the program name in `--version`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KUBELET_PIVOT_GIT_COMMIT"),
    ", protocol ",
    protocol_version!(),
    ")"
);

/// The first release that records its version in the holder record and in
/// claims: a record without one was written by an older build.
pub const FIRST_RECORDED: &str = "0.5.0";

/// A build's identity as recorded in the holder record and the claims.
/// Every field is optional to readers: a later build may add fields (they
/// are ignored) and an earlier one wrote none (the whole object is absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildInfo {
    /// The release version, e.g. "0.5.0".
    pub version: String,
    /// The git commit, or "unknown".
    #[serde(default)]
    pub commit: String,
    /// [`PROTOCOL_VERSION`] of the writer.
    #[serde(default)]
    pub protocol: u32,
}

impl BuildInfo {
    /// This build.
    pub fn current() -> BuildInfo {
        BuildInfo {
            version: VERSION.to_string(),
            commit: GIT_COMMIT.to_string(),
            protocol: PROTOCOL_VERSION,
        }
    }

    /// The commit shortened to 12 hex digits, as git prints it.
    pub fn short_commit(&self) -> &str {
        self.commit.get(..12).unwrap_or(&self.commit)
    }
}

impl std::fmt::Display for BuildInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (commit {}, protocol {})",
            self.version,
            self.short_commit(),
            self.protocol
        )
    }
}

/// How `status` names the build of a record: its version, or that it was
/// written by a build older than [`FIRST_RECORDED`].
pub fn describe(build: Option<&BuildInfo>) -> String {
    match build {
        Some(b) => b.to_string(),
        None => format!("unknown (older than {FIRST_RECORDED})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_version_names_version_commit_and_protocol() {
        assert!(LONG_VERSION.starts_with(VERSION), "{LONG_VERSION}");
        assert!(LONG_VERSION.contains(GIT_COMMIT), "{LONG_VERSION}");
        assert!(
            LONG_VERSION.ends_with(&format!(", protocol {PROTOCOL_VERSION})")),
            "{LONG_VERSION}"
        );
    }

    #[test]
    fn a_later_builds_record_with_more_fields_is_read() {
        let later: BuildInfo = serde_json::from_str(
            r#"{"version":"0.7.0","commit":"abc","protocol":6,"features":["x"]}"#,
        )
        .unwrap();
        assert_eq!(later.version, "0.7.0");
        assert_eq!(later.protocol, 6);
        let bare: BuildInfo = serde_json::from_str(r#"{"version":"0.6.0"}"#).unwrap();
        assert_eq!((bare.commit.as_str(), bare.protocol), ("", 0));
    }

    #[test]
    fn status_texts() {
        let b = BuildInfo {
            version: "0.5.0".into(),
            commit: "0123456789abcdef0123".into(),
            protocol: 4,
        };
        assert_eq!(
            describe(Some(&b)),
            "0.5.0 (commit 0123456789ab, protocol 4)"
        );
        assert_eq!(describe(None), "unknown (older than 0.5.0)");
    }
}
