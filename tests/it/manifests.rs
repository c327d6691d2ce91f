//! The Kubernetes manifests in `manifests/` (and the opt-in ones in `manifests/optional/`):
//!
//! * every file passes `kubernetes-validate --strict` (PyPI package `kubernetes-validate`, which
//!   bundles the API schemas) for [`KUBERNETES_VERSIONS`], every document of multi-document
//!   files counted, a kind without a schema failing too;
//! * checks schema validation cannot make: the DaemonSet's command line and environment parse
//!   in the real binary, its generation is a number the binary accepts, its update strategy
//!   lets v1 and v2 overlap, its grace period covers the stop timeout, it mounts the host's lock
//!   directory, checkpoint store, kubelet directory and runtime socket at their host paths;
//!   the top-level RBAC (`kubectl apply -f manifests/`) grants nodes only reading ConfigMaps in
//!   the config namespace (the Node authorizer gives the rest), the opt-in RBAC in
//!   `manifests/optional/` everything the supervisor does on clusters without the Node
//!   authorizer, and neither anything more (evaluated by testkit's RBAC); the example ConfigMap is
//!   immutable, named by its content hash, and its payload is accepted by
//!   `kubelet-pivot checkpoint assign`;
//! * the examples in `manifests/examples/`: the ConfigMap as the example above (and its
//!   payload passes `kubelet-pivot config check`), the KubeletConfigRollout names it and is
//!   accepted as it is (nothing pruned, nothing refused) by the test API server holding the
//!   generated CRD (`manifests/40-rollout-crd.yaml`), with the commands of
//!   docs/development.md's "try the API flow by hand" run as written.
//!
//! Each check is also run on a broken copy and must fail there. A missing `kubernetes-validate`
//! fails the test (it is never skipped): `pip install kubernetes-validate==1.37.0`.

use crate::support::command;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use command::{duration_secs, help_env, pivot_bin, run, text};
use serde::Deserialize;
use serde_yaml_ng::Value;
use sha2::{Digest, Sha256};
use testkit::rbac::{Grant, Policy, Request, User};

/// Kubernetes versions every manifest must validate against: the newest that
/// kubernetes-validate 1.37.0 bundles schemas for, and the API level the binary's client is
/// built for (k8s-openapi feature `v1_33`).
const KUBERNETES_VERSIONS: &[&str] = &["1.37.0", "1.33.0"];
/// How to get the validator (what .ci/run does).
const VALIDATOR_INSTALL: &str = "python3 -m pip install kubernetes-validate==1.37.0";
/// Seconds the pod's grace period must exceed the kubelet's stop timeout by: after the
/// kubelet's process group is gone, kubelet-pivot releases the lock and exits.
const GRACE_MARGIN_SECS: f64 = 5.0;
/// Node name used for `spec.nodeName` when resolving the DaemonSet's environment.
const NODE: &str = "node-1";

fn manifests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("manifests")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// The directory of opt-in manifests, which `kubectl apply -f manifests/` does not apply.
const OPTIONAL_DIR: &str = "optional";
/// Objects to copy (`manifests/examples/`), not applied by `kubectl apply -f manifests/`.
const EXAMPLES_DIR: &str = "examples";

/// The `.yaml` files of `dir`, sorted; panics on anything else but the directories in
/// `subdirs` (it would go unchecked).
fn yaml_files(dir: &Path, subdirs: &[&str]) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("list {}: {err}", dir.display()))
        .map(|entry| entry.expect("entry").path())
        .filter(|path| {
            !(path.is_dir()
                && path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| subdirs.contains(&n)))
        })
        .collect();
    files.sort();
    for file in &files {
        let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
        assert!(
            file.is_file() && (ext == "yaml" || ext == "yml"),
            "{} is not a .yaml file: the manifest tests would not check it",
            file.display()
        );
    }
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    files
}

/// The top-level manifest files, sorted: what `kubectl apply -f manifests/` applies (kubectl
/// does not recurse without `-R`). Panics on a file that is not YAML (it would go unchecked).
fn manifest_files() -> Vec<PathBuf> {
    yaml_files(&manifests_dir(), &[OPTIONAL_DIR, EXAMPLES_DIR])
}

/// Prometheus rules, their tests and a Grafana dashboard: no Kubernetes objects but the
/// PrometheusRule, whose CRD kubernetes-validate has no schema for (`tests/it/alerts.rs`
/// checks them all, with promtool).
const MONITORING_DIR: &str = "monitoring";

/// The opt-in manifests in `manifests/optional/`, sorted.
fn optional_manifest_files() -> Vec<PathBuf> {
    yaml_files(&manifests_dir().join(OPTIONAL_DIR), &[MONITORING_DIR])
}

/// The non-empty documents of a YAML stream.
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|err| panic!("bad YAML: {err}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// Every document of every top-level manifest file.
fn all_documents() -> Vec<Value> {
    manifest_files()
        .iter()
        .flat_map(|file| documents(&read(file)))
        .collect()
}

/// Every document of the opt-in manifests.
fn optional_documents() -> Vec<Value> {
    optional_manifest_files()
        .iter()
        .flat_map(|file| documents(&read(file)))
        .collect()
}

fn str_of<'a>(value: &'a Value, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {value:?}"))
}

fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or("")
}

fn the<'a>(docs: &'a [Value], wanted: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| kind(d) == wanted).collect();
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {wanted} in manifests/"
    );
    found[0]
}

// ---- kubernetes-validate ----

