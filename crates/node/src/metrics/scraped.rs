//! The supervisor's families computed at scrape time: the node's lock holder and bad
//! configs (read from the filesystem: the node's state, not this process's, since another
//! supervisor may hold the lock), the running config with its condition, and the last
//! exchange with the API server (absent before the first).

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
use crate::config::store::Store;
use crate::pivot::holder::HolderRecord;
use crate::pivot::state::StateDir;
use kp_contract::node_config;

/// What only the filesystem knows, read at scrape time.
#[derive(Debug, Default, Clone)]
pub struct DiskView {
    pub holder: Option<HolderRecord>,
    pub bad_configs: Option<usize>,
}

impl DiskView {
    /// Reads the live holder record and the bad-config list (blocking I/O).
    pub fn read(state: &StateDir, store_dir: &Path) -> DiskView {
        let holder = HolderRecord::read(state)
            .ok()
            .flatten()
            .filter(HolderRecord::is_live);
        let bad_configs = Store::open_read_only(store_dir)
            .bad_configs()
            .ok()
            .map(|b| b.len());
        DiskView {
            holder,
            bad_configs,
        }
    }
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
    holder: Option<RankLabels>,
    bad_configs: Option<u64>,
    config: Option<ConfigLabels>,
    last_sync: Option<f64>,
}

impl Scraped {
    pub(crate) fn new(node: &DiskView, tenure: &Tenure) -> Scraped {
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
        let last_sync = tenure.last_sync.map(|t| {
            t.duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0)
        });
        Scraped {
            holder,
            bad_configs: node.bad_configs.map(|n| n as u64),
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
        Ok(())
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
