//! Pure translations between the Node object and kubelet-pivot's config
//! model: which config the node is assigned, and what status to report.
//! No I/O here; `sync` and `report` do the talking.

use k8s_openapi::api::core::v1::Node;
use serde_json::{json, Value};

use serde::{Deserialize, Serialize};

/// Node annotation that assigns a config: `NAMESPACE/NAME[:KEY]`.
pub const SOURCE_ANNOTATION: &str = "kubelet-pivot.io/config-source";
/// Node annotation where the config status is reported as JSON.
pub const STATUS_ANNOTATION: &str = "kubelet-pivot.io/config-status";
/// The Node condition type.
pub const CONDITION_TYPE: &str = "KubeletConfigOK";
/// Key used when the annotation names none.
pub const DEFAULT_KEY: &str = "kubelet";
/// Characters of an input value quoted in a status text (the rest is counted, not shown).
pub const EXCERPT_CHARS: usize = 200;
/// Longest condition reason, and status-annotation error, in bytes. With the condition
/// message (at most [`MAX_MESSAGE_BYTES`]) and ": " it stays under an Event's 1024.
pub const MAX_REASON_BYTES: usize = 768;
/// Longest condition message in bytes.
pub const MAX_MESSAGE_BYTES: usize = 200;
/// Longest detail of a status error (the validator's, the loader's or the crash detector's
/// own words), in bytes: with the longest prefix put before it (`failed to validate config
/// with --config-dir drop-ins: `) the error stays within [`MAX_REASON_BYTES`].
pub const MAX_DETAIL_BYTES: usize = MAX_REASON_BYTES - 128;
/// An Event's message limit (`legacyValidateEvent`, with eventTime set: `len()` in bytes).
pub const MAX_EVENT_MESSAGE_BYTES: usize = 1024;

/// An input value as it may appear in a status text: at most [`EXCERPT_CHARS`] characters,
/// quoted, with control (and other non-printing) characters, quotes and backslashes escaped,
/// then `…(N more bytes)` when the value was longer.
pub fn excerpt(value: &str) -> String {
    let cut = value
        .char_indices()
        .nth(EXCERPT_CHARS)
        .map_or(value.len(), |(i, _)| i);
    let mut out = String::with_capacity(cut + 32);
    out.push('"');
    out.extend(value[..cut].chars().flat_map(char::escape_debug));
    out.push('"');
    if cut < value.len() {
        out.push_str(&format!("…({} more bytes)", value.len() - cut));
    }
    out
}

/// `text` cut to at most `max` bytes (on a character boundary), ending in `…(N more bytes)`
/// when it was longer: what goes into a condition, an annotation or an Event stays within
/// the API's limits whatever produced it.
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    // The suffix's length depends on N; 24 bytes cover any usize.
    let kept = crate::text::prefix(text, max.saturating_sub(24));
    format!("{kept}…({} more bytes)", text.len() - kept.len())
}

/// The words of a refusal as a status error may carry them: control and other non-printing
/// characters escaped ([`crate::text::printable`]; quotes stay, they are the words' own), cut to
/// [`MAX_DETAIL_BYTES`] with `…(N more bytes)`.
pub fn detail(words: &str) -> String {
    bounded(&crate::text::printable(words), MAX_DETAIL_BYTES)
}

/// The longest ConfigMap key (a file name in the checkpoint store).
pub const MAX_KEY_LEN: usize = 253;
/// Keys starting with this are refused: the checkpoint store's temporary files use it.
pub const RESERVED_KEY_PREFIX: &str = ".tmp.";

/// Why `key` is not a ConfigMap key kubelet-pivot accepts (`[-._a-zA-Z0-9]+`, not `.`
/// or `..`, at most 253 characters, not the reserved prefix), or `None` when it is.
/// The same rule keeps a uid and a resourceVersion usable as directory names.
pub fn key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        return Some("empty");
    }
    if key.len() > MAX_KEY_LEN {
        return Some("longer than 253 characters");
    }
    if key == "." || key == ".." {
        return Some("'.' and '..' are not allowed");
    }
    if key.starts_with(RESERVED_KEY_PREFIX) {
        return Some("reserved prefix");
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Some("must consist of alphanumeric characters, '-', '_' or '.'");
    }
    None
}

/// Where the running config came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    Assigned,
    LastKnownGood,
    Local,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::Assigned => "assigned",
            Origin::LastKnownGood => "last-known-good",
            Origin::Local => "local",
        })
    }
}

