//! A cheap byte pre-scan that refuses deeply nested documents before a
//! parser sees them.
//!
//! Why: the YAML scanner (libyaml, through serde_yaml_ng) spends time
//! quadratic in the flow nesting depth: 100,000 levels of `[` took 18.6 s,
//! and [`MAX_CONFIG_BYTES`](super::MAX_CONFIG_BYTES) allows about a million.
//! A KubeletConfiguration needs at most five levels (for example
//! `logging.options.json.infoBufferSize` inside the top-level mapping, or
//! `reservedMemory[].limits.memory`), so [`MAX_NESTING_DEPTH`] = 32 leaves
//! six times that as headroom while keeping the scanner's work trivial.
//!
//! The scan computes an upper bound of the nesting depth at every byte and
//! refuses the document as soon as the bound exceeds the limit. It must
//! never under-count: every nesting the parser would build is counted, and
//! where the scan cannot tell what the parser would do (is this `"` the start
//! of a quoted scalar or part of a plain one? is this line still inside a
//! block scalar?) it follows every possibility at once (a small
//! nondeterministic automaton over lexical states) and counts the worst:
//!
//! - a flow opener (`[`, `{`) counts when *any* possible state treats it as
//!   one; a closer (`]`, `}`) uncounts only when *every* possible state is
//!   outside quotes, comments and block scalars;
//! - block nesting is bounded by the distinct indentation columns of the
//!   enclosing lines (libyaml's indent stack is strictly increasing; a block
//!   sequence written at its parent key's column counts as a second level at
//!   that column). A less indented line closes deeper columns only when
//!   every possible state is plain YAML and no flow collection may be open.
//!
//! Anything after a point where libyaml itself stops with an error is never
//! scanned by it, so the automaton may be wrong there. Over-counting absurd
//! input (for example hundreds of unbalanced `[` inside block scalars) is
//! accepted; realistic configs stay far below the limit.
//!
//! JSON documents (first non-whitespace byte `{`, read by serde_json) have
//! no such ambiguity: strings and escapes are tracked exactly.

mod lexical;
mod yaml;

use super::error::Format;
use yaml::YamlScan;

/// Deepest nesting accepted (mappings and sequences, block or flow; the
/// top-level mapping is level 1).
pub const MAX_NESTING_DEPTH: usize = 32;

/// Where a document first nests deeper than [`MAX_NESTING_DEPTH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TooDeep {
    /// One-based line.
    pub line: usize,
    /// One-based column, in bytes.
    pub column: usize,
}

/// Refuses a document whose nesting may exceed [`MAX_NESTING_DEPTH`].
/// Runs in time linear in the size of the document.
pub(super) fn check_nesting(bytes: &[u8], format: Format) -> Result<(), TooDeep> {
    match format {
        Format::Json => check_json(bytes),
        Format::Yaml => YamlScan::new(bytes).run(),
    }
}

/// One-based line and column of a byte offset.
fn locate(bytes: &[u8], at: usize) -> TooDeep {
    let before = bytes.get(..at).unwrap_or(bytes);
    let line = 1 + before.iter().filter(|b| **b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |p| p + 1);
    TooDeep {
        line,
        column: at - line_start + 1,
    }
}

