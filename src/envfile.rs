//! The node's settings for the operator commands: the `KUBELET_PIVOT_*`
//! variables of `/etc/default/kubelet-pivot`, the systemd unit's
//! EnvironmentFile, become the defaults of `status` and `checkpoint ...`, so
//! they read the store and lock file the node's supervisor uses. Flags and
//! the process environment still win (clap prefers both to a default).
//!
//! The supervisors (`bootstrap`, `self-hosted`) do not read the file: under
//! systemd the unit's `EnvironmentFile=` has already put it into their
//! environment (reading it again would apply an edit that `systemctl
//! restart` has not applied yet), and a self-hosted supervisor runs in a
//! pod, whose settings come from the pod spec, not from the host's
//! `/etc/default`.
//!
//! The file is read as a possibly hostile one: not through a symlink, never
//! a FIFO or a device (no hang), root's or ours and not writable by group or
//! others (another user must not redirect the operator's commands), at most
//! [`MAX_ENV_FILE`] bytes. A line that is not EnvironmentFile syntax is one
//! error naming the file and the line.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::cli::DEFAULT_DYNAMIC_CONFIG_DIR;
use kp_node::observe::preflight::Refusal;
use kp_node::safefs::fsutil::{self, Owner, ReadError, ReadPolicy};

/// The systemd unit's EnvironmentFile.
pub const DEFAULT_ENV_FILE: &str = "/etc/default/kubelet-pivot";
/// Names another file to read instead; set and empty: none.
pub const ENV_FILE_VAR: &str = "KUBELET_PIVOT_ENV_FILE";
/// Largest env file read (the shipped one is about 4 KiB).
pub const MAX_ENV_FILE: u64 = 64 * 1024;
/// Only these variables are taken from the file.
const PREFIX: &str = "KUBELET_PIVOT_";
/// The subcommands whose defaults come from the file.
pub const OPERATOR_COMMANDS: [&str; 2] = ["status", "checkpoint"];
/// The variable of the node's checkpoint store.
const STORE_VAR: &str = "KUBELET_PIVOT_DYNAMIC_CONFIG_DIR";
/// Longest piece of a bad line quoted in an error.
const MAX_QUOTED: usize = 60;

/// Why the env file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EnvFileError {
    #[error("{path}:{line}: {problem}")]
    Syntax {
        path: PathBuf,
        line: usize,
        problem: SyntaxError,
    },
    #[error("{0}; fix it, or set {ENV_FILE_VAR}= (empty) to read no settings file")]
    Read(ReadError),
    #[error(
        "{ENV_FILE_VAR} names {path}, which does not exist; set it empty to read no settings file"
    )]
    Missing { path: PathBuf },
    #[error("{var}={value} in {path} is not a valid {flag}: {detail}")]
    Value {
        var: String,
        value: String,
        path: PathBuf,
        flag: String,
        detail: String,
    },
}

/// What is wrong with one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    #[error("expected KEY=VALUE (EnvironmentFile syntax), found `{0}`")]
    NoEquals(String),
    #[error("`{0}` is not a variable name (letters, digits and _)")]
    BadKey(String),
    #[error("`export` is shell syntax, not EnvironmentFile syntax: write `{0}=...`")]
    Export(String),
    #[error("the {0} quote is not closed")]
    Unclosed(&'static str),
    #[error("text after the closing quote: `{0}`")]
    AfterQuote(String),
    #[error("the file is not UTF-8")]
    NotUtf8,
}

