//! Shell completion scripts, generated from the clap definitions.
//!
//! clap_complete's bash script breaks on a hyphen in the binary's name
//! (clap-rs/clap#6421, still open in clap_complete 4.6.11): its dispatch loop
//! spells the state `kubelet__pivot__subcmd__bootstrap` while the case labels
//! read `kubelet__subcmd__pivot__subcmd__bootstrap`, so nothing below the top
//! level completes. The bash script is generated for the hyphen-free name
//! [`BASH_GENERATED_NAME`] (every internal label agrees then) and its
//! `complete` lines are pointed back at the real command name.

use clap::CommandFactory;

use crate::cli::Cli;

/// The command the scripts complete.
pub const BIN_NAME: &str = "kubelet-pivot";
/// The name the bash script is generated for: no hyphen, so clap_complete's
/// state names and case labels agree. Its function is `_kubelet_pivot`.
const BASH_GENERATED_NAME: &str = "kubelet_pivot";

/// What went wrong generating a script.
#[derive(Debug, thiserror::Error)]
pub enum CompletionError {
    #[error("internal error: clap_complete's bash script has no `complete -F _{BASH_GENERATED_NAME} ... {BASH_GENERATED_NAME}` line to point at {BIN_NAME} (has its output changed?)")]
    BashRegistration,
    #[error("internal error: clap_complete wrote a script that is not UTF-8")]
    NotUtf8,
}

/// The completion script for `shell`, for the command `kubelet-pivot`.
pub fn script(shell: clap_complete::Shell) -> Result<Vec<u8>, CompletionError> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    if shell == clap_complete::Shell::Bash {
        // Writing into a Vec cannot fail (generate panics only on a write error).
        clap_complete::generate(shell, &mut cmd, BASH_GENERATED_NAME, &mut buf);
        let text = String::from_utf8(buf).map_err(|_| CompletionError::NotUtf8)?;
        return bash_for_real_name(&text).map(String::into_bytes);
    }
    clap_complete::generate(shell, &mut cmd, BIN_NAME, &mut buf);
    Ok(buf)
}

