//! CPU and process-creation load beside a test, the way a busy node or CI host is loaded.
//!
//! Timing-dependent code is tested under load, never only on an idle machine: a fork loop
//! beside a busy loop reproduced a two-kubelet window that two busy loops alone did not (process
//! creation stresses the scheduler, pid reuse and /proc, not only the CPU). [`Load::start`]
//! starts, per loop, one busy loop and one fork loop (`sh -c 'while :; do /bin/true; done'`),
//! each a child process in a process group of its own, and stops them all when dropped (also
//! when the test panics).
//!
//! `PIVOT_TEST_LOAD` sets the number of loops of each kind for every test that calls
//! [`Load::from_env`]: `0` turns the load off, unset means the test's own default. The same
//! shape as `../shared/tools/under-load`, which loads a whole command from outside.

use std::process::{Child, Command, Stdio};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;

/// The environment variable that sets the loops of each kind.
pub const LOAD_ENV: &str = "PIVOT_TEST_LOAD";

/// Busy and fork loops that live as long as this value.
pub struct Load {
    children: Vec<Child>,
}

/// The number of cores (the default number of loops of each kind).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}

impl Load {
    /// `loops` busy loops and `loops` fork loops.
    pub fn start(loops: usize) -> Load {
        let mut children = Vec::new();
        for _ in 0..loops {
            for script in ["while :; do :; done", "while :; do /bin/true; done"] {
                let child = Command::new("sh")
                    .args(["-c", script])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .process_group(0)
                    .spawn()
                    .unwrap_or_else(|err| panic!("start a load loop ({script}): {err}"));
                children.push(child);
            }
        }
        if loops > 0 {
            println!("load: {loops} busy loop(s) and {loops} fork loop(s) beside the test");
        }
        Load { children }
    }

    /// Loops from `PIVOT_TEST_LOAD`, else `default` (use [`cores`] for a loaded default).
    pub fn from_env(default: usize) -> Load {
        let loops = match std::env::var(LOAD_ENV) {
            Ok(value) => value
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{LOAD_ENV}={value:?} is not a whole number")),
            Err(_) => default,
        };
        Load::start(loops)
    }

    /// How many loops of each kind run.
    pub fn loops(&self) -> usize {
        self.children.len() / 2
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for child in &mut self.children {
            // The fork loop's /bin/true children are in the same group: end them all.
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
