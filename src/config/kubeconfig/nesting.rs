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

use super::error::Format;

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

/// A lexical state of the YAML automaton.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between tokens. `indent`: libyaml's block indentation (the column of
    /// the innermost block collection), when a block indicator on this line
    /// fixes it; `None` when unknown.
    Gap { indent: Option<u32> },
    /// In a plain scalar; a continuation line must be indented deeper than
    /// `indent` (`None`: unknown, any line may continue it).
    Plain { indent: Option<u32> },
    /// In an anchor, alias or tag.
    Property { indent: Option<u32> },
    /// In a single-quoted scalar.
    Single,
    /// Just after a `'` inside a single-quoted scalar: its end, or the first
    /// half of an escaped `''`.
    SingleQuote,
    /// In a double-quoted scalar.
    Double,
    /// Just after a `\` inside a double-quoted scalar.
    DoubleEscape,
    /// In a comment (or a directive) until the line break.
    Comment,
    /// On the header line of a block scalar (`|`, `>`).
    BlockHeader(BlockScalar),
    /// In the content of a block scalar.
    Block(BlockScalar),
}

/// What decides where a block scalar ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlockScalar {
    /// libyaml's block indentation at the header; `None`: unknown.
    parent: Option<u32>,
    /// The explicit indentation indicator (`|2`).
    explicit: Option<u32>,
    /// Content indentation, once known.
    indent: Option<u32>,
    /// Most spaces on the blank lines before the first content line.
    blank_spaces: u32,
}

impl State {
    /// Plain YAML structure: brackets and indentation mean nesting here.
    fn is_structural(self) -> bool {
        matches!(
            self,
            State::Gap { .. } | State::Plain { .. } | State::Property { .. }
        )
    }

    /// The same state with what it knows about indentation forgotten: used
    /// when too many distinct states pile up (never under-counts, because a
    /// state without that knowledge allows every continuation).
    fn widen(self) -> State {
        match self {
            State::Gap { .. } => State::Gap { indent: None },
            State::Plain { .. } => State::Plain { indent: None },
            State::Property { .. } => State::Property { indent: None },
            State::BlockHeader(_) => State::BlockHeader(BlockScalar::UNKNOWN),
            State::Block(_) => State::Block(BlockScalar::UNKNOWN),
            other => other,
        }
    }
}

impl BlockScalar {
    const UNKNOWN: BlockScalar = BlockScalar {
        parent: None,
        explicit: None,
        indent: None,
        blank_spaces: 0,
    };
}

/// More distinct states than this are widened (see [`State::widen`]).
const MAX_STATES: usize = 12;

/// The possible states, without duplicates.
#[derive(Debug, Clone, Default)]
struct States(Vec<State>);

impl States {
    fn add(&mut self, s: State) {
        if !self.0.contains(&s) {
            self.0.push(s);
        }
    }

    fn any_structural(&self) -> bool {
        self.0.iter().any(|s| s.is_structural())
    }

    fn all_structural(&self) -> bool {
        self.0.iter().all(|s| s.is_structural())
    }

    fn bound(&mut self) {
        if self.0.len() > MAX_STATES {
            let wide: Vec<State> = self.0.iter().map(|s| s.widen()).collect();
            self.0.clear();
            for s in wide {
                self.add(s);
            }
        }
    }
}

/// One indentation column of the block stack estimate.
#[derive(Debug, Clone, Copy)]
struct Column {
    col: u32,
    /// A `- ` entry started at this column.
    seq: bool,
    /// Something else (a key, `?`, a scalar) started at this column.
    other: bool,
}

impl Column {
    /// A block sequence at its parent key's column is a second level.
    fn levels(self) -> usize {
        1 + usize::from(self.seq && self.other)
    }
}

/// What a line starts with: its indentation and the compact chain of block
/// indicators (`- - ? `) before its first other token.
#[derive(Debug, Default)]
struct LineStart {
    /// Column of the first non-blank byte (spaces and tabs count one).
    first: u32,
    /// Leading spaces only (block scalars count spaces).
    spaces: u32,
    /// Nothing but blanks before the line break.
    blank: bool,
    /// Columns of the leading indicators (`-`, `?`, `:` followed by a blank).
    chain: Vec<(u32, u8)>,
    /// Column of the first token after the chain, if the line has one
    /// (not a comment).
    node: Option<u32>,
}

