//! What the rollout tests and the rollout bench share: the CRD as the binary under test
//! generates it, the controller process, and a rollout's Paused condition.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use testkit::{ApiServer, RequestRecord};

use super::{pivot_bin, Proc};

/// The test API server with a rollout CRD installed, and a kubeconfig for it in a temp
/// dir (kept as long as this is).
pub struct CrdServer {
    pub server: ApiServer,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

impl CrdServer {
    /// With the CRD the binary under test generates.
    pub fn start() -> CrdServer {
        CrdServer::with_crd(generated_crd().expect("the CRD"))
    }

    /// With `crd` (a test's own variant of it).
    pub fn with_crd(crd: Value) -> CrdServer {
        let server = ApiServer::start();
        server.create_crd(crd);
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = server.kubeconfig_in(dir.path());
        CrdServer {
            server,
            dir,
            kubeconfig,
        }
    }
}

/// Lease timings and debounce of a test controller (flag values).
pub struct Timings {
    pub lease_duration: &'static str,
    pub renew_deadline: &'static str,
    pub retry_period: &'static str,
    pub debounce: &'static str,
}

/// Short lease timings and debounce, for a test controller that should lead at once.
pub const SHORT: Timings = Timings {
    lease_duration: "3s",
    renew_deadline: "2s",
    retry_period: "500ms",
    debounce: "100ms",
};

/// The CustomResourceDefinition `kubelet-pivot rollout crd` prints, as JSON.
pub fn generated_crd() -> Result<Value, String> {
    let out = Command::new(pivot_bin())
        .args(["rollout", "crd"])
        .output()
        .map_err(|err| format!("cannot run kubelet-pivot rollout crd: {err}"))?;
    if !out.status.success() {
        return Err(format!(
            "kubelet-pivot rollout crd failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_yaml_ng::from_slice(&out.stdout).map_err(|err| format!("the CRD is not YAML: {err}"))
}

/// `kubelet-pivot rollout-controller` against `kubeconfig` in namespace kubelet-pivot, as
/// `identity`, with `extra` flags, logging (RUST_LOG=info) to `log`.
pub fn controller(
    kubeconfig: &Path,
    identity: &str,
    t: &Timings,
    extra: &[&str],
    log: File,
) -> Proc {
    let mut cmd = Command::new(pivot_bin());
    cmd.args(["rollout-controller", "--kubeconfig"])
        .arg(kubeconfig)
        .args([
            "--namespace",
            "kubelet-pivot",
            "--identity",
            identity,
            "--lease-duration",
            t.lease_duration,
            "--renew-deadline",
            t.renew_deadline,
            "--retry-period",
            t.retry_period,
            "--debounce",
            t.debounce,
        ])
        .args(extra)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    Proc::spawn(&mut cmd)
}

/// The rollout's Paused condition as `STATUS=REASON` ("" without one).
pub fn paused_reason(r: &Value) -> String {
    r["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Paused")
        .map(|c| {
            format!(
                "{}={}",
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_default()
}

/// `VERB resource` of a request: LIST/GET/WATCH/POST/PUT/PATCH/DELETE and the resource with
/// its subresource, names and namespaces folded (`PATCH nodes`, `PUT
/// kubeletconfigrollouts/status`, `LIST pods`).
pub fn request_kind(r: &RequestRecord) -> String {
    let segments: Vec<&str> = r.path.split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segments.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return format!("{} {}", r.method, r.path),
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [plural] => (plural.to_string(), false),
        [plural, _name] => (plural.to_string(), true),
        [plural, _name, sub] => (format!("{plural}/{sub}"), true),
        _ => (r.path.clone(), true),
    };
    let verb = match (r.method.as_str(), named, r.watch) {
        ("GET", _, true) => "WATCH",
        ("GET", false, false) => "LIST",
        (method, _, _) => method,
    };
    format!("{verb} {resource}")
}

/// `kubelet-pivot rollout <args..> --kubeconfig <kubeconfig>`, run to completion.
pub fn cli(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(pivot_bin())
        .arg("rollout")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .unwrap_or_else(|err| panic!("failed to run kubelet-pivot rollout {args:?}: {err}"))
}

/// [`cli`] that must succeed; its stdout.
pub fn cli_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = cli(kubeconfig, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rollout {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The KubeletConfigRollout `name` as the server stores it, if it exists.
pub fn stored(server: &ApiServer, name: &str) -> Option<Value> {
    server.custom_object(
        "kubelet-pivot.io/v1alpha1",
        "kubeletconfigrollouts",
        None,
        name,
    )
}
