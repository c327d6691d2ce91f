//! Helpers shared by the integration tests of the fake API server: kube-rs clients, a raw
//! HTTP client (for exact answers and headers), watch streams, and waiting with a deadline.
#![allow(dead_code)] // Each test binary uses its own part.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;
use testkit::ApiServer;

/// How long a test waits for anything.
pub const PATIENCE: Duration = Duration::from_secs(5);

pub async fn client_from(path: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).expect("read the kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a client config");
    // kube 5 retries 429s itself (15 times, backing off up to 1000 s): the tests want the
    // answers.
    config.default_retry = false;
    Client::try_from(config).expect("a client")
}

/// A client with the default (all-powerful) token.
pub async fn admin(server: &ApiServer, dir: &Path) -> Client {
    client_from(&server.kubeconfig_in(dir)).await
}

/// The Status of a failed call.
pub fn status_of<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// An HTTP answer: status code, headers and the JSON body (`Null` if it is not JSON).
pub struct Answer {
    pub code: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Answer {
    /// The values of header `name` (case-insensitive).
    pub fn header_values(&self, name: &str) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The Status message of an error answer.
    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or("")
    }
}

/// One raw request with the server's token and this content type; returns the answer.
pub fn request(
    server: &ApiServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: Option<&Value>,
) -> Answer {
    request_as(server, &server.token(), method, path, content_type, body)
}

/// One raw request with a bearer token.
pub fn request_as(
    server: &ApiServer,
    token: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: Option<&Value>,
) -> Answer {
    let mut conn = TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    conn.set_read_timeout(Some(PATIENCE)).expect("read timeout");
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    read_answer(BufReader::new(conn)).expect("an answer")
}

/// `GET path` with the default token and this User-Agent; None when the server closed the
/// connection without an answer (an outage).
pub fn get_as_agent(server: &ApiServer, user_agent: &str, path: &str) -> Option<Answer> {
    let mut conn = TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    conn.set_read_timeout(Some(PATIENCE)).expect("read timeout");
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\
         User-Agent: {user_agent}\r\nConnection: close\r\n\r\n",
        server.token()
    )
    .expect("send");
    read_answer(BufReader::new(conn))
}

/// The answer on `reader`; None if the connection closed before a status line.
fn read_answer(mut reader: BufReader<TcpStream>) -> Option<Answer> {
    let mut status_line = String::new();
    if reader.read_line(&mut status_line).unwrap_or(0) == 0 {
        return None;
    }
    let code: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header");
        if line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(": ") {
            headers.push((k.to_string(), v.to_string()));
        }
    }
    let mut text = String::new();
    reader.read_to_string(&mut text).expect("body");
    Some(Answer {
        code,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
    })
}

/// One raw JSON request with a bearer token; returns the status code and the JSON body.
pub fn raw(
    server: &ApiServer,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let answer = request_as(server, token, method, path, "application/json", body);
    (answer.code, answer.body)
}

/// Starts a watch; returns the stream, to read event lines from.
pub fn watch(server: &ApiServer, path_and_query: &str) -> BufReader<TcpStream> {
    let mut conn = TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    conn.set_read_timeout(Some(PATIENCE)).expect("read timeout");
    write!(
        conn,
        "GET {path_and_query} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\r\n",
        server.token()
    )
    .expect("send");
    BufReader::new(conn)
}

/// The next watch event (skipping the HTTP head and the chunk framing).
pub fn next_event(stream: &mut BufReader<TcpStream>) -> Value {
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).expect("a watch event");
        if line.starts_with('{') {
            return serde_json::from_str(&line).expect("JSON");
        }
    }
}

/// The type and object name of a watch event.
pub fn summary(event: &Value) -> (String, String) {
    (
        event["type"].as_str().unwrap_or("").to_string(),
        event["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}

/// Waits until `check` holds, polling; panics with `what` after [`PATIENCE`].
pub fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The names of a list's items.
pub fn item_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}
