//! Verified contention: deciding whether somebody really wants our lock.
//!
//! An inotify `open` on the lock file is only a hint (an operator's `cat`
//! opens it too). A holder yields when:
//! * a live claim of higher rank exists and its owner is blocked in flock on
//!   our lock file (both facts read from the kernel: the claim file's flock
//!   and /proc/locks), or
//! * /proc/locks shows a process blocked on our lock that no claim accounts
//!   for and that runs as root or as our uid (a plain kubelet run with
//!   `--lock-file`; another user's process is never a contender), or
//! * in the background design's mode (`--yield-on-any-open`), on any open.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::pivot::claims::LiveClaim;
use crate::pivot::role::Rank;
use crate::procfs::{FileKey, LockEntry};

/// Someone who should get the lock from us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Contender {
    /// A kubelet-pivot supervisor of higher rank, blocked on the lock.
    Claimant { rank: Rank, pid: i32 },
    /// A process blocked on the lock without a claim (a plain kubelet).
    Unclaimed { pid: i32 },
    /// The background design's behaviour: any open of the lock file.
    AnyOpen,
    /// The live supervisor the holder record names, found by a supervisor
    /// that took the lock: its kubelet runs (or is about to) under a lock
    /// file the path may no longer name. Never produced by [`judge`].
    Holder { rank: Rank, pid: i32 },
}

impl std::fmt::Display for Contender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Contender::Claimant { rank, pid } => write!(f, "{rank} pid {pid}"),
            Contender::Unclaimed { pid } => {
                write!(f, "unclaimed process pid {pid} blocked on the lock")
            }
            Contender::AnyOpen => f.write_str("an open of the lock file (--yield-on-any-open)"),
            Contender::Holder { rank, pid } => {
                write!(f, "the recorded holder, {rank} pid {pid}")
            }
        }
    }
}

/// What one look at claims and /proc/locks found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Yield to this contender now.
    Yield(Contender),
    /// A higher claim exists but its owner is not (yet) blocked on the lock:
    /// look again shortly. `pid` is the owner's pid in our /proc.
    Pending { rank: Rank, pid: i32 },
    /// Nothing to do.
    Quiet,
}

/// Pure decision from the facts. `lock` is our lock file, `mine` our rank,
/// `claims` the verified live claims of other processes, `locks`
/// /proc/locks, `may_contend` whether a pid without a claim runs as a user
/// allowed to contend (root or our uid), `eligible` whether a contender may
/// be yielded to now (not stopped, not skipped after failing to take the
/// lock before).
pub fn judge(
    lock: FileKey,
    mine: Rank,
    claims: &[LiveClaim],
    locks: &[LockEntry],
    may_contend: impl Fn(i32) -> bool,
    eligible: impl Fn(i32) -> bool,
) -> Verdict {
    // pid (in our /proc's namespace) of the verified owner of each claim.
    let claimant_pids: HashMap<i32, Rank> = claims
        .iter()
        .map(|c| (c.owner, c.claim.rank()))
        .filter(|(pid, _)| *pid > 0)
        .collect();
    let claims: Vec<LiveClaim> = claims
        .iter()
        .filter(|c| eligible(c.owner))
        .cloned()
        .collect();
    let blocked: Vec<i32> = locks
        .iter()
        .filter(|e| e.blocked && e.file == lock)
        .map(|e| e.pid)
        .filter(|pid| eligible(*pid))
        .collect();

    // Highest claimant that is blocked on our lock.
    let mut best: Option<(Rank, i32)> = None;
    for pid in &blocked {
        if let Some(rank) = claimant_pids.get(pid) {
            if rank.generation > mine.generation
                && best.is_none_or(|(r, _)| rank.generation > r.generation)
            {
                best = Some((*rank, *pid));
            }
        }
    }
    if let Some((rank, pid)) = best {
        return Verdict::Yield(Contender::Claimant { rank, pid });
    }
    if let Some(pid) = blocked
        .iter()
        .find(|pid| **pid > 0 && !claimant_pids.contains_key(pid) && may_contend(**pid))
    {
        return Verdict::Yield(Contender::Unclaimed { pid: *pid });
    }
    match outranked_by(mine, &claims) {
        Some(c) => Verdict::Pending {
            rank: c.claim.rank(),
            pid: c.owner,
        },
        None => Verdict::Quiet,
    }
}

