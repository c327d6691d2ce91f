//! Why the controller stopped, and why a reconcile failed.

use super::super::lease::TimingsError;
use super::super::metrics::ErrorKind;
use super::super::serve::ServeError;

/// Why the controller stopped acting (the process then exits, and a standby takes over).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Timings(#[from] TimingsError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("the controller stopped")]
    Stopped,
    #[error("lost the leader lease; exiting so that only one replica acts")]
    LostLease,
}

/// A reconcile that failed (requeued with backoff by the controller's error policy).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("not the leader any more")]
    NotLeader,
    #[error("{what}: {}", kp_runtime::api_error::shown(.source))]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError {
    /// The metrics' label for this failure.
    pub(super) fn kind(&self) -> ErrorKind {
        match self {
            ReconcileError::NotLeader => ErrorKind::not_leader,
            ReconcileError::Api { .. } => ErrorKind::api,
        }
    }
}

/// Wraps an API error with what was being done.
pub(super) fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ReconcileError {
    let what = what.into();
    move |source| ReconcileError::Api { what, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_says_what_was_being_done() {
        let source = kube::Error::Api(
            kube::core::Status::failure("the server is on fire", "InternalError")
                .with_code(500)
                .boxed(),
        );
        let err = api_err("cannot patch node n1")(source);
        assert!(
            err.to_string().starts_with("cannot patch node n1: "),
            "{err}"
        );
        assert!(matches!(err.kind(), ErrorKind::api));
        assert!(matches!(
            ReconcileError::NotLeader.kind(),
            ErrorKind::not_leader
        ));
    }
}
