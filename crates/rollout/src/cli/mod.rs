//! The operator's commands: `kubectl pivot rollout start|status|pause|resume|undo|history`
//! (the same binary installed as `kubectl-pivot`), the global stop switch and the CRD.
//!
//! - [`configcheck`]: `kubelet-pivot config check`, for CI pipelines (no cluster);
//! - [`args`]: the flags; `start`: creating or re-pointing a rollout; [`precheck`]: what
//!   `start` checks first (the ConfigMap, its payload, the selector); [`dryrun`]: `start
//!   --dry-run`, per node the change class and action; `watch`: `status --watch`; `stop`:
//!   the global stop switch; `render`: the text the commands print; `error`: what can go
//!   wrong, each with its context.

pub mod args;
pub mod configcheck;
pub mod dryrun;
mod error;
pub mod precheck;
mod render;
pub mod selector;
mod skew;
mod start;
mod stop;
mod watch;

use std::io::Write;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::json;

pub use args::{ClusterArgs, ControllerArgs, Output, RolloutAction, RolloutArgs};
pub use error::{CliError, ClientError, CountError, FlagError};
use kp_runtime::api_error::Unreachable;
pub use render::{
    bar, condition_text, exit_code, history_text, invalid_text, problems, settled, status_line,
    status_text,
};

use kp_contract::rollout::{self as types, DecodeError, KubeletConfigRollout};
use kp_runtime::agent::Component;

/// Exit status for a rollout that paused because nodes failed, or is invalid.
pub const EXIT_FAILED: u8 = 3;
/// Exit status of `status --watch --timeout D` when D passed first.
pub const EXIT_TIMEOUT: u8 = 4;

/// Builds a client the way kubectl does: --kubeconfig, else $KUBECONFIG, else
/// ~/.kube/config (with --context), else the in-cluster config.
pub async fn client(args: &ClusterArgs, component: Component) -> Result<Client, ClientError> {
    kp_runtime::client::build(config(args).await?, component).map_err(ClientError::Build)
}

/// The API server's address as kubectl names it in its errors: `HOST:PORT` (or `HOST`
/// when the URL gives no port).
fn server_address(config: &kube::Config) -> String {
    kp_runtime::api_error::address(&config.cluster_url)
}

/// The client configuration, found as [`client`] says.
async fn config(args: &ClusterArgs) -> Result<kube::Config, ClientError> {
    let opts = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                ClientError::ReadKubeconfig {
                    path: path.clone(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|source| ClientError::UseKubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None => match kube::Config::from_kubeconfig(&opts).await {
            Ok(c) => c,
            Err(err) if args.context.is_some() => return Err(ClientError::Kubeconfig(err)),
            Err(err) => kube::Config::incluster().map_err(|_| ClientError::NoConfig(err))?,
        },
    };
    Ok(config)
}

/// The rollouts, untyped: an object the types cannot read is still shown (see [`Read`]).
fn api(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::erase::<KubeletConfigRollout>(&()),
    )
}

/// A rollout as read from the API server.
enum Read {
    Valid(Box<KubeletConfigRollout>),
    /// The object cannot be read as a rollout (the controller skips it and reports it on
    /// the object): the raw object and why.
    Invalid(Box<DynamicObject>, DecodeError),
}

impl Read {
    fn of(obj: DynamicObject) -> Read {
        let decoded = serde_json::to_value(&obj)
            .map_err(|e| DecodeError {
                field: ".".to_string(),
                reason: e.to_string(),
            })
            .and_then(types::decode);
        match decoded {
            Ok(r) => Read::Valid(Box::new(r)),
            Err(err) => Read::Invalid(Box::new(obj), err),
        }
    }

    /// The rollout, or the error a command that needs it reports.
    fn rollout(self, name: &str) -> Result<KubeletConfigRollout, CliError> {
        match self {
            Read::Valid(r) => Ok(*r),
            Read::Invalid(_, source) => Err(CliError::Unreadable {
                name: name.to_string(),
                source,
            }),
        }
    }
}

fn read_error(name: &str) -> impl FnOnce(kube::Error) -> CliError + '_ {
    move |source| CliError::Read {
        name: name.to_string(),
        source: source.into(),
    }
}

async fn read(client: &Client, name: &str) -> Result<Read, CliError> {
    api(client)
        .get_opt(name)
        .await
        .map_err(read_error(name))?
        .map(Read::of)
        .ok_or_else(|| CliError::NotFound {
            name: name.to_string(),
        })
}

