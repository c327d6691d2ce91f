//! `reservedMemory` (the memory manager's per-NUMA-node reservations), as
//! upstream's `validateReservedMemoryConfiguration` checks it: only memory
//! and hugepages, never zero, each (NUMA node, resource) once.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::raw::{self, child, Width};
use super::Checker;

const FIELD: &str = "reservedMemory";
const HUGEPAGES_PREFIX: &str = "hugepages-";

pub(super) fn validate_reserved_memory(effective: &Map<String, Value>, c: &mut Checker) {
    let Some(items) = raw::list(effective.get(FIELD), FIELD, c) else {
        return;
    };
    let mut seen: BTreeSet<(i64, &str)> = BTreeSet::new();
    for (index, item) in items.iter().enumerate() {
        let path = format!("{FIELD}[{index}]");
        let Some(entry) = raw::object(Some(item), &path, c) else {
            continue;
        };
        let node = raw::integer(entry, "numaNode", &path, Width::Int32, c).unwrap_or(0);
        let limits_path = child(&path, "limits");
        let Some(limits) = raw::object(entry.get("limits"), &limits_path, c) else {
            continue;
        };
        for (resource, value) in limits {
            let at = child(&limits_path, resource);
            if resource != "memory" && !resource.starts_with(HUGEPAGES_PREFIX) {
                c.push(
                    &at,
                    format_args!(
                        "(NUMA node {node}) cannot be reserved: only memory and \
                         {HUGEPAGES_PREFIX}<size> are accepted"
                    ),
                );
            }
            match raw::quantity(value) {
                Err(why) => c.push(&at, format_args!("is invalid: {why}")),
                Ok(q) if q.is_zero() => {
                    c.push(&at, format_args!("(NUMA node {node}) may not be zero"))
                }
                Ok(_) => {}
            }
            if !seen.insert((node, resource.as_str())) {
                c.push(
                    &at,
                    format_args!("is a duplicate: NUMA node {node} already reserves {resource}"),
                );
            }
        }
    }
}
