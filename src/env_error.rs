//! A bad value that came from the environment (`KUBELET_PIVOT_*`, often set in
//! `/etc/default/kubelet-pivot`) is reported under the variable's name, not as the flag the
//! operator never typed:
//!
//! ```text
//! error: invalid value '30' for KUBELET_PIVOT_STOP_TIMEOUT (the environment; --stop-timeout): a duration needs a unit, like 30s (30s, 10m, 1m30s, 500ms)
//! ```
//!
//! Clap reports the flag (`'--stop-timeout <DURATION>'`) whichever source the value came
//! from; [`rename`] finds, for every flag of the command tree that has an `env`, whether
//! the refused value is that variable's and the flag was not on the command line, and then
//! rewrites the message. Nothing is listed by hand: a flag given an `env` later is covered.
//!
//! A value that parsed but is refused later (a missing `--init-config` file) is named in a
//! message by its flag; [`remember`] keeps which flags the environment set, and
//! [`annotate`] adds the variable to a message that names one of them:
//! `cannot read --init-config /x: ... (--init-config is KUBELET_PIVOT_INIT_CONFIG from the
//! environment)`.

use std::ffi::OsString;
use std::sync::OnceLock;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

/// A flag of the command tree that also reads an environment variable.
struct EnvFlag {
    long: String,
    short: Option<char>,
    env: OsString,
}

/// Every flag of `cmd` and its subcommands that has an `env`.
fn env_flags(cmd: &Command, found: &mut Vec<EnvFlag>) {
    for arg in cmd.get_arguments() {
        if let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) {
            found.push(EnvFlag {
                long: long.to_string(),
                short: arg.get_short(),
                env: env.to_os_string(),
            });
        }
    }
    for sub in cmd.get_subcommands() {
        env_flags(sub, found);
    }
}

/// The flags of this run set from the environment: (`long`, `VARIABLE`).
static FROM_ENV: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Keeps which flags of the chosen (sub)command took their value from the environment.
pub fn remember(cmd: &Command, matches: &ArgMatches) {
    let mut found = Vec::new();
    let (mut cmd, mut matches) = (cmd, matches);
    loop {
        for arg in cmd.get_arguments() {
            if let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) {
                if matches.value_source(arg.get_id().as_str()) == Some(ValueSource::EnvVariable) {
                    found.push((long.to_string(), env.to_string_lossy().into_owned()));
                }
            }
        }
        let Some((name, sub)) = matches.subcommand() else {
            break;
        };
        let Some(next) = cmd.find_subcommand(name) else {
            break;
        };
        (cmd, matches) = (next, sub);
    }
    let _ = FROM_ENV.set(found);
}

/// `msg` with the variable named after it for each flag it names that the environment set.
pub fn annotate(msg: String) -> String {
    with_sources(msg, FROM_ENV.get().map(Vec::as_slice).unwrap_or_default())
}

fn with_sources(mut msg: String, from_env: &[(String, String)]) -> String {
    for (long, env) in from_env {
        let flag = format!("--{long}");
        let named = msg.match_indices(&flag).any(|(at, _)| {
            !msg[at + flag.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '-')
        });
        if named {
            msg.push_str(&format!(" ({flag} is {env} from the environment)"));
        }
    }
    msg
}

/// Whether the command line `args` (without the program name; up to `--`) gives the
/// flag itself (`--long`, `--long=V`, `-s`, `-sV`): then clap took the value from there,
/// not from the environment or a default. Also used by the settings file's checks.
pub fn on_command_line(long: &str, short: Option<char>, args: &[OsString]) -> bool {
    let long = format!("--{long}");
    args.iter()
        .map(|a| a.to_string_lossy())
        .take_while(|a| a != "--")
        .any(|a| {
            a == long
                || a.starts_with(&format!("{long}="))
                || short.is_some_and(|s| {
                    a.starts_with('-') && !a.starts_with("--") && a[1..].starts_with(s)
                })
        })
}

/// The flag's long name in clap's `'--stop-timeout <DURATION>'`.
fn long_name(arg: &str) -> Option<&str> {
    arg.strip_prefix("--")?.split([' ', '=']).next()
}

/// Why the value was refused: the value parser's own words, or the values allowed.
fn reason(err: &clap::Error) -> String {
    if let Some(source) = std::error::Error::source(err) {
        return source.to_string();
    }
    match err.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(values)) => {
            format!("expected one of {}", values.join(", "))
        }
        _ => "not accepted".to_string(),
    }
}

/// `err` reworded to name the environment variable, when the refused value came from one;
/// `None` when it did not (clap's own message stands).
pub fn rename(err: &clap::Error, cmd: &Command, args: &[OsString]) -> Option<String> {
    if !matches!(
        err.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    let Some(ContextValue::String(value)) = err.get(ContextKind::InvalidValue) else {
        return None;
    };
    let long = long_name(arg)?;
    let mut flags = Vec::new();
    env_flags(cmd, &mut flags);
    let flag = flags.into_iter().find(|f| {
        f.long == long
            && std::env::var_os(&f.env).is_some_and(|v| v.to_string_lossy() == value.as_str())
    })?;
    if on_command_line(&flag.long, flag.short, args.get(1..).unwrap_or_default()) {
        return None;
    }
    Some(format!(
        "invalid value '{value}' for {} (the environment; --{long}): {}",
        flag.env.to_string_lossy(),
        reason(err)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag() -> EnvFlag {
        EnvFlag {
            long: "output".into(),
            short: Some('o'),
            env: "KUBELET_PIVOT_OUTPUT".into(),
        }
    }

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_flag_is_on_the_command_line_in_every_spelling_before_the_kubelet() {
        let f = flag();
        for given in [
            &["kp", "status", "--output", "json"][..],
            &["kp", "status", "--output=json"],
            &["kp", "status", "-o", "json"],
            &["kp", "status", "-ojson"],
        ] {
            let given_after_argv0 = &args(given)[1..];
            assert!(
                on_command_line(&f.long, f.short, given_after_argv0),
                "{given:?}"
            );
        }
        for not_given in [
            &["kp", "status"][..],
            &["kp", "status", "--outputs"],
            &["kp", "bootstrap", "--", "kubelet", "--output", "x"],
        ] {
            let not_given_after_argv0 = &args(not_given)[1..];
            assert!(
                !on_command_line(&f.long, f.short, not_given_after_argv0),
                "{not_given:?}"
            );
        }
    }

    #[test]
    fn a_message_naming_a_flag_the_environment_set_names_the_variable() {
        let from_env = [(
            "init-config".to_string(),
            "KUBELET_PIVOT_INIT_CONFIG".to_string(),
        )];
        assert_eq!(
            with_sources("cannot read --init-config /x: gone".into(), &from_env),
            "cannot read --init-config /x: gone (--init-config is KUBELET_PIVOT_INIT_CONFIG from \
             the environment)"
        );
        assert_eq!(
            with_sources("--init-config-dir is wrong".into(), &from_env),
            "--init-config-dir is wrong"
        );
    }

    #[test]
    fn the_long_name_is_read_from_clap_s_argument_text() {
        assert_eq!(long_name("--stop-timeout <DURATION>"), Some("stop-timeout"));
        assert_eq!(long_name("--watch-mode"), Some("watch-mode"));
        assert_eq!(long_name("<NAME>"), None);
    }
}
