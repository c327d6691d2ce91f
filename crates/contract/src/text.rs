//! Text that goes where space is bounded: a condition, an annotation, an Event, a record
//! on disk. Every cut is on a character boundary.

use std::borrow::Cow;

/// The longest prefix of `text` of at most `max` bytes.
/// `1 node`, `3 nodes`: a count and its noun, plural unless one (`noun` takes an `s`).
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

pub fn prefix(text: &str, max: usize) -> &str {
    let mut cut = text.len().min(max);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// `text` cut to at most `max` bytes, ending in `marker` when it was longer (the marker
/// comes on top of the `max` bytes).
pub fn cut_with(text: &str, max: usize, marker: &str) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    format!("{}{marker}", prefix(text, max))
}

/// `text` with control and other non-printing characters escaped as Rust does (`\n`,
/// `\u{1b}`, `\u{202e}`) and everything else kept: for a message kubelet-pivot composed itself
/// (its quotes are its own, so quotes and backslashes stay) that may carry pieces of input,
/// such as a field name the validator quotes. A raw input value is quoted with
/// `node_config::excerpt` instead.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if needs_escape(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether `c` does not print as itself (a control, format or combining character).
fn needs_escape(c: char) -> bool {
    !matches!(c, '"' | '\'' | '\\') && c.escape_debug().next() == Some('\\')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_never_splits_a_character() {
        assert_eq!(prefix("héllo", 2), "h");
        assert_eq!(prefix("héllo", 3), "hé");
        assert_eq!(prefix("abc", 10), "abc");
        assert_eq!(prefix("", 0), "");
        assert_eq!(prefix("€", 2), "");
    }

    #[test]
    fn cut_with_marks_only_what_was_cut() {
        assert_eq!(cut_with("abc", 3, "…"), "abc");
        assert_eq!(cut_with("abcd", 3, "…"), "abc…");
        assert_eq!(cut_with("aé", 2, "!"), "a!");
    }

    #[test]
    fn printable_escapes_only_what_does_not_print() {
        assert_eq!(
            printable("unknown field \"maxPodz\""),
            "unknown field \"maxPodz\""
        );
        assert!(matches!(printable("plain é"), Cow::Borrowed(_)));
        assert_eq!(printable("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
        assert_eq!(printable("x\u{202e}y\u{0}"), "x\\u{202e}y\\0");
        assert_eq!(printable("back\\slash 'q'"), "back\\slash 'q'");
    }

    proptest::proptest! {
        #[test]
        fn printable_leaves_no_control_character(s in "\\PC{0,20}[\\x00-\\x1f\\u{7f}-\\u{9f}]{0,5}") {
            let p = printable(&s);
            proptest::prop_assert!(!p.chars().any(char::is_control));
            proptest::prop_assert_eq!(printable(&p), p.clone());
        }

        #[test]
        fn prefix_is_a_bounded_prefix(s in ".{0,40}", max in 0usize..60) {
            let p = prefix(&s, max);
            proptest::prop_assert!(p.len() <= max);
            proptest::prop_assert!(s.starts_with(p));
            proptest::prop_assert!(p.len() + 3 >= max.min(s.len()));
        }
    }

    #[test]
    fn a_count_of_one_is_singular() {
        assert_eq!(count(1, "node"), "1 node");
        assert_eq!(count(0, "node"), "0 nodes");
        assert_eq!(count(3, "node"), "3 nodes");
    }
}
