//! The driver: one select loop per supervisor that turns kernel events
//! (signals, flock results, inotify hints, timers) into `pivot::Input`s and
//! carries out the `pivot::Effect`s. The decisions live in pure machines
//! (`pivot::machine`, `pivot::contention`, `pivot::takeover`,
//! `disrupt::decide`, `config::lifecycle::verdict`); this module does the
//! I/O around them.
//!
//! The `Driver` is the pivot machine plus parts that each own their state,
//! unit-tested alone: the lock side (`lock_side`: lock file descriptions,
//! the takeover lock, a replaced file's clocks), contention (`contention`:
//! when to look at the contenders again, whom not to yield to), the config
//! side (`config::side`: store, API, syncer, prepared start, config check
//! timers, crash count), the disruption (`disrupt`: the change waiting or in
//! progress and its task) and fencing (`fencing`: stopped supervisors, the
//! holder's pidfds). The `impl Driver` blocks in the other files wire these
//! parts to the kernel and to each other.

mod acquire;
mod config;
mod contention;
mod disrupt;
mod due;
mod effects;
mod fencing;
mod holder_watch;
mod lock_check;
mod lock_side;
mod precise;
mod status;
mod takeover;

pub use disrupt::DisruptionOptions;
pub use lock_check::EXIT_LOCK_MISMATCH;

use acquire::begin_acquire;
use config::{join_opt, ConfigSide};
use contention::{Contention, Look};
use disrupt::TaskDone;
use fencing::Fencing;
use lock_side::LockSide;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use nix::sys::signal::Signal;
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_tokio::Signals;
use tokio::sync::oneshot;
use tracing::{debug, error, info, warn};

use crate::cluster::api::{Api, ApiStatus, ClientError};
use crate::cluster::lock_condition::LockCondition;
use crate::cluster::sync::Syncer;
use crate::config::lifecycle::{self, Access, LocalConfig, Resolved};
use crate::config::prepared::Prepared;
use crate::config::store::{Store, StoreError};
use crate::kubelet::child::{self, Backoff, KubeletCommand};
use crate::metrics::http::{self as metrics_http, MetricsError};
use crate::metrics::{Metrics, TakebackReason};
use crate::observe::notify::Notifier;
use crate::pivot::claims::{self, Claim, ClaimError, ClaimGuard, Cleanup, LiveClaim};
use crate::pivot::contention::Skips;
use crate::pivot::contention::{judge, Contender, Verdict};
use crate::pivot::fence::{self, NotProven};
use crate::pivot::holder::HolderRecord;
use crate::pivot::lock::{self, LockError, LockFile};
use crate::pivot::machine::{
    Deferral, Effect, Input, MachineSettings, Pivot, Run, State, StopPurpose,
};
use crate::pivot::role::Rank;
use crate::pivot::state::StateDir;
use crate::pivot::takeover::{TakeoverLock, STOPPED_PATIENCE};
use crate::pivot::watch::{Hint, Watcher};
use crate::procfs::{self, ProcessId};
use crate::safefs::trust::TrustError;
use crate::signals::{Debounce, TerminateFlag};
use kp_contract::node_config::ConfigReport;
use kp_contract::time::now_rfc3339;

