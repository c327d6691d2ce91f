//! `--config-dir` drop-ins (KEP-3983) merged the way the kubelet merges
//! them (`cmd/kubelet/app/server.go` `mergeKubeletConfigurations`):
//!
//! 1. The kubelet loads its `--config` file with v1beta1 defaults applied
//!    (`loadConfigFile`, which also fills in the default `evictionHard`).
//! 2. Each drop-in, in the order the directory is walked, is merged into
//!    one patch with `jsonpatch.MergePatch` (RFC 7386): mappings merge key by
//!    key, anything else (lists included) replaces, and a `null` removes
//!    what an *earlier drop-in* set.
//! 3. That patch is decoded with Go's `json.Unmarshal` over the loaded
//!    config (the config's own JSON carries Go field names, the drop-ins'
//!    the v1beta1 names; `Unmarshal` matches both to one field and applies
//!    the drop-ins' last): a struct keeps the fields the patch does not name
//!    (`authorization.webhook`), a map keeps the keys the patch does not name
//!    (`featureGates`, `kubeReserved`, `evictionHard`, each value of
//!    `staticPodURLHeader` replaced whole), a list is replaced (`clusterDNS`),
//!    and a `null` in the patch never removes a value of the config file.
//!
//! [`DropInLayer`] is step 2, [`KubeletConfig::with_drop_ins`] step 3. One
//! consequence, tested below: an `evictionHard` in a drop-in is merged with
//! the default thresholds, while one in the main config replaces them.

use serde_json::{Map, Value};

use super::defaults::apply_defaults;
use super::fields::{check_object, Views};
use super::schema::{Field, Kind, TOP_FIELDS};
use super::{hash, ConfigError, KubeletConfig};

/// The drop-ins of a `--config-dir` merged among themselves, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DropInLayer {
    map: Map<String, Value>,
}

impl DropInLayer {
    /// No drop-ins.
    pub fn new() -> DropInLayer {
        DropInLayer::default()
    }

    /// Merges the next drop-in (in directory order) over the layer: RFC 7386
    /// JSON merge patch, as the kubelet's `jsonpatch.MergePatch`.
    pub fn push(&mut self, drop_in: &KubeletConfig) {
        for (name, value) in drop_in.document() {
            merge_patch_entry(&mut self.map, name, value);
        }
    }

    /// Whether the drop-ins set nothing (no drop-ins, or only `apiVersion`
    /// and `kind`).
    pub fn is_empty(&self) -> bool {
        self.map.keys().all(|k| k == "apiVersion" || k == "kind")
    }

    /// The merged drop-ins (v1beta1 field names).
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.map
    }

    /// A layer kept earlier (a checkpoint of the drop-ins that ran),
    /// checked like a document: known fields of the right types.
    pub fn from_map(map: Map<String, Value>) -> Result<DropInLayer, ConfigError> {
        check_object(&map, TOP_FIELDS, "", &mut Views::default())?;
        Ok(DropInLayer { map })
    }

    /// Canonical JSON of the layer (keys sorted, no whitespace).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let mut out = String::new();
        hash::write_canonical(&Value::Object(self.map.clone()), &mut out);
        out.into_bytes()
    }
}