struct YamlScan<'a> {
    bytes: &'a [u8],
    states: States,
    /// Upper bound of the open flow collections.
    flow: usize,
    columns: Vec<Column>,
    line_start: usize,
    line: LineStart,
    prev_blank: bool,
}

/// Length of the line break at `at` (`\n`, `\r\n`, `\r`, NEL, LS, PS, as
/// libyaml counts them), if there is one.
fn break_len(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at..).unwrap_or_default() {
        [b'\r', b'\n', ..] => Some(2),
        [b'\r' | b'\n', ..] => Some(1),
        [0xC2, 0x85, ..] => Some(2),
        [0xE2, 0x80, 0xA8 | 0xA9, ..] => Some(3),
        _ => None,
    }
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// A blank, a line break or the end of the document.
fn blankz_at(bytes: &[u8], at: usize) -> bool {
    match bytes.get(at) {
        None => true,
        Some(&b) => is_blank(b) || break_len(bytes, at).is_some(),
    }
}

fn is_doc_marker(bytes: &[u8], at: usize) -> bool {
    let head = bytes.get(at..at + 3);
    (head == Some(b"---") || head == Some(b"...")) && blankz_at(bytes, at + 3)
}

fn to_col(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl<'a> YamlScan<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        let mut states = States::default();
        states.add(State::Gap { indent: None });
        YamlScan {
            bytes,
            states,
            flow: 0,
            columns: Vec::new(),
            line_start: 0,
            line: LineStart::default(),
            prev_blank: true,
        }
    }

    fn run(mut self) -> Result<(), TooDeep> {
        let bytes = self.bytes;
        let mut at = if bytes.starts_with(b"\xEF\xBB\xBF") {
            3
        } else {
            0
        };
        let mut line_begins = true;
        while at < bytes.len() {
            if line_begins {
                line_begins = false;
                self.line_start = at;
                if is_doc_marker(bytes, at) {
                    self.resync();
                    self.line = self.analyze_line(at + 3);
                    self.structure_line(at)?;
                    at += 3;
                    continue;
                }
                self.line = self.analyze_line(at);
                self.begin_line();
                self.structure_line(at)?;
            }
            if let Some(len) = break_len(bytes, at) {
                self.on_break();
                at += len;
                line_begins = true;
                continue;
            }
            self.on_byte(at)?;
            at += 1;
        }
        Ok(())
    }

    fn col(&self, at: usize) -> u32 {
        to_col(at - self.line_start)
    }

    fn too_deep(&self, at: usize) -> TooDeep {
        locate(self.bytes, at)
    }

    fn levels(&self) -> usize {
        self.columns.iter().map(|c| c.levels()).sum::<usize>() + self.flow
    }

    /// At a document marker every parse is between tokens again (inside a
    /// quoted scalar or a flow collection the marker is an error).
    fn resync(&mut self) {
        self.states = States::default();
        self.states.add(State::Gap { indent: None });
        self.flow = 0;
        self.columns.clear();
        self.prev_blank = true;
    }

    fn analyze_line(&self, from: usize) -> LineStart {
        let bytes = self.bytes;
        let mut at = from;
        let mut spaces = 0;
        let mut only_spaces = true;
        while let Some(&b) = bytes.get(at).filter(|b| is_blank(**b)) {
            if b == b'\t' {
                only_spaces = false;
            }
            if only_spaces {
                spaces += 1;
            }
            at += 1;
        }
        let first_at = at;
        let blank = at >= bytes.len() || break_len(bytes, at).is_some();
        let mut chain = Vec::new();
        while let Some(&b) = bytes.get(at) {
            if !matches!(b, b'-' | b'?' | b':') || !blankz_at(bytes, at + 1) {
                break;
            }
            if break_len(bytes, at + 1).is_some() || at + 1 >= bytes.len() {
                chain.push((self.col(at), b));
                at += 1;
                break;
            }
            chain.push((self.col(at), b));
            at += 1;
            while bytes.get(at).is_some_and(|b| is_blank(*b)) {
                at += 1;
            }
        }
        let node = match bytes.get(at) {
            Some(b'#') | None => None,
            Some(_) if break_len(bytes, at).is_some() => None,
            Some(_) => Some(self.col(at)),
        };
        LineStart {
            first: self.col(first_at),
            spaces,
            blank,
            chain,
            node,
        }
    }

    /// Decides, for each state, whether the new line continues a plain or
    /// block scalar or starts new structure.
    fn begin_line(&mut self) {
        if self.line.blank {
            let spaces = self.line.spaces;
            for s in &mut self.states.0 {
                if let State::Block(bs) = s {
                    if bs.indent.is_none() {
                        bs.blank_spaces = bs.blank_spaces.max(spaces);
                    }
                }
            }
            return;
        }
        let old = std::mem::take(&mut self.states);
        for s in old.0 {
            match s {
                State::Plain { indent } => match indent {
                    Some(i) if self.flow == 0 && self.line.first <= i => {
                        self.states.add(State::Gap { indent: None })
                    }
                    Some(_) if self.flow == 0 => self.states.add(s),
                    _ => {
                        self.states.add(s);
                        self.states.add(State::Gap { indent: None });
                    }
                },
                State::Block(bs) => self.block_line(bs),
                other => self.states.add(other),
            }
        }
        self.states.bound();
    }

    fn block_line(&mut self, mut bs: BlockScalar) {
        let spaces = self.line.spaces;
        let Some(parent) = bs.parent else {
            // Where it ends is unknown: it may end at any line.
            self.states.add(State::Block(bs));
            self.states.add(State::Gap { indent: None });
            return;
        };
        let indent = match (bs.indent, bs.explicit) {
            (Some(i), _) => i,
            (None, Some(d)) => parent + d,
            (None, None) => spaces.max(bs.blank_spaces).max(parent + 1).max(1),
        };
        bs.indent = Some(indent);
        if spaces >= indent {
            self.states.add(State::Block(bs));
        } else {
            self.states.add(State::Gap { indent: None });
        }
    }

    /// Updates the block column estimate with this line's indentation.
    fn structure_line(&mut self, at: usize) -> Result<(), TooDeep> {
        if self.line.blank || self.line.node.is_none() && self.line.chain.is_empty() {
            return Ok(());
        }
        if !self.states.any_structural() {
            return Ok(());
        }
        let first = self.line.first;
        if self.states.all_structural() && self.flow == 0 {
            self.columns.retain(|c| c.col <= first);
        }
        let mut starts: Vec<(u32, bool)> = self
            .line
            .chain
            .iter()
            .map(|&(col, b)| (col, b == b'-'))
            .collect();
        if let Some(node) = self.line.node {
            starts.push((node, false));
        }
        for (col, seq) in starts {
            match self.columns.binary_search_by_key(&col, |c| c.col) {
                Ok(i) => {
                    if let Some(c) = self.columns.get_mut(i) {
                        c.seq |= seq;
                        c.other |= !seq;
                    }
                }
                Err(i) => self.columns.insert(
                    i,
                    Column {
                        col,
                        seq,
                        other: !seq,
                    },
                ),
            }
            if self.levels() > MAX_NESTING_DEPTH {
                return Err(self.too_deep(at + (col - self.col(at)) as usize));
            }
        }
        Ok(())
    }

    fn on_break(&mut self) {
        let old = std::mem::take(&mut self.states);
        for s in old.0 {
            self.states.add(match s {
                // A line break ends a property, a quoted scalar's closing
                // quote and a comment; libyaml's indentation may change on
                // the next line, so what a Gap knew about it is dropped.
                State::Gap { .. }
                | State::Property { .. }
                | State::SingleQuote
                | State::Comment => State::Gap { indent: None },
                State::DoubleEscape => State::Double,
                State::BlockHeader(bs) => State::Block(bs),
                other => other,
            });
        }
        self.prev_blank = true;
    }

    fn on_byte(&mut self, at: usize) -> Result<(), TooDeep> {
        let b = self.bytes.get(at).copied().unwrap_or_default();
        let old = std::mem::take(&mut self.states);
        let mut opens = false;
        for s in &old.0 {
            opens |= self.step(*s, at, b);
        }
        let closes = matches!(b, b']' | b'}')
            && old
                .0
                .iter()
                .all(|s| s.is_structural() || *s == State::SingleQuote && b != b'\'');
        if opens {
            self.flow += 1;
            if self.levels() > MAX_NESTING_DEPTH {
                return Err(self.too_deep(at));
            }
        } else if closes {
            self.flow = self.flow.saturating_sub(1);
        }
        self.states.bound();
        self.prev_blank = is_blank(b);
        Ok(())
    }

    /// Adds the successors of `s` on byte `b`; returns whether `b` may open
    /// a flow collection in that state.
    fn step(&mut self, s: State, at: usize, b: u8) -> bool {
        match s {
            State::Gap { indent } => return self.gap(indent, at, b),
            State::Plain { indent } => return self.plain(indent, at, b),
            State::Property { indent } => match b {
                b' ' | b'\t' => self.states.add(State::Gap { indent }),
                b'[' | b'{' | b']' | b'}' | b',' => {
                    self.states.add(State::Gap { indent: None });
                    return matches!(b, b'[' | b'{');
                }
                _ => self.states.add(s),
            },
            State::Single => self.states.add(if b == b'\'' {
                State::SingleQuote
            } else {
                State::Single
            }),
            State::SingleQuote if b == b'\'' => self.states.add(State::Single),
            State::SingleQuote => return self.gap(None, at, b),
            State::Double => self.states.add(match b {
                b'\\' => State::DoubleEscape,
                b'"' => State::Gap { indent: None },
                _ => State::Double,
            }),
            State::DoubleEscape => self.states.add(State::Double),
            State::Comment | State::BlockHeader(_) | State::Block(_) => self.states.add(s),
        }
        false
    }

    fn gap(&mut self, indent: Option<u32>, at: usize, b: u8) -> bool {
        let bytes = self.bytes;
        let block = self.flow == 0;
        let next_blankz = blankz_at(bytes, at + 1);
        match b {
            b' ' | b'\t' => self.states.add(State::Gap { indent }),
            b'#' | b'%' => self.states.add(State::Comment),
            b'"' => self.states.add(State::Double),
            b'\'' => self.states.add(State::Single),
            b'[' | b'{' => {
                self.states.add(State::Gap { indent });
                return true;
            }
            b']' | b'}' | b',' => self.states.add(State::Gap { indent }),
            b'-' | b'?' | b':' if next_blankz => {
                let indent = if block {
                    Some(self.indicator_indent(at, b))
                } else {
                    None
                };
                self.states.add(State::Gap { indent });
            }
            b'?' | b':' if !block => {
                self.states.add(State::Gap { indent: None });
                self.states.add(State::Plain { indent: None });
            }
            b'|' | b'>' => {
                let parent = if block { indent } else { None };
                self.states.add(State::BlockHeader(BlockScalar {
                    parent,
                    explicit: self.explicit_indent(at),
                    ..BlockScalar::UNKNOWN
                }));
            }
            b'&' | b'*' | b'!' => self.states.add(State::Property { indent }),
            _ => self.states.add(State::Plain {
                indent: if block { indent } else { None },
            }),
        }
        false
    }

    fn plain(&mut self, indent: Option<u32>, at: usize, b: u8) -> bool {
        let block = self.flow == 0;
        match b {
            b'#' if self.prev_blank => self.states.add(State::Comment),
            b':' if blankz_at(self.bytes, at + 1) => {
                let indent = if block {
                    Some(self.indicator_indent(at, b))
                } else {
                    None
                };
                self.states.add(State::Gap { indent });
            }
            b',' | b'[' | b']' | b'{' | b'}' if !block => {
                self.states.add(State::Gap { indent: None });
                self.states.add(State::Plain { indent: None });
                return matches!(b, b'[' | b'{');
            }
            _ => self.states.add(State::Plain { indent }),
        }
        false
    }

    /// libyaml's block indentation after the indicator at `at` (block
    /// context): a leading `- `, `? ` or `: ` is its collection's column; a
    /// `: ` after a key belongs to the mapping that starts at the line's
    /// first token after the leading indicators.
    fn indicator_indent(&self, at: usize, b: u8) -> u32 {
        let col = self.col(at);
        if b != b':' || self.line.chain.iter().any(|&(c, _)| c == col) {
            return col;
        }
        self.line.node.unwrap_or(self.line.first).min(col)
    }

    /// The indentation indicator digit of a block scalar header (`|2-`).
    fn explicit_indent(&self, at: usize) -> Option<u32> {
        let head = self.bytes.get(at + 1..at + 3).unwrap_or_default();
        head.iter()
            .find(|b| b.is_ascii_digit())
            .filter(|_| {
                head.first()
                    .is_some_and(|b| b.is_ascii_digit() || *b == b'-' || *b == b'+')
            })
            .map(|d| u32::from(d - b'0'))
    }
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
