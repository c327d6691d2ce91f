//! The config side of the driver: the checkpoint store, the config the
//! kubelet runs, the API access and its syncer, the start prepared while
//! waiting, and the clocks of the config checks (a trial's end, a drain's
//! retry, the settle check after a start, the next preparation).

use super::*;

/// A config kept running while a disruptive change waits is given up after
/// this many kubelet exits in a row without a config check in between: a
/// crash-looping kubelet protects no pod, so the new config starts.
const PINNED_CRASH_LIMIT: u32 = 3;
/// A config check this long after each kubelet start (and then at the next
/// trial end or drain retry the store names): a kubelet that ran this long
/// is not crash-looping (see `crashes_in_a_row`).
const SETTLE_CHECK: Duration = Duration::from_secs(1);

pub(in crate::supervisor) struct ConfigSide {
    pub(in crate::supervisor) store: Store,
    /// The config the running (or next) kubelet was started with.
    pub(in crate::supervisor) applied: Option<Resolved>,
    /// API access, its client kept current (None = local-only mode).
    pub(in crate::supervisor) api: Option<Api>,
    /// What the syncer reports on the Node.
    pub(in crate::supervisor) reports: tokio::sync::watch::Sender<Option<ConfigReport>>,
    /// The syncer of the current holder tenure.
    pub(super) sync_task: Option<tokio::task::JoinHandle<()>>,
    /// The generation of the client the running syncer uses.
    pub(super) sync_generation: u64,
    /// The API status last written to `STATE/api.json` (while holding).
    pub(super) api_status_written: Option<ApiStatus>,
    /// The next kubelet start, prepared while another holds the lock.
    pub(in crate::supervisor) prepared: Option<Prepared>,
    pub(in crate::supervisor) preparing: Option<tokio::task::JoinHandle<Option<Prepared>>>,
    last_prepare: Option<Instant>,
    /// Prepare the next start again (the config may have changed since).
    prepare_due: bool,
    /// When the next preparation may run (`PREPARE_INTERVAL` after the last).
    pub(in crate::supervisor) prepare_at: Option<Instant>,
    /// The next config check a pending step needs (a trial's end, a
    /// drain's retry).
    pub(in crate::supervisor) config_due: Option<Instant>,
    /// The config check after a kubelet start (see `SETTLE_CHECK`): kept
    /// apart from `config_due`, which each check sets anew.
    pub(in crate::supervisor) settle_at: Option<Instant>,
    /// The kubelet the settle check was scheduled for.
    settle_for: Option<i32>,
    /// Unexpected kubelet exits since a kubelet last ran through a config
    /// check (about a second).
    crashes_in_a_row: u32,
}

impl ConfigSide {
    pub(in crate::supervisor) fn new(store: Store, api: Option<Api>) -> ConfigSide {
        ConfigSide {
            store,
            applied: None,
            api,
            reports: tokio::sync::watch::channel(None).0,
            sync_task: None,
            sync_generation: 0,
            api_status_written: None,
            prepared: None,
            preparing: None,
            last_prepare: None,
            prepare_due: true,
            prepare_at: None,
            config_due: None,
            settle_at: None,
            settle_for: None,
            crashes_in_a_row: 0,
        }
    }

    /// The newest API client, if any.
    pub(in crate::supervisor) fn client(&self) -> Option<kube::Client> {
        self.api.as_ref().and_then(Api::current).map(|p| p.client)
    }