impl EnvFileError {
    /// The file, when reading it was refused for want of permission (a
    /// non-root operator command on a file only root may read).
    pub fn denied(&self) -> Option<&Path> {
        match self {
            EnvFileError::Read(ReadError::Io { path, source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                Some(path)
            }
            _ => None,
        }
    }
}

/// Why the settings of a command line cannot be used.
#[derive(Debug)]
pub enum Unusable {
    /// The file may only be read by root.
    Refused(Refusal),
    /// A bad file, or a bad value in it.
    Bad(EnvFileError),
}

/// The node's settings for the command line `args` (without the program
/// name): read for an operator command, each value checked unless the
/// command line or the environment overrides it.
pub fn for_command_line(args: &[OsString]) -> Result<NodeSettings, Unusable> {
    use clap::CommandFactory;
    let sub = args.first().map(OsString::as_os_str);
    let checked = NodeSettings::load_for(sub).and_then(|s| {
        s.check(
            &crate::cli::Cli::command(),
            args.get(1..).unwrap_or_default(),
        )
        .map(|()| s)
    });
    checked.map_err(|err| match err.denied() {
        Some(path) => Unusable::Refused(Refusal::NeedsRoot {
            command: if sub.is_some_and(|s| s == "status") {
                "status"
            } else {
                "checkpoint"
            },
            path: path.to_path_buf(),
        }),
        None => Unusable::Bad(err),
    })
}

/// The `KUBELET_PIVOT_*` values of the node's settings file, and which file
/// they came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSettings {
    /// The file read; `None` when there was none.
    pub path: Option<PathBuf>,
    pub values: BTreeMap<String, String>,
}

impl NodeSettings {
    /// The settings for the subcommand `sub` (the first argument): the file
    /// of [`ENV_FILE_VAR`], else [`DEFAULT_ENV_FILE`], for an operator
    /// command; nothing for the others.
    pub fn load_for(sub: Option<&OsStr>) -> Result<NodeSettings, EnvFileError> {
        if !sub.is_some_and(|s| OPERATOR_COMMANDS.iter().any(|c| s == *c)) {
            return Ok(NodeSettings::default());
        }
        match std::env::var_os(ENV_FILE_VAR) {
            Some(p) if p.is_empty() => Ok(NodeSettings::default()),
            Some(p) => {
                let path = PathBuf::from(p);
                NodeSettings::read(&path)?.ok_or(EnvFileError::Missing { path })
            }
            None => Ok(NodeSettings::read(Path::new(DEFAULT_ENV_FILE))?.unwrap_or_default()),
        }
    }

    /// Reads and parses `path`; `Ok(None)` when it does not exist.
    pub fn read(path: &Path) -> Result<Option<NodeSettings>, EnvFileError> {
        let policy = ReadPolicy {
            what: "settings file",
            max_len: MAX_ENV_FILE,
            owner: Owner::RootOrMe,
            private: true,
        };
        let Some(data) = fsutil::read_bounded(path, &policy).map_err(EnvFileError::Read)? else {
            return Ok(None);
        };
        let syntax = |line, problem| EnvFileError::Syntax {
            path: path.to_path_buf(),
            line,
            problem,
        };
        let text = String::from_utf8(data).map_err(|_| syntax(1, SyntaxError::NotUtf8))?;
        let values = parse(&text)
            .map_err(|(line, problem)| syntax(line, problem))?
            .into_iter()
            .filter(|(k, v)| k.starts_with(PREFIX) && k != ENV_FILE_VAR && !v.is_empty())
            .collect();
        Ok(Some(NodeSettings {
            path: Some(path.to_path_buf()),
            values,
        }))
    }

    /// The value of `var` in the file, if it sets one.
    pub fn get(&self, var: &str) -> Option<&str> {
        self.values.get(var).map(String::as_str)
    }

    /// Where a value of the file is said to come from, for messages.
    pub fn describe(&self, var: &str) -> String {
        match &self.path {
            Some(p) if self.values.contains_key(var) => format!("{var} in {}", p.display()),
            _ => "the built-in default".to_string(),
        }
    }

