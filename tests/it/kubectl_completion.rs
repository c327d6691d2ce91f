//! `kubectl pivot <TAB>` through the real kubectl: kubectl runs
//! `kubectl_complete-pivot` from PATH (a link to the binary, as install.sh
//! installs it) and passes its answer to the shell's kubectl completion.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::pivot_bin;

/// A PATH directory with `kubectl-pivot` and `kubectl_complete-pivot` linked
/// to the binary under test, then the system's PATH (kubectl, the shells).
fn plugin_path(dir: &Path) -> String {
    for name in ["kubectl-pivot", "kubectl_complete-pivot"] {
        std::os::unix::fs::symlink(pivot_bin(), dir.join(name)).expect("link the plugin");
    }
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    )
}

/// The first column of each candidate line, sorted (`:DIRECTIVE` dropped).
fn candidates(out: Output, what: &str) -> Vec<String> {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with(':') && !l.is_empty())
        .filter_map(|l| l.split('\t').next().map(str::to_owned))
        .collect();
    got.sort();
    got
}

/// kubectl's own `__complete` for `kubectl pivot ARGS`.
fn kubectl_complete(args: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new("kubectl")
        .arg("__complete")
        .arg("pivot")
        .args(args)
        .env("PATH", plugin_path(dir.path()))
        .output()
        .expect("run kubectl (Debian: kubernetes-client; scripts/deps.sh installs it)");
    candidates(out, "kubectl __complete")
}

#[test]
fn kubectl_completes_the_plugin_top_level_subcommands_and_flags() {
    assert_eq!(kubectl_complete(&["ro"]), ["rollout", "rollout-controller"]);
    assert_eq!(kubectl_complete(&["rollout", "st"]), ["start", "status"]);
    assert_eq!(
        kubectl_complete(&["rollout", "start", "--con"]),
        ["--config", "--config-active-timeout", "--context"]
    );
}

#[test]
fn fish_completes_kubectl_pivot_through_kubectl() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new("fish")
        .args([
            "--no-config",
            "-c",
            "kubectl completion fish | source; complete -C 'kubectl pivot rollout st'",
        ])
        .env("PATH", plugin_path(dir.path()))
        .output()
        .expect("run fish (Debian: fish; scripts/deps.sh installs it)");
    assert_eq!(candidates(out, "fish"), ["start", "status"]);
}

/// bash-completion's loader, which kubectl's bash script needs.
const BASH_COMPLETION: &str = "/usr/share/bash-completion/bash_completion";

#[test]
fn bash_completes_kubectl_pivot_through_kubectl() {
    assert!(
        Path::new(BASH_COMPLETION).is_file(),
        "{BASH_COMPLETION} missing (Debian: bash-completion; scripts/deps.sh installs it)"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    // As bash does on TAB: the function registered for kubectl, with the words.
    let program = format!(
        r#"source {BASH_COMPLETION}
source <(kubectl completion bash)
COMP_LINE='kubectl pivot rollout st'
COMP_POINT=${{#COMP_LINE}}
COMP_WORDS=(kubectl pivot rollout st)
COMP_CWORD=3
fn=$(complete -p kubectl | sed -n 's/.*-F \([^ ]*\).*/\1/p')
"$fn" kubectl st rollout
printf '%s\n' "${{COMPREPLY[@]}}""#
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .env("PATH", plugin_path(dir.path()))
        .output()
        .expect("run bash");
    assert_eq!(candidates(out, "bash"), ["start", "status"]);
}

#[test]
fn zsh_completes_kubectl_pivot_through_kubectl() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = plugin_path(dir.path());
    let fpath = dir.path().join("fpath");
    std::fs::create_dir(&fpath).expect("fpath dir");
    // kubectl's zsh script starts with `#compdef kubectl`: installed as _kubectl.
    let script = Command::new("kubectl")
        .args(["completion", "zsh"])
        .output()
        .expect("run kubectl completion zsh");
    assert!(script.status.success());
    std::fs::write(fpath.join("_kubectl"), &script.stdout).expect("write _kubectl");
    let harness = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/shell/zsh_capture.zsh");
    let out = Command::new("timeout")
        .args(["20", "zsh", "-f", harness, "kubectl pivot rollout st"])
        .arg(&fpath)
        .env("PATH", path)
        .output()
        .expect("run zsh (Debian: zsh; scripts/deps.sh installs it)");
    assert_eq!(candidates(out, "zsh"), ["start", "status"]);
}
