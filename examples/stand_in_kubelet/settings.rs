//! The kubelet flags the stand-in understands and its `STANDIN_*` environment.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::Error;
use crate::{
    DEFAULT_CRASH_CODE, ENV_CRASH_AFTER, ENV_CRASH_CODE, ENV_CRASH_ON_CONFIG, ENV_DAEMONIZE_HELPER,
    ENV_GRANDCHILD, ENV_HEALTHZ, ENV_HEALTHZ_DELAY, ENV_IGNORE_TERM, ENV_LOCK_PATH, ENV_PROBE,
    ENV_STATE_FILES, ENV_TERM_DELAY, ENV_UNLOCK_DELAY, ENV_UNLOCK_INHERITED,
};

/// The kubelet flags the stand-in understands.
#[derive(Debug, Default)]
pub(super) struct Flags {
    pub(super) config: Option<PathBuf>,
    pub(super) lock_file: Option<PathBuf>,
    pub(super) root_dir: Option<PathBuf>,
}

pub(super) fn parse_flags(args: &[String]) -> Result<Flags, Error> {
    let mut flags = Flags::default();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        // Go's flag packages accept one or two dashes.
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        let slot = match name {
            "config" => &mut flags.config,
            "lock-file" => &mut flags.lock_file,
            "root-dir" => &mut flags.root_dir,
            // `--exit-on-lock-contention` and anything else: accepted, ignored.
            _ => continue,
        };
        let value = match inline {
            Some(value) => value,
            None => iter
                .next()
                .ok_or_else(|| Error::Usage(format!("flag --{name} needs a value")))?,
        };
        if value.is_empty() {
            return Err(Error::Usage(format!(
                "flag --{name} needs a non-empty value"
            )));
        }
        *slot = Some(PathBuf::from(value));
    }
    Ok(flags)
}

/// Behaviour switches read from `STANDIN_*`.
#[derive(Debug)]
pub(super) struct Settings {
    pub(super) probe: Option<PathBuf>,
    pub(super) term_delay: Option<Duration>,
    pub(super) ignore_term: bool,
    pub(super) crash_after: Option<Duration>,
    pub(super) crash_code: i32,
    pub(super) crash_on_config: Option<String>,
    pub(super) spawn_grandchild: bool,
    pub(super) daemonize_helper: bool,
    /// `Some(delay)` with `STANDIN_UNLOCK_INHERITED=1`.
    pub(super) unlock_inherited: Option<Duration>,
    pub(super) lock_path: Option<PathBuf>,
    pub(super) state_files: bool,
    pub(super) healthz: bool,
    pub(super) healthz_delay: Duration,
}

impl Settings {
    pub(super) fn from_env() -> Result<Self, Error> {
        Ok(Settings {
            probe: env_path(ENV_PROBE),
            term_delay: env_millis(ENV_TERM_DELAY)?,
            ignore_term: env_bool(ENV_IGNORE_TERM)?,
            crash_after: env_millis(ENV_CRASH_AFTER)?,
            crash_code: env_string(ENV_CRASH_CODE)?
                .map(|value| match value.parse::<i32>() {
                    Ok(code) if (0..=255).contains(&code) => Ok(code),
                    _ => Err(Error::Env {
                        var: ENV_CRASH_CODE,
                        value,
                        why: "expected an exit code 0-255",
                    }),
                })
                .transpose()?
                .unwrap_or(DEFAULT_CRASH_CODE),
            crash_on_config: env_string(ENV_CRASH_ON_CONFIG)?,
            spawn_grandchild: env_bool(ENV_GRANDCHILD)?,
            daemonize_helper: env_bool(ENV_DAEMONIZE_HELPER)?,
            unlock_inherited: if env_bool(ENV_UNLOCK_INHERITED)? {
                Some(env_millis(ENV_UNLOCK_DELAY)?.unwrap_or(Duration::ZERO))
            } else {
                None
            },
            lock_path: env_path(ENV_LOCK_PATH),
            state_files: env_bool(ENV_STATE_FILES)?,
            healthz: env_bool(ENV_HEALTHZ)?,
            healthz_delay: env_millis(ENV_HEALTHZ_DELAY)?.unwrap_or(Duration::ZERO),
        })
    }
}

/// A non-empty environment variable as a path.
pub(super) fn env_path(var: &'static str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

/// A non-empty, UTF-8 environment variable.
fn env_string(var: &'static str) -> Result<Option<String>, Error> {
    match std::env::var_os(var) {
        None => Ok(None),
        Some(value) if value.is_empty() => Ok(None),
        Some(value) => value.into_string().map(Some).map_err(|value| Error::Env {
            var,
            value: value.to_string_lossy().into_owned(),
            why: "not valid UTF-8",
        }),
    }
}

fn env_millis(var: &'static str) -> Result<Option<Duration>, Error> {
    env_string(var)?
        .map(|value| {
            value
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| Error::Env {
                    var,
                    value,
                    why: "expected a whole number of milliseconds",
                })
        })
        .transpose()
}

fn env_bool(var: &'static str) -> Result<bool, Error> {
    match env_string(var)?.as_deref() {
        None | Some("0") | Some("false") => Ok(false),
        Some("1") | Some("true") => Ok(true),
        Some(other) => Err(Error::Env {
            var,
            value: other.to_owned(),
            why: "expected 1 or 0",
        }),
    }
}