/// The rollout, if it exists (an error if it cannot be read).
async fn get_opt(client: &Client, name: &str) -> Result<Option<KubeletConfigRollout>, CliError> {
    match api(client).get_opt(name).await {
        Ok(Some(obj)) => Read::of(obj).rollout(name).map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(read_error(name)(e)),
    }
}

async fn get(client: &Client, name: &str) -> Result<KubeletConfigRollout, CliError> {
    read(client, name).await?.rollout(name)
}

async fn patch_spec(
    client: &Client,
    name: &str,
    patch: serde_json::Value,
) -> Result<KubeletConfigRollout, CliError> {
    let obj = api(client)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| match source {
            // The name is all a merge patch needs: a 404 is the rollout missing.
            kube::Error::Api(status) if status.code == 404 => CliError::NotFound {
                name: name.to_string(),
            },
            source => CliError::Update {
                name: name.to_string(),
                source: source.into(),
            },
        })?;
    match Read::of(obj) {
        Read::Valid(r) => Ok(*r),
        Read::Invalid(_, source) => Err(CliError::ChangedButUnreadable {
            name: name.to_string(),
            source,
        }),
    }
}

fn print_object(
    out: &mut impl Write,
    r: &KubeletConfigRollout,
    output: Output,
) -> std::io::Result<()> {
    match output {
        Output::Json | Output::Yaml => output.write_structured(out, r),
        Output::Table => write!(out, "{}", status_text(r)),
    }
}

/// A rollout that cannot be read: `-o json` prints the object as stored, the table says
/// why it is invalid.
fn print_invalid(
    out: &mut impl Write,
    obj: &DynamicObject,
    err: &DecodeError,
    output: Output,
) -> std::io::Result<()> {
    match output {
        Output::Json | Output::Yaml => output.write_structured(out, obj),
        Output::Table => write!(out, "{}", invalid_text(obj, err)),
    }
}

/// Runs one `rollout` command; returns the exit status.
pub async fn run(args: RolloutArgs, out: &mut impl Write) -> Result<u8, CliError> {
    if let RolloutAction::Crd = args.action {
        let given = [
            (args.cluster.kubeconfig.is_some(), "--kubeconfig"),
            (args.cluster.context.is_some(), "--context"),
            (args.output.is_some(), "-o/--output"),
        ];
        if let Some((_, flag)) = given.into_iter().find(|(given, _)| *given) {
            return Err(FlagError::CrdTakesNo(flag).into());
        }
        let crd =
            serde_yaml_ng::to_string(&kp_contract::rollout::crd()?).map_err(CliError::RenderCrd)?;
        write!(out, "{crd}").map_err(CliError::PrintCrd)?;
        return Ok(0);
    }
    if let RolloutAction::Start(a) = &args.action {
        start::check(a)?;
    }
    let config = config(&args.cluster).await?;
    let server = server_address(&config);
    let client = kp_runtime::client::build(config, Component::Cli).map_err(ClientError::Build)?;
    run_with(client, &server, args, out).await.map_err(|err| {
        // No answer at all: kubectl's words about the server, and nothing else.
        match Unreachable::find(&err) {
            Some(failure) => CliError::Unreachable { server, failure },
            None => err,
        }
    })
}