/// A remote config source, as the Dynamic Kubelet Configuration proposal
/// serializes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigSource {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub kubelet_config_key: String,
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ConfigMap {}/{} (UID: {}, ResourceVersion: {})",
            self.namespace, self.name, self.uid, self.resource_version
        )
    }
}

/// A reference to a ConfigMap key, as assigned to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigRef {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl std::fmt::Display for ConfigRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}:{}", self.namespace, self.name, self.key)
    }
}

/// What the Node says the config should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// Nothing assigned: the local config.
    Local,
    Remote(ConfigRef),
    /// An assignment that cannot be followed; reported, never applied.
    Invalid(String),
}

fn dns_label_ok(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn key_ok(s: &str) -> bool {
    key_problem(s).is_none()
}

/// Parses `NAMESPACE/NAME[:KEY]`.
pub fn parse_annotation(value: &str) -> Result<ConfigRef, String> {
    let value = value.trim();
    let (ns, rest) = value.split_once('/').ok_or_else(|| {
        format!(
            "invalid {SOURCE_ANNOTATION} {}: expected NAMESPACE/NAME[:KEY]",
            excerpt(value)
        )
    })?;
    let (name, key) = match rest.split_once(':') {
        Some((n, k)) => (n, k),
        None => (rest, DEFAULT_KEY),
    };
    let r = ConfigRef {
        namespace: ns.to_string(),
        name: name.to_string(),
        key: key.to_string(),
    };
    validate_ref(&r).map(|()| r)
}

fn validate_ref(r: &ConfigRef) -> Result<(), String> {
    if !dns_label_ok(&r.namespace, 63) {
        return Err(format!(
            "invalid NodeConfigSource, namespace {} is not a valid namespace name",
            excerpt(&r.namespace)
        ));
    }
    if !dns_label_ok(&r.name, 253) {
        return Err(format!(
            "invalid NodeConfigSource, name {} is not a valid ConfigMap name",
            excerpt(&r.name)
        ));
    }
    if !key_ok(&r.key) {
        return Err(format!(
            "invalid NodeConfigSource, kubeletConfigKey {} is not a valid ConfigMap key",
            excerpt(&r.key)
        ));
    }
    Ok(())
}

/// The node's assignment: the annotation wins over Node.spec.configSource
/// (which only old API servers keep). All of namespace, name and key are
/// required; exactly one source kind (configMap) is supported.
pub fn assignment_of(node: &Node) -> Assignment {
    let annotation = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SOURCE_ANNOTATION));
    if let Some(value) = annotation {
        if value.trim().is_empty() {
            return Assignment::Local;
        }
        return match parse_annotation(value) {
            Ok(r) => Assignment::Remote(r),
            Err(e) => Assignment::Invalid(e),
        };
    }
    let Some(source) = node.spec.as_ref().and_then(|s| s.config_source.as_ref()) else {
        return Assignment::Local;
    };
    let Some(cm) = source.config_map.as_ref() else {
        return Assignment::Invalid(
            "invalid NodeConfigSource, exactly one subfield must be non-nil, but all were nil"
                .to_string(),
        );
    };
    if cm.namespace.is_empty() || cm.name.is_empty() || cm.kubelet_config_key.is_empty() {
        return Assignment::Invalid(
            "invalid NodeConfigSource, namespace, name and kubeletConfigKey are all required"
                .to_string(),
        );
    }
    let r = ConfigRef {
        namespace: cm.namespace.clone(),
        name: cm.name.clone(),
        key: cm.kubelet_config_key.clone(),
    };
    match validate_ref(&r) {
        Ok(()) => Assignment::Remote(r),
        Err(e) => Assignment::Invalid(e),
    }
}

/// What the supervisor runs, as it reports it to the syncer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigReport {
    pub origin: Origin,
    /// The remote source running (None = local).
    pub source: Option<ConfigSource>,
    /// "init" or "default" for the local config.
    pub local_kind: &'static str,
    /// The lifecycle's error text, if any: the v1.11 table's stable prefix and the reason
    /// (`failed to validate config: port (70000) must be between 1 and 65535, inclusive`).
    pub error: Option<String>,
    /// What kind of failure `error` reports (it names the Event).
    pub failure: Option<Failure>,
    pub assigned: Option<ConfigSource>,
    pub last_known_good: Option<ConfigSource>,
    /// A disruptive change waiting (drain, timeout, hold), if any.
    pub disruption: Option<DisruptionReport>,
}

