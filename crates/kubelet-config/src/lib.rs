//! The kubelet's config file (`kubelet.config.k8s.io/v1beta1`
//! `KubeletConfiguration`): strict parsing, the kubelet's own range checks,
//! v1beta1 defaulting, and the versioned hash of the effective config.
//!
//! A [`KubeletConfig`] keeps the document as it was given (a JSON object,
//! keys as written) plus typed views of the fields this module models
//! ([`KubeletConfig::field`]). Every known top-level v1beta1 field is
//! accepted; the ones that are not modelled are carried through untouched.
//! Anything else is rejected with its path, as are duplicate keys in JSON and
//! YAML, a wrong `kind`/`apiVersion` and values of the wrong type.
//!
//! - [`KubeletConfig::parse`] rejects what the kubelet would fail to *load*
//!   (syntax, unknown fields, wrong types, bad Go durations);
//! - [`KubeletConfig::validate`] runs the kubelet's range checks (from
//!   `pkg/kubelet/apis/config/validation`, the eviction threshold parser and
//!   the node-allocatable reservation parser) on the effective config and
//!   reports every failure at once;
//! - [`KubeletConfig::effective`] is the file the kubelet reads: v1beta1
//!   defaults filled in for unset modelled fields, and kubelet-pivot's own
//!   fields (`crashLoopThreshold`, `configTrialDuration`, from the Dynamic
//!   Kubelet Configuration proposal) removed, because the kubelet does not
//!   know them;
//! - [`KubeletConfig::hash`] is the versioned hash of the effective config
//!   ([`HASH_ALGORITHM`], see [`HashAlgorithm`]): independent of key order,
//!   whitespace and of JSON versus YAML, and since V2 of how values are
//!   spelled (`"1Gi"` is `"1024Mi"`); [`KubeletConfig::class_hashes`] has
//!   one per disruption class.
//!
//! When in doubt this module is stricter than the kubelet, never more
//! lenient: refusing a config the kubelet would accept leaves the node on its
//! last-known-good config, accepting one it would refuse makes it crash-loop.
//!
//! Module map (private submodules, one job each; their public items are
//! re-exported here):
//! - `decode`: bytes to a JSON value, strictly (size limit, JSON or YAML,
//!   duplicate keys, alias bombs, YAML 1.1 ambiguities);
//! - `nesting`: the byte pre-scan that refuses nesting deeper than
//!   [`MAX_NESTING_DEPTH`] before any parser runs;
//! - `schema`: every known v1beta1 field, its type and its default;
//! - `fields`: type checks against the schema and the typed [`FieldValue`]s
//!   of the modelled fields;
//! - `defaults`: v1beta1 defaulting of the effective config;
//! - `validate`: the kubelet's range checks, one small module per section
//!   (taints, reserved memory, logging, tracing, the image allowlist, ...;
//!   docs/validation-rules.md lists every rule), `gated` the rules that follow
//!   the gates and the host checks; `eviction`: eviction signals, thresholds
//!   and their rules;
//! - [`gates`]: the kubelet's feature gates per minor version, and the
//!   [`ValidationTarget`] (gate model and host facts) a config is validated
//!   for;
//! - `duration`: Go durations; `quantity`: Kubernetes quantities;
//! - `hash`: canonical JSON and the versioned hashes; `error`: why a
//!   document was refused;
//! - `dropin`: `--config-dir` drop-ins merged as the kubelet merges them
//!   ([`DropInLayer`], [`KubeletConfig::with_drop_ins`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

mod decode;
mod defaults;
pub mod disruption;
mod duration;
mod error;
mod eviction;
mod fields;
pub mod gates;
mod hash;
mod layer;
mod nesting;
mod quantity;
mod schema;
#[cfg(test)]
mod test_support;
mod validate;
/// Label keys and values as the API server checks them (`IsQualifiedName`,
/// `IsValidLabelValue`), with its words.
pub mod labels {
    pub use crate::validate::taints::{check_label_value, check_qualified_name};
}
mod yaml11;

pub use duration::{DurationError, GoDuration};
pub use error::{ConfigError, FieldError, Format};
pub use eviction::{EvictionThreshold, EVICTION_SIGNALS};
pub use fields::FieldValue;
pub use gates::ValidationTarget;
pub use hash::{sha256_hex, HashAlgorithm, HASH_ALGORITHM};
pub use layer::DropInLayer;

