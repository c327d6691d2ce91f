//! Who contends for the lock: the host bootstrap (generation 0) or a
//! self-hosted supervisor of generation N >= 1.

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Bootstrap,
    SelfHosted,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Bootstrap => "bootstrap",
            Role::SelfHosted => "self-hosted",
        })
    }
}

/// A supervisor's role and generation. Higher generations win.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rank {
    pub role: Role,
    pub generation: u32,
}

impl Rank {
    pub const BOOTSTRAP: Rank = Rank {
        role: Role::Bootstrap,
        generation: 0,
    };

    pub fn self_hosted(generation: u32) -> Rank {
        Rank {
            role: Role::SelfHosted,
            generation,
        }
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.role {
            Role::Bootstrap => f.write_str("bootstrap"),
            Role::SelfHosted => write!(f, "self-hosted gen {}", self.generation),
        }
    }
}
