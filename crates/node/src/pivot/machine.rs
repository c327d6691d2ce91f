//! The supervisor's state machine, free of I/O: `Pivot::step(input)` moves
//! the state and returns the effects the driver (`supervisor`) must carry
//! out. Every transition is unit-tested below without processes.
//!
//! ```text
//!            Acquired                    Cleared              KubeletStarted
//! Waiting ───────────▶ Holding(Clearing) ───────▶ Holding(Starting) ─────────▶ Holding(Running)
//!    ▲  │  │ HolderAlive (the record   ▲    ▲ BackoffElapsed   │  │ exit
//!    │  │  │ names a live supervisor)  │    └── Holding(Backoff)◀┘  │
//!    │  │  ▼                           │ GroupGone(Restart)        │ Contended / Terminate /
//!    │  │ Deferring ◀─ GroupGone(Yield)┴──────── Stopping ◀────────┘ Reload / LockLost (SIGKILL)
//!    │  └▶ (Acquired, higher contender blocked)    │ GroupGone(Shutdown)    │ GroupGone(LockLost):
//!    └─ HandoverSeen ─ Deferring                   ▼                        ▼ reopen, Waiting
//!                                                Exited
//! ```

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::kubelet::child::{Backoff, ExitKind, Kubelet};
use crate::pivot::contention::Contender;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    /// The lock is ours, but a kubelet may start only once the evidence of
    /// the holder record allows it (`takeover::decide`): no other live
    /// supervisor is recorded, and no dead one's kubelet still runs.
    Clearing,
    /// Spawn requested, not yet confirmed.
    Starting,
    Running(Kubelet),
    /// The kubelet exited; restart at `until`.
    Backoff {
        until: Instant,
        delay: Duration,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopPurpose {
    Yield(Contender),
    Shutdown,
    Restart,
    LockLost,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Trying to take the lock (blocked in flock when someone holds it).
    Waiting,
    /// Not holding: a contender that should get the lock is blocked on it;
    /// wait until it has taken it before flocking again.
    Deferring {
        to: Contender,
        since: Instant,
        /// Take the lock back after this long if the contender never took it.
        patience: Duration,
    },
    /// We hold the lock.
    Holding(Run),
    /// Stopping our kubelet's process group.
    Stopping {
        kubelet: Kubelet,
        purpose: StopPurpose,
        deadline: Instant,
        killed: bool,
    },
    Exited(i32),
}

/// Whom to hand the lock to after acquiring it, and for how long to wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferral {
    pub to: Contender,
    pub patience: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// flock returned; `defer_to` is set when a higher contender should get
    /// the lock instead of us.
    Acquired {
        defer_to: Option<Deferral>,
    },
    KubeletStarted(Kubelet),
    KubeletFailedToStart,
    KubeletExited {
        pid: i32,
        how: ExitKind,
    },
    BackoffElapsed,
    Contended(Contender),
    StopDeadline,
    GroupGone,
    Terminate,
    Reload,
    LockLost,
    /// While deferring: the contender has taken the lock (or is gone).
    HandoverSeen,
    /// While clearing: our record names us now; the kubelet may start.
    Cleared,
    /// While clearing: the holder record names another live supervisor (its
    /// kubelet runs, or is about to, under a lock file the path may no
    /// longer name): hand the lock to it instead of starting a second
    /// kubelet.
    HolderAlive(Contender),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Take the lock (non-blocking first, then block in a thread).
    Acquire,
    Release,
    /// Look at the holder record: take over (fencing what a dead holder
    /// left), or report `Cleared` / `HolderAlive` (or nothing: look again).
    Clear,
    /// Write the holder record for the current state.
    WriteHolder,
    RemoveHolder,
    /// Remove our claim file (only when leaving while holding: a waiter
    /// blocked in flock keeps its claim until the process is gone).
    WithdrawClaim,
    Spawn,
    SignalGroup(i32, Signal),
    /// Open the lock path anew (the file we held is no longer ours).
    Reopen,
    /// Tell systemd we are stopping.
    NotifyStopping,
    Exit(i32),
}

