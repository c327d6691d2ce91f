//! Counters and gauges of one supervisor, rendered in the Prometheus text
//! exposition format (version 0.0.4). The supervisor feeds every state
//! machine step through [`Metrics::observe`]; the syncer reports API
//! contact. Serving them over HTTP is `metrics_http`'s job.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::cluster::nodeconfig::{self, ConfigReport};
use crate::config::lifecycle::Origin;
use crate::observe::disruption_metrics::DisruptionMetrics;
use crate::pivot::contention::Contender;
use crate::pivot::holder::HolderRecord;
use crate::pivot::machine::{Input, Run, State, StopPurpose};
use crate::pivot::role::Rank;
use crate::pivot::state::StateDir;
use crate::version;

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

/// Why the kubelet was started again within one holder tenure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartReason {
    /// It exited on its own (crash or clean exit we did not ask for).
    Exited,
    /// The effective config changed.
    ConfigChanged,
    /// SIGHUP from the operator.
    Sighup,
}

impl RestartReason {
    const ALL: [RestartReason; 3] = [
        RestartReason::Exited,
        RestartReason::ConfigChanged,
        RestartReason::Sighup,
    ];

    fn label(self) -> &'static str {
        match self {
            RestartReason::Exited => "exited",
            RestartReason::ConfigChanged => "config_changed",
            RestartReason::Sighup => "sighup",
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

#[derive(Debug, Default)]
struct Counters {
    phase: Phase,
    kubelet_running: bool,
    acquisitions: u64,
    handoffs: [u64; HandoffReason::ALL.len()],
    takebacks: [u64; TakebackReason::ALL.len()],
    kubelet_starts: u64,
    restarts: [u64; RestartReason::ALL.len()],
    /// Set when the running kubelet is stopped or lost; counted as a
    /// restart when the next kubelet of the same tenure starts.
    pending_restart: Option<RestartReason>,
    config: Option<ConfigReport>,
    /// The syncer's current error (None = in sync or no API server).
    sync_error: Option<String>,
    last_sync: Option<SystemTime>,
}

/// What only the filesystem knows, read at scrape time (the node's state,
/// not this process's: another supervisor may hold the lock).
#[derive(Debug, Default)]
pub struct NodeView {
    pub holder: Option<HolderRecord>,
    pub bad_configs: Option<usize>,
}

impl NodeView {
    /// Reads the holder record and the bad-config list (blocking I/O).
    pub fn read(metrics: &Metrics) -> NodeView {
        let holder = HolderRecord::read(&metrics.state)
            .ok()
            .flatten()
            .filter(HolderRecord::is_live);
        let bad_configs = crate::config::store::Store::open_read_only(&metrics.store_dir)
            .bad_configs()
            .ok()
            .map(|b| b.len());
        NodeView {
            holder,
            bad_configs,
        }
    }
}

/// One supervisor's metrics. Cheap to update; shared with the HTTP task and
/// the syncer through an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    rank: Rank,
    state: StateDir,
    store_dir: PathBuf,
    counters: Mutex<Counters>,
    /// Drains, evictions, state files moved, held changes.
    pub disruption: DisruptionMetrics,
}

impl Metrics {
    pub fn new(rank: Rank, state: StateDir, store_dir: PathBuf) -> Metrics {
        Metrics {
            rank,
            state,
            store_dir,
            counters: Mutex::new(Counters::default()),
            disruption: DisruptionMetrics::default(),
        }
    }

    fn counters(&self) -> MutexGuard<'_, Counters> {
        // A panic while holding this lock leaves plain numbers behind;
        // they are still worth reporting.
        self.counters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records one step of the state machine: `before --input--> after`.
    pub fn observe(&self, before: &State, input: &Input, after: &State) {
        let mut c = self.counters();
        match (before, input, after) {
            (
                State::Holding(_),
                Input::Contended(contender),
                State::Stopping {
                    purpose: StopPurpose::Yield(_),
                    ..
                },
            ) => c.handoffs[index(&HandoffReason::ALL, HandoffReason::of(contender))] += 1,
            (_, Input::Acquired { .. } | Input::HolderAlive(_), State::Deferring { .. }) => {
                c.handoffs[index(&HandoffReason::ALL, HandoffReason::Deferred)] += 1
            }
            (State::Waiting, Input::Acquired { .. }, State::Holding(_)) => {
                c.acquisitions += 1;
                c.pending_restart = None;
            }
            (_, Input::KubeletStarted(_), State::Holding(Run::Running(_))) => {
                c.kubelet_starts += 1;
                if let Some(r) = c.pending_restart.take() {
                    c.restarts[index(&RestartReason::ALL, r)] += 1;
                }
            }
            (State::Holding(Run::Running(_)), Input::KubeletExited { .. }, State::Holding(_)) => {
                c.pending_restart = Some(RestartReason::Exited)
            }
            (
                _,
                _,
                State::Stopping {
                    purpose: StopPurpose::Restart,
                    ..
                },
            ) if c.pending_restart.is_none() => {
                // The driver names config restarts before it feeds Reload.
                c.pending_restart = Some(RestartReason::Sighup)
            }
            _ => {}
        }
        c.phase = Phase::of(after);
        c.kubelet_running = matches!(
            after,
            State::Holding(Run::Running(_)) | State::Stopping { .. }
        );
    }