/// Cadence of group/handover polls (events usually come first).
const SLOW_RECHECK: Duration = Duration::from_millis(5);
/// A deferring supervisor takes the lock back after this long if the
/// contender it deferred to (blocked in flock when we released) never took
/// it. A live contender blocked in flock holds the lock microseconds after
/// the release; this bounds the time without a kubelet a stuck one costs
/// (well inside the 1 s of I2, spawn included).
const DEFER_TIMEOUT: Duration = Duration::from_millis(400);
/// A supervisor that wins flock while a higher claim exists whose owner is
/// not blocked yet (it is between writing its claim and calling flock)
/// gives it this long; short enough that a stuck claimant costs less than
/// the 1 s availability budget.
const PENDING_DEFER: Duration = Duration::from_millis(500);
/// While blocked in flock: how often to check that the recorded holder is
/// alive (a dead holder's leftovers may keep the lock held), when its exit
/// cannot be watched (pidfds; see `holder_watch`) or it runs no kubelet.
const DEAD_HOLDER_CHECK: Duration = Duration::from_millis(100);
/// Status line prefix while another process holds the lock.
const STANDING_BY: &str = "standing by: ";
/// Status line while the lock's holder is not known (no live record).
const STANDING_BY_UNKNOWN: &str = "standing by: lock held by another process";
/// Distinct problems reported (each once); a bound on memory.
const MAX_REPORTED: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("cannot register this supervisor's claim in state directory {dir}: {source}")]
    Claim {
        dir: PathBuf,
        #[source]
        source: ClaimError,
    },
    #[error("refusing to start: {0}")]
    State(#[source] TrustError),
    #[error("cannot read this process's identity from /proc: {0}; is /proc mounted?")]
    Proc(#[source] std::io::Error),
    #[error("cannot open the takeover lock in the state directory: {0}")]
    Takeover(#[source] std::io::Error),
    #[error("refusing to start: {0}")]
    HostPaths(String),
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    #[error("cannot open the checkpoint store: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Api(#[from] ClientError),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
}

/// What a supervisor needs to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub rank: Rank,
    pub lock_path: PathBuf,
    /// Where the holder record and the claims live (a trusted directory).
    pub state_dir: PathBuf,
    pub stop_timeout: Duration,
    pub exit_on_yield: bool,
    pub yield_on_any_open: bool,
    pub force_poll: bool,
    pub kubelet: KubeletCommand,
    /// The dynamic-config checkpoint directory.
    pub store_dir: PathBuf,
    /// The validated local config (init file or defaults).
    pub local: LocalConfig,
    /// `--kubeconfig`; without it, in-cluster config if present, else
    /// local-only mode.
    pub kubeconfig: Option<PathBuf>,
    pub node_name: String,
    /// `--metrics-address`: serve Prometheus metrics there.
    pub metrics_address: Option<SocketAddr>,
    /// What config changes of each class do; drain knobs; the kubelet's root dir.
    pub disruption: DisruptionOptions,
    /// Set by SIGTERM/SIGINT from the first instant of the process on.
    pub terminate: TerminateFlag,
}

/// Why the loop woke up.
enum Wake {
    Signal(i32),
    Acquired(Result<Instant, LockError>),
    Hint(Hint),
    BackoffElapsed,
    StopDeadline,
    Recheck,
    /// A look at the contenders is due (the precise timer).
    Look(Look),
    ReloadDue,
    Prepared(Option<Box<Prepared>>),
    Disruption(Option<TaskDone>),
    Watchdog,
    /// The recorded holder's supervisor or kubelet exited (pidfd).
    HolderExited,
    /// A pending config step is due: a trial's end, a drain's retry.
    ConfigDue,
    /// The config check `SETTLE_CHECK` after a kubelet start.
    SettleDue,
    /// The next kubelet start may be prepared (anew).
    PrepareDue,
    /// A new API client (credentials appeared or rotated) or API status.
    ApiChanged,
}

/// How far a waiter looks at the holder (see `Driver::fence_dead_holder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HolderLook {
    /// On an event (the holder's or its kubelet's exit, a changed record or
    /// claim): what a dead holder left is fenced from /proc/PID/fdinfo, and
    /// /proc/locks is not read. These events come at the very moment the
    /// lock is being released, and a read of /proc/locks blocks that release.
    Quick,
    /// The timed look (every `DEAD_HOLDER_CHECK`): also who holds the lock,
    /// from /proc/locks (a stopped supervisor, a leftover of another taker).
    Full,
}

/// The supervisor: the pivot state machine and the parts that each own
/// their state (the lock side, contention, config, disruption, fencing).
struct Driver {
    opts: Options,
    me: ProcessId,
    state: StateDir,
    claim: ClaimGuard,
    pivot: Pivot,
    watcher: Watcher,
    notifier: Notifier,
    metrics: Arc<Metrics>,
    /// When this supervisor last took the lock (its holder record says so).
    holder_since_time: std::time::SystemTime,
    /// SIGHUPs not acted on yet (a burst restarts the kubelet once).
    reload: Debounce,
    last_status: String,
    /// Problems already reported (each is reported once).
    reported: Reported,
    /// The lock file, the kubelet's inherited one, the takeover lock.
    lock: LockSide,
    /// The clocks of a holder's looks at its contenders.
    contention: Contention,
    /// The config of the running (or next) kubelet, its checks and the syncer.
    config: ConfigSide,
    /// The disruptive change waiting or in progress, and its task.
    disruption: disrupt::Disruption,
    /// What fencing a previous holder's leftovers remembers.
    fencing: Fencing,
}

