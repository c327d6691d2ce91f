//! The trial verdict, free of I/O: after one more kubelet exit, which
//! config on trial (the assigned one, the `--config-dir` drop-in set) is
//! to blame for a crash loop, if any; and whether a trial is over. The
//! store reads and writes around it are in `trial`.
//!
//! ```text
//!                 assigned over?  drop-ins over?   verdict
//!                 no              no               Count (record the exit)
//!                 yes             no / no trial    BlameAssigned
//!                 no / no trial   yes              BlameDropIns
//!                 yes             yes              the trial that started last
//!                                                  (ties: the drop-ins)
//! ```

use std::time::{Duration, SystemTime};

use kp_contract::time::parse as parse_time;

/// One trial as the store has it, with this exit's stamp already added to
/// its starts.
#[derive(Debug, Clone, Copy)]
pub struct TrialFacts<'a> {
    /// When the trial began (RFC 3339; unreadable: it begins now).
    pub since: &'a str,
    /// The kubelet exits recorded against it (RFC 3339 stamps).
    pub startups: &'a [String],
}

/// Everything the verdict depends on.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The assigned config's trial, if it is the one that runs.
    pub assigned: Option<TrialFacts<'a>>,
    /// The drop-in set's trial, if the set that runs is on trial.
    pub drop_ins: Option<TrialFacts<'a>>,
    /// When this holder took the lock: exits before it are not its kubelet's.
    pub holder_since: SystemTime,
    /// When the node booted, if known: exits before it are of another boot.
    pub boot: Option<SystemTime>,
    /// The config's `configTrialDuration`.
    pub trial: Duration,
    /// The config's `crashLoopThreshold`.
    pub threshold: u32,
}

/// A trial's crash count: the exits within the trial, counted from the
/// latest of its start, boot and this holder's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    /// When the trial began.
    pub start: SystemTime,
    pub count: usize,
    /// The trial is still running and the count is over the threshold.
    pub over: bool,
}

/// What one more kubelet exit means for the configs on trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No trial is over its threshold: the exit is recorded against each
    /// trial (`assigned`, `drop_ins`: their counts, when on trial).
    Count {
        assigned: Option<Count>,
        drop_ins: Option<Count>,
    },
    /// The drop-in set crash-looped (it is the newer change, or the only
    /// one over): it is marked bad; the assigned trial's count starts again.
    BlameDropIns { count: usize },
    /// The assigned config crash-looped: it is marked bad; the drop-in
    /// trial's count starts again.
    BlameAssigned { count: usize },
}

/// Counts one trial's exits as of `now`.
pub fn count(trial: TrialFacts<'_>, inputs: &Inputs<'_>, now: SystemTime) -> Count {
    let start = parse_time(trial.since).unwrap_or(now);
    let end = start + inputs.trial;
    let mut window_start = start.max(inputs.holder_since);
    if let Some(boot) = inputs.boot {
        window_start = window_start.max(boot);
    }
    let count = trial
        .startups
        .iter()
        .filter_map(|s| parse_time(s))
        .filter(|t| *t >= window_start && *t <= end)
        .count();
    Count {
        start,
        count,
        over: now <= end && count > inputs.threshold as usize,
    }
}

/// Which trial to blame after one more exit, as of `now`. When both are
/// over, the one whose trial started last (the newest change) is blamed:
/// the other's crashes were most likely the newer change's.
pub fn decide(inputs: &Inputs<'_>, now: SystemTime) -> Verdict {
    let assigned = inputs.assigned.map(|t| count(t, inputs, now));
    let drop_ins = inputs.drop_ins.map(|t| count(t, inputs, now));
    match (assigned, drop_ins) {
        (Some(a), Some(d)) if a.over && d.over => {
            if d.start >= a.start {
                Verdict::BlameDropIns { count: d.count }
            } else {
                Verdict::BlameAssigned { count: a.count }
            }
        }
        (_, Some(d)) if d.over => Verdict::BlameDropIns { count: d.count },
        (Some(a), _) if a.over => Verdict::BlameAssigned { count: a.count },
        (assigned, drop_ins) => Verdict::Count { assigned, drop_ins },
    }
}

