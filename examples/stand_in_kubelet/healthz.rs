//! The `/healthz` endpoint (`STANDIN_HEALTHZ`).

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use nix::unistd::getpid;

use crate::config::KubeletConfig;
use crate::error::Error;
use crate::events::{now_ns, Events};
use crate::{refuse, HEALTHZ_BIND_RETRY, HEALTHZ_MAX_REQUEST, HEALTHZ_READ_TIMEOUT};

/// Binds `healthzBindAddress:healthzPort` (exit 1 if it cannot), logs `healthz addr=..` and
/// serves `/healthz` on a thread of its own: 500 until `ready_at`, then 200.
pub(super) fn start_healthz(
    config: &KubeletConfig,
    ready_at: Instant,
    events: &Events,
) -> Result<(), Error> {
    if config.healthz_port == 0 {
        return Ok(());
    }
    let Ok(ip) = config.healthz_bind_address.parse::<IpAddr>() else {
        refuse(
            events,
            "healthz-bind",
            &format!(
                "Failed to start healthz server: healthzBindAddress {:?} is not an IP address",
                config.healthz_bind_address
            ),
        );
    };
    let addr = SocketAddr::new(ip, config.healthz_port);
    // Like the real kubelet: a bind failure is logged and retried every 5 s; the kubelet
    // runs on (unhealthy) meanwhile.
    let first = TcpListener::bind(addr);
    if let Err(err) = &first {
        let error = err.to_string();
        events.record(
            "healthz-bind-failed",
            now_ns(),
            &[
                ("addr", addr.to_string().as_str()),
                ("error", error.as_str()),
            ],
        )?;
        say!(
            "stand-in kubelet pid {}: Failed to start healthz server: listen tcp {addr}: {err}; retrying every {HEALTHZ_BIND_RETRY:?}",
            getpid()
        );
    }
    let bound = first.is_ok();
    std::thread::Builder::new()
        .name("healthz".to_owned())
        .spawn(move || {
            let listener = match first {
                Ok(listener) => listener,
                Err(_) => loop {
                    std::thread::sleep(HEALTHZ_BIND_RETRY);
                    if let Ok(listener) = TcpListener::bind(addr) {
                        say!(
                            "stand-in kubelet pid {} serving healthz on {addr} (after retries)",
                            getpid()
                        );
                        break listener;
                    }
                },
            };
            for stream in listener.incoming() {
                let result = stream.and_then(|stream| answer_healthz(stream, ready_at));
                if let Err(err) = result {
                    say!("stand-in kubelet pid {}: healthz: {err}", getpid());
                    // Do not spin if accept itself keeps failing (EMFILE and the like).
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        })
        .map_err(|source| Error::Os {
            what: "start the healthz thread",
            source,
        })?;
    if bound {
        events.record("healthz", now_ns(), &[("addr", addr.to_string().as_str())])?;
        say!(
            "stand-in kubelet pid {} serving healthz on {addr}",
            getpid()
        );
    }
    Ok(())
}

/// Reads one request head and answers it with `Connection: close`.
fn answer_healthz(mut stream: TcpStream, ready_at: Instant) -> io::Result<()> {
    stream.set_read_timeout(Some(HEALTHZ_READ_TIMEOUT))?;
    stream.set_write_timeout(Some(HEALTHZ_READ_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0_u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < HEALTHZ_MAX_REQUEST {
        let read = stream.read(&mut buf)?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buf[..read]);
    }
    let request_line = head.split(|byte| *byte == b'\n').next().unwrap_or_default();
    let request_line = String::from_utf8_lossy(request_line);
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default();
    let path = parts
        .next()
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default();
    let (status, body) = if matches!(method, "GET" | "HEAD") && path == "/healthz" {
        if Instant::now() < ready_at {
            ("500 Internal Server Error", "not ready")
        } else {
            ("200 OK", "ok")
        }
    } else {
        ("404 Not Found", "404 page not found\n")
    };
    let sent_body = if method == "HEAD" { "" } else { body };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         X-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n\
         {sent_body}",
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    stream.flush()?;
    // Errors are irrelevant here: the client may be gone already.
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(())
}
