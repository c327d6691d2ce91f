//! `preloadedImagesVerificationAllowlist`: refused whatever the
//! KubeletEnsureSecretPulledImages gate is (off: it must not be set; on: it
//! needs the `NeverVerifyAllowlistedImages` policy and valid patterns), so
//! these checks do not wait for the gate model. A pattern is a full image
//! name without tag or digest (`registry.example/team/app`), or a prefix of
//! whole path segments ending in `/*` (`registry.example/team/*`), as the
//! image pull manager's `getAllowlistImagePattern` reads it.

use super::super::fields::Views;
use super::Checker;

const FIELD: &str = "preloadedImagesVerificationAllowlist";
const POLICY_FIELD: &str = "imagePullCredentialsVerificationPolicy";
const ALLOWLIST_POLICY: &str = "NeverVerifyAllowlistedImages";
/// `NameTotalLengthMax` of the distribution reference grammar.
const NAME_MAX: usize = 255;
const DOCKER_HUB: &str = "docker.io";

pub(super) fn validate_image_allowlist(views: &Views, c: &mut Checker) {
    let patterns = views.list(FIELD);
    if patterns.is_empty() {
        return;
    }
    let policy = views.string(POLICY_FIELD).unwrap_or("");
    if policy != ALLOWLIST_POLICY {
        c.push(
            FIELD,
            format_args!(
                "can only be set when {POLICY_FIELD} is {ALLOWLIST_POLICY:?} (it is {policy:?})"
            ),
        );
        return;
    }
    for (index, pattern) in patterns.iter().enumerate() {
        if let Err(why) = check_pattern(pattern) {
            c.push(
                &format!("{FIELD}[{index}]"),
                format_args!("({pattern:?}) is not an image pattern: {why}"),
            );
        }
    }
}

fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern != pattern.trim() {
        return Err("leading or trailing spaces are not allowed".to_owned());
    }
    let (name, wildcard) = match pattern.strip_suffix('*') {
        Some(prefix) if prefix.ends_with('/') => (prefix, true),
        _ => (pattern, false),
    };
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    if name.contains('*') {
        return Err("the only wildcard allowed is a trailing \"/*\"".to_owned());
    }
    if wildcard {
        if name.len() == 1 {
            return Err("at least the registry host name is required before \"/*\"".to_owned());
        }
        return Ok(());
    }
    check_full_name(name)
}

/// The pattern must be its own normalized name: an explicit registry (a
/// host with a dot or port, `localhost`, or upper-case letters), then
/// lower-case path components, no tag, no digest.
fn check_full_name(name: &str) -> Result<(), String> {
    if name.len() > NAME_MAX {
        return Err(format!("an image name has at most {NAME_MAX} characters"));
    }
    if name.contains(['@']) || tag_separator(name) {
        return Err("neither a tag nor a digest is accepted".to_owned());
    }
    let (domain, path) = name.split_once('/').ok_or_else(|| {
        "the registry host name is missing (write e.g. \"docker.io/library/nginx\")".to_owned()
    })?;
    let explicit = domain.contains(['.', ':'])
        || domain == "localhost"
        || domain.to_ascii_lowercase() != domain;
    if !explicit {
        return Err(format!(
            "{domain:?} is not a registry host name (write the full name, e.g. \"docker.io/{name}\")"
        ));
    }
    if domain == "index.docker.io" || (domain == DOCKER_HUB && !path.contains('/')) {
        return Err(format!(
            "write Docker Hub names in full, e.g. \"docker.io/library/{}\"",
            path.rsplit('/').next().unwrap_or(path)
        ));
    }
    if !is_domain_and_port(domain) {
        return Err(format!("{domain:?} is not a valid registry host[:port]"));
    }
    if !path.split('/').all(is_path_component) {
        return Err(format!(
            "{path:?} is not a valid repository path (lower-case letters, digits and \
             '.', '_', '__' or '-' between them)"
        ));
    }
    Ok(())
}

/// Whether the last path segment has a `:tag`.
fn tag_separator(name: &str) -> bool {
    let last = name.rsplit('/').next().unwrap_or(name);
    name.contains('/') && last.contains(':')
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`.
fn is_path_component(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !bytes.first().is_some_and(|b| alnum(*b)) || !bytes.last().is_some_and(|b| alnum(*b)) {
        return false;
    }
    let mut separator = String::new();
    for &b in bytes {
        if alnum(b) {
            let ok = separator.is_empty()
                || matches!(separator.as_str(), "." | "_" | "__")
                || separator.bytes().all(|s| s == b'-');
            if !ok {
                return false;
            }
            separator.clear();
        } else if matches!(b, b'.' | b'_' | b'-') {
            separator.push(char::from(b));
        } else {
            return false;
        }
    }
    true
}

/// A registry: a DNS-like name (components of letters, digits and inner
/// `-`, joined by `.`) or a bracketed IPv6 address, then an optional port.
fn is_domain_and_port(domain: &str) -> bool {
    let (host, port) = if let Some(rest) = domain.strip_prefix('[') {
        match rest.split_once(']') {
            Some((address, port)) => {
                let ok = !address.is_empty()
                    && address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':');
                if !ok {
                    return false;
                }
                ("", port)
            }
            None => return false,
        }
    } else {
        match domain.find(':') {
            Some(i) => (&domain[..i], &domain[i..]),
            None => (domain, ""),
        }
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let component = |part: &str| {
        let bytes = part.as_bytes();
        bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
    };
    let host_ok = domain.starts_with('[') || host.split('.').all(component);
    port_ok && host_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        for good in [
            "docker.io/library/nginx",
            "registry.k8s.io/pause",
            "registry.example:5000/team/app",
            "localhost/app",
            "registry.example/*",
            "registry.example/team/*",
            "[::1]:5000/app",
            "quay.io/a__b/c-d.e",
        ] {
            assert_eq!(check_pattern(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            " registry.example/app",
            "registry.example/app ",
            "nginx",
            "library/nginx",
            "docker.io/nginx",
            "index.docker.io/library/nginx",
            "registry.example/app:1.0",
            "registry.example/app@sha256:abc",
            "registry.example/App",
            "registry.example/",
            "registry.example/a*",
            "registry.example/*/x",
            "/*",
            "*",
            "registry.example/a--b_-c",
            "-bad.example/app",
        ] {
            assert!(check_pattern(bad).is_err(), "{bad:?}");
        }
    }
}
