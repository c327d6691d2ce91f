//! The supervisor's families computed at scrape time: the node's lock holder, whether its
//! kubelet runs, the bad configs, whether the assigned config is one of them and the
//! pending disruptive change (read from the filesystem: the node's state, not this
//! process's, since another supervisor may hold the lock), the running config with its
//! condition, and the last exchange with the API server (absent before the first). The
//! node-wide families carry a `node` label: every supervisor of a node reports the same
//! value, and alerts aggregate `by (node)`.

use std::path::Path;
use std::time::UNIX_EPOCH;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::labels::RankLabels;
use super::tenure::Tenure;
use crate::config::lifecycle::Origin;
use crate::config::store::{DisruptionRecord, DrainPhase, Store};
use crate::pivot::holder::HolderRecord;
use crate::pivot::state::StateDir;
use kp_contract::node_config;

/// What only the filesystem knows, read at scrape time.
#[derive(Debug, Default, Clone)]
pub struct DiskView {
    pub holder: Option<HolderRecord>,
    /// Whether the live holder's kubelet (as its record names it) is alive.
    pub kubelet_running: bool,
    pub bad_configs: Option<usize>,
    /// Whether the config assigned to the node is marked bad (None: the store cannot be
    /// read).
    pub assigned_bad: Option<bool>,
    /// The disruptive change waiting or in progress.
    pub pending: Option<PendingChange>,
}

/// A disruptive change as the store records it: its phase, when it was first seen
/// (`None`: a record without a readable time) and the drains tried for it.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingChange {
    pub phase: DrainPhase,
    pub since: Option<f64>,
    pub attempts: u32,
}

impl PendingChange {
    fn of(record: &DisruptionRecord) -> PendingChange {
        PendingChange {
            phase: record.phase,
            since: kp_contract::time::parse(&record.since).map(unix_seconds),
            attempts: record.attempts,
        }
    }
}

impl DiskView {
    /// Reads the live holder record and what the store says (blocking I/O).
    pub fn read(state: &StateDir, store_dir: &Path) -> DiskView {
        let holder = HolderRecord::read(state)
            .ok()
            .flatten()
            .filter(HolderRecord::is_live);
        let kubelet_running = holder
            .as_ref()
            .and_then(HolderRecord::kubelet)
            .is_some_and(|k| k.is_alive());
        let store = Store::open_read_only(store_dir);
        let bad = store.bad_configs().ok();
        let assigned_bad = match (&bad, store.assigned()) {
            (Some(bad), Ok(assigned)) => Some(assigned.is_some_and(|a| {
                bad.get(&a.uid)
                    .is_some_and(|e| e.resource_version == a.resource_version)
            })),
            _ => None,
        };
        let pending = store
            .disruption()
            .ok()
            .flatten()
            .map(|r| PendingChange::of(&r));
        DiskView {
            holder,
            kubelet_running,
            bad_configs: bad.map(|b| b.len()),
            assigned_bad,
            pending,
        }
    }
}

