//! Log setup. Plain lines by default, JSON on request. When stderr is the
//! journal (systemd sets `JOURNAL_STREAM` to its device and inode), plain
//! lines carry a `<N>` syslog priority prefix and no timestamp: journald
//! parses the prefix (so `journalctl -p warning` works) and stamps the time
//! itself.

use std::fmt;

use tracing::{Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum LogFormat {
    /// Plain lines without colours (journald-friendly).
    Plain,
    /// One JSON object per line.
    Json,
}

/// Syslog priority of a tracing level (sd-daemon(3)).
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// Whether `JOURNAL_STREAM` ("DEV:INODE") names the file stderr is.
fn stderr_is_journal(journal_stream: Option<&str>) -> bool {
    let Some((dev, ino)) = journal_stream.and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    match nix::sys::stat::fstat(libc::STDERR_FILENO) {
        Ok(st) => st.st_dev == dev && st.st_ino == ino,
        Err(_) => false,
    }
}

/// Prefixes each line with its syslog priority.
struct Prioritized<F>(F);

impl<S, N, F> FormatEvent<S, N> for Prioritized<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// kube-client's own line per failed request (`ERROR kube_client...: failed
/// with error ...`): with the API server down, one a try, beside the line of
/// our own retry (cluster::retry), which goes quiet after a minute.
const KUBE_CLIENT_REQUESTS: &str = "kube_client::client::builder";

/// kube-client's warnings about a watch stream that ended or a body it could not
/// read (`eof in poll: Custom { kind: UnexpectedEof, ... }`, the whole body with a
/// Debug of the parse error): Rust Debug, unbounded, and the error reaches our code,
/// which logs it in its own words (`retry`, `api_error`). Errors only.
const KUBE_CLIENT_WARNINGS: &str = "kube_client::client=error";

/// The log filter of `RUST_LOG` (default info). kube-client's per-request
/// error lines are off, and its warnings too, unless `RUST_LOG` names kube_client
/// itself.
fn filter_directives(rust_log: Option<&str>) -> String {
    let base = match rust_log.map(str::trim) {
        Some(v) if !v.is_empty() => v,
        _ => "info",
    };
    if base.contains("kube_client") {
        base.to_string()
    } else {
        format!("{base},{KUBE_CLIENT_WARNINGS},{KUBE_CLIENT_REQUESTS}=off")
    }
}

/// Installs the global subscriber. `RUST_LOG` sets the filter (default info).
pub fn init(format: LogFormat) {
    let rust_log = std::env::var(tracing_subscriber::EnvFilter::DEFAULT_ENV).ok();
    let filter = tracing_subscriber::EnvFilter::try_new(filter_directives(rust_log.as_deref()))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter_directives(None)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let journal = stderr_is_journal(std::env::var("JOURNAL_STREAM").ok().as_deref());
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Plain if journal => {
            let inner = tracing_subscriber::fmt::format()
                .without_time()
                .with_ansi(false);
            builder.event_format(Prioritized(inner)).init()
        }
        LogFormat::Plain => builder.init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_stream_must_name_stderr() {
        assert!(!stderr_is_journal(None));
        assert!(!stderr_is_journal(Some("garbage")));
        assert!(!stderr_is_journal(Some("1:x")));
        let st = nix::sys::stat::fstat(libc::STDERR_FILENO).unwrap();
        let me = format!("{}:{}", st.st_dev, st.st_ino);
        assert!(stderr_is_journal(Some(&me)));
        let other = format!("{}:{}", st.st_dev, st.st_ino + 1);
        assert!(!stderr_is_journal(Some(&other)));
    }

    #[test]
    fn kube_client_request_errors_are_off_unless_named() {
        assert_eq!(
            filter_directives(None),
            "info,kube_client::client=error,kube_client::client::builder=off"
        );
        assert_eq!(
            filter_directives(Some("debug")),
            "debug,kube_client::client=error,kube_client::client::builder=off"
        );
        assert_eq!(
            filter_directives(Some("info,kube_client=debug")),
            "info,kube_client=debug"
        );
        // Whatever the order, the more specific directive wins over a bare level.
        let f = tracing_subscriber::EnvFilter::try_new(filter_directives(Some("trace")));
        assert!(f.is_ok());
    }

    #[test]
    fn priorities_follow_sd_daemon() {
        assert_eq!(priority(&Level::ERROR), 3);
        assert_eq!(priority(&Level::WARN), 4);
        assert_eq!(priority(&Level::INFO), 6);
        assert_eq!(priority(&Level::DEBUG), 7);
    }
}