/// Points the `complete -F _kubelet_pivot ... kubelet_pivot` lines of a bash
/// script generated for [`BASH_GENERATED_NAME`] at [`BIN_NAME`]; nothing else
/// changes (the function and state names are internal).
fn bash_for_real_name(text: &str) -> Result<String, CompletionError> {
    let prefix = format!("complete -F _{BASH_GENERATED_NAME} ");
    let suffix = format!(" {BASH_GENERATED_NAME}");
    let mut out = String::with_capacity(text.len());
    let mut registrations = 0;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        match body.strip_suffix(suffix.as_str()) {
            Some(head) if body.trim_start().starts_with(&prefix) => {
                registrations += 1;
                out.push_str(head);
                out.push(' ');
                out.push_str(BIN_NAME);
                out.push_str(&line[body.len()..]);
            }
            _ => out.push_str(line),
        }
    }
    if registrations == 0 {
        return Err(CompletionError::BashRegistration);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn text(shell: clap_complete::Shell) -> String {
        String::from_utf8(script(shell).unwrap()).unwrap()
    }

    #[test]
    fn every_script_knows_subcommands_and_flags() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let text = text(shell);
            assert!(text.contains("self-hosted"), "{shell}: {text}");
            assert!(text.contains("dynamic-config-dir"), "{shell}");
        }
    }

    #[test]
    fn bash_labels_agree_with_the_dispatch_state() {
        let text = text(clap_complete::Shell::Bash);
        assert!(!text.contains("kubelet__subcmd__pivot"), "{text}");
        assert!(text.contains("cmd=\"kubelet_pivot__subcmd__bootstrap\""));
        assert!(text.contains("\n        kubelet_pivot__subcmd__bootstrap)\n"));
        let registrations: Vec<_> = text
            .lines()
            .filter(|l| l.trim_start().starts_with("complete "))
            .collect();
        assert!(!registrations.is_empty());
        for line in registrations {
            assert!(line.ends_with(" kubelet-pivot"), "{line}");
        }
    }

    #[test]
    fn a_script_without_registration_is_refused() {
        assert!(bash_for_real_name("_f() { :; }\n").is_err());
    }

    /// What bash offers for `words` (the last one is the word under the
    /// cursor), driving the completion function the script registered for
    /// `kubelet-pivot` as bash does on TAB.
    fn bash_complete(words: &[&str]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kubelet-pivot.bash");
        std::fs::write(&file, script(clap_complete::Shell::Bash).unwrap()).unwrap();
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let line = words.join(" ");
        let cword = words.len() - 1;
        let prev = if cword > 0 { words[cword - 1] } else { "" };
        let program = format!(
            r#"source '{file}'
fn=$(complete -p kubelet-pivot | sed -n 's/.*-F \([^ ]*\).*/\1/p')
[ -n "$fn" ] || {{ echo "no completion registered for kubelet-pivot" >&2; exit 1; }}
COMP_WORDS=({words})
COMP_CWORD={cword}
COMP_LINE='{line}'
COMP_POINT=${{#COMP_LINE}}
"$fn" kubelet-pivot '{cur}' '{prev}'
printf '%s\n' "${{COMPREPLY[@]}}"
"#,
            file = file.display(),
            words = quoted.join(" "),
            cur = words[cword],
        );
        let out = Command::new("bash")
            .args(["--norc", "--noprofile", "-c", &program])
            .output()
            .expect("run bash");
        assert!(
            out.status.success(),
            "bash: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn bash_completes_the_top_level() {
        let got = bash_complete(&["kubelet-pivot", "ro"]);
        assert_eq!(got, ["rollout", "rollout-controller"]);
        let all = bash_complete(&["kubelet-pivot", ""]);
        for sub in ["bootstrap", "self-hosted", "status", "checkpoint", "man"] {
            assert!(all.iter().any(|w| w == sub), "{sub} in {all:?}");
        }
    }

    #[test]
    fn bash_completes_subcommands_below_the_top_level() {
        assert_eq!(
            bash_complete(&["kubelet-pivot", "rollout", "st"]),
            ["start", "status"]
        );
        assert_eq!(
            bash_complete(&["kubelet-pivot", "checkpoint", "forget"]),
            ["forget-bad"]
        );
    }

    #[test]
    fn bash_completes_flags_and_values() {
        let mut got = bash_complete(&["kubelet-pivot", "bootstrap", "--st"]);
        got.sort();
        assert_eq!(got, ["--state-dir", "--stop-timeout"]);
        let got = bash_complete(&["kubelet-pivot", "self-hosted", "--gen"]);
        assert_eq!(got, ["--generation"]);
        let mut got = bash_complete(&["kubelet-pivot", "rollout", "start", "--con"]);
        got.sort();
        assert_eq!(got, ["--config", "--config-active-timeout", "--context"]);
        let got = bash_complete(&["kubelet-pivot", "status", "-o", ""]);
        assert_eq!(got, ["table", "json"]);
    }

    /// Writes the script for `shell` into a temp dir under `name`.
    fn script_file(shell: clap_complete::Shell, name: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(name), script(shell).unwrap()).unwrap();
        dir
    }

    /// The first column of each line of `out`, sorted.
    fn words(out: std::process::Output, shell: &str) -> Vec<String> {
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut got: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split('\t').next())
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect();
        got.sort();
        got.dedup();
        got
    }

    /// What fish offers for `line` (`complete -C`, fish's own completion).
    fn fish_complete(line: &str) -> Vec<String> {
        let dir = script_file(clap_complete::Shell::Fish, "kubelet-pivot.fish");
        let program = format!(
            "source '{}'; complete -C '{line}'",
            dir.path().join("kubelet-pivot.fish").display()
        );
        let out = Command::new("fish")
            .args(["--no-config", "-c", &program])
            .output()
            .expect("run fish (Debian: fish; scripts/deps.sh installs it)");
        words(out, "fish")
    }

    /// The zsh harness: `zsh -f FILE LINE FPATH_DIR` prints the matches.
    const ZSH_CAPTURE: &str = include_str!("../tests/shell/zsh_capture.zsh");

    /// What zsh offers for `line`, with the script installed as
    /// `_kubelet-pivot` in its fpath (as install.sh installs it).
    fn zsh_complete(line: &str) -> Vec<String> {
        let dir = script_file(clap_complete::Shell::Zsh, "_kubelet-pivot");
        let harness = dir.path().join("capture.zsh");
        std::fs::write(&harness, ZSH_CAPTURE).unwrap();
        let out = Command::new("timeout")
            .arg("20")
            .arg("zsh")
            .arg("-f")
            .arg(&harness)
            .arg(line)
            .arg(dir.path())
            .output()
            .expect("run zsh (Debian: zsh; scripts/deps.sh installs it)");
        words(out, "zsh")
    }

    #[test]
    fn fish_completes_top_level_subcommands_and_flags() {
        assert_eq!(
            fish_complete("kubelet-pivot ro"),
            ["rollout", "rollout-controller"]
        );
        assert_eq!(
            fish_complete("kubelet-pivot rollout st"),
            ["start", "status"]
        );
        assert_eq!(
            fish_complete("kubelet-pivot bootstrap --st"),
            ["--state-dir", "--stop-timeout"]
        );
    }

    #[test]
    fn zsh_completes_top_level_subcommands_and_flags() {
        assert_eq!(
            zsh_complete("kubelet-pivot ro"),
            ["rollout", "rollout-controller"]
        );
        assert_eq!(
            zsh_complete("kubelet-pivot rollout st"),
            ["start", "status"]
        );
        assert_eq!(
            zsh_complete("kubelet-pivot bootstrap --st"),
            ["--state-dir", "--stop-timeout"]
        );
    }
}
