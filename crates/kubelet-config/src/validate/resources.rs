//! Validation of what the node's resources and the cluster's operators set:
//! node allocatable enforcement and reservations, container log limits, and
//! kubelet-pivot's own trial fields.

use super::*;

pub(super) fn validate_node_allocatable(views: &Views, c: &mut Checker) {
    const PATH: &str = "enforceNodeAllocatable";
    let list = views.list(PATH);
    let has = |key: &str| list.iter().any(|item| item == key);
    for (plain, compressible) in [
        ("system-reserved", "system-reserved-compressible"),
        ("kube-reserved", "kube-reserved-compressible"),
    ] {
        if has(plain) && has(compressible) {
            c.push(
                PATH,
                format_args!("cannot contain both {plain:?} and {compressible:?}"),
            );
        }
    }
    let mut seen = BTreeSet::new();
    for (index, item) in list.iter().enumerate() {
        let path = format!("{PATH}[{index}]");
        if !seen.insert(item) {
            c.push(&path, format_args!("({item:?}) is a duplicate"));
            continue;
        }
        let cgroup = |field: &str| views.string(field).unwrap_or("").is_empty();
        match item.as_str() {
            "pods" => {}
            "system-reserved" | "system-reserved-compressible" => {
                if cgroup("systemReservedCgroup") {
                    c.push(
                        &path,
                        format_args!("({item:?}) requires systemReservedCgroup to be set"),
                    );
                }
            }
            "kube-reserved" | "kube-reserved-compressible" => {
                if cgroup("kubeReservedCgroup") {
                    c.push(
                        &path,
                        format_args!("({item:?}) requires kubeReservedCgroup to be set"),
                    );
                }
            }
            "none" => {
                if list.len() > 1 {
                    c.push(
                        &path,
                        "(\"none\") may not be combined with other enforcements",
                    );
                }
                continue;
            }
            other => {
                c.push(
                    &path,
                    format_args!(
                        "({other:?}) must be one of: \"pods\", \"system-reserved\", \
                         \"system-reserved-compressible\", \"kube-reserved\", \
                         \"kube-reserved-compressible\", \"none\""
                    ),
                );
                continue;
            }
        }
        if views.boolean("cgroupsPerQOS") == Some(false) {
            c.push(
                &path,
                format_args!("({item:?}) requires cgroupsPerQOS to be true"),
            );
        }
    }
}

/// Resources `kubeReserved` / `systemReserved` accept (`parseResourceList`
/// in cmd/kubelet/app/server.go).
pub(crate) const RESERVABLE_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

pub(super) fn validate_reserved(views: &Views, c: &mut Checker) {
    for field in ["kubeReserved", "systemReserved"] {
        for (resource, text) in views.map(field).into_iter().flatten() {
            let path = format!("{field}.{resource}");
            if !RESERVABLE_RESOURCES.contains(&resource.as_str()) {
                c.push(
                    &path,
                    format_args!(
                        "cannot be reserved; reservable resources are {}",
                        RESERVABLE_RESOURCES.join(", ")
                    ),
                );
                continue;
            }
            match Quantity::parse(text) {
                Err(e) => c.push(&path, format_args!("({text:?}) is invalid: {e}")),
                Ok(q) if q.is_negative() => {
                    c.push(&path, format_args!("({text:?}) must not be negative"));
                }
                Ok(_) => {}
            }
        }
    }
    for (resource, text) in views.map("qosReserved").into_iter().flatten() {
        let path = format!("qosReserved.{resource}");
        if resource != "memory" {
            c.push(&path, "cannot be reserved; only memory is supported");
            continue;
        }
        let percent = text
            .strip_suffix('%')
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok());
        if percent.is_none_or(|p| p > 100) {
            c.push(
                &path,
                format_args!("({text:?}) must be a percentage between 0% and 100%"),
            );
        }
    }
}

pub(super) fn validate_logs(views: &Views, c: &mut Checker) {
    if let Some(size) = views.string("containerLogMaxSize") {
        match Quantity::parse(size) {
            Err(e) => c.push(
                "containerLogMaxSize",
                format_args!("({size:?}) is invalid: {e}"),
            ),
            Ok(q) if q.is_negative() => {
                c.push(
                    "containerLogMaxSize",
                    format_args!("({size:?}) must not be negative"),
                );
            }
            Ok(_) => {}
        }
    }
    if let Some(files) = views.int("containerLogMaxFiles") {
        if files <= 1 {
            c.push(
                "containerLogMaxFiles",
                format_args!("({files}) must be greater than 1"),
            );
        }
    }
    if let Some(workers) = views.int("containerLogMaxWorkers") {
        if workers < 1 {
            c.push(
                "containerLogMaxWorkers",
                format_args!("({workers}) must be greater than or equal to 1"),
            );
        }
    }
    if let Some(interval) = views.duration("containerLogMonitorInterval") {
        if interval.as_nanos() < 3_000_000_000 {
            c.push(
                "containerLogMonitorInterval",
                format_args!("({interval}) must be at least 3s"),
            );
        }
    }
    if let Some(dir) = views.string("podLogsDir") {
        if !dir.is_empty() {
            if !dir.starts_with('/') {
                c.push(
                    "podLogsDir",
                    format_args!("({dir:?}) must be an absolute path"),
                );
            } else if !is_clean_path(dir) {
                c.push(
                    "podLogsDir",
                    format_args!(
                        "({dir:?}) must be normalized (no \"//\", \".\", \"..\" or trailing \"/\")"
                    ),
                );
            }
            if !dir.is_ascii() {
                c.push(
                    "podLogsDir",
                    format_args!("({dir:?}) must contain ASCII characters only"),
                );
            }
        }
    }
}

/// Whether an absolute path equals Go's `filepath.Clean` of itself.
pub(super) fn is_clean_path(path: &str) -> bool {
    path == "/"
        || path
            .strip_prefix('/')
            .is_some_and(|rest| rest.split('/').all(|part| !matches!(part, "" | "." | "..")))
}

pub(super) fn validate_pivot_fields(views: &Views, c: &mut Checker) {
    c.in_range(
        views,
        CRASH_LOOP_THRESHOLD_FIELD,
        0,
        i64::from(MAX_CRASH_LOOP_THRESHOLD),
    );
    if let Some(trial) = views.duration(CONFIG_TRIAL_DURATION_FIELD) {
        if trial.is_negative() {
            c.push(
                CONFIG_TRIAL_DURATION_FIELD,
                format_args!("({trial}) must not be negative"),
            );
        }
    }
}
