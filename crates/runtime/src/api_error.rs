//! An API error as kubectl prints it (`k8s.io/kubectl/pkg/cmd/util` `StandardErrorMessage`),
//! never kube's `ApiError: ... (Status { status: Some(Failure), ... })`: for the rollout
//! commands' errors and for every log line that reports a failed request.
//!
//! - the server answered with a Status: `Error from server (NotFound): configmaps "x" not
//!   found`; without a reason `Error from server: MESSAGE`; 401 `You must be logged in to
//!   the server (MESSAGE)`; a body that is not a Status (a proxy's 502, a plain-text 429)
//!   gets the reason of its HTTP code and its text, bounded and escaped;
//! - the server could not be reached (refused, timed out, a TLS handshake that failed, a
//!   name that does not resolve): `The connection to the server 127.0.0.1:1 was refused -
//!   did you specify the right host or port?`, else `Unable to connect to the server
//!   HOST:PORT: REASON`, with the address where the caller knows it ([`Unreachable::text`]).
//!   [`Unreachable::find`] looks for one in an error's chain: a command swaps it in as the
//!   whole message (kubectl drops what it was doing too).
//!
//! [`ApiError`] owns the error (a `#[source]` field); [`shown`] and [`shown_watch`] borrow
//! one for a log line or a message.

use std::error::Error as StdError;
use std::fmt;

use kp_contract::text;

/// The longest server text shown (a proxy may answer with a whole HTML page).
const MAX_SERVER_TEXT: usize = 400;

/// A failed request to the API server; its `Display` is kubectl's.
#[derive(Debug)]
pub struct ApiError(pub kube::Error);

impl From<kube::Error> for ApiError {
    fn from(err: kube::Error) -> Self {
        ApiError(err)
    }
}

impl StdError for ApiError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.0)
    }
}

impl ApiError {
    /// The HTTP code of the Status the server answered with, if it answered.
    pub fn code(&self) -> Option<u16> {
        match &self.0 {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", render(&self.0))
    }
}

/// A borrowed kube error whose `Display` is kubectl's ([`shown`]).
pub struct Shown<'a>(&'a kube::Error);

/// `err` for a log line or a message, as kubectl prints it.
pub fn shown(err: &kube::Error) -> Shown<'_> {
    Shown(err)
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", render(self.0))
    }
}

/// A borrowed watcher error whose `Display` is kubectl's ([`shown_watch`]).
pub struct ShownWatch<'a> {
    err: &'a kube::runtime::watcher::Error,
    server: Option<&'a str>,
}

/// A failed watch as [`shown`] renders a failed request, naming `server` (`HOST:PORT`)
/// when it could not be reached (else the one [`set_server`] recorded).
pub fn shown_watch<'a>(
    err: &'a kube::runtime::watcher::Error,
    server: Option<&'a str>,
) -> ShownWatch<'a> {
    ShownWatch { err, server }
}

impl fmt::Display for ShownWatch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use kube::runtime::watcher::Error as W;
        match self.err {
            W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => {
                match transport(e) {
                    Some(failure) => {
                        let recorded = server();
                        write!(f, "{}", failure.text(self.server.or(recorded.as_deref())))
                    }
                    None => write!(f, "{}", render(e)),
                }
            }
            W::WatchError(status) => write!(f, "{}", status_text(status)),
            W::NoResourceVersion => write!(f, "{}", self.err),
        }
    }
}

/// The address (`HOST:PORT`) of the API server this process's client talks to, set by
/// [`crate::client::build`] (the one builder): a log line about a refused connection names
/// it as kubectl does. One server per process (a node's kubeconfig, the controller's).
static SERVER: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The API server's address in its URL, as kubectl names it: `HOST:PORT`, or `HOST` when
/// the URL gives no port.
pub fn address(url: &http::Uri) -> String {
    url.authority()
        .map_or_else(|| url.to_string(), |a| a.to_string())
}

/// Records the API server's [`address`].
pub fn set_server(url: &http::Uri) {
    if let Ok(mut server) = SERVER.lock() {
        *server = Some(address(url));
    }
}

/// The address [`set_server`] recorded, if any.
pub fn server() -> Option<String> {
    SERVER.lock().ok().and_then(|s| s.clone())
}

/// kubectl's text for `err`, naming the server [`set_server`] recorded.
fn render(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => status_text(status),
        other => match transport(other) {
            Some(failure) => failure.text(server().as_deref()),
            None => printable_bounded(&other.to_string()),
        },
    }
}

/// kube's reason for a body it could not read as a Status (it keeps the text as message).
const KUBE_UNPARSED: &str = "Failed to parse error data";

/// `Error from server (REASON): MESSAGE`, as kubectl.
pub fn status_text(status: &kube::core::Status) -> String {
    let message = printable_bounded(status.message.trim());
    let (reason, message) = if status.reason == KUBE_UNPARSED {
        let reason = reason_of(status.code)
            .map(str::to_string)
            .unwrap_or_else(|| format!("HTTP {}", status.code));
        (reason, message)
    } else {
        (printable_bounded(&status.reason), message)
    };
    let message = if message.is_empty() {
        format!("HTTP {}", status.code)
    } else {
        message
    };
    if status.code == 401 || reason == "Unauthorized" {
        return format!("You must be logged in to the server ({message})");
    }
    if reason.is_empty() {
        format!("Error from server: {message}")
    } else {
        format!("Error from server ({reason}): {message}")
    }
}

/// The Status reason the API server gives an HTTP code (`metav1.StatusReason`).
fn reason_of(code: u16) -> Option<&'static str> {
    Some(match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => return None,
    })
}