/// Problems reported once each (rejected claim files, fencing refusals),
/// at most [`MAX_REPORTED`] of them: a bound on memory.
#[derive(Default)]
struct Reported(std::collections::HashSet<String>);

impl Reported {
    /// Whether `line` is reported for the first time (then: log it).
    fn first(&mut self, line: &str) -> bool {
        self.0.len() < MAX_REPORTED && self.0.insert(line.to_string())
    }
}

/// Runs blocking store I/O off the async loop.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => Some(v),
        Err(err) => {
            error!(%err, "store task failed");
            None
        }
    }
}

async fn recv_opt<T>(rx: &mut Option<oneshot::Receiver<T>>) -> Option<T> {
    match rx.as_mut() {
        Some(r) => r.await.ok(),
        None => std::future::pending().await,
    }
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// A change of the API client or status (never, without an API).
async fn api_changed(
    rx: &mut Option<(
        tokio::sync::watch::Receiver<Option<crate::cluster::api::Published>>,
        tokio::sync::watch::Receiver<ApiStatus>,
    )>,
) {
    let Some((clients, status)) = rx.as_mut() else {
        return std::future::pending().await;
    };
    let changed = tokio::select! {
        r = clients.changed() => r,
        r = status.changed() => r,
    };
    if changed.is_err() {
        // The follower is gone: nothing more changes.
        *rx = None;
    }
}

async fn tick_opt(iv: &mut Option<tokio::time::Interval>) {
    match iv.as_mut() {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Runs a supervisor until it exits; returns the process exit code.
pub async fn run(opts: Options) -> Result<i32, SupervisorError> {
    let me = procfs::self_id().map_err(SupervisorError::Proc)?;
    if let Err(err) = nix::sys::prctl::set_child_subreaper(true) {
        warn!(%err, "cannot become a child subreaper; orphaned kubelet helpers go to init");
    }
    if let Err(err) = lock_check::host_paths(&opts).and_then(|()| {
        lock::check_dir(&opts.lock_path, lock_check::missing_dir(&opts)).map_err(Into::into)
    }) {
        // Said on the Node too, where the credentials are at hand.
        if let Ok(Some(api)) = Api::start(opts.kubeconfig.as_ref(), true).await {
            let client = api.current().map(|p| p.client);
            let message = format!("{} refuses to start: {err}", opts.rank);
            lock_check::report(client, &opts.node_name, LockCondition::Mismatch, &message).await;
        }
        return Err(err);
    }
    lock::prepare(&opts.lock_path)?;
    let state = StateDir::open(&opts.state_dir).map_err(SupervisorError::State)?;
    let takeover = TakeoverLock::open(&state).map_err(SupervisorError::Takeover)?;
    // Everything that takes time happens before we announce ourselves: from
    // the claim on, a holder is waiting for us to block in flock.
    let store = Store::open(&opts.store_dir)?;
    let api = Api::start(opts.kubeconfig.as_ref(), opts.force_poll).await?;
    match api.as_ref().map(Api::current) {
        Some(Some(_)) => {
            info!(node = %opts.node_name, "API server configured: the node's config assignment is followed")
        }
        // Said by `Api::start` (waiting for the kubeconfig).
        Some(None) => {}
        None => info!("no API server configured: local-only mode"),
    }
    let mut api_changes = api.as_ref().map(|a| (a.subscribe(), a.status_changes()));
    let metrics = Arc::new(Metrics::new(
        opts.rank,
        opts.node_name.clone(),
        state.clone(),
        opts.store_dir.clone(),
    ));
    if let Some(addr) = opts.metrics_address {
        metrics_http::start(addr, metrics.clone()).await?;
    }
    let mut signals =
        Signals::new([SIGTERM, SIGINT, SIGHUP, SIGCHLD]).map_err(SupervisorError::Signals)?;
    if opts.terminate.is_set() {
        // SIGTERM came during start-up (the early handler kept it): no claim,
        // no lock, no kubelet.
        info!("termination requested during start-up; exiting before taking the lock");
        return Ok(0);
    }
    let pivot = Pivot::new(
        MachineSettings {
            stop_timeout: opts.stop_timeout,
            exit_on_yield: opts.exit_on_yield,
            defer_timeout: DEFER_TIMEOUT,
        },
        Backoff::default(),
    );
    // One lock file per node: decided under the takeover lock, which is
    // held until our claim (naming our lock file) is on disk.
    let (checked, takeover_guard) = lock_check::check(&opts, &state, &takeover, me).await?;
    // The condition is reported with the credentials at hand (none while
    // the kubeconfig is still to be written).
    let client = api.as_ref().and_then(Api::current).map(|p| p.client);
    let our_lock = match checked {
        lock_check::Checked::Go(lock) => lock,
        lock_check::Checked::Refused(message) => {
            lock_check::report(
                client.clone(),
                &opts.node_name,
                LockCondition::Mismatch,
                &message,
            )
            .await;
            return Ok(lock_check::EXIT_LOCK_MISMATCH);
        }
    };
    if lock_check::clear_refusal(&state) {
        let message = format!("{} started with the node's lock file {our_lock}", opts.rank);
        let (client, node) = (client.clone(), opts.node_name.clone());
        tokio::spawn(async move {
            lock_check::report(client, &node, LockCondition::Agreed, &message).await;
        });
    }
    let claim = ClaimGuard::create(
        &state,
        Claim {
            role: opts.rank.role,
            generation: opts.rank.generation,
            pid: me.pid,
            start_time: me.start_time,
            since: now_rfc3339(),
            build: Some(crate::version::BuildInfo::current()),
            lock: Some(our_lock),
        },
    )
    .map_err(|source| SupervisorError::Claim {
        dir: state.claims_dir(),
        source,
    })?;
    drop(takeover_guard);
    // Open (the event a holder sees) and block in flock right away.
    let lock = LockFile::open(&opts.lock_path)?;
    let acquiring = begin_acquire(&lock)?;
    let mut watcher = Watcher::new(
        &opts.lock_path,
        &state,
        Some(&store.meta_path()),
        opts.force_poll,
    );
    if let Some(dir) = &opts.local.config_dir {
        watcher.watch_config_dir(dir, crate::config::config_dir::MAX_DEPTH);
    }
    info!(rank = %opts.rank, pid = me.pid, lock = %opts.lock_path.display(), watch = %watcher.mode(), "supervisor starting");
    let mut d = Driver {
        opts,
        me,
        state,
        claim,
        pivot,
        watcher,
        notifier: Notifier::new(),
        metrics,
        holder_since_time: std::time::SystemTime::now(),
        reload: Debounce::default(),
        last_status: String::new(),
        reported: Reported::default(),
        lock: LockSide::new(lock, takeover),
        contention: Contention::default(),
        config: ConfigSide::new(store, api),
        disruption: Default::default(),
        fencing: Fencing::default(),
    };
    let mut watchdog = Notifier::watchdog_interval().map(tokio::time::interval);
    let look_timer = precise::PreciseTimer::new();
    let mut inputs = match acquiring {
        None => d.on_acquired()?,
        Some(rx) => {
            d.notifier.ready();
            d.lock.acquiring = Some(rx);
            vec![]
        }
    };
    loop {
        d.feed_all(inputs).await?;
        d.tend_syncer();
        d.tend_api_status();
        if let State::Exited(code) = d.pivot.state {
            signals.handle().close();
            return Ok(code);
        }
        d.publish_status();
        d.tend_prepared();
        d.schedule_settle_check();
        if d.pivot.state != State::Waiting {
            d.fencing.holder_watch = None;
        }
        let (backoff_until, stop_deadline) = match &d.pivot.state {
            State::Holding(Run::Backoff { until, .. }) => (Some(*until), None),
            State::Stopping {
                deadline,
                killed: false,
                ..
            } => (None, Some(*deadline)),
            _ => (None, None),
        };
        let recheck = d.next_recheck(Instant::now());
        let look = d.next_look(Instant::now());
        let reload_due = d.reload.due();
        let wake = tokio::select! {
            // Signals first: a SIGTERM that arrives with the lock is acted on
            // before a kubelet is started for it. Every SIGTERM since
            // `Signals::new` comes through this stream: the handler run that
            // sets the early flag queues it here too, also during a spawn
            // (see `kubelet::spawn`). The flag is read only inside work that
            // keeps the loop away from here; polling it here took one SIGTERM
            // for two, the second SIGKILLing the kubelet (tests/it/sigterm.rs).
            biased;
            Some(sig) = signals.next() => Wake::Signal(sig),
            Some(res) = recv_opt(&mut d.lock.acquiring) => Wake::Acquired(res),
            hint = d.watcher.next() => Wake::Hint(hint),
            _ = sleep_opt(backoff_until) => Wake::BackoffElapsed,
            _ = sleep_opt(stop_deadline) => Wake::StopDeadline,
            _ = sleep_opt(recheck) => Wake::Recheck,
            _ = precise::until_opt(&look_timer, look.map(|(at, _)| at)) => {
                Wake::Look(look.map_or(Look::Full, |(_, kind)| kind))
            }
            _ = sleep_opt(reload_due) => Wake::ReloadDue,
            res = join_opt(&mut d.config.preparing) => Wake::Prepared(res.map(Box::new)),
            res = join_opt(&mut d.disruption.task) => Wake::Disruption(res),
            _ = tick_opt(&mut watchdog) => Wake::Watchdog,
            _ = holder_watch::exited_opt(&d.fencing.holder_watch) => Wake::HolderExited,
            _ = sleep_opt(d.config.config_due) => Wake::ConfigDue,
            _ = sleep_opt(d.config.settle_at) => Wake::SettleDue,
            _ = sleep_opt(d.config.prepare_at) => Wake::PrepareDue,
            _ = api_changed(&mut api_changes) => Wake::ApiChanged,
        };
        inputs = d.wake(wake).await?;
    }
}

impl Driver {
    fn rank(&self) -> Rank {
        self.opts.rank
    }

    async fn wake(&mut self, wake: Wake) -> Result<Vec<Input>, SupervisorError> {
        Ok(match wake {
            Wake::Signal(sig) => self.on_signal(sig).await,
            Wake::Acquired(res) => {
                self.lock.acquiring = None;
                let at = res?;
                self.on_flock_returned(at)?
            }
            Wake::Hint(Hint::LockChanged) if self.pivot.state == State::Waiting => {
                self.rewait_if_replaced()?.unwrap_or_default()
            }
            Wake::Hint(Hint::ConfigChanged)
                if matches!(self.pivot.state, State::Waiting | State::Deferring { .. }) =>
            {
                self.config.prepare_again();
                vec![]
            }
            // Waiting: every hint (the record, the claims, the lock file; in
            // polling mode the tick, which comes as often as the waiting
            // re-check and, first in the select, would starve it) is a look
            // at the holder.
            Wake::Hint(hint)
                if self.pivot.state == State::Waiting && self.lock.acquiring.is_some() =>
            {
                if hint == Hint::Rescan {
                    self.config.prepare_again();
                }
                self.look_at_holder(HolderLook::Quick).await?
            }
            Wake::HolderExited => {
                self.fencing.holder_watch = None;
                if self.pivot.state == State::Waiting && self.lock.acquiring.is_some() {
                    self.look_at_holder(HolderLook::Quick).await?
                } else {
                    vec![]
                }
            }
            Wake::Hint(hint) => {
                // After an open or a new claim, the re-checks that watch the
                // opener block in flock come through the loop (every
                // FAST_RECHECK), never back to back inside one wake: each
                // reads /proc/locks, which can take tens of ms on a loaded
                // node, and a burst of 20 held off the reaction to a replaced
                // lock file for up to 2 s (measured).
                let mut inputs = self.on_hint(hint);
                if matches!(hint, Hint::ConfigChanged | Hint::Rescan) {
                    inputs.extend(self.check_config().await);
                }
                inputs
            }
            Wake::BackoffElapsed => vec![Input::BackoffElapsed],
            Wake::StopDeadline => {
                if let Some(k) = self.pivot.kubelet() {
                    warn!(pid = k.pid, timeout = %humantime::format_duration(self.opts.stop_timeout), "kubelet did not exit within --stop-timeout after SIGTERM; sending SIGKILL to its process group");
                }
                vec![Input::StopDeadline]
            }
            Wake::Recheck if self.pivot.state == State::Waiting => {
                self.look_at_holder(HolderLook::Full).await?
            }
            // While stopping: reap (our kubelet's exit) and see whether its
            // group is gone, exactly as on SIGCHLD.
            Wake::Recheck if matches!(self.pivot.state, State::Stopping { .. }) => {
                self.reap().await
            }
            Wake::Recheck => self.on_recheck(),
            Wake::Look(Look::Fast(pid)) if matches!(self.pivot.state, State::Holding(_)) => {
                self.fast_look(pid)
            }
            Wake::Look(_) => self.on_recheck(),
            Wake::Prepared(prepared) => {
                self.config.preparing = None;
                if prepared.is_some() {
                    debug!("next kubelet start prepared");
                }
                self.config.prepared = prepared.map(|p| *p);
                vec![]
            }
            Wake::ReloadDue => {
                if self.reload.take_due(Instant::now()) {
                    info!("SIGHUP: restarting the kubelet");
                    vec![Input::Reload]
                } else {
                    vec![]
                }
            }
            Wake::Disruption(done) => self.on_disruption_done(done).await,
            Wake::Watchdog => {
                self.notifier.watchdog();
                self.lock_check()
            }
            Wake::ConfigDue => {
                self.config.config_due = None;
                self.check_config().await
            }
            Wake::SettleDue => {
                self.config.settle_at = None;
                self.check_config().await
            }
            Wake::PrepareDue => {
                self.config.prepare_at = None;
                vec![]
            }
            // The loop's tending restarts the syncer with the new client
            // and records the status.
            Wake::ApiChanged => vec![],
        })
    }

    /// Waiting: follow a replaced lock file, else see whether the holder
    /// left something that needs fencing.
    async fn look_at_holder(&mut self, look: HolderLook) -> Result<Vec<Input>, SupervisorError> {
        if let Some(inputs) = self.rewait_if_replaced()? {
            return Ok(inputs);
        }
        self.fence_dead_holder(look).await;
        Ok(vec![])
    }

    /// After each kubelet start, one config check a second later.
    fn schedule_settle_check(&mut self) {
        let running = match &self.pivot.state {
            State::Holding(Run::Running(k)) => Some(k.pid),
            _ => None,
        };
        self.config.schedule_settle(running, Instant::now());
    }

    fn next_recheck(&mut self, now: Instant) -> Option<Instant> {
        match &self.pivot.state {
            State::Stopping { .. } | State::Deferring { .. } | State::Holding(Run::Clearing) => {
                Some(now + SLOW_RECHECK)
            }
            // A live holder whose kubelet runs is watched by its exits
            // (pidfds) and the record's changes (inotify): no timer.
            // While a replaced lock file waits to be locked by its holder
            // (flock grants make no event), the timed look stays too.
            State::Waiting
                if self.lock.acquiring.is_some()
                    && (self.fencing.holder_watch.is_none() || self.lock.replaced()) =>
            {
                Some(now + DEAD_HOLDER_CHECK)
            }
            State::Holding(_) if self.lock.retaking() => Some(now + SLOW_RECHECK),
            // Looked at on the precise timer (`next_look`).
            _ => None,
        }
    }

    /// Holding: when to look at the contenders again, and how.
    fn next_look(&mut self, now: Instant) -> Option<(Instant, Look)> {
        match &self.pivot.state {
            State::Holding(Run::Clearing) => None,
            State::Holding(_) if !self.lock.retaking() => self.contention.next_look(now),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_reported_once_and_memory_is_bounded() {
        let mut r = Reported::default();
        assert!(r.first("a"));
        assert!(!r.first("a"));
        for i in 1..MAX_REPORTED {
            assert!(r.first(&i.to_string()));
        }
        assert!(!r.first("one too many"));
        assert!(!r.first("a"));
    }
}