/// What kind of failure a report's error is: it picks the Event's reason, so
/// that `kubectl get events` tells a refusal from a rollback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The assigned config (or the drop-ins) did not load or validate: it
    /// never reached a kubelet, and whatever ran goes on.
    Refused,
    /// A config crash-looped in its trial and the node went back to
    /// last-known-good (or its local config).
    RolledBack,
    /// kubelet-pivot's own store could not be read.
    Internal,
}

impl Failure {
    /// The Event reason.
    pub fn event_reason(self) -> &'static str {
        match self {
            Failure::Refused => "KubeletConfigRefused",
            Failure::RolledBack => "KubeletConfigRolledBack",
            Failure::Internal => "KubeletConfigInternalError",
        }
    }
}

/// Label a node-replacing controller (Gardener's machine controller, Cluster
/// API) can select on: set while a change is held because it needs a new node.
pub const ROLL_REQUIRED_LABEL: &str = "kubelet-pivot.io/roll-required";

/// Why the assigned config is not running yet although it is good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisruptionReason {
    /// The node is being drained for the change.
    Draining,
    /// The change needs a new node; it is held.
    RollRequired,
    /// The last drain did not finish within --drain-timeout; retried later.
    DrainTimeout,
    /// The server refused the last drain for good (several
    /// PodDisruptionBudgets select a pod, 403, ...); retried later.
    DrainFailed,
}

impl DisruptionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DisruptionReason::Draining => "Draining",
            DisruptionReason::RollRequired => "RollRequired",
            DisruptionReason::DrainTimeout => "DrainTimeout",
            DisruptionReason::DrainFailed => "DrainFailed",
        }
    }
}

/// A disruptive change as the Node shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisruptionReport {
    pub reason: DisruptionReason,
    /// What changed and what the change waits for.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// The KubeletConfigOK condition's status, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    /// Set when the condition reports a disruptive change.
    pub disruption: Option<DisruptionReason>,
    /// Set when the condition reports a refused or rolled-back config.
    pub failure: Option<Failure>,
}

impl Condition {
    /// The Event reason of a disruptive change's condition (`Draining`,
    /// `RollRequired`, `DrainTimeout`) or of a failure
    /// (`KubeletConfigRefused`, `KubeletConfigRolledBack`,
    /// `KubeletConfigInternalError`); `None` for the other DKC conditions.
    pub fn event_reason(&self) -> Option<&'static str> {
        self.disruption
            .map(DisruptionReason::as_str)
            .or_else(|| self.failure.map(Failure::event_reason))
    }
}

fn describe(src: &ConfigSource) -> String {
    format!(
        "UID: {}, ResourceVersion: {}",
        src.uid, src.resource_version
    )
}

/// Computes the condition as the proposal's examples show it.
pub fn condition(report: &ConfigReport, sync_error: Option<&str>) -> Condition {
    let message = match (&report.origin, &report.source) {
        // A refused assignment left the config on trial running.
        (Origin::Assigned, Some(s)) if report.assigned.as_ref() != Some(s) => {
            format!("using previous, on trial ({})", describe(s))
        }
        (Origin::Assigned, Some(s)) => format!("using current ({})", describe(s)),
        (Origin::LastKnownGood, Some(s)) => format!("using last-known-good ({})", describe(s)),
        _ if report.error.is_some() => format!("using last-known-good ({})", report.local_kind),
        _ => format!("using current ({})", report.local_kind),
    };
    let (status, reason) = match (sync_error, &report.error) {
        (Some(cause), _) => (
            ConditionStatus::Unknown,
            format!("failed to sync, desired config unclear, cause: {cause}"),
        ),
        (None, Some(err)) => (ConditionStatus::False, err.clone()),
        (None, None) => (ConditionStatus::True, "passing all checks".to_string()),
    };
    // A disruptive change waiting is what the operator must see, unless the
    // config cannot even be synced or the running one failed.
    if let (Some(d), ConditionStatus::True) = (&report.disruption, status) {
        return Condition {
            status: ConditionStatus::False,
            reason: d.reason.as_str().to_string(),
            message: bounded(&format!("{message}; {}", d.message), MAX_MESSAGE_BYTES * 4),
            disruption: Some(d.reason),
            failure: None,
        };
    }
    Condition {
        status,
        reason: bounded(&reason, MAX_REASON_BYTES),
        message: bounded(&message, MAX_MESSAGE_BYTES),
        disruption: None,
        failure: match status {
            ConditionStatus::False => report.failure,
            ConditionStatus::True | ConditionStatus::Unknown => None,
        },
    }
}

