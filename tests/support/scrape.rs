//! A strict little Prometheus scraper for the `--metrics-address` tests: plain HTTP/1.1 over
//! std's TcpStream, and a parser that rejects what Prometheus' text parser rejects (samples
//! without a TYPE, families declared twice, malformed lines).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// A loopback address that was free a moment ago.
pub fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr")
}

/// One HTTP exchange: (status code, raw headers, body).
pub fn request(addr: SocketAddr, raw: &str) -> std::io::Result<(u16, String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(raw.as_bytes())?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let (head, body) = buf
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {buf:?}"));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head:?}"));
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Content-Length in {head:?}"));
    if !raw.starts_with("HEAD ") {
        assert_eq!(len, body.len(), "Content-Length disagrees with the body");
    }
    Ok((code, head.to_string(), body.to_string()))
}

/// Parsed samples: series (name plus label set as printed) -> value.
#[derive(Debug)]
pub struct Exposition {
    pub text: String,
    pub samples: BTreeMap<String, f64>,
}

impl Exposition {
    pub fn get(&self, series: &str) -> Option<f64> {
        self.samples.get(series).copied()
    }

    /// The value of `series`, panicking with the whole exposition if it is missing.
    pub fn value(&self, series: &str) -> f64 {
        self.get(series)
            .unwrap_or_else(|| panic!("no sample {series} in\n{}", self.text))
    }

    /// Samples of metric `name` (any labels).
    pub fn series_of(&self, name: &str) -> Vec<(&str, f64)> {
        self.samples
            .iter()
            .filter(|(k, _)| k.as_str() == name || k.starts_with(&format!("{name}{{")))
            .map(|(k, v)| (k.as_str(), *v))
            .collect()
    }
}

/// Parses the text format strictly.
pub fn parse(text: &str) -> Exposition {
    let mut typed = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line with a kind");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "unknown type {kind}"
            );
            assert!(
                typed.insert(name.to_string(), kind.to_string()).is_none(),
                "{name} typed twice"
            );
            continue;
        }
        if line.starts_with("# HELP ") || line.is_empty() {
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment {line:?}");
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample {line:?}"));
        let name = series.split('{').next().unwrap_or_default();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name {name:?}"
        );
        assert!(typed.contains_key(name), "sample {name} before its TYPE");
        if typed[name] == "counter" {
            assert!(name.ends_with("_total"), "counter {name} without _total");
        }
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        assert!(
            samples.insert(series.to_string(), v).is_none(),
            "{series} twice"
        );
    }
    Exposition {
        text: text.to_string(),
        samples,
    }
}

/// `GET /metrics`, checked for status and content type, parsed.
pub fn scrape(addr: SocketAddr) -> std::io::Result<Exposition> {
    let (code, head, body) = request(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n",
    )?;
    assert_eq!(code, 200, "{head}\n{body}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "wrong content type: {head}"
    );
    Ok(parse(&body))
}
