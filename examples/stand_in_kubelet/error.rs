//! The stand-in's errors (usage, environment, I/O, OS, config): exit code 2.

use std::fmt;
use std::io;
use std::path::PathBuf;

#[derive(Debug)]
pub(super) enum Error {
    Usage(String),
    Env {
        var: &'static str,
        value: String,
        why: &'static str,
    },
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    Os {
        what: &'static str,
        source: io::Error,
    },
    Config {
        field: &'static str,
        why: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(msg) => write!(f, "invalid command line: {msg}"),
            Error::Env { var, value, why } => write!(f, "invalid {var}={value:?}: {why}"),
            Error::Io { what, path, source } => {
                write!(f, "failed to {what} {}: {source}", path.display())
            }
            Error::Os { what, source } => write!(f, "failed to {what}: {source}"),
            Error::Config { field, why } => write!(f, "invalid --config field {field}: {why}"),
        }
    }
}
