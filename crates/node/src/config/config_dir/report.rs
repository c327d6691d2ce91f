//! A drop-in problem is logged once, and its end once, not on every look.

use std::sync::Mutex;

use tracing::{error, info};

use super::{AppliedDropIns, Merged};

/// The last drop-in problem logged, so that a directory that stays broken
/// is reported once, not on every look (once a second).
static REPORTED: Mutex<Option<String>> = Mutex::new(None);

/// Logs a problem with the directory once, and its end once.
pub fn report(merged: &Merged) {
    let line = merged.problem.as_ref().map(|problem| {
        let running = merged
            .applied
            .as_ref()
            .map_or("no drop-ins".to_owned(), AppliedDropIns::describe);
        format!("{problem}; running {running}")
    });
    let Ok(mut last) = REPORTED.lock() else {
        return;
    };
    if *last == line {
        return;
    }
    match &line {
        Some(text) => {
            error!(problem = %text, "--config-dir drop-ins refused; fix the drop-in it names")
        }
        None => {
            if last.is_some() {
                info!("--config-dir drop-ins load and validate again");
            }
        }
    }
    *last = line;
}