    /// What disruption work needs (borrowed apart from the driver's
    /// `disruption`).
    pub(in crate::supervisor) fn disruption_env<'a>(
        &'a self,
        opts: &'a Options,
        metrics: &'a Arc<Metrics>,
    ) -> disrupt::Env<'a> {
        disrupt::Env {
            store: &self.store,
            metrics,
            client: self.client(),
            node: &opts.node_name,
            opts: &opts.disruption,
            applied: self.applied.as_ref(),
        }
    }

    /// After each kubelet start (`running`: its pid), one config check
    /// `SETTLE_CHECK` later.
    pub(in crate::supervisor) fn schedule_settle(&mut self, running: Option<i32>, now: Instant) {
        if running.is_some() && running != self.settle_for {
            self.settle_at = Some(now + SETTLE_CHECK);
        } else if running.is_none() {
            self.settle_at = None;
        }
        self.settle_for = running;
    }

    /// A pending step is due at `at` (a drain's retry): the check runs then
    /// at the latest.
    pub(in crate::supervisor) fn due_by(&mut self, at: Instant) {
        self.config_due = Some(self.config_due.map_or(at, |due| due.min(at)));
    }

    /// The next start is to be prepared anew (the config may have changed).
    pub(in crate::supervisor) fn prepare_again(&mut self) {
        self.prepare_due = true;
    }

    /// Whether to prepare the next start now (`waiting`: another holds the
    /// lock). At most once per [`PREPARE_INTERVAL`]: one that comes too
    /// soon is due at `prepare_at`. Not waiting: prepared anew when the
    /// next wait begins.
    pub(super) fn prepare_now(&mut self, waiting: bool, now: Instant) -> bool {
        if !waiting {
            self.prepare_due = true;
            self.prepare_at = None;
            return false;
        }
        if !self.prepare_due || self.preparing.is_some() {
            return false;
        }
        if let Some(last) = self
            .last_prepare
            .filter(|t| now.duration_since(*t) < PREPARE_INTERVAL)
        {
            self.prepare_at = Some(last + PREPARE_INTERVAL);
            return false;
        }
        self.prepare_due = false;
        self.prepare_at = None;
        self.last_prepare = Some(now);
        true
    }

    /// Our kubelet exited without being asked to.
    pub(in crate::supervisor) fn crashed(&mut self) {
        self.crashes_in_a_row += 1;
    }

    /// A kubelet ran through a config check.
    pub(super) fn checked(&mut self) {
        self.crashes_in_a_row = 0;
    }

    /// The kubelet crash-loops: a config kept running while a change waits
    /// is given up.
    pub(super) fn crash_looping(&self) -> bool {
        self.crashes_in_a_row >= PINNED_CRASH_LIMIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side() -> (tempfile::TempDir, ConfigSide) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        (dir, ConfigSide::new(store, None))
    }

    #[test]
    fn each_kubelet_start_gets_one_settle_check() {
        let (_dir, mut c) = side();
        let now = Instant::now();
        c.schedule_settle(Some(10), now);
        assert_eq!(c.settle_at, Some(now + SETTLE_CHECK));
        // The same kubelet: not scheduled again (the check ran, or runs).
        c.settle_at = None;
        c.schedule_settle(Some(10), now + SETTLE_CHECK);
        assert_eq!(c.settle_at, None);
        // A new kubelet.
        c.schedule_settle(Some(11), now);
        assert_eq!(c.settle_at, Some(now + SETTLE_CHECK));
        // None runs: no check.
        c.schedule_settle(None, now);
        assert_eq!(c.settle_at, None);
    }

    #[test]
    fn a_due_step_keeps_the_earliest_moment() {
        let (_dir, mut c) = side();
        let now = Instant::now();
        c.due_by(now + SETTLE_CHECK);
        c.due_by(now + 2 * SETTLE_CHECK);
        assert_eq!(c.config_due, Some(now + SETTLE_CHECK));
        c.due_by(now);
        assert_eq!(c.config_due, Some(now));
    }

    #[test]
    fn a_waiter_prepares_at_most_once_per_interval() {
        let (_dir, mut c) = side();
        let now = Instant::now();
        assert!(c.prepare_now(true, now));
        // Nothing changed since: nothing to prepare.
        assert!(!c.prepare_now(true, now));
        assert_eq!(c.prepare_at, None);
        // A hint: due, but too soon; the timer says when.
        c.prepare_again();
        assert!(!c.prepare_now(true, now + PREPARE_INTERVAL / 2));
        assert_eq!(c.prepare_at, Some(now + PREPARE_INTERVAL));
        assert!(c.prepare_now(true, now + PREPARE_INTERVAL));
        assert_eq!(c.prepare_at, None);
    }

    #[test]
    fn a_holder_prepares_nothing_and_is_due_at_its_next_wait() {
        let (_dir, mut c) = side();
        let now = Instant::now();
        assert!(c.prepare_now(true, now));
        c.prepare_at = Some(now);
        assert!(!c.prepare_now(false, now + PREPARE_INTERVAL));
        assert_eq!(c.prepare_at, None);
        assert!(c.prepare_now(true, now + PREPARE_INTERVAL));
    }

    #[test]
    fn crashes_in_a_row_end_a_pinned_config() {
        let (_dir, mut c) = side();
        for _ in 0..PINNED_CRASH_LIMIT - 1 {
            c.crashed();
        }
        assert!(!c.crash_looping());
        c.crashed();
        assert!(c.crash_looping());
        c.checked();
        assert!(!c.crash_looping());
    }

    #[test]
    fn local_only_mode_has_no_client() {
        let (_dir, c) = side();
        assert!(c.client().is_none());
    }
}