    /// Why an assignment to `store` may not reach the node's supervisor: it
    /// is not the node's store (the file's `KUBELET_PIVOT_DYNAMIC_CONFIG_DIR`,
    /// else the built-in default) while that one exists.
    pub fn not_the_nodes_store(&self, store: &Path) -> Option<String> {
        let node = PathBuf::from(self.get(STORE_VAR).unwrap_or(DEFAULT_DYNAMIC_CONFIG_DIR));
        // The node's store does not exist: no supervisor of the node runs.
        let node_real = std::fs::canonicalize(&node).ok()?;
        if std::fs::canonicalize(store).is_ok_and(|s| s == node_real) {
            return None;
        }
        Some(format!(
            "{} is not the node's checkpoint store {} ({}): the node's supervisor does not read it",
            store.display(),
            node.display(),
            self.describe(STORE_VAR)
        ))
    }

    /// Checks each value the file gives a flag of an operator command with
    /// that flag's own parser, so that a bad one is reported as the file's
    /// (clap would name only the flag). A value the command line (`args`)
    /// or the process environment overrides is not used, and not checked.
    pub fn check(&self, command: &clap::Command, args: &[OsString]) -> Result<(), EnvFileError> {
        let Some(path) = self.path.as_deref().filter(|_| !self.values.is_empty()) else {
            return Ok(());
        };
        OPERATOR_COMMANDS
            .iter()
            .filter_map(|name| command.find_subcommand(name))
            .try_for_each(|sub| self.check_in(sub, path, args))
    }

    fn check_in(
        &self,
        command: &clap::Command,
        path: &Path,
        args: &[OsString],
    ) -> Result<(), EnvFileError> {
        for arg in command.get_arguments() {
            let Some(var) = arg.get_env().and_then(OsStr::to_str) else {
                continue;
            };
            let Some(value) = self.values.get(var) else {
                continue;
            };
            let Some(long) = arg.get_long().filter(|_| arg.get_action().takes_values()) else {
                continue;
            };
            if std::env::var_os(var).is_some_and(|v| !v.is_empty())
                || crate::env_error::on_command_line(long, arg.get_short(), args)
            {
                continue;
            }
            // The flag alone, given the value on a command line of its own.
            let alone = arg.clone().env(None).required(false).global(false);
            let parsed = clap::Command::new("check")
                .no_binary_name(true)
                .arg(alone)
                .try_get_matches_from([format!("--{long}={value}")]);
            if let Err(err) = parsed {
                return Err(EnvFileError::Value {
                    var: var.to_string(),
                    value: quote(value),
                    path: path.to_path_buf(),
                    flag: format!("--{long}"),
                    detail: clap_detail(&err),
                });
            }
        }
        command
            .get_subcommands()
            .try_for_each(|sub| self.check_in(sub, path, args))
    }

    /// `command` with the file's values as the defaults of the operator
    /// commands' flags whose `env` is the variable (clap still prefers the
    /// flag and the process environment).
    pub fn apply(&self, mut command: clap::Command) -> clap::Command {
        if self.values.is_empty() {
            return command;
        }
        for name in OPERATOR_COMMANDS {
            command = command.mut_subcommand(name, |sub| self.apply_to(sub));
        }
        command
    }

    fn apply_to(&self, mut command: clap::Command) -> clap::Command {
        let targets: Vec<(clap::Id, String)> = command
            .get_arguments()
            .filter_map(|arg| {
                let var = arg.get_env()?.to_str()?;
                Some((arg.get_id().clone(), self.values.get(var)?.clone()))
            })
            .collect();
        for (id, value) in targets {
            // clap keeps a default as `&'static str` (without its `string`
            // feature): leaked once per process, at most MAX_ENV_FILE bytes.
            let value: &'static str = Box::leak(value.into_boxed_str());
            command = command.mut_arg(id, |arg| arg.default_value(value));
        }
        let subs: Vec<String> = command
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        for sub in subs {
            command = command.mut_subcommand(sub, |s| self.apply_to(s));
        }
        command
    }
}