/// The validator: `$KUBERNETES_VALIDATE` or `kubernetes-validate` from PATH; panics with how to
/// install it when it does not run.
fn validator() -> PathBuf {
    let tool = std::env::var_os("KUBERNETES_VALIDATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("kubernetes-validate"));
    let mut cmd = Command::new(&tool);
    cmd.arg("--version");
    let output = cmd.stdin(Stdio::null()).output();
    match output {
        Ok(out) if out.status.success() => tool,
        Ok(out) => panic!(
            "{} --version failed ({}); install the validator: {VALIDATOR_INSTALL}",
            tool.display(),
            text(&out)
        ),
        Err(err) => panic!(
            "{} not found ({err}): the manifests must be validated; install it with \
             `{VALIDATOR_INSTALL}` (.ci/run does), or point KUBERNETES_VALIDATE at it",
            tool.display()
        ),
    }
}

/// Runs `kubernetes-validate --strict` for every version in [`KUBERNETES_VERSIONS`] on `file`.
/// Ok only if it exits 0, says nothing but INFO, and reports one pass per document and version
/// (a kind it has no schema for is only a warning there).
fn validate(file: &Path) -> Result<(), String> {
    let mut cmd = Command::new(validator());
    cmd.arg("--strict");
    for version in KUBERNETES_VERSIONS {
        cmd.args(["-k", version]);
    }
    cmd.arg(file);
    let output = run(cmd);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let docs = documents(&read(file)).len();
    let passed = all.matches(" passed for resource ").count();
    let complaints: Vec<&str> = all
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with("INFO "))
        .collect();
    if output.status.success()
        && complaints.is_empty()
        && passed == docs * KUBERNETES_VERSIONS.len()
    {
        Ok(())
    } else {
        Err(format!(
            "{}: {docs} documents x {} versions, {passed} passed\n{}",
            file.display(),
            KUBERNETES_VERSIONS.len(),
            text(&output)
        ))
    }
}

