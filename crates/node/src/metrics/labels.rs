//! The labels of a supervisor's own series.

use prometheus_client::encoding::EncodeLabelSet;

use crate::pivot::role::Rank;

/// Role and generation of a supervisor, the labels of its own series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RankLabels {
    pub role: String,
    pub generation: u32,
}

impl RankLabels {
    pub fn of(rank: &Rank) -> RankLabels {
        RankLabels {
            role: rank.role.to_string(),
            generation: rank.generation,
        }
    }
}