/// Contenders a holder does not yield to for a while: each failed to take
/// the lock it was handed (frozen, or stuck between its claim and flock).
/// The period doubles on each failure, so one stuck contender costs at most
/// a few takebacks a minute. Keyed by pid and start time (pids are reused).
#[derive(Debug, Clone)]
pub struct Skips {
    initial: Duration,
    max: Duration,
    by_pid: HashMap<i32, Skip>,
}

#[derive(Debug, Clone, Copy)]
struct Skip {
    start_time: Option<u64>,
    until: Instant,
    period: Duration,
}

/// Most skip entries kept (expired ones are pruned first).
const MAX_SKIPS: usize = 256;

impl Skips {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Skips {
            initial,
            max,
            by_pid: HashMap::new(),
        }
    }

    /// Skips `pid` (whose start time is `start_time`) from `now`; returns
    /// for how long.
    pub fn skip(&mut self, pid: i32, start_time: Option<u64>, now: Instant) -> Duration {
        self.by_pid.retain(|_, s| s.until + s.period > now);
        let period = match self.by_pid.get(&pid) {
            Some(s) if s.start_time == start_time => (s.period * 2).min(self.max),
            _ => self.initial,
        };
        if self.by_pid.len() < MAX_SKIPS || self.by_pid.contains_key(&pid) {
            self.by_pid.insert(
                pid,
                Skip {
                    start_time,
                    until: now + period,
                    period,
                },
            );
        }
        period
    }

    /// Whether `pid` (now with `start_time`) is skipped at `now`.
    pub fn is_skipped(&self, pid: i32, start_time: Option<u64>, now: Instant) -> bool {
        self.by_pid
            .get(&pid)
            .is_some_and(|s| s.start_time == start_time && now < s.until)
    }
}

