//! The checks Go's `net/url.Parse` makes on a URL (for the tracing
//! endpoint): control characters, the scheme, userinfo, host and port, and
//! percent escapes. Bracketed hosts must be IPv6 literals (stricter than Go,
//! which any real endpoint meets).

use std::net::Ipv6Addr;

/// The lower-cased scheme of `url` ("" when it has none), or why Go's
/// `url.Parse` refuses it.
pub(super) fn parse_scheme(url: &str) -> Result<String, String> {
    if url.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("invalid control character in URL".to_owned());
    }
    let (url, fragment) = url.split_once('#').unwrap_or((url, ""));
    check_escapes(fragment, false)?;
    let (scheme, rest) = split_scheme(url)?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = rest.split_once('?').map_or(rest, |(before, _)| before);
    if !rest.starts_with('/') {
        if !scheme.is_empty() {
            // An opaque URL ("scheme:opaque"): nothing more is parsed.
            return Ok(scheme);
        }
        if rest.split('/').next().unwrap_or("").contains(':') {
            return Err("first path segment in URL cannot contain colon".to_owned());
        }
    }
    let mut path = rest;
    if (!scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let after = &rest[2..];
        let (authority, tail) = after.split_at(after.find('/').unwrap_or(after.len()));
        check_authority(authority)?;
        path = tail;
    }
    check_escapes(path, false)?;
    Ok(scheme)
}

/// Go's `getScheme`: letters, then letters, digits, `+`, `-` or `.`, then
/// `:`; anything else means no scheme.
fn split_scheme(url: &str) -> Result<(&str, &str), String> {
    for (i, c) in url.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".to_owned()),
            b':' => return Ok((&url[..i], &url[i + 1..])),
            _ => return Ok(("", url)),
        }
    }
    Ok(("", url))
}

fn check_authority(authority: &str) -> Result<(), String> {
    let host = match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&b);
            if !userinfo.bytes().all(allowed) {
                return Err("invalid userinfo".to_owned());
            }
            check_escapes(userinfo, false)?;
            &authority[at + 1..]
        }
        None => authority,
    };
    if let Some(bracketed) = host.strip_prefix('[') {
        let close = bracketed
            .rfind(']')
            .ok_or_else(|| "missing ']' in host".to_owned())?;
        check_port(&bracketed[close + 1..])?;
        let literal = &bracketed[..close];
        let (address, zone) = match literal.find("%25") {
            Some(z) => (&literal[..z], &literal[z + 3..]),
            None => (literal, ""),
        };
        if address.parse::<Ipv6Addr>().is_err() {
            return Err(format!("{address:?} in brackets is not an IPv6 address"));
        }
        return check_escapes(zone, false);
    }
    if let Some(colon) = host.rfind(':') {
        check_port(&host[colon..])?;
    }
    check_escapes(host, true)
}

fn check_port(colon_port: &str) -> Result<(), String> {
    let valid = colon_port.is_empty()
        || colon_port
            .strip_prefix(':')
            .is_some_and(|port| port.bytes().all(|b| b.is_ascii_digit()));
    if valid {
        Ok(())
    } else {
        Err(format!("invalid port {colon_port:?} after host"))
    }
}

/// Percent escapes must be `%` and two hex digits; in a host name an escape
/// must be of a non-ASCII byte (or `%25`) and only the characters URL hosts
/// allow may appear.
fn check_escapes(text: &str, host: bool) -> Result<(), String> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'%' {
            let escape = text.get(i..i + 3).unwrap_or(&text[i..]);
            let hex = escape.len() == 3 && escape.bytes().skip(1).all(|b| b.is_ascii_hexdigit());
            if !hex {
                return Err(format!("invalid URL escape {escape:?}"));
            }
            let ascii = matches!(bytes[i + 1], b'0'..=b'7');
            if host && ascii && escape != "%25" {
                return Err(format!("invalid URL escape {escape:?} in host"));
            }
            i += 3;
            continue;
        }
        if host && c < 0x80 && !host_allows(c) {
            return Err(format!(
                "invalid character {:?} in host name",
                char::from(c)
            ));
        }
        i += 1;
    }
    Ok(())
}

fn host_allows(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"".contains(&c)
}
