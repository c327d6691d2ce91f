//! The fields of the `--config` KubeletConfiguration the stand-in acts on.

use crate::error::Error;
use crate::{
    DEFAULT_CPU_MANAGER_POLICY, DEFAULT_HEALTHZ_BIND_ADDRESS, DEFAULT_HEALTHZ_PORT,
    DEFAULT_MEMORY_MANAGER_POLICY,
};

/// The fields of the `--config` KubeletConfiguration the stand-in acts on.
#[derive(Debug)]
pub(super) struct KubeletConfig {
    pub(super) cpu_manager_policy: String,
    pub(super) memory_manager_policy: String,
    pub(super) healthz_bind_address: String,
    /// 0: no healthz server.
    pub(super) healthz_port: u16,
}

impl KubeletConfig {
    /// The fields from a JSON object; defaults for absent fields and when `text` is not a JSON
    /// object (or there is no config). A present field of the wrong type is an error.
    pub(super) fn parse(text: Option<&str>) -> Result<Self, Error> {
        use serde_json::Value;
        let value = text.and_then(|text| serde_json::from_str::<Value>(text).ok());
        let fields = value.as_ref().and_then(Value::as_object);
        let field = |name: &str| fields.and_then(|fields| fields.get(name));
        // Empty strings get the default too, as in the kubelet's defaulting.
        let string = |name: &'static str, default: &str| match field(name) {
            None | Some(Value::Null) => Ok(default.to_owned()),
            Some(Value::String(value)) if value.is_empty() => Ok(default.to_owned()),
            Some(Value::String(value)) => Ok(value.clone()),
            Some(other) => Err(Error::Config {
                field: name,
                why: format!("expected a string, got {other}"),
            }),
        };
        let healthz_port = match field("healthzPort") {
            None | Some(Value::Null) => DEFAULT_HEALTHZ_PORT,
            Some(other) => other
                .as_u64()
                .and_then(|port| u16::try_from(port).ok())
                .ok_or_else(|| Error::Config {
                    field: "healthzPort",
                    why: format!("expected a port 0-65535, got {other}"),
                })?,
        };
        Ok(KubeletConfig {
            cpu_manager_policy: string("cpuManagerPolicy", DEFAULT_CPU_MANAGER_POLICY)?,
            memory_manager_policy: string("memoryManagerPolicy", DEFAULT_MEMORY_MANAGER_POLICY)?,
            healthz_bind_address: string("healthzBindAddress", DEFAULT_HEALTHZ_BIND_ADDRESS)?,
            healthz_port,
        })
    }
}