/// The Event message of a condition: its message and reason, within the Event limit.
pub fn event_message(cond: &Condition) -> String {
    bounded(
        &format!("{}: {}", cond.message, cond.reason),
        MAX_EVENT_MESSAGE_BYTES,
    )
}

fn node_config_source(src: &Option<ConfigSource>) -> Value {
    match src {
        Some(s) => json!({"configMap": {
            "namespace": s.namespace,
            "name": s.name,
            "uid": s.uid,
            "resourceVersion": s.resource_version,
            "kubeletConfigKey": s.kubelet_config_key,
        }}),
        None => Value::Null,
    }
}

/// Node.status.config-shaped {active, assigned, lastKnownGood, error}.
pub fn config_status(report: &ConfigReport, sync_error: Option<&str>) -> Value {
    let error = sync_error
        .or(report.error.as_deref())
        .map(|e| bounded(e, MAX_REASON_BYTES));
    json!({
        "active": node_config_source(&report.source),
        "assigned": node_config_source(&report.assigned),
        "lastKnownGood": node_config_source(&report.last_known_good),
        "error": error,
    })
}

/// The existing KubeletConfigOK condition of a node, if any.
pub fn existing_condition(node: &Node) -> Option<&k8s_openapi::api::core::v1::NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE)
}

/// Whether the node's KubeletConfigOK condition already says `cond` (status,
/// reason and message; the times do not count).
pub fn shows_condition(node: &Node, cond: &Condition) -> bool {
    existing_condition(node).is_some_and(|c| {
        c.status == cond.status.as_str()
            && c.reason.as_deref() == Some(cond.reason.as_str())
            && c.message.as_deref() == Some(cond.message.as_str())
    })
}

/// Whether the node's status annotation already holds `config`, and the
/// roll-required label is there exactly when `roll_required`.
pub fn shows_annotation(node: &Node, config: &Value, roll_required: bool) -> bool {
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(ROLL_REQUIRED_LABEL));
    labelled == roll_required
        && node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STATUS_ANNOTATION))
            .is_some_and(|text| serde_json::from_str::<Value>(text).ok().as_ref() == Some(config))
}

/// The strategic-merge patch for nodes/status: our condition (merged by
/// `type`, other conditions untouched) and Node.status.config.
/// lastTransitionTime moves only when the status or the reason changes;
/// lastHeartbeatTime is the time of this report.
pub fn status_patch(node: Option<&Node>, cond: &Condition, config: &Value, now: &str) -> Value {
    let transition = node
        .and_then(existing_condition)
        .filter(|c| {
            c.status == cond.status.as_str() && c.reason.as_deref() == Some(cond.reason.as_str())
        })
        .and_then(|c| c.last_transition_time.as_ref())
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or_else(|| Value::String(now.to_string()));
    json!({"status": {
        "conditions": [{
            "type": CONDITION_TYPE,
            "status": cond.status.as_str(),
            "reason": cond.reason,
            "message": cond.message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": transition,
        }],
        "config": config,
    }})
}

/// The merge patch for the node's status annotation and the roll-required
/// label (set while a change is held, removed otherwise).
pub fn annotation_patch(config: &Value, roll_required: bool) -> Value {
    let label = if roll_required {
        Value::from("true")
    } else {
        Value::Null
    };
    json!({"metadata": {
        "annotations": {STATUS_ANNOTATION: config.to_string()},
        "labels": {ROLL_REQUIRED_LABEL: label},
    }})
}

/// Whether `report` holds a change that needs a new node.
pub fn roll_required(report: &ConfigReport) -> bool {
    report
        .disruption
        .as_ref()
        .is_some_and(|d| d.reason == DisruptionReason::RollRequired)
}

