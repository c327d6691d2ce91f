//! The operator's commands: `kubectl pivot rollout start|status|pause|resume|undo|history`
//! (the same binary installed as `kubectl-pivot`), the global stop switch and the CRD.

pub mod args;
mod error;
mod render;
mod start;

use std::io::{IsTerminal, Write};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use serde_json::json;

pub use args::{ClusterArgs, ControllerArgs, Output, RolloutAction, RolloutArgs};
pub use error::{CliError, ClientError, CountError, FlagError};
pub use render::{bar, exit_code, history_text, invalid_text, settled, status_text};

use super::types::{self, DecodeError, KubeletConfigRollout};
use crate::cluster::agent::Component;

/// Exit status for a rollout that paused because nodes failed, or is invalid.
pub const EXIT_FAILED: u8 = 3;
/// Exit status of `status --watch --timeout D` when D passed first.
pub const EXIT_TIMEOUT: u8 = 4;

/// Builds a client the way kubectl does: --kubeconfig, else $KUBECONFIG, else
/// ~/.kube/config (with --context), else the in-cluster config.
pub async fn client(args: &ClusterArgs, component: Component) -> Result<Client, ClientError> {
    let opts = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let mut config = match &args.kubeconfig {
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
    config.default_retry = false;
    crate::cluster::agent::identify(&mut config, component);
    crate::cluster::retry::client(config).map_err(ClientError::Build)
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
        source,
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
        .map_err(|source| CliError::Update {
            name: name.to_string(),
            source,
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
        Output::Json => writeln!(
            out,
            "{}",
            serde_json::to_string(r).map_err(std::io::Error::other)?
        ),
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
        Output::Json => writeln!(
            out,
            "{}",
            serde_json::to_string(obj).map_err(std::io::Error::other)?
        ),
        Output::Table => write!(out, "{}", invalid_text(obj, err)),
    }
}

/// Runs one `rollout` command; returns the exit status.
pub async fn run(args: RolloutArgs, out: &mut impl Write) -> Result<u8, CliError> {
    if let RolloutAction::Crd = args.action {
        let crd = serde_yaml_ng::to_string(&super::types::crd()?).map_err(CliError::RenderCrd)?;
        write!(out, "{crd}").map_err(CliError::PrintCrd)?;
        return Ok(0);
    }
    if let RolloutAction::Start(a) = &args.action {
        start::check(a)?;
    }
    let client = client(&args.cluster, Component::Cli).await?;
    let output = args.output;
    let io = CliError::Output;
    match args.action {
        RolloutAction::Crd => Ok(0),
        RolloutAction::Start(a) => {
            let r = start::start(&client, &a).await?;
            match output {
                Output::Json => print_object(out, &r, output).map_err(io)?,
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
                    return watch_status(&client, &name, output, out).await;
                };
                return match tokio::time::timeout(limit, watch_status(&client, &name, output, out))
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
                Output::Json => {
                    let history = r.status.map(|s| s.history).unwrap_or_default();
                    writeln!(out, "{}", serde_json::to_string(&history)?).map_err(io)?
                }
                Output::Table => write!(out, "{}", history_text(&r)).map_err(io)?,
            }
            Ok(0)
        }
        RolloutAction::GlobalStop { switch, namespace } => {
            global_stop(&client, switch, &namespace, output, out).await
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
        Output::Json => print_object(out, r, output),
        Output::Table => writeln!(out, "{msg}"),
    }
    .map_err(CliError::Output)?;
    Ok(0)
}

async fn global_stop(
    client: &Client,
    switch: args::Switch,
    namespace: &str,
    output: Output,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let name = super::controller_defaults::STOP_CONFIGMAP;
    let failed = |action: &'static str| {
        move |source| CliError::StopSwitch {
            action,
            namespace: namespace.to_string(),
            name,
            source,
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
        Output::Json => {
            json!({"globalStop": on, "configMap": format!("{namespace}/{name}")}).to_string()
        }
        Output::Table if on => format!(
            "global stop is ON (configmap {namespace}/{name} exists): every rollout is halted"
        ),
        Output::Table => format!("global stop is off (no configmap {namespace}/{name})"),
    };
    writeln!(out, "{text}").map_err(CliError::Output)?;
    Ok(0)
}

/// Follows one rollout: redraws on every change (in place on a terminal, one snapshot per
/// change otherwise, one JSON document per line with -o json) until it settles.
async fn watch_status(
    client: &Client,
    name: &str,
    output: Output,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(api(client), cfg).boxed();
    let tty = std::io::stdout().is_terminal() && output == Output::Table;
    let mut last_lines = 0usize;
    let mut last: Option<KubeletConfigRollout> = None;
    let io = CliError::Output;
    let mut seen = false;
    while let Some(event) = stream.next().await {
        let raw = match event {
            Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => o,
            Ok(watcher::Event::Delete(_)) => {
                return Err(CliError::Deleted {
                    name: name.to_string(),
                })
            }
            Ok(watcher::Event::Init) => continue,
            Ok(watcher::Event::InitDone) => {
                if !seen {
                    return Err(CliError::NotFound {
                        name: name.to_string(),
                    });
                }
                continue;
            }
            Err(err) => {
                eprintln!("watch interrupted ({err}); retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        seen = true;
        let obj = match Read::of(raw) {
            Read::Valid(r) => *r,
            Read::Invalid(obj, err) => {
                if tty && last_lines > 0 {
                    write!(out, "\x1b[{last_lines}A\x1b[J").map_err(io)?;
                } else if last.is_some() {
                    writeln!(out).map_err(io)?;
                }
                print_invalid(out, &obj, &err, output).map_err(io)?;
                out.flush().map_err(io)?;
                return Ok(EXIT_FAILED);
            }
        };
        if last.as_ref().is_some_and(|l| l.status == obj.status) {
            continue;
        }
        match output {
            Output::Json => print_object(out, &obj, output).map_err(io)?,
            Output::Table => {
                let text = status_text(&obj);
                if tty && last_lines > 0 {
                    write!(out, "\x1b[{last_lines}A\x1b[J").map_err(io)?;
                } else if last.is_some() {
                    writeln!(out).map_err(io)?;
                }
                write!(out, "{text}").map_err(io)?;
                last_lines = text.lines().count();
            }
        }
        out.flush().map_err(io)?;
        let done = settled(&obj);
        let code = exit_code(&obj);
        last = Some(obj);
        if done {
            return Ok(code);
        }
    }
    Err(CliError::WatchEnded)
}
