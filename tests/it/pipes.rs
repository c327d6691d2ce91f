//! Issue 34 item 1: every command that prints ends quietly with exit 0 on a closed
//! stdout, as coreutils and kubectl do (`kubelet-pivot status | head -1`).
//!
//! Two readers: one that has gone before the command writes anything (its first
//! write fails with EPIPE, every time: the deterministic case), and one that reads a
//! single byte and closes, as `head -c1` does (the command may have written all of a
//! short output into the pipe's buffer by then, so it may also end as it would on a
//! terminal).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::pivot_bin;

/// Every command that prints without a cluster, with the node's paths in `dir`.
fn printing_commands(dir: &Path, uid: &str) -> Vec<Vec<String>> {
    let store = dir.join("dyn").display().to_string();
    let payload = dir.join("kubelet.yaml").display().to_string();
    let lines = [
        "status",
        "status -o json",
        "checkpoint list",
        "completions bash",
        "completions zsh",
        "completions fish",
        "man",
        "--help",
        "rollout --help",
        "rollout crd",
        "help status",
    ];
    let mut commands: Vec<Vec<String>> = lines
        .iter()
        .map(|l| l.split(' ').map(str::to_string).collect())
        .collect();
    commands.push(vec!["checkpoint".into(), "show".into(), uid.into()]);
    commands.push(vec!["config".into(), "check".into(), payload]);
    commands.push(vec![
        "man".into(),
        "--out-dir".into(),
        dir.join("man").display().to_string(),
    ]);
    for c in &mut commands {
        if c[0] == "checkpoint" {
            c.splice(1..1, ["--dynamic-config-dir".to_string(), store.clone()]);
        }
    }
    commands
}

/// A node store in `dir` with one assigned checkpoint; returns its UID.
fn node(dir: &Path) -> String {
    let payload = dir.join("kubelet.yaml");
    std::fs::write(
        &payload,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
    )
    .expect("payload");
    // `man --out-dir` writes here (creating a missing one is item 3's).
    std::fs::create_dir(dir.join("man")).expect("man dir");
    // What a supervisor leaves: `status` and `checkpoint` create neither.
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(dir.join("dyn"))
        .expect("store dir");
    std::fs::write(dir.join("kubelet.lock"), b"").expect("lock file");
    let out = pivot(dir)
        .args(["checkpoint", "--dynamic-config-dir"])
        .arg(dir.join("dyn"))
        .arg("assign")
        .arg(&payload)
        .output()
        .expect("checkpoint assign");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let uid = text
        .split("UID: ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no UID in {text:?}"));
    uid.to_string()
}

fn pivot(dir: &Path) -> Command {
    let mut cmd = Command::new(pivot_bin());
    cmd.env("KUBELET_PIVOT_LOCK_FILE", dir.join("kubelet.lock"))
        .env("KUBELET_PIVOT_DYNAMIC_CONFIG_DIR", dir.join("dyn"))
        .env("KUBELET_PIVOT_ENV_FILE", "")
        .env_remove("KUBECONFIG")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `args` with stdout into a pipe whose reader reads `read` bytes (0: none) and
/// closes; returns the exit code and stderr.
fn run_into_closing_reader(dir: &Path, args: &[String], read: usize) -> (Option<i32>, String) {
    let (mut reader, writer) = std::io::pipe().expect("pipe");
    if read == 0 {
        drop(reader);
        let out = pivot(dir)
            .args(args)
            .stdout(writer)
            .output()
            .expect("spawn");
        return (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into(),
        );
    }
    let mut cmd = pivot(dir);
    cmd.args(args).stdout(writer);
    let child = cmd.spawn().expect("spawn");
    // Our copy of the write end goes with the Command, so the reader sees the end.
    drop(cmd);
    let mut byte = vec![0; read];
    reader.read_exact(&mut byte).expect("the first byte");
    drop(reader);
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn every_printing_command_exits_0_quietly_when_the_reader_has_gone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let uid = node(dir.path());
    for args in printing_commands(dir.path(), &uid) {
        let (code, stderr) = run_into_closing_reader(dir.path(), &args, 0);
        assert_eq!(
            (code, stderr.as_str()),
            (Some(0), ""),
            "kubelet-pivot {args:?} into a closed pipe"
        );
    }
}

#[test]
fn every_printing_command_is_quiet_under_head_c1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let uid = node(dir.path());
    for args in printing_commands(dir.path(), &uid) {
        let (code, stderr) = run_into_closing_reader(dir.path(), &args, 1);
        assert_eq!(stderr, "", "kubelet-pivot {args:?} | head -c1");
        // `status` with no live holder exits 3 when it could print all of its output
        // before the reader closed; on a closed pipe it exits 0.
        let allowed: &[i32] = if args[0] == "status" { &[0, 3] } else { &[0] };
        assert!(
            code.is_some_and(|c| allowed.contains(&c)),
            "kubelet-pivot {args:?} | head -c1 exited {code:?}"
        );
    }
}
