//! What can go wrong in a `rollout` command, each with what it was about.

use std::path::PathBuf;

use kube::config::KubeconfigError;

use crate::plan::settings::SpecError;
use kp_contract::rollout::{CrdError, DecodeError};
use kp_runtime::api_error::{ApiError, Unreachable};

/// No API client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read --kubeconfig {}: {}", .path.display(), kubeconfig_reason(.source))]
    ReadKubeconfig {
        path: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    #[error("cannot use --kubeconfig {}: {source}", .path.display())]
    UseKubeconfig {
        path: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    /// The default kubeconfig, with `--context`.
    #[error("cannot use the kubeconfig: {0}")]
    Kubeconfig(#[source] KubeconfigError),
    /// Neither a default kubeconfig nor in a cluster (the kubeconfig's error is shown).
    #[error("no kubeconfig ($KUBECONFIG or ~/.kube/config) and not in a cluster: {0}")]
    NoConfig(#[source] KubeconfigError),
    #[error("cannot build the API client: {}", kp_runtime::api_error::shown(.0))]
    Build(#[source] kube::Error),
}

/// Why a kubeconfig file could not be read, without kube's Debug-quoted copy of the
/// path the message already names (`failed to read kubeconfig from '"/x"'`).
fn kubeconfig_reason(err: &KubeconfigError) -> String {
    match err {
        KubeconfigError::ReadConfig(io, _) => io.to_string(),
        other => other.to_string(),
    }
}

/// A flag of `rollout start` that cannot be used (found before any request).
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    #[error("--{flag} {text} is negative; give a count of nodes or a percentage like 10%")]
    Negative { flag: &'static str, text: String },
    #[error("--{flag} needs a count of nodes or a percentage like 10%, not {text:?}")]
    NotACount { flag: &'static str, text: String },
    #[error("--selector {text:?}: {source}")]
    Selector {
        text: String,
        #[source]
        source: super::selector::SelectorError,
    },
    #[error("--window {0:?}: expected \"[DAYS ]HH:MM DURATION\", e.g. \"Sat,Sun 22:00 4h\"")]
    Window(String),
    /// `--config` is not `NAMESPACE/NAME[:KEY]` (the parser says why).
    #[error("--config: {0}")]
    Config(String),
    /// `rollout crd` prints what the types generate: no cluster, one format.
    #[error("rollout crd takes no {0}: it prints the CRD (YAML) generated from the types, without a cluster")]
    CrdTakesNo(&'static str),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// A count flag (`--canary`, `--max-failures`) that is not a count of nodes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CountError {
    #[error("{0} is negative; a count of nodes is 0 or more")]
    Negative(String),
    #[error("{text:?} is not a count of nodes from 0 to {max}: {source}", max = u32::MAX)]
    NotACount {
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
}

/// A `rollout` command that failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Flags(#[from] FlagError),
    /// `rollout start` refused before any change.
    #[error(transparent)]
    Precheck(#[from] super::precheck::PrecheckError),
    /// `rollout start` refused: the controller would misread the spec.
    #[error(transparent)]
    OlderController(#[from] super::skew::OlderController),
    #[error(transparent)]
    Crd(#[from] CrdError),
    #[error("cannot render the CRD: {0}")]
    RenderCrd(#[source] serde_yaml_ng::Error),
    /// The CRD could not be printed.
    #[error(transparent)]
    PrintCrd(std::io::Error),
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("cannot read rollout \"{name}\": {source}")]
    Read {
        name: String,
        #[source]
        source: ApiError,
    },
    #[error("rollout \"{name}\" not found (kubectl get kubeletconfigrollouts lists them)")]
    NotFound { name: String },
    /// No answer from the API server (kubectl's words, with its address).
    #[error("{}", .failure.text(Some(server)))]
    Unreachable {
        server: String,
        failure: Unreachable,
    },
    #[error(
        "rollout {name} cannot be read ({source}); fix the field (kubectl edit kcr {name}) or \
         delete the rollout"
    )]
    Unreadable {
        name: String,
        #[source]
        source: DecodeError,
    },
    /// A patch was applied, but the rollout it gave back cannot be read.
    #[error(
        "the change was made, but rollout {name} cannot be read ({source}); fix the field \
         (kubectl edit kcr {name}) or delete the rollout"
    )]
    ChangedButUnreadable {
        name: String,
        #[source]
        source: DecodeError,
    },
    #[error("cannot create rollout \"{name}\": {source}")]
    Create {
        name: String,
        #[source]
        source: ApiError,
    },
    #[error("cannot update rollout \"{name}\": {source}")]
    Update {
        name: String,
        #[source]
        source: ApiError,
    },
    /// The spec the flags make with the stored one cannot be decoded.
    #[error("invalid rollout: {0}")]
    InvalidSpec(#[source] serde_json::Error),
    /// The spec the flags make with the stored one cannot be followed.
    #[error("invalid rollout: {0}")]
    InvalidSettings(#[source] SpecError),
    /// The global stop switch's ConfigMap could not be created, deleted or read.
    #[error("cannot {action} configmap {namespace}/{name}: {source}")]
    StopSwitch {
        action: &'static str,
        namespace: String,
        name: &'static str,
        #[source]
        source: ApiError,
    },
    #[error("rollout {name} was deleted")]
    Deleted { name: String },
    #[error("the watch ended")]
    WatchEnded,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_error() -> DecodeError {
        DecodeError {
            field: "spec.batch".into(),
            reason: "invalid type: null".into(),
        }
    }

    #[test]
    fn the_messages_name_the_rollout_and_the_way_out() {
        let unreadable = CliError::Unreadable {
            name: "r1".into(),
            source: decode_error(),
        };
        assert_eq!(
            unreadable.to_string(),
            "rollout r1 cannot be read (spec.batch: invalid type: null); fix the field \
             (kubectl edit kcr r1) or delete the rollout"
        );
        let changed = CliError::ChangedButUnreadable {
            name: "r1".into(),
            source: decode_error(),
        };
        assert_eq!(
            changed.to_string(),
            format!("the change was made, but {unreadable}")
        );
        let missing = CliError::NotFound { name: "r1".into() };
        assert_eq!(
            missing.to_string(),
            "rollout \"r1\" not found (kubectl get kubeletconfigrollouts lists them)"
        );
        let window = FlagError::Window("22:00".into());
        assert_eq!(
            window.to_string(),
            r#"--window "22:00": expected "[DAYS ]HH:MM DURATION", e.g. "Sat,Sun 22:00 4h""#
        );
    }
}
