//! What the server's answer to one eviction request means for the drain,
//! told apart the way `kubectl drain` does (k8s.io/kubectl/pkg/drain):
//! a PodDisruptionBudget's 429 is asked again; the 500 for a pod that
//! several budgets select ends the round at once with the server's words,
//! since asking again cannot change it. Unlike `kubectl drain`, server
//! errors (5xx, a 429 of API priority and fairness) and a server that does
//! not answer are asked again with backoff too, and reported as what they
//! are, not as a budget.

use std::time::Duration;

use kube::core::Status;

use crate::config::store::{BlockReason, DrainFailure};

/// The cause reason of a PodDisruptionBudget's 429
/// (`policyv1.DisruptionBudgetCause`).
pub const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";
/// The cause reason of a 403 in a namespace being deleted
/// (`corev1.NamespaceTerminatingCause`).
pub const NAMESPACE_TERMINATING_CAUSE: &str = "NamespaceTerminating";
/// What the eviction subresource answers (500) for a pod that more than
/// one PodDisruptionBudget selects.
pub const MULTIPLE_BUDGETS: &str = "more than one PodDisruptionBudget";
/// Longest wait a server's `retryAfterSeconds` may ask for.
const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);
/// Characters of a server's message kept (it may quote pod names and
/// other text from whoever created the pod).
pub const MESSAGE_CHARS: usize = 300;

/// `text` as it may go into a log line, the store and `status`: at most
/// [`MESSAGE_CHARS`] characters with control characters escaped, then
/// `…(N more bytes)` when it was longer.
pub fn cleaned(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MESSAGE_CHARS + 32));
    for (i, (at, c)) in text.char_indices().enumerate() {
        if i == MESSAGE_CHARS {
            out.push_str(&format!("…({} more bytes)", text.len() - at));
            break;
        }
        if c.is_control() || c.is_whitespace() && c != ' ' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The meaning of one eviction answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 201: the pod is on its way out.
    Evicted,
    /// 404, or 409 for our uid precondition: the pod we knew is gone.
    Gone,
    /// Not now: ask again after a backoff (at least `retry_after`).
    Refused {
        reason: BlockReason,
        /// HTTP status (0: no answer).
        code: u16,
        /// The server's words ([`cleaned`]).
        message: String,
        retry_after: Option<Duration>,
    },
    /// Asking again cannot help: the round fails.
    Fatal {
        failure: DrainFailure,
        message: String,
    },
}

/// The server's message with the causes it gives beside it (the 429 of a
/// budget says which budget and why in its cause).
fn words(status: &Status) -> String {
    let mut text = status.message.clone();
    for cause in status.details.iter().flat_map(|d| &d.causes) {
        if !cause.message.is_empty() && !text.contains(&cause.message) {
            if text.is_empty() {
                text = cause.message.clone();
            } else {
                text = format!("{text} ({})", cause.message);
            }
        }
    }
    text
}

fn has_cause(status: &Status, reason: &str) -> bool {
    status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .any(|c| c.reason == reason)
}

/// Classifies an error status the server answered an eviction with.
pub fn of_status(status: &Status) -> Answer {
    let text = words(status);
    let retry_after = status
        .details
        .as_ref()
        .map(|d| d.retry_after_seconds)
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(u64::from(s)).min(RETRY_AFTER_MAX));
    let refused = |reason| Answer::Refused {
        reason,
        code: status.code,
        message: cleaned(&text),
        retry_after,
    };
    match status.code {
        404 => Answer::Gone,
        409 if text.contains("precondition") && text.contains("UID") => Answer::Gone,
        429 if has_cause(status, DISRUPTION_BUDGET_CAUSE) => refused(BlockReason::DisruptionBudget),
        429 => refused(BlockReason::ServerError),
        403 if has_cause(status, NAMESPACE_TERMINATING_CAUSE) => {
            refused(BlockReason::NamespaceTerminating)
        }
        403 => Answer::Fatal {
            failure: DrainFailure::Forbidden,
            message: format!(
                "the node's credentials may not evict it: {}",
                cleaned(&text)
            ),
        },
        500 if text.contains(MULTIPLE_BUDGETS) => Answer::Fatal {
            failure: DrainFailure::MultipleBudgets,
            message: format!(
                "{} (asking again cannot help: at most one PodDisruptionBudget may select a pod)",
                cleaned(&text)
            ),
        },
        // A conflict other than our precondition: the pod changed under
        // the request; ask again.
        409 => refused(BlockReason::ServerError),
        code if code >= 500 => refused(BlockReason::ServerError),
        code => Answer::Fatal {
            failure: DrainFailure::Refused,
            message: format!(
                "the server refused its eviction (HTTP {code}): {}",
                cleaned(&text)
            ),
        },
    }
}