/// RFC 7386 for one member of a patch object.
fn merge_patch_entry(target: &mut Map<String, Value>, name: &str, patch: &Value) {
    match patch {
        Value::Null => {
            target.remove(name);
        }
        Value::Object(members) => {
            let slot = target
                .entry(name.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(inner) = slot {
                for (key, value) in members {
                    merge_patch_entry(inner, key, value);
                }
            }
        }
        other => {
            target.insert(name.to_owned(), other.clone());
        }
    }
}

/// How Go's `json.Unmarshal` of a patch value combines it with the value the
/// kubelet's config already holds.
#[derive(Debug, Clone, Copy)]
enum Combine {
    /// Scalars and lists: the patch's value.
    Replace,
    /// A struct: the named fields, recursively, each by its own kind.
    Fields(&'static [Field]),
    /// A map: the named keys, each value replaced whole.
    Keys,
    /// A struct of structs the schema does not model (`logging`,
    /// `tracing`): every nested mapping is a struct.
    Deep,
}

fn combine_of(field: &Field) -> Combine {
    match field.kind {
        Kind::Object(fields) => Combine::Fields(fields),
        Kind::StrMap | Kind::BoolMap => Combine::Keys,
        Kind::Any => match field.name {
            // LoggingConfiguration and TracingConfiguration: structs of
            // structs and scalars.
            "logging" | "tracing" => Combine::Deep,
            // map[string][]string.
            "staticPodURLHeader" => Combine::Keys,
            // tlsCurvePreferences, reservedMemory, registerWithTaints: lists.
            _ => Combine::Replace,
        },
        _ => Combine::Replace,
    }
}

/// Applies `layer` over `base` as `json.Unmarshal` does over a Go struct.
fn overlay(base: &mut Map<String, Value>, layer: &Map<String, Value>, fields: &[Field]) {
    for (name, value) in layer {
        let combine = fields
            .iter()
            .find(|f| f.name == name)
            .map_or(Combine::Replace, combine_of);
        match (combine, base.get_mut(name), value) {
            (Combine::Fields(nested), Some(Value::Object(held)), Value::Object(patch)) => {
                overlay(held, patch, nested)
            }
            (Combine::Keys, Some(Value::Object(held)), Value::Object(patch)) => {
                for (key, item) in patch {
                    held.insert(key.clone(), item.clone());
                }
            }
            (Combine::Deep, Some(Value::Object(held)), Value::Object(patch)) => deep(held, patch),
            _ => {
                base.insert(name.clone(), value.clone());
            }
        }
    }
}

fn deep(base: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (name, value) in patch {
        match (base.get_mut(name), value) {
            (Some(Value::Object(held)), Value::Object(inner)) => deep(held, inner),
            _ => {
                base.insert(name.clone(), value.clone());
            }
        }
    }
}

impl KubeletConfig {
    /// This config (the kubelet's `--config` file) with `layer` merged over
    /// it as the kubelet merges its `--config-dir` (see the module doc). The
    /// result's document is the merged config with the defaults the kubelet
    /// had applied before the merge spelled out; it still has to be
    /// [validated](KubeletConfig::validate). Without drop-ins, this config
    /// unchanged.
    pub fn with_drop_ins(&self, layer: &DropInLayer) -> Result<KubeletConfig, ConfigError> {
        if layer.is_empty() {
            return Ok(self.clone());
        }
        let mut document = self.document().clone();
        apply_defaults(&mut document, TOP_FIELDS, self.document());
        overlay(&mut document, layer.as_map(), TOP_FIELDS);
        let mut merged = KubeletConfig::from_document(document)?;
        merged.warnings.clone_from(&self.warnings);
        Ok(merged)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::test_support::{valid, HEADER};

    fn config(yaml: &str) -> KubeletConfig {
        KubeletConfig::parse_and_validate(yaml.as_bytes())
            .unwrap_or_else(|e| panic!("parse {yaml:?}: {e}"))
    }

    /// Drop-ins are parsed one by one, but only validated merged (one may
    /// need another's fields to be valid).
    fn layer(drop_ins: &[&str]) -> DropInLayer {
        let mut layer = DropInLayer::new();
        for d in drop_ins {
            layer.push(
                &KubeletConfig::parse(d.as_bytes()).unwrap_or_else(|e| panic!("parse {d:?}: {e}")),
            );
        }
        layer
    }

    /// `base` with `drop_ins` merged has the effective config (and hash) of
    /// `expected` written as one main config.
    #[track_caller]
    fn assert_merges_to(base: &str, drop_ins: &[&str], expected: &str) -> KubeletConfig {
        let merged = config(base)
            .with_drop_ins(&layer(drop_ins))
            .expect("merged config parses");
        merged.validate().expect("merged config validates");
        let expected = config(expected);
        assert_eq!(merged.effective(), expected.effective());
        assert_eq!(merged.hash(), expected.hash());
        merged
    }

    // The three examples of "Kubelet Configuration Directory Merging"
    // (kubernetes/website, content/en/docs/reference/node/
    // kubelet-config-directory-merging.md), linked from the "Set Kubelet
    // Parameters Via A Configuration File" task (#kubelet-conf-d).

    #[test]
    fn docs_example_structure_fields() {
        assert_merges_to(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: "5m"
    cacheUnauthorizedTTL: "30s"
serializeImagePulls: false
address: "192.168.0.1"
"#,
            &[r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authorization:
  mode: AlwaysAllow
  webhook:
    cacheAuthorizedTTL: "8m"
    cacheUnauthorizedTTL: "45s"
address: "192.168.0.8"
"#],
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
serializeImagePulls: false
authorization:
  mode: AlwaysAllow
  webhook:
    cacheAuthorizedTTL: "8m"
    cacheUnauthorizedTTL: "45s"
address: "192.168.0.8"
"#,
        );
    }

    #[test]
    fn docs_example_lists_are_replaced() {
        let merged = assert_merges_to(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
serializeImagePulls: false
clusterDNS:
  - "192.168.0.9"
  - "192.168.0.8"
"#,
            &[r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
clusterDNS:
  - "192.168.0.2"
  - "192.168.0.3"
  - "192.168.0.5"
"#],
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
serializeImagePulls: false
clusterDNS:
  - "192.168.0.2"
  - "192.168.0.3"
  - "192.168.0.5"
"#,
        );
        assert_eq!(
            merged.effective()["clusterDNS"],
            json!(["192.168.0.2", "192.168.0.3", "192.168.0.5"])
        );
    }

    #[test]
    fn docs_example_maps_merge_key_by_key() {
        let merged = assert_merges_to(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
serializeImagePulls: false
featureGates:
  AllAlpha: false
  MemoryQoS: true
staticPodURLHeader:
  kubelet-api-support:
  - "Authorization: 234APSDFA"
  - "X-Custom-Header: 123"
  custom-static-pod:
  - "Authorization: 223EWRWER"
  - "X-Custom-Header: 456"
"#,
            &[r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
featureGates:
  MemoryQoS: false
  KubeletTracing: true
  DynamicResourceAllocation: true
staticPodURLHeader:
  custom-static-pod:
  - "Authorization: 223EWRWER"
  - "X-Custom-Header: 345"
"#],
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: 20250
serializeImagePulls: false
featureGates:
  AllAlpha: false
  MemoryQoS: false
  KubeletTracing: true
  DynamicResourceAllocation: true
staticPodURLHeader:
  kubelet-api-support:
  - "Authorization: 234APSDFA"
  - "X-Custom-Header: 123"
  custom-static-pod:
  - "Authorization: 223EWRWER"
  - "X-Custom-Header: 345"
"#,
        );
        assert_eq!(
            merged.effective()["featureGates"],
            json!({"AllAlpha": false, "MemoryQoS": false, "KubeletTracing": true, "DynamicResourceAllocation": true})
        );
    }

    /// The KEP's example (keps/sig-node/3983-drop-in-configuration), with
    /// the type meta every drop-in needs.
    #[test]
    fn kep_example() {
        assert_merges_to(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
clusterDNS:
 - 1.2.3.4
 - 1.2.3.5
"#,
            &[
                r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  x509:
    clientCAFile: /some/new/location
"#,
                r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
clusterDNS:
 - 1.2.3.6
"#,
            ],
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /some/new/location
clusterDNS:
 - 1.2.3.6
"#,
        );
    }

    /// The cases of the kubelet's own `TestMergeKubeletConfigurations`
    /// (cmd/kubelet/app/server_test.go) that involve no command-line flags:
    /// the main config, `10-kubelet.conf`, `20-kubelet.conf`, and the fields
    /// the test checks.
    #[test]
    fn kubelet_unit_test_cases() {
        let cases: &[(&str, [&str; 2], serde_json::Value)] = &[
            (
                "port: 9080\nreadOnlyPort: 10257",
                ["port: 9090", "port: 8080\nreadOnlyPort: 10255"],
                json!({"port": 8080, "readOnlyPort": 10255}),
            ),
            (
                "readOnlyPort: 10256\nkubeReserved:\n  memory: 70Mi\nsyncFrequency: 5m",
                [
                    "readOnlyPort: 10255\nkubeReserved:\n  memory: 150Mi\n  cpu: 200m",
                    "readOnlyPort: 10257\nkubeReserved:\n  memory: 100Mi",
                ],
                json!({"readOnlyPort": 10257, "kubeReserved": {"cpu": "200m", "memory": "100Mi"}, "syncFrequency": "5m"}),
            ),
            (
                "port: 9090\nclusterDNS:\n- 192.168.1.3\n- 192.168.1.4",
                [
                    "port: 9090\nsystemReserved:\n  memory: 1Gi",
                    "port: 8080\nreadOnlyPort: 10255\nsystemReserved:\n  memory: 2Gi\nclusterDNS:\n  - 192.168.1.1\n  - 192.168.1.5\n  - 192.168.1.8",
                ],
                json!({"port": 8080, "readOnlyPort": 10255, "systemReserved": {"memory": "2Gi"}, "clusterDNS": ["192.168.1.1", "192.168.1.5", "192.168.1.8"]}),
            ),
        ];
        let doc = |body: &str| format!("{HEADER}{body}\n");
        for (base, drop_ins, expected) in cases {
            let drop_ins = drop_ins.map(doc);
            let merged = config(&doc(base))
                .with_drop_ins(&layer(&[&drop_ins[0], &drop_ins[1]]))
                .unwrap();
            let effective = merged.effective();
            for (field, value) in expected.as_object().unwrap() {
                assert_eq!(&effective[field], value, "{base:?}: {field}");
            }
        }
    }

    /// The kubelet merges over its config as loaded, defaults included: a
    /// drop-in's `evictionHard` keeps the default thresholds it does not
    /// name, unlike the same mapping in the main config.
    #[test]
    fn eviction_hard_in_a_drop_in_keeps_the_default_thresholds() {
        let drop_in = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  memory.available: 200Mi\n";
        let merged = KubeletConfig::defaults()
            .with_drop_ins(&layer(&[drop_in]))
            .unwrap();
        assert_eq!(
            merged.effective()["evictionHard"],
            json!({"memory.available": "200Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%"})
        );
        assert_eq!(
            config(drop_in).effective()["evictionHard"],
            json!({"memory.available": "200Mi"})
        );
    }

    /// A `null` removes what an earlier drop-in set (merge patch), never a
    /// value of the main config (`json.Unmarshal` keeps it).
    #[test]
    fn null_undoes_an_earlier_drop_in_but_not_the_main_config() {
        let base = valid("maxPods: 50\nkubeReserved:\n  cpu: 100m");
        let merged = base
            .with_drop_ins(&layer(&[
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 70\nport: 10251\n",
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: null\nport: null\nkubeReserved: null\n",
            ]))
            .unwrap();
        assert_eq!(merged.effective()["maxPods"], 50);
        assert_eq!(merged.effective()["port"], 10250);
        assert_eq!(merged.effective()["kubeReserved"], json!({"cpu": "100m"}));
    }

    /// Nested structs the schema carries untouched merge field by field.
    #[test]
    fn logging_merges_field_by_field() {
        let base = valid("logging:\n  format: json\n  verbosity: 2\n  options:\n    json:\n      infoBufferSize: \"0\"");
        let merged = base
            .with_drop_ins(&layer(&[
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nlogging:\n  verbosity: 4\n  options:\n    json:\n      splitStream: true\n",
            ]))
            .unwrap();
        assert_eq!(
            merged.effective()["logging"],
            json!({"format": "json", "verbosity": 4, "options": {"json": {"infoBufferSize": "0", "splitStream": true}}})
        );
    }

    #[test]
    fn later_drop_ins_win_and_pivot_fields_merge_too() {
        let merged = valid("configTrialDuration: 5m")
            .with_drop_ins(&layer(&[
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 10\ncrashLoopThreshold: 2\n",
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 20\n",
            ]))
            .unwrap();
        assert_eq!(merged.effective()["maxPods"], 20);
        assert_eq!(merged.crash_loop_threshold(), 2);
        assert_eq!(
            merged.config_trial_duration(),
            std::time::Duration::from_secs(300)
        );
    }

    #[test]
    fn no_drop_ins_leave_the_config_as_it_is() {
        let base = valid("maxPods: 50");
        assert_eq!(base.with_drop_ins(&DropInLayer::new()).unwrap(), base);
        let only_type_meta =
            layer(&["apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"]);
        assert!(only_type_meta.is_empty());
        assert_eq!(base.with_drop_ins(&only_type_meta).unwrap(), base);
    }

    #[test]
    fn a_merged_config_is_validated_as_a_whole() {
        let merged = valid("maxPods: 50")
            .with_drop_ins(&layer(&[
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nport: 70000\n",
            ]))
            .unwrap();
        let err = merged.validate().unwrap_err().to_string();
        assert!(err.contains("port"), "{err}");
    }

    #[test]
    fn stored_layers_are_checked() {
        let good = layer(&[
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 10\n",
        ]);
        assert_eq!(DropInLayer::from_map(good.as_map().clone()).unwrap(), good);
        let mut bad = good.as_map().clone();
        bad.insert("maxPods".into(), json!("ten"));
        assert!(DropInLayer::from_map(bad).is_err());
        let mut unknown = good.as_map().clone();
        unknown.insert("fooBar".into(), json!(1));
        assert!(DropInLayer::from_map(unknown).is_err());
    }
}
