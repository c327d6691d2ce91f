//! Fixtures shared by the unit tests of the `kubeconfig` modules.

use super::{ConfigError, KubeletConfig};

pub(super) const HEADER: &str =
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

pub(super) fn yaml_doc(body: &str) -> Vec<u8> {
    format!("{HEADER}{body}\n").into_bytes()
}

pub(super) fn parse_yaml(body: &str) -> Result<KubeletConfig, ConfigError> {
    KubeletConfig::parse(&yaml_doc(body))
}

#[track_caller]
pub(super) fn valid(body: &str) -> KubeletConfig {
    let config = parse_yaml(body).unwrap_or_else(|e| panic!("parse {body:?}: {e}"));
    config
        .validate()
        .unwrap_or_else(|e| panic!("validate {body:?}: {e}"));
    config
}

#[track_caller]
pub(super) fn parse_error(body: &str) -> ConfigError {
    match parse_yaml(body) {
        Err(e) => e,
        Ok(config) => panic!("expected {body:?} to fail to parse, got {config:?}"),
    }
}
