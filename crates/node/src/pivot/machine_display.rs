//! How the state machine's inputs and effects read in the debug log (`input=kubelet
//! pid 42 started`, `effect=signal SIGTERM to group 42`): words, not Rust's Debug.

use std::fmt;

use super::machine::{Deferral, Effect, Input};

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::Acquired { defer_to: None } => f.write_str("lock acquired"),
            Input::Acquired {
                defer_to: Some(Deferral { to, patience }),
            } => write!(
                f,
                "lock acquired, to be handed to {to} (waiting up to {})",
                humantime::format_duration(*patience)
            ),
            Input::KubeletStarted(k) => write!(f, "kubelet pid {} started", k.pid),
            Input::KubeletFailedToStart => f.write_str("kubelet failed to start"),
            Input::KubeletExited { pid, how } => write!(f, "kubelet pid {pid} exited ({how})"),
            Input::BackoffElapsed => f.write_str("restart backoff elapsed"),
            Input::Contended(c) => write!(f, "contended by {c}"),
            Input::StopDeadline => f.write_str("stop deadline passed"),
            Input::GroupGone => f.write_str("kubelet process group gone"),
            Input::Terminate => f.write_str("terminate"),
            Input::Reload => f.write_str("reload"),
            Input::LockLost => f.write_str("lock lost"),
            Input::HandoverSeen => f.write_str("handover seen"),
            Input::Cleared => f.write_str("holder record cleared"),
            Input::HolderAlive(c) => write!(f, "recorded holder alive: {c}"),
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Effect::Acquire => f.write_str("acquire the lock"),
            Effect::Release => f.write_str("release the lock"),
            Effect::Clear => f.write_str("check the holder record"),
            Effect::WriteHolder => f.write_str("write the holder record"),
            Effect::RemoveHolder => f.write_str("remove the holder record"),
            Effect::WithdrawClaim => f.write_str("withdraw the claim"),
            Effect::Spawn => f.write_str("spawn the kubelet"),
            Effect::SignalGroup(pgid, sig) => write!(f, "signal {sig} to group {pgid}"),
            Effect::Reopen => f.write_str("reopen the lock file"),
            Effect::NotifyStopping => f.write_str("notify systemd: stopping"),
            Effect::Exit(code) => write!(f, "exit {code}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nix::sys::signal::Signal;

    use super::*;
    use crate::kubelet::child::ExitKind;
    use crate::pivot::contention::Contender;

    #[test]
    fn inputs_and_effects_read_as_words() {
        let deferral = Deferral {
            to: Contender::Unclaimed { pid: 7 },
            patience: Duration::from_secs(2),
        };
        assert_eq!(
            Input::Acquired {
                defer_to: Some(deferral)
            }
            .to_string(),
            "lock acquired, to be handed to unclaimed process pid 7 blocked on the lock (waiting up to 2s)"
        );
        assert_eq!(
            Input::Acquired { defer_to: None }.to_string(),
            "lock acquired"
        );
        let exited = Input::KubeletExited {
            pid: 42,
            how: ExitKind::Code(0),
        };
        assert_eq!(exited.to_string(), "kubelet pid 42 exited (exit code 0)");
        assert_eq!(
            Effect::SignalGroup(42, Signal::SIGTERM).to_string(),
            "signal SIGTERM to group 42"
        );
    }
}
