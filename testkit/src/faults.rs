//! Faults drawn at random, reproducibly: a share of one client's requests (picked by its
//! User-Agent) answered with an error instead of being served.
//!
//! The fate of the n-th matching request (counted from [`crate::ApiServer::inject_random_faults`],
//! watches included) is a pure function of the seed and n ([`RandomFaults::fault_for`]):
//! the same seed gives the same sequence of faults. Which request is the n-th depends on the
//! client's timing, as it would against a real server.

/// What to inject, into which requests, how often.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RandomFaults {
    pub seed: u64,
    /// Share of the matching requests answered with a fault, per mille (50: 5%).
    pub per_mille: u32,
    /// HTTP status codes, drawn uniformly (429 comes with `Retry-After: 1`, as
    /// [`crate::ApiServer::fail_next`]'s do).
    pub codes: Vec<u16>,
    /// Only requests whose User-Agent contains this (case-sensitive) are drawn for.
    pub user_agent: String,
}

/// splitmix64's finalizer: a bijection of u64 that mixes every input bit into every output
/// bit (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// splitmix64's increment (the golden ratio in 64-bit fixed point).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl RandomFaults {
    /// Panics (a test's mistake) on a share over 1000 per mille or no codes.
    pub(crate) fn check(&self) {
        assert!(
            self.per_mille <= 1000,
            "random faults: per_mille {} is more than 1000",
            self.per_mille
        );
        assert!(
            !self.codes.is_empty(),
            "random faults: no status codes to inject"
        );
    }

    /// The fault for the n-th matching request (0-based), if it gets one.
    pub fn fault_for(&self, n: u64) -> Option<u16> {
        let r = mix(self
            .seed
            .wrapping_add(n.wrapping_add(1).wrapping_mul(GAMMA)));
        // The low bits pick whether, the high bits which: independent for a good mixer.
        if (r % 1000) as u32 >= self.per_mille {
            return None;
        }
        let which = (r >> 32) as usize % self.codes.len();
        Some(self.codes[which])
    }

    pub(crate) fn matches(&self, user_agent: Option<&str>) -> bool {
        user_agent.is_some_and(|ua| ua.contains(&self.user_agent))
    }
}

/// The random faults in force and how many matching requests were drawn for.
pub(crate) struct Draws {
    pub(crate) spec: RandomFaults,
    pub(crate) drawn: u64,
}

impl Draws {
    /// Draws for a request with this User-Agent.
    pub(crate) fn draw(&mut self, user_agent: Option<&str>) -> Option<u16> {
        if !self.spec.matches(user_agent) {
            return None;
        }
        let n = self.drawn;
        self.drawn += 1;
        self.spec.fault_for(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn faults(seed: u64) -> RandomFaults {
        RandomFaults {
            seed,
            per_mille: 50,
            codes: vec![429, 500],
            user_agent: "(rollout-controller)".into(),
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_faults_and_another_seed_others() {
        let a: Vec<Option<u16>> = (0..2000).map(|n| faults(7).fault_for(n)).collect();
        let b: Vec<Option<u16>> = (0..2000).map(|n| faults(7).fault_for(n)).collect();
        let c: Vec<Option<u16>> = (0..2000).map(|n| faults(8).fault_for(n)).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn about_the_share_asked_for_of_each_code() {
        let n = 100_000;
        let f = faults(42);
        let drawn: Vec<u16> = (0..n).filter_map(|i| f.fault_for(i)).collect();
        let share = drawn.len() as f64 / n as f64;
        assert!((0.045..0.055).contains(&share), "{share}");
        let too_many = drawn.iter().filter(|c| **c == 429).count() as f64;
        let ratio = too_many / drawn.len() as f64;
        assert!((0.45..0.55).contains(&ratio), "{ratio}");
        let none = RandomFaults {
            per_mille: 0,
            ..faults(1)
        };
        assert!((0..10_000).all(|i| none.fault_for(i).is_none()));
        let all = RandomFaults {
            per_mille: 1000,
            ..faults(1)
        };
        assert!((0..10_000).all(|i| all.fault_for(i).is_some()));
    }

    #[test]
    fn only_requests_of_the_user_agent_are_drawn_for() {
        let mut d = Draws {
            spec: RandomFaults {
                per_mille: 1000,
                ..faults(3)
            },
            drawn: 0,
        };
        assert_eq!(d.draw(None), None);
        assert_eq!(d.draw(Some("kubelet-pivot/0.1.0 (cli)")), None);
        assert_eq!(d.drawn, 0);
        assert!(d
            .draw(Some("kubelet-pivot/0.1.0 (rollout-controller)"))
            .is_some());
        assert_eq!(d.drawn, 1);
    }

    #[test]
    #[should_panic(expected = "more than 1000")]
    fn a_share_over_all_is_refused() {
        RandomFaults {
            per_mille: 1001,
            ..faults(1)
        }
        .check();
    }
}