    /// The next restart happens because the effective config changed.
    pub fn restart_for_config(&self) {
        self.counters().pending_restart = Some(RestartReason::ConfigChanged);
    }

    pub fn takeback(&self, why: TakebackReason) {
        self.counters().takebacks[index(&TakebackReason::ALL, why)] += 1;
    }

    /// What the kubelet runs now (published by the holder).
    pub fn config(&self, report: &ConfigReport) {
        self.counters().config = Some(report.clone());
    }

    /// A successful exchange with the API server (download or status report).
    pub fn synced(&self, at: SystemTime) {
        let mut c = self.counters();
        c.last_sync = Some(at);
    }

    pub fn sync_error(&self, err: Option<&str>) {
        self.counters().sync_error = err.map(str::to_string);
    }

    /// Renders the exposition text.
    pub fn render(&self, node: &NodeView) -> String {
        let c = self.counters();
        let mut x = Exposition::default();
        let me = format!(
            "role=\"{}\",generation=\"{}\"",
            self.rank.role, self.rank.generation
        );
        // The build, for a fleet-wide view of version skew (the holder record
        // and claims carry the same for `status` on one node).
        let version = format!(
            "{me},version=\"{}\",commit=\"{}\",protocol=\"{}\"",
            version::VERSION,
            version::GIT_COMMIT,
            version::PROTOCOL_VERSION
        );
        x.family("kubelet_pivot_info", GAUGE, "Identity of this supervisor.")
            .labeled(&version, 1);
        let phases = Phase::ALL.map(|p| (format!("{me},state=\"{}\"", p.label()), p == c.phase));
        x.family(
            "kubelet_pivot_state",
            GAUGE,
            "This supervisor's phase (1 for the current one).",
        )
        .each(phases.iter().map(|(l, on)| (l.as_str(), u64::from(*on))));
        let holding = matches!(c.phase, Phase::Holding | Phase::Stopping);
        x.family(
            "kubelet_pivot_holding",
            GAUGE,
            "1 while this supervisor holds the node's kubelet lock.",
        )
        .labeled(&me, u64::from(holding));
        let holder = node
            .holder
            .as_ref()
            .map(|h| format!("role=\"{}\",generation=\"{}\"", h.role, h.generation));
        x.family(
            "kubelet_pivot_lock_holder",
            GAUGE,
            "The supervisor that holds the node's kubelet lock, from its holder record (absent when none is live).",
        )
        .each(holder.as_deref().map(|l| (l, 1)));

        x.family(
            "kubelet_pivot_lock_acquisitions_total",
            COUNTER,
            "Times this supervisor took the lock and kept it.",
        )
        .value(c.acquisitions);
        x.family(
            "kubelet_pivot_handoffs_total",
            COUNTER,
            "Times this supervisor gave the lock to a contender, by reason.",
        )
        .by_reason(HandoffReason::ALL.map(HandoffReason::label), &c.handoffs);
        x.family(
            "kubelet_pivot_takebacks_total",
            COUNTER,
            "Times a handed-over lock was taken back because the contender never took it, by reason.",
        )
        .by_reason(TakebackReason::ALL.map(TakebackReason::label), &c.takebacks);
        x.family(
            "kubelet_pivot_kubelet_running",
            GAUGE,
            "1 while this supervisor's kubelet runs.",
        )
        .value(u64::from(c.kubelet_running));
        x.family(
            "kubelet_pivot_kubelet_starts_total",
            COUNTER,
            "Kubelets this supervisor started.",
        )
        .value(c.kubelet_starts);
        x.family(
            "kubelet_pivot_kubelet_restarts_total",
            COUNTER,
            "Kubelet restarts while holding the lock, by reason.",
        )
        .by_reason(RestartReason::ALL.map(RestartReason::label), &c.restarts);

        let config = c.config.as_ref().map(|report| {
            let cond = nodeconfig::condition(report, c.sync_error.as_deref());
            let (uid, rv) = report
                .source
                .as_ref()
                .map(|s| (s.uid.as_str(), s.resource_version.as_str()))
                .unwrap_or(("", ""));
            let origin = match report.origin {
                Origin::Local => report.local_kind.to_string(),
                o => o.to_string(),
            };
            format!(
                "origin=\"{}\",uid=\"{}\",resource_version=\"{}\",status=\"{}\"",
                escape(&origin),
                escape(uid),
                escape(rv),
                cond.status.as_str()
            )
        });
        x.family(
            "kubelet_pivot_config_info",
            GAUGE,
            "The config the kubelet runs: origin, source UID and resourceVersion, and the KubeletConfigOK status.",
        )
        .each(config.as_deref().map(|l| (l, 1)));
        x.family(
            "kubelet_pivot_bad_configs",
            GAUGE,
            "Configs marked bad in the checkpoint store (absent when the store cannot be read).",
        )
        .each(node.bad_configs.map(|n| ("", n as u64)));
        x.family(
            "kubelet_pivot_last_sync_timestamp_seconds",
            GAUGE,
            "Unix time of the last successful exchange with the API server (absent before the first).",
        );
        if let Some(t) = c.last_sync {
            let secs = t
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            let _ = writeln!(x.out, "kubelet_pivot_last_sync_timestamp_seconds {secs:.3}");
        }
        x.family(
            "kubelet_pivot_sync_error",
            GAUGE,
            "1 while the syncer cannot follow the node's config assignment.",
        )
        .value(u64::from(c.sync_error.is_some()));
        self.disruption.render(&mut x.out);
        x.out
    }
}

fn index<T: PartialEq + Copy>(all: &[T], x: T) -> usize {
    all.iter().position(|&y| y == x).unwrap_or(0)
}

const GAUGE: &str = "gauge";
const COUNTER: &str = "counter";

/// The text being built; `family` opens a metric family, the returned
/// [`Family`] writes its samples.
#[derive(Default)]
struct Exposition {
    out: String,
}

struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl Exposition {
    fn family(&mut self, name: &'static str, kind: &str, help: &str) -> Family<'_> {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        Family {
            out: &mut self.out,
            name,
        }
    }
}

impl Family<'_> {
    /// Samples with the given (already escaped) label sets; "" = no labels.
    fn each<'l>(self, samples: impl IntoIterator<Item = (&'l str, u64)>) {
        let name = self.name;
        for (labels, value) in samples {
            if labels.is_empty() {
                let _ = writeln!(self.out, "{name} {value}");
            } else {
                let _ = writeln!(self.out, "{name}{{{labels}}} {value}");
            }
        }
    }

    fn value(self, value: u64) {
        self.each([("", value)]);
    }

    fn labeled(self, labels: &str, value: u64) {
        self.each([(labels, value)]);
    }

    /// One sample per reason label, `values` in the same order.
    fn by_reason<const N: usize>(self, reasons: [&str; N], values: &[u64; N]) {
        let labels = reasons.map(|r| format!("reason=\"{r}\""));
        self.each(
            labels
                .iter()
                .map(String::as_str)
                .zip(values.iter().copied()),
        );
    }
}