#[test]
fn every_manifest_passes_kubernetes_validate_strict() {
    let failures: Vec<String> = manifest_files()
        .iter()
        .chain(&optional_manifest_files())
        .filter_map(|file| validate(file).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn kubernetes_validate_fails_broken_manifests() {
    let dir = tempfile::tempdir().expect("temp dir");
    let daemonset = read(&manifests_dir().join("20-daemonset.yaml"));
    let cases = [
        // --strict: a field the API does not have.
        (
            "unknown-field.yaml",
            daemonset.replace(
                "  updateStrategy:",
                "  updateStrategie: {}\n  updateStrategy:",
            ),
        ),
        // A wrong type in the second document of a multi-document file.
        (
            "wrong-type.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\napiVersion: v1\n\
             kind: ConfigMap\nmetadata:\n  name: b\nimmutable: \"yes\"\n"
                .to_owned(),
        ),
        // A kind without a schema: the tool only warns.
        (
            "unknown-kind.yaml",
            "apiVersion: v1\nkind: ConfigMapp\nmetadata:\n  name: c\n".to_owned(),
        ),
        // A required field missing.
        (
            "missing-selector.yaml",
            daemonset.replace("  selector:\n", "  selectorr:\n"),
        ),
    ];
    for (name, yaml) in cases {
        let file = dir.path().join(name);
        fs::write(&file, yaml).expect("write");
        assert!(
            validate(&file).is_err(),
            "{name} passed validation:\n{}",
            read(&file)
        );
    }
    // ... and the unbroken DaemonSet passes from the same place.
    let file = dir.path().join("ok.yaml");
    fs::write(&file, &daemonset).expect("write");
    validate(&file).unwrap_or_else(|err| panic!("{err}"));
}

// ---- what the binary says about itself ----

/// The default of the flag read from `env` (`bootstrap --help`, the host side).
fn bootstrap_default(env: &str) -> String {
    help_env("bootstrap")
        .get(env)
        .and_then(|(_, default)| default.clone())
        .unwrap_or_else(|| panic!("bootstrap --help shows no default for {env}"))
}

// ---- the DaemonSet ----

/// The pod template of a DaemonSet and its one container running kubelet-pivot.
fn pod_and_container(ds: &Value) -> Result<(&Value, &Value), String> {
    let pod = &ds["spec"]["template"]["spec"];
    let containers = pod["containers"]
        .as_sequence()
        .ok_or("the pod template has no containers")?;
    let runs_pivot = |c: &&Value| {
        c["command"][0]
            .as_str()
            .is_some_and(|cmd| cmd.rsplit('/').next() == Some("kubelet-pivot"))
    };
    match containers.iter().filter(runs_pivot).collect::<Vec<_>>()[..] {
        [container] => Ok((pod, container)),
        _ => Err("expected one container whose command is kubelet-pivot".to_owned()),
    }
}

/// The container's environment as the kubelet would set it on node [`NODE`]: plain values and
/// the downward API fields the manifests use.
fn resolve_env(ds: &Value, container: &Value) -> Result<BTreeMap<String, String>, String> {
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    let mut env = BTreeMap::new();
    for var in container["env"].as_sequence().into_iter().flatten() {
        let name = str_of(&var["name"], "env name").to_owned();
        let value = if let Some(value) = var["value"].as_str() {
            value.to_owned()
        } else if let Some(path) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            if path == "spec.nodeName" {
                NODE.to_owned()
            } else if let Some(key) = path
                .strip_prefix("metadata.labels['")
                .and_then(|rest| rest.strip_suffix("']"))
            {
                labels[key].as_str().map(str::to_owned).ok_or(format!(
                    "{name} comes from the pod label {key}, which the template does not set \
                     (as a string)"
                ))?
            } else if path == "metadata.namespace" {
                str_of(&ds["metadata"]["namespace"], "namespace").to_owned()
            } else {
                return Err(format!("{name}: cannot resolve fieldRef {path}"));
            }
        } else {
            return Err(format!(
                "{name}: only value and fieldRef are supported here"
            ));
        };
        env.insert(name, value);
    }
    Ok(env)
}

/// Kubernetes' `$(VAR)` expansion of command arguments.
fn expand(arg: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = arg.to_owned();
    for (name, value) in env {
        out = out.replace(&format!("$({name})"), value);
    }
    out
}

/// The value of `--flag` in `args` before `--` (`--flag=V` or `--flag V`), else `env[var]`,
/// else None.
fn flag_value(
    args: &[String],
    env: &BTreeMap<String, String>,
    flag: &str,
    var: &str,
) -> Option<String> {
    let own = args.iter().take_while(|a| *a != "--").collect::<Vec<_>>();
    for (i, arg) in own.iter().enumerate() {
        if let Some(value) = arg.strip_prefix(&format!("{flag}=")) {
            return Some(value.to_owned());
        }
        if *arg == flag {
            return own.get(i + 1).map(|v| v.to_string());
        }
    }
    env.get(var).cloned()
}

/// Runs the container's command line and environment through the real binary, with the
/// kubelet replaced by a path that does not exist: the binary then parses every flag and
/// variable (clap rejects a bad one with a usage error) and stops at its first pre-start check,
/// the kubelet command, with `kubelet-pivot: error: kubelet command <path> not found` and exit
/// 2, before it touches the lock or the store.
fn dry_run(ds: &Value) -> Result<(), String> {
    let (_, container) = pod_and_container(ds)?;
    let env = resolve_env(ds, container)?;
    let args: Vec<String> = container["args"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|a| expand(str_of(a, "arg"), &env))
        .collect();
    let dash = args
        .iter()
        .position(|a| a == "--")
        .ok_or("no `--` before the kubelet command in args")?;
    let dir = tempfile::tempdir().expect("temp dir");
    let fake = dir.path().join("no-kubelet-here");
    let mut argv = args.clone();
    if dash + 1 >= argv.len() {
        return Err("no kubelet command after `--`".to_owned());
    }
    argv[dash + 1] = fake.to_string_lossy().into_owned();
    let mut cmd = Command::new(pivot_bin());
    cmd.args(
        container["command"]
            .as_sequence()
            .into_iter()
            .flatten()
            .skip(1)
            .map(|a| str_of(a, "command")),
    )
    .args(&argv)
    .env_clear()
    .envs(&env);
    let output = run(cmd);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = format!("kubelet-pivot: error: kubelet command {}", fake.display());
    if output.status.code() == Some(2) && stderr.starts_with(&expected) {
        Ok(())
    } else {
        Err(format!(
            "kubelet-pivot does not accept the DaemonSet's command line {argv:?} with env \
             {env:?}:\n{}",
            text(&output)
        ))
    }
}

/// Everything wrong with the self-hosted DaemonSet that schema validation cannot see.
fn daemonset_problems(ds: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let (pod, container) = match pod_and_container(ds) {
        Ok(found) => found,
        Err(err) => return vec![err],
    };
    let env = match resolve_env(ds, container) {
        Ok(env) => env,
        Err(err) => return vec![err],
    };
    let args: Vec<String> = container["args"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|a| expand(str_of(a, "arg"), &env))
        .collect();

    if args.first().map(String::as_str) != Some("self-hosted") {
        problems.push(format!(
            "the entrypoint must be `kubelet-pivot self-hosted`, args are {args:?}"
        ));
    }
    if let Err(err) = dry_run(ds) {
        problems.push(err);
    }

    // --generation: from the DaemonSet's version, a whole number >= 1.
    match flag_value(&args, &env, "--generation", "KUBELET_PIVOT_GENERATION") {
        None => problems.push("no --generation (or KUBELET_PIVOT_GENERATION)".to_owned()),
        Some(value) => match value.parse::<u32>() {
            Ok(n) if n >= 1 => {}
            _ => problems.push(format!(
                "the generation {value:?} is not a whole number >= 1 (kubelet-pivot's --generation)"
            )),
        },
    }

    for (field, wanted) in [("hostPID", true), ("hostNetwork", true)] {
        if pod[field].as_bool() != Some(wanted) {
            problems.push(format!("the pod needs {field}: {wanted}"));
        }
    }
    if container["securityContext"]["privileged"].as_bool() != Some(true) {
        problems.push("the kubelet container must be privileged".to_owned());
    }

    // v1 and v2 overlap: surge a new pod before the old one goes.
    let strategy = &ds["spec"]["updateStrategy"];
    let surge = &strategy["rollingUpdate"]["maxSurge"];
    let surge_positive = surge.as_u64().is_some_and(|n| n > 0)
        || surge
            .as_str()
            .and_then(|s| s.strip_suffix('%'))
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|p| p > 0);
    let unavailable = &strategy["rollingUpdate"]["maxUnavailable"];
    let unavailable_zero = unavailable.as_u64() == Some(0) || unavailable.as_str() == Some("0%");
    if strategy["type"].as_str() != Some("RollingUpdate") || !surge_positive || !unavailable_zero {
        problems.push(format!(
            "updateStrategy must be RollingUpdate with maxSurge > 0 and maxUnavailable: 0 so that \
             v1 and v2 overlap, got {strategy:?}"
        ));
    }

    // The grace period covers the stop timeout.
    let stop = flag_value(&args, &env, "--stop-timeout", "KUBELET_PIVOT_STOP_TIMEOUT")
        .unwrap_or_else(|| bootstrap_default("KUBELET_PIVOT_STOP_TIMEOUT"));
    let grace = pod["terminationGracePeriodSeconds"]
        .as_f64()
        .unwrap_or(30.0);
    match duration_secs(&stop) {
        None => problems.push(format!("the stop timeout {stop:?} is not a duration")),
        Some(stop_secs) if grace < stop_secs + GRACE_MARGIN_SECS => problems.push(format!(
            "terminationGracePeriodSeconds {grace} does not cover the stop timeout {stop} plus \
             {GRACE_MARGIN_SECS}s"
        )),
        Some(_) => {}
    }

    // The same lock file and store as the host bootstrap, and the host's kubelet directory and
    // runtime socket, each mounted from the host at the same path.
    let lock = flag_value(&args, &env, "--lock-file", "KUBELET_PIVOT_LOCK_FILE")
        .unwrap_or_else(|| bootstrap_default("KUBELET_PIVOT_LOCK_FILE"));
    let host_lock = bootstrap_default("KUBELET_PIVOT_LOCK_FILE");
    if lock != host_lock {
        problems.push(format!(
            "lock file {lock} is not the bootstrap's {host_lock}"
        ));
    }
    let store = flag_value(
        &args,
        &env,
        "--dynamic-config-dir",
        "KUBELET_PIVOT_DYNAMIC_CONFIG_DIR",
    )
    .unwrap_or_else(|| bootstrap_default("KUBELET_PIVOT_DYNAMIC_CONFIG_DIR"));
    let host_store = bootstrap_default("KUBELET_PIVOT_DYNAMIC_CONFIG_DIR");
    if store != host_store {
        problems.push(format!(
            "checkpoint store {store} is not the bootstrap's {host_store}"
        ));
    }
    let kubelet_args = &args[args
        .iter()
        .position(|a| a == "--")
        .map_or(args.len(), |i| i + 1)..];
    let endpoint = kubelet_args
        .iter()
        .find_map(|a| a.strip_prefix("--container-runtime-endpoint="))
        .unwrap_or("unix:///run/containerd/containerd.sock");
    let socket = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    let parent = |p: &str| {
        Path::new(p)
            .parent()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut wanted = vec![
        (parent(&lock), false, "the lock directory"),
        (store, false, "the checkpoint store"),
        (
            "/var/lib/kubelet".to_owned(),
            false,
            "the kubelet directory",
        ),
        (parent(socket), false, "the runtime socket's directory"),
    ];
    if let Some(kubeconfig) = env.get("KUBELET_PIVOT_KUBECONFIG") {
        wanted.push((parent(kubeconfig), true, "the kubeconfig's directory"));
    }
    let volumes = pod["volumes"].as_sequence().cloned().unwrap_or_default();
    let mounts = container["volumeMounts"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    for (dir, may_be_read_only, what) in wanted {
        let mount = mounts
            .iter()
            .find(|m| m["mountPath"].as_str() == Some(dir.as_str()));
        let Some(mount) = mount else {
            problems.push(format!("{what} {dir} is not mounted"));
            continue;
        };
        let volume = volumes.iter().find(|v| v["name"] == mount["name"]);
        let host = volume.and_then(|v| v["hostPath"]["path"].as_str());
        if host != Some(dir.as_str()) {
            problems.push(format!(
                "{what} {dir} must be the host's {dir} (hostPath), got {volume:?}"
            ));
        }
        if !may_be_read_only && mount["readOnly"].as_bool() == Some(true) {
            problems.push(format!("{what} {dir} must be writable"));
        }
        if dir == "/var/lib/kubelet" && mount["mountPropagation"].as_str() != Some("Bidirectional")
        {
            problems.push(
                "/var/lib/kubelet needs mountPropagation: Bidirectional (the kubelet mounts \
                 volumes there for the host)"
                    .to_owned(),
            );
        }
    }
    problems
}

fn daemonset() -> Value {
    the(&all_documents(), "DaemonSet").clone()
}

#[test]
fn daemonset_runs_kubelet_pivot_as_the_upgrade_design_needs() {
    let problems = daemonset_problems(&daemonset());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn daemonset_checks_fail_on_broken_copies() {
    type Break = fn(&mut Value);
    let cases: Vec<(&str, Break, &str)> = vec![
        (
            "generation label not a number",
            |ds| {
                ds["spec"]["template"]["metadata"]["labels"]["kubelet-pivot.io/generation"] =
                    Value::from("v2")
            },
            "generation",
        ),
        (
            "generation 0",
            |ds| {
                ds["spec"]["template"]["metadata"]["labels"]["kubelet-pivot.io/generation"] =
                    Value::from("0")
            },
            "generation",
        ),
        (
            "no overlap",
            |ds| ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = Value::from(1),
            "maxUnavailable",
        ),
        (
            "grace below the stop timeout",
            |ds| ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = Value::from(30),
            "terminationGracePeriodSeconds",
        ),
        (
            "lock directory not mounted",
            |ds| {
                let mounts = ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
                    .as_sequence_mut()
                    .unwrap();
                mounts.retain(|m| m["mountPath"].as_str() != Some("/var/run/lock"));
            },
            "lock directory",
        ),
        (
            "runtime socket from a different host path",
            |ds| {
                let volumes = ds["spec"]["template"]["spec"]["volumes"]
                    .as_sequence_mut()
                    .unwrap();
                for v in volumes.iter_mut() {
                    if v["hostPath"]["path"].as_str() == Some("/run/containerd") {
                        v["hostPath"]["path"] = Value::from("/run/crio");
                    }
                }
            },
            "runtime socket",
        ),
        (
            "flag the binary does not have",
            |ds| {
                let args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
                    .as_sequence_mut()
                    .unwrap();
                args.insert(1, Value::from("--stop-timout=10s"));
            },
            "does not accept",
        ),
        (
            "stop timeout without a unit",
            |ds| {
                let env = ds["spec"]["template"]["spec"]["containers"][0]["env"]
                    .as_sequence_mut()
                    .unwrap();
                for var in env.iter_mut() {
                    if var["name"].as_str() == Some("KUBELET_PIVOT_STOP_TIMEOUT") {
                        var["value"] = Value::from("30");
                    }
                }
            },
            "does not accept",
        ),
        (
            "not in the host PID namespace",
            |ds| ds["spec"]["template"]["spec"]["hostPID"] = Value::from(false),
            "hostPID",
        ),
    ];
    for (what, break_it, expected) in cases {
        let mut ds = daemonset();
        break_it(&mut ds);
        let problems = daemonset_problems(&ds).join("\n");
        assert!(
            problems.contains(expected),
            "{what}: expected a problem about {expected:?}, got:\n{problems}"
        );
    }
}

// ---- RBAC ----

/// The RBAC objects of `docs`, evaluated by the test API server's RBAC (testkit::rbac).
fn policy(docs: &[Value]) -> Policy {
    let yaml: Vec<String> = docs
        .iter()
        .map(|doc| serde_yaml_ng::to_string(doc).expect("YAML"))
        .collect();
    Policy::from_yaml(&yaml.join("---\n")).unwrap_or_else(|err| panic!("RBAC: {err}"))
}

/// Whether the DaemonSet's supervisor talks to the API as the node (a kubeconfig, and no
/// service account token), else the service account it would use.
fn daemonset_identity(ds: &Value) -> Result<(), String> {
    let pod = &ds["spec"]["template"]["spec"];
    let (_, container) = pod_and_container(ds)?;
    let env = resolve_env(ds, container)?;
    if env.contains_key("KUBELET_PIVOT_KUBECONFIG") {
        Ok(())
    } else {
        Err(format!(
            "the DaemonSet's supervisor would talk to the API as the service account {}/{}, \
             not as the node: the shipped RBAC grants nodes only what the Node authorizer \
             lacks (set KUBELET_PIVOT_KUBECONFIG to the kubelet's kubeconfig)",
            str_of(&ds["metadata"]["namespace"], "namespace"),
            pod["serviceAccountName"].as_str().unwrap_or("default"),
        ))
    }
}

/// What the supervisor does with the node's credentials (src/cluster/sync,
/// src/cluster/events, src/cluster/drain), as RBAC sees the requests: read and watch its own
/// Node (by `metadata.name`), patch it and its status, post Events, list and watch the pods
/// bound to it (`spec.nodeName` field selector: a cluster-wide list for RBAC) and evict them.
fn supervisor_requests() -> Vec<Request> {
    vec![
        Request::new("get", "nodes").name(NODE),
        Request::new("list", "nodes").name(NODE),
        Request::new("watch", "nodes").name(NODE),
        Request::new("patch", "nodes").name(NODE),
        Request::new("patch", "nodes/status").name(NODE),
        Request::new("create", "events").namespace("default"),
        Request::new("list", "pods"),
        Request::new("watch", "pods"),
        Request::new("create", "pods/eviction")
            .namespace("default")
            .name("web-1"),
    ]
}

/// What no node may do, whatever the authorizer: (request, why it matters).
fn forbidden_to_nodes(config_ns: &str) -> Vec<Request> {
    let mut forbidden = vec![
        Request::new("get", "secrets").namespace(config_ns),
        Request::new("list", "secrets"),
        Request::new("delete", "nodes").name(NODE),
        Request::new("create", "nodes"),
        // A drain evicts; it never deletes a pod outright.
        Request::new("delete", "pods")
            .namespace("default")
            .name("web-1"),
    ];
    for ns in ["kube-system", "default", "kube-public"] {
        for verb in ["get", "list", "watch"] {
            forbidden.push(Request::new(verb, "configmaps").namespace(ns));
        }
    }
    for verb in ["create", "update", "patch", "delete"] {
        forbidden.push(Request::new(verb, "configmaps").namespace(config_ns));
    }
    forbidden
}

/// Everything wrong with the RBAC of `docs` (the top-level manifests) and `opt_in` (the
/// opt-in manifests for clusters without the Node authorizer):
///
/// * by default, nodes get from RBAC exactly get/list/watch of ConfigMaps in the config
///   namespace (the Node authorizer lets a node read only ConfigMaps its pods reference, and
///   never list or watch them) and nothing else: the Node authorizer and NodeRestriction give
///   the rest, each limited to the node's own objects; the DaemonSet talks as the node;
/// * with the opt-in manifests, RBAC alone grants every request the supervisor makes;
/// * neither grants Secrets, deletions, ConfigMaps elsewhere or their writes, nor anything to
///   an identity that is not a node; no wildcards.
fn rbac_problems(docs: &[Value], opt_in: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let config_ns = str_of(
        &the(docs, "ConfigMap")["metadata"]["namespace"],
        "the example ConfigMap's namespace",
    )
    .to_owned();
    let declared = docs
        .iter()
        .any(|d| kind(d) == "Namespace" && d["metadata"]["name"].as_str() == Some(&config_ns));
    if !declared {
        problems.push(format!("no Namespace {config_ns} in manifests/"));
    }
    for doc in docs
        .iter()
        .chain(opt_in)
        .filter(|d| matches!(kind(d), "Role" | "ClusterRole"))
    {
        for rule in doc["rules"].as_sequence().into_iter().flatten() {
            for field in ["apiGroups", "resources", "verbs"] {
                if rule[field]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .any(|v| v.as_str() == Some("*"))
                {
                    problems.push(format!(
                        "{} {:?} uses * in {field}",
                        kind(doc),
                        doc["metadata"]["name"]
                    ));
                }
            }
        }
    }
    if let Err(err) = daemonset_identity(the(docs, "DaemonSet")) {
        problems.push(err);
    }

    let node = User::node(NODE);
    let shipped = policy(docs);
    for verb in ["get", "list", "watch"] {
        let request = Request::new(verb, "configmaps").namespace(&config_ns);
        if !shipped.allows(&node, &request) {
            problems.push(format!("the node may not {request}"));
        }
    }
    let config_reader = |grant: &Grant| {
        grant.namespace.as_deref() == Some(config_ns.as_str())
            && grant.rule.api_groups == [""]
            && grant.rule.resources == ["configmaps"]
            && grant
                .rule
                .verbs
                .iter()
                .all(|v| ["get", "list", "watch"].contains(&v.as_str()))
    };
    for grant in shipped.grants(&node) {
        if !config_reader(&grant) {
            let scope = grant.namespace.as_deref().unwrap_or("every namespace");
            problems.push(format!(
                "kubectl apply -f manifests/ grants nodes {} in {scope} ({}): the Node \
                 authorizer gives nodes what they need, each limited to their own objects; \
                 rules for clusters without it belong in manifests/{OPTIONAL_DIR}/",
                grant.rule, grant.via
            ));
        }
    }

    let mut widened = docs.to_vec();
    widened.extend_from_slice(opt_in);
    let widened = policy(&widened);
    for request in supervisor_requests() {
        if !widened.allows(&node, &request) {
            problems.push(format!(
                "without the Node authorizer (manifests/{OPTIONAL_DIR}/ applied) the node may not {request}"
            ));
        }
    }
    for (what, policy) in [("by default", &shipped), ("with the opt-in", &widened)] {
        for request in forbidden_to_nodes(&config_ns) {
            if policy.allows(&node, &request) {
                problems.push(format!("{what}, the node may {request}"));
            }
        }
        for stranger in [
            User::service_account("default", "default"),
            User::new("system:anonymous", &["system:unauthenticated"]),
            User::new("jane", &["system:authenticated"]),
        ] {
            let grants = policy.grants(&stranger);
            if !grants.is_empty() {
                problems.push(format!(
                    "{what}, {} who is not a node is granted {}",
                    stranger.name, grants[0].rule
                ));
            }
        }
    }
    problems
}

#[test]
fn rbac_grants_nodes_only_what_the_node_authorizer_lacks_and_the_opt_in_the_rest() {
    let problems = rbac_problems(&all_documents(), &optional_documents());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn rbac_checks_fail_on_broken_copies() {
    let docs = all_documents();
    let opt_in = optional_documents();
    let map = |docs: &[Value], f: fn(&mut Value)| -> Vec<Value> {
        docs.iter()
            .cloned()
            .map(|mut doc| {
                f(&mut doc);
                doc
            })
            .collect()
    };

    // ConfigMaps readable cluster-wide: the Role made a ClusterRole, bound cluster-wide.
    let widened = map(&docs, |doc| {
        if kind(doc) == "Role" {
            doc["kind"] = Value::from("ClusterRole");
        }
        if kind(doc) == "RoleBinding" {
            doc["kind"] = Value::from("ClusterRoleBinding");
            doc["roleRef"]["kind"] = Value::from("ClusterRole");
        }
    });
    let problems = rbac_problems(&widened, &opt_in).join("\n");
    assert!(
        problems.contains("the node may get configmaps in kube-system"),
        "{problems}"
    );

    // The node-wide ClusterRole of old in the default manifests.
    let mut old = docs.clone();
    old.extend_from_slice(&opt_in);
    let problems = rbac_problems(&old, &[]).join("\n");
    assert!(
        problems.contains("kubectl apply -f manifests/ grants nodes apiGroups [\"\"] resources [\"nodes\"] verbs [\"get\", \"list\", \"watch\", \"patch\"] in every namespace"),
        "{problems}"
    );

    // No binding for the ConfigMap reader: the sync could not read its configs.
    let unbound: Vec<Value> = docs
        .iter()
        .filter(|doc| kind(doc) != "RoleBinding")
        .cloned()
        .collect();
    let problems = rbac_problems(&unbound, &opt_in).join("\n");
    assert!(
        problems.contains("the node may not list configmaps in kubelet-config"),
        "{problems}"
    );

    // Write access to the configs.
    let writable = map(&docs, |doc| {
        if kind(doc) == "Role" {
            doc["rules"][0]["verbs"] = Value::from(vec!["*"]);
        }
    });
    let problems = rbac_problems(&writable, &opt_in).join("\n");
    assert!(problems.contains("uses * in verbs"), "{problems}");
    assert!(
        problems.contains("by default, the node may delete configmaps"),
        "{problems}"
    );

    // An opt-in file that forgets the evictions.
    let no_evictions = map(&opt_in, |doc| {
        if kind(doc) == "ClusterRole" {
            if let Some(rules) = doc["rules"].as_sequence_mut() {
                rules.retain(|rule| rule["resources"][0].as_str() != Some("pods/eviction"));
            }
        }
    });
    let problems = rbac_problems(&docs, &no_evictions).join("\n");
    assert!(
        problems.contains("(manifests/optional/ applied) the node may not create pods/eviction"),
        "{problems}"
    );

    // An opt-in bound to everyone who is authenticated.
    let everyone = map(&opt_in, |doc| {
        if kind(doc) == "ClusterRoleBinding" {
            doc["subjects"][0]["name"] = Value::from("system:authenticated");
        }
    });
    let problems = rbac_problems(&docs, &everyone).join("\n");
    assert!(
        problems.contains("with the opt-in, jane who is not a node is granted"),
        "{problems}"
    );

    // A DaemonSet that talks as its service account.
    let service_account = map(&docs, |doc| {
        if kind(doc) == "DaemonSet" {
            if let Some(env) =
                doc["spec"]["template"]["spec"]["containers"][0]["env"].as_sequence_mut()
            {
                env.retain(|var| var["name"].as_str() != Some("KUBELET_PIVOT_KUBECONFIG"));
            }
        }
    });
    let problems = rbac_problems(&service_account, &opt_in).join("\n");
    assert!(
        problems.contains("as the service account kube-system/default, not as the node"),
        "{problems}"
    );
}

// ---- the example ConfigMap ----

/// Checkpoints and assigns the ConfigMap's data as `kubelet-pivot checkpoint assign` does for a
/// ConfigMap-like directory (one file per key), in a throwaway store: the binary's strict
/// decoding and validation of the `kubelet` key.
fn assign_payload(cm: &Value) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let payload = dir.path().join("payload");
    fs::create_dir(&payload).expect("mkdir");
    let data = cm["data"].as_mapping().ok_or("the ConfigMap has no data")?;
    for (key, value) in data {
        fs::write(
            payload.join(str_of(key, "data key")),
            str_of(value, "data value"),
        )
        .expect("write key");
    }
    // checkpoint refuses a store that does not exist (issue 34): make it, as a supervisor would.
    fs::create_dir(dir.path().join("store")).expect("mkdir store");
    let mut cmd = Command::new(pivot_bin());
    cmd.arg("checkpoint")
        .arg("--dynamic-config-dir")
        .arg(dir.path().join("store"))
        .arg("assign")
        .arg(&payload)
        .args(["--key", "kubelet"])
        .env_clear()
        .env("KUBELET_PIVOT_ENV_FILE", "");
    accepts(cmd, "kubelet-pivot checkpoint assign")
}

/// Runs `cmd`: Ok if it exits 0, else what it said.
fn accepts(cmd: Command, what: &str) -> Result<(), String> {
    let output = run(cmd);
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("{what} refuses the payload:\n{}", text(&output)))
    }
}

fn configmap_problems(cm: &Value, file_text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if cm["immutable"].as_bool() != Some(true) {
        problems.push("the example ConfigMap must be immutable: true".to_owned());
    }
    let name = cm["metadata"]["name"].as_str().unwrap_or("");
    let namespace = cm["metadata"]["namespace"].as_str().unwrap_or("");
    let payload = cm["data"]["kubelet"].as_str().unwrap_or("");
    let digest: String = Sha256::digest(payload.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let suffix = &digest[..10];
    if !name.ends_with(&format!("-{suffix}")) {
        problems.push(format!(
            "the ConfigMap's name {name} does not end in the payload's hash -{suffix}: a changed \
             config must get a new name"
        ));
    }
    let reference = format!("{namespace}/{name}:kubelet");
    if !file_text.contains(&reference) {
        problems.push(format!(
            "the example annotate command does not name {reference}"
        ));
    }
    if let Err(err) = assign_payload(cm) {
        problems.push(err);
    }
    problems
}

fn example_configmap() -> (Value, String) {
    let file = manifests_dir().join("30-example-config.yaml");
    let text = read(&file);
    let docs = documents(&text);
    (the(&docs, "ConfigMap").clone(), text)
}

#[test]
fn example_configmap_is_immutable_hash_named_and_accepted_by_the_binary() {
    let (cm, text) = example_configmap();
    let problems = configmap_problems(&cm, &text);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn configmap_checks_fail_on_broken_copies() {
    let (cm, text) = example_configmap();

    let mut mutable = cm.clone();
    mutable["immutable"] = Value::from(false);
    let problems = configmap_problems(&mutable, &text).join("\n");
    assert!(problems.contains("immutable"), "{problems}");

    // A payload the kubelet would refuse, and that no longer matches the name.
    let mut invalid = cm.clone();
    let payload = str_of(&cm["data"]["kubelet"], "payload").replace("maxPods: 110", "maxPods: -1");
    invalid["data"]["kubelet"] = Value::from(payload);
    let problems = configmap_problems(&invalid, &text).join("\n");
    assert!(problems.contains("checkpoint assign refuses"), "{problems}");
    assert!(problems.contains("payload's hash"), "{problems}");

    // An unknown field (the binary decodes strictly).
    let mut unknown = cm.clone();
    let payload = format!("{}maxPodz: 3\n", str_of(&cm["data"]["kubelet"], "payload"));
    unknown["data"]["kubelet"] = Value::from(payload);
    let problems = configmap_problems(&unknown, &text).join("\n");
    assert!(problems.contains("maxPodz"), "{problems}");
}

// ---- all objects ----

#[test]
fn namespaced_objects_live_in_declared_or_system_namespaces() {
    let docs = all_documents();
    let declared: Vec<&str> = docs
        .iter()
        .filter(|d| kind(d) == "Namespace")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    for doc in docs.iter().chain(&optional_documents()) {
        let name = doc["metadata"]["name"].as_str().unwrap_or("?");
        assert_eq!(
            doc["metadata"]["labels"]["app.kubernetes.io/part-of"].as_str(),
            Some("kubelet-pivot"),
            "{} {name} lacks the label app.kubernetes.io/part-of: kubelet-pivot",
            kind(doc)
        );
        if let Some(ns) = doc["metadata"]["namespace"].as_str() {
            // `default` and `kube-system` exist in every cluster (the rollout
            // controller's Events about cluster-scoped rollouts live in `default`).
            assert!(
                declared.contains(&ns) || ns == "kube-system" || ns == "default",
                "{} {name} is in namespace {ns}, which manifests/ does not create",
                kind(doc)
            );
        }
    }
}

// ---- the rollout controller's probes ----

/// The rollout controller's Deployment.
fn controller_deployment() -> Value {
    all_documents()
        .into_iter()
        .find(|d| kind(d) == "Deployment" && d["metadata"]["name"] == "rollout-controller")
        .expect("the rollout-controller Deployment in manifests/")
}

/// What is wrong with the controller's probes: each must GET /healthz or /readyz on the
/// named port the container declares, which must be the port of its --metrics-address.
fn controller_probe_problems(deploy: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_sequence()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let served = flag_value(&args, &BTreeMap::new(), "--metrics-address", "")
        .and_then(|a| a.rsplit_once(':').and_then(|(_, p)| p.parse::<u64>().ok()));
    let Some(served) = served else {
        return vec!["no --metrics-address with a port in the args".into()];
    };
    let ports = container["ports"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        if get["path"].as_str() != Some(path) {
            problems.push(format!("{probe} does not GET {path}"));
        }
        let port = ports
            .iter()
            .find(|p| p["name"] == get["port"] || p["containerPort"] == get["port"]);
        match port.and_then(|p| p["containerPort"].as_u64()) {
            Some(p) if p == served => {}
            other => problems.push(format!(
                "{probe} probes port {:?} ({other:?}), not the served {served}",
                get["port"]
            )),
        }
    }
    problems
}

#[test]
fn the_controller_deployment_probes_the_port_it_serves() {
    let problems = controller_probe_problems(&controller_deployment());
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn controller_probe_checks_fail_on_broken_copies() {
    let mut wrong_port = controller_deployment();
    wrong_port["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] =
        Value::from(8080);
    assert!(!controller_probe_problems(&wrong_port).is_empty());
    let mut wrong_path = controller_deployment();
    wrong_path["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] =
        Value::from("/healthz");
    assert!(!controller_probe_problems(&wrong_path).is_empty());
    let mut no_flag = controller_deployment();
    no_flag["spec"]["template"]["spec"]["containers"][0]["args"] =
        serde_yaml_ng::from_str("[rollout-controller]").unwrap();
    assert!(!controller_probe_problems(&no_flag).is_empty());
}

// ---- manifests/examples/ ----

/// The documents of `manifests/examples/FILE`, and its text.
fn example(file: &str) -> (Vec<Value>, String) {
    let files = yaml_files(&manifests_dir().join(EXAMPLES_DIR), &[]);
    let path = manifests_dir().join(EXAMPLES_DIR).join(file);
    assert!(files.contains(&path), "{} is missing", path.display());
    let text = read(&path);
    (documents(&text), text)
}

/// `kubelet-pivot config check` of the ConfigMap's `kubelet` payload.
fn config_check(cm: &Value) -> Result<(), String> {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    fs::write(file.path(), str_of(&cm["data"]["kubelet"], "data.kubelet")).expect("write");
    let mut cmd = Command::new(pivot_bin());
    cmd.arg("config").arg("check").arg(file.path()).env_clear();
    accepts(cmd, "kubelet-pivot config check")
}

/// What is wrong with the example rollout's reference to the example ConfigMap.
fn rollout_reference_problems(rollout: &Value, cm: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let config = &rollout["spec"]["config"];
    let key = config["key"].as_str().unwrap_or("kubelet");
    if config["namespace"] != cm["metadata"]["namespace"]
        || config["name"] != cm["metadata"]["name"]
    {
        problems.push(format!(
            "the rollout's spec.config {config:?} does not name the example ConfigMap {}/{}",
            str_of(&cm["metadata"]["namespace"], "namespace"),
            str_of(&cm["metadata"]["name"], "name")
        ));
    }
    if cm["data"][key].as_str().is_none() {
        problems.push(format!("the example ConfigMap has no key {key}"));
    }
    problems
}

#[test]
fn example_configmap_and_rollout_are_valid_and_agree() {
    let (docs, cm_text) = example("kubelet-config.yaml");
    let cm = the(&docs, "ConfigMap").clone();
    let mut problems = configmap_problems(&cm, &cm_text);
    if let Err(err) = validate(
        &manifests_dir()
            .join(EXAMPLES_DIR)
            .join("kubelet-config.yaml"),
    ) {
        problems.push(err);
    }
    if let Err(err) = config_check(&cm) {
        problems.push(err);
    }
    let (docs, _) = example("rollout.yaml");
    let rollout = the(&docs, "KubeletConfigRollout");
    problems.extend(rollout_reference_problems(rollout, &cm));
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // Broken copies fail.
    let mut other = cm.clone();
    other["metadata"]["name"] = Value::from("kubelet-config-0000000000");
    assert!(!rollout_reference_problems(rollout, &other).is_empty());
    let mut broken = cm.clone();
    broken["data"]["kubelet"] = Value::from(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: -1\n",
    );
    assert!(config_check(&broken).is_err());
}

/// The kubectl command lines of docs/development.md's "try the API flow by hand" block, as
/// argument lists after `kubectl --kubeconfig /tmp/kc`, and its `cargo run` line.
fn by_hand_commands() -> (String, Vec<Vec<String>>) {
    let doc = read(&manifests_dir().join("../docs/development.md"));
    let start = doc
        .find("To try the API flow by hand")
        .expect("docs/development.md has the by-hand paragraph");
    let block = doc[start..]
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the by-hand paragraph has a sh block");
    let mut cargo = String::new();
    let mut commands = Vec::new();
    for line in block.lines() {
        if let Some(rest) = line.strip_prefix("kubectl --kubeconfig /tmp/kc ") {
            commands.push(rest.split_whitespace().map(str::to_owned).collect());
        } else if line.starts_with("cargo run") {
            cargo = line.to_owned();
        } else {
            panic!("a line of the by-hand block the test does not run: {line:?}");
        }
    }
    (cargo, commands)
}

/// The by-hand commands as written, against the test server holding what the binary
/// `cargo run -p testkit -- --node my-node` creates: each succeeds; the example rollout is
/// then served with every field of the file as written (the CRD's schema pruned nothing and
/// refused nothing); applying them again changes nothing.
#[test]
fn the_by_hand_commands_apply_the_crd_and_the_examples() {
    let (cargo, commands) = by_hand_commands();
    assert_eq!(
        cargo, "cargo run -p testkit -- --node my-node --kubeconfig /tmp/kc",
        "the test starts the server as that line does: change both"
    );
    let server = testkit::ApiServer::start();
    server.create_node("my-node", std::iter::empty::<(&str, &str)>());
    let Some(kubectl) = crate::support::kubectl::kubectl_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kc");
    server.write_kubeconfig(&kubeconfig);
    let repo = manifests_dir().join("..");
    let kubectl_run = |args: &[String]| {
        let mut cmd = Command::new(&kubectl);
        cmd.arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg(format!(
                "--cache-dir={}",
                dir.path().join("cache").display()
            ))
            .args(args)
            .current_dir(&repo);
        let output = run(cmd);
        assert!(
            output.status.success(),
            "kubectl {args:?}:\n{}",
            text(&output)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let mut outputs = Vec::new();
    for args in &commands {
        outputs.push(kubectl_run(args));
    }
    let all = outputs.join("");
    assert!(all.contains("my-node"), "{all}");
    assert!(
        all.contains("kubeletconfigrollout.kubelet-pivot.io/pool-a-v2 created")
            && all.contains("configmap/kubelet-config-99ac44f013 created"),
        "{all}"
    );

    // Served as written: every field of the file's spec, with its value.
    let (docs, _) = example("rollout.yaml");
    let written = the(&docs, "KubeletConfigRollout");
    let served: Value = serde_yaml_ng::from_str(&kubectl_run(&[
        "get".into(),
        "kubeletconfigrollout".into(),
        "pool-a-v2".into(),
        "-o".into(),
        "yaml".into(),
    ]))
    .expect("kubectl get -o yaml is YAML");
    let mut missing = Vec::new();
    subset_problems(&written["spec"], &served["spec"], "spec", &mut missing);
    assert!(
        missing.is_empty(),
        "the server changed the example rollout:\n{}",
        missing.join("\n")
    );

    // Again: unchanged.
    let again = kubectl_run(
        &commands
            .iter()
            .find(|args| args.last().is_some_and(|a| a == "manifests/examples/"))
            .expect("the block applies manifests/examples/")
            .clone(),
    );
    assert!(
        again.contains("kubeletconfigrollout.kubelet-pivot.io/pool-a-v2 unchanged"),
        "{again}"
    );
}

/// Where `served` lacks or changed what `written` has (a YAML mapping tree).
fn subset_problems(written: &Value, served: &Value, at: &str, out: &mut Vec<String>) {
    match written.as_mapping() {
        Some(map) => {
            for (key, value) in map {
                let key = str_of(key, "key");
                subset_problems(value, &served[key], &format!("{at}.{key}"), out);
            }
        }
        None => {
            if written != served {
                out.push(format!("{at}: written {written:?}, served {served:?}"));
            }
        }
    }
}
