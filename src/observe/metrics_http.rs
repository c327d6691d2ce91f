//! `--metrics-address`: a deliberately small HTTP/1.1 server that answers
//! `GET /metrics` (and `HEAD`) with [`Metrics::render`]. One request per
//! connection, bounded request size, time limit and concurrency, so a
//! misbehaving scraper cannot hurt the supervisor's loop.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::observe::metrics::{Metrics, NodeView};

/// Largest request head we read.
const MAX_REQUEST: usize = 8 * 1024;
/// Time a client gets to send its request and read the answer.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Concurrent connections; more are closed at once.
const MAX_CONNECTIONS: usize = 8;
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
            info!(address = %local(&listener, addr), "serving Prometheus metrics on /metrics");
            tokio::spawn(serve(listener, metrics));
            Ok(())
        }
        Err(err) if err.kind() == io::ErrorKind::AddrInUse => {
            warn!(%addr, "metrics address is in use (another supervisor of this node?); trying again every {REBIND_INTERVAL:?}");
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

fn local(listener: &TcpListener, asked: SocketAddr) -> SocketAddr {
    listener.local_addr().unwrap_or(asked)
}

async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(err) => {
                // EMFILE and friends: back off instead of spinning.
                warn!(%err, "metrics listener cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            debug!(%peer, "too many metrics connections; closing this one");
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            if tokio::time::timeout(CONNECTION_TIMEOUT, handle(stream, metrics))
                .await
                .is_err()
            {
                debug!(%peer, "metrics connection timed out");
            }
            drop(permit);
        });
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics { head: bool },
    Index { head: bool },
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let mut parts = text.lines().next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return Route::BadRequest;
    }
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Route::MethodNotAllowed,
    };
    match target.split('?').next().unwrap_or("") {
        "/metrics" => Route::Metrics { head },
        "/" => Route::Index { head },
        _ => Route::NotFound,
    }
}

/// Reads the request head (up to the blank line).
async fn read_head(stream: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(buf));
        }
        if buf.len() > MAX_REQUEST {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(if buf.is_empty() { None } else { Some(buf) });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn handle(mut stream: TcpStream, metrics: Arc<Metrics>) {
    let route = match read_head(&mut stream).await {
        Ok(Some(head)) => route(&head),
        Ok(None) => Route::BadRequest,
        Err(_) => return,
    };
    let (status, content_type, body, head_only) = match route {
        Route::Metrics { head } => {
            let m = metrics.clone();
            let view = tokio::task::spawn_blocking(move || NodeView::read(&m))
                .await
                .unwrap_or_default();
            (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                metrics.render(&view),
                head,
            )
        }
        Route::Index { head } => (
            "200 OK",
            "text/plain; charset=utf-8",
            "kubelet-pivot: metrics are at /metrics\n".to_string(),
            head,
        ),
        Route::NotFound => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found; metrics are at /metrics\n".to_string(),
            false,
        ),
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET and HEAD\n".to_string(),
            false,
        ),
        Route::BadRequest => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "bad request\n".to_string(),
            false,
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        response.push_str("Allow: GET, HEAD\r\n");
    }
    response.push_str("\r\n");
    if !head_only {
        response.push_str(&body);
    }
    if let Err(err) = stream.write_all(response.as_bytes()).await {
        debug!(%err, "metrics client went away");
    }
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics { head: false }
        );
        assert_eq!(
            route(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Route::Metrics { head: true }
        );
        assert_eq!(
            route(b"GET / HTTP/1.1\r\n\r\n"),
            Route::Index { head: false }
        );
        assert_eq!(route(b"GET /other HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Route::MethodNotAllowed
        );
        assert_eq!(route(b"GET /metrics\r\n\r\n"), Route::BadRequest);
        assert_eq!(route(b"GET /metrics SPDY/3\r\n\r\n"), Route::BadRequest);
        assert_eq!(route(&[0xff, 0xfe, b'\r', b'\n']), Route::BadRequest);
    }
}
