//! Status conditions as the API's own controllers update them.

use serde_json::Value;

/// Sets the condition of `fresh`'s type in `conditions`: added if absent, replaced if its
/// status changed (so that `lastTransitionTime` moves with the status only), else only the
/// `refreshed` fields are taken from `fresh`.
pub(crate) fn set_condition(conditions: &mut Vec<Value>, fresh: Value, refreshed: &[&str]) {
    match conditions.iter_mut().find(|c| c["type"] == fresh["type"]) {
        Some(existing) if existing["status"] == fresh["status"] => {
            for field in refreshed {
                existing[*field] = fresh[*field].clone();
            }
        }
        Some(existing) => *existing = fresh,
        None => conditions.push(fresh),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_condition_is_added_replaced_on_a_new_status_and_else_refreshed() {
        let mut conditions = vec![json!({"type": "Other", "status": "True"})];
        let first = json!({"type": "Ready", "status": "True", "reason": "A", "message": "a", "lastTransitionTime": "t1"});
        set_condition(&mut conditions, first.clone(), &["reason"]);
        assert_eq!(
            conditions,
            [json!({"type": "Other", "status": "True"}), first]
        );

        // Same status: only the refreshed fields change, the transition time stays.
        let same = json!({"type": "Ready", "status": "True", "reason": "B", "message": "b", "lastTransitionTime": "t2"});
        set_condition(&mut conditions, same, &["reason"]);
        assert_eq!(conditions[1]["reason"], "B");
        assert_eq!(conditions[1]["message"], "a");
        assert_eq!(conditions[1]["lastTransitionTime"], "t1");

        // Another status: replaced whole.
        let flipped = json!({"type": "Ready", "status": "False", "reason": "C", "message": "c", "lastTransitionTime": "t3"});
        set_condition(&mut conditions, flipped.clone(), &["reason"]);
        assert_eq!(conditions[1], flipped);
        assert_eq!(conditions.len(), 2);
    }
}