/// Static settings of the state machine.
#[derive(Debug, Clone, Copy)]
pub struct MachineSettings {
    pub stop_timeout: Duration,
    pub exit_on_yield: bool,
    /// After a yield: how long to wait for the contender to take the lock.
    pub defer_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct Pivot {
    pub state: State,
    pub settings: MachineSettings,
    pub backoff: Backoff,
    /// Handoffs (yields) done so far.
    pub yields: u64,
}

impl Pivot {
    pub fn new(settings: MachineSettings, backoff: Backoff) -> Self {
        Pivot {
            state: State::Waiting,
            settings,
            backoff,
            yields: 0,
        }
    }

    /// The kubelet we run or are stopping, if any.
    pub fn kubelet(&self) -> Option<Kubelet> {
        match &self.state {
            State::Holding(Run::Running(k)) => Some(*k),
            State::Stopping { kubelet, .. } => Some(*kubelet),
            _ => None,
        }
    }

    pub fn holds_lock(&self) -> bool {
        matches!(self.state, State::Holding(_) | State::Stopping { .. })
    }

    fn stop(&mut self, kubelet: Kubelet, purpose: StopPurpose, now: Instant) -> Vec<Effect> {
        self.state = State::Stopping {
            kubelet,
            purpose,
            deadline: now + self.settings.stop_timeout,
            killed: false,
        };
        vec![Effect::SignalGroup(kubelet.pgid(), Signal::SIGTERM)]
    }

    fn finish_yield(&mut self, to: Contender, now: Instant) -> Vec<Effect> {
        self.yields += 1;
        let mut fx = vec![Effect::RemoveHolder, Effect::Release];
        if self.settings.exit_on_yield {
            self.state = State::Exited(0);
            fx.push(Effect::Exit(0));
        } else {
            self.state = State::Deferring {
                to,
                since: now,
                patience: self.settings.defer_timeout,
            };
        }
        fx
    }

    /// After losing the lock (our kubelet's group is gone): remove our
    /// holder record (only if it still names us: nobody else writes a
    /// record that names a live supervisor, see `takeover`), let go of the
    /// old file and wait for the one the path names now.
    fn wait_again(&mut self) -> Vec<Effect> {
        self.state = State::Waiting;
        vec![
            Effect::RemoveHolder,
            Effect::Release,
            Effect::Reopen,
            Effect::Acquire,
        ]
    }

    fn exit(&mut self, code: i32, held: bool) -> Vec<Effect> {
        self.state = State::Exited(code);
        let mut fx = Vec::new();
        if held {
            // A holder that leaves withdraws its claim before unlocking, so
            // the waiter that gets the lock does not defer to a claimant
            // that is about to exit.
            fx.push(Effect::RemoveHolder);
            fx.push(Effect::WithdrawClaim);
            fx.push(Effect::Release);
        }
        fx.push(Effect::Exit(code));
        fx
    }

