//! The data of `kubelet_gates.txt` (upstream's versioned gate specs, as
//! data): parsed once, each line a gate and its specs.

use std::sync::OnceLock;

use super::{GateSpec, Stage};

/// The table, as shipped.
const TABLE: &str = include_str!("kubelet_gates.txt");

/// One gate's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GateRow {
    pub name: &'static str,
    /// `(minor, spec)`, oldest first, as upstream lists them (all 1.x).
    pub specs: Vec<(u32, GateSpec)>,
    /// Removed in 1.`until` (unknown from then on).
    pub until: Option<u32>,
}

impl GateRow {
    /// The spec in force at 1.`minor`: the last one whose version is at most
    /// `minor`; `None` when the gate is unknown at `minor` (not yet added or
    /// removed).
    pub fn at(&self, minor: u32) -> Option<GateSpec> {
        if self.until.is_some_and(|until| minor >= until) {
            return None;
        }
        self.specs
            .iter()
            .rev()
            .find(|(since, _)| *since <= minor)
            .map(|(_, spec)| *spec)
    }
}

/// Every row of the table; lines that do not parse are left out (the unit
/// test [`tests::every_line_parses`] keeps that set empty).
pub(super) fn rows() -> &'static [GateRow] {
    static ROWS: OnceLock<Vec<GateRow>> = OnceLock::new();
    ROWS.get_or_init(|| {
        data_lines()
            .filter_map(|line| parse_line(line).ok())
            .collect()
    })
}

fn data_lines() -> impl Iterator<Item = &'static str> {
    TABLE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

fn parse_line(line: &'static str) -> Result<GateRow, String> {
    let mut words = line.split_whitespace();
    let name = words.next().ok_or("empty line")?;
    if !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("{name:?} is not a gate name"));
    }
    let mut specs: Vec<(u32, GateSpec)> = Vec::new();
    let mut until = None;
    for word in words {
        if let Some(minor) = word.strip_prefix("until:") {
            until = Some(minor.parse::<u32>().map_err(|e| format!("{word}: {e}"))?);
            continue;
        }
        let spec = parse_spec(word)?;
        if specs.last().is_some_and(|(last, _)| *last >= spec.0) {
            return Err(format!("{name}: specs out of order at {word}"));
        }
        specs.push(spec);
    }
    if specs.is_empty() {
        return Err(format!("{name} has no spec"));
    }
    Ok(GateRow { name, specs, until })
}

/// `1.MINOR:STAGE:DEFAULT[:L]`.
fn parse_spec(word: &str) -> Result<(u32, GateSpec), String> {
    let bad = || format!("{word:?} is not 1.MINOR:STAGE:DEFAULT[:L]");
    let mut parts = word.split(':');
    let minor = parts
        .next()
        .and_then(|v| v.strip_prefix("1."))
        .and_then(|m| m.parse::<u32>().ok())
        .ok_or_else(bad)?;
    let stage = match parts.next() {
        Some("A") => Stage::Alpha,
        Some("B") => Stage::Beta,
        Some("GA") => Stage::Ga,
        Some("D") => Stage::Deprecated,
        _ => return Err(bad()),
    };
    let default = match parts.next() {
        Some("t") => true,
        Some("f") => false,
        _ => return Err(bad()),
    };
    let locked = match parts.next() {
        None => false,
        Some("L") => true,
        Some(_) => return Err(bad()),
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((
        minor,
        GateSpec {
            stage,
            default,
            locked,
        },
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_line_parses() {
        let mut names = BTreeSet::new();
        for line in data_lines() {
            let row = parse_line(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            assert!(names.insert(row.name), "{} is listed twice", row.name);
        }
        assert_eq!(rows().len(), names.len());
    }

    #[test]
    fn spec_in_force_is_the_last_one_not_newer() {
        let row = parse_line("G 1.20:A:f 1.22:B:t 1.32:GA:t:L until:36").unwrap();
        assert_eq!(row.at(19), None);
        assert_eq!(row.at(20).map(|s| s.stage), Some(Stage::Alpha));
        assert_eq!(
            row.at(31).map(|s| (s.stage, s.default)),
            Some((Stage::Beta, true))
        );
        assert!(row.at(35).is_some_and(|s| s.locked));
        assert_eq!(row.at(36), None);
    }

    #[test]
    fn malformed_lines_are_refused() {
        for line in [
            "G",
            "G 1.20:X:f",
            "G 1.20:A:maybe",
            "G 2.0:A:f",
            "G 1.22:A:f 1.20:B:t",
            "G 1.20:A:f:K",
            "G-x 1.20:A:f",
            "G 1.20:A:f until:x",
        ] {
            assert!(parse_line(line).is_err(), "{line}");
        }
    }
}