/// [`run`] once the client is built.
async fn run_with(
    client: Client,
    server: &str,
    args: RolloutArgs,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let output = args.output.unwrap_or(Output::Table);
    let io = CliError::Output;
    match args.action {
        RolloutAction::Crd => Ok(0),
        RolloutAction::Start(a) => {
            let r = match start::start(&client, &a).await? {
                start::Started::Rollout(r) => r,
                start::Started::DryRun { config, plans } => {
                    match output {
                        Output::Json | Output::Yaml => output.write_structured(
                            out,
                            &json!({
                                "rollout": a.name,
                                "config": config.annotation(),
                                "nodes": plans,
                                "totals": dryrun::Totals::of(&plans),
                            }),
                        ),
                        Output::Table => write!(out, "{}", dryrun::text(&a.name, &config, &plans)),
                    }
                    .map_err(io)?;
                    return Ok(0);
                }
            };
            match output {
                Output::Json | Output::Yaml => print_object(out, &r, output).map_err(io)?,
                Output::Table => {
                    let st = r.status.clone().unwrap_or_default();
                    let msg = if super::plan::needs_new_revision(&r.spec, &st) {
                        format!("rollout {} of {} started", a.name, a.config)
                    } else {
                        format!(
                            "rollout {} already rolls {} (revision {}, {}); its settings were updated",
                            a.name, a.config, st.revision, st.phase
                        )
                    };
                    writeln!(
                        out,
                        "{msg}; follow it with: kubectl pivot rollout status {} --watch",
                        a.name
                    )
                    .map_err(io)?
                }
            }
            Ok(0)
        }
        RolloutAction::Status {
            name,
            watch,
            timeout,
        } => {
            if watch {
                let Some(limit) = timeout else {
                    return watch::watch_status(&client, server, &name, output, out).await;
                };
                return match tokio::time::timeout(
                    limit,
                    watch::watch_status(&client, server, &name, output, out),
                )
                .await
                {
                    Ok(result) => result,
                    Err(_) => {
                        eprintln!(
                            "rollout {name} did not settle within {}",
                            humantime::format_duration(limit)
                        );
                        Ok(EXIT_TIMEOUT)
                    }
                };
            }
            match read(&client, &name).await? {
                Read::Valid(r) => {
                    print_object(out, &r, output).map_err(io)?;
                    Ok(exit_code(&r))
                }
                Read::Invalid(obj, err) => {
                    print_invalid(out, &obj, &err, output).map_err(io)?;
                    Ok(EXIT_FAILED)
                }
            }
        }
        RolloutAction::Pause { name } => {
            let r = patch_spec(&client, &name, json!({"spec": {"paused": true}})).await?;
            report(out, &r, output, &format!("rollout {name} paused"))
        }
        RolloutAction::Resume { name } => {
            let current = get(&client, &name).await?;
            let st = current.status.clone().unwrap_or_default();
            let ack = format!("{}/{}", st.revision, st.failures.len());
            let patch = json!({
                "metadata": {"annotations": {super::ACK_ANNOTATION: ack}},
                "spec": {"paused": false},
            });
            let r = patch_spec(&client, &name, patch).await?;
            let msg = match st.failures.len() {
                0 => format!("rollout {name} resumed"),
                1 => format!("rollout {name} resumed; its failed node is acknowledged and stays as it is"),
                n => format!("rollout {name} resumed; its {n} failed nodes are acknowledged and stay as they are"),
            };
            report(out, &r, output, &msg)
        }
        RolloutAction::Undo { name } => {
            let r = patch_spec(&client, &name, json!({"spec": {"undo": true}})).await?;
            report(out, &r, output, &format!(
                "rollout {name}: undoing its current revision; the nodes it changed go back to their previous config"
            ))
        }
        RolloutAction::History { name } => {
            let r = get(&client, &name).await?;
            match output {
                Output::Json | Output::Yaml => {
                    let history = r.status.map(|s| s.history).unwrap_or_default();
                    output.write_structured(out, &history).map_err(io)?
                }
                Output::Table => write!(out, "{}", history_text(&r)).map_err(io)?,
            }
            Ok(0)
        }
        RolloutAction::GlobalStop { switch, namespace } => {
            stop::global_stop(&client, switch, &namespace, output, out).await
        }
    }
}

fn report(
    out: &mut impl Write,
    r: &KubeletConfigRollout,
    output: Output,
    msg: &str,
) -> Result<u8, CliError> {
    match output {
        Output::Json | Output::Yaml => print_object(out, r, output),
        Output::Table => writeln!(out, "{msg}"),
    }
    .map_err(CliError::Output)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r1() -> KubeletConfigRollout {
        let spec = serde_json::from_value(json!({
            "config": {"namespace": "kubelet-config", "name": "c", "key": "kubelet"}
        }))
        .expect("a spec");
        KubeletConfigRollout::new("r1", spec)
    }

    #[test]
    fn json_output_is_indented_as_status_o_json_and_kubectl_print_it() {
        let r = r1();
        let mut out = Vec::new();
        print_object(&mut out, &r, Output::Json).expect("printed");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.starts_with("{\n  \""), "{text}");
        assert!(text.ends_with("}\n"), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(back["metadata"]["name"], "r1", "{text}");
    }

    #[test]
    fn yaml_output_is_the_object_as_kubectl_prints_it() {
        let r = r1();
        let mut out = Vec::new();
        print_object(&mut out, &r, Output::Yaml).expect("printed");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(
            text.starts_with("apiVersion: kubelet-pivot.io/v1alpha1\nkind: KubeletConfigRollout\n"),
            "{text}"
        );
        assert!(
            text.contains("\nmetadata:\n") && text.contains("\n  name: r1\n"),
            "{text}"
        );
        assert!(text.ends_with('\n') && !text.ends_with("\n\n"), "{text}");
        let back: KubeletConfigRollout = serde_yaml_ng::from_str(&text).expect("YAML");
        assert_eq!(back.spec.config.name, "c");
    }
}
