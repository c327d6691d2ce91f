//! `rollout start`: create the resource, or point an existing one at another config (a
//! new revision). Flags not given keep the resource's values (or the defaults).

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Map, Value};

use super::args::StartArgs;
use super::error::{CliError, FlagError};
use super::{dryrun, precheck, selector, skew};
use crate::plan::settings::Settings;
use kp_contract::node_config::parse_annotation;
use kp_contract::rollout::{ConfigMapKey, IntOrPercent, KubeletConfigRollout, RolloutSpec};

fn int_or_percent(text: &str) -> IntOrPercent {
    text.trim().parse::<u32>().map_or_else(
        |_| IntOrPercent::Percent(text.trim().to_string()),
        IntOrPercent::Int,
    )
}

/// `--FLAG N|P%`, refused at once when negative (clap takes `-1` as the value).
fn count_or_percent(flag: &'static str, text: &str) -> Result<Value, FlagError> {
    if let Some(rest) = text.trim_start().strip_prefix('-') {
        let text = text.to_string();
        return Err(if rest.starts_with(|c: char| c.is_ascii_digit()) {
            FlagError::Negative { flag, text }
        } else {
            FlagError::NotACount { flag, text }
        });
    }
    Ok(serde_json::to_value(int_or_percent(text))?)
}

fn window(text: &str) -> Result<Value, FlagError> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let (days, start, duration) = match parts.as_slice() {
        [start, duration] => (Vec::new(), *start, *duration),
        [days, start, duration] => (
            days.split(',').map(str::to_string).collect(),
            *start,
            *duration,
        ),
        _ => return Err(FlagError::Window(text.to_string())),
    };
    Ok(json!({"days": days, "start": start, "duration": duration}))
}

/// The spec fields the flags set, as JSON (camelCase), for a create or a merge patch.
fn spec_fields(a: &StartArgs) -> Result<Map<String, Value>, FlagError> {
    let r = parse_annotation(&a.config).map_err(FlagError::Config)?;
    let mut spec = Map::new();
    let config = ConfigMapKey {
        namespace: r.namespace,
        name: r.name,
        key: r.key,
    };
    spec.insert("config".into(), serde_json::to_value(config)?);
    spec.insert("undo".into(), json!(false));
    let mut set = |k: &str, v: Value| {
        spec.insert(k.to_string(), v);
    };
    if let Some(text) = &a.selector {
        let parsed = selector::parse(text).map_err(|source| FlagError::Selector {
            text: text.clone(),
            source,
        })?;
        let (labels, expressions) = selector::spec_fields(&parsed)?;
        set("nodeSelector", Value::Object(labels));
        set("nodeSelectorExpressions", expressions);
    }
    if let Some(n) = a.canary {
        set("canary", json!(n));
    }
    if let Some(b) = &a.batch {
        set("batch", count_or_percent("batch", b)?);
    }
    if let Some(n) = a.max_failures {
        set("maxFailures", json!(n));
    }
    if let Some(s) = &a.soak {
        set("soak", json!(s));
    }
    if a.paused {
        set("paused", json!(true));
    }
    if !a.windows.is_empty() {
        let windows: Result<Vec<Value>, FlagError> = a.windows.iter().map(|w| window(w)).collect();
        set("maintenanceWindows", Value::Array(windows?));
    }
    let mut mu = Map::new();
    if let Some(v) = &a.max_unavailable {
        mu.insert("value".into(), count_or_percent("max-unavailable", v)?);
    }
    if let Some(k) = &a.topology_key {
        mu.insert("topologyKey".into(), json!(k));
    }
    if !mu.is_empty() {
        set("maxUnavailable", Value::Object(mu));
    }
    let mut gates = Map::new();
    for (key, value) in [
        ("configActiveTimeout", &a.config_active_timeout),
        ("nodeReadyTimeout", &a.node_ready_timeout),
        ("noFallbackFor", &a.no_fallback_for),
        ("podsReadyTimeout", &a.pods_ready_timeout),
    ] {
        if let Some(v) = value {
            gates.insert(key.into(), json!(v));
        }
    }
    if a.no_pods_gate {
        gates.insert("podsReady".into(), json!(false));
    }
    if !gates.is_empty() {
        set("healthGates", Value::Object(gates));
    }
    Ok(spec)
}

/// The flags' errors, before any request (a typo never waits on the API server).
pub fn check(a: &StartArgs) -> Result<(), FlagError> {
    spec_fields(a).map(|_| ())
}