/// Parses EnvironmentFile text (systemd's syntax, strictly): blank lines,
/// `#` and `;` comments, `KEY=VALUE` with the value optionally in single or
/// double quotes, a line continued by a trailing backslash. Returns the
/// pairs in order (a later one wins), or the 1-based line of the first
/// error.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, (usize, SyntaxError)> {
    let mut pairs = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((index, first)) = lines.next() {
        let number = index + 1;
        let trimmed = first.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        let mut logical = first.to_string();
        while let Some(stripped) = logical.strip_suffix('\\') {
            logical = stripped.to_string();
            match lines.next() {
                Some((_, next)) => logical.push_str(next),
                None => break,
            }
        }
        pairs.push(parse_line(&logical).map_err(|e| (number, e))?);
    }
    Ok(pairs)
}

fn parse_line(line: &str) -> Result<(String, String), SyntaxError> {
    let Some((key, value)) = line.split_once('=') else {
        return Err(SyntaxError::NoEquals(quote(line.trim())));
    };
    let key = key.trim();
    if let Some(rest) = key.strip_prefix("export ") {
        return Err(SyntaxError::Export(quote(rest.trim())));
    }
    let mut chars = key.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(SyntaxError::BadKey(quote(key)));
    }
    Ok((key.to_string(), parse_value(value.trim())?))
}

/// A value: in double quotes (`\"`, `\\`, `\$` and `` \` `` unescaped), in
/// single quotes (literal), or bare (literal, surrounding blanks dropped).
fn parse_value(value: &str) -> Result<String, SyntaxError> {
    let (quote_char, name) = match value.chars().next() {
        Some('"') => ('"', "double"),
        Some('\'') => ('\'', "single"),
        _ => return Ok(value.to_string()),
    };
    let mut out = String::new();
    let mut chars = value[1..].chars();
    loop {
        match chars.next() {
            None => return Err(SyntaxError::Unclosed(name)),
            Some(c) if c == quote_char => break,
            Some('\\') if quote_char == '"' => match chars.next() {
                Some(c @ ('"' | '\\' | '$' | '`')) => out.push(c),
                Some(c) => {
                    out.push('\\');
                    out.push(c);
                }
                None => return Err(SyntaxError::Unclosed(name)),
            },
            Some(c) => out.push(c),
        }
    }
    let rest = chars.as_str().trim();
    if !rest.is_empty() {
        return Err(SyntaxError::AfterQuote(quote(rest)));
    }
    Ok(out)
}

/// What clap says is wrong with a value, on one line, without its `error:`
/// prefix and usage hint.
fn clap_detail(err: &clap::Error) -> String {
    let text = err.render().to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("For more information") && !l.starts_with("Usage:")
        })
        .collect();
    lines.join(" ").trim_start_matches("error: ").to_string()
}

