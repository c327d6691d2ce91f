//! TEMPORARY minimal stand-in, replaced by the full module (being written).
use std::time::Duration;

pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub const KIND: &str = "KubeletConfiguration";
pub const HASH_ALGORITHM: &str = "sha256-canonical-json-v1";
pub const DEFAULT_CRASH_LOOP_THRESHOLD: u32 = 10;
pub const DEFAULT_CONFIG_TRIAL_DURATION: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Parse(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct KubeletConfig {
    doc: serde_json::Map<String, serde_json::Value>,
}

impl KubeletConfig {
    pub fn parse(bytes: &[u8]) -> Result<KubeletConfig, ConfigError> {
        let v: serde_json::Value =
            serde_yaml_ng::from_slice(bytes).map_err(|e| ConfigError::Parse(e.to_string()))?;
        match v {
            serde_json::Value::Object(doc) => Ok(KubeletConfig { doc }),
            _ => Err(ConfigError::Parse("not a mapping".into())),
        }
    }
    pub fn defaults() -> KubeletConfig {
        let mut doc = serde_json::Map::new();
        doc.insert("apiVersion".into(), API_VERSION.into());
        doc.insert("kind".into(), KIND.into());
        KubeletConfig { doc }
    }
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(p) = self.doc.get("port").and_then(|p| p.as_u64()) {
            if !(1..=65535).contains(&p) {
                return Err(ConfigError::Parse(format!(
                    "port ({p}) must be between 1 and 65535, inclusive"
                )));
            }
        }
        Ok(())
    }
    pub fn parse_and_validate(bytes: &[u8]) -> Result<KubeletConfig, ConfigError> {
        let c = Self::parse(bytes)?;
        c.validate()?;
        Ok(c)
    }
    pub fn effective(&self) -> serde_json::Value {
        serde_json::Value::Object(self.doc.clone())
    }
    pub fn effective_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.effective()).unwrap_or_default()
    }
    pub fn hash(&self) -> String {
        use sha2::Digest;
        sha2::Sha256::digest(self.effective_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
    pub fn crash_loop_threshold(&self) -> u32 {
        self.doc
            .get("crashLoopThreshold")
            .and_then(|v| v.as_u64())
            .map(|v| v as u32)
            .unwrap_or(DEFAULT_CRASH_LOOP_THRESHOLD)
    }
    pub fn config_trial_duration(&self) -> Duration {
        self.doc
            .get("configTrialDuration")
            .and_then(|v| v.as_str())
            .and_then(|s| humantime::parse_duration(s).ok())
            .unwrap_or(DEFAULT_CONFIG_TRIAL_DURATION)
    }
}
