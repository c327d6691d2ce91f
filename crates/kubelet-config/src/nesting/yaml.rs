//! The YAML half of the nesting pre-scan: a small nondeterministic
//! automaton over libyaml's lexical states (plain, quoted, comment, block
//! scalar, ...) that bounds the nesting depth at every byte (see the parent
//! module for why and how).

use super::lexical::*;
use super::*;

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

pub(super) struct YamlScan<'a> {
    bytes: &'a [u8],
    states: States,
    /// Upper bound of the open flow collections.
    flow: usize,
    columns: Vec<Column>,
    line_start: usize,
    line: LineStart,
    prev_blank: bool,
}

impl<'a> YamlScan<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
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

    pub(super) fn run(mut self) -> Result<(), TooDeep> {
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