/// The bounds any YAML or JSON document kubelet-pivot parses is held to before a parser
/// sees it, in linear time: at most [`MAX_CONFIG_BYTES`], nested at most
/// [`MAX_NESTING_DEPTH`] levels (a KubeletConfiguration, a kubeconfig).
pub fn check_document_bounds(bytes: &[u8]) -> Result<(), ConfigError> {
    decode::check_bounds(bytes)
}
pub use nesting::MAX_NESTING_DEPTH;
pub use quantity::{Quantity, QuantityError, QuantitySuffix};
pub use schema::is_known_field;
pub use yaml11::YamlWarning;

use crate::disruption::Class;
use fields::{check_object, check_type_meta, Views};
use schema::TOP_FIELDS;

/// The only `apiVersion` accepted.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The only `kind` accepted.
pub const KIND: &str = "KubeletConfiguration";
/// Kubelet restarts tolerated within the trial period (DKC proposal default).
pub const DEFAULT_CRASH_LOOP_THRESHOLD: u32 = 10;
/// Upper bound of `crashLoopThreshold` (DKC proposal: 0..=10).
pub const MAX_CRASH_LOOP_THRESHOLD: u32 = 10;
/// How long a new config is on trial (DKC proposal default: 10 minutes).
pub const DEFAULT_CONFIG_TRIAL_DURATION: Duration = Duration::from_secs(10 * 60);
/// Largest config document accepted, in bytes.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;
/// kubelet-pivot's field: restarts tolerated within the trial period.
pub const CRASH_LOOP_THRESHOLD_FIELD: &str = "crashLoopThreshold";
/// kubelet-pivot's field: length of a new config's trial period.
pub const CONFIG_TRIAL_DURATION_FIELD: &str = "configTrialDuration";

/// A parsed `KubeletConfiguration`: the document as given plus typed views of
/// the modelled fields.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletConfig {
    document: Map<String, Value>,
    views: Views,
    /// Plain YAML scalars kept with the kubelet's YAML 1.1 meaning.
    warnings: Vec<YamlWarning>,
}

impl KubeletConfig {
    /// Parses a JSON (first non-whitespace byte `{`) or YAML document,
    /// strictly: duplicate keys, unknown fields (with their path), values of
    /// the wrong type, and a missing or wrong `kind`/`apiVersion` are errors.
    /// Does not run the range checks: see [`KubeletConfig::validate`].
    ///
    /// Plain YAML scalars are read as the kubelet reads them (YAML 1.1: an
    /// unquoted `no` is false, `0755` is 493); where YAML 1.2 would read a
    /// string, the value is kept with a [warning](KubeletConfig::warnings)
    /// when the field is a modelled boolean or number, and refused anywhere
    /// else, with what to write instead.
    pub fn parse(bytes: &[u8]) -> Result<KubeletConfig, ConfigError> {
        let decoded = decode::decode_document(bytes)?;
        let mut config = KubeletConfig::from_document(decoded.document)
            .map_err(|e| yaml11::explain(e, &decoded.readings))?;
        config.warnings = yaml11::judge(&decoded.readings, &config.views)?;
        Ok(config)
    }

    /// The plain YAML scalars of the document that were read with the
    /// kubelet's YAML 1.1 meaning, which YAML 1.2 tools read as strings
    /// (`serializeImagePulls: no`): say them to whoever wrote the config.
    pub fn warnings(&self) -> &[YamlWarning] {
        &self.warnings
    }

    /// A decoded document, checked as [`parse`](KubeletConfig::parse)
    /// checks one.
    fn from_document(document: Map<String, Value>) -> Result<KubeletConfig, ConfigError> {
        check_type_meta(&document)?;
        let mut views = Views::default();
        check_object(&document, TOP_FIELDS, "", &mut views)?;
        Ok(KubeletConfig {
            document,
            views,
            warnings: Vec::new(),
        })
    }

    /// The checks [`parse`](KubeletConfig::parse) runs before any parser
    /// sees the bytes, in linear time: at most [`MAX_CONFIG_BYTES`], nested
    /// at most [`MAX_NESTING_DEPTH`] levels. For input that is stored before
    /// it is parsed (ConfigMaps from the API).
    pub fn check_bounds(bytes: &[u8]) -> Result<(), ConfigError> {
        decode::check_bounds(bytes)
    }

    /// The built-in defaults: a document with only `apiVersion` and `kind`,
    /// whose [`effective`](KubeletConfig::effective) config is all v1beta1
    /// defaults.
    pub fn defaults() -> KubeletConfig {
        let mut document = Map::new();
        document.insert("apiVersion".to_owned(), Value::from(API_VERSION));
        document.insert("kind".to_owned(), Value::from(KIND));
        KubeletConfig {
            document,
            views: Views::default(),
            warnings: Vec::new(),
        }
    }