#[cfg(test)]
mod tests {
    /// The names on the wire, pinned: a rename here is a protocol change that nodes and
    /// controllers of other versions do not follow.
    #[test]
    fn the_wire_names_are_pinned() {
        assert_eq!(super::SOURCE_ANNOTATION, "kubelet-pivot.io/config-source");
        assert_eq!(super::STATUS_ANNOTATION, "kubelet-pivot.io/config-status");
        assert_eq!(super::CONDITION_TYPE, "KubeletConfigOK");
        assert_eq!(super::ROLL_REQUIRED_LABEL, "kubelet-pivot.io/roll-required");
    }

    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMapNodeConfigSource, NodeConfigSource, NodeSpec};
    use std::collections::BTreeMap;

    fn node(annotation: Option<&str>, spec: Option<ConfigMapNodeConfigSource>) -> Node {
        let mut n = Node::default();
        if let Some(a) = annotation {
            let mut m = BTreeMap::new();
            m.insert(SOURCE_ANNOTATION.to_string(), a.to_string());
            n.metadata.annotations = Some(m);
        }
        if let Some(cm) = spec {
            n.spec = Some(NodeSpec {
                config_source: Some(NodeConfigSource {
                    config_map: Some(cm),
                }),
                ..Default::default()
            });
        }
        n
    }

    fn cm(ns: &str, name: &str, key: &str) -> ConfigMapNodeConfigSource {
        ConfigMapNodeConfigSource {
            namespace: ns.into(),
            name: name.into(),
            kubelet_config_key: key.into(),
            resource_version: None,
            uid: None,
        }
    }

    #[test]
    fn annotation_parsing() {
        assert_eq!(
            parse_annotation("kubelet-config/my-cfg").unwrap(),
            ConfigRef {
                namespace: "kubelet-config".into(),
                name: "my-cfg".into(),
                key: "kubelet".into()
            }
        );
        assert_eq!(parse_annotation("a/b:cfg.yaml").unwrap().key, "cfg.yaml");
        for bad in [
            "nonamespace",
            "/name",
            "ns/",
            "ns/name:",
            "ns/name:../x",
            "NS/name",
            "ns/na me",
        ] {
            assert!(parse_annotation(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn annotation_wins_over_spec_and_invalid_is_reported() {
        let n = node(Some("a/b"), Some(cm("c", "d", "kubelet")));
        assert!(matches!(assignment_of(&n), Assignment::Remote(r) if r.namespace == "a"));
        let n = node(None, Some(cm("c", "d", "kubelet")));
        assert!(matches!(assignment_of(&n), Assignment::Remote(r) if r.namespace == "c"));
        let n = node(None, Some(cm("c", "", "kubelet")));
        assert!(matches!(assignment_of(&n), Assignment::Invalid(_)));
        let mut n = node(None, None);
        n.spec = Some(NodeSpec {
            config_source: Some(NodeConfigSource { config_map: None }),
            ..Default::default()
        });
        assert!(
            matches!(assignment_of(&n), Assignment::Invalid(m) if m.contains("exactly one subfield"))
        );
        assert_eq!(assignment_of(&node(None, None)), Assignment::Local);
        assert_eq!(assignment_of(&node(Some(" "), None)), Assignment::Local);
        assert!(matches!(
            assignment_of(&node(Some("bad"), None)),
            Assignment::Invalid(_)
        ));
    }

    fn src(uid: &str) -> ConfigSource {
        ConfigSource {
            namespace: "kubelet-config".into(),
            name: "c".into(),
            uid: uid.into(),
            resource_version: "7".into(),
            kubelet_config_key: "kubelet".into(),
        }
    }

    #[test]
    fn conditions_follow_the_proposal() {
        let mut r = ConfigReport {
            origin: Origin::Assigned,
            source: Some(src("u1")),
            local_kind: "init",
            error: None,
            failure: None,
            assigned: Some(src("u1")),
            last_known_good: None,
            disruption: None,
        };
        let c = condition(&r, None);
        assert_eq!(c.status, ConditionStatus::True);
        assert_eq!(c.message, "using current (UID: u1, ResourceVersion: 7)");
        assert_eq!(c.reason, "passing all checks");
        // A refused assignment left the config on trial running.
        r.assigned = Some(src("u2"));
        r.error = Some(
            "failed to validate config: port (70000) must be between 1 and 65535, inclusive".into(),
        );
        let c = condition(&r, None);
        assert_eq!(c.status, ConditionStatus::False);
        assert_eq!(
            c.message,
            "using previous, on trial (UID: u1, ResourceVersion: 7)"
        );
        assert_eq!(
            event_message(&c),
            "using previous, on trial (UID: u1, ResourceVersion: 7): failed to validate config: port (70000) must be between 1 and 65535, inclusive"
        );
        // Without its kind the Event says rolled back, as before; a refusal says so.
        assert_eq!(c.event_reason(), None);
        r.failure = Some(Failure::Refused);
        assert_eq!(
            condition(&r, None).event_reason(),
            Some("KubeletConfigRefused")
        );
        r.origin = Origin::LastKnownGood;
        r.source = Some(src("u0"));
        let c = condition(&r, None);
        assert_eq!(c.status, ConditionStatus::False);
        assert!(c.message.starts_with("using last-known-good (UID: u0"));
        let c = condition(
            &r,
            Some("failed to sync: failed to download config, see Kubelet log for details"),
        );
        assert_eq!(c.status, ConditionStatus::Unknown);
        assert!(c
            .reason
            .starts_with("failed to sync, desired config unclear, cause: failed to sync"));
        r.origin = Origin::Local;
        r.source = None;
        assert_eq!(condition(&r, None).message, "using last-known-good (init)");
        r.error = None;
        assert_eq!(condition(&r, None).message, "using current (init)");
    }

    #[test]
    fn garbage_annotations_are_quoted_as_bounded_escaped_excerpts() {
        let garbage: String = "\u{1b}[31m\"x\n\u{0}é".chars().cycle().take(1500).collect();
        let n = node(Some(&garbage), None);
        let Assignment::Invalid(why) = assignment_of(&n) else {
            panic!("garbage accepted");
        };
        assert!(why.chars().count() < 2 * EXCERPT_CHARS + 200, "{why}");
        assert!(!why.chars().any(char::is_control), "{why:?}");
        assert!(why.contains("more bytes)"), "{why}");
        assert!(why.contains("\\u{1b}"), "{why}");
        let report = ConfigReport {
            origin: Origin::Local,
            source: None,
            local_kind: "init",
            error: None,
            failure: None,
            assigned: None,
            last_known_good: None,
            disruption: None,
        };
        let cause = format!("{why}{}", "x".repeat(5000));
        let c = condition(&report, Some(&cause));
        assert!(c.reason.len() <= MAX_REASON_BYTES, "{}", c.reason.len());
        assert!(c.message.len() <= MAX_MESSAGE_BYTES);
        assert!(event_message(&c).len() <= MAX_EVENT_MESSAGE_BYTES);
        let status = config_status(&report, Some(&cause));
        assert!(status["error"].as_str().unwrap().len() <= MAX_REASON_BYTES);
        // Multi-byte characters are never split.
        let wide = "é".repeat(2000);
        let b = bounded(&wide, 1024);
        assert!(b.len() <= 1024 && b.ends_with("more bytes)"), "{b}");
        assert_eq!(bounded("short", 1024), "short");
        assert_eq!(excerpt("a\tb"), "\"a\\tb\"");
    }

    #[test]
    fn transition_time_moves_only_with_status_or_reason() {
        use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let mut n = Node::default();
        let old: Time = serde_json::from_value(json!("2020-01-01T00:00:00Z")).unwrap();
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: CONDITION_TYPE.into(),
                status: "True".into(),
                reason: Some("passing all checks".into()),
                message: Some("m".into()),
                last_transition_time: Some(old),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let same = Condition {
            status: ConditionStatus::True,
            reason: "passing all checks".into(),
            message: "m".into(),
            disruption: None,
            failure: None,
        };
        let p = status_patch(Some(&n), &same, &Value::Null, "2026-01-01T00:00:00Z");
        assert_eq!(
            p["status"]["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        assert_eq!(
            p["status"]["conditions"][0]["lastHeartbeatTime"],
            "2026-01-01T00:00:00Z"
        );
        assert!(shows_condition(&n, &same));
        let other_message = Condition {
            message: "m2".into(),
            ..same.clone()
        };
        assert!(!shows_condition(&n, &other_message));
        let p = status_patch(
            Some(&n),
            &other_message,
            &Value::Null,
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(
            p["status"]["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        let other_reason = Condition {
            reason: "crash loop".into(),
            ..same.clone()
        };
        let p = status_patch(
            Some(&n),
            &other_reason,
            &Value::Null,
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(
            p["status"]["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        let changed = Condition {
            status: ConditionStatus::False,
            ..same
        };
        let p = status_patch(Some(&n), &changed, &Value::Null, "2026-01-01T00:00:00Z");
        assert_eq!(
            p["status"]["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
    }
}
