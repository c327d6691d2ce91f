//! HTTP/1.1 on the wire: reading requests (`Content-Length` and chunked bodies), writing
//! JSON answers and chunked watch streams, query strings and media types.

use std::collections::HashMap;
use std::io::{self, BufRead, Read, Write};
use std::time::SystemTime;

use serde_json::Value;

use crate::clock::http_date;

/// Largest request body accepted (the real server's limit is 3 MiB).
const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

pub(crate) struct HttpRequest {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: String,
    headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// The Common Name of the connection's verified client certificate (HTTPS only).
    pub(crate) client_cn: Option<String>,
}

/// The value of the first header called `name` (case-insensitive) in `(name, value)` pairs.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

impl HttpRequest {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    pub(crate) fn keep_alive(&self) -> bool {
        !self
            .header("connection")
            .is_some_and(|value| value.eq_ignore_ascii_case("close"))
    }
}

fn read_line(reader: &mut impl BufRead) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let n = reader.take(64 * 1024).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "line too long or truncated",
        ));
    }
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    String::from_utf8(line)
        .map(Some)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "non-UTF-8 header line"))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

pub(crate) fn read_request(reader: &mut impl BufRead) -> io::Result<Option<HttpRequest>> {
    let line = loop {
        match read_line(reader)? {
            None => return Ok(None),
            // Tolerate stray CRLFs between requests (RFC 9112 section 2.2).
            Some(line) if line.is_empty() => continue,
            Some(line) => break line,
        }
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid("bad request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(invalid("unsupported HTTP version"));
    }
    let mut headers = Vec::new();
    loop {
        let line = read_line(reader)?.ok_or_else(|| invalid("headers truncated"))?;
        if line.is_empty() {
            break;
        }
        let (key, value) = line.split_once(':').ok_or_else(|| invalid("bad header"))?;
        headers.push((key.trim().to_string(), value.trim().to_string()));
    }
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_string(), query.to_string()),
        None => (target.to_string(), String::new()),
    };
    let mut request = HttpRequest {
        method: method.to_string(),
        path: percent_decode(&path, false),
        query,
        headers,
        body: Vec::new(),
        client_cn: None,
    };
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            let size_line = read_line(reader)?.ok_or_else(|| invalid("chunk truncated"))?;
            let size_text = size_line.split(';').next().unwrap_or("").trim();
            let size =
                usize::from_str_radix(size_text, 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailers, then the empty line.
                while !read_line(reader)?.unwrap_or_default().is_empty() {}
                break;
            }
            if request.body.len() + size > MAX_BODY_BYTES {
                return Err(invalid("body too large"));
            }
            let mut chunk = vec![0; size];
            reader.read_exact(&mut chunk)?;
            request.body.extend_from_slice(&chunk);
            read_line(reader)?;
        }
    } else if let Some(length) = request.header("content-length") {
        let length: usize = length.parse().map_err(|_| invalid("bad Content-Length"))?;
        if length > MAX_BODY_BYTES {
            return Err(invalid("body too large"));
        }
        request.body = vec![0; length];
        reader.read_exact(&mut request.body)?;
    }
    Ok(Some(request))
}

pub(crate) fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        410 => "Gone",
        413 => "Request Entity Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}

pub(crate) fn write_head(
    writer: &mut impl Write,
    code: u16,
    headers: &[(String, String)],
    framing: &str,
    keep_alive: bool,
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {code} {}\r\n", reason_phrase(code));
    head.push_str("Content-Type: application/json\r\n");
    head.push_str("Cache-Control: no-cache, private\r\n");
    head.push_str(&format!("Date: {}\r\n", http_date(SystemTime::now())));
    for (key, value) in headers {
        head.push_str(&format!("{key}: {value}\r\n"));
    }
    head.push_str(framing);
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    writer.write_all(head.as_bytes())
}

pub(crate) fn write_json(
    writer: &mut impl Write,
    code: u16,
    headers: &[(String, String)],
    body: &Value,
    keep_alive: bool,
) -> io::Result<()> {
    let mut bytes = body.to_string().into_bytes();
    bytes.push(b'\n');
    let framing = format!("Content-Length: {}\r\n", bytes.len());
    write_head(writer, code, headers, &framing, keep_alive)?;
    writer.write_all(&bytes)?;
    writer.flush()
}

/// Writes one watch event as its own chunk.
pub(crate) fn write_chunk(writer: &mut impl Write, event: &Value) -> io::Result<()> {
    let mut line = event.to_string();
    line.push('\n');
    write!(writer, "{:x}\r\n{line}\r\n", line.len())?;
    writer.flush()
}

pub(crate) fn finish_chunks(writer: &mut impl Write) -> io::Result<()> {
    writer.write_all(b"0\r\n\r\n")?;
    writer.flush()
}

fn percent_decode(text: &str, plus_is_space: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => (percent_decode(key, true), percent_decode(value, true)),
            None => (percent_decode(pair, true), String::new()),
        })
        .collect()
}

pub(crate) fn media_type(content_type: Option<&str>) -> String {
    content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}
