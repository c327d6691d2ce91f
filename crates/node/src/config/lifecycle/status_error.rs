//! What the cluster hears when a config is refused or rolled back: the
//! stable prefix of the v1.11 Dynamic Kubelet Configuration text
//! (`failed to validate config`), then the reason in the validator's, the
//! loader's or the crash detector's own words, escaped and bounded
//! ([`Detail`]). The condition, the Event, `config-status` and `status` all
//! show this one text.

use std::fmt;

use crate::config::config_dir::DropInProblem;
use kp_contract::node_config::Failure;
use kp_kubelet_config::ConfigError;

/// Prefixes of the reasons recorded in bad-configs (older builds wrote the
/// same).
pub(super) const BAD_LOAD: &str = "failed to load";
pub(super) const BAD_VALIDATE: &str = "failed to validate";

/// The words of a refusal, as a status may carry them: control characters
/// escaped, at most [`kp_contract::node_config::MAX_DETAIL_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail(String);

impl Detail {
    pub fn new(words: &str) -> Detail {
        Detail(kp_contract::node_config::detail(words))
    }

    /// The validator's words for a refused document: each broken rule
    /// (`port (70000) must be between 1 and 65535, inclusive`), or what
    /// stopped the decoding (`unknown field "maxPodz"`).
    pub fn of(err: &ConfigError) -> Detail {
        Detail::new(&err.reasons())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why the config that runs is not the one the node was told to run (or
/// its `--config-dir` drop-ins were refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigStatusError {
    /// The assigned config cannot be read or decoded.
    LoadFailed(Detail),
    /// The assigned config decodes but breaks the kubelet's rules.
    ValidateFailed(Detail),
    /// The assigned config is in bad-configs (crash loop or earlier
    /// failure), with the reason recorded there.
    KnownBad(BadCause),
    /// kubelet-pivot's own store cannot be read.
    Internal(Detail),
    /// A `--config-dir` drop-in cannot be read or parsed (the set that ran
    /// last, or last-known-good, runs instead).
    DropInLoadFailed(Detail),
    /// The drop-ins merged into the config do not validate.
    DropInValidateFailed(Detail),
    /// The directory's drop-in set crash-looped in its trial.
    DropInKnownBad(Detail),
}

/// Why bad-configs holds a config, read back from the reason recorded there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadCause {
    /// It failed to load (`failed to load: ...`).
    Load(Detail),
    /// It failed validation (`failed to validate: ...`).
    Validate(Detail),
    /// It crash-looped in its trial, or another reason.
    Other(Detail),
}

impl BadCause {
    /// The cause of a recorded reason. The words after the kind's prefix are
    /// those the refusal reported (a [`Detail`] already, read back as it
    /// is), so a known-bad config reports exactly the text of its refusal.
    pub fn of(reason: &str) -> BadCause {
        if let Some(rest) = after(reason, BAD_LOAD) {
            BadCause::Load(Detail::new(rest))
        } else if let Some(rest) = after(reason, BAD_VALIDATE) {
            BadCause::Validate(Detail::new(rest))
        } else {
            BadCause::Other(Detail::new(reason))
        }
    }
}

impl ConfigStatusError {
    /// The kind of failure, for the Event's reason: a config that did not
    /// load or validate never ran (refused); one that crash-looped was
    /// rolled back.
    pub fn failure(&self) -> Failure {
        match self {
            ConfigStatusError::LoadFailed(_)
            | ConfigStatusError::ValidateFailed(_)
            | ConfigStatusError::KnownBad(BadCause::Load(_) | BadCause::Validate(_))
            | ConfigStatusError::DropInLoadFailed(_)
            | ConfigStatusError::DropInValidateFailed(_) => Failure::Refused,
            ConfigStatusError::KnownBad(BadCause::Other(_))
            | ConfigStatusError::DropInKnownBad(_) => Failure::RolledBack,
            ConfigStatusError::Internal(_) => Failure::Internal,
        }
    }

    /// The stable prefix (what tools matching the v1.11 texts look for)
    /// and the reason.
    fn parts(&self) -> (&'static str, &str) {
        match self {
            ConfigStatusError::LoadFailed(d) => ("failed to load config", d.as_str()),
            ConfigStatusError::ValidateFailed(d) => ("failed to validate config", d.as_str()),
            // A config recorded bad for failing to load or validate keeps
            // reporting that cause's text.
            ConfigStatusError::KnownBad(BadCause::Load(d)) => ("failed to load config", d.as_str()),
            ConfigStatusError::KnownBad(BadCause::Validate(d)) => {
                ("failed to validate config", d.as_str())
            }
            ConfigStatusError::KnownBad(BadCause::Other(d)) => {
                ("assigned config is known bad", d.as_str())
            }
            ConfigStatusError::Internal(d) => ("internal failure", d.as_str()),
            ConfigStatusError::DropInLoadFailed(d) => {
                ("failed to load --config-dir drop-ins", d.as_str())
            }
            ConfigStatusError::DropInValidateFailed(d) => (
                "failed to validate config with --config-dir drop-ins",
                d.as_str(),
            ),
            ConfigStatusError::DropInKnownBad(d) => {
                ("--config-dir drop-ins are known bad", d.as_str())
            }
        }
    }
}

/// `reason` without `prefix: `, if it starts so.
fn after<'a>(reason: &'a str, prefix: &str) -> Option<&'a str> {
    reason.strip_prefix(prefix)?.strip_prefix(": ")
}

