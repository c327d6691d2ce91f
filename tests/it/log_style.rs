//! Issue 34 item 5, checked on the source (as tests/it/architecture.rs checks the layers):
//! no log line formats a value with Rust's Debug. In every `trace!` .. `error!` of the
//! product's code (tests left out), a field takes no `?` sigil (`timeout = ?t`, `?hint`)
//! and the message no `{:?}` / `{x:?}`: a field is Display (`%x`) or a plain number,
//! boolean or string, an absent value is left out (`x = opt.map(display)`, `opt.as_deref()`:
//! tracing records a `None` as nothing), a duration prints as the flags take it
//! (`humantime::format_duration`). tests/it/debug_free_logs.rs checks what the processes
//! really print.
//!
//! Error messages (`#[error(...)]`, `format!`) may still quote a string with `{name:?}`
//! (an escaped, quoted name): the source cannot tell a string from an Option there, so the
//! log and message tests (debug_free_logs, error_texts) are what hold them.

use std::fs;
use std::path::{Path, PathBuf};

use crate::architecture::{root, without_tests, SOURCE_ROOTS};

/// The tracing macros whose arguments are checked.
const MACROS: &[&str] = &["trace!", "debug!", "info!", "warn!", "error!"];

/// A macro call's arguments, split into the code (strings, chars and comments blanked)
/// and the string literals' contents.
struct Call {
    line: usize,
    code: String,
    strings: Vec<String>,
}

/// The argument list starting after `(` at `start` (byte offset), up to its `)`.
fn call_at(text: &str, start: usize, line: usize) -> Call {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (1usize, start);
    let mut code = String::new();
    let mut strings = Vec::new();
    while i < bytes.len() && depth > 0 {
        let c = bytes[i];
        if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'"' {
            let mut s = String::new();
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                if bytes[i] == b'\\' {
                    s.push(bytes[i] as char);
                    i += 1;
                }
                s.push(bytes[i] as char);
                i += 1;
            }
            strings.push(s);
            code.push_str("\"\"");
            i += 1;
            continue;
        }
        // A char literal ('a', '\n', '(' ); a lifetime has no closing quote.
        if c == b'\'' {
            let len = if bytes.get(i + 1) == Some(&b'\\') {
                4
            } else {
                3
            };
            if bytes.get(i + len - 1) == Some(&b'\'') {
                code.push_str("' '");
                i += len;
                continue;
            }
        }
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            _ => {}
        }
        if depth > 0 {
            code.push(c as char);
        }
        i += 1;
    }
    Call {
        line,
        code,
        strings,
    }
}

/// Every tracing macro call in `text` (the code before its tests).
fn calls(text: &str) -> Vec<Call> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices('!') {
        let before = &text[..at + 1];
        let Some(mac) = MACROS.iter().find(|m| before.ends_with(*m)) else {
            continue;
        };
        let name_start = at + 1 - mac.len();
        let prev = text[..name_start].chars().next_back();
        if prev.is_some_and(|p| p.is_alphanumeric() || p == '_') {
            continue;
        }
        let rest = &text[at + 1..];
        let Some(open) = rest.find(|c: char| !c.is_whitespace()) else {
            continue;
        };
        if !rest[open..].starts_with('(') {
            continue;
        }
        let line = text[..at].matches('\n').count() + 1;
        out.push(call_at(text, at + 1 + open + 1, line));
    }
    out
}

/// What in `call` formats with Debug.
fn debug_uses(call: &Call) -> Vec<String> {
    let mut found = Vec::new();
    let code = call.code.as_bytes();
    for (i, &c) in code.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| code[p]);
        let next = code.get(i + 1).copied();
        let sigil = c == b'?'
            && prev.is_none_or(|p| matches!(p, b' ' | b'\n' | b'\t' | b',' | b'=' | b'('))
            && next.is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, b'_' | b'&' | b'*'));
        if sigil {
            let end = code[i..]
                .iter()
                .position(|b| matches!(b, b',' | b')'))
                .map_or(code.len(), |e| i + e);
            found.push(String::from_utf8_lossy(&code[i..end]).into_owned());
        }
    }
    for s in &call.strings {
        let mut rest = s.as_str();
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            if let Some(escaped) = after.strip_prefix('{') {
                rest = escaped;
                continue;
            }
            let Some(close) = after.find('}') else { break };
            let spec = &after[..close];
            if spec.ends_with(":?") || spec.ends_with(":#?") {
                found.push(format!("{{{spec}}}"));
            }
            rest = &after[close + 1..];
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().and_then(|e| e.to_str()) == Some("rs")
            && path.file_name().and_then(|n| n.to_str()) != Some("tests.rs")
        {
            out.push(path);
        }
    }
}

#[test]
fn no_log_line_formats_with_debug() {
    let mut found = Vec::new();
    let mut checked = 0;
    for src in SOURCE_ROOTS {
        let mut files = Vec::new();
        rust_files(&root().join(src), &mut files);
        for path in files {
            let text = without_tests(&fs::read_to_string(&path).expect("read a source file"));
            for call in calls(&text) {
                checked += 1;
                for what in debug_uses(&call) {
                    let rel = path.strip_prefix(root()).unwrap_or(&path);
                    found.push(format!("{}:{}: {what}", rel.display(), call.line));
                }
            }
        }
    }
    assert!(
        checked > 200,
        "only {checked} log calls found: is the scan broken?"
    );
    assert!(
        found.is_empty(),
        "log lines formatting with Debug (use %x, a number or &str, leave an absent value \
         out, humantime::format_duration for a duration):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_planted_debug_uses() {
    let text = r#"
        fn f() {
            info!(timeout = ?t, %ok, n, "waited {t:?} for {}", x);
            tracing::debug!(?hint, "hint (a question?)");
            warn!("fine: {name} {{literal:?}} {0}", 'x');
            error!(err = %kp_runtime::api_error::shown(&e), "it failed: {:#?}", y);
            my_info!(?not_a_log);
        }
    "#;
    let found: Vec<Vec<String>> = calls(text).iter().map(debug_uses).collect();
    assert_eq!(
        found,
        vec![
            vec!["?t".to_string(), "{t:?}".to_string()],
            vec!["?hint".to_string()],
            vec![],
            vec!["{:#?}".to_string()],
        ]
    );
}
