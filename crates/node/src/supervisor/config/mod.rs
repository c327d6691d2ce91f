//! Config preparation: resolving the config for the next kubelet start
//! (prepared while waiting, or resolved at start), crash counting, the
//! config change check, and the API syncer's lifetime.

use super::*;

mod side;
pub(super) use side::ConfigSide;

use super::disrupt::Pending;
use super::due::instant_of;
use crate::cluster::drain::Drainer;
use crate::config::running::{self, StartChoice};
use crate::kubelet::{flags, state_files};
use kp_kubelet_config::disruption::{Change, StateFile};

/// How often a wait for config work looks at the termination flag.
pub(super) const TERMINATE_POLL: Duration = Duration::from_millis(10);

/// Runs config work (store reads, parsing, validation) off the event loop
/// and waits for it, unless SIGTERM/SIGINT comes first: then `None` at
/// once, and the work is left to finish (or to die with the process; every
/// store write is atomic). A signal is acted on within ~10 ms of any parse.
pub(super) async fn blocking_unless_terminated<T: Send + 'static>(
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

/// When the holder must look at its config again without an event: a trial
/// ends (promotion to last-known-good), or a drain that backs off is due
/// again (not while a drain task runs: it writes the record anew). Nothing
/// else changes the decision but an event (inotify on the store and the
/// drop-ins, a kubelet exit, a signal).
fn next_due(
    trial_ends: Option<std::time::SystemTime>,
    record: Option<&crate::config::store::DisruptionRecord>,
) -> Option<Instant> {
    [
        trial_ends.map(instant_of),
        super::disrupt::retry_due(record),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// The result of a blocking task, if one runs.
pub(super) async fn join_opt<T>(
    task: &mut Option<tokio::task::JoinHandle<Option<T>>>,
) -> Option<T> {
    match task.as_mut() {
        Some(t) => t.await.ok().flatten(),
        None => std::future::pending().await,
    }
}

/// How often a waiting supervisor may prepare its next start anew.
pub(super) const PREPARE_INTERVAL: Duration = Duration::from_secs(1);

impl Driver {
    /// The syncer runs exactly while we hold the lock (only the holder
    /// writes the store and reports status).
    pub(super) fn tend_syncer(&mut self) {
        // Not while clearing: until our holder record is written, another
        // supervisor's record may name the node's holder (see `takeover`).
        let holding = self.pivot.holds_lock()
            && !matches!(
                self.pivot.state,
                State::Exited(_) | State::Holding(Run::Clearing)
            );
        let current = self.config.api.as_ref().and_then(Api::current);
        // A new client (the kubeconfig appeared, credentials rotated): the
        // syncer of the old one stops and one with the new starts.
        if let (Some(task), Some(p)) = (&self.config.sync_task, &current) {
            if p.generation != self.config.sync_generation {
                info!(
                    generation = p.generation,
                    "new API credentials: restarting the sync with them"
                );
                task.abort();
                self.config.sync_task = None;
            }
        }
        match (current, holding, &self.config.sync_task) {
            (Some(published), true, None) => {
                self.config.sync_generation = published.generation;
                let hint = self.config.api.as_ref().map(Api::hint).unwrap_or_default();
                let syncer = Syncer::new(
                    published.client,
                    hint,
                    self.opts.node_name.clone(),
                    self.config.store.clone(),
                    self.config.reports.subscribe(),
                    self.metrics.clone(),
                );
                self.config.sync_task = Some(tokio::spawn(syncer.run()));
            }
            (_, false, Some(task)) => {
                task.abort();
                self.config.sync_task = None;
            }
            _ => {}
        }
    }
    /// The newest API client, if any.
    pub(super) fn client(&self) -> Option<kube::Client> {
        self.config.client()
    }
    /// While holding: records what the API access does in `STATE/api.json`
    /// for `status` (on every change; off the loop).
    pub(super) fn tend_api_status(&mut self) {
        if !self.pivot.holds_lock() || matches!(self.pivot.state, State::Exited(_)) {
            self.config.api_status_written = None;
            return;
        }
        // Local-only mode writes nothing (no new work on its path): `status`
        // shows an `API` row only for the live holder's own record.
        let Some(now) = self.config.api.as_ref().map(Api::status) else {
            return;
        };
        if self
            .config
            .api_status_written
            .as_ref()
            .is_some_and(|w| w.same_as(&now))
        {
            return;
        }
        // The follower logs each change itself (one line each).
        debug!(api = %now.message, "recording the API access for status");
        self.config.api_status_written = Some(now.clone());
        let mut now = now;
        now.pid = Some(self.me.pid);
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(err) = now.write(&state) {
                warn!(%err, "cannot write the API status record; `status` may show an old API row");
            }
        });
    }
    /// Stops the syncer before the lock is released, and waits for any
    /// store write it has in flight (writes hold the store's writer lock), so
    /// that no write of ours lands after the next holder took over.
    pub(super) async fn stop_syncer(&mut self) {
        let Some(task) = self.config.sync_task.take() else {
            return;
        };
        task.abort();
        let _ = task.await;
        let store = self.config.store.clone();
        if let Some(Err(err)) = blocking(move || store.lock().map(drop)).await {
            warn!(%err, "cannot take the store lock to fence in-flight writes");
        }
    }
    pub(super) fn publish_report(&self, r: &Resolved) {
        let report = ConfigReport {
            origin: r.origin,
            source: r.source.clone(),
            local_kind: if self.opts.local.path.is_some() {
                "init"
            } else {
                "default"
            },
            error: r.error.as_ref().map(|e| e.to_string()),
            failure: r
                .error
                .as_ref()
                .map(crate::config::lifecycle::ConfigStatusError::failure),
            assigned: r.assigned.clone(),
            last_known_good: r.last_known_good.clone(),
            disruption: self.disruption.report(),
        };
        self.metrics.config(&report);
        self.config.reports.send_if_modified(|cur| {
            if cur.as_ref() == Some(&report) {
                false
            } else {
                *cur = Some(report);
                true
            }
        });
    }
    /// A kubelet exit we did not cause counts against a config on trial.
    pub(super) async fn count_crash(&mut self) {
        let Some(applied) = self.config.applied.clone() else {
            return;
        };
        let store = self.config.store.clone();
        let since = self.holder_since_time;
        // A durable write (fsync) that can take 100 ms and more on a busy
        // disk: a SIGTERM meanwhile is acted on at once (the write finishes
        // or dies with the process; it is atomic either way).
        let terminate = &self.opts.terminate;
        match blocking_unless_terminated(terminate, move || {
            lifecycle::on_crash(&store, &applied, since, std::time::SystemTime::now())
        })
        .await
        {
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
    /// On a store change (or the safety tick): when the effective config
    /// changed, classify the change and carry out its class's action
    /// (restart, drain, hold); finish a drain whose restart is done;
    /// promote a config that survived its trial.
    pub(super) async fn check_config(&mut self) -> Vec<Input> {
        if !matches!(self.pivot.state, State::Holding(Run::Running(_))) {
            return vec![];
        }
        let Some(applied) = self.config.applied.clone() else {
            return vec![];
        };
        self.config.checked();
        let store = self.config.store.clone();
        let local = self.opts.local.clone();
        let base = self.opts.disruption.policy.clone();
        let Some((resolved, pending, promoted, trial_ends)) =
            blocking_unless_terminated(&self.opts.terminate, move || {
                let promoted =
                    lifecycle::maybe_promote(&store, &applied, std::time::SystemTime::now());
                let resolved = lifecycle::resolve(&store, &local, Access::Holder);
                let trial_ends = lifecycle::trial_ends(&store, &resolved);
                // Same effective config: nothing restarts, but what runs (origin,
                // error, trial) is recorded.
                let same = resolved.hash() == applied.hash();
                let recorded = if same {
                    lifecycle::on_applied(&store, &resolved)
                } else {
                    Ok(())
                };
                let pending = Pending {
                    change: if same {
                        Default::default()
                    } else {
                        kp_kubelet_config::disruption::classify(&applied.config, &resolved.config)
                    },
                    policy: running::node_policy(&base, &store),
                    record: store.disruption().unwrap_or_else(|err| {
                        error!(%err, "cannot read the disruption record; treating it as absent");
                        None
                    }),
                };
                (resolved, pending, promoted.and(recorded), trial_ends)
            })
            .await
        else {
            return vec![];
        };
        let retry_record = pending.record.clone();
        let inputs = self.apply_checked(resolved, pending, promoted).await;
        let retry_record = retry_record.filter(|_| !self.disruption.task_running());
        self.config.config_due = next_due(trial_ends, retry_record.as_ref());
        inputs
    }

    /// The second half of [`Driver::check_config`]: act on what it read.
    async fn apply_checked(
        &mut self,
        resolved: Resolved,
        pending: Pending,
        promoted: Result<(), StoreError>,
    ) -> Vec<Input> {
        if let Err(err) = promoted {
            error!(%err, "cannot update the config state (promotion or effective record) in the store");
        }
        let old_hash = self.config.applied.as_ref().map(Resolved::hash);
        if Some(resolved.hash()) != old_hash {
            let known = pending
                .record
                .as_ref()
                .is_some_and(|r| r.target_hash == resolved.hash());
            if known {
                debug!(to = %resolved.hash(), "config change still pending");
            } else {
                info!(from = old_hash.as_ref().map(tracing::field::display), to = %resolved.hash(), config = %resolved.describe(), change = %running::describe(&pending.change), "effective kubelet config changed");
            }
            let inputs = self.on_disruptive(&resolved, pending).await;
            if let Some(applied) = self.config.applied.clone() {
                self.publish_report(&applied);
            }
            return inputs;
        }
        self.settle(pending.record).await;
        self.publish_report(&resolved);
        self.config.applied = Some(resolved);
        vec![]
    }
    /// While another supervisor holds the lock: prepare our kubelet start
    /// (resolve and check the config off the loop), and keep it fresh.
    /// Runs on every loop iteration; prepares when it is due (the wait
    /// began, or the config may have changed: a hint) and at most once per
    /// `PREPARE_INTERVAL` (a timer brings a due preparation that came too
    /// soon). A stale start is refused at acquisition anyway
    /// (`take_prepared` checks it again).
    pub(super) fn tend_prepared(&mut self) {
        let waiting = matches!(self.pivot.state, State::Waiting | State::Deferring { .. });
        if !self.config.prepare_now(waiting, Instant::now()) {
            return;
        }
        if self
            .config
            .prepared
            .as_ref()
            .is_some_and(|p| p.still_valid(&self.config.store))
        {
            return;
        }
        self.config.prepared = None;
        let store = self.config.store.clone();
        let local = self.opts.local.clone();
        let base = self.opts.disruption.policy.clone();
        let api = self.config.api.is_some();
        self.config.preparing = Some(tokio::task::spawn_blocking(move || {
            let policy = running::node_policy(&base, &store);
            Prepared::prepare(&store, &local, &policy, api)
        }));
    }
    /// The prepared start, if nothing it rests on changed: the kubelet
    /// command, with `applied` and the report set as a full resolution does.
    pub(super) fn take_prepared(
        &mut self,
    ) -> Option<(
        KubeletCommand,
        Option<crate::config::store::DisruptionRecord>,
    )> {
        let prepared = self.config.prepared.take()?;
        if !prepared.still_valid(&self.config.store) {
            return None;
        }
        let resolved = prepared.resolved;
        info!(config = %resolved.describe(), hash = %resolved.hash(), "kubelet config prepared while waiting is unchanged");
        let cmd = KubeletCommand {
            program: self.opts.kubelet.program.clone(),
            args: flags::child_args(
                &self.opts.kubelet.args,
                &self.config.store.effective_config_path(),
            ),
        };
        self.publish_report(&resolved);
        self.config.applied = Some(resolved);
        Some((cmd, prepared.disruption))
    }
    /// After a kubelet started from a prepared config: record what runs
    /// (trial, effective record), as the full path does before starting.
    pub(super) async fn record_applied(&mut self) {
        let Some(applied) = self.config.applied.clone() else {
            return;
        };
        let store = self.config.store.clone();
        if let Some(Err(err)) = blocking(move || lifecycle::on_applied(&store, &applied)).await {
            error!(%err, "cannot record the running config in the checkpoint store");
        }
    }
    /// Resolves the config for the next kubelet start and writes the file
    /// the kubelet reads: the resolved config, or the one that ran last
    /// while a change to the resolved one waits for a drain or a new node.
    /// Kubelet state files the started config contradicts are moved aside
    /// first. Returns the kubelet command to run.
    pub(super) async fn prepare_config(&mut self) -> Option<KubeletCommand> {
        let store = self.config.store.clone();
        let local = self.opts.local.clone();
        let base = self.opts.disruption.policy.clone();
        let api = self.config.api.is_some();
        let root_dir = self.opts.disruption.kubelet_root_dir.clone();
        let crashing = self.config.crash_looping();
        let result = blocking_unless_terminated(&self.opts.terminate, move || {
            let resolved = lifecycle::resolve(&store, &local, Access::Holder);
            let policy = running::node_policy(&base, &store);
            let (start, moved, waiting) = match running::choose_start(
                &store,
                &resolved,
                &policy,
                api,
                crashing,
                &local.target,
            ) {
                StartChoice::Target {
                    state_files,
                    change,
                } => {
                    let moved = move_state_files(&store, &root_dir, &state_files, &change);
                    (resolved, moved, None)
                }
                StartChoice::Previous {
                    running,
                    change,
                    action,
                } => (*running, Vec::new(), Some((change, action))),
            };
            lifecycle::on_applied(&store, &start)?;
            let path = store.write_effective_config(&start.config.effective_bytes())?;
            Ok::<_, StoreError>((start, path, moved, waiting))
        })
        .await?;
        match result {
            Ok((resolved, path, moved, waiting)) => {
                info!(config = %resolved.describe(), hash = %resolved.hash(), error = resolved.error.as_ref().map(tracing::field::display), "kubelet config resolved");
                if let Some((change, action)) = waiting {
                    info!(change = %running::describe(&change), %action, "starting the config that ran last; the change to the assigned one waits for its action");
                }
                self.report_moved(moved);
                let cmd = KubeletCommand {
                    program: self.opts.kubelet.program.clone(),
                    args: flags::child_args(&self.opts.kubelet.args, &path),
                };
                self.publish_report(&resolved);
                self.config.applied = Some(resolved);
                Some(cmd)
            }
            Err(err) => {
                error!(%err, "cannot write the effective kubelet config; not starting the kubelet (will retry with backoff)");
                None
            }
        }
    }

    /// Counts and announces kubelet state files moved aside.
    fn report_moved(&self, moved: Vec<state_files::Moved>) {
        for m in &moved {
            self.metrics.disruption.state_file_moved(&m.name);
        }
        let drainer = self
            .client()
            .map(|c| Drainer::new(c, self.opts.node_name.clone(), self.metrics.clone()));
        let (Some(drainer), false) = (drainer, moved.is_empty()) else {
            return;
        };
        let text = moved
            .iter()
            .map(|m| format!("{} moved to {}", m.from.display(), m.to.display()))
            .collect::<Vec<_>>()
            .join("; ");
        tokio::spawn(async move {
            drainer
                .event(
                    kp_runtime::events::EventType::Normal,
                    "StateFileMoved",
                    &format!(
                        "{text} (the kubelet refuses to start with a checkpoint of another policy)"
                    ),
                )
                .await;
        });
    }
}

/// Moves the kubelet state files `change` invalidates aside (the kubelet
/// is stopped). A failure is logged: the kubelet then refuses to start and
/// the crash-loop detection takes over.
fn move_state_files(
    store: &Store,
    root_dir: &std::path::Path,
    files: &[StateFile],
    change: &Change,
) -> Vec<state_files::Moved> {
    if files.is_empty() {
        return Vec::new();
    }
    let names: Vec<&str> = files.iter().map(|f| f.file_name()).collect();
    let stamp = kp_contract::time::now_rfc3339().replace([':', '-'], "");
    let result = store
        .state_files_dir()
        .map_err(|e| e.to_string())
        .and_then(|dir| {
            state_files::move_aside(root_dir, &dir, &names, &stamp).map_err(|e| e.to_string())
        });
    match result {
        Ok(moved) => {
            for m in &moved {
                info!(from = %m.from.display(), to = %m.to.display(), change = %running::describe(change), "moved the kubelet state file aside: the new config contradicts it");
            }
            moved
        }
        Err(err) => {
            error!(%err, "cannot move the kubelet state files aside; the kubelet will refuse to start with them");
            Vec::new()
        }
    }
}
