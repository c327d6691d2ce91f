//! Issue 34 item 6: the help of every subcommand describes each positional argument
//! and shows no empty default (`[default: ""]`); `rollout crd` refuses the cluster flags it
//! would ignore; a duration without its unit is refused with the docs' examples.

use std::process::Command;

use crate::support::pivot_bin;

const SUBCOMMANDS: &[&str] = &[
    "",
    "bootstrap",
    "self-hosted",
    "status",
    "checkpoint",
    "checkpoint list",
    "checkpoint show",
    "checkpoint assign",
    "checkpoint reset",
    "checkpoint forget-bad",
    "rollout",
    "rollout start",
    "rollout status",
    "rollout pause",
    "rollout resume",
    "rollout undo",
    "rollout history",
    "rollout global-stop",
    "rollout crd",
    "rollout-controller",
    "config check",
    "completions",
    "man",
];

fn help(sub: &str) -> String {
    let out = Command::new(pivot_bin())
        .args(sub.split_whitespace())
        .arg("--help")
        .env_remove("KUBECONFIG")
        .env("KUBELET_PIVOT_ENV_FILE", "")
        .output()
        .expect("kubelet-pivot --help");
    assert!(out.status.success(), "{sub} --help: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_positional_argument_is_described_and_no_default_is_empty() {
    for sub in SUBCOMMANDS {
        let text = help(sub);
        assert!(!text.contains("[default: \"\"]"), "{sub} --help:\n{text}");
        let Some(args) = text.split("\nArguments:\n").nth(1) else {
            continue;
        };
        let args = args.split("\n\n").next().unwrap_or_default();
        let mut lines = args.lines().peekable();
        while let Some(line) = lines.next() {
            let line = line.trim_start();
            if !line.starts_with('<') {
                continue;
            }
            // `<NAME>  text`, or the text on the next, further indented line.
            let described = line
                .split_once(">  ")
                .is_some_and(|(_, d)| !d.trim().is_empty())
                || lines
                    .peek()
                    .is_some_and(|next| next.starts_with("          ") && !next.trim().is_empty());
            assert!(described, "{sub}: {line:?} has no description:\n{text}");
        }
    }
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(pivot_bin())
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBELET_PIVOT_STOP_TIMEOUT")
        .output()
        .expect("kubelet-pivot")
}

#[test]
fn rollout_crd_refuses_the_cluster_flags_it_would_ignore() {
    for flags in [
        &["--kubeconfig", "/nowhere"][..],
        &["--context", "prod"],
        &["-o", "json"],
        &["-o", "table"],
    ] {
        let out = run(&[&["rollout", "crd"][..], flags].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "rollout crd {flags:?}: {out:?}");
        assert!(
            stderr.contains("rollout crd takes no") && out.stdout.is_empty(),
            "rollout crd {flags:?}: {stderr}"
        );
    }
    let out = run(&["rollout", "crd"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("apiVersion: apiextensions.k8s.io/v1"));
}

#[test]
fn a_duration_without_a_unit_is_refused_with_the_docs_style() {
    let out = run(&["bootstrap", "--stop-timeout", "5", "--", "/bin/true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'--stop-timeout <DURATION>'")
            && stderr.contains("a duration needs a unit, like 5s"),
        "{stderr}"
    );
    assert!(!stderr.contains("5sec"), "{stderr}");
}