fn unix_seconds(t: std::time::SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PendingLabels {
    node: String,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfigLabels {
    origin: String,
    uid: String,
    resource_version: String,
    status: &'static str,
}

/// One scrape's values of these families.
#[derive(Debug)]
pub(crate) struct Scraped {
    node: NodeLabels,
    holder: Option<RankLabels>,
    kubelet_running: bool,
    bad_configs: Option<u64>,
    assigned_bad: Option<bool>,
    pending: Option<PendingChange>,
    config: Option<ConfigLabels>,
    last_sync: Option<f64>,
}

impl Scraped {
    pub(crate) fn new(node_name: &str, node: &DiskView, tenure: &Tenure) -> Scraped {
        let holder = node.holder.as_ref().map(|h| RankLabels {
            role: h.role.to_string(),
            generation: h.generation,
        });
        let config = tenure.config.as_ref().map(|report| {
            let cond = node_config::condition(report, tenure.sync_error.as_deref());
            let (uid, rv) = report
                .source
                .as_ref()
                .map(|s| (s.uid.clone(), s.resource_version.clone()))
                .unwrap_or_default();
            let origin = match report.origin {
                Origin::Local => report.local_kind.to_string(),
                o => o.to_string(),
            };
            ConfigLabels {
                origin,
                uid,
                resource_version: rv,
                status: cond.status.as_str(),
            }
        });
        let last_sync = tenure.last_sync.map(unix_seconds);
        Scraped {
            node: NodeLabels {
                node: node_name.to_string(),
            },
            holder,
            kubelet_running: node.kubelet_running,
            bad_configs: node.bad_configs.map(|n| n as u64),
            assigned_bad: node.assigned_bad,
            pending: node.pending.clone(),
            config,
            last_sync,
        }
    }
}

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "kubelet_pivot_lock_holder",
            "The supervisor that holds the node's kubelet lock, from its holder record (absent when none is live).",
            None,
            MetricType::Gauge,
        )?;
        if let Some(holder) = &self.holder {
            ConstGauge::new(1i64).encode(family.encode_family(holder)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "kubelet_pivot_config",
            "The config the kubelet runs: origin, source UID and resourceVersion, and the KubeletConfigOK status.",
            None,
            MetricType::Info,
        )?;
        if let Some(config) = &self.config {
            family.encode_info(config)?;
        }
        optional_gauge(
            &mut encoder,
            "kubelet_pivot_bad_configs",
            "Configs marked bad in the checkpoint store (absent when the store cannot be read).",
            self.bad_configs,
        )?;
        optional_gauge(
            &mut encoder,
            "kubelet_pivot_last_sync_timestamp_seconds",
            "Unix time of the last successful exchange with the API server (absent before the first).",
            self.last_sync,
        )?;
        self.encode_node(&mut encoder)
    }
}

impl Scraped {
    /// The node-wide families, labelled with the node's name.
    fn encode_node(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let node = &self.node;
        labelled_gauge(
            encoder,
            "kubelet_pivot_node_kubelet_running",
            "1 while the node's lock holder runs a kubelet (from its holder record), else 0.",
            Some((node, i64::from(self.kubelet_running))),
        )?;
        labelled_gauge(
            encoder,
            "kubelet_pivot_assigned_config_bad",
            "1 while the config assigned to the node is marked bad (refused or rolled back), else 0 (absent when the store cannot be read).",
            self.assigned_bad.map(|bad| (node, i64::from(bad))),
        )?;
        let pending = self.pending.as_ref().map(|p| {
            let labels = PendingLabels {
                node: node.node.clone(),
                phase: p.phase.as_str(),
            };
            (labels, p)
        });
        labelled_gauge(
            encoder,
            "kubelet_pivot_pending_change_since_timestamp_seconds",
            "Unix time the disruptive config change waiting or in progress was first seen, by phase (absent when none).",
            pending
                .as_ref()
                .and_then(|(l, p)| p.since.map(|since| (l, since))),
        )?;
        labelled_gauge(
            encoder,
            "kubelet_pivot_pending_change_attempts",
            "Drains tried for the disruptive config change waiting or in progress, by phase (absent when none).",
            pending
                .as_ref()
                .map(|(l, p)| (l, i64::from(p.attempts))),
        )
    }
}

/// A gauge family with one sample, labelled, left out while there is none.
fn labelled_gauge<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    sample: Option<(&L, impl EncodeGaugeValue)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    match sample {
        Some((labels, v)) => ConstGauge::new(v).encode(family.encode_family(labels)?),
        None => Ok(()),
    }
}

/// A gauge without labels, its sample left out while there is no `value`.
fn optional_gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<impl EncodeGaugeValue>,
) -> Result<(), std::fmt::Error> {
    let family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    match value {
        Some(v) => ConstGauge::new(v).encode(family),
        None => Ok(()),
    }
}
