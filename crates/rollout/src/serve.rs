//! `--metrics-address`: the rollout controller's HTTP listener, with `GET /metrics`
//! ([`ControllerMetrics`], in the negotiated format), `GET /healthz` and `GET /readyz`
//! ([`Health`]), over the shared server of [`kp_runtime::http`] and its bounds on
//! request size, time and concurrency. Every replica serves it, leader or standby, from
//! before it leads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;
use tracing::info;

use super::health::{Health, Probe};
use super::metrics::ControllerMetrics;
use kp_runtime::http::{self, Body, Limits};

/// What a client may do: Prometheus and the kubelet's probes, 10 s each.
const LIMITS: Limits = Limits {
    max_connections: 16,
    timeout: Duration::from_secs(10),
};

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on --metrics-address {addr}: {source}")]
pub struct ServeError {
    addr: SocketAddr,
    #[source]
    source: std::io::Error,
}

/// Binds `addr` (an error is returned: a controller whose probes cannot be served would
/// be restarted by its liveness probe anyway) and serves in a background task.
pub async fn start(
    addr: SocketAddr,
    metrics: Arc<ControllerMetrics>,
    health: Health,
) -> Result<SocketAddr, ServeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError { addr, source })?;
    let local = listener.local_addr().unwrap_or(addr);
    info!(address = %local, "serving /metrics, /healthz and /readyz");
    tokio::spawn(http::serve(listener, LIMITS, move |req| {
        let answer = respond(&req, &metrics, &health);
        async move { answer }
    }));
    Ok(local)
}

fn probe(p: Probe) -> Response<Body> {
    match p {
        Probe::Ok(why) => http::plain(StatusCode::OK, format!("{why}\n")),
        Probe::Failing(why) => http::plain(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// The answer to `req`.
fn respond<B>(req: &Request<B>, metrics: &ControllerMetrics, health: &Health) -> Response<Body> {
    if let Some(refused) = http::refuse_other_methods(req) {
        return refused;
    }
    match req.uri().path() {
        "/metrics" => http::metrics(req, |format| metrics.render(format)),
        "/healthz" => probe(health.liveness()),
        "/readyz" => probe(health.readiness()),
        _ => http::plain(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /healthz or /readyz\n",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Method;

    fn status(method: Method, path: &str, m: &ControllerMetrics, h: &Health) -> StatusCode {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap();
        respond(&req, m, h).status()
    }

    #[test]
    fn paths_and_methods() {
        let m = ControllerMetrics::new();
        let h = Health::new(Duration::from_secs(15));
        assert_eq!(status(Method::GET, "/metrics", &m, &h), 200);
        assert_eq!(status(Method::GET, "/healthz", &m, &h), 200);
        assert_eq!(status(Method::GET, "/readyz", &m, &h), 503);
        assert_eq!(status(Method::GET, "/nope", &m, &h), 404);
        assert_eq!(status(Method::POST, "/metrics", &m, &h), 405);
    }
}