fn check_json(bytes: &[u8]) -> Result<(), TooDeep> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (at, &b) in bytes.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING_DEPTH {
                    return Err(locate(bytes, at));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(doc: &str) -> Result<(), TooDeep> {
        check_nesting(doc.as_bytes(), Format::Yaml)
    }

    fn nested_flow(open: &str, close: &str, depth: usize) -> String {
        format!("{}x{}", open.repeat(depth), close.repeat(depth))
    }

    #[test]
    fn flow_nesting_is_counted_up_to_the_limit() {
        let max = MAX_NESTING_DEPTH;
        // The top-level mapping is one level.
        yaml(&format!("a: {}", nested_flow("[", "]", max - 1))).expect("at the limit");
        let err = yaml(&format!("a: {}", nested_flow("[", "]", max))).unwrap_err();
        assert_eq!(err.line, 1);
        assert_eq!(err.column, 4 + max - 1);
        yaml(&format!("a: {}", nested_flow("{b: ", "}", max - 1))).expect("at the limit");
        yaml(&format!("a: {}", nested_flow("{b: ", "}", max))).unwrap_err();
    }

    #[test]
    fn quotes_and_comments_do_not_hide_nesting() {
        let deep = "[".repeat(MAX_NESTING_DEPTH);
        for doc in [
            format!("a: \"]]]]]]]]]]]]]]\"\nb: {deep}"),
            format!("a: [x, \"]]]]]]]]]]]]]]]]]]]]\", {deep}"),
            format!("a: [x, ']]]]]]]]]]]]]]]]]]]]', {deep}"),
            format!("# ]]]]]]]]]]]]]]]]]]]]]\nb: {deep}"),
            format!("a: it's\nb: {deep}"),
            format!("- a: it's\n  b: {deep}"),
            format!("a: [it's, {deep}"),
            format!("a: \"x\\\"]]]]]]]]]]]]\" {deep}"),
            format!("a: |\n  \"]]]]]]]]]]]]\nb: {deep}"),
            format!("a: b # \"\nc: {deep}"),
            format!("a: x\u{85}b: {deep}"),
            format!("a: # x\u{2028}{deep}"),
        ] {
            assert!(yaml(&doc).is_err(), "accepted {doc:?}");
        }
    }

    #[test]
    fn block_nesting_is_counted() {
        let mut doc = String::new();
        for level in 0..MAX_NESTING_DEPTH {
            doc.push_str(&" ".repeat(level));
            doc.push_str("a:\n");
        }
        yaml(&doc).expect("at the limit");
        doc.push_str(&" ".repeat(MAX_NESTING_DEPTH));
        doc.push_str("a: 1\n");
        let err = yaml(&doc).unwrap_err();
        assert_eq!(err.line, MAX_NESTING_DEPTH + 1);
        // Compact sequences on one line.
        yaml(&format!("{}x", "- ".repeat(MAX_NESTING_DEPTH))).unwrap_err();
        // A sequence at its key's column is a level too.
        let mut doc = String::new();
        for level in 0..MAX_NESTING_DEPTH / 2 + 1 {
            doc.push_str(&" ".repeat(2 * level));
            doc.push_str("- a:\n");
        }
        yaml(&doc).unwrap_err();
    }

    #[test]
    fn realistic_documents_pass() {
        for doc in [
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             evictionHard: {memory.available: \"100Mi\", nodefs.available: '10%'}\n\
             clusterDNS: [10.0.0.10]\n# it's a comment with [ and \"\n\
             logging:\n    format: json\n    options:\n        json:\n            infoBufferSize: \"0\"\n\
             reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\n\
             staticPodPath: /etc/kubernetes/manifests # where [pods] live\n",
            "a: |\n  [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n  it's\nb: 1\n",
            "a:\n  b: >-\n    text \"\n    more\n  c: [1, 2]\n",
        ] {
            yaml(doc).unwrap_or_else(|e| panic!("{doc:?}: {e:?}"));
        }
    }

    #[test]
    fn json_strings_are_exact() {
        let deep = nested_flow("[", "]", MAX_NESTING_DEPTH);
        let ok = format!(
            "{{\"a\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"[[[[\", \"b\": {}}}",
            nested_flow("[", "]", MAX_NESTING_DEPTH - 1)
        );
        check_nesting(ok.as_bytes(), Format::Json).expect("strings do not nest");
        let bad = format!("{{\"a\": \"]]]]]]]]]]]]]]]]]]]]\", \"b\": {deep}}}");
        assert!(check_nesting(bad.as_bytes(), Format::Json).is_err());
    }

    /// Depth of a parsed YAML value (the top-level collection is 1).
    fn depth(v: &serde_yaml_ng::Value) -> usize {
        use serde_yaml_ng::Value as V;
        match v {
            V::Sequence(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            V::Mapping(m) => {
                1 + m
                    .iter()
                    .map(|(k, v)| depth(k).max(depth(v)))
                    .max()
                    .unwrap_or(0)
            }
            V::Tagged(t) => depth(&t.value),
            _ => 0,
        }
    }

    /// The deepest document libyaml builds from `doc`, or `None` when it
    /// fails before the end (what it read before failing is still bounded
    /// by the scan, but cannot be measured here).
    fn parsed_depth(doc: &str) -> Option<usize> {
        use serde::Deserialize;
        let mut deepest = 0;
        for one in serde_yaml_ng::Deserializer::from_str(doc) {
            let v = serde_yaml_ng::Value::deserialize(one).ok()?;
            deepest = deepest.max(depth(&v));
        }
        Some(deepest)
    }

    /// A document as tokens chosen to confuse a scanner: quotes, comments,
    /// block scalars, line breaks of every kind, and many brackets.
    fn hostile_tokens() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let token = prop_oneof![
            6 => Just("["),
            2 => Just("]"),
            3 => Just("{"),
            1 => Just("}"),
            2 => Just(", "),
            2 => Just("\""),
            2 => Just("'"),
            1 => Just("#"),
            1 => Just(" #"),
            3 => Just("\n"),
            2 => Just("\n  "),
            1 => Just("\n    "),
            1 => Just("\r"),
            1 => Just("\u{85}"),
            2 => Just("- "),
            2 => Just(": "),
            3 => Just("a"),
            1 => Just("k: "),
            1 => Just(" | "),
            1 => Just("|\n"),
            1 => Just(">-\n"),
            1 => Just("\\"),
            1 => Just("&x "),
            1 => Just("!t "),
            1 => Just("? "),
            1 => Just(":"),
            1 => Just("-"),
            1 => Just("---\n"),
            1 => Just("\t"),
        ];
        let tail = prop_oneof![
            (20usize..40).prop_map(|n| format!("k: {}x{}", "[".repeat(n), "]".repeat(n))),
            (20usize..40).prop_map(|n| format!("{}x", "- ".repeat(n))),
            (20usize..40).prop_map(|n| format!("{}x{}", "{a: ".repeat(n), "}".repeat(n))),
            (10usize..20).prop_map(|n| (0..n).map(|i| format!("{}a:\n", " ".repeat(i))).collect()),
        ];
        (proptest::collection::vec(token, 0..40), tail)
            .prop_map(|(t, tail)| format!("{}\n{tail}", t.concat()))
    }

    /// A nested value rendered in one of several styles.
    #[derive(Debug, Clone)]
    enum Node {
        Leaf(&'static str),
        Seq(Vec<Node>),
        Map(Vec<Node>),
    }

    impl Node {
        fn depth(&self) -> usize {
            match self {
                Node::Leaf(_) => 0,
                Node::Seq(c) | Node::Map(c) => 1 + c.iter().map(Node::depth).max().unwrap_or(0),
            }
        }

        fn flow(&self, out: &mut String) {
            match self {
                Node::Leaf(l) => out.push_str(l),
                Node::Seq(c) | Node::Map(c) => {
                    let map = matches!(self, Node::Map(_));
                    out.push(if map { '{' } else { '[' });
                    for (i, n) in c.iter().enumerate() {
                        if map {
                            out.push_str(&format!("k{i}: "));
                        }
                        n.flow(out);
                        out.push_str(", ");
                    }
                    out.push(if map { '}' } else { ']' });
                }
            }
        }

        /// Block style; flow below `flow_below` levels.
        fn block(&self, indent: usize, flow_below: usize, out: &mut String) {
            let pad = " ".repeat(indent);
            match self {
                Node::Seq(c) if !c.is_empty() && self.depth() > flow_below => {
                    for n in c {
                        out.push_str(&format!("{pad}- # it's [\n"));
                        n.block(indent + 2, flow_below, out);
                    }
                }
                Node::Map(c) if !c.is_empty() && self.depth() > flow_below => {
                    for (i, n) in c.iter().enumerate() {
                        if let Node::Leaf("plain") = n {
                            // A block scalar whose text looks like structure.
                            out.push_str(&format!(
                                "{pad}\"k{i}[\": | # {{\"\n{pad}  it's [[[[ \"{{{{\n{pad}   - ]]] '\n"
                            ));
                            continue;
                        }
                        out.push_str(&format!("{pad}\"k{i}[\": # {{\"\n"));
                        // A sequence may sit at its key's column.
                        let block_seq =
                            matches!(n, Node::Seq(c) if !c.is_empty() && n.depth() > flow_below);
                        let child = if block_seq { indent } else { indent + 1 };
                        n.block(child, flow_below, out);
                    }
                }
                _ => {
                    out.push_str(&pad);
                    self.flow(out);
                    out.push('\n');
                }
            }
        }
    }

    fn tree() -> impl proptest::strategy::Strategy<Value = Node> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Node::Leaf("x")),
            Just(Node::Leaf("\"]]]}}\"")),
            Just(Node::Leaf("'it''s ]]'")),
            Just(Node::Leaf("\"a\\\"]]\"")),
            Just(Node::Leaf("plain")),
            Just(Node::Leaf("it's \"x\"")),
        ];
        leaf.prop_recursive(48, 200, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 1..3).prop_map(Node::Seq),
                proptest::collection::vec(inner, 1..3).prop_map(Node::Map),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

        /// Whatever the scan accepts, libyaml nests at most the limit.
        #[test]
        fn prop_scan_never_accepts_deeper_than_the_limit(doc in hostile_tokens()) {
            if yaml(&doc).is_ok() {
                if let Some(d) = parsed_depth(&doc) {
                    proptest::prop_assert!(d <= MAX_NESTING_DEPTH, "depth {d} accepted: {doc:?}");
                }
            }
        }

        /// Generated documents: rejected exactly when deeper than the limit.
        #[test]
        fn prop_scan_counts_generated_nesting(node in tree(), flow_below in 0usize..40) {
            let root = Node::Map(vec![node]);
            let d = root.depth();
            let mut doc = String::new();
            root.block(0, flow_below, &mut doc);
            proptest::prop_assert_eq!(parsed_depth(&doc), Some(d), "{}", doc);
            let verdict = yaml(&doc);
            if d > MAX_NESTING_DEPTH {
                proptest::prop_assert!(verdict.is_err(), "depth {} accepted: {}", d, doc);
            } else {
                proptest::prop_assert!(verdict.is_ok(), "depth {} refused ({:?}): {}", d, verdict, doc);
            }
            let mut flow = String::new();
            root.flow(&mut flow);
            proptest::prop_assert_eq!(check_nesting(flow.as_bytes(), Format::Json).is_err(), d > MAX_NESTING_DEPTH);
        }
    }
}
