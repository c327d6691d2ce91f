//! The node log query endpoint: `enableSystemLogQuery` needs the system log
//! handler it is served by. (Its feature gate, NodeLogQuery, is checked with
//! the other gate-dependent rules.)

use super::super::fields::Views;
use super::Checker;

pub(super) fn validate_system_log_query(views: &Views, c: &mut Checker) {
    if views.boolean("enableSystemLogQuery") == Some(true)
        && views.boolean("enableSystemLogHandler") == Some(false)
    {
        c.push(
            "enableSystemLogQuery",
            "(true) requires enableSystemLogHandler to be true",
        );
    }
}
