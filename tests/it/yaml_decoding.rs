//! YAML 1.1 scalars against the real binary (issue 33): the kubelet's
//! decoder reads an unquoted `serializeImagePulls: no` as false and a quoted
//! `"yes"` as a string. `config check` and `checkpoint assign` accept both,
//! warn about the unquoted `no` with what to write, and the kubelet is then
//! started with `serializeImagePulls: false` and the taint value "yes". An
//! unquoted `on` as a taint value (a boolean to the kubelet, which then
//! refuses it) is refused before any restart.

use crate::support;

use std::process::{Command, Output};
use std::time::Duration;

use support::{pivot_bin, wait_until, Proc, Scene};

const DOCUMENT: &str = "serializeImagePulls: no\n\
registerWithTaints:\n\
- key: dedicated\n  value: \"yes\"\n  effect: NoSchedule\n";

const WARNING: &str = "warning: serializeImagePulls: the unquoted no is read as false, as the \
kubelet reads it; write false (YAML 1.1 reads no as false; YAML 1.2 as the string \"no\")";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn pivot(scene: &Scene, args: &[&str]) -> Output {
    Command::new(pivot_bin())
        .args(args)
        .arg("--dynamic-config-dir")
        .arg(scene.config_dir())
        .output()
        .expect("run kubelet-pivot")
}

fn config_check(file: &std::path::Path) -> Output {
    Command::new(pivot_bin())
        .args(["config", "check"])
        .arg(file)
        .output()
        .expect("run config check")
}

#[test]
fn yaml_1_1_booleans_and_quoted_strings_run_as_the_kubelet_reads_them() {
    let scene = Scene::new();
    let file = scene.kubelet_config_file("yaml11.yaml", DOCUMENT);

    let check = config_check(&file);
    let out = text(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{out}{}", text(&check.stderr));
    assert!(out.contains(": valid\n"), "{out}");
    assert!(out.contains(&format!("  {WARNING}\n")), "{out}");
    assert_eq!(
        out.matches("warning:").count(),
        1,
        "the quoted \"yes\" warns nothing: {out}"
    );

    let assigned = pivot(
        &scene,
        &["checkpoint", "assign", file.to_str().expect("utf-8")],
    );
    let out = text(&assigned.stdout);
    assert!(assigned.status.success(), "{out}{}", text(&assigned.stderr));
    assert!(out.contains(&format!("{WARNING}\n")), "{out}");
    assert!(out.contains("assigned "), "{out}");

    // The kubelet starts with the kubelet's reading of both scalars.
    let _bootstrap: Proc =
        scene.spawn(scene.pivot(&["bootstrap", "--stop-timeout", "2s"], &[], &[]));
    let config = wait_until(
        Duration::from_secs(10),
        "a kubelet on the assigned config",
        || {
            let pid = scene.running_kubelets().first().copied()?;
            Some(scene.config_of(pid))
        },
    );
    let effective: serde_json::Value = serde_json::from_str(&config).expect("JSON config");
    assert_eq!(
        effective["serializeImagePulls"],
        serde_json::json!(false),
        "{config}"
    );
    assert_eq!(
        effective["registerWithTaints"][0]["value"],
        serde_json::json!("yes"),
        "{config}"
    );
    scene.assert_no_overlap();
}

#[test]
fn an_unquoted_yaml_1_1_boolean_in_a_string_field_is_refused_with_the_fix() {
    let scene = Scene::new();
    let file = scene.kubelet_config_file(
        "taint-on.yaml",
        "registerWithTaints:\n- key: dedicated\n  value: on\n  effect: NoSchedule\n",
    );
    let check = config_check(&file);
    let out = text(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "registerWithTaints[0].value: the unquoted on is the boolean true to the kubelet"
        ) && out.contains("or \"on\" quoted for the string"),
        "{out}"
    );
    let refused = pivot(
        &scene,
        &["checkpoint", "assign", file.to_str().expect("utf-8")],
    );
    let err = text(&refused.stderr);
    assert!(!refused.status.success(), "{}", text(&refused.stdout));
    assert!(err.contains("the unquoted on is the boolean true"), "{err}");
    let list = pivot(&scene, &["checkpoint", "list"]);
    assert!(
        !text(&list.stdout).contains("assigned"),
        "{}",
        text(&list.stdout)
    );
}
