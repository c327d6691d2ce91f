//! The metric names a PromQL expression reads, found by a small tokenizer (no parser):
//! strings, label matchers and ranges are cut out, then every identifier is a metric name
//! unless it is a function or aggregation (followed by `(`), a keyword, a label list
//! (`by (...)`, `on (...)`, ...) or a number. Enough for the rules and the dashboard of
//! `manifests/optional/monitoring`, and checked on the tricky cases below.

use std::collections::BTreeSet;

/// Words of PromQL that are not metric names when they stand alone: operators, modifiers,
/// and the aggregations (`sum by (l) (...)` puts a word between the name and its `(`);
/// with [`LABEL_LISTS`].
const KEYWORDS: &str = "and or unless offset bool inf nan atan2 sum min max avg group stddev \
    stdvar count count_values bottomk topk quantile limitk limit_ratio";
/// Keywords followed by a parenthesized list of label names (the list is no metric name).
const LABEL_LISTS: &str = "by without on ignoring group_left group_right";

fn is_one_of(word: &str, list: &str) -> bool {
    list.split_whitespace()
        .any(|k| k.eq_ignore_ascii_case(word))
}

/// `expr` without its string literals, label matchers (`{...}`) and ranges (`[...]`).
fn strip(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut chars = expr.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                let mut escaped = false;
                for d in chars.by_ref() {
                    if d == c && !escaped {
                        break;
                    }
                    escaped = d == '\\' && !escaped && c != '`';
                }
                out.push(' ');
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                // Matchers hold only strings, names and operators: skip to the close,
                // strings included (a `}` inside a value is in quotes).
                let mut quote = None;
                for d in chars.by_ref() {
                    match (quote, d) {
                        (None, '"' | '\'' | '`') => quote = Some(d),
                        (Some(q), _) if d == q => quote = None,
                        (None, _) if d == close => break,
                        _ => {}
                    }
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

fn is_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_part(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric names `expr` reads.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let text = strip(expr);
    let chars: Vec<char> = text.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let next_non_space = |from: usize| chars[from..].iter().position(|c| !c.is_whitespace());
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() || c == '$' || c == '.' {
            // A number (1e3, 0x1f, 2.5) or a dashboard variable: not a name.
            i += 1;
            while i < chars.len() && (is_part(chars[i]) || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if !is_start(c) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_part(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let after = next_non_space(i).map(|n| i + n);
        let followed_by_paren = after.is_some_and(|a| chars[a] == '(');
        let label_list = is_one_of(&word, LABEL_LISTS);
        if label_list && followed_by_paren {
            // Skip the label list to its `)`.
            let mut j = after.unwrap_or(i);
            while j < chars.len() && chars[j] != ')' {
                j += 1;
            }
            i = j;
            continue;
        }
        if followed_by_paren || label_list || is_one_of(&word, KEYWORDS) {
            continue;
        }
        names.insert(word);
    }
    names
}

/// What a scrape's `# TYPE` lines say is exported: each family's name, and the sample
/// names of histograms and summaries (`_bucket`, `_sum`, `_count`).
pub fn exported_names(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        let mut words = line.split_whitespace();
        if (words.next(), words.next()) != (Some("#"), Some("TYPE")) {
            continue;
        }
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        names.insert(name.to_string());
        let suffixes: &[&str] = match kind {
            "histogram" => &["_bucket", "_sum", "_count"],
            "summary" => &["_sum", "_count"],
            _ => &[],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    names
}

#[test]
fn the_tokenizer_finds_metric_names_only() {
    let names = |e: &str| metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"count by (node, phase) (max without (instance) (a_b{phase!="x}y", job=~'k.*'}) == 1)
               or on (job) group_left (node) rate(c_total[5m] offset 1h) > bool 1e3
               unless histogram_quantile(0.99, sum by (le) (rate(d_bucket[$__rate_interval])))
               and vector(0) + time() - e:recorded"#
        ),
        ["a_b", "c_total", "d_bucket", "e:recorded"]
    );
    assert_eq!(names("up == 0"), ["up"]);
    assert_eq!(names(r#"absent(up{job="kubelet-pivot"})"#), ["up"]);
}

#[test]
fn histogram_suffixes_come_from_the_type() {
    let text = "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\n# TYPE g gauge\ng 1\n";
    let names: Vec<String> = exported_names(text).into_iter().collect();
    assert_eq!(names, ["g", "h", "h_bucket", "h_count", "h_sum"]);
}