/// Classifies the result of an eviction request.
pub fn of_result(result: Result<(), kube::Error>) -> Answer {
    match result {
        Ok(()) => Answer::Evicted,
        Err(kube::Error::Api(status)) => of_status(&status),
        Err(err) => Answer::Refused {
            reason: BlockReason::Unreachable,
            code: 0,
            message: cleaned(&err.to_string()),
            retry_after: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(v: serde_json::Value) -> Status {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_budgets_429_is_told_from_throttling() {
        let pdb = status(json!({
            "code": 429, "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}]},
        }));
        match of_status(&pdb) {
            Answer::Refused {
                reason,
                code,
                message,
                retry_after,
            } => {
                assert_eq!(reason, BlockReason::DisruptionBudget);
                assert_eq!(code, 429);
                assert!(
                    message.contains("violate the pod's disruption budget"),
                    "{message}"
                );
                assert!(
                    message.contains("budget web needs 1 healthy pods"),
                    "{message}"
                );
                assert_eq!(retry_after, None);
            }
            other => panic!("{other:?}"),
        }
        let processing = status(json!({
            "code": 429, "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget", "message": "still being processed"}],
                        "retryAfterSeconds": 10},
        }));
        assert!(matches!(of_status(&processing),
            Answer::Refused { reason: BlockReason::DisruptionBudget, retry_after: Some(d), .. } if d == Duration::from_secs(10)));
        // API priority and fairness: a 429 without the budget's cause.
        let throttled = status(json!({"code": 429, "reason": "TooManyRequests",
            "message": "Too many requests, please try again later.", "details": {"retryAfterSeconds": 1}}));
        assert!(matches!(
            of_status(&throttled),
            Answer::Refused {
                reason: BlockReason::ServerError,
                code: 429,
                ..
            }
        ));
    }

    #[test]
    fn several_budgets_fail_at_once_with_the_servers_words() {
        // As the testkit and old servers answer, and as NewInternalError does.
        for s in [
            json!({"code": 500, "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}),
            json!({"code": 500, "reason": "InternalError",
                "message": "Internal error occurred: This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                "details": {"causes": [{"message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}]}}),
        ] {
            match of_status(&status(s)) {
                Answer::Fatal { failure, message } => {
                    assert_eq!(failure, DrainFailure::MultipleBudgets);
                    assert!(message.contains("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."), "{message}");
                    assert_eq!(
                        message
                            .matches("more than one PodDisruptionBudget, which")
                            .count(),
                        1,
                        "{message}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn server_errors_are_asked_again_and_never_called_a_budget() {
        for code in [500, 502, 503, 504] {
            let s = status(
                json!({"code": code, "message": "the server is currently unable to handle the request"}),
            );
            assert!(
                matches!(of_status(&s), Answer::Refused { reason: BlockReason::ServerError, code: c, .. } if c == code),
                "{code}"
            );
        }
        let refused = of_result(Err(kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )))));
        assert!(matches!(
            refused,
            Answer::Refused {
                reason: BlockReason::Unreachable,
                code: 0,
                ..
            }
        ));
        assert_eq!(of_result(Ok(())), Answer::Evicted);
    }

    #[test]
    fn gone_forbidden_and_other_refusals() {
        assert_eq!(of_status(&status(json!({"code": 404}))), Answer::Gone);
        let moved = status(
            json!({"code": 409, "message": "Operation cannot be fulfilled on Pod \"web-1\": the UID in the precondition (a) does not match the UID in record (b). The object might have been deleted and then recreated"}),
        );
        assert_eq!(of_status(&moved), Answer::Gone);
        let forbidden = status(
            json!({"code": 403, "message": "pods \"x\" is forbidden: node \"a\" can only evict pods bound to it"}),
        );
        assert!(matches!(
            of_status(&forbidden),
            Answer::Fatal {
                failure: DrainFailure::Forbidden,
                ..
            }
        ));
        let terminating = status(
            json!({"code": 403, "message": "namespace x is being terminated",
            "details": {"causes": [{"reason": "NamespaceTerminating", "message": "namespace x is being terminated"}]}}),
        );
        assert!(matches!(
            of_status(&terminating),
            Answer::Refused {
                reason: BlockReason::NamespaceTerminating,
                ..
            }
        ));
        let bad = status(json!({"code": 422, "message": "invalid"}));
        assert!(matches!(
            of_status(&bad),
            Answer::Fatal {
                failure: DrainFailure::Refused,
                ..
            }
        ));
    }

    #[test]
    fn node_supplied_text_is_escaped_and_bounded() {
        let long = format!("bad\n\u{1b}[31m{}", "x".repeat(5000));
        match of_status(&status(json!({"code": 503, "message": long}))) {
            Answer::Refused { message, .. } => {
                assert!(message.len() < 400, "{}", message.len());
                assert!(message.starts_with("bad\\n\\u{1b}[31mxx"), "{message}");
                assert!(message.ends_with("…(4709 more bytes)"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(cleaned("the pod's budget"), "the pod's budget");
    }
}
