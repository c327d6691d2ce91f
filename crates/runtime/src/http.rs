//! The one HTTP/1.1 server of kubelet-pivot (hyper): the supervisor's
//! `--metrics-address` and the rollout controller's `/metrics`, `/healthz` and `/readyz`.
//!
//! A scraper cannot hurt the process that serves it: a request head over [`MAX_HEAD`]
//! is answered 431, each connection is closed [`Limits::timeout`] after it was accepted
//! whatever the client does (a slow sender or reader cannot hold it longer), at most
//! [`Limits::max_connections`] are open at once (more are closed at once), and each
//! serves one request. Idle, the server is one task parked in `accept`: no timer runs.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use super::exposition::Format;

/// The body of every answer: the whole text at once.
pub type Body = Full<Bytes>;

/// Largest request head (request line and headers) read; hyper's smallest buffer.
pub const MAX_HEAD: usize = 8 * 1024;
/// Wait after a failed accept (out of file descriptors) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// The content type of answers other than metrics.
const PLAIN: &str = "text/plain; charset=utf-8";

/// What one listener allows its clients.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// How long a connection may stay open, from accept to close.
    pub timeout: Duration,
}

/// Serves `listener` until the process ends, answering each request with `handler`.
pub async fn serve<H, F>(listener: TcpListener, limits: Limits, handler: H)
where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let handler = Arc::new(handler);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                warn!(%err, "cannot accept an HTTP connection");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            debug!(%peer, "too many HTTP connections; closing this one");
            continue;
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let answer = handler(req);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .max_buf_size(MAX_HEAD)
                .max_header_size(MAX_HEAD)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(limits.timeout, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => debug!(%peer, %err, "HTTP connection failed"),
                Err(_) => debug!(%peer, "HTTP connection timed out"),
            }
            drop(permit);
        });
    }
}

/// An answer of `status` with `body`.
pub fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A plain-text answer of `status` with `body`.
pub fn plain(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    text(status, PLAIN, body.into())
}

/// The 405 answer to anything but GET and HEAD (hyper leaves out the body of an answer
/// to HEAD); `None` for those.
pub fn refuse_other_methods<B>(req: &Request<B>) -> Option<Response<Body>> {
    if req.method() == Method::GET || req.method() == Method::HEAD {
        return None;
    }
    let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    Some(r)
}

/// The metrics in the format `req` negotiated; `encode` writes them.
pub fn metrics<B>(
    req: &Request<B>,
    encode: impl FnOnce(Format) -> Result<String, std::fmt::Error>,
) -> Response<Body> {
    let format = Format::negotiate(req.headers());
    match encode(format) {
        Ok(body) => text(StatusCode::OK, format.content_type(), body),
        Err(err) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot render the metrics: {err}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    const LIMITS: Limits = Limits {
        max_connections: 2,
        timeout: Duration::from_millis(300),
    };

    async fn server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(
            listener,
            LIMITS,
            |req: Request<Incoming>| async move {
                if let Some(r) = refuse_other_methods(&req) {
                    return r;
                }
                metrics(&req, |_| Ok("m 1\n".to_string()))
            },
        ));
        addr
    }

    /// Sends `raw`, reads until the server closes (or 5 s): the answer and how long it took.
    async fn exchange(addr: SocketAddr, raw: &[u8]) -> (String, Duration) {
        let started = Instant::now();
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(raw).await.unwrap();
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "the server kept the connection open");
        (
            String::from_utf8_lossy(&out).into_owned(),
            started.elapsed(),
        )
    }

    fn status(answer: &str) -> &str {
        answer.split(' ').nth(1).unwrap_or_default()
    }

    #[tokio::test]
    async fn answers_one_request_per_connection() {
        let addr = server().await;
        let (a, _) = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(status(&a), "200", "{a}");
        assert!(a.contains("content-type: text/plain; version=0.0.4"), "{a}");
        assert!(a.ends_with("\r\n\r\nm 1\n"), "{a}");
        let (a, _) = exchange(
            addr,
            b"GET / HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n",
        )
        .await;
        assert!(
            a.contains("content-type: application/openmetrics-text; version=1.0.0"),
            "{a}"
        );
        let (a, _) = exchange(addr, b"HEAD / HTTP/1.1\r\n\r\n").await;
        assert_eq!(status(&a), "200", "{a}");
        assert!(a.contains("content-length: 4\r\n"), "{a}");
        assert!(a.ends_with("\r\n\r\n"), "HEAD with a body: {a}");
        let (a, _) = exchange(addr, b"DELETE / HTTP/1.1\r\n\r\n").await;
        assert_eq!(status(&a), "405", "{a}");
        assert!(a.contains("allow: GET, HEAD\r\n"), "{a}");
        let (a, _) = exchange(addr, b"hello\r\n\r\n").await;
        assert_eq!(status(&a), "400", "{a}");
    }

    #[tokio::test]
    async fn an_oversized_request_head_is_refused() {
        let addr = server().await;
        let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        let (a, _) = exchange(addr, huge.as_bytes()).await;
        assert_eq!(status(&a), "431", "{a}");
        let fits = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD / 2));
        let (a, _) = exchange(addr, fits.as_bytes()).await;
        assert_eq!(status(&a), "200", "{a}");
    }

    #[tokio::test]
    async fn a_slow_client_is_cut_off_and_the_connections_are_bounded() {
        let addr = server().await;
        // Two slowloris clients take every slot, never finishing their heads.
        let mut slow = Vec::new();
        for _ in 0..LIMITS.max_connections {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nX-Slow: ").await.unwrap();
            slow.push(s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A third is closed at once, unanswered.
        let (a, took) = exchange(addr, b"GET / HTTP/1.1\r\n\r\n").await;
        assert_eq!(a, "", "served beyond the connection bound");
        assert!(took < LIMITS.timeout, "{took:?}");
        // The slow ones are closed at the timeout, and serving resumes.
        for mut s in slow {
            let mut out = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
            assert!(read.is_ok(), "a slow client kept its connection");
        }
        let (a, _) = exchange(addr, b"GET / HTTP/1.1\r\n\r\n").await;
        assert_eq!(status(&a), "200", "{a}");
    }
}
