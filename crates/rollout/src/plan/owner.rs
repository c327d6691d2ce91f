//! One owner per node. Every rollout revision is an intent with a start time; of two
//! intents for one node the newer wins, and a newer one waits for an older one that has
//! not finished with its nodes (unless it is marked to supersede). A node record names
//! the rollout by name *and* UID, so a rollout deleted and created again is a new owner.
//!
//! Why this never ping-pongs: a rollout changes a node only when the node's record is
//! older than its own revision, and a change writes a record as new as the revision; so
//! after a newer rollout changed a node, an older one finds a newer record and leaves the
//! node alone, whatever its phase.

use std::collections::BTreeSet;
use std::time::SystemTime;

use super::super::nodeview::{NodeRecord, NodeView};

/// The annotation on a rollout that lets its revision take nodes from older rollouts that
/// have not finished (`"true"`).
pub const SUPERSEDE_ANNOTATION: &str = "kubelet-pivot.io/supersede";

/// Another rollout, as the controller's cache has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherRollout {
    pub name: String,
    pub uid: Option<String>,
    /// When its current revision started (None: none started).
    pub started: Option<SystemTime>,
    /// Still changing nodes (not Completed, Undone, Invalid nor waiting for nothing).
    pub active: bool,
    /// The nodes of its current revision.
    pub targets: BTreeSet<String>,
    /// Marked with [`SUPERSEDE_ANNOTATION`]: older rollouts leave its targets to it.
    pub supersedes: bool,
}

/// This rollout's identity and its current revision.
#[derive(Clone, Copy, Debug)]
pub struct Me<'a> {
    pub name: &'a str,
    pub uid: Option<&'a str>,
    pub revision: u32,
    pub started: Option<SystemTime>,
}

/// What a node is to this rollout's current revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeStanding<'a> {
    /// It carries this revision's record.
    Ours(&'a NodeRecord),
    /// Free to change.
    Free,
    /// A newer rollout changed it: it is not this revision's target any more.
    Superseded { by: String },
    /// An older rollout that has not finished owns it: wait for it.
    Blocked { by: String },
}

/// When the intent behind `record` started: its revision's start, else (records of older
/// builds) when it changed the node.
pub fn intent_of(record: &NodeRecord) -> Option<SystemTime> {
    record
        .started
        .as_deref()
        .and_then(kp_contract::time::parse)
        .or_else(|| kp_contract::time::parse(&record.at))
}

/// Whether `record` was written by `me`'s current revision: same name, revision and
/// UID; a record without a UID (an older build) counts only if it is not older than the
/// revision (a rollout re-created under the same name starts a new revision 1).
pub fn is_mine(record: &NodeRecord, me: &Me) -> bool {
    if record.rollout != me.name || record.revision != me.revision {
        return false;
    }
    match (record.uid.as_deref(), me.uid) {
        (Some(a), Some(b)) => a == b,
        _ => match (kp_contract::time::parse(&record.at), me.started) {
            (Some(at), Some(started)) => at >= started,
            _ => true,
        },
    }
}

fn same_rollout(other: &OtherRollout, record: &NodeRecord) -> bool {
    other.name == record.rollout
        && match (&other.uid, &record.uid) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
}

/// What `view` is to `me`.
pub fn claim<'a>(
    view: &'a NodeView,
    me: &Me,
    others: &[OtherRollout],
    supersede: bool,
) -> NodeStanding<'a> {
    if let Some(record) = view.record.as_ref() {
        if is_mine(record, me) {
            return NodeStanding::Ours(record);
        }
        let newer = match (intent_of(record), me.started) {
            (Some(theirs), Some(mine)) => theirs > mine,
            _ => false,
        };
        if newer {
            return NodeStanding::Superseded {
                by: record.rollout.clone(),
            };
        }
    }
    if let Some(newer) = others
        .iter()
        .find(|o| o.active && o.supersedes && !older(o, me) && o.targets.contains(&view.name))
    {
        // A newer rollout marked to supersede targets it: it is that one's to change.
        return NodeStanding::Superseded {
            by: newer.name.clone(),
        };
    }
    if supersede {
        return NodeStanding::Free;
    }
    let owner = others.iter().find(|o| {
        o.active
            && older(o, me)
            && (o.targets.contains(&view.name)
                || view.record.as_ref().is_some_and(|r| same_rollout(o, r)))
    });
    match owner {
        Some(o) => NodeStanding::Blocked { by: o.name.clone() },
        None => NodeStanding::Free,
    }
}

