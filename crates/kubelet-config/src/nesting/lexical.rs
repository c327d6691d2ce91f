//! The lexical side of the YAML pre-scan: the automaton's states, the set
//! of states followed at once, and libyaml's byte classes (line breaks,
//! blanks, document markers).

/// A lexical state of the YAML automaton.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
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
pub(super) struct BlockScalar {
    /// libyaml's block indentation at the header; `None`: unknown.
    pub(super) parent: Option<u32>,
    /// The explicit indentation indicator (`|2`).
    pub(super) explicit: Option<u32>,
    /// Content indentation, once known.
    pub(super) indent: Option<u32>,
    /// Most spaces on the blank lines before the first content line.
    pub(super) blank_spaces: u32,
}

impl State {
    /// Plain YAML structure: brackets and indentation mean nesting here.
    pub(super) fn is_structural(self) -> bool {
        matches!(
            self,
            State::Gap { .. } | State::Plain { .. } | State::Property { .. }
        )
    }

    /// The same state with what it knows about indentation forgotten: used
    /// when too many distinct states pile up (never under-counts, because a
    /// state without that knowledge allows every continuation).
    pub(super) fn widen(self) -> State {
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
    pub(super) const UNKNOWN: BlockScalar = BlockScalar {
        parent: None,
        explicit: None,
        indent: None,
        blank_spaces: 0,
    };
}

/// More distinct states than this are widened (see [`State::widen`]).
pub(super) const MAX_STATES: usize = 12;

/// The possible states, without duplicates.
#[derive(Debug, Clone, Default)]
pub(super) struct States(pub(super) Vec<State>);

impl States {
    pub(super) fn add(&mut self, s: State) {
        if !self.0.contains(&s) {
            self.0.push(s);
        }
    }

    pub(super) fn any_structural(&self) -> bool {
        self.0.iter().any(|s| s.is_structural())
    }

    pub(super) fn all_structural(&self) -> bool {
        self.0.iter().all(|s| s.is_structural())
    }

    pub(super) fn bound(&mut self) {
        if self.0.len() > MAX_STATES {
            let wide: Vec<State> = self.0.iter().map(|s| s.widen()).collect();
            self.0.clear();
            for s in wide {
                self.add(s);
            }
        }
    }
}

/// Length of the line break at `at` (`\n`, `\r\n`, `\r`, NEL, LS, PS, as
/// libyaml counts them), if there is one.
pub(super) fn break_len(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at..).unwrap_or_default() {
        [b'\r', b'\n', ..] => Some(2),
        [b'\r' | b'\n', ..] => Some(1),
        [0xC2, 0x85, ..] => Some(2),
        [0xE2, 0x80, 0xA8 | 0xA9, ..] => Some(3),
        _ => None,
    }
}

pub(super) fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// A blank, a line break or the end of the document.
pub(super) fn blankz_at(bytes: &[u8], at: usize) -> bool {
    match bytes.get(at) {
        None => true,
        Some(&b) => is_blank(b) || break_len(bytes, at).is_some(),
    }
}

pub(super) fn is_doc_marker(bytes: &[u8], at: usize) -> bool {
    let head = bytes.get(at..at + 3);
    (head == Some(b"---") || head == Some(b"...")) && blankz_at(bytes, at + 3)
}

pub(super) fn to_col(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
