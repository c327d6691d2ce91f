//! The driver: one select loop per supervisor that turns kernel events
//! (signals, flock results, inotify hints, timers) into `pivot::Input`s and
//! carries out the `pivot::Effect`s. All decisions live in `pivot` and
//! `contention`; this module only does I/O.

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

use crate::child::{self, Backoff, KubeletCommand};
use crate::claims::{self, Claim, ClaimError, ClaimGuard, Cleanup, LiveClaim};
use crate::contention::Skips;
use crate::contention::{judge, Contender, Verdict};
use crate::fence::{self, NotProven};
use crate::holder::HolderRecord;
use crate::lifecycle::{self, Access, LocalConfig, Resolved};
use crate::lock::{self, LockError, LockFile};
use crate::metrics::{Metrics, TakebackReason};
use crate::metrics_http::{self, MetricsError};
use crate::nodeconfig::ConfigReport;
use crate::notify::Notifier;
use crate::pivot::{Deferral, Effect, Input, Pivot, Run, Settings, State, StopPurpose};
use crate::prepared::Prepared;
use crate::procfs::{self, ProcessId};
use crate::role::{now_rfc3339, Rank};
use crate::signals::{Debounce, TerminateFlag};
use crate::state::StateDir;
use crate::store::{Store, StoreError};
use crate::sync::{self, ClientError, Syncer};
use crate::trust::TrustError;
use crate::watch::{Hint, Watcher};

/// After an open of the lock file, how long to keep looking for the opener
/// to block in flock (open and flock are two syscalls).
const OPEN_WINDOW: Duration = Duration::from_millis(500);
/// While a higher claim exists but its owner is not blocked yet.
const PENDING_WINDOW: Duration = Duration::from_secs(2);
/// Immediate re-checks after an open or a new claim (see `burst_check`).
const BURST_CHECKS: usize = 20;
/// Re-check cadence inside those windows.
const FAST_RECHECK: Duration = Duration::from_millis(1);
/// A waiter blocked on a replaced lock file moves to the new file once it is
/// locked, or after this long if nobody locks it.
const REWAIT_GRACE: Duration = Duration::from_millis(500);
/// Cadence of re-checks while a higher claimant is not blocked, after the
/// fast window.
const PENDING_RECHECK: Duration = Duration::from_millis(100);
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
/// alive (a dead holder's leftovers may keep the lock held).
const DEAD_HOLDER_CHECK: Duration = Duration::from_millis(100);
/// A contender that did not take the lock it was handed (or never blocked on
/// it) is not yielded to again for this long, doubling up to
/// [`SKIP_MAX`]: at most a few takebacks a minute from one stuck contender.
const SKIP_INITIAL: Duration = Duration::from_secs(10);
const SKIP_MAX: Duration = Duration::from_secs(300);
/// Status line prefix while another process holds the lock.
const STANDING_BY: &str = "standing by: ";
/// Status line while the lock's holder is not known (no live record).
const STANDING_BY_UNKNOWN: &str = "standing by: lock held by another process";
/// Distinct rejected claim files reported (each once); a bound on memory.
const MAX_REPORTED: usize = 1024;
/// How often to complain about a process group that survives SIGKILL.
const UNKILLABLE_REPORT: Duration = Duration::from_secs(5);

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
    /// Set by SIGTERM/SIGINT from the first instant of the process on.
    pub terminate: TerminateFlag,
}

/// Why the loop woke up.
enum Wake {
    Signal(i32),
    Acquired(Result<(), LockError>),
    Hint(Hint),
    BackoffElapsed,
    StopDeadline,
    Recheck,
    ReloadDue,
    Prepared(Option<Box<Prepared>>),
    Watchdog,
}

struct Driver {
    opts: Options,
    me: ProcessId,
    lock: LockFile,
    state: StateDir,
    claim: ClaimGuard,
    /// Rejected claim files already reported (each is reported once).
    reported: std::collections::HashSet<String>,
    pivot: Pivot,
    watcher: Watcher,
    notifier: Notifier,
    acquiring: Option<AcquireRx>,
    /// Look at contention again until then (fast cadence).
    recheck_until: Option<Instant>,
    last_status: String,
    last_unkillable_report: Option<Instant>,
    store: Store,
    /// The config the running (or next) kubelet was started with.
    applied: Option<Resolved>,
    holder_since_time: std::time::SystemTime,
    /// API client (None = local-only mode).
    client: Option<kube::Client>,
    /// The syncer of the current holder tenure.
    sync_task: Option<tokio::task::JoinHandle<()>>,
    reports: tokio::sync::watch::Sender<Option<ConfigReport>>,
    metrics: Arc<Metrics>,
    /// A higher claimant seen not blocked yet (its pid), while holding.
    pending: Option<i32>,
    /// While waiting: since when the path names another file than ours.
    replaced_since: Option<Instant>,
    /// SIGHUPs not acted on yet (a burst restarts the kubelet once).
    reload: Debounce,
    /// The next kubelet start, prepared while another holds the lock.
    prepared: Option<Prepared>,
    preparing: Option<tokio::task::JoinHandle<Option<Prepared>>>,
    last_prepare: Option<Instant>,
    /// Contenders not yielded to for a while (they did not take the lock).
    skips: Skips,
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

/// How often a wait for config work looks at the termination flag.
const TERMINATE_POLL: Duration = Duration::from_millis(10);

/// Runs config work (store reads, parsing, validation) off the event loop
/// and waits for it, unless SIGTERM/SIGINT comes first: then `None` at
/// once, and the work is left to finish (or to die with the process; every
/// store write is atomic). A signal is acted on within ~10 ms of any parse.
async fn blocking_unless_terminated<T: Send + 'static>(
    terminate: &TerminateFlag,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let mut task = tokio::task::spawn_blocking(f);
    let mut poll = tokio::time::interval(TERMINATE_POLL);
    loop {
        tokio::select! {
            res = &mut task => return match res {
                Ok(v) => Some(v),
                Err(err) => {
                    error!(%err, "config task failed");
                    None
                }
            },
            _ = poll.tick() => {
                if terminate.is_set() {
                    debug!("termination requested during config work; not waiting for it");
                    return None;
                }
            }
        }
    }
}

