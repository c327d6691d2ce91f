//! The kubelet's health endpoint (`healthzBindAddress:healthzPort`, default
//! `127.0.0.1:10248`), probed after a restart before the node is uncordoned.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One probe's time limit (connect, request, answer).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest answer read.
const MAX_ANSWER: u64 = 4096;

/// Where to probe a kubelet serving healthz on `bind:port`: an unspecified
/// bind address (`0.0.0.0`, `::`) is probed on loopback. `None` when the
/// port is 0 (healthz disabled) or the address does not parse.
pub fn probe_address(bind: &str, port: u16) -> Option<SocketAddr> {
    if port == 0 {
        return None;
    }
    let ip: IpAddr = bind.parse().ok()?;
    let ip = match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => other,
    };
    Some(SocketAddr::new(ip, port))
}

/// Whether `GET /healthz` at `addr` answers 200 within [`PROBE_TIMEOUT`].
pub async fn healthy(addr: SocketAddr) -> bool {
    tokio::time::timeout(PROBE_TIMEOUT, probe(addr))
        .await
        .unwrap_or(false)
}

async fn probe(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return false;
    };
    let request =
        format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nUser-Agent: kubelet-pivot\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut answer = Vec::new();
    if stream
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .await
        .is_err()
    {
        return false;
    }
    let status_line = answer.split(|b| *b == b'\n').next().unwrap_or_default();
    let text = String::from_utf8_lossy(status_line);
    let mut parts = text.split_whitespace();
    parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) && parts.next() == Some("200")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_addresses_are_probed_on_loopback() {
        assert_eq!(
            probe_address("0.0.0.0", 10248),
            Some("127.0.0.1:10248".parse().unwrap())
        );
        assert_eq!(probe_address("::", 1), Some("[::1]:1".parse().unwrap()));
        assert_eq!(
            probe_address("10.0.0.5", 2),
            Some("10.0.0.5:2".parse().unwrap())
        );
        assert_eq!(probe_address("127.0.0.1", 0), None);
        assert_eq!(probe_address("not an ip", 5), None);
    }

    #[tokio::test]
    async fn a_200_is_healthy_anything_else_is_not() {
        use tokio::net::TcpListener;
        for (answer, want) in [
            ("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true),
            ("HTTP/1.1 500 Internal Server Error\r\n\r\n", false),
        ] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(async move {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                s.write_all(answer.as_bytes()).await.unwrap();
            });
            assert_eq!(healthy(addr).await, want);
            server.await.unwrap();
        }
        // Nobody listening.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        assert!(!healthy(addr).await);
    }
}
