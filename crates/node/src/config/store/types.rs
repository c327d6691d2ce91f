//! The records the store keeps (config source, bad-config entries, trial,
//! effective record) and the checks a source and a payload key pass before
//! they become file names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::StoreError;

pub use kp_contract::node_config::ConfigSource;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BadEntry {
    pub time: String,
    pub reason: String,
    pub resource_version: String,
}

pub type BadConfigs = BTreeMap<String, BadEntry>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trial {
    pub source: ConfigSource,
    /// RFC 3339 start of the trial (when this assignment was first applied).
    pub since: String,
}

/// What a holder last applied (for `status` and hash comparison).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveRecord {
    /// `None` = the local config (init file or defaults).
    pub source: Option<ConfigSource>,
    /// "assigned", "last-known-good" or "local".
    pub origin: String,
    pub hash_algorithm: String,
    pub hash: String,
    /// One hash per disruption class (algorithms that have them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_hashes:
        Option<std::collections::BTreeMap<kp_kubelet_config::disruption::Class, String>>,
    /// SHA-256 of `v1/applied-input.json` when it holds this config's document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_sha256: Option<String>,
    pub error: Option<String>,
    pub since: String,
}

/// Validates a ConfigMap key used as a file name: `[-._a-zA-Z0-9]+`, not
/// `.` or `..`, at most 253 characters.
pub fn validate_key(key: &str) -> Result<(), StoreError> {
    match kp_contract::node_config::key_problem(key) {
        None => Ok(()),
        Some(reason) => Err(StoreError::BadKey {
            key: key.to_string(),
            reason,
        }),
    }
}

/// uid and resourceVersion become directory names: same rules as keys.
fn validate_path_part(what: &'static str, value: &str) -> Result<(), StoreError> {
    match kp_contract::node_config::key_problem(value) {
        None => Ok(()),
        Some(reason) => Err(StoreError::BadSource {
            what,
            value: value.to_string(),
            reason,
        }),
    }
}

/// The checks a source passes before its parts become file names.
pub trait SourceCheck {
    fn validate(&self) -> Result<(), StoreError>;
}

impl SourceCheck for ConfigSource {
    fn validate(&self) -> Result<(), StoreError> {
        validate_path_part("uid", &self.uid)?;
        validate_path_part("resourceVersion", &self.resource_version)?;
        validate_key(&self.kubelet_config_key)?;
        if self.namespace.is_empty() || self.name.is_empty() {
            return Err(StoreError::BadSource {
                what: "namespace/name",
                value: format!("{}/{}", self.namespace, self.name),
                reason: "namespace and name are required",
            });
        }
        Ok(())
    }
}