/// The highest-ranked live claim above `mine`, if any: a supervisor that
/// just acquired the lock defers to it instead of racing it.
pub fn outranked_by(mine: Rank, claims: &[LiveClaim]) -> Option<&LiveClaim> {
    claims
        .iter()
        .filter(|c| c.claim.generation > mine.generation)
        .max_by_key(|c| c.claim.generation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pivot::claims::Claim;
    use crate::pivot::role::Role;

    const LOCK: FileKey = FileKey {
        major: 0,
        minor: 20,
        inode: 100,
    };

    fn key(inode: u64) -> FileKey {
        FileKey {
            major: 0,
            minor: 20,
            inode,
        }
    }

    fn claim(gen: u32, inode: u64, owner: i32) -> LiveClaim {
        LiveClaim {
            owner,
            claim: Claim {
                role: if gen == 0 {
                    Role::Bootstrap
                } else {
                    Role::SelfHosted
                },
                generation: gen,
                pid: 1,
                start_time: 1,
                since: String::new(),
                build: None,
                lock: None,
            },
            file: key(inode),
        }
    }

    fn anyone(_pid: i32) -> bool {
        true
    }

    fn held(pid: i32, file: FileKey) -> LockEntry {
        LockEntry {
            blocked: false,
            kind: "FLOCK".into(),
            pid,
            file,
        }
    }

    fn waiting(pid: i32, file: FileKey) -> LockEntry {
        LockEntry {
            blocked: true,
            ..held(pid, file)
        }
    }

    #[test]
    fn a_cat_of_the_lock_file_is_quiet() {
        let locks = vec![held(10, LOCK)];
        assert_eq!(
            judge(LOCK, Rank::BOOTSTRAP, &[], &locks, anyone, anyone),
            Verdict::Quiet
        );
    }

    #[test]
    fn higher_blocked_claimant_wins() {
        let claims = vec![claim(2, 501, 20)];
        let locks = vec![held(10, LOCK), held(20, key(501)), waiting(20, LOCK)];
        assert_eq!(
            judge(LOCK, Rank::self_hosted(1), &claims, &locks, anyone, anyone),
            Verdict::Yield(Contender::Claimant {
                rank: Rank::self_hosted(2),
                pid: 20
            })
        );
    }

    #[test]
    fn lower_or_equal_blocked_claimant_is_ignored() {
        let claims = vec![claim(0, 500, 20), claim(2, 501, 21)];
        let locks = vec![
            held(10, LOCK),
            held(20, key(500)),
            waiting(20, LOCK),
            held(21, key(501)),
            waiting(21, LOCK),
        ];
        assert_eq!(
            judge(LOCK, Rank::self_hosted(2), &claims, &locks, anyone, anyone),
            Verdict::Quiet
        );
    }

    #[test]
    fn higher_claim_not_yet_blocked_is_pending() {
        let claims = vec![claim(3, 501, 20)];
        let locks = vec![held(10, LOCK), held(20, key(501))];
        assert_eq!(
            judge(LOCK, Rank::self_hosted(1), &claims, &locks, anyone, anyone),
            Verdict::Pending {
                rank: Rank::self_hosted(3),
                pid: 20
            }
        );
    }

    #[test]
    fn unclaimed_waiter_is_a_plain_kubelet() {
        let claims = vec![claim(0, 500, 20)];
        let locks = vec![
            held(10, LOCK),
            held(20, key(500)),
            waiting(20, LOCK),
            waiting(33, LOCK),
        ];
        assert_eq!(
            judge(LOCK, Rank::self_hosted(4), &claims, &locks, anyone, anyone),
            Verdict::Yield(Contender::Unclaimed { pid: 33 })
        );
    }

    #[test]
    fn an_unclaimed_waiter_of_another_user_is_no_contender() {
        let locks = vec![held(10, LOCK), waiting(33, LOCK)];
        assert_eq!(
            judge(LOCK, Rank::BOOTSTRAP, &[], &locks, |pid| pid != 33, anyone),
            Verdict::Quiet
        );
    }

    #[test]
    fn an_ineligible_contender_is_passed_over() {
        let claims = vec![claim(5, 502, 21)];
        let locks = vec![held(21, key(502)), waiting(21, LOCK), waiting(33, LOCK)];
        // Claimant 21 is stopped (or skipped): the plain waiter 33 is next.
        assert_eq!(
            judge(LOCK, Rank::BOOTSTRAP, &claims, &locks, anyone, |pid| pid
                != 21),
            Verdict::Yield(Contender::Unclaimed { pid: 33 })
        );
        assert_eq!(
            judge(LOCK, Rank::BOOTSTRAP, &claims, &locks, anyone, |_| false),
            Verdict::Quiet
        );
    }

    #[test]
    fn skips_double_and_follow_the_process() {
        let mut s = Skips::new(Duration::from_secs(10), Duration::from_secs(300));
        let t0 = Instant::now();
        assert_eq!(s.skip(7, Some(1), t0), Duration::from_secs(10));
        assert!(s.is_skipped(7, Some(1), t0 + Duration::from_secs(9)));
        assert!(
            !s.is_skipped(7, Some(2), t0),
            "another process with a reused pid"
        );
        assert!(!s.is_skipped(7, Some(1), t0 + Duration::from_secs(10)));
        assert_eq!(
            s.skip(7, Some(1), t0 + Duration::from_secs(11)),
            Duration::from_secs(20)
        );
        let mut t = t0;
        for _ in 0..10 {
            t += Duration::from_secs(1);
            s.skip(7, Some(1), t);
        }
        assert_eq!(s.skip(7, Some(1), t), Duration::from_secs(300));
    }

    #[test]
    fn waiter_on_another_file_is_ignored() {
        let locks = vec![held(10, LOCK), waiting(33, key(999))];
        assert_eq!(
            judge(LOCK, Rank::BOOTSTRAP, &[], &locks, anyone, anyone),
            Verdict::Quiet
        );
    }

    #[test]
    fn highest_of_several_claimants() {
        let claims = vec![claim(2, 501, 20), claim(5, 502, 21)];
        let locks = vec![
            held(20, key(501)),
            waiting(20, LOCK),
            held(21, key(502)),
            waiting(21, LOCK),
        ];
        assert_eq!(
            judge(LOCK, Rank::BOOTSTRAP, &claims, &locks, anyone, anyone),
            Verdict::Yield(Contender::Claimant {
                rank: Rank::self_hosted(5),
                pid: 21
            })
        );
        assert_eq!(
            outranked_by(Rank::self_hosted(2), &claims).map(|c| c.claim.generation),
            Some(5)
        );
        assert!(outranked_by(Rank::self_hosted(5), &claims).is_none());
    }
}
