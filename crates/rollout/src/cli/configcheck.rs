//! `kubelet-pivot config check FILE [--against FILE]`, for CI pipelines: FILE checked by
//! the validator the node runs (each error with its field), and the change class and
//! action of moving from the `--against` config to FILE, as the node's supervisor
//! decides them. The exit status says which (see [`EXIT_CODES_HELP`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;

use super::args::Output;
use super::render::printable;
use kp_kubelet_config::disruption::{self, Action, Change, Class, Overrides, Policy};
use kp_kubelet_config::gates::{GateModel, HostFacts, KubeletVersion};
use kp_kubelet_config::{ConfigError, KubeletConfig, ValidationTarget};

/// FILE is valid; against the other config, the change restarts the kubelet in place
/// (or changes nothing).
pub const EXIT_OK: u8 = 0;
/// FILE does not load or does not validate.
pub const EXIT_INVALID: u8 = 1;
/// A file cannot be read, or a flag is wrong.
pub const EXIT_USAGE: u8 = 2;
/// The `--against` config does not load.
pub const EXIT_AGAINST_INVALID: u8 = 3;
/// The change needs the node drained first.
pub const EXIT_DRAIN: u8 = 4;
/// The change is held: it needs a new node.
pub const EXIT_HOLD: u8 = 5;

/// The exit codes, as `--help` shows them.
pub const EXIT_CODES_HELP: &str = "Exit status: 0 valid (with --against: the change restarts \
the kubelet in place, or changes nothing); 1 FILE is invalid; 2 a file cannot be read or a \
flag is wrong; 3 the --against config does not load; 4 the change needs a drain; 5 the \
change needs a new node (held). 4 and 5 follow the default actions, or --disruption-action.";

/// `config check`.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct CheckArgs {
    /// The KubeletConfiguration (YAML or JSON) to check.
    pub file: PathBuf,
    /// The config the nodes run now: also print the change class and the action a node
    /// would take.
    #[arg(long, value_name = "FILE")]
    pub against: Option<PathBuf>,
    /// The nodes' actions per class, if not the defaults (as the supervisor's flag).
    #[arg(
        long,
        value_name = "CLASS=ACTION,...",
        default_value = "",
        hide_default_value = true
    )]
    pub disruption_action: Overrides,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// The nodes' kubelet version (v1.35.2, 1.35): FILE's feature gates and the rules that
    /// follow them are checked against its model (default: the newest modelled, 1.36; a
    /// version not modelled gets the nearest, with a warning on stderr). Host checks (cgroup
    /// v1) are made by the node only.
    #[arg(long, value_name = "VERSION", value_parser = kubelet_version)]
    pub kubelet_version: Option<KubeletVersion>,
}

/// `--kubelet-version`.
fn kubelet_version(s: &str) -> Result<KubeletVersion, String> {
    KubeletVersion::parse(s)
        .ok_or_else(|| format!("{s:?} is not a Kubernetes version such as v1.35.2"))
}

/// A file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
}

/// One reason a config was refused, with its field when it has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub field: Option<String>,
    pub message: String,
}

/// Every reason in `err`, each with its field.
pub fn problems(err: &ConfigError) -> Vec<Problem> {
    let one = |field: Option<&str>| {
        vec![Problem {
            field: field.map(str::to_string),
            message: err.to_string(),
        }]
    };
    match err {
        ConfigError::Invalid(errors) => errors
            .iter()
            .map(|e| Problem {
                field: Some(e.path.clone()),
                message: e.message.clone(),
            })
            .collect(),
        ConfigError::UnknownField { path }
        | ConfigError::WrongType { path, .. }
        | ConfigError::DuplicateKey { path, .. } => one(Some(path)),
        ConfigError::WrongKind { .. } => one(Some("kind")),
        ConfigError::WrongApiVersion { .. } => one(Some("apiVersion")),
        _ => one(None),
    }
}

/// One changed field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldLine {
    pub field: String,
    pub class: Class,
    pub reason: String,
}

/// The change from the `--against` config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Against {
    pub file: String,
    /// The most severe class (None: no classified field changed).
    pub class: Option<Class>,
    /// None: the same effective config, nothing restarts.
    pub action: Option<Action>,
    pub fields: Vec<FieldLine>,
    /// Why the `--against` config does not load.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub file: String,
    pub valid: bool,
    pub problems: Vec<Problem>,
    /// Plain YAML scalars read with the kubelet's YAML 1.1 meaning
    /// (`serializeImagePulls: no` is false), each with what to write instead.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Problem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against: Option<Against>,
    pub exit: u8,
}

