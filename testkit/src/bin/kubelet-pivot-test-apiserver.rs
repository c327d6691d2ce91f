//! `kubelet-pivot-test-apiserver`: the test API server (the `testkit` crate) as a process, to
//! try the API flow by hand with kubectl or to drive `scripts/demo.sh`.
//!
//! It serves on `127.0.0.1` (a free port, or `--port`), creates the Node (`--node`, default the
//! hostname; the `kubelet-config` namespace exists from the start), writes a kubeconfig for it
//! (`--kubeconfig`) and, with `--node-kubeconfig`, one with the node's credentials (user
//! `system:node:NODE`, authorized like a kubelet), prints the address and the kubeconfig paths,
//! and runs until SIGTERM or SIGINT. Each kubeconfig is written to a temp file and renamed into
//! place, so a script may use it as soon as it exists; it is removed on exit.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use testkit::ApiServer;

const NAME: &str = "kubelet-pivot-test-apiserver";

const USAGE: &str = "\
Usage: kubelet-pivot-test-apiserver [--port PORT] [--node NAME] [--kubeconfig FILE]
                                    [--node-kubeconfig FILE]

Serves the strict fake Kubernetes API server of kubelet-pivot's tests on 127.0.0.1 until
SIGTERM or SIGINT (Ctrl-C).

Options:
  --port PORT        port to listen on (default 0: a free port)
  --node NAME        the Node to create (default: the hostname)
  --kubeconfig FILE  where to write a kubeconfig for the server (default:
                     $TMPDIR/kubelet-pivot-test-apiserver-PID.kubeconfig); removed on exit
  --node-kubeconfig FILE
                     also write a kubeconfig with the node's credentials (system:node:NAME,
                     as a kubelet's); removed on exit
  -h, --help         this text

Then: kubectl --kubeconfig FILE get nodes";

struct Args {
    port: u16,
    node: Option<String>,
    kubeconfig: Option<PathBuf>,
    node_kubeconfig: Option<PathBuf>,
}

fn parse_args(mut argv: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut args = Args {
        port: 0,
        node: None,
        kubeconfig: None,
        node_kubeconfig: None,
    };
    while let Some(arg) = argv.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.into())),
            _ => (arg, None),
        };
        let mut value = |flag: &str| {
            inline
                .clone()
                .or_else(|| argv.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--port" => {
                let text = value("--port")?;
                args.port = text
                    .parse()
                    .map_err(|_| format!("--port {text:?}: not a port number"))?;
            }
            "--node" => {
                let node = value("--node")?;
                if node.is_empty() {
                    return Err("--node must not be empty".into());
                }
                args.node = Some(node);
            }
            "--kubeconfig" => args.kubeconfig = Some(PathBuf::from(value("--kubeconfig")?)),
            "--node-kubeconfig" => {
                args.node_kubeconfig = Some(PathBuf::from(value("--node-kubeconfig")?))
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(args))
}

/// The hostname, as the kubelet would name its Node (lower-cased).
fn hostname() -> io::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")?;
    Ok(name.trim().to_lowercase())
}

/// Writes a kubeconfig (with `write`) to a temp file beside `path` and renames it into place.
fn write_kubeconfig(path: &Path, write: impl FnOnce(&Path)) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    write(&tmp);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn run(args: Args) -> Result<(), String> {
    let node = match args.node {
        Some(node) => node,
        None => hostname().map_err(|err| format!("cannot read the hostname: {err}"))?,
    };
    let kubeconfig = args.kubeconfig.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("{NAME}-{}.kubeconfig", std::process::id()))
    });
    // Register the handlers first: a signal from here on stops the server cleanly.
    let mut signals =
        Signals::new([SIGTERM, SIGINT]).map_err(|err| format!("cannot catch signals: {err}"))?;
    let server = ApiServer::start_on(args.port).map_err(|err| err.to_string())?;
    server.create_node(&node, std::iter::empty::<(&str, &str)>());
    write_kubeconfig(&kubeconfig, |tmp| server.write_kubeconfig(tmp))
        .map_err(|err| format!("cannot write {}: {err}", kubeconfig.display()))?;
    if let Some(path) = &args.node_kubeconfig {
        if let Err(err) = write_kubeconfig(path, |tmp| server.write_node_kubeconfig(tmp, &node)) {
            let _ = std::fs::remove_file(&kubeconfig);
            return Err(format!("cannot write {}: {err}", path.display()));
        }
    }

    let mut out = io::stdout().lock();
    let _ = writeln!(out, "serving    {}", server.url());
    let _ = writeln!(out, "node       {node}");
    let _ = writeln!(out, "kubeconfig {}", kubeconfig.display());
    if let Some(path) = &args.node_kubeconfig {
        let _ = writeln!(out, "nodeconfig {}", path.display());
    }
    let _ = writeln!(
        out,
        "try        kubectl --kubeconfig {} get nodes",
        kubeconfig.display()
    );
    let _ = out.flush();
    drop(out);

    let signal = signals.forever().next();
    let _ = std::fs::remove_file(&kubeconfig);
    if let Some(path) = &args.node_kubeconfig {
        let _ = std::fs::remove_file(path);
    }
    server.stop();
    eprintln!("{NAME}: stopped (signal {})", signal.unwrap_or_default());
    Ok(())
}

fn main() -> ExitCode {
    match parse_args(std::env::args().skip(1)) {
        Ok(None) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Some(args)) => match run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("{NAME}: {err}");
                ExitCode::FAILURE
            }
        },
        Err(err) => {
            eprintln!("{NAME}: {err}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
