//! The retry of a patch that lost a race (409 Conflict), at once. Every
//! other failure goes to the caller's [`Retry`](kp_runtime::retry::Retry):
//! bounded backoff, quiet logs.

use tracing::debug;

/// Tries of a patch on conflict.
const CONFLICT_ATTEMPTS: u32 = 5;

pub(crate) fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Calls again on 409 Conflict (someone wrote the object between our read
/// and our write), up to [`CONFLICT_ATTEMPTS`] times.
pub(super) async fn retry<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(err) if api_code(&err) == Some(409) && attempt < CONFLICT_ATTEMPTS => {
                debug!(err = %kp_runtime::api_error::shown(&err), attempt, "conflict; patching again");
                attempt += 1;
            }
            Err(err) => return Err(err),
        }
    }
}