/// A bounded, escaped piece of a line for an error message.
fn quote(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(MAX_QUOTED)
        .flat_map(char::escape_debug)
        .collect();
    if s.chars().count() > MAX_QUOTED {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Vec<(String, String)> {
        parse(text).unwrap()
    }

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn reads_comments_blanks_and_values() {
        let text = "# comment\n; also\n\n  \nKUBELET_PIVOT_LOCK_FILE=/run/k.lock\n  KUBELET_ARGS = --a --b  \nEMPTY=\n";
        assert_eq!(
            ok(text),
            vec![
                pair("KUBELET_PIVOT_LOCK_FILE", "/run/k.lock"),
                pair("KUBELET_ARGS", "--a --b"),
                pair("EMPTY", ""),
            ]
        );
    }

    #[test]
    fn reads_quotes_and_escapes() {
        assert_eq!(ok("A=\"/a b\"")[0].1, "/a b");
        assert_eq!(ok("A='/a \\b'")[0].1, "/a \\b");
        assert_eq!(ok("A=\"x\\\"y\\\\z\\n\"")[0].1, "x\"y\\z\\n");
        assert_eq!(ok("A=a=b")[0].1, "a=b");
    }

    #[test]
    fn the_shipped_file_parses_and_sets_no_default() {
        let shipped = include_str!("../systemd/kubelet-pivot.default");
        let pairs = ok(shipped);
        assert!(pairs.iter().any(|(k, _)| k == "KUBELET_ARGS"), "{pairs:?}");
        assert!(
            !pairs.iter().any(|(k, _)| k.starts_with(PREFIX)),
            "{pairs:?}"
        );
        // Every commented KUBELET_PIVOT_* line parses once uncommented.
        let uncommented: String = shipped
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .filter(|l| l.starts_with(PREFIX))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(ok(&uncommented).len() > 10, "{uncommented}");
    }

    #[test]
    fn joins_continued_lines() {
        assert_eq!(ok("A=one \\\ntwo\nB=3")[0].1, "one two");
        assert_eq!(ok("A=one \\\ntwo\nB=3")[1], pair("B", "3"));
    }

    #[test]
    fn names_the_bad_line() {
        let err = |text: &str| parse(text).unwrap_err();
        assert_eq!(
            err("# c\nA=1\nnonsense\n"),
            (3, SyntaxError::NoEquals("nonsense".into()))
        );
        assert_eq!(
            err("export KUBELET_PIVOT_LOCK_FILE=/x"),
            (1, SyntaxError::Export("KUBELET_PIVOT_LOCK_FILE".into()))
        );
        assert_eq!(err("1A=x"), (1, SyntaxError::BadKey("1A".into())));
        assert_eq!(err("A-B=x"), (1, SyntaxError::BadKey("A-B".into())));
        assert_eq!(err("A=\"open"), (1, SyntaxError::Unclosed("double")));
        assert_eq!(err("\n\nA='open"), (3, SyntaxError::Unclosed("single")));
        assert_eq!(err("A=\"x\" y"), (1, SyntaxError::AfterQuote("y".into())));
    }

    #[test]
    fn quotes_bad_lines_bounded_and_escaped() {
        let long = format!("\u{1b}[31m{}", "x".repeat(500));
        let (_, e) = parse(&long).unwrap_err();
        let text = e.to_string();
        assert!(text.len() < 160, "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
    }

    #[test]
    fn keeps_only_our_variables() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("env");
        std::fs::write(
            &p,
            "KUBELET_ARGS=--x\nKUBELET_PIVOT_DYNAMIC_CONFIG_DIR=/srv/kp\nKUBELET_PIVOT_ENV_FILE=/y\nKUBELET_PIVOT_STATE_DIR=\n",
        )
        .unwrap();
        let s = NodeSettings::read(&p).unwrap().unwrap();
        assert_eq!(s.values.len(), 1, "{s:?}");
        assert_eq!(s.get("KUBELET_PIVOT_DYNAMIC_CONFIG_DIR"), Some("/srv/kp"));
        assert!(s
            .describe("KUBELET_PIVOT_DYNAMIC_CONFIG_DIR")
            .contains("env"));
        assert_eq!(
            s.describe("KUBELET_PIVOT_LOCK_FILE"),
            "the built-in default"
        );
    }

    #[test]
    fn refuses_odd_files_without_blocking() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(NodeSettings::read(&fifo).is_err());
        let big = d.path().join("big");
        std::fs::write(&big, "#".repeat(MAX_ENV_FILE as usize + 1)).unwrap();
        assert!(NodeSettings::read(&big).is_err());
        let open = d.path().join("open");
        std::fs::write(&open, "A=1\n").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(NodeSettings::read(&open).is_err());
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&big, &link).unwrap();
        assert!(NodeSettings::read(&link).is_err());
        assert!(NodeSettings::read(&d.path().join("none"))
            .unwrap()
            .is_none());
        let bad = d.path().join("bad");
        std::fs::write(&bad, "A=1\nB\n").unwrap();
        let text = NodeSettings::read(&bad).unwrap_err().to_string();
        assert!(
            text.starts_with(&format!("{}:2: ", bad.display())),
            "{text}"
        );
    }

    #[test]
    fn supervisors_read_no_file() {
        assert_eq!(
            NodeSettings::load_for(Some(OsStr::new("bootstrap"))).unwrap(),
            NodeSettings::default()
        );
        assert_eq!(
            NodeSettings::load_for(None).unwrap(),
            NodeSettings::default()
        );
    }

    #[test]
    fn another_store_than_the_nodes_existing_one_is_named() {
        let d = tempfile::tempdir().unwrap();
        let (node, other) = (d.path().join("node"), d.path().join("other"));
        std::fs::create_dir(&other).unwrap();
        let settings = NodeSettings {
            path: Some(d.path().join("env")),
            values: BTreeMap::from([(STORE_VAR.to_string(), node.display().to_string())]),
        };
        assert_eq!(
            settings.not_the_nodes_store(&other),
            None,
            "no node store yet"
        );
        std::fs::create_dir(&node).unwrap();
        let text = settings.not_the_nodes_store(&other).unwrap();
        assert!(text.contains(&format!("{STORE_VAR} in ")), "{text}");
        assert_eq!(settings.not_the_nodes_store(&node.join(".")), None);
    }

    #[test]
    fn a_bad_value_is_reported_as_the_files() {
        use clap::CommandFactory;
        let settings = NodeSettings {
            path: Some(PathBuf::from("/etc/default/kubelet-pivot")),
            values: BTreeMap::from([("KUBELET_PIVOT_OUTPUT".to_string(), "yaml".to_string())]),
        };
        let command = crate::cli::Cli::command();
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        let text = settings
            .check(&command, &args(&["status"]))
            .unwrap_err()
            .to_string();
        for overridden in [
            &["status", "-o", "json"][..],
            &["status", "-ojson"],
            &["status", "--output=table"],
        ] {
            settings.check(&command, &args(overridden)).unwrap();
        }
        assert!(
            text.starts_with(
                "KUBELET_PIVOT_OUTPUT=yaml in /etc/default/kubelet-pivot is not a valid --output: "
            ),
            "{text}"
        );
        assert!(text.contains("table, json"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }

    #[test]
    fn values_become_defaults_of_the_operator_commands() {
        use clap::{CommandFactory, FromArgMatches};
        let settings = NodeSettings {
            path: Some(PathBuf::from("/etc/default/kubelet-pivot")),
            values: BTreeMap::from([
                (
                    "KUBELET_PIVOT_DYNAMIC_CONFIG_DIR".to_string(),
                    "/srv/kp".to_string(),
                ),
                (
                    "KUBELET_PIVOT_LOCK_FILE".to_string(),
                    "/run/k.lock".to_string(),
                ),
            ]),
        };
        let parse = |args: &[&str]| {
            let m = settings
                .apply(crate::cli::Cli::command())
                .try_get_matches_from(args)
                .unwrap();
            crate::cli::Cli::from_arg_matches(&m).unwrap().command
        };
        let crate::cli::Command::Status(a) = parse(&["kp", "status"]) else {
            panic!("not status")
        };
        assert_eq!(a.paths.dynamic_config_dir, PathBuf::from("/srv/kp"));
        assert_eq!(a.paths.lock_file, PathBuf::from("/run/k.lock"));
        let crate::cli::Command::Status(a) =
            parse(&["kp", "status", "--dynamic-config-dir", "/flag"])
        else {
            panic!("not status")
        };
        assert_eq!(a.paths.dynamic_config_dir, PathBuf::from("/flag"));
        let crate::cli::Command::Checkpoint(a) = parse(&["kp", "checkpoint", "list"]) else {
            panic!("not checkpoint")
        };
        assert_eq!(a.dynamic_config_dir, PathBuf::from("/srv/kp"));
        let crate::cli::Command::Checkpoint(a) =
            parse(&["kp", "checkpoint", "list", "--dynamic-config-dir", "/flag"])
        else {
            panic!("not checkpoint")
        };
        assert_eq!(a.dynamic_config_dir, PathBuf::from("/flag"));
    }
}
