//! `rollout status --watch`.

use std::io::{IsTerminal, Write};

use futures::StreamExt;
use kube::runtime::watcher;
use kube::Client;

use super::args::Output;
use super::error::CliError;
use super::{
    api, exit_code, print_invalid, print_object, settled, status_line, status_text, Read,
    EXIT_FAILED,
};
use kp_contract::rollout::KubeletConfigRollout;

/// Follows one rollout until it settles: on a terminal the status is redrawn in place on
/// every change; otherwise one line per change ([`status_line`]), or one JSON document
/// per line with -o json.
pub(super) async fn watch_status(
    client: &Client,
    server: &str,
    name: &str,
    output: Output,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(api(client), cfg).boxed();
    let tty = std::io::stdout().is_terminal() && output == Output::Table;
    let mut last_lines = 0usize;
    // Not a terminal: the last line printed (one line per change, as kubectl rollout
    // status prints).
    let mut last_line: Option<String> = None;
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
                eprintln!(
                    "watch interrupted ({}); retrying",
                    kp_runtime::api_error::shown_watch(&err, Some(server))
                );
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
            // One YAML document per change, as `kubectl get -w -o yaml` prints them.
            Output::Yaml => {
                if last.is_some() {
                    writeln!(out, "---").map_err(io)?;
                }
                print_object(out, &obj, output).map_err(io)?
            }
            Output::Table if tty => {
                let text = status_text(&obj);
                if last_lines > 0 {
                    write!(out, "\x1b[{last_lines}A\x1b[J").map_err(io)?;
                }
                write!(out, "{text}").map_err(io)?;
                last_lines = text.lines().count();
            }
            Output::Table => {
                let line = status_line(&obj);
                if last_line.as_deref() != Some(line.as_str()) {
                    writeln!(out, "{line}").map_err(io)?;
                    last_line = Some(line);
                }
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