/// The result of a blocking task, if one runs.
async fn join_opt<T>(task: &mut Option<tokio::task::JoinHandle<Option<T>>>) -> Option<T> {
    match task.as_mut() {
        Some(t) => t.await.ok().flatten(),
        None => std::future::pending().await,
    }
}

/// How often a waiting supervisor may prepare its next start anew.
const PREPARE_INTERVAL: Duration = Duration::from_secs(1);

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

async fn tick_opt(iv: &mut Option<tokio::time::Interval>) {
    match iv.as_mut() {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

type AcquireRx = oneshot::Receiver<Result<(), LockError>>;

/// Takes the lock if it is free (`None`), else starts a thread blocked in
/// flock on the same descriptor and returns where its result will arrive.
fn begin_acquire(lock: &LockFile) -> Result<Option<AcquireRx>, SupervisorError> {
    if lock.try_acquire()? {
        return Ok(None);
    }
    let waiter = lock.clone();
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("flock".into())
        .spawn(move || {
            let result = waiter.acquire_blocking();
            // Nobody waits for it any more (the path was replaced while we
            // were blocked on the old file): let go of the old file's lock.
            if let Err(Ok(())) = tx.send(result) {
                let _ = waiter.release();
            }
        })
        .map_err(|e| {
            SupervisorError::Lock(LockError::Flock {
                path: lock.path().to_path_buf(),
                source: e,
            })
        })?;
    Ok(Some(rx))
}

/// Whether a process without a claim that is blocked on the lock may count
/// as a contender (a plain kubelet): only if it runs as root or as our uid,
/// both its real and effective uid.
fn may_contend(pid: i32, trusted: &[u32]) -> bool {
    match procfs::uids(pid) {
        Some((real, effective)) => trusted.contains(&real) && trusted.contains(&effective),
        None => false,
    }
}

/// Whether a contender may be yielded to now: not stopped (a frozen process
/// blocked in flock would never take the lock it is handed) and not skipped
/// after failing to take it before.
fn eligible(pid: i32, skips: &Skips, now: Instant) -> bool {
    let stat = procfs::stat(pid);
    if matches!(stat.map(|s| s.state), Some('T' | 't')) {
        debug!(
            pid,
            "contender is stopped (SIGSTOP or traced); not yielding to it"
        );
        return false;
    }
    !skips.is_skipped(pid, stat.map(|s| s.start_time), now)
}

/// Runs a supervisor until it exits; returns the process exit code.
pub async fn run(opts: Options) -> Result<i32, SupervisorError> {
    let me = procfs::self_id().map_err(SupervisorError::Proc)?;
    if let Err(err) = nix::sys::prctl::set_child_subreaper(true) {
        warn!(%err, "cannot become a child subreaper; orphaned kubelet helpers go to init");
    }
    lock::prepare(&opts.lock_path)?;
    let state = StateDir::open(&opts.state_dir).map_err(SupervisorError::State)?;
    // Everything that takes time happens before we announce ourselves: from
    // the claim on, a holder is waiting for us to block in flock.
    let store = Store::open(&opts.store_dir)?;
    let client = sync::client(opts.kubeconfig.as_ref()).await?;
    match &client {
        Some(_) => {
            info!(node = %opts.node_name, "API server configured: the node's config assignment is followed")
        }
        None => info!("no API server configured: local-only mode"),
    }
    let metrics = Arc::new(Metrics::new(
        opts.rank,
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
        Settings {
            stop_timeout: opts.stop_timeout,
            exit_on_yield: opts.exit_on_yield,
            defer_timeout: DEFER_TIMEOUT,
        },
        Backoff::default(),
    );
    let claim = ClaimGuard::create(
        &state,
        Claim {
            role: opts.rank.role,
            generation: opts.rank.generation,
            pid: me.pid,
            start_time: me.start_time,
            since: now_rfc3339(),
        },
    )
    .map_err(|source| SupervisorError::Claim {
        dir: state.claims_dir(),
        source,
    })?;
    // Open (the event a holder sees) and block in flock right away.
    let lock = LockFile::open(&opts.lock_path)?;
    let acquiring = begin_acquire(&lock)?;
    let watcher = Watcher::new(
        &opts.lock_path,
        &state,
        Some(&store.meta_path()),
        opts.force_poll,
    );
    info!(rank = %opts.rank, pid = me.pid, lock = %opts.lock_path.display(), watch = ?watcher.mode(), "supervisor starting");
    let mut d = Driver {
        opts,
        me,
        lock,
        state,
        claim,
        reported: Default::default(),
        pivot,
        watcher,
        notifier: Notifier::new(),
        acquiring: None,
        recheck_until: None,
        last_status: String::new(),
        last_unkillable_report: None,
        store,
        applied: None,
        holder_since_time: std::time::SystemTime::now(),
        client,
        sync_task: None,
        reports: tokio::sync::watch::channel(None).0,
        metrics,
        pending: None,
        replaced_since: None,
        reload: Debounce::default(),
        skips: Skips::new(SKIP_INITIAL, SKIP_MAX),
        prepared: None,
        preparing: None,
        last_prepare: None,
    };
    let mut watchdog = Notifier::watchdog_interval().map(tokio::time::interval);
    let mut inputs = match acquiring {
        None => d.on_acquired()?,
        Some(rx) => {
            d.notifier.ready();
            d.acquiring = Some(rx);
            vec![]
        }
    };
    loop {
        d.feed_all(inputs).await?;
        d.tend_syncer();
        if let State::Exited(code) = d.pivot.state {
            signals.handle().close();
            return Ok(code);
        }
        d.publish_status();
        d.tend_prepared();
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
        let reload_due = d.reload.due();
        let wake = tokio::select! {
            // Signals first: a SIGTERM that arrives with the lock is acted on
            // before a kubelet is started for it.
            biased;
            Some(sig) = signals.next() => Wake::Signal(sig),
            Some(res) = recv_opt(&mut d.acquiring) => Wake::Acquired(res),
            hint = d.watcher.next() => Wake::Hint(hint),
            _ = sleep_opt(backoff_until) => Wake::BackoffElapsed,
            _ = sleep_opt(stop_deadline) => Wake::StopDeadline,
            _ = sleep_opt(recheck) => Wake::Recheck,
            _ = sleep_opt(reload_due) => Wake::ReloadDue,
            res = join_opt(&mut d.preparing) => Wake::Prepared(res.map(Box::new)),
            _ = tick_opt(&mut watchdog) => Wake::Watchdog,
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
                self.acquiring = None;
                res?;
                self.on_acquired()?
            }
            Wake::Hint(Hint::LockChanged) if self.pivot.state == State::Waiting => {
                self.rewait_if_replaced()?.unwrap_or_default()
            }
            Wake::Hint(hint) => {
                let mut inputs = self.on_hint(hint);
                if inputs.is_empty() && matches!(hint, Hint::LockOpened | Hint::ClaimsChanged) {
                    inputs = self.burst_check().await;
                }
                if matches!(hint, Hint::ConfigChanged | Hint::Tick) {
                    inputs.extend(self.check_config().await);
                }
                inputs
            }
            Wake::BackoffElapsed => vec![Input::BackoffElapsed],
            Wake::StopDeadline => {
                if let Some(k) = self.pivot.kubelet() {
                    warn!(pid = k.pid, timeout = ?self.opts.stop_timeout, "kubelet did not exit within --stop-timeout after SIGTERM; sending SIGKILL to its process group");
                }
                vec![Input::StopDeadline]
            }
            Wake::Recheck if self.pivot.state == State::Waiting => {
                if let Some(inputs) = self.rewait_if_replaced()? {
                    return Ok(inputs);
                }
                self.fence_dead_holder().await;
                vec![]
            }
            // While stopping: reap (our kubelet's exit) and see whether its
            // group is gone, exactly as on SIGCHLD.
            Wake::Recheck if matches!(self.pivot.state, State::Stopping { .. }) => {
                self.reap().await
            }
            Wake::Recheck => self.on_recheck(),
            Wake::Prepared(prepared) => {
                self.preparing = None;
                if prepared.is_some() {
                    debug!("next kubelet start prepared");
                }
                self.prepared = prepared.map(|p| *p);
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
            Wake::Watchdog => {
                self.notifier.watchdog();
                vec![]
            }
        })
    }

    fn next_recheck(&mut self, now: Instant) -> Option<Instant> {
        match &self.pivot.state {
            State::Stopping { .. } | State::Deferring { .. } => Some(now + SLOW_RECHECK),
            State::Waiting if self.acquiring.is_some() => Some(now + DEAD_HOLDER_CHECK),
            State::Holding(_) => match self.recheck_until {
                Some(until) if until > now => Some(now + FAST_RECHECK),
                _ => {
                    self.recheck_until = None;
                    // A higher claimant that is not blocked (stuck between
                    // its claim and flock, or stopped): look every 100 ms,
                    // not every millisecond, so that it is seen soon once it
                    // blocks without a hot loop meanwhile.
                    self.pending.map(|_| now + PENDING_RECHECK)
                }
            },
            _ => None,
        }
    }

    async fn feed_all(&mut self, inputs: Vec<Input>) -> Result<(), SupervisorError> {
        let mut queue: VecDeque<Input> = inputs.into();
        while let Some(input) = queue.pop_front() {
            debug!(?input, "input");
            let before = self.pivot.state.clone();
            let effects = self.pivot.step(input.clone(), Instant::now());
            let after = self.pivot.state.clone();
            for effect in effects {
                queue.extend(self.apply(effect).await?);
            }
            // Counted once the step's effects are done, so a scrape never
            // sees a state whose files (the holder record) are not written yet.
            self.metrics.observe(&before, &input, &after);
        }
        Ok(())
    }

    async fn on_signal(&mut self, sig: i32) -> Vec<Input> {
        match sig {
            SIGTERM | SIGINT => {
                info!(signal = sig, "termination requested");
                vec![Input::Terminate]
            }
            SIGHUP => {
                // Coalesced: a burst restarts the kubelet once (see Debounce).
                debug!("SIGHUP received");
                self.reload.poke(Instant::now());
                vec![]
            }
            SIGCHLD => self.reap().await,
            _ => vec![],
        }
    }

    /// Reaps exited children; reports our kubelet's exit and, while
    /// stopping, whether its whole group is gone.
    async fn reap(&mut self) -> Vec<Input> {
        let mut out = Vec::new();
        let current = self.pivot.kubelet();
        for (pid, how) in child::reap_all() {
            if Some(pid) == current.map(|k| k.pid) {
                if matches!(self.pivot.state, State::Stopping { .. }) {
                    info!(pid, %how, "kubelet exited");
                } else {
                    warn!(pid, %how, "kubelet exited unexpectedly");
                    self.count_crash().await;
                }
                out.push(Input::KubeletExited { pid, how });
            } else {
                debug!(pid, %how, "reaped a process");
            }
        }
        out.extend(self.group_gone_input());
        out
    }

    fn group_gone_input(&mut self) -> Option<Input> {
        if let State::Stopping {
            kubelet, killed, ..
        } = &self.pivot.state
        {
            if child::group_gone(kubelet.pgid()) {
                return Some(Input::GroupGone);
            }
            if *killed {
                let now = Instant::now();
                if self
                    .last_unkillable_report
                    .is_none_or(|t| now.duration_since(t) >= UNKILLABLE_REPORT)
                {
                    self.last_unkillable_report = Some(now);
                    error!(pgid = kubelet.pgid(), "kubelet process group is still alive after SIGKILL (a process in uninterruptible sleep?); keeping the lock so that no second kubelet starts; check `ps -o pid,stat,wchan -g {}`", kubelet.pgid());
                }
            }
        }
        None
    }

    /// The syncer runs exactly while we hold the lock (only the holder
    /// writes the store and reports status).
    fn tend_syncer(&mut self) {
        let holding = self.pivot.holds_lock() && !matches!(self.pivot.state, State::Exited(_));
        match (&self.client, holding, &self.sync_task) {
            (Some(client), true, None) => {
                let syncer = Syncer::new(
                    client.clone(),
                    self.opts.node_name.clone(),
                    self.store.clone(),
                    self.reports.subscribe(),
                    self.metrics.clone(),
                );
                self.sync_task = Some(tokio::spawn(syncer.run()));
            }
            (_, false, Some(task)) => {
                task.abort();
                self.sync_task = None;
            }
            _ => {}
        }
    }

    /// Stops the syncer before the lock is released, and waits for any
    /// store write it has in flight (writes hold the store's writer lock), so
    /// that no write of ours lands after the next holder took over.
    async fn stop_syncer(&mut self) {
        let Some(task) = self.sync_task.take() else {
            return;
        };
        task.abort();
        let _ = task.await;
        let store = self.store.clone();
        if let Some(Err(err)) = blocking(move || store.lock().map(drop)).await {
            warn!(%err, "cannot take the store lock to fence in-flight writes");
        }
    }

    fn publish_report(&self, r: &Resolved) {
        let report = ConfigReport {
            origin: r.origin,
            source: r.source.clone(),
            local_kind: if self.opts.local.path.is_some() {
                "init"
            } else {
                "default"
            },
            error: r.error.as_ref().map(|e| e.to_string()),
            assigned: r.assigned.clone(),
            last_known_good: r.last_known_good.clone(),
        };
        self.metrics.config(&report);
        self.reports.send_if_modified(|cur| {
            if cur.as_ref() == Some(&report) {
                false
            } else {
                *cur = Some(report);
                true
            }
        });
    }

    /// A kubelet exit we did not cause counts against a config on trial.
    async fn count_crash(&mut self) {
        let Some(applied) = self.applied.clone() else {
            return;
        };
        let store = self.store.clone();
        let since = self.holder_since_time;
        match blocking(move || lifecycle::on_crash(&store, &applied, since)).await {
            Some(Ok(Some(reason))) => {
                warn!(%reason, "config crash-looped in its trial period; rolling back to last-known-good");
                // The next start runs last-known-good: start it promptly.
                self.pivot.backoff.reset();
            }
            Some(Err(err)) => {
                error!(%err, "cannot record the kubelet crash in the checkpoint store")
            }
            _ => {}
        }
    }

    /// On a store change (or the safety tick): restart the kubelet when the
    /// effective config changed; promote a config that survived its trial.
    async fn check_config(&mut self) -> Vec<Input> {
        if !matches!(self.pivot.state, State::Holding(Run::Running(_))) {
            return vec![];
        }
        let Some(applied) = self.applied.clone() else {
            return vec![];
        };
        let store = self.store.clone();
        let local = self.opts.local.clone();
        let Some((resolved, promoted)) =
            blocking_unless_terminated(&self.opts.terminate, move || {
                let promoted = lifecycle::maybe_promote(&store, &applied);
                let resolved = lifecycle::resolve(&store, &local, Access::Holder);
                // Same effective config: nothing restarts, but what runs (origin,
                // error, trial) is recorded.
                let recorded = if resolved.hash() == applied.hash() {
                    lifecycle::on_applied(&store, &resolved)
                } else {
                    Ok(())
                };
                (resolved, promoted.and(recorded))
            })
            .await
        else {
            return vec![];
        };
        if let Err(err) = promoted {
            error!(%err, "cannot update the config state (promotion or effective record) in the store");
        }
        let old_hash = self.applied.as_ref().map(Resolved::hash);
        if Some(resolved.hash()) != old_hash {
            info!(from = ?old_hash, to = %resolved.hash(), config = %resolved.describe(), "effective kubelet config changed; restarting the kubelet with it");
            self.metrics.restart_for_config();
            return vec![Input::Reload];
        }
        self.publish_report(&resolved);
        self.applied = Some(resolved);
        vec![]
    }

    /// While another supervisor holds the lock: prepare our kubelet start
    /// (resolve and check the config off the loop), and keep it fresh.
    fn tend_prepared(&mut self) {
        if !matches!(self.pivot.state, State::Waiting | State::Deferring { .. }) {
            return;
        }
        if self
            .prepared
            .as_ref()
            .is_some_and(|p| !p.still_valid(&self.store))
        {
            self.prepared = None;
        }
        let now = Instant::now();
        if self.prepared.is_some()
            || self.preparing.is_some()
            || self
                .last_prepare
                .is_some_and(|t| now.duration_since(t) < PREPARE_INTERVAL)
        {
            return;
        }
        self.last_prepare = Some(now);
        let store = self.store.clone();
        let local = self.opts.local.clone();
        self.preparing = Some(tokio::task::spawn_blocking(move || {
            Prepared::prepare(&store, &local)
        }));
    }

    /// The prepared start, if nothing it rests on changed: the kubelet
    /// command, with `applied` and the report set as a full resolution does.
    fn take_prepared(&mut self) -> Option<KubeletCommand> {
        let prepared = self.prepared.take()?;
        if !prepared.still_valid(&self.store) {
            return None;
        }
        let resolved = prepared.resolved;
        info!(config = %resolved.describe(), hash = %resolved.hash(), "kubelet config prepared while waiting is unchanged");
        let cmd = KubeletCommand {
            program: self.opts.kubelet.program.clone(),
            args: lifecycle::kubelet_args(
                &self.opts.kubelet.args,
                &self.store.effective_config_path(),
            ),
        };
        self.publish_report(&resolved);
        self.applied = Some(resolved);
        Some(cmd)
    }

    /// After a kubelet started from a prepared config: record what runs
    /// (trial, effective record), as the full path does before starting.
    async fn record_applied(&mut self) {
        let Some(applied) = self.applied.clone() else {
            return;
        };
        let store = self.store.clone();
        if let Some(Err(err)) = blocking(move || lifecycle::on_applied(&store, &applied)).await {
            error!(%err, "cannot record the running config in the checkpoint store");
        }
    }

    /// Resolves the config for the next kubelet start and writes the file
    /// the kubelet reads. Returns the kubelet command to run.
    async fn prepare_config(&mut self) -> Option<KubeletCommand> {
        let store = self.store.clone();
        let local = self.opts.local.clone();
        let result = blocking_unless_terminated(&self.opts.terminate, move || {
            let resolved = lifecycle::resolve(&store, &local, Access::Holder);
            lifecycle::on_applied(&store, &resolved)?;
            let path = store.write_effective_config(&resolved.config.effective_bytes())?;
            Ok::<_, StoreError>((resolved, path))
        })
        .await?;
        match result {
            Ok((resolved, path)) => {
                info!(config = %resolved.describe(), hash = %resolved.hash(), error = ?resolved.error.as_ref().map(|e| e.to_string()), "kubelet config resolved");
                let cmd = KubeletCommand {
                    program: self.opts.kubelet.program.clone(),
                    args: lifecycle::kubelet_args(&self.opts.kubelet.args, &path),
                };
                self.publish_report(&resolved);
                self.applied = Some(resolved);
                Some(cmd)
            }
            Err(err) => {
                error!(%err, "cannot write the effective kubelet config; not starting the kubelet (will retry with backoff)");
                None
            }
        }
    }

    fn on_recheck(&mut self) -> Vec<Input> {
        match &self.pivot.state {
            State::Deferring { .. } => self.check_handover(),
            State::Holding(_) => self.check_contention(),
            _ => vec![],
        }
    }

    /// While blocked in flock: if the path names another file now, the file
    /// we wait on is obsolete (whoever holds it is not the node's holder any
    /// more, maybe a frozen process that got it): wait on the new file. The
    /// old flock thread lets go of the old file if it ever gets it.
    ///
    /// The holder re-creates and re-locks a replaced file before it lets go
    /// of the old one, so a waiter moves over only once the new file is
    /// locked (it then simply blocks there), or once it has stayed unlocked
    /// for [`REWAIT_GRACE`] (no holder took it): never racing the holder
    /// for the new file.
    fn rewait_if_replaced(&mut self) -> Result<Option<Vec<Input>>, SupervisorError> {
        if self.acquiring.is_none() || self.lock.path_is_ours() {
            self.replaced_since = None;
            return Ok(None);
        }
        let now = Instant::now();
        let first = *self.replaced_since.get_or_insert(now);
        let new_is_locked = match std::fs::symlink_metadata(&self.opts.lock_path) {
            Ok(meta) => {
                let key = procfs::FileKey::of_metadata(&meta);
                procfs::read_locks()
                    .unwrap_or_default()
                    .iter()
                    .any(|e| !e.blocked && e.file == key)
            }
            Err(_) => false,
        };
        if !new_is_locked && now.duration_since(first) < REWAIT_GRACE {
            return Ok(None);
        }
        self.replaced_since = None;
        warn!(path = %self.lock.path().display(), "the lock file was replaced while we waited on the old one; waiting on the new one");
        self.acquiring = None;
        self.lock = LockFile::open(&self.opts.lock_path)?;
        self.watcher.rewatch_lock();
        self.start_acquire().map(Some)
    }

    fn on_hint(&mut self, hint: Hint) -> Vec<Input> {
        debug!(?hint, "watch hint");
        match (&self.pivot.state, hint) {
            // Our kubelet is being killed because the lock was lost: nothing
            // to look at (and no reopening in a loop) until it is gone.
            (
                State::Stopping {
                    purpose: StopPurpose::LockLost,
                    ..
                },
                _,
            ) => vec![],
            (
                State::Holding(_) | State::Stopping { .. },
                Hint::LockChanged | Hint::Tick | Hint::HolderChanged,
            ) if !self.lock.path_is_ours() => self.handle_replacement(),
            (State::Holding(_) | State::Stopping { .. }, Hint::HolderChanged | Hint::Tick)
                if !self.still_locked() =>
            {
                vec![Input::LockLost]
            }
            (State::Holding(_), Hint::LockOpened) => {
                if self.opts.yield_on_any_open {
                    return vec![Input::Contended(Contender::AnyOpen)];
                }
                self.recheck_until = Some(Instant::now() + OPEN_WINDOW);
                self.check_contention()
            }
            (State::Holding(_), _) => self.check_contention(),
            (State::Deferring { .. }, _) => self.check_handover(),
            _ => vec![],
        }
    }

    /// Looks at /proc/locks and the claims. /proc/locks is read first: a
    /// supervisor writes its claim before it opens the lock, so any waiter
    /// in that snapshot already has its claim on disk when the claims are
    /// listed. A waiter judged unclaimed is confirmed with a second read (it
    /// may have exited between the reads).
    fn verdict(&mut self) -> Verdict {
        let first = self.judge_now();
        match first {
            // Acting on an absence (no claim for this waiter) needs a second
            // look: the waiter may have exited between the reads, or a large
            // /proc/locks may have been read torn.
            Verdict::Yield(Contender::Unclaimed { pid }) => match self.judge_now() {
                Verdict::Yield(Contender::Unclaimed { pid: again }) if again == pid => {
                    Verdict::Yield(Contender::Unclaimed { pid })
                }
                _ => Verdict::Quiet,
            },
            v => v,
        }
    }

    fn judge_now(&mut self) -> Verdict {
        let locks = procfs::read_locks().unwrap_or_default();
        let claims = self.live_claims(&locks);
        let trusted = [0, crate::trust::my_uid()];
        let now = Instant::now();
        let skips = &self.skips;
        judge(
            self.lock.key(),
            self.rank(),
            &claims,
            &locks,
            |pid| may_contend(pid, &trusted),
            |pid| eligible(pid, skips, now),
        )
    }

    /// Verified live claims of other supervisors; rejected claim files are
    /// reported once each, dead ones removed.
    fn live_claims(&mut self, locks: &[procfs::LockEntry]) -> Vec<LiveClaim> {
        let scan = claims::scan(&self.state, Some(self.me), locks, Cleanup::RemoveDead);
        for rejected in scan.rejected {
            let line = rejected.to_string();
            if self.reported.len() < MAX_REPORTED && self.reported.insert(line.clone()) {
                warn!("{line}");
            }
        }
        scan.live
    }

    /// Right after an open of the lock file or a new claim, the contender is
    /// usually microseconds away from blocking in flock, while the runtime's
    /// timers tick in milliseconds: look again a few times at once (yielding
    /// to the runtime in between) before falling back to the timer.
    async fn burst_check(&mut self) -> Vec<Input> {
        for _ in 0..BURST_CHECKS {
            if !matches!(self.pivot.state, State::Holding(_)) || self.recheck_until.is_none() {
                break;
            }
            tokio::task::yield_now().await;
            let inputs = self.check_contention();
            if !inputs.is_empty() {
                return inputs;
            }
        }
        vec![]
    }

    fn check_contention(&mut self) -> Vec<Input> {
        if !matches!(self.pivot.state, State::Holding(_)) {
            return vec![];
        }
        match self.verdict() {
            Verdict::Yield(c) => {
                info!(contender = %c, "verified contender is blocked on the lock; yielding");
                self.recheck_until = None;
                self.pending = None;
                vec![Input::Contended(c)]
            }
            Verdict::Pending { rank, pid } => {
                // Fast re-checks for a while after a claimant appears, then
                // slow ones (see next_recheck): never a hot loop.
                if self.pending != Some(pid) {
                    debug!(%rank, pid, "higher claim present but not blocked on the lock yet");
                    self.pending = Some(pid);
                    let until = Instant::now() + PENDING_WINDOW;
                    if self.recheck_until.is_none_or(|u| u < until) {
                        self.recheck_until = Some(until);
                    }
                }
                vec![]
            }
            Verdict::Quiet => {
                self.pending = None;
                vec![]
            }
        }
    }

    /// While deferring: has the contender taken the lock, or gone away?
    fn check_handover(&mut self) -> Vec<Input> {
        let State::Deferring {
            to,
            since,
            patience,
        } = &self.pivot.state
        else {
            return vec![];
        };
        let locks = procfs::read_locks().unwrap_or_default();
        let key = self.lock.key();
        if locks.iter().any(|e| !e.blocked && e.file == key) {
            debug!(contender = %to, "lock taken by another process");
            return vec![Input::HandoverSeen];
        }
        if since.elapsed() >= *patience {
            let skipped = match to {
                Contender::Claimant { pid, .. } | Contender::Unclaimed { pid } => {
                    let start = procfs::stat(*pid).map(|s| s.start_time);
                    Some(self.skips.skip(*pid, start, Instant::now()))
                }
                Contender::AnyOpen => None,
            };
            warn!(contender = %to, skipped_for = ?skipped, "contender did not take the lock within {:?}; taking it back and not yielding to it again for a while", patience);
            self.metrics.takeback(TakebackReason::ContenderTimedOut);
            return vec![Input::HandoverSeen];
        }
        // Between our release and the contender's flock returning it is
        // neither blocked nor holding; only its death ends the wait early.
        let contender_pid = match to {
            Contender::Claimant { pid, .. } | Contender::Unclaimed { pid } => Some(*pid),
            Contender::AnyOpen => None,
        };
        if let Some(pid) = contender_pid {
            if procfs::stat(pid).is_none_or(|s| s.state == 'Z' || s.state == 'X') {
                info!(contender = %to, "contender died before taking the lock; taking it back");
                self.metrics.takeback(TakebackReason::ContenderDied);
                return vec![Input::HandoverSeen];
            }
        }
        vec![]
    }

    fn on_acquired(&mut self) -> Result<Vec<Input>, SupervisorError> {
        if !self.lock.path_is_ours() {
            warn!(path = %self.lock.path().display(), "the lock file was deleted or replaced while we waited; reopening it");
            let _ = self.lock.release();
            self.lock = LockFile::open(&self.opts.lock_path)?;
            self.watcher.rewatch_lock();
            return self.start_acquire();
        }
        let defer_to = match self.verdict() {
            Verdict::Yield(c) => {
                info!(contender = %c, "got the lock but a higher contender is blocked on it; handing it over instead of racing it");
                Some(Deferral {
                    to: c,
                    patience: DEFER_TIMEOUT,
                })
            }
            Verdict::Pending { rank, pid } => {
                info!(%rank, pid, patience = ?PENDING_DEFER, "got the lock but a higher claimant is about to contend; handing it over instead of starting a kubelet");
                Some(Deferral {
                    to: Contender::Claimant { rank, pid },
                    patience: PENDING_DEFER,
                })
            }
            Verdict::Quiet => None,
        };
        self.holder_since_time = std::time::SystemTime::now();
        Ok(vec![Input::Acquired { defer_to }])
    }

    fn start_acquire(&mut self) -> Result<Vec<Input>, SupervisorError> {
        match begin_acquire(&self.lock)? {
            None => self.on_acquired(),
            Some(rx) => {
                // Someone holds it: we stand by, blocked on the same descriptor.
                self.notifier.ready();
                self.acquiring = Some(rx);
                Ok(vec![])
            }
        }
    }

    /// Before acting as the holder: the path must name the file we hold
    /// (a deleted or replaced one is re-created first) and our description
    /// must still hold its lock. Empty when all is well, else the inputs
    /// that say why not (`LockLost`).
    fn confirm_holding(&mut self) -> Vec<Input> {
        if !self.lock.path_is_ours() {
            let inputs = self.handle_replacement();
            if !inputs.is_empty() {
                return inputs;
            }
        }
        if self.still_locked() {
            vec![]
        } else {
            vec![Input::LockLost]
        }
    }

    /// Whether our descriptor still holds the lock. flock on a description
    /// that holds it succeeds at once; it fails when another description
    /// holds it (a kubelet or its child unlocked the inherited descriptor
    /// and somebody took the lock). When nobody holds it, this re-takes it.
    fn still_locked(&self) -> bool {
        match self.lock.try_acquire() {
            Ok(true) => true,
            Ok(false) => {
                error!(path = %self.lock.path().display(), "another process holds the lock we held (our kubelet, or a process it started, unlocked the inherited descriptor); killing our kubelet at once and waiting for the lock again");
                false
            }
            Err(err) => {
                error!(%err, "cannot check that we still hold the lock; treating it as lost");
                false
            }
        }
    }

    fn handle_replacement(&mut self) -> Vec<Input> {
        let path = self.opts.lock_path.clone();
        warn!(path = %path.display(), "lock file was deleted or replaced while we hold it; re-creating and re-locking it (the kubelet keeps running)");
        let fresh = match LockFile::open(&path) {
            Ok(f) => f,
            Err(err) => {
                error!(%err, "cannot re-create the lock file; killing our kubelet so that no second kubelet can start beside it");
                return vec![Input::LockLost];
            }
        };
        match fresh.try_acquire() {
            Ok(true) => {
                let old = std::mem::replace(&mut self.lock, fresh);
                // Waiters blocked on the old inode wake up, see it is no
                // longer at the path, and reopen the new one.
                let _ = old.release();
                self.watcher.rewatch_lock();
                info!(path = %path.display(), "re-created and re-locked the lock file");
                vec![]
            }
            Ok(false) | Err(_) => {
                error!(path = %path.display(), "the lock file was replaced by one another process holds; killing our kubelet at once and waiting for the new lock");
                vec![Input::LockLost]
            }
        }
    }

    async fn apply(&mut self, effect: Effect) -> Result<Vec<Input>, SupervisorError> {
        debug!(?effect, "effect");
        match effect {
            Effect::Acquire => return self.start_acquire(),
            Effect::Release => {
                self.stop_syncer().await;
                if let Err(err) = self.lock.release() {
                    error!(%err, "failed to release the lock");
                }
            }
            Effect::Fence => self.fence().await,
            Effect::WriteHolder => {
                // Only a holder writes the record: one that lost the lock
                // (its kubelet unlocked the inherited descriptor and another
                // supervisor took it) must not overwrite the new holder's.
                let lost = self.confirm_holding();
                if !lost.is_empty() {
                    return Ok(lost);
                }
                self.write_holder().await
            }
            Effect::RemoveHolder => {
                // Inline, not on the blocking pool: a read of a 4 KiB record
                // and an unlink (no fsync: runtime state) in our own state
                // directory, on the handoff's critical path right before
                // the release.
                if let Err(err) = HolderRecord::remove_if_ours(&self.state, self.me) {
                    warn!(%err, "failed to remove the holder record");
                }
            }
            Effect::Reopen => {
                self.lock = LockFile::open(&self.opts.lock_path)?;
                self.watcher.rewatch_lock();
            }
            Effect::Spawn => {
                if self.opts.terminate.is_set() {
                    info!("termination requested; not starting a kubelet");
                    return Ok(vec![Input::Terminate]);
                }
                // Never start a kubelet without holding the lock the path
                // names now.
                let lost = self.confirm_holding();
                if !lost.is_empty() {
                    return Ok(lost);
                }
                let (cmd, from_prepared) = match self.take_prepared() {
                    Some(cmd) => (cmd, true),
                    None => match self.prepare_config().await {
                        Some(cmd) => (cmd, false),
                        None if self.opts.terminate.is_set() => {
                            return Ok(vec![Input::Terminate]);
                        }
                        None => return Ok(vec![Input::KubeletFailedToStart]),
                    },
                };
                // The last look at the flag, right before the fork (config
                // work may have taken a while). A signal that comes during
                // the fork itself cannot undo that exec: the loop then stops
                // the kubelet at once.
                if self.opts.terminate.is_set() {
                    info!("termination requested; not starting a kubelet");
                    return Ok(vec![Input::Terminate]);
                }
                // Runs on the main thread (current-thread runtime), which
                // lives as long as we do: PR_SET_PDEATHSIG stays armed.
                return Ok(match child::spawn(&cmd, Some(self.lock.raw_fd())) {
                    Ok(k) => {
                        info!(pid = k.pid, view_pid = k.id.pid, program = %self.opts.kubelet.program.display(), "started kubelet");
                        if from_prepared {
                            self.record_applied().await;
                        }
                        vec![Input::KubeletStarted(k)]
                    }
                    Err(err) => {
                        error!(%err, "kubelet failed to start; retrying with backoff");
                        vec![Input::KubeletFailedToStart]
                    }
                });
            }
            Effect::SignalGroup(pgid, sig) => {
                debug!(pgid, %sig, "signalling kubelet process group");
                child::signal_group(pgid, sig);
            }
            Effect::WithdrawClaim => self.claim.withdraw(),
            Effect::NotifyStopping => self.notifier.stopping(),
            Effect::Exit(code) => info!(code, "supervisor exiting"),
        }
        Ok(vec![])
    }

    async fn write_holder(&mut self) {
        let since = humantime::format_rfc3339_millis(self.holder_since_time).to_string();
        let mut rec = HolderRecord::new(self.rank(), self.me, since);
        if let Some(k) = self.pivot.kubelet() {
            rec.kubelet_pid = Some(k.id.pid);
            rec.kubelet_start_time = Some(k.id.start_time);
        }
        let state = self.state.clone();
        match tokio::task::spawn_blocking(move || rec.write(&state)).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                warn!(%err, "failed to write the holder record; `status` will be wrong until the next write")
            }
            Err(err) => warn!(%err, "holder record writer task failed"),
        }
    }

    /// Kills whatever kubelet the previous holder left behind, and waits
    /// until its process group is gone, before ours may start.
    async fn fence(&mut self) {
        let rec = match HolderRecord::read(&self.state) {
            Ok(Some(r)) if r.supervisor() != self.me => r,
            Ok(_) => {
                // A holder that yields or stops removes its record first.
                info!(rank = %self.rank(), "took the lock: it was free (no holder, or the holder released it)");
                return;
            }
            Err(err) => {
                warn!(%err, "took the lock; cannot read the previous holder record, nothing to fence");
                return;
            }
        };
        info!(rank = %self.rank(), previous = %rec.rank(), previous_pid = rec.pid, "took the lock: the previous holder is gone without releasing it (killed or crashed)");
        self.fence_kubelet_of(&rec).await;
    }

    /// While waiting: if the recorded holder is dead (its claim's flock is
    /// free AND its pid/start time are gone) but the lock is still held, the
    /// lock is held by leftovers of its kubelet (a helper process that
    /// inherited the locked descriptor and has no PDEATHSIG). Fence them from
    /// outside, or nobody would ever get the lock.
    /// While waiting: if the process that took the lock is gone but the lock
    /// is still held, it is held by descriptors it handed down: its kubelet's
    /// group (fenced by the holder record) and anything that escaped the
    /// group holding the same open file description (a helper that
    /// daemonized with the inherited descriptor). Fence both from outside,
    /// or nobody would get the lock until they exit by themselves.
    async fn fence_dead_holder(&mut self) {
        let key = self.lock.key();
        let locks = procfs::read_locks().unwrap_or_default();
        let Some(taker) = locks
            .iter()
            .find(|e| !e.blocked && e.file == key)
            .map(|e| e.pid)
        else {
            return;
        };
        let rec = match HolderRecord::read(&self.state) {
            Ok(Some(r)) if r.supervisor() != self.me => Some(r),
            _ => None,
        };
        // The taker is gone, or it is the recorded holder and that record
        // is dead (its pid may have been reused since).
        let recorded_dead = rec.as_ref().is_some_and(|r| r.pid == taker && !r.is_live());
        if !fence::taker_gone(taker) && !recorded_dead {
            return;
        }
        if let Some(rec) = rec.filter(|r| !r.is_live()) {
            let holder_claim_alive = self
                .live_claims(&locks)
                .iter()
                .any(|c| c.claim.process() == rec.supervisor());
            if !holder_claim_alive {
                self.fence_kubelet_of(&rec).await;
            }
        }
        let me = self.me.pid;
        let holders = fence::lock_holders(key, taker, me);
        if holders.is_empty() {
            return;
        }
        // Look again right before killing: the lock must still be the dead
        // taker's (another waiter may have fenced and taken it meanwhile),
        // and no supervisor with a verified claim is ever a leftover.
        let locks = procfs::read_locks().unwrap_or_default();
        if !locks
            .iter()
            .any(|e| !e.blocked && e.file == key && e.pid == taker)
        {
            return;
        }
        let supervisors: Vec<i32> = self.live_claims(&locks).iter().map(|c| c.owner).collect();
        for pid in holders.into_iter().filter(|p| !supervisors.contains(p)) {
            let pgid = procfs::stat(pid).map(|s| s.pgrp);
            warn!(pid, ?pgid, taker, "the lock is held by a leftover of its dead taker (a process that inherited the locked descriptor and left the kubelet's process group); killing it");
            if !child::signal_view_pid(pid, Signal::SIGKILL) {
                warn!(pid, "cannot signal the leftover (not in our PID namespace); the lock comes free when it exits");
            }
        }
    }

    async fn fence_kubelet_of(&mut self, rec: &HolderRecord) {
        let k = match fence::prove(rec, fence::own_view_pgid()) {
            Ok(pgid) => ProcessId {
                pid: pgid,
                start_time: rec.kubelet_start_time.unwrap_or_default(),
            },
            Err(NotProven::NoKubelet | NotProven::Gone(_)) => return,
            Err(reason @ NotProven::Reused { .. }) => {
                debug!(%reason, "previous kubelet is gone");
                return;
            }
            Err(reason) => {
                let line = format!("not fencing the kubelet named by the holder record: {reason}");
                if self.reported.len() < MAX_REPORTED && self.reported.insert(line.clone()) {
                    error!("{line}");
                }
                return;
            }
        };
        warn!(pgid = k.pid, previous = %rec.rank(), "the previous holder's kubelet is still running; killing its process group before starting ours");
        let started = Instant::now();
        let mut last_report = started;
        loop {
            child::signal_view_group(k.pid, Signal::SIGKILL);
            child::reap_all();
            if child::view_group_gone(k.pid) {
                info!(pgid = k.pid, waited = ?started.elapsed(), "previous kubelet fenced");
                return;
            }
            if last_report.elapsed() >= UNKILLABLE_REPORT {
                last_report = Instant::now();
                error!(pgid = k.pid, "previous kubelet's process group survives SIGKILL; not starting ours until it is gone");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn status_line(&self) -> String {
        match &self.pivot.state {
            State::Waiting => match HolderRecord::read(&self.state) {
                Ok(Some(r)) if r.is_live() && r.supervisor() != self.me => {
                    format!("standing by: lock held by {} pid {}", r.rank(), r.pid)
                }
                _ if self.acquiring.is_some() => STANDING_BY_UNKNOWN.to_string(),
                _ => "waiting for the lock".to_string(),
            },
            State::Deferring { to, .. } => format!("standing by: handing the lock to {to}"),
            State::Holding(Run::Starting) => "starting kubelet".to_string(),
            State::Holding(Run::Running(k)) => format!("running kubelet pid {}", k.pid),
            State::Holding(Run::Backoff { delay, .. }) => {
                format!(
                    "kubelet exited; restarting in {}",
                    humantime::format_duration(*delay)
                )
            }
            State::Stopping {
                kubelet, purpose, ..
            } => {
                let why = match purpose {
                    StopPurpose::Yield(c) => format!("yielding to {c}"),
                    StopPurpose::Shutdown => "shutting down".to_string(),
                    StopPurpose::Restart => "restart requested".to_string(),
                    StopPurpose::LockLost => "lock file lost".to_string(),
                };
                format!("stopping kubelet pid {}: {why}", kubelet.pid)
            }
            State::Exited(code) => format!("exited with code {code}"),
        }
    }

    fn publish_status(&mut self) {
        let mut line = self.status_line();
        // Between a handover and the new holder's record (or after a holder
        // died, until we get the lock) the holder is unknown for a moment:
        // keep saying whom we stand by for instead of flapping.
        if line == STANDING_BY_UNKNOWN && self.last_status.starts_with(STANDING_BY) {
            line = self.last_status.clone();
        }
        if line != self.last_status {
            info!(rank = %self.rank(), yields = self.pivot.yields, "{line}");
            self.last_status = line.clone();
        }
        if matches!(self.pivot.state, State::Holding(Run::Running(_))) {
            self.notifier.ready();
        }
        self.notifier.status(&line);
    }
}
