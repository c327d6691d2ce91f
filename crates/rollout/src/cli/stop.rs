//! `rollout global-stop on|off|status`: the ConfigMap whose existence halts every rollout.

use std::io::Write;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use serde_json::json;

use super::args::{self, Output};
use super::error::CliError;
use crate::controller_defaults::STOP_CONFIGMAP;

/// Sets, clears or shows the global stop switch in `namespace`.
pub(super) async fn global_stop(
    client: &Client,
    switch: args::Switch,
    namespace: &str,
    output: Output,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let name = STOP_CONFIGMAP;
    let failed = |action: &'static str| {
        move |source: kube::Error| CliError::StopSwitch {
            action,
            namespace: namespace.to_string(),
            name,
            source: source.into(),
        }
    };
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let on = match switch {
        args::Switch::On => {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": name},
                "data": {"reason": "set by kubectl pivot rollout global-stop on"},
            }))?;
            match cms.create(&PostParams::default(), &cm).await {
                Ok(_) => true,
                Err(kube::Error::Api(s)) if s.code == 409 => true,
                Err(e) => return Err(failed("create")(e)),
            }
        }
        args::Switch::Off => match cms.delete(name, &DeleteParams::default()).await {
            Ok(_) => false,
            Err(kube::Error::Api(s)) if s.code == 404 => false,
            Err(e) => return Err(failed("delete")(e)),
        },
        args::Switch::Status => cms.get_opt(name).await.map_err(failed("read"))?.is_some(),
    };
    let text = match output {
        Output::Json | Output::Yaml => {
            let value = json!({"globalStop": on, "configMap": format!("{namespace}/{name}")});
            output
                .write_structured(out, &value)
                .map_err(CliError::Output)?;
            return Ok(0);
        }
        Output::Table if on => format!(
            "global stop is ON (configmap {namespace}/{name} exists): every rollout is halted"
        ),
        Output::Table => format!("global stop is off (no configmap {namespace}/{name})"),
    };
    writeln!(out, "{text}").map_err(CliError::Output)?;
    Ok(0)
}
