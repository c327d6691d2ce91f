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
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length").then_some(value)
        })
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
        add_sample(&mut samples, line, series, value);
    }
    Exposition {
        text: text.to_string(),
        samples,
    }
}

/// Adds the sample `series value` of `line`, once.
fn add_sample(samples: &mut BTreeMap<String, f64>, line: &str, series: &str, value: &str) {
    let v: f64 = value
        .parse()
        .unwrap_or_else(|_| panic!("bad value in {line:?}"));
    assert!(
        samples.insert(series.to_string(), v).is_none(),
        "{series} twice"
    );
}

/// `GET /metrics`, checked for status and content type, parsed.
pub fn scrape(addr: SocketAddr) -> std::io::Result<Exposition> {
    let (code, head, body) = request(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n",
    )?;
    assert_eq!(code, 200, "{head}\n{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "wrong content type: {head}"
    );
    Ok(parse(&body))
}

/// Parses the OpenMetrics text format (what `prometheus-client` writes) strictly: a
/// `# EOF` last line, every sample after its family's TYPE and named as that type allows
/// (`_total` for a counter; `_bucket`, `_sum`, `_count` for a histogram; `_created` for
/// either; `_info` for an info metric).
pub fn parse_openmetrics(text: &str) -> Exposition {
    let body = text
        .strip_suffix("# EOF\n")
        .unwrap_or_else(|| panic!("no `# EOF` last line in\n{text}"));
    let mut typed: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line with a kind");
            assert!(
                [
                    "counter",
                    "gauge",
                    "histogram",
                    "info",
                    "stateset",
                    "unknown"
                ]
                .contains(&kind),
                "unknown type {kind}"
            );
            assert!(
                typed.insert(name.to_string(), kind.to_string()).is_none(),
                "{name} typed twice"
            );
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
            continue;
        }
        assert!(
            !line.is_empty() && !line.starts_with('#'),
            "unexpected line {line:?}"
        );
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample {line:?}"));
        let name = series.split('{').next().unwrap_or_default();
        let family = typed
            .iter()
            .find(|(family, kind)| {
                let suffixes: &[&str] = match kind.as_str() {
                    "counter" => &["_total", "_created"],
                    "histogram" => &["_bucket", "_sum", "_count", "_created"],
                    "info" => &["_info"],
                    _ => &[""],
                };
                suffixes
                    .iter()
                    .any(|s| name.strip_suffix(s) == Some(family.as_str()))
            })
            .map(|(f, _)| f.clone());
        assert!(
            family.is_some(),
            "sample {name} of no family typed before it"
        );
        add_sample(&mut samples, line, series, value);
    }
    Exposition {
        text: text.to_string(),
        samples,
    }
}

/// `GET /metrics` in the OpenMetrics format (asked for as Prometheus asks), checked for
/// status and content type, parsed.
pub fn scrape_openmetrics(addr: SocketAddr) -> std::io::Result<Exposition> {
    let (code, head, body) = request(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAccept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n\r\n",
    )?;
    assert_eq!(code, 200, "{head}\n{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "wrong content type: {head}"
    );
    Ok(parse_openmetrics(&body))
}