impl From<&DropInProblem> for ConfigStatusError {
    fn from(problem: &DropInProblem) -> Self {
        match problem {
            DropInProblem::Load(d) => ConfigStatusError::DropInLoadFailed(Detail::new(d)),
            DropInProblem::Validate(d) => ConfigStatusError::DropInValidateFailed(Detail::new(d)),
            DropInProblem::KnownBad(r) => ConfigStatusError::DropInKnownBad(Detail::new(r)),
        }
    }
}

/// `failed to validate config: port (70000) must be between 1 and 65535,
/// inclusive`: within [`kp_contract::node_config::MAX_REASON_BYTES`].
impl fmt::Display for ConfigStatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (prefix, reason) = self.parts();
        write!(f, "{prefix}: {reason}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kp_contract::node_config::{MAX_DETAIL_BYTES, MAX_REASON_BYTES};
    use kp_kubelet_config::KubeletConfig;

    fn refusal(doc: &str) -> ConfigError {
        KubeletConfig::parse_and_validate(
            format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{doc}")
                .as_bytes(),
        )
        .err()
        .unwrap()
    }

    #[test]
    fn the_validators_words_follow_the_stable_prefix() {
        let e = ConfigStatusError::ValidateFailed(Detail::of(&refusal("port: 70000\n")));
        assert_eq!(
            e.to_string(),
            "failed to validate config: port (70000) must be between 1 and 65535, inclusive"
        );
        let e = ConfigStatusError::LoadFailed(Detail::of(&refusal("maxPodz: 3\n")));
        assert_eq!(
            e.to_string(),
            "failed to load config: unknown field \"maxPodz\""
        );
        let both = refusal("port: 70000\nhealthzPort: -2\n");
        let text = ConfigStatusError::ValidateFailed(Detail::of(&both)).to_string();
        assert!(
            text.starts_with("failed to validate config: ") && text.contains("; healthzPort"),
            "{text}"
        );
    }

    #[test]
    fn every_kind_keeps_its_prefix_and_says_why() {
        let d = |s: &str| Detail::new(s);
        let cases = [
            (
                ConfigStatusError::KnownBad(BadCause::of("failed to validate: port (0) must be")),
                "failed to validate config: port (0) must be",
            ),
            (
                ConfigStatusError::KnownBad(BadCause::of("failed to load: unknown field \"x\"")),
                "failed to load config: unknown field \"x\"",
            ),
            (
                ConfigStatusError::KnownBad(BadCause::of("crash loop: 3 kubelet restarts")),
                "assigned config is known bad: crash loop: 3 kubelet restarts",
            ),
            (
                ConfigStatusError::Internal(d("cannot read bad-configs")),
                "internal failure: cannot read bad-configs",
            ),
            (
                ConfigStatusError::DropInLoadFailed(d("20-bad.conf: unknown field \"maxPodz\"")),
                "failed to load --config-dir drop-ins: 20-bad.conf: unknown field \"maxPodz\"",
            ),
            (
                ConfigStatusError::DropInValidateFailed(d("port (70000) … (set by 20-bad.conf)")),
                "failed to validate config with --config-dir drop-ins: port (70000) … (set by 20-bad.conf)",
            ),
            (
                ConfigStatusError::DropInKnownBad(d("crash loop: 2 kubelet restarts")),
                "--config-dir drop-ins are known bad: crash loop: 2 kubelet restarts",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
    }

    #[test]
    fn a_hostile_field_name_is_escaped_and_cut() {
        let name: String = "\u{1b}[31mév\nil\u{202e}"
            .chars()
            .cycle()
            .take(200_000)
            .collect();
        let err = ConfigError::UnknownField { path: name };
        let text = ConfigStatusError::LoadFailed(Detail::of(&err)).to_string();
        assert!(text.len() <= MAX_REASON_BYTES, "{} bytes", text.len());
        assert!(
            text.starts_with("failed to load config: unknown field \""),
            "{text}"
        );
        assert!(text.ends_with("more bytes)"), "{text}");
        assert!(
            !text.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{text:?}"
        );
        // A reason recorded by an older build (unescaped, up to the store's cap).
        let raw = format!("failed to validate: {}", "\u{7}x".repeat(1000));
        let text = ConfigStatusError::KnownBad(BadCause::of(&raw)).to_string();
        assert!(
            text.starts_with("failed to validate config: \\u{7}x"),
            "{text}"
        );
        assert!(text.len() <= MAX_REASON_BYTES);
        assert!(Detail::new(&raw).as_str().len() <= MAX_DETAIL_BYTES);
    }

    /// The refusal and the known-bad config it leaves report one text (a
    /// second text would be a second Event), also when the words were cut.
    #[test]
    fn a_known_bad_config_reports_the_text_of_its_refusal() {
        for path in ["\u{1b}y".repeat(3000), "maxPodz".to_string()] {
            let d = Detail::of(&ConfigError::UnknownField { path });
            let refused = ConfigStatusError::LoadFailed(d.clone());
            let known = ConfigStatusError::KnownBad(BadCause::of(&format!("{BAD_LOAD}: {d}")));
            assert_eq!(refused.to_string(), known.to_string());
            let refused = ConfigStatusError::ValidateFailed(d.clone());
            let known = ConfigStatusError::KnownBad(BadCause::of(&format!("{BAD_VALIDATE}: {d}")));
            assert_eq!(refused.to_string(), known.to_string());
        }
    }
}
