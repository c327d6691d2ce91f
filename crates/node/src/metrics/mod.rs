//! Counters and gauges of one supervisor, kept with `prometheus-client` and written in
//! the format the scraper negotiated ([`Format`]). The supervisor feeds every state
//! machine step through [`Metrics::observe`]; the syncer reports API contact. What only
//! a scrape can know (the node's holder record and store, the running config's
//! condition) is [`scraped`]'s. Serving them over HTTP is [`http`]'s job.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

mod disruption;
pub mod http;
mod labels;
mod scraped;
mod tenure;

use crate::pivot::contention::Contender;
use crate::pivot::machine::{Input, Run, State, StopPurpose};
use crate::pivot::role::Rank;
use crate::pivot::state::StateDir;
use crate::version;
pub use disruption::{DisruptionMetrics, DrainResult, EvictionResult};
use kp_contract::node_config::ConfigReport;
use kp_runtime::exposition::{register_one, register_series, slot, Format};
pub use labels::RankLabels;
pub use scraped::DiskView;
use scraped::Scraped;
pub use tenure::RestartReason;
pub(crate) use tenure::Tenure;

/// Why this supervisor gave the lock away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffReason {
    /// A higher-generation supervisor was blocked on the lock.
    HigherGeneration,
    /// A process without a claim (a plain kubelet) was blocked on the lock.
    UnclaimedProcess,
    /// `--yield-on-any-open`: somebody opened the lock file.
    AnyOpen,
    /// We won flock, but a higher contender was blocked or about to block.
    Deferred,
}

impl HandoffReason {
    const ALL: [HandoffReason; 4] = [
        HandoffReason::HigherGeneration,
        HandoffReason::UnclaimedProcess,
        HandoffReason::AnyOpen,
        HandoffReason::Deferred,
    ];

    fn label(self) -> &'static str {
        match self {
            HandoffReason::HigherGeneration => "higher_generation",
            HandoffReason::UnclaimedProcess => "unclaimed_process",
            HandoffReason::AnyOpen => "any_open",
            HandoffReason::Deferred => "deferred_on_acquire",
        }
    }

    fn of(c: &Contender) -> HandoffReason {
        match c {
            Contender::Claimant { .. } => HandoffReason::HigherGeneration,
            Contender::Unclaimed { .. } => HandoffReason::UnclaimedProcess,
            Contender::AnyOpen => HandoffReason::AnyOpen,
            Contender::Holder { .. } => HandoffReason::Deferred,
        }
    }
}

/// Why a deferring supervisor took the lock back itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakebackReason {
    ContenderTimedOut,
    ContenderDied,
}

impl TakebackReason {
    const ALL: [TakebackReason; 2] = [
        TakebackReason::ContenderTimedOut,
        TakebackReason::ContenderDied,
    ];

    fn label(self) -> &'static str {
        match self {
            TakebackReason::ContenderTimedOut => "contender_timed_out",
            TakebackReason::ContenderDied => "contender_died",
        }
    }
}

/// The supervisor's phase, one-hot in `kubelet_pivot_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    #[default]
    Waiting,
    Deferring,
    Holding,
    Stopping,
    Exited,
}

impl Phase {
    const ALL: [Phase; 5] = [
        Phase::Waiting,
        Phase::Deferring,
        Phase::Holding,
        Phase::Stopping,
        Phase::Exited,
    ];