/// What `start` did.
pub enum Started {
    /// Created or updated.
    Rollout(Box<KubeletConfigRollout>),
    /// `--dry-run`: what each node would do; nothing changed.
    DryRun {
        config: ConfigMapKey,
        plans: Vec<dryrun::NodePlan>,
    },
}

/// Creates or updates the rollout; the spec is checked here first so that a typo is a
/// clear error at once, not an Invalid phase later, then the ConfigMap, its payload and
/// the selector ([`precheck`]); warnings go to stderr.
pub async fn start(client: &Client, a: &StartArgs) -> Result<Started, CliError> {
    let mut fields = spec_fields(a)?;
    let api: Api<KubeletConfigRollout> = Api::all(client.clone());
    let existing = super::get_opt(client, &a.name).await?;
    // A new -l replaces the existing rollout's labels, not merges with them.
    if let (Some(r), Some(Value::Object(labels))) = (&existing, fields.get_mut("nodeSelector")) {
        selector::unset_old_labels(labels, &r.spec.node_selector);
    }
    let mut spec_json = match &existing {
        Some(r) => serde_json::to_value(&r.spec)?,
        None => json!({}),
    };
    if let Value::Object(m) = &mut spec_json {
        for (k, v) in fields.clone() {
            match (m.get_mut(&k), v) {
                (Some(Value::Object(old)), Value::Object(new)) => {
                    for (k, v) in new {
                        if v.is_null() {
                            old.remove(&k);
                        } else {
                            old.insert(k, v);
                        }
                    }
                }
                (_, v) => {
                    m.insert(k, v);
                }
            }
        }
    }
    let spec: RolloutSpec = serde_json::from_value(spec_json).map_err(CliError::InvalidSpec)?;
    Settings::of(&spec).map_err(CliError::InvalidSettings)?;
    let mut checked = precheck::check(client, &spec.config, &spec.selector(), a.force).await?;
    checked
        .warnings
        .extend(skew::check(client, &spec, a.force).await?);
    for warning in &checked.warnings {
        eprintln!("warning: {warning}");
    }
    if a.dry_run {
        let plans = dryrun::plan(client, &checked.nodes, checked.config.as_ref()).await;
        return Ok(Started::DryRun {
            config: spec.config,
            plans,
        });
    }
    let done = match existing {
        None => {
            let obj = KubeletConfigRollout::new(&a.name, spec);
            api.create(&PostParams::default(), &obj)
                .await
                .map_err(|source| CliError::Create {
                    name: a.name.clone(),
                    source: source.into(),
                })
        }
        Some(_) => {
            let patch = json!({"spec": Value::Object(fields)});
            api.patch(&a.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|source| CliError::Update {
                    name: a.name.clone(),
                    source: source.into(),
                })
        }
    }?;
    Ok(Started::Rollout(Box::new(done)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_counts_are_values_refused_with_a_clear_message() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            start: StartArgs,
        }
        let parse = |extra: &[&str]| {
            let mut args = vec!["start", "r1", "--config", "kc/cfg"];
            args.extend_from_slice(extra);
            Cli::try_parse_from(args)
        };
        let err = parse(&["--canary", "-1"]).err().unwrap().to_string();
        assert!(
            err.contains("-1 is negative; a count of nodes is 0 or more"),
            "{err}"
        );
        let err = parse(&["--max-failures", "-3"]).err().unwrap().to_string();
        assert!(err.contains("-3 is negative"), "{err}");
        let cli = parse(&["--batch", "-1"]).ok().unwrap();
        let err = check(&cli.start).unwrap_err().to_string();
        assert!(err.contains("--batch -1 is negative"), "{err}");
        let cli = parse(&["--max-unavailable", "-10%"]).ok().unwrap();
        let err = check(&cli.start).unwrap_err().to_string();
        assert!(err.contains("--max-unavailable -10% is negative"), "{err}");
        let cli = parse(&["--canary", "0", "--batch", "10%"]).ok().unwrap();
        assert!(check(&cli.start).is_ok());
    }

    #[test]
    fn windows_and_selectors_parse() {
        assert_eq!(window("22:00 4h").unwrap()["start"], "22:00");
        assert_eq!(
            window("Sat,Sun 22:00 4h").unwrap()["days"],
            json!(["Sat", "Sun"])
        );
        assert!(window("22:00").is_err());
        assert_eq!(int_or_percent("5"), IntOrPercent::Int(5));
        assert_eq!(int_or_percent("10%"), IntOrPercent::Percent("10%".into()));
    }
}
