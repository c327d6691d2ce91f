//! Config preparation: resolving the config for the next kubelet start
//! (prepared while waiting, or resolved at start), crash counting, the
//! config change check, and the API syncer's lifetime.

use super::*;

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
    pub(super) async fn stop_syncer(&mut self) {
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
    pub(super) async fn count_crash(&mut self) {
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
    pub(super) async fn check_config(&mut self) -> Vec<Input> {
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
    pub(super) fn tend_prepared(&mut self) {
        if !matches!(self.pivot.state, State::Waiting | State::Deferring { .. }) {
            return;
        }
        // At most once per interval (this runs on every loop iteration,
        // every 5 ms while deferring): a stale start is refused at
        // acquisition anyway (`take_prepared` checks it again).
        let now = Instant::now();
        if self.preparing.is_some()
            || self
                .last_prepare
                .is_some_and(|t| now.duration_since(t) < PREPARE_INTERVAL)
        {
            return;
        }
        self.last_prepare = Some(now);
        if self
            .prepared
            .as_ref()
            .is_some_and(|p| p.still_valid(&self.store))
        {
            return;
        }
        self.prepared = None;
        let store = self.store.clone();
        let local = self.opts.local.clone();
        self.preparing = Some(tokio::task::spawn_blocking(move || {
            Prepared::prepare(&store, &local)
        }));
    }
    /// The prepared start, if nothing it rests on changed: the kubelet
    /// command, with `applied` and the report set as a full resolution does.
    pub(super) fn take_prepared(&mut self) -> Option<KubeletCommand> {
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
    pub(super) async fn record_applied(&mut self) {
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
    pub(super) async fn prepare_config(&mut self) -> Option<KubeletCommand> {
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
}