/// Text from the server or the network, escaped and bounded.
fn printable_bounded(text: &str) -> String {
    text::cut_with(&text::printable(text), MAX_SERVER_TEXT, "...")
}

/// Why the API server could not be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreachable {
    /// Nothing listens at the address.
    Refused,
    /// Anything else on the way: a timeout, a TLS handshake, a name, a reset connection.
    Failed(String),
}

impl Unreachable {
    /// The first transport failure in `err`'s chain: the request never got an answer.
    pub fn find(err: &(dyn StdError + 'static)) -> Option<Unreachable> {
        let mut next = Some(err);
        while let Some(e) = next {
            if let Some(api) = e.downcast_ref::<ApiError>() {
                return transport(&api.0);
            }
            if let Some(kube) = e.downcast_ref::<kube::Error>() {
                return transport(kube);
            }
            next = e.source();
        }
        None
    }

    /// What kubectl prints, naming `server` (`HOST:PORT`) when known.
    pub fn text(&self, server: Option<&str>) -> String {
        let server = server.map(|s| format!(" {s}")).unwrap_or_default();
        match self {
            Unreachable::Refused => format!(
                "The connection to the server{server} was refused - did you specify the right host or port?"
            ),
            Unreachable::Failed(reason) => {
                format!("Unable to connect to the server{server}: {reason}")
            }
        }
    }
}

/// A kube error that is a transport failure, classified.
fn transport(err: &kube::Error) -> Option<Unreachable> {
    if !matches!(err, kube::Error::Service(_) | kube::Error::HyperError(_)) {
        return None;
    }
    let mut reasons: Vec<String> = Vec::new();
    let mut next = err.source();
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return Some(Unreachable::Refused),
                std::io::ErrorKind::TimedOut => {
                    return Some(Unreachable::Failed("i/o timeout".to_string()))
                }
                _ => {}
            }
        }
        let text = e.to_string();
        if text == "elapsed" || text.contains("timed out") || text.contains("deadline") {
            return Some(Unreachable::Failed("i/o timeout".to_string()));
        }
        // hyper-util's "client error (Connect)" says less than what follows it.
        if !text.starts_with("client error (") {
            reasons.push(text);
        }
        next = e.source();
    }
    // Each level repeats its source in its text, or adds a word before it: the deepest
    // says most with the least noise.
    let reason = reasons
        .pop()
        .unwrap_or_else(|| "the request failed before an answer".to_string());
    Some(Unreachable::Failed(printable_bounded(&reason)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn a_status_reads_as_kubectl_prints_it() {
        let not_found = Status::failure(
            "kubeletconfigrollouts.kubelet-pivot.io \"nope\" not found",
            "NotFound",
        )
        .with_code(404);
        assert_eq!(
            ApiError(kube::Error::Api(not_found.boxed())).to_string(),
            "Error from server (NotFound): kubeletconfigrollouts.kubelet-pivot.io \"nope\" not found"
        );
        let no_reason = Status::failure("went wrong", "").with_code(500);
        assert_eq!(status_text(&no_reason), "Error from server: went wrong");
        let unauthorized = Status::failure("Unauthorized", "Unauthorized").with_code(401);
        assert_eq!(
            status_text(&unauthorized),
            "You must be logged in to the server (Unauthorized)"
        );
    }

    #[test]
    fn a_body_that_is_no_status_gets_the_reason_of_its_code_bounded_and_escaped() {
        let plain = Status::failure("slow down\n\u{1b}[31m", KUBE_UNPARSED).with_code(429);
        assert_eq!(
            status_text(&plain),
            "Error from server (TooManyRequests): slow down\\n\\u{1b}[31m"
        );
        let page = Status::failure(&"<html>".repeat(200), KUBE_UNPARSED).with_code(502);
        let text = status_text(&page);
        assert!(
            text.starts_with("Error from server (HTTP 502): <html>"),
            "{text}"
        );
        assert!(text.len() < MAX_SERVER_TEXT + 40, "{text}");
        let empty = Status::failure("", KUBE_UNPARSED).with_code(500);
        assert_eq!(
            status_text(&empty),
            "Error from server (InternalError): HTTP 500"
        );
    }

    #[test]
    fn an_unreachable_server_is_named_as_kubectl_names_it() {
        assert_eq!(
            Unreachable::Refused.text(Some("127.0.0.1:1")),
            "The connection to the server 127.0.0.1:1 was refused - did you specify the right host or port?"
        );
        assert_eq!(
            Unreachable::Failed("i/o timeout".into()).text(Some("10.0.0.1:6443")),
            "Unable to connect to the server 10.0.0.1:6443: i/o timeout"
        );
    }

    #[test]
    fn a_refused_connection_is_found_below_kube_s_service_error() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let err = kube::Error::Service(Box::new(io));
        assert_eq!(transport(&err), Some(Unreachable::Refused));
        let wrapped = ApiError(err);
        assert_eq!(Unreachable::find(&wrapped), Some(Unreachable::Refused));
        let slow =
            kube::Error::Service(Box::new(std::io::Error::from(std::io::ErrorKind::TimedOut)));
        assert_eq!(
            Unreachable::find(&ApiError(slow)).map(|u| u.text(Some("10.0.0.1:6443"))),
            Some("Unable to connect to the server 10.0.0.1:6443: i/o timeout".to_string())
        );
        let answered = ApiError(kube::Error::Api(Status::failure("x", "Conflict").boxed()));
        assert_eq!(Unreachable::find(&answered), None);
    }
}