/// Whether `other`'s current revision started before `me`'s (ties: by name, so that of two
/// exactly simultaneous revisions exactly one waits).
fn older(other: &OtherRollout, me: &Me) -> bool {
    match (other.started, me.started) {
        (Some(o), Some(m)) if o != m => o < m,
        (Some(_), Some(_)) => other.name.as_str() < me.name,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn text(t: SystemTime) -> String {
        kp_contract::time::rfc3339(t)
    }

    fn record(rollout: &str, uid: Option<&str>, revision: u32, started: u64) -> NodeRecord {
        NodeRecord {
            rollout: rollout.into(),
            revision,
            previous: None,
            at: text(at(started + 1)),
            undone: false,
            uid: uid.map(str::to_string),
            started: Some(text(at(started))),
        }
    }

    fn view(record: Option<NodeRecord>) -> NodeView {
        NodeView {
            name: "n1".into(),
            resource_version: "1".into(),
            labels: BTreeMap::new(),
            assignment: None,
            status: None,
            condition: None,
            ready: true,
            unschedulable: false,
            record,
        }
    }

    fn me(name: &str, uid: &str, started: u64) -> Me<'static> {
        Me {
            name: Box::leak(name.to_string().into_boxed_str()),
            uid: Some(Box::leak(uid.to_string().into_boxed_str())),
            revision: 1,
            started: Some(at(started)),
        }
    }

    fn other(name: &str, uid: &str, started: u64, active: bool) -> OtherRollout {
        OtherRollout {
            name: name.into(),
            uid: Some(uid.into()),
            started: Some(at(started)),
            active,
            targets: BTreeSet::from(["n1".to_string()]),
            supersedes: false,
        }
    }

    #[test]
    fn a_newer_record_supersedes_an_older_rollout_whatever_its_phase() {
        let v = view(Some(record("r2", Some("u2"), 1, 100)));
        let r1 = me("r1", "u1", 10);
        assert_eq!(
            claim(&v, &r1, &[other("r2", "u2", 100, false)], false),
            NodeStanding::Superseded { by: "r2".into() }
        );
    }

    #[test]
    fn a_newer_rollout_takes_a_node_an_older_finished_one_changed() {
        let v = view(Some(record("r1", Some("u1"), 1, 10)));
        let r2 = me("r2", "u2", 100);
        assert_eq!(
            claim(&v, &r2, &[other("r1", "u1", 10, false)], false),
            NodeStanding::Free
        );
    }

    #[test]
    fn a_newer_rollout_waits_for_an_older_unfinished_one_unless_it_supersedes() {
        let untouched = view(None);
        let r2 = me("r2", "u2", 100);
        let r1 = [other("r1", "u1", 10, true)];
        assert_eq!(
            claim(&untouched, &r2, &r1, false),
            NodeStanding::Blocked { by: "r1".into() }
        );
        assert_eq!(claim(&untouched, &r2, &r1, true), NodeStanding::Free);
        // The older one is never blocked by the newer.
        let r1_me = me("r1", "u1", 10);
        assert_eq!(
            claim(&untouched, &r1_me, &[other("r2", "u2", 100, true)], false),
            NodeStanding::Free
        );
    }

    #[test]
    fn a_re_created_rollout_is_a_new_owner() {
        let v = view(Some(record("rx", Some("old"), 1, 10)));
        let again = me("rx", "new", 100);
        assert_eq!(claim(&v, &again, &[], false), NodeStanding::Free);
        // A record of an older build (no uid, no start) from before the revision started.
        let mut legacy = record("rx", None, 1, 10);
        legacy.started = None;
        assert!(!is_mine(&legacy, &again));
        let mut fresh = record("rx", None, 1, 200);
        fresh.started = None;
        assert!(is_mine(&fresh, &again));
    }

    #[test]
    fn our_own_record_is_ours() {
        let v = view(Some(record("r1", Some("u1"), 1, 10)));
        let r1 = me("r1", "u1", 10);
        assert!(matches!(claim(&v, &r1, &[], false), NodeStanding::Ours(_)));
    }
}