    /// Applies one input. Inputs that make no sense in the current state are
    /// ignored (they are late: e.g. a contention seen just before a stop).
    pub fn step(&mut self, input: Input, now: Instant) -> Vec<Effect> {
        use Input as I;
        let state = self.state.clone();
        match (state, input) {
            (State::Exited(_), _) => vec![],

            (State::Waiting, I::Acquired { defer_to: Some(d) }) => {
                self.state = State::Deferring {
                    to: d.to,
                    since: now,
                    patience: d.patience,
                };
                vec![Effect::Release]
            }
            (State::Waiting, I::Acquired { defer_to: None }) => {
                // Holding the lock the path names proves nothing about a
                // kubelet started under another inode of the path: the
                // holder record decides first (I1).
                self.state = State::Holding(Run::Clearing);
                vec![Effect::Clear]
            }
            (State::Holding(Run::Clearing), I::Cleared) => {
                self.state = State::Holding(Run::Starting);
                vec![Effect::Spawn]
            }
            (State::Holding(Run::Clearing), I::HolderAlive(to)) => {
                self.state = State::Deferring {
                    to,
                    since: now,
                    patience: self.settings.defer_timeout,
                };
                vec![Effect::Release]
            }
            (State::Deferring { .. }, I::HandoverSeen) => {
                self.state = State::Waiting;
                vec![Effect::Acquire]
            }
            (State::Waiting | State::Deferring { .. }, I::Terminate) => {
                vec![Effect::NotifyStopping]
                    .into_iter()
                    .chain(self.exit(0, false))
                    .collect()
            }

            (State::Holding(Run::Starting), I::KubeletStarted(k)) => {
                self.state = State::Holding(Run::Running(k));
                vec![Effect::WriteHolder]
            }
            (State::Holding(Run::Starting), I::KubeletFailedToStart) => {
                let delay = self.backoff.next_delay(Duration::ZERO);
                self.state = State::Holding(Run::Backoff {
                    until: now + delay,
                    delay,
                });
                vec![Effect::WriteHolder]
            }
            (State::Holding(Run::Running(k)), I::KubeletExited { pid, .. }) if pid == k.pid => {
                let delay = self
                    .backoff
                    .next_delay(now.saturating_duration_since(k.started));
                self.state = State::Holding(Run::Backoff {
                    until: now + delay,
                    delay,
                });
                // Leftovers of the crashed kubelet's group go before a restart.
                vec![
                    Effect::SignalGroup(k.pgid(), Signal::SIGKILL),
                    Effect::WriteHolder,
                ]
            }
            (State::Holding(Run::Backoff { .. }), I::BackoffElapsed | I::Reload) => {
                self.state = State::Holding(Run::Starting);
                vec![Effect::Spawn]
            }
            (State::Holding(Run::Running(k)), I::Contended(c)) => {
                self.stop(k, StopPurpose::Yield(c), now)
            }
            (State::Holding(_), I::Contended(c)) => self.finish_yield(c, now),
            (State::Holding(Run::Running(k)), I::Terminate) => {
                let mut fx = vec![Effect::NotifyStopping];
                fx.extend(self.stop(k, StopPurpose::Shutdown, now));
                fx
            }
            (State::Holding(_), I::Terminate) => vec![Effect::NotifyStopping]
                .into_iter()
                .chain(self.exit(0, true))
                .collect(),
            (State::Holding(Run::Running(k)), I::Reload) => self.stop(k, StopPurpose::Restart, now),
            // We no longer hold the lock that the path names: another
            // kubelet may run already, so ours ends at once (no graceful
            // stop), then we wait for the lock again.
            (State::Holding(Run::Running(k)), I::LockLost) => {
                self.state = State::Stopping {
                    kubelet: k,
                    purpose: StopPurpose::LockLost,
                    deadline: now,
                    killed: true,
                };
                vec![Effect::SignalGroup(k.pgid(), Signal::SIGKILL)]
            }
            (State::Holding(_), I::LockLost) => self.wait_again(),

            (
                State::Stopping {
                    kubelet,
                    purpose,
                    deadline,
                    killed: false,
                },
                I::StopDeadline,
            ) => {
                self.state = State::Stopping {
                    kubelet,
                    purpose,
                    deadline,
                    killed: true,
                };
                vec![Effect::SignalGroup(kubelet.pgid(), Signal::SIGKILL)]
            }
            (
                State::Stopping {
                    kubelet,
                    purpose,
                    deadline,
                    killed,
                },
                I::Terminate,
            ) => {
                if purpose == StopPurpose::Shutdown && !killed {
                    // Second SIGTERM: stop waiting for a graceful exit.
                    self.state = State::Stopping {
                        kubelet,
                        purpose,
                        deadline,
                        killed: true,
                    };
                    vec![Effect::SignalGroup(kubelet.pgid(), Signal::SIGKILL)]
                } else {
                    self.state = State::Stopping {
                        kubelet,
                        purpose: StopPurpose::Shutdown,
                        deadline,
                        killed,
                    };
                    vec![Effect::NotifyStopping]
                }
            }
            (
                State::Stopping {
                    kubelet,
                    purpose: StopPurpose::Restart,
                    deadline,
                    killed,
                },
                I::Contended(c),
            ) => {
                self.state = State::Stopping {
                    kubelet,
                    purpose: StopPurpose::Yield(c),
                    deadline,
                    killed,
                };
                vec![]
            }
            // Lost while stopping: no more grace for our kubelet.
            (
                State::Stopping {
                    kubelet,
                    purpose,
                    deadline,
                    killed,
                },
                I::LockLost,
            ) => {
                let purpose = match purpose {
                    StopPurpose::Shutdown => StopPurpose::Shutdown,
                    _ => StopPurpose::LockLost,
                };
                self.state = State::Stopping {
                    kubelet,
                    purpose,
                    deadline,
                    killed: true,
                };
                if killed {
                    vec![]
                } else {
                    vec![Effect::SignalGroup(kubelet.pgid(), Signal::SIGKILL)]
                }
            }
            (State::Stopping { purpose, .. }, I::GroupGone) => match purpose {
                StopPurpose::Yield(c) => self.finish_yield(c, now),
                StopPurpose::Shutdown => self.exit(0, true),
                StopPurpose::Restart => {
                    self.backoff.reset();
                    self.state = State::Holding(Run::Starting);
                    vec![Effect::Spawn]
                }
                StopPurpose::LockLost => self.wait_again(),
            },

            // Late or irrelevant inputs.
            (_, _) => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pivot::role::Rank;
    use crate::procfs::ProcessId;

    fn pivot(exit_on_yield: bool) -> Pivot {
        Pivot::new(
            MachineSettings {
                stop_timeout: Duration::from_secs(30),
                exit_on_yield,
                defer_timeout: Duration::from_secs(2),
            },
            Backoff::default(),
        )
    }

    fn kubelet(pid: i32, at: Instant) -> Kubelet {
        Kubelet {
            pid,
            id: ProcessId { pid, start_time: 7 },
            started: at,
        }
    }

    fn v2() -> Contender {
        Contender::Claimant {
            rank: Rank::self_hosted(2),
            pid: 99,
        }
    }

    fn holding(p: &mut Pivot, pid: i32, now: Instant) {
        p.step(Input::Acquired { defer_to: None }, now);
        p.step(Input::Cleared, now);
        p.step(Input::KubeletStarted(kubelet(pid, now)), now);
    }

    #[test]
    fn acquire_clears_then_spawns() {
        let mut p = pivot(false);
        let now = Instant::now();
        let fx = p.step(Input::Acquired { defer_to: None }, now);
        assert_eq!(fx, vec![Effect::Clear]);
        assert_eq!(p.state, State::Holding(Run::Clearing));
        // A kubelet start is not even possible before the record allows it.
        assert!(p
            .step(Input::KubeletStarted(kubelet(9, now)), now)
            .is_empty());
        assert!(p.step(Input::BackoffElapsed, now).is_empty());
        let fx = p.step(Input::Cleared, now);
        assert_eq!(fx, vec![Effect::Spawn]);
        let fx = p.step(Input::KubeletStarted(kubelet(10, now)), now);
        assert_eq!(fx, vec![Effect::WriteHolder]);
        assert_eq!(p.kubelet().map(|k| k.pid), Some(10));
    }

    #[test]
    fn a_live_recorded_holder_gets_the_lock_instead_of_a_second_kubelet() {
        let mut p = pivot(false);
        let now = Instant::now();
        p.step(Input::Acquired { defer_to: None }, now);
        let holder = Contender::Holder {
            rank: Rank::self_hosted(1),
            pid: 77,
        };
        let fx = p.step(Input::HolderAlive(holder.clone()), now);
        assert_eq!(fx, vec![Effect::Release]);
        assert!(!p.holds_lock());
        assert!(matches!(&p.state, State::Deferring { to, .. } if *to == holder));
        assert_eq!(p.step(Input::HandoverSeen, now), vec![Effect::Acquire]);
        // Terminate and contention while clearing: no kubelet to stop.
        p.step(Input::Acquired { defer_to: None }, now);
        assert_eq!(
            p.step(Input::Contended(v2()), now),
            vec![Effect::RemoveHolder, Effect::Release]
        );
        p.step(Input::HandoverSeen, now);
        p.step(Input::Acquired { defer_to: None }, now);
        assert_eq!(
            p.step(Input::Terminate, now),
            vec![
                Effect::NotifyStopping,
                Effect::RemoveHolder,
                Effect::WithdrawClaim,
                Effect::Release,
                Effect::Exit(0)
            ]
        );
    }

    #[test]
    fn acquire_with_higher_waiter_defers_without_spawning() {
        let mut p = pivot(false);
        let now = Instant::now();
        let fx = p.step(
            Input::Acquired {
                defer_to: Some(Deferral {
                    to: v2(),
                    patience: Duration::from_millis(500),
                }),
            },
            now,
        );
        assert_eq!(fx, vec![Effect::Release]);
        assert!(!p.holds_lock());
        assert!(matches!(
            p.state,
            State::Deferring { patience, .. } if patience == Duration::from_millis(500)
        ));
        assert_eq!(p.step(Input::HandoverSeen, now), vec![Effect::Acquire]);
        assert_eq!(p.state, State::Waiting);
    }

    #[test]
    fn yield_stops_group_then_releases_and_defers() {
        let mut p = pivot(false);
        let now = Instant::now();
        holding(&mut p, 10, now);
        let fx = p.step(Input::Contended(v2()), now);
        assert_eq!(fx, vec![Effect::SignalGroup(10, Signal::SIGTERM)]);
        // The kubelet exiting is not enough: the whole group must be gone.
        assert!(p
            .step(
                Input::KubeletExited {
                    pid: 10,
                    how: ExitKind::Code(0)
                },
                now
            )
            .is_empty());
        assert!(p.holds_lock());
        let fx = p.step(Input::GroupGone, now);
        assert_eq!(fx, vec![Effect::RemoveHolder, Effect::Release]);
        assert!(matches!(p.state, State::Deferring { .. }));
        assert_eq!(p.yields, 1);
    }

    #[test]
    fn exit_on_yield_exits_zero() {
        let mut p = pivot(true);
        let now = Instant::now();
        holding(&mut p, 10, now);
        p.step(Input::Contended(Contender::AnyOpen), now);
        let fx = p.step(Input::GroupGone, now);
        assert_eq!(
            fx,
            vec![Effect::RemoveHolder, Effect::Release, Effect::Exit(0)]
        );
    }

    #[test]
    fn stop_timeout_escalates_to_sigkill_once() {
        let mut p = pivot(false);
        let now = Instant::now();
        holding(&mut p, 10, now);
        p.step(Input::Terminate, now);
        assert_eq!(
            p.step(Input::StopDeadline, now),
            vec![Effect::SignalGroup(10, Signal::SIGKILL)]
        );
        assert!(p.step(Input::StopDeadline, now).is_empty());
        assert_eq!(
            p.step(Input::GroupGone, now),
            vec![
                Effect::RemoveHolder,
                Effect::WithdrawClaim,
                Effect::Release,
                Effect::Exit(0)
            ]
        );
    }

    #[test]
    fn second_sigterm_forces() {
        let mut p = pivot(false);
        let now = Instant::now();
        holding(&mut p, 10, now);
        assert_eq!(
            p.step(Input::Terminate, now),
            vec![
                Effect::NotifyStopping,
                Effect::SignalGroup(10, Signal::SIGTERM)
            ]
        );
        assert_eq!(
            p.step(Input::Terminate, now),
            vec![Effect::SignalGroup(10, Signal::SIGKILL)]
        );
    }

    #[test]
    fn sigterm_during_yield_turns_into_shutdown() {
        let mut p = pivot(false);
        let now = Instant::now();
        holding(&mut p, 10, now);
        p.step(Input::Contended(v2()), now);
        assert_eq!(p.step(Input::Terminate, now), vec![Effect::NotifyStopping]);
        assert_eq!(
            p.step(Input::GroupGone, now),
            vec![
                Effect::RemoveHolder,
                Effect::WithdrawClaim,
                Effect::Release,
                Effect::Exit(0)
            ]
        );
    }

    #[test]
    fn crash_backs_off_and_restarts() {
        let mut p = pivot(false);
        let now = Instant::now();
        holding(&mut p, 10, now);
        let fx = p.step(
            Input::KubeletExited {
                pid: 10,
                how: ExitKind::Code(1),
            },
            now,
        );
        assert_eq!(
            fx,
            vec![
                Effect::SignalGroup(10, Signal::SIGKILL),
                Effect::WriteHolder
            ]
        );
        let State::Holding(Run::Backoff { delay, .. }) = p.state.clone() else {
            panic!("expected backoff, got {:?}", p.state)
        };
        assert_eq!(delay, Duration::from_millis(100));
        assert_eq!(p.step(Input::BackoffElapsed, now), vec![Effect::Spawn]);
        p.step(Input::KubeletStarted(kubelet(11, now)), now);
        p.step(
            Input::KubeletExited {
                pid: 11,
                how: ExitKind::Code(1),
            },
            now,
        );
        let State::Holding(Run::Backoff { delay, .. }) = p.state.clone() else {
            panic!("expected backoff")
        };
        assert_eq!(delay, Duration::from_millis(200));
    }

    #[test]
    fn exit_of_an_unrelated_pid_is_ignored() {
        let mut p = pivot(false);
        let now = Instant::now();
        holding(&mut p, 10, now);
        assert!(p
            .step(
                Input::KubeletExited {
                    pid: 77,
                    how: ExitKind::Code(0)
                },
                now
            )
            .is_empty());
        assert_eq!(p.kubelet().map(|k| k.pid), Some(10));
    }

    #[test]
    fn sighup_restarts_without_releasing() {
        let mut p = pivot(false);
        let now = Instant::now();
        holding(&mut p, 10, now);
        assert_eq!(
            p.step(Input::Reload, now),
            vec![Effect::SignalGroup(10, Signal::SIGTERM)]
        );
        assert_eq!(p.step(Input::GroupGone, now), vec![Effect::Spawn]);
        assert!(p.holds_lock());
    }

    #[test]
    fn lock_lost_kills_the_kubelet_at_once_and_waits_again() {
        let mut p = pivot(false);
        let now = Instant::now();
        holding(&mut p, 10, now);
        assert_eq!(
            p.step(Input::LockLost, now),
            vec![Effect::SignalGroup(10, Signal::SIGKILL)]
        );
        // No graceful-stop deadline to wait for: it was killed already.
        assert_eq!(p.step(Input::StopDeadline, now), vec![]);
        let again = vec![
            Effect::RemoveHolder,
            Effect::Release,
            Effect::Reopen,
            Effect::Acquire,
        ];
        assert_eq!(p.step(Input::GroupGone, now), again);
        assert_eq!(p.state, State::Waiting);
        // Lost before a kubelet ran (the check before spawning): wait again.
        p.step(Input::Acquired { defer_to: None }, now);
        assert_eq!(p.step(Input::LockLost, now), again);
    }

    #[test]
    fn terminate_while_waiting_exits_without_release() {
        let mut p = pivot(false);
        let now = Instant::now();
        assert_eq!(
            p.step(Input::Terminate, now),
            vec![Effect::NotifyStopping, Effect::Exit(0)]
        );
    }
}