/// What moving from `old` to `new` does under `policy`, as the supervisor decides it.
pub fn change_of(
    old: &KubeletConfig,
    new: &KubeletConfig,
    policy: &Policy,
) -> (Change, Option<Action>) {
    if old.hash() == new.hash() {
        return (Change::default(), None);
    }
    let change = disruption::classify(old, new);
    let action = change.class().map_or(Action::Restart, |c| policy.action(c));
    (change, Some(action))
}

/// The report for `new` (the bytes of FILE) and optionally `old` (of the --against FILE).
pub fn report(file: &str, new: &[u8], against: Option<(&str, &[u8])>, policy: &Policy) -> Report {
    report_for(file, new, against, policy, &ValidationTarget::default())
}

/// [`report`], FILE validated for the kubelet `target`.
pub fn report_for(
    file: &str,
    new: &[u8],
    against: Option<(&str, &[u8])>,
    policy: &Policy,
    target: &ValidationTarget,
) -> Report {
    let checked = KubeletConfig::parse(new).and_then(|c| c.validate_for(target).map(|()| c));
    let problems = checked.as_ref().err().map(problems).unwrap_or_default();
    let warnings = checked
        .as_ref()
        .map(|c| {
            c.warnings()
                .iter()
                .map(|w| Problem {
                    field: Some(w.path.clone()),
                    message: w.to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    let mut exit = if checked.is_ok() {
        EXIT_OK
    } else {
        EXIT_INVALID
    };
    let against = against.map(|(old_file, old)| match KubeletConfig::parse(old) {
        Err(err) => {
            if exit == EXIT_OK {
                exit = EXIT_AGAINST_INVALID;
            }
            Against {
                file: old_file.to_string(),
                class: None,
                action: None,
                fields: Vec::new(),
                problems: self::problems(&err),
            }
        }
        Ok(old) => {
            let Ok(new) = &checked else {
                return Against {
                    file: old_file.to_string(),
                    class: None,
                    action: None,
                    fields: Vec::new(),
                    problems: Vec::new(),
                };
            };
            let (change, action) = change_of(&old, new, policy);
            exit = match action {
                Some(Action::Drain) => EXIT_DRAIN,
                Some(Action::Hold) => EXIT_HOLD,
                _ => exit,
            };
            let mut fields: Vec<FieldLine> = change
                .fields
                .iter()
                .map(|f| FieldLine {
                    field: f.field.clone(),
                    class: f.class,
                    reason: f.reason.clone(),
                })
                .collect();
            // Most severe first.
            fields.sort_by(|a, b| b.class.cmp(&a.class).then_with(|| a.field.cmp(&b.field)));
            Against {
                file: old_file.to_string(),
                class: change.class(),
                action,
                fields,
                problems: Vec::new(),
            }
        }
    });
    Report {
        file: file.to_string(),
        valid: checked.is_ok(),
        problems,
        warnings,
        against,
        exit,
    }
}

fn problem_lines(out: &mut String, problems: &[Problem]) {
    for p in problems {
        let line = match &p.field {
            Some(f) if !p.message.starts_with(f.as_str()) => format!("{f}: {}", p.message),
            _ => p.message.clone(),
        };
        out.push_str(&format!("  {}\n", printable(&line)));
    }
}

/// The report as text.
pub fn text(r: &Report, policy: &Policy) -> String {
    let mut out = format!(
        "{}: {}\n",
        printable(&r.file),
        if r.valid { "valid" } else { "invalid" }
    );
    problem_lines(&mut out, &r.problems);
    for w in &r.warnings {
        out.push_str(&format!("  warning: {}\n", printable(&w.message)));
    }
    let Some(a) = &r.against else {
        return out;
    };
    let file = printable(&a.file);
    if !a.problems.is_empty() {
        out.push_str(&format!("against {file}: it does not load\n"));
        problem_lines(&mut out, &a.problems);
        return out;
    }
    match (a.action, a.class) {
        (None, _) if r.valid => out.push_str(&format!(
            "against {file}: the same effective config, nothing restarts\n"
        )),
        (None, _) => {}
        (Some(action), None) => out.push_str(&format!(
            "against {file}: no classified field changed: {action}\n"
        )),
        (Some(action), Some(class)) => out.push_str(&format!(
            "against {file}: {class} change: {action} (actions {policy})\n"
        )),
    }
    for f in &a.fields {
        out.push_str(&format!(
            "  {:<15} {}: {}\n",
            f.class.as_str(),
            printable(&f.field),
            printable(&f.reason)
        ));
    }
    out
}

fn read(path: &Path) -> Result<Vec<u8>, CheckError> {
    std::fs::read(path).map_err(|source| CheckError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Runs `config check`; returns the exit status.
pub fn run(a: &CheckArgs, out: &mut impl Write) -> Result<u8, CheckError> {
    let new = read(&a.file)?;
    let old = a.against.as_deref().map(read).transpose()?;
    let policy = Policy::defaults().with(&a.disruption_action);
    let old_name = a.against.as_ref().map(|p| p.display().to_string());
    let against = old_name.as_deref().zip(old.as_deref());
    let (model, warning) = GateModel::for_flag(a.kubelet_version);
    if let Some(warning) = warning {
        eprintln!("warning: {warning}");
    }
    let target = ValidationTarget::new(model, HostFacts::unknown());
    let r = report_for(
        &a.file.display().to_string(),
        &new,
        against,
        &policy,
        &target,
    );
    let printed = match a.output {
        Output::Json | Output::Yaml => a.output.write_structured(out, &r),
        Output::Table => write!(out, "{}", text(&r, &policy)),
    };
    printed.map_err(CheckError::Output)?;
    Ok(r.exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn doc(body: &str) -> Vec<u8> {
        format!("{HEAD}{body}").into_bytes()
    }

    fn check(new: &str, old: Option<&str>) -> Report {
        let old = old.map(doc);
        report(
            "new.yaml",
            &doc(new),
            old.as_deref().map(|o| ("old.yaml", o)),
            &Policy::defaults(),
        )
    }

    #[test]
    fn errors_come_with_their_field() {
        let r = check("port: 70000\nmaxPods: -1\n", None);
        assert_eq!(r.exit, EXIT_INVALID);
        let fields: Vec<_> = r
            .problems
            .iter()
            .filter_map(|p| p.field.as_deref())
            .collect();
        assert!(
            fields.contains(&"port") && fields.contains(&"maxPods"),
            "{r:?}"
        );
        let r = check("maxPodz: 5\n", None);
        assert_eq!(
            r.problems,
            vec![Problem {
                field: Some("maxPodz".into()),
                message: "unknown field \"maxPodz\"".into()
            }]
        );
        let text = text(&r, &Policy::defaults());
        assert_eq!(
            text,
            "new.yaml: invalid\n  maxPodz: unknown field \"maxPodz\"\n"
        );
        let r = report("x", b"kind: Pod\n", None, &Policy::defaults());
        assert_eq!(r.problems[0].field.as_deref(), Some("kind"));
        let r = report("x", b"{not json", None, &Policy::defaults());
        assert_eq!(r.problems[0].field, None);
    }

    #[test]
    fn the_kubelet_version_picks_the_gate_model() {
        let body = doc("crashLoopBackOff:\n  maxContainerRestartPeriod: 30s\n");
        let at = |minor| {
            let target =
                ValidationTarget::new(GateModel::for_minor(minor).unwrap(), HostFacts::unknown());
            report_for("new.yaml", &body, None, &Policy::defaults(), &target)
        };
        assert_eq!(at(35).exit, EXIT_OK);
        let r = at(34);
        assert_eq!(r.exit, EXIT_INVALID);
        assert_eq!(
            r.problems[0].field.as_deref(),
            Some("crashLoopBackOff.maxContainerRestartPeriod")
        );
        assert_eq!(kubelet_version("v1.34.2").unwrap().minor, 34);
        assert!(kubelet_version("latest").is_err());
    }

    #[test]
    fn the_exit_status_says_what_the_change_needs() {
        assert_eq!(check("maxPods: 50\n", None).exit, EXIT_OK);
        assert_eq!(check("maxPods: 50\n", Some("maxPods: 50\n")).exit, EXIT_OK);
        let r = check("maxPods: 50\neventBurst: 20\n", Some("maxPods: 50\n"));
        assert_eq!(r.exit, EXIT_OK);
        assert_eq!(r.against.as_ref().unwrap().class, Some(Class::InPlace));
        let r = check("maxPods: 50\n", Some("maxPods: 40\n"));
        assert_eq!(r.exit, EXIT_DRAIN);
        assert!(
            text(&r, &Policy::defaults()).contains("against old.yaml: allocatable change: drain"),
            "{}",
            text(&r, &Policy::defaults())
        );
        let policy = Policy::defaults().with(&"allocatable=restart".parse().unwrap());
        let r = report(
            "new.yaml",
            &doc("maxPods: 50\n"),
            Some(("old.yaml", &doc("maxPods: 40\n"))),
            &policy,
        );
        assert_eq!(r.exit, EXIT_OK);
        assert_eq!(
            check("maxPodz: 1\n", Some("maxPods: 40\n")).exit,
            EXIT_INVALID
        );
        let r = report(
            "new.yaml",
            &doc(""),
            Some(("old.yaml", b"kind: Pod")),
            &Policy::defaults(),
        );
        assert_eq!(r.exit, EXIT_AGAINST_INVALID);
        let r = check(
            "cgroupDriver: cgroupfs
",
            Some(
                "cgroupDriver: systemd
",
            ),
        );
        assert_eq!(r.exit, EXIT_HOLD);
        assert_eq!(r.against.unwrap().class, Some(Class::NodeReplacing));
    }
}
