//! Text that goes where space is bounded: a condition, an annotation, an Event, a record
//! on disk. Every cut is on a character boundary.

/// The longest prefix of `text` of at most `max` bytes.
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

    proptest::proptest! {
        #[test]
        fn prefix_is_a_bounded_prefix(s in ".{0,40}", max in 0usize..60) {
            let p = prefix(&s, max);
            proptest::prop_assert!(p.len() <= max);
            proptest::prop_assert!(s.starts_with(p));
            proptest::prop_assert!(p.len() + 3 >= max.min(s.len()));
        }
    }
}
