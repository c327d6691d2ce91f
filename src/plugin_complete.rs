//! `kubectl pivot <TAB>`: kubectl (1.26 and later) completes a plugin's
//! arguments by running `kubectl_complete-pivot` from PATH with the words
//! after `kubectl pivot`, the last one the word being completed, and reads
//! Cobra's `__complete` answer: one candidate a line (`NAME<TAB>description`),
//! then `:DIRECTIVE`. Installed as a link named `kubectl_complete-pivot`, the
//! binary answers that from the same clap definitions as everything else.

use clap::CommandFactory;

use crate::cli::Cli;

/// The executable name kubectl looks for.
pub const COMPLETE_NAME: &str = "kubectl_complete-pivot";

/// Cobra's ShellCompDirectiveDefault: the shell may complete file names.
const DIRECTIVE_FILES: u8 = 0;
/// Cobra's ShellCompDirectiveNoFileComp: only the candidates given.
const DIRECTIVE_NO_FILES: u8 = 4;

/// Whether this process was run as `kubectl_complete-pivot`.
pub fn invoked_as_completer(argv0: Option<&std::ffi::OsStr>) -> bool {
    argv0
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == COMPLETE_NAME)
}

/// The answer to kubectl for `args` (the words after `kubectl pivot`; the
/// last one is being completed, empty at a fresh word).
pub fn answer(args: &[String]) -> String {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let (word, before) = match args.split_last() {
        Some((word, before)) => (word.as_str(), before),
        None => ("", &[][..]),
    };
    let (candidates, directive) = complete(&cmd, before, word);
    let mut out = String::new();
    for (name, help) in candidates {
        out.push_str(&name);
        if !help.is_empty() {
            out.push('\t');
            out.push_str(&help);
        }
        out.push('\n');
    }
    out.push_str(&format!(":{directive}\n"));
    out
}

type Candidates = Vec<(String, String)>;

fn complete(root: &clap::Command, before: &[String], word: &str) -> (Candidates, u8) {
    let mut current = root;
    let mut pending: Option<&clap::Arg> = None;
    let mut positionals = 0;
    for w in before {
        if pending.take().is_some() {
            continue;
        }
        if w == "--" {
            // The kubelet's command line follows.
            return (Vec::new(), DIRECTIVE_FILES);
        }
        if let Some(long) = w.strip_prefix("--") {
            if !long.contains('=') {
                pending = find_long(current, long).filter(|a| takes_value(a));
            }
            continue;
        }
        if let Some(short) = w.strip_prefix('-').filter(|s| s.chars().count() == 1) {
            pending = short
                .chars()
                .next()
                .and_then(|c| current.get_arguments().find(|a| a.get_short() == Some(c)))
                .filter(|a| takes_value(a));
            continue;
        }
        match current.find_subcommand(w) {
            Some(sub) => current = sub,
            None => positionals += 1,
        }
    }
    if let Some(arg) = pending {
        return values(arg, "", word);
    }
    if let Some((flag, value)) = word.strip_prefix("--").and_then(|w| w.split_once('=')) {
        return match find_long(current, flag) {
            Some(arg) => values(arg, &format!("--{flag}="), value),
            None => (Vec::new(), DIRECTIVE_NO_FILES),
        };
    }
    if word.starts_with('-') {
        let flags = current
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| {
                a.get_long()
                    .map(|l| (format!("--{l}"), first_line(a.get_help())))
            })
            .filter(|(name, _)| name.starts_with(word))
            .collect();
        return (flags, DIRECTIVE_NO_FILES);
    }
    let mut found: Candidates = current
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name().starts_with(word))
        .map(|s| (s.get_name().to_owned(), first_line(s.get_about())))
        .collect();
    let positional = current
        .get_positionals()
        .nth(positionals)
        .or_else(|| current.get_positionals().last().filter(|a| a.is_last_set()));
    if let Some(arg) = positional {
        let (values, directive) = values(arg, "", word);
        if found.is_empty() {
            return (values, directive);
        }
        found.extend(values);
    }
    (found, DIRECTIVE_NO_FILES)
}

fn find_long<'a>(cmd: &'a clap::Command, long: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments().find(|a| a.get_long() == Some(long))
}

fn takes_value(arg: &clap::Arg) -> bool {
    arg.get_action().takes_values()
}

/// The values `arg` takes that start with `word` (each prefixed with
/// `prefix`); file names when it has no fixed set.
fn values(arg: &clap::Arg, prefix: &str, word: &str) -> (Candidates, u8) {
    let possible = arg.get_possible_values();
    if possible.is_empty() {
        return (Vec::new(), DIRECTIVE_FILES);
    }
    let found = possible
        .iter()
        .filter(|v| !v.is_hide_set() && v.get_name().starts_with(word))
        .map(|v| {
            (
                format!("{prefix}{}", v.get_name()),
                first_line(v.get_help()),
            )
        })
        .collect();
    (found, DIRECTIVE_NO_FILES)
}

/// A help text's first line, without tabs (the protocol's separator).
fn first_line(help: Option<&clap::builder::StyledStr>) -> String {
    help.map(|h| h.to_string())
        .and_then(|h| h.lines().next().map(|l| l.replace('\t', " ")))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(args: &[&str]) -> (Vec<String>, String) {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let out = answer(&args);
        let mut lines: Vec<&str> = out.lines().collect();
        let directive = lines.pop().unwrap().to_owned();
        let names = lines
            .iter()
            .map(|l| l.split('\t').next().unwrap().to_owned())
            .collect();
        (names, directive)
    }

    #[test]
    fn top_level_subcommands() {
        let (got, directive) = names(&["ro"]);
        assert_eq!(got, ["rollout", "rollout-controller"]);
        assert_eq!(directive, ":4");
        let (all, _) = names(&[""]);
        assert!(all.contains(&"bootstrap".to_owned()), "{all:?}");
        assert!(!all.contains(&"help".to_owned()), "{all:?}");
    }

    #[test]
    fn nested_subcommands_and_flags() {
        assert_eq!(names(&["rollout", "st"]).0, ["start", "status"]);
        let (mut got, _) = names(&["rollout", "start", "--con"]);
        got.sort();
        assert_eq!(got, ["--config", "--config-active-timeout", "--context"]);
        let (got, _) = names(&["--kubeconfig", "x", "rollout", "--o"]);
        assert_eq!(got, ["--output"]);
        let (got, _) = names(&["rollout", "--kubeconfig", "x", "pa"]);
        assert_eq!(got, ["pause"]);
    }

    #[test]
    fn flag_and_positional_values() {
        assert_eq!(names(&["status", "-o", ""]).0, ["table", "json"]);
        assert_eq!(names(&["status", "--output=j"]).0, ["--output=json"]);
        assert_eq!(names(&["rollout", "global-stop", "o"]).0, ["on", "off"]);
        // A file argument: the shell completes file names.
        assert_eq!(names(&["rollout", "--kubeconfig", ""]).1, ":0");
        assert_eq!(names(&["bootstrap", "--", "/usr/b"]).1, ":0");
    }

    #[test]
    fn invoked_by_name() {
        use std::ffi::OsStr;
        assert!(invoked_as_completer(Some(OsStr::new(
            "/usr/local/bin/kubectl_complete-pivot"
        ))));
        assert!(!invoked_as_completer(Some(OsStr::new("kubectl-pivot"))));
        assert!(!invoked_as_completer(None));
    }
}
