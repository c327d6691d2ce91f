//! `--metrics-address`: the rollout controller's HTTP listener (hyper, HTTP/1.1), with
//! `GET /metrics` ([`ControllerMetrics`]), `GET /healthz` and `GET /readyz` ([`Health`]).
//! Every replica serves it, leader or standby, from before it leads.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use super::health::{Health, Probe};
use super::metrics::{ControllerMetrics, CONTENT_TYPE};

/// How long one connection may stay open.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Wait after a failed accept (out of file descriptors) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

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
    tokio::spawn(serve(listener, metrics, health));
    Ok(local)
}

async fn serve(listener: TcpListener, metrics: Arc<ControllerMetrics>, health: Health) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                warn!(%err, "cannot accept a connection on the metrics address");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        let health = health.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let answer = respond(req.method(), req.uri().path(), &metrics, &health);
                async move { Ok::<_, Infallible>(answer) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => debug!(%err, "metrics connection failed"),
                Err(_) => debug!("metrics connection timed out"),
            }
        });
    }
}

fn text(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

fn probe(p: Probe) -> Response<Full<Bytes>> {
    let plain = "text/plain; charset=utf-8";
    match p {
        Probe::Ok(why) => text(StatusCode::OK, plain, format!("{why}\n")),
        Probe::Failing(why) => text(StatusCode::SERVICE_UNAVAILABLE, plain, format!("{why}\n")),
    }
}

/// The answer to `method path`.
fn respond(
    method: &Method,
    path: &str,
    metrics: &ControllerMetrics,
    health: &Health,
) -> Response<Full<Bytes>> {
    let plain = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            plain,
            "only GET and HEAD\n".into(),
        );
        r.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        return r;
    }
    match path {
        "/metrics" => match metrics.render() {
            Ok(body) => text(StatusCode::OK, CONTENT_TYPE, body),
            Err(err) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                plain,
                format!("cannot render the metrics: {err}\n"),
            ),
        },
        "/healthz" => probe(health.liveness()),
        "/readyz" => probe(health.readiness()),
        _ => text(
            StatusCode::NOT_FOUND,
            plain,
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods() {
        let m = ControllerMetrics::new();
        let h = Health::new(Duration::from_secs(15));
        assert_eq!(respond(&Method::GET, "/metrics", &m, &h).status(), 200);
        assert_eq!(respond(&Method::GET, "/healthz", &m, &h).status(), 200);
        assert_eq!(respond(&Method::GET, "/readyz", &m, &h).status(), 503);
        assert_eq!(respond(&Method::GET, "/nope", &m, &h).status(), 404);
        assert_eq!(respond(&Method::POST, "/metrics", &m, &h).status(), 405);
    }
}