    fn of(s: &State) -> Phase {
        match s {
            State::Waiting => Phase::Waiting,
            State::Deferring { .. } => Phase::Deferring,
            State::Holding(_) => Phase::Holding,
            State::Stopping { .. } => Phase::Stopping,
            State::Exited(_) => Phase::Exited,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Deferring => "deferring",
            Phase::Holding => "holding",
            Phase::Stopping => "stopping",
            Phase::Exited => "exited",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    role: String,
    generation: u32,
    state: &'static str,
}

/// The build, for a fleet-wide view of version skew (the holder record and claims carry
/// the same for `status` on one node).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IdentityLabels {
    role: String,
    generation: u32,
    version: &'static str,
    commit: &'static str,
    protocol: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

fn reasons<const N: usize>(labels: [&'static str; N]) -> [ReasonLabels; N] {
    labels.map(|reason| ReasonLabels { reason })
}

/// The handles of the families this process updates as things happen.
#[derive(Debug)]
struct Series {
    phases: [Gauge; Phase::ALL.len()],
    holding: Gauge,
    acquisitions: Counter,
    handoffs: [Counter; HandoffReason::ALL.len()],
    takebacks: [Counter; TakebackReason::ALL.len()],
    kubelet_running: Gauge,
    kubelet_starts: Counter,
    restarts: [Counter; RestartReason::ALL.len()],
    sync_error: Gauge,
}

impl Series {
    /// Registers the families in exposition order (the scrape-time ones follow).
    fn register(registry: &mut Registry, rank: &Rank) -> Series {
        let me = RankLabels::of(rank);
        registry.register(
            "kubelet_pivot",
            "Identity of this supervisor",
            Info::new(IdentityLabels {
                role: me.role.clone(),
                generation: me.generation,
                version: version::VERSION,
                commit: version::GIT_COMMIT,
                protocol: version::PROTOCOL_VERSION,
            }),
        );
        let phases = register_series(
            registry,
            "kubelet_pivot_state",
            "This supervisor's phase (1 for the current one)",
            Phase::ALL.map(|p| StateLabels {
                role: me.role.clone(),
                generation: me.generation,
                state: p.label(),
            }),
        );
        let [holding] = register_series(
            registry,
            "kubelet_pivot_holding",
            "1 while this supervisor holds the node's kubelet lock",
            [me],
        );
        let acquisitions: Counter = register_one(
            registry,
            "kubelet_pivot_lock_acquisitions",
            "Times this supervisor took the lock and kept it",
        );
        let handoffs = register_series(
            registry,
            "kubelet_pivot_handoffs",
            "Times this supervisor gave the lock to a contender, by reason",
            reasons(HandoffReason::ALL.map(HandoffReason::label)),
        );
        let takebacks = register_series(
            registry,
            "kubelet_pivot_takebacks",
            "Times a handed-over lock was taken back because the contender never took it, by reason",
            reasons(TakebackReason::ALL.map(TakebackReason::label)),
        );
        let kubelet_running: Gauge = register_one(
            registry,
            "kubelet_pivot_kubelet_running",
            "1 while this supervisor's kubelet runs",
        );
        let kubelet_starts: Counter = register_one(
            registry,
            "kubelet_pivot_kubelet_starts",
            "Kubelets this supervisor started",
        );
        let restarts = register_series(
            registry,
            "kubelet_pivot_kubelet_restarts",
            "Kubelet restarts while holding the lock, by reason",
            reasons(RestartReason::ALL.map(RestartReason::label)),
        );
        let sync_error: Gauge = register_one(
            registry,
            "kubelet_pivot_sync_error",
            "1 while the syncer cannot follow the node's config assignment",
        );
        Series {
            phases,
            holding,
            acquisitions,
            handoffs,
            takebacks,
            kubelet_running,
            kubelet_starts,
            restarts,
            sync_error,
        }
    }
}

/// One supervisor's metrics. Cheap to update; shared with the HTTP task and the syncer
/// through an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    /// The node's name, the label of the node-wide families.
    node: String,
    state: StateDir,
    store_dir: PathBuf,
    registry: Registry,
    series: Series,
    tenure: Mutex<Tenure>,
    /// Drains, evictions, state files moved, held changes.
    pub disruption: DisruptionMetrics,
}

impl Metrics {
    pub fn new(rank: Rank, node: String, state: StateDir, store_dir: PathBuf) -> Metrics {
        let mut registry = Registry::default();
        let series = Series::register(&mut registry, &rank);
        let disruption = DisruptionMetrics::register(&mut registry);
        Metrics {
            node,
            state,
            store_dir,
            registry,
            series,
            tenure: Mutex::new(Tenure::default()),
            disruption,
        }
    }

    fn tenure(&self) -> MutexGuard<'_, Tenure> {
        // A panic while holding this lock leaves plain values behind; they are still
        // worth reporting.
        self.tenure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records one step of the state machine: `before --input--> after`.
    pub fn observe(&self, before: &State, input: &Input, after: &State) {
        let s = &self.series;
        let mut t = self.tenure();
        match (before, input, after) {
            (
                State::Holding(_),
                Input::Contended(contender),
                State::Stopping {
                    purpose: StopPurpose::Yield(_),
                    ..
                },
            ) => {
                s.handoffs[slot(&HandoffReason::ALL, HandoffReason::of(contender))].inc();
            }
            (_, Input::Acquired { .. } | Input::HolderAlive(_), State::Deferring { .. }) => {
                s.handoffs[slot(&HandoffReason::ALL, HandoffReason::Deferred)].inc();
            }
            (State::Waiting, Input::Acquired { .. }, State::Holding(_)) => {
                s.acquisitions.inc();
                t.pending_restart = None;
            }
            (_, Input::KubeletStarted(_), State::Holding(Run::Running(_))) => {
                s.kubelet_starts.inc();
                if let Some(r) = t.pending_restart.take() {
                    s.restarts[slot(&RestartReason::ALL, r)].inc();
                }
            }
            (State::Holding(Run::Running(_)), Input::KubeletExited { .. }, State::Holding(_)) => {
                t.pending_restart = Some(RestartReason::Exited)
            }
            (
                _,
                _,
                State::Stopping {
                    purpose: StopPurpose::Restart,
                    ..
                },
            ) if t.pending_restart.is_none() => {
                // The driver names config restarts before it feeds Reload.
                t.pending_restart = Some(RestartReason::Sighup)
            }
            _ => {}
        }
        let phase = Phase::of(after);
        for (p, gauge) in Phase::ALL.iter().zip(&s.phases) {
            gauge.set(i64::from(*p == phase));
        }
        s.holding
            .set(i64::from(matches!(phase, Phase::Holding | Phase::Stopping)));
        s.kubelet_running.set(i64::from(matches!(
            after,
            State::Holding(Run::Running(_)) | State::Stopping { .. }
        )));
    }

    /// The next restart happens because the effective config changed.
    pub fn restart_for_config(&self) {
        self.tenure().pending_restart = Some(RestartReason::ConfigChanged);
    }

    pub fn takeback(&self, why: TakebackReason) {
        self.series.takebacks[slot(&TakebackReason::ALL, why)].inc();
    }

    /// What the kubelet runs now (published by the holder).
    pub fn config(&self, report: &ConfigReport) {
        self.tenure().config = Some(report.clone());
    }

    /// A successful exchange with the API server (download or status report).
    pub fn synced(&self, at: SystemTime) {
        self.tenure().last_sync = Some(at);
    }

    pub fn sync_error(&self, err: Option<&str>) {
        let mut t = self.tenure();
        t.sync_error = err.map(str::to_string);
        self.series.sync_error.set(i64::from(err.is_some()));
    }

    /// Reads what only the filesystem knows (blocking I/O).
    pub fn node_view(&self) -> DiskView {
        DiskView::read(&self.state, &self.store_dir)
    }

    /// The text of every family in `format`, with `node` for the node's families.
    pub fn render(&self, node: &DiskView, format: Format) -> Result<String, std::fmt::Error> {
        let tenure = self.tenure();
        let mut scraped = Registry::default();
        scraped.register_collector(Box::new(Scraped::new(&self.node, node, &tenure)));
        format.encode(&[&self.registry, &scraped])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::lifecycle::Origin;
    use crate::config::store::ConfigSource;
    use crate::kubelet::child::{ExitKind, Kubelet};
    use crate::pivot::holder::HolderRecord;
    use crate::pivot::machine::Deferral;
    use crate::pivot::role::Role;
    use std::time::{Duration, Instant, UNIX_EPOCH};

    fn metrics() -> Metrics {
        Metrics::new(
            Rank::self_hosted(2),
            "node-a".to_string(),
            StateDir::at(std::path::Path::new("/nonexistent/lock")),
            PathBuf::from("/nonexistent/store"),
        )
    }

    fn kubelet() -> Kubelet {
        Kubelet {
            pid: 42,
            id: crate::procfs::ProcessId {
                pid: 42,
                start_time: 7,
            },
            started: Instant::now(),
        }
    }

    fn value(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find(|l| !l.starts_with('#') && l.rsplit_once(' ').map(|(s, _)| s) == Some(series))
            .and_then(|l| l.rsplit_once(' ').map(|(_, v)| v.to_string()))
    }

    #[test]
    fn handoffs_are_counted_by_reason() {
        let m = metrics();
        let running = State::Holding(Run::Running(kubelet()));
        let stopping = |c: Contender| State::Stopping {
            kubelet: kubelet(),
            purpose: StopPurpose::Yield(c),
            deadline: Instant::now(),
            killed: false,
        };
        let c = Contender::Claimant {
            rank: Rank::self_hosted(3),
            pid: 7,
        };
        m.observe(&running, &Input::Contended(c.clone()), &stopping(c));
        let u = Contender::Unclaimed { pid: 8 };
        m.observe(&running, &Input::Contended(u.clone()), &stopping(u));
        let deferring = State::Deferring {
            to: Contender::AnyOpen,
            since: Instant::now(),
            patience: Duration::from_secs(1),
        };
        let acquired = Input::Acquired {
            defer_to: Some(Deferral {
                to: Contender::AnyOpen,
                patience: Duration::from_secs(1),
            }),
        };
        m.observe(&State::Waiting, &acquired, &deferring);
        // A Contended input that does not stop us (already stopping) is no handoff.
        m.observe(
            &State::Waiting,
            &Input::Contended(Contender::AnyOpen),
            &State::Waiting,
        );
        let text = m.render(&DiskView::default(), Format::Text).unwrap();
        let h = |r: &str| {
            value(
                &text,
                &format!("kubelet_pivot_handoffs_total{{reason=\"{r}\"}}"),
            )
        };
        assert_eq!(h("higher_generation").as_deref(), Some("1"), "{text}");
        assert_eq!(h("unclaimed_process").as_deref(), Some("1"));
        assert_eq!(h("deferred_on_acquire").as_deref(), Some("1"));
        assert_eq!(h("any_open").as_deref(), Some("0"));
        assert_eq!(
            value(
                &text,
                "kubelet_pivot_state{role=\"self-hosted\",generation=\"2\",state=\"waiting\"}"
            )
            .as_deref(),
            Some("1")
        );
    }

    #[test]
    fn restarts_are_counted_with_their_cause() {
        let m = metrics();
        let running = State::Holding(Run::Running(kubelet()));
        let starting = State::Holding(Run::Starting);
        m.observe(
            &State::Waiting,
            &Input::Acquired { defer_to: None },
            &starting,
        );
        m.observe(&starting, &Input::KubeletStarted(kubelet()), &running);
        // Crash, then a new start.
        let backoff = State::Holding(Run::Backoff {
            until: Instant::now(),
            delay: Duration::from_millis(100),
        });
        m.observe(
            &running,
            &Input::KubeletExited {
                pid: 42,
                how: ExitKind::Code(1),
            },
            &backoff,
        );
        m.observe(&backoff, &Input::BackoffElapsed, &starting);
        m.observe(&starting, &Input::KubeletStarted(kubelet()), &running);
        // Config change.
        let restarting = State::Stopping {
            kubelet: kubelet(),
            purpose: StopPurpose::Restart,
            deadline: Instant::now(),
            killed: false,
        };
        m.restart_for_config();
        m.observe(&running, &Input::Reload, &restarting);
        m.observe(&restarting, &Input::KubeletStarted(kubelet()), &running);
        // SIGHUP.
        m.observe(&running, &Input::Reload, &restarting);
        m.observe(&restarting, &Input::KubeletStarted(kubelet()), &running);
        let text = m.render(&DiskView::default(), Format::Text).unwrap();
        let r = |r: &str| {
            value(
                &text,
                &format!("kubelet_pivot_kubelet_restarts_total{{reason=\"{r}\"}}"),
            )
        };
        assert_eq!(r("exited").as_deref(), Some("1"), "{text}");
        assert_eq!(r("config_changed").as_deref(), Some("1"));
        assert_eq!(r("sighup").as_deref(), Some("1"));
        assert_eq!(
            value(&text, "kubelet_pivot_kubelet_starts_total").as_deref(),
            Some("4")
        );
        assert_eq!(
            value(&text, "kubelet_pivot_lock_acquisitions_total").as_deref(),
            Some("1")
        );
        assert_eq!(
            value(&text, "kubelet_pivot_kubelet_running").as_deref(),
            Some("1")
        );
    }

    #[test]
    fn config_and_node_view_render_with_escaped_labels() {
        let m = metrics();
        let src = ConfigSource {
            namespace: "kubelet-config".into(),
            name: "c".into(),
            uid: "u\"1".into(),
            resource_version: "7".into(),
            kubelet_config_key: "kubelet".into(),
        };
        m.config(&ConfigReport {
            origin: Origin::Assigned,
            source: Some(src),
            local_kind: "init",
            error: None,
            failure: None,
            assigned: None,
            last_known_good: None,
            disruption: None,
        });
        m.synced(UNIX_EPOCH + Duration::from_millis(1_500));
        let node = DiskView {
            holder: Some(HolderRecord {
                role: Role::Bootstrap,
                generation: 0,
                pid: 1,
                start_time: 1,
                kubelet_pid: None,
                kubelet_start_time: None,
                since: String::new(),
                boot_id: None,
                lock_file: None,
                build: None,
            }),
            bad_configs: Some(2),
            kubelet_running: true,
            assigned_bad: Some(true),
            pending: Some(scraped::PendingChange {
                phase: crate::config::store::DrainPhase::BackingOff,
                since: Some(1_700_000_000.0),
                attempts: 3,
            }),
        };
        let text = m.render(&node, Format::Text).unwrap();
        let info = format!(
            "kubelet_pivot_info{{role=\"self-hosted\",generation=\"2\",version=\"{}\",commit=\"{}\",protocol=\"{}\"}} 1",
            version::VERSION,
            version::GIT_COMMIT,
            version::PROTOCOL_VERSION
        );
        assert!(text.contains(&info), "{text}");
        assert!(
            text.contains("kubelet_pivot_config_info{origin=\"assigned\",uid=\"u\\\"1\",resource_version=\"7\",status=\"True\"} 1"),
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                "kubelet_pivot_lock_holder{role=\"bootstrap\",generation=\"0\"}"
            )
            .as_deref(),
            Some("1")
        );
        assert_eq!(
            value(&text, "kubelet_pivot_bad_configs").as_deref(),
            Some("2")
        );
        assert_eq!(
            value(&text, "kubelet_pivot_last_sync_timestamp_seconds").as_deref(),
            Some("1.5")
        );
        for (series, want) in [
            ("kubelet_pivot_node_kubelet_running{node=\"node-a\"}", "1"),
            ("kubelet_pivot_assigned_config_bad{node=\"node-a\"}", "1"),
            (
                "kubelet_pivot_pending_change_since_timestamp_seconds{node=\"node-a\",phase=\"backing-off\"}",
                "1700000000.0",
            ),
            (
                "kubelet_pivot_pending_change_attempts{node=\"node-a\",phase=\"backing-off\"}",
                "3",
            ),
        ] {
            assert_eq!(value(&text, series).as_deref(), Some(want), "{series} in {text}");
        }
        // Nothing pending, the store unreadable: the samples are left out, not 0.
        let empty = m.render(&DiskView::default(), Format::Text).unwrap();
        assert!(
            !empty.contains("kubelet_pivot_pending_change_attempts{"),
            "{empty}"
        );
        assert!(
            !empty.contains("kubelet_pivot_assigned_config_bad{"),
            "{empty}"
        );
        assert!(
            empty.contains("kubelet_pivot_node_kubelet_running{node=\"node-a\"} 0"),
            "{empty}"
        );
        m.sync_error(Some("403"));
        let text = m.render(&node, Format::Text).unwrap();
        assert!(text.contains("status=\"Unknown\""), "{text}");
        assert_eq!(
            value(&text, "kubelet_pivot_sync_error").as_deref(),
            Some("1")
        );
    }

    /// Every family as docs/reference.md's table and dashboards know it (text format 0.0.4):
    /// name, type, HELP.
    const FAMILIES: [(&str, &str, &str); 24] = [
        ("kubelet_pivot_info", "gauge", "Identity of this supervisor."),
        ("kubelet_pivot_state", "gauge", "This supervisor's phase (1 for the current one)."),
        ("kubelet_pivot_holding", "gauge", "1 while this supervisor holds the node's kubelet lock."),
        ("kubelet_pivot_lock_holder", "gauge", "The supervisor that holds the node's kubelet lock, from its holder record (absent when none is live)."),
        ("kubelet_pivot_lock_acquisitions_total", "counter", "Times this supervisor took the lock and kept it."),
        ("kubelet_pivot_handoffs_total", "counter", "Times this supervisor gave the lock to a contender, by reason."),
        ("kubelet_pivot_takebacks_total", "counter", "Times a handed-over lock was taken back because the contender never took it, by reason."),
        ("kubelet_pivot_kubelet_running", "gauge", "1 while this supervisor's kubelet runs."),
        ("kubelet_pivot_kubelet_starts_total", "counter", "Kubelets this supervisor started."),
        ("kubelet_pivot_kubelet_restarts_total", "counter", "Kubelet restarts while holding the lock, by reason."),
        ("kubelet_pivot_config_info", "gauge", "The config the kubelet runs: origin, source UID and resourceVersion, and the KubeletConfigOK status."),
        ("kubelet_pivot_bad_configs", "gauge", "Configs marked bad in the checkpoint store (absent when the store cannot be read)."),
        ("kubelet_pivot_last_sync_timestamp_seconds", "gauge", "Unix time of the last successful exchange with the API server (absent before the first)."),
        ("kubelet_pivot_sync_error", "gauge", "1 while the syncer cannot follow the node's config assignment."),
        ("kubelet_pivot_node_kubelet_running", "gauge", "1 while the node's lock holder runs a kubelet (from its holder record), else 0."),
        ("kubelet_pivot_assigned_config_bad", "gauge", "1 while the config assigned to the node is marked bad (refused or rolled back), else 0 (absent when the store cannot be read)."),
        ("kubelet_pivot_pending_change_since_timestamp_seconds", "gauge", "Unix time the disruptive config change waiting or in progress was first seen, by phase (absent when none)."),
        ("kubelet_pivot_pending_change_attempts", "gauge", "Drains tried for the disruptive config change waiting or in progress, by phase (absent when none)."),
        ("kubelet_pivot_drains_total", "counter", "Drains for disruptive kubelet config changes, by result."),
        ("kubelet_pivot_evictions_total", "counter", "Eviction requests of drains, by answer (blocked = 429 from a PodDisruptionBudget)."),
        ("kubelet_pivot_state_files_moved_total", "counter", "Kubelet resource-manager checkpoints moved aside before a start with a config they contradict."),
        ("kubelet_pivot_held_changes_total", "counter", "Config changes held because they need a new node (RollRequired)."),
        ("kubelet_pivot_change_held", "gauge", "1 while a config change is held (RollRequired)."),
        ("kubelet_pivot_draining", "gauge", "1 while this node is being drained for a config change."),
    ];

    fn metadata(text: &str) -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|l| l.starts_with("# HELP ") || l.starts_with("# TYPE "))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_readme_names_every_family() {
        let readme = include_str!("../../../../docs/reference.md");
        for (name, _, _) in FAMILIES {
            assert!(
                readme.contains(&format!("`{name}")),
                "docs/reference.md lacks {name}"
            );
        }
    }

    #[test]
    fn names_types_and_help_stay_what_they_were() {
        let text = metrics()
            .render(&DiskView::default(), Format::Text)
            .unwrap();
        let want = FAMILIES
            .iter()
            .flat_map(|(name, kind, help)| {
                [
                    format!("# HELP {name} {help}"),
                    format!("# TYPE {name} {kind}"),
                ]
            })
            .collect();
        assert_eq!(metadata(&text), want, "{text}");
        // OpenMetrics: the same families, counters typed without `_total`, the two
        // identity gauges as info metrics.
        let om = metrics()
            .render(&DiskView::default(), Format::OpenMetrics)
            .unwrap();
        let want = FAMILIES
            .iter()
            .flat_map(|(name, kind, help)| {
                let (name, kind) = match (*name, *kind) {
                    (n, "counter") => (n.trim_end_matches("_total"), "counter"),
                    (n, _) if n.ends_with("_info") => (n.trim_end_matches("_info"), "info"),
                    (n, k) => (n, k),
                };
                [
                    format!("# HELP {name} {help}"),
                    format!("# TYPE {name} {kind}"),
                ]
            })
            .collect();
        assert_eq!(metadata(&om), want, "{om}");
        assert!(om.ends_with("# EOF\n"), "{om}");
    }

    #[test]
    fn every_family_has_help_and_type_once() {
        let text = metrics()
            .render(&DiskView::default(), Format::Text)
            .unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for l in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let name = l.split(' ').nth(2).unwrap();
            assert!(seen.insert(name.to_string()), "{name} twice");
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "{name} lacks HELP"
            );
        }
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(seen.contains(name), "sample {name} without TYPE");
        }
    }
}
