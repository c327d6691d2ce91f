//! Whether the API server answers again, as a fact of the client: every
//! successful (2xx) answer is counted. A watch that starts again after an
//! outage yields no event until something changes, so the watch wrapper
//! cannot see its own success; a count that moved since its last failure
//! (which was no answer at all) says the server is back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use futures::future::{FutureExt, Map};
use http::{Request, Response};
use kube::client::{Body, ClientBuilder};

/// Successful answers of the API server in this process (one API server per process).
static ANSWERS: AtomicU64 = AtomicU64::new(0);

/// The successful answers so far.
pub fn answers() -> u64 {
    ANSWERS.load(Ordering::Relaxed)
}

/// Builds the client of `config` with every 2xx answer counted.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&Counted::<()>(()))
        .build())
}

/// A tower layer (`Counted<()>`) and service (`Counted<S>`) counting 2xx answers.
#[derive(Clone)]
struct Counted<S>(S);

impl<S> tower::Layer<S> for Counted<()> {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted(inner)
    }
}

/// Counts one successful answer.
pub(super) fn record() {
    ANSWERS.fetch_add(1, Ordering::Relaxed);
}

fn count<B, E>(res: Result<Response<B>, E>) -> Result<Response<B>, E> {
    if res.as_ref().is_ok_and(|r| r.status().is_success()) {
        record();
    }
    res
}

type CountFn<B, E> = fn(Result<Response<B>, E>) -> Result<Response<B>, E>;

impl<S, B> tower::Service<Request<Body>> for Counted<S>
where
    S: tower::Service<Request<Body>, Response = Response<B>>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Map<S::Future, CountFn<B, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        self.0.call(req).map(count as CountFn<B, S::Error>)
    }
}