    /// Runs the kubelet's validation on the effective config (defaults
    /// applied, as the kubelet validates after defaulting) and kubelet-pivot's
    /// checks of its own fields; [`ConfigError::Invalid`] lists every failure.
    ///
    /// Validates for the default [`ValidationTarget`] (the newest kubelet
    /// modelled, host unknown); see [`validate_for`](KubeletConfig::validate_for).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_for(&ValidationTarget::default())
    }

    /// [`validate`](KubeletConfig::validate) for a given kubelet: its
    /// feature-gate model (the rules that follow the gates in force, and the
    /// `featureGates` themselves) and the host facts it starts on.
    pub fn validate_for(&self, target: &ValidationTarget) -> Result<(), ConfigError> {
        validate::check_config(&self.effective_map(), &self.views, target)
    }

    /// [`parse`](KubeletConfig::parse), then
    /// [`validate`](KubeletConfig::validate).
    pub fn parse_and_validate(bytes: &[u8]) -> Result<KubeletConfig, ConfigError> {
        let config = KubeletConfig::parse(bytes)?;
        config.validate()?;
        Ok(config)
    }

    /// The document as given.
    pub fn document(&self) -> &Map<String, Value> {
        &self.document
    }

    /// The typed value of a modelled field that is set, by path (e.g.
    /// `port`, `authentication.webhook.cacheTTL`,
    /// `shutdownGracePeriodByPodPriority[0].priority`).
    pub fn field(&self, path: &str) -> Option<&FieldValue> {
        self.views.get(path)
    }

    fn effective_map(&self) -> Map<String, Value> {
        let mut effective = self.document.clone();
        effective.remove(CRASH_LOOP_THRESHOLD_FIELD);
        effective.remove(CONFIG_TRIAL_DURATION_FIELD);
        defaults::apply_defaults(&mut effective, TOP_FIELDS, &self.document);
        effective
    }

    /// The config the kubelet gets: v1beta1 defaults filled in for modelled
    /// fields that are unset (absent, null, or the zero value of a Go value
    /// field), nulls of modelled fields dropped, `crashLoopThreshold` and
    /// `configTrialDuration` removed; everything else as given.
    pub fn effective(&self) -> Value {
        Value::Object(self.effective_map())
    }

    /// Canonical JSON of [`effective`](KubeletConfig::effective) (keys sorted
    /// at every level, no whitespace): the file the kubelet reads.
    pub fn effective_bytes(&self) -> Vec<u8> {
        let mut out = String::new();
        hash::write_canonical(&self.effective(), &mut out);
        out.into_bytes()
    }

    /// [`effective`](KubeletConfig::effective) with every duration in Go's
    /// canonical form (`"60s"` is `"1m0s"`): where the normalization of the
    /// V2 hash and of `disruption::classify` starts.
    pub(crate) fn effective_canonical(&self) -> Map<String, Value> {
        let mut effective = self.effective_map();
        hash::canonical_durations(&mut effective, TOP_FIELDS);
        effective
    }

    /// Lower-case hex hash of the effective config with
    /// [`HashAlgorithm::CURRENT`] (named by [`HASH_ALGORITHM`]).
    pub fn hash(&self) -> String {
        self.hash_with(HashAlgorithm::CURRENT)
    }

    /// Lower-case hex hash of the effective config with `algorithm`: V1 of
    /// [`effective_bytes`](KubeletConfig::effective_bytes), V2 of the
    /// normalized effective config (equal exactly when
    /// [`disruption::classify`] finds no change).
    pub fn hash_with(&self, algorithm: HashAlgorithm) -> String {
        hash::config_hash(self, algorithm)
    }

    /// One V2 hash per disruption class, over the normalized fields of that
    /// class (every class present). Two configs' class hashes differ exactly
    /// for the classes of [`disruption::classify`]'s changes between them.
    pub fn class_hashes(&self) -> BTreeMap<Class, String> {
        hash::class_hashes(self)
    }

    /// `crashLoopThreshold`, or its default. Out-of-range values (only in an
    /// unvalidated config) are clamped to 0..=10.
    pub fn crash_loop_threshold(&self) -> u32 {
        match self.views.int(CRASH_LOOP_THRESHOLD_FIELD) {
            Some(n) => u32::try_from(n.clamp(0, i64::from(MAX_CRASH_LOOP_THRESHOLD))).unwrap_or(0),
            None => DEFAULT_CRASH_LOOP_THRESHOLD,
        }
    }

    /// `configTrialDuration`, or its default. A negative value (only in an
    /// unvalidated config) gives the default.
    pub fn config_trial_duration(&self) -> Duration {
        self.views
            .duration(CONFIG_TRIAL_DURATION_FIELD)
            .and_then(GoDuration::to_std)
            .unwrap_or(DEFAULT_CONFIG_TRIAL_DURATION)
    }

    /// Top-level names of the fields whose normalized effective values
    /// differ between the two configs ([`disruption::classify`]), sorted;
    /// `crashLoopThreshold` and `configTrialDuration` are compared by their
    /// resolved values.
    pub fn changed_fields(&self, other: &KubeletConfig) -> Vec<String> {
        let mut changed: Vec<String> = disruption::classify(self, other)
            .field_names()
            .into_iter()
            .map(|name| match name.split_once('.') {
                Some((top, _)) => top.to_owned(),
                None => name,
            })
            .collect();
        if self.crash_loop_threshold() != other.crash_loop_threshold() {
            changed.push(CRASH_LOOP_THRESHOLD_FIELD.to_owned());
        }
        if self.config_trial_duration() != other.config_trial_duration() {
            changed.push(CONFIG_TRIAL_DURATION_FIELD.to_owned());
        }
        changed.sort();
        changed.dedup();
        changed
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::test_support::{parse_error, parse_yaml, valid, yaml_doc};
    use super::*;

    /// The example of the "Set Kubelet parameters via a config file" task
    /// page (kubernetes/website, content/en/docs/tasks/administer-cluster/
    /// kubelet-config-file.md, v1.10-era text).
    const DOCS_CONFIG_FILE_EXAMPLE: &str = r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard:
    memory.available:  "200Mi"
"#;

    /// The same page's current example.
    const DOCS_CONFIG_FILE_EXAMPLE_CURRENT: &str = r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "192.168.0.8"
port: 20250
serializeImagePulls: false
evictionHard:
    memory.available:  "100Mi"
    nodefs.available:  "10%"
    nodefs.inodesFree: "5%"
    imagefs.available: "15%"
"#;

    /// What the v1.11 "Reconfigure a Node's Kubelet in a Live Cluster" task
    /// produces: a kubeadm node's `configz` output with `kind` and
    /// `apiVersion` added by its `jq` command (kubelet_configz_${NODE_NAME}).
    const DKC_V111_CONFIGZ: &str = r#"{
  "kind": "KubeletConfiguration",
  "apiVersion": "kubelet.config.k8s.io/v1beta1",
  "staticPodPath": "/etc/kubernetes/manifests",
  "syncFrequency": "1m0s",
  "fileCheckFrequency": "20s",
  "httpCheckFrequency": "20s",
  "address": "0.0.0.0",
  "port": 10250,
  "readOnlyPort": 10255,
  "tlsCertFile": "/var/lib/kubelet/pki/kubelet.crt",
  "tlsPrivateKeyFile": "/var/lib/kubelet/pki/kubelet.key",
  "rotateCertificates": true,
  "authentication": {
    "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
    "webhook": {"enabled": true, "cacheTTL": "2m0s"},
    "anonymous": {"enabled": false}
  },
  "authorization": {
    "mode": "Webhook",
    "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"}
  },
  "registryPullQPS": 5,
  "registryBurst": 10,
  "eventRecordQPS": 5,
  "eventBurst": 10,
  "enableDebuggingHandlers": true,
  "healthzPort": 10248,
  "healthzBindAddress": "127.0.0.1",
  "oomScoreAdj": -999,
  "clusterDomain": "cluster.local",
  "clusterDNS": ["10.96.0.10"],
  "streamingConnectionIdleTimeout": "4h0m0s",
  "nodeStatusUpdateFrequency": "10s",
  "imageMinimumGCAge": "2m0s",
  "imageGCHighThresholdPercent": 85,
  "imageGCLowThresholdPercent": 80,
  "volumeStatsAggPeriod": "1m0s",
  "cgroupsPerQOS": true,
  "cgroupDriver": "cgroupfs",
  "cpuManagerPolicy": "none",
  "cpuManagerReconcilePeriod": "10s",
  "runtimeRequestTimeout": "2m0s",
  "hairpinMode": "promiscuous-bridge",
  "maxPods": 110,
  "podPidsLimit": -1,
  "resolvConf": "/etc/resolv.conf",
  "cpuCFSQuota": true,
  "maxOpenFiles": 1000000,
  "contentType": "application/vnd.kubernetes.protobuf",
  "kubeAPIQPS": 5,
  "kubeAPIBurst": 10,
  "serializeImagePulls": true,
  "evictionHard": {
    "imagefs.available": "15%",
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%"
  },
  "evictionPressureTransitionPeriod": "5m0s",
  "enableControllerAttachDetach": true,
  "makeIPTablesUtilChains": true,
  "iptablesMasqueradeBit": 14,
  "iptablesDropBit": 15,
  "featureGates": {},
  "failSwapOn": true,
  "containerLogMaxSize": "10Mi",
  "containerLogMaxFiles": 5,
  "enforceNodeAllocatable": ["pods"]
}"#;

    fn effective_field(config: &KubeletConfig, name: &str) -> Option<Value> {
        config.effective().get(name).cloned()
    }

    // --- documented examples ----------------------------------------------

    #[test]
    fn docs_config_file_example_parses_and_validates() {
        let config = KubeletConfig::parse_and_validate(DOCS_CONFIG_FILE_EXAMPLE.as_bytes())
            .expect("docs example");
        let mut expected = BTreeMap::new();
        expected.insert("memory.available".to_owned(), "200Mi".to_owned());
        assert_eq!(
            config.field("evictionHard"),
            Some(&FieldValue::StrMap(expected))
        );
        // A given evictionHard replaces the default one, it is not merged.
        assert_eq!(
            effective_field(&config, "evictionHard"),
            Some(serde_json::json!({"memory.available": "200Mi"}))
        );
        assert_eq!(effective_field(&config, "port"), Some(Value::from(10250)));
    }

    #[test]
    fn docs_current_config_file_example_parses_and_validates() {
        let config = KubeletConfig::parse_and_validate(DOCS_CONFIG_FILE_EXAMPLE_CURRENT.as_bytes())
            .expect("docs example");
        assert_eq!(config.field("port"), Some(&FieldValue::Int(20250)));
        assert_eq!(
            config.field("address"),
            Some(&FieldValue::Str("192.168.0.8".to_owned()))
        );
        assert_eq!(
            effective_field(&config, "serializeImagePulls"),
            Some(Value::Bool(false))
        );
        // The example spells out the default eviction thresholds.
        assert_eq!(
            config.effective().get("evictionHard"),
            KubeletConfig::defaults().effective().get("evictionHard")
        );
    }

    #[test]
    fn dkc_v111_configz_example_parses_and_validates() {
        let config =
            KubeletConfig::parse_and_validate(DKC_V111_CONFIGZ.as_bytes()).expect("configz");
        assert_eq!(config.crash_loop_threshold(), DEFAULT_CRASH_LOOP_THRESHOLD);
        assert_eq!(
            config.config_trial_duration(),
            DEFAULT_CONFIG_TRIAL_DURATION
        );
        assert_eq!(
            config.field("authentication.webhook.cacheTTL"),
            Some(&FieldValue::Duration(GoDuration::from_nanos(
                120_000_000_000
            )))
        );
        // The task's edit step: change eventRecordQPS, push it as a new ConfigMap.
        let edited = DKC_V111_CONFIGZ.replace("\"eventRecordQPS\": 5", "\"eventRecordQPS\": 10");
        let edited = KubeletConfig::parse_and_validate(edited.as_bytes()).expect("edited");
        assert_eq!(config.changed_fields(&edited), vec!["eventRecordQPS"]);
        assert_ne!(config.hash(), edited.hash());
    }

    #[test]
    fn dkc_fields_are_read_and_kept_from_the_kubelet() {
        let with_trial = DKC_V111_CONFIGZ.replacen(
            "\"staticPodPath\"",
            "\"crashLoopThreshold\": 3, \"configTrialDuration\": \"5m\", \"staticPodPath\"",
            1,
        );
        let config = KubeletConfig::parse_and_validate(with_trial.as_bytes()).expect("config");
        assert_eq!(config.crash_loop_threshold(), 3);
        assert_eq!(config.config_trial_duration(), Duration::from_secs(300));
        let effective = config.effective();
        assert!(effective.get(CRASH_LOOP_THRESHOLD_FIELD).is_none());
        assert!(effective.get(CONFIG_TRIAL_DURATION_FIELD).is_none());
        let plain = KubeletConfig::parse(DKC_V111_CONFIGZ.as_bytes()).expect("config");
        // The kubelet's file is the same; only kubelet-pivot's settings differ.
        assert_eq!(config.hash(), plain.hash());
        assert_eq!(
            config.changed_fields(&plain),
            vec![CONFIG_TRIAL_DURATION_FIELD, CRASH_LOOP_THRESHOLD_FIELD]
        );
    }

    #[test]
    fn kubelet_reservation_numbers_must_be_quoted() {
        // From the "Reserve Compute Resources" page: `pid: 1000` unquoted is a
        // number, which the kubelet cannot decode into map[string]string.
        let err = parse_error("kubeReserved:\n  cpu: 100m\n  memory: 100Mi\n  pid: 1000");
        match err {
            ConfigError::WrongType { path, .. } => assert_eq!(path, "kubeReserved.pid"),
            other => panic!("unexpected {other:?}"),
        }
        valid("kubeReserved:\n  cpu: 100m\n  memory: 100Mi\n  ephemeral-storage: 1Gi\n  pid: \"1000\"");
    }

    #[test]
    fn effective_is_idempotent() {
        let config = KubeletConfig::parse(DKC_V111_CONFIGZ.as_bytes()).expect("config");
        let again = KubeletConfig::parse(&config.effective_bytes()).expect("effective parses");
        assert_eq!(again.effective(), config.effective());
        assert_eq!(again.effective_bytes(), config.effective_bytes());
    }

    #[test]
    fn changed_fields_names_top_level_differences() {
        let base = valid("kubeReserved:\n  cpu: 100m\nmaxPods: 110\nlogging:\n  format: text");
        assert!(base.changed_fields(&base.clone()).is_empty());
        let other = valid("kubeReserved:\n  cpu: 200m\nlogging:\n  format: json\ncpuManagerPolicy: static\ncrashLoopThreshold: 2");
        assert_eq!(
            base.changed_fields(&other),
            vec![
                "cpuManagerPolicy",
                "crashLoopThreshold",
                "kubeReserved",
                "logging"
            ]
        );
        assert_eq!(other.changed_fields(&base), base.changed_fields(&other));
    }

    #[test]
    fn pivot_accessors_fall_back_on_unvalidated_values() {
        let config =
            parse_yaml("crashLoopThreshold: 50\nconfigTrialDuration: -5m").expect("parses");
        assert!(config.validate().is_err());
        assert_eq!(config.crash_loop_threshold(), 10);
        assert_eq!(
            config.config_trial_duration(),
            DEFAULT_CONFIG_TRIAL_DURATION
        );
        let config = parse_yaml("crashLoopThreshold: -3").expect("parses");
        assert_eq!(config.crash_loop_threshold(), 0);
        let config = valid("configTrialDuration: 0s");
        assert_eq!(config.config_trial_duration(), Duration::ZERO);
    }

    fn sample_documents() -> Vec<Vec<u8>> {
        vec![
            DKC_V111_CONFIGZ.as_bytes().to_vec(),
            DOCS_CONFIG_FILE_EXAMPLE_CURRENT.as_bytes().to_vec(),
            yaml_doc("authentication:\n  webhook:\n    cacheTTL: 1m\nshutdownGracePeriodByPodPriority:\n- priority: 1\n  shutdownGracePeriodSeconds: 2\nlogging: &l {a: [1, 2]}\ntracing: *l"),
        ]
    }

    proptest! {
        #[test]
        fn prop_parse_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
            let _ = KubeletConfig::parse_and_validate(&bytes);
            let mut json = b"{".to_vec();
            json.extend_from_slice(&bytes);
            let _ = KubeletConfig::parse_and_validate(&json);
        }

        #[test]
        fn prop_parse_never_panics_on_mutated_configs(
            which in 0usize..3,
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
        ) {
            let mut doc = sample_documents().swap_remove(which);
            for (at, byte, op) in edits {
                let at = at.index(doc.len() + 1);
                match op {
                    0 => doc.insert(at, byte),
                    1 if at < doc.len() => { doc[at] = byte; }
                    _ if at < doc.len() => { doc.remove(at); }
                    _ => {}
                }
            }
            if let Ok(config) = KubeletConfig::parse_and_validate(&doc) {
                let again = KubeletConfig::parse_and_validate(&config.effective_bytes());
                prop_assert_eq!(again.map(|c| c.hash()).ok(), Some(config.hash()));
            }
        }
    }
}
