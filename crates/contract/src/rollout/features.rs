//! What the rollout controller holding the Lease understands, so that a `rollout start`
//! that relies on a newer spec field is not acted on by an older controller that would
//! ignore it (an older controller ignores `nodeSelectorExpressions` and would roll to
//! every node `nodeSelector` alone matches).
//!
//! The holder writes [`CONTROLLER_FEATURES_ANNOTATION`] on the Lease each time it takes
//! it, naming itself: an older controller that takes the Lease over keeps the annotation
//! (it replaces the Lease it read) but not the name, so the record no longer applies.

use serde::{Deserialize, Serialize};

/// The Lease annotation: `{"holder": IDENTITY, "features": [...]}`.
pub const CONTROLLER_FEATURES_ANNOTATION: &str = "kubelet-pivot.io/controller-features";

/// The spec fields beyond the first release's that this build's controller follows.
pub const CONTROLLER_FEATURES: &[&str] = &[FEATURE_SELECTOR_EXPRESSIONS];

/// `spec.nodeSelectorExpressions` (issue 34).
pub const FEATURE_SELECTOR_EXPRESSIONS: &str = "nodeSelectorExpressions";

/// The annotation's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerFeatures {
    /// The holder identity that wrote it.
    pub holder: String,
    pub features: Vec<String>,
}

impl ControllerFeatures {
    /// This build's record for `holder`, as the annotation's text.
    pub fn annotation_for(holder: &str) -> String {
        let record = ControllerFeatures {
            holder: holder.to_string(),
            features: CONTROLLER_FEATURES.iter().map(|f| f.to_string()).collect(),
        };
        serde_json::to_string(&record).unwrap_or_default()
    }

    /// Whether the Lease's current `holder` wrote `annotation` and follows `feature`
    /// (an unreadable annotation, or one another holder wrote, says no).
    pub fn holder_follows(annotation: Option<&str>, holder: &str, feature: &str) -> bool {
        annotation
            .and_then(|text| serde_json::from_str::<ControllerFeatures>(text).ok())
            .is_some_and(|r| r.holder == holder && r.features.iter().any(|f| f == feature))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_holder_that_wrote_the_record_is_taken_at_its_word() {
        let text = ControllerFeatures::annotation_for("ctl-new");
        let f = FEATURE_SELECTOR_EXPRESSIONS;
        assert!(ControllerFeatures::holder_follows(
            Some(&text),
            "ctl-new",
            f
        ));
        assert!(!ControllerFeatures::holder_follows(
            Some(&text),
            "ctl-old",
            f
        ));
        assert!(!ControllerFeatures::holder_follows(
            Some(&text),
            "ctl-new",
            "other"
        ));
        assert!(!ControllerFeatures::holder_follows(None, "ctl-new", f));
        assert!(!ControllerFeatures::holder_follows(Some("{"), "ctl-new", f));
    }
}