/// Label value escaping of the text format: backslash, quote, newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::store::ConfigSource;
    use crate::kubelet::child::{ExitKind, Kubelet};
    use crate::pivot::machine::Deferral;
    use crate::pivot::role::Role;
    use std::time::{Duration, Instant};

    fn metrics() -> Metrics {
        Metrics::new(
            Rank::self_hosted(2),
            StateDir::at(std::path::Path::new("/nonexistent/lock")),
            PathBuf::from("/nonexistent/store"),
        )
    }

    fn kubelet() -> Kubelet {
        Kubelet {
            pid: 42,
            id: crate::pivot::procfs::ProcessId {
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
        let text = m.render(&NodeView::default());
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
        let text = m.render(&NodeView::default());
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
            assigned: None,
            last_known_good: None,
            disruption: None,
        });
        m.synced(UNIX_EPOCH + Duration::from_millis(1_500));
        let node = NodeView {
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
        };
        let text = m.render(&node);
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
            Some("1.500")
        );
        m.sync_error(Some("403"));
        let text = m.render(&node);
        assert!(text.contains("status=\"Unknown\""), "{text}");
        assert_eq!(
            value(&text, "kubelet_pivot_sync_error").as_deref(),
            Some("1")
        );
    }

    #[test]
    fn every_family_has_help_and_type_once() {
        let text = metrics().render(&NodeView::default());
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
