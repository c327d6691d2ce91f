//! `--metrics-address`: `GET /metrics` (and `HEAD`) answered with [`Metrics::render`] in
//! the negotiated format, over the shared server of [`http`](super::http) with its
//! bounds on request size, time and concurrency, so a misbehaving scraper cannot hurt
//! the supervisor's loop. A busy address is retried, not fatal.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;
use tracing::{info, warn};

use super::{DiskView, Metrics};
use kp_runtime::http::{self, Body, Limits};

/// What a scraper may do: a few at once, 5 s each.
const LIMITS: Limits = Limits {
    max_connections: 8,
    timeout: Duration::from_secs(5),
};
/// While the address is taken (another supervisor of the node on the same
/// port, e.g. v1 and v2 during an upgrade): how often to try again.
const REBIND_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on --metrics-address {addr}: {source}")]
pub struct MetricsError {
    addr: SocketAddr,
    #[source]
    source: io::Error,
}

/// Binds `addr` and serves in a background task. An address in use is not
/// fatal (the other user may be the supervisor we are about to replace):
/// we log it and keep trying. Any other bind error is returned.
pub async fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<(), MetricsError> {
    match TcpListener::bind(addr).await {
        Ok(listener) => {
            let local = listener.local_addr().unwrap_or(addr);
            info!(address = %local, "serving Prometheus metrics on /metrics");
            tokio::spawn(serve(listener, metrics));
            Ok(())
        }
        Err(err) if err.kind() == io::ErrorKind::AddrInUse => {
            warn!(%addr, "metrics address is in use (another supervisor of this node?); trying again every {}", humantime::format_duration(REBIND_INTERVAL));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(REBIND_INTERVAL).await;
                    if let Ok(listener) = TcpListener::bind(addr).await {
                        info!(%addr, "metrics address is free now; serving Prometheus metrics on /metrics");
                        serve(listener, metrics).await;
                        return;
                    }
                }
            });
            Ok(())
        }
        Err(source) => Err(MetricsError { addr, source }),
    }
}

async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    http::serve(listener, LIMITS, move |req| respond(req, metrics.clone())).await
}

/// The answer to `req`.
async fn respond<B>(req: Request<B>, metrics: Arc<Metrics>) -> Response<Body> {
    if let Some(refused) = http::refuse_other_methods(&req) {
        return refused;
    }
    match req.uri().path() {
        "/metrics" => {
            let m = metrics.clone();
            let node = tokio::task::spawn_blocking(move || m.node_view())
                .await
                .unwrap_or_else(|_| DiskView::default());
            http::metrics(&req, |format| metrics.render(&node, format))
        }
        "/" => http::plain(StatusCode::OK, "kubelet-pivot: metrics are at /metrics\n"),
        _ => http::plain(
            StatusCode::NOT_FOUND,
            "not found; metrics are at /metrics\n",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pivot::role::Rank;
    use crate::pivot::state::StateDir;
    use hyper::Method;
    use std::path::{Path, PathBuf};

    fn metrics() -> Arc<Metrics> {
        Arc::new(Metrics::new(
            Rank::BOOTSTRAP,
            "node-a".to_string(),
            StateDir::at(Path::new("/nonexistent/lock")),
            PathBuf::from("/nonexistent/store"),
        ))
    }

    async fn answer(method: Method, path: &str, accept: Option<&str>) -> Response<Body> {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(a) = accept {
            req = req.header(hyper::header::ACCEPT, a);
        }
        respond(req.body(()).unwrap(), metrics()).await
    }

    fn content_type(r: &Response<Body>) -> &str {
        r.headers()[hyper::header::CONTENT_TYPE].to_str().unwrap()
    }

    #[tokio::test]
    async fn routes_and_formats() {
        let r = answer(Method::GET, "/metrics?x=1", None).await;
        assert_eq!(r.status(), 200);
        assert_eq!(content_type(&r), "text/plain; version=0.0.4; charset=utf-8");
        let r = answer(
            Method::GET,
            "/metrics",
            Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5"),
        )
        .await;
        assert_eq!(
            content_type(&r),
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        assert_eq!(answer(Method::HEAD, "/metrics", None).await.status(), 200);
        assert_eq!(answer(Method::GET, "/", None).await.status(), 200);
        assert_eq!(answer(Method::GET, "/other", None).await.status(), 404);
        assert_eq!(answer(Method::POST, "/metrics", None).await.status(), 405);
    }
}
