//! Carrying out the state machine: feeding inputs to `pivot::machine` and
//! doing the effects it returns (lock, holder record, spawn, signals), and
//! turning signals into inputs.

use super::*;

impl Driver {
    pub(super) async fn feed_all(&mut self, inputs: Vec<Input>) -> Result<(), SupervisorError> {
        let mut queue: VecDeque<Input> = inputs.into();
        while let Some(input) = queue.pop_front() {
            debug!(%input, "input");
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

    pub(super) async fn on_signal(&mut self, sig: i32) -> Vec<Input> {
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

    pub(super) async fn apply(&mut self, effect: Effect) -> Result<Vec<Input>, SupervisorError> {
        debug!(%effect, "effect");
        match effect {
            Effect::Acquire => return self.start_acquire(),
            Effect::Release => {
                self.disruption.stop_task(&self.metrics).await;
                self.stop_syncer().await;
                self.forget_disruption();
                // Our kubelet's group is gone: the description it inherited
                // (of a lock file replaced since) goes too.
                self.lock.release_kubelet_lock();
                if let Err(err) = self.lock.file.release() {
                    error!(%err, "failed to release the lock");
                }
                if let State::Deferring {
                    to: Contender::Holder { .. },
                    ..
                } = self.pivot.state
                {
                    self.lock.file.poke();
                }
            }
            Effect::Clear => return Ok(self.try_clear()),
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
                self.lock.recorded = None;
            }
            Effect::Reopen => {
                self.lock.reopen(&self.opts.lock_path)?;
                self.watcher.rewatch_lock();
            }
            Effect::Spawn => {
                if self.opts.terminate.is_set() {
                    info!("termination requested; not starting a kubelet");
                    return Ok(vec![Input::Terminate]);
                }
                // Never start a kubelet without holding the lock the path
                // names now, and without our record naming the inode the
                // kubelet inherits (see `takeover`).
                let lost = self.confirm_holding();
                if !lost.is_empty() {
                    return Ok(lost);
                }
                // A kubelet that ran under an older inode is gone (backoff,
                // restart): the new one inherits the inode the path names.
                self.lock.release_kubelet_lock();
                if self.lock.recorded != Some(self.lock.file.key()) {
                    self.write_record_now(None);
                }
                // A prepared start brings the disruption record it was
                // prepared with (its stamp is one of those just checked):
                // no read on the blocking pool between the lock and the
                // kubelet's exec.
                let (cmd, from_prepared) = match self.take_prepared() {
                    Some((cmd, record)) => {
                        self.disruption.know(record);
                        (cmd, true)
                    }
                    None => {
                        self.disruption.read_once(&self.config.store).await;
                        match self.prepare_config().await {
                            Some(cmd) => (cmd, false),
                            None if self.opts.terminate.is_set() => {
                                return Ok(vec![Input::Terminate]);
                            }
                            None => return Ok(vec![Input::KubeletFailedToStart]),
                        }
                    }
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
                return Ok(match child::spawn(&cmd, Some(self.lock.file.raw_fd())) {
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
}