/// Whether a trial that began at `since` is over at `now` (its config is
/// promoted to last-known-good then). An unreadable start is never over.
pub fn over(since: &str, trial: Duration, now: SystemTime) -> bool {
    parse_time(since).is_some_and(|start| now >= start + trial)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn stamp(t: SystemTime) -> String {
        kp_contract::time::rfc3339(t)
    }

    /// A trial that began at `start` with exits at `exits` (seconds).
    struct Trial {
        since: String,
        startups: Vec<String>,
    }

    fn trial(start: u64, exits: &[u64]) -> Trial {
        Trial {
            since: stamp(at(start)),
            startups: exits.iter().map(|s| stamp(at(*s))).collect(),
        }
    }

    impl Trial {
        fn facts(&self) -> TrialFacts<'_> {
            TrialFacts {
                since: &self.since,
                startups: &self.startups,
            }
        }
    }

    fn inputs<'a>(assigned: Option<&'a Trial>, drop_ins: Option<&'a Trial>) -> Inputs<'a> {
        Inputs {
            assigned: assigned.map(Trial::facts),
            drop_ins: drop_ins.map(Trial::facts),
            holder_since: at(0),
            boot: None,
            trial: 10 * MIN,
            threshold: 1,
        }
    }

    #[test]
    fn no_trial_counts_nothing() {
        assert_eq!(
            decide(&inputs(None, None), at(100)),
            Verdict::Count {
                assigned: None,
                drop_ins: None
            }
        );
    }

    #[test]
    fn exits_under_the_threshold_are_counted() {
        let a = trial(10, &[20]);
        let d = trial(30, &[40]);
        let Verdict::Count { assigned, drop_ins } = decide(&inputs(Some(&a), Some(&d)), at(50))
        else {
            panic!("counted")
        };
        assert_eq!(
            assigned,
            Some(Count {
                start: at(10),
                count: 1,
                over: false
            })
        );
        assert_eq!(drop_ins.map(|c| c.count), Some(1));
    }

    #[test]
    fn the_assigned_config_alone_over_is_blamed() {
        let a = trial(10, &[20, 30]);
        assert_eq!(
            decide(&inputs(Some(&a), None), at(40)),
            Verdict::BlameAssigned { count: 2 }
        );
        // Its drop-in trial under the threshold changes nothing.
        let d = trial(5, &[30]);
        assert_eq!(
            decide(&inputs(Some(&a), Some(&d)), at(40)),
            Verdict::BlameAssigned { count: 2 }
        );
    }

    #[test]
    fn the_drop_ins_alone_over_are_blamed() {
        let d = trial(10, &[20, 30, 35]);
        assert_eq!(
            decide(&inputs(None, Some(&d)), at(40)),
            Verdict::BlameDropIns { count: 3 }
        );
        let a = trial(15, &[35]);
        assert_eq!(
            decide(&inputs(Some(&a), Some(&d)), at(40)),
            Verdict::BlameDropIns { count: 3 }
        );
    }

    #[test]
    fn both_over_blames_the_trial_that_started_last() {
        let older = trial(10, &[20, 30]);
        let newer = trial(15, &[20, 30]);
        assert_eq!(
            decide(&inputs(Some(&older), Some(&newer)), at(40)),
            Verdict::BlameDropIns { count: 2 }
        );
        assert_eq!(
            decide(&inputs(Some(&newer), Some(&older)), at(40)),
            Verdict::BlameAssigned { count: 2 }
        );
        // Started together: the drop-ins.
        assert_eq!(
            decide(&inputs(Some(&older), Some(&older)), at(40)),
            Verdict::BlameDropIns { count: 2 }
        );
    }

    #[test]
    fn a_trial_that_ended_blames_nothing() {
        let a = trial(10, &[20, 30]);
        let late = at(10) + 10 * MIN + Duration::from_secs(1);
        assert!(matches!(
            decide(&inputs(Some(&a), None), late),
            Verdict::Count { .. }
        ));
        // The moment it ends still counts.
        assert_eq!(
            decide(&inputs(Some(&a), None), at(10) + 10 * MIN),
            Verdict::BlameAssigned { count: 2 }
        );
    }

    #[test]
    fn exits_before_the_holder_boot_or_after_the_trial_do_not_count() {
        let a = trial(10, &[20, 30, 40, 700]);
        let mut i = inputs(Some(&a), None);
        i.threshold = 2;
        assert_eq!(decide(&i, at(50)), Verdict::BlameAssigned { count: 3 });
        i.holder_since = at(25);
        assert!(matches!(decide(&i, at(50)), Verdict::Count { .. }));
        i.holder_since = at(0);
        i.boot = Some(at(35));
        let Verdict::Count {
            assigned: Some(c), ..
        } = decide(&i, at(50))
        else {
            panic!("counted")
        };
        assert_eq!(c.count, 1);
    }

    #[test]
    fn an_unreadable_start_begins_now() {
        let a = Trial {
            since: "garbage".into(),
            startups: vec![stamp(at(50)), stamp(at(50))],
        };
        let c = count(a.facts(), &inputs(Some(&a), None), at(50));
        assert_eq!(
            c,
            Count {
                start: at(50),
                count: 2,
                over: true
            }
        );
        assert!(!over("garbage", MIN, at(1_000_000)));
    }

    #[test]
    fn a_trial_is_over_once_its_duration_passed() {
        let since = stamp(at(0));
        assert!(!over(&since, MIN, at(59)));
        assert!(over(&since, MIN, at(60)));
    }
}
