//! Listener, connections and the state they share: the acceptor thread, one thread per
//! connection, and `stop`'s shutdown of both.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::errors::ApiError;
use crate::protocol::{read_request, write_json};
use crate::router::handle;
use crate::store::State;
use crate::tls::{Half, Tls};
use crate::unpoisoned;

pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    /// Signalled on every change a watch may care about (writes, drops, bookmarks, stop).
    pub(crate) changed: Condvar,
    pub(crate) conns: Mutex<ConnRegistry>,
    pub(crate) next_conn: AtomicU64,
    /// Set when the ApiServer is dropped (ends the pod termination thread).
    pub(crate) closed: AtomicBool,
    /// HTTPS with client certificates ([`crate::ApiServer::start_https`]), or plain HTTP.
    pub(crate) tls: Option<Arc<Tls>>,
    /// TLS handshakes that failed (a client certificate refused, expired, ...).
    pub(crate) failed_handshakes: AtomicU64,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking connection thread must not take the whole server down with it.
        unpoisoned::lock(&self.state)
    }

    pub(crate) fn lock_conns(&self) -> MutexGuard<'_, ConnRegistry> {
        unpoisoned::lock(&self.conns)
    }
}

/// Open connections, so that `stop` can close them.
#[derive(Default)]
pub(crate) struct ConnRegistry {
    /// Incremented by `stop`; a connection accepted under an older epoch is closed at once.
    pub(crate) epoch: u64,
    pub(crate) streams: HashMap<u64, TcpStream>,
}

impl ConnRegistry {
    /// Shuts every open connection down (their threads then end).
    pub(crate) fn cut_all(&mut self) {
        for (_, stream) in self.streams.drain() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

pub(crate) struct Acceptor {
    stopping: Arc<AtomicBool>,
    /// The listening socket itself, as a stream, to shut it down: a `close` alone would leave
    /// it listening while a child process forked at that moment (a test running kubectl)
    /// still holds the descriptor, and would not wake the blocked `accept`.
    control: TcpStream,
    thread: JoinHandle<()>,
}

impl Acceptor {
    pub(crate) fn spawn(listener: TcpListener, shared: Arc<Shared>) -> Acceptor {
        let control = listener
            .try_clone()
            .map(|clone| TcpStream::from(OwnedFd::from(clone)))
            .unwrap_or_else(|err| panic!("fake API server: failed to clone the listener: {err}"));
        let stopping = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stopping);
        let epoch = shared.lock_conns().epoch;
        let thread = thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let shared = Arc::clone(&shared);
                thread::spawn(move || serve_connection(shared, stream, epoch));
            }
        });
        Acceptor {
            stopping,
            control,
            thread,
        }
    }

    pub(crate) fn stop(self, port: u16) {
        self.stopping.store(true, Ordering::SeqCst);
        // shutdown(2) on a listening socket stops it listening (new connections are refused)
        // and makes the blocked accept() return.
        let _ = self.control.shutdown(Shutdown::Both);
        // In case accept() was not woken: a connection wakes it (refused once shut down).
        let _ = TcpStream::connect(("127.0.0.1", port));
        let _ = self.thread.join();
    }
}

pub(crate) fn bind_with_retry(port: u16) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(listener) => return listener,
            Err(err) if Instant::now() < deadline => {
                let _ = err;
                thread::sleep(Duration::from_millis(20));
            }
            Err(err) => panic!("fake API server: failed to re-bind 127.0.0.1:{port}: {err}"),
        }
    }
}

fn serve_connection(shared: Arc<Shared>, stream: TcpStream, epoch: u64) {
    let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
    {
        let mut conns = shared.lock_conns();
        let Ok(clone) = stream.try_clone() else {
            return;
        };
        if conns.epoch != epoch {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        conns.streams.insert(id, clone);
    }
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = stream.set_nodelay(true);
    match shared.tls.clone() {
        None => {
            if let Ok(read_half) = stream.try_clone() {
                serve(&shared, BufReader::new(read_half), stream, None);
            }
        }
        Some(tls) => {
            let mut stream = stream;
            match tls.accept(&mut stream) {
                Ok((conn, client)) => {
                    let half = Half(Arc::new(Mutex::new(rustls::StreamOwned::new(conn, stream))));
                    serve(&shared, BufReader::new(half.clone()), half, client);
                }
                Err(_) => {
                    shared.failed_handshakes.fetch_add(1, Ordering::SeqCst);
                    let _ = stream.shutdown(Shutdown::Both);
                }
            }
        }
    }
    if let Some(stream) = shared.lock_conns().streams.remove(&id) {
        let _ = stream.shutdown(Shutdown::Both);
    }
}

/// Serves requests on one connection until it closes; `client`: the Common Name of its
/// verified client certificate.
fn serve(
    shared: &Arc<Shared>,
    mut reader: impl BufRead,
    mut writer: impl Write,
    client: Option<String>,
) {
    loop {
        let mut request = match read_request(&mut reader) {
            Ok(Some(request)) => request,
            Ok(None) => break,
            Err(err) => {
                let status = ApiError::bad_request(format!("malformed HTTP request: {err}"));
                let _ = write_json(&mut writer, status.code, &[], &status.status(), false);
                break;
            }
        };
        request.client_cn.clone_from(&client);
        match handle(shared, request, &mut writer) {
            Ok(true) => {}
            Ok(false) | Err(_) => break,
        }
    }
    let _ = writer.flush();
}

/// A client that does not read its responses for this long is disconnected.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
