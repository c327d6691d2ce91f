//! Short scheduler slices for the supervisor: it needs little CPU, but needs
//! it at once (a handoff is a millisecond long, I2 allows a second), and on a
//! busy node a woken thread of ordinary priority waits for the running one's
//! slice to end. Since Linux 6.12 the fair scheduler (EEVDF) lets a task ask
//! for a shorter slice (`sched_attr.sched_runtime`, 0.1 to 100 ms); a task
//! with a shorter slice gets an earlier deadline and so preempts a busy loop
//! when it wakes, without a larger share of the CPU and without leaving its
//! policy or nice value. The kubelet gets the default slice back before its
//! exec (`kubelet::spawn`).
//!
//! Measured here (a 1 ms sleep's lateness beside `under-load -n 1`, 300
//! sleeps): p99 0.76–3.8 ms with the default slice, 0.10–0.58 ms with a
//! 100 µs one (ARCHITECTURE.md, "Short slices").
//!
//! Only a thread of policy SCHED_OTHER is changed (an operator's
//! `CPUSchedulingPolicy=` stays), with its nice value kept. Threads created
//! afterwards inherit the slice, so it is asked for on the main thread before
//! the runtime starts any. A kernel that refuses is logged and ignored.

#![allow(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The slice asked for (the kernel's minimum is 0.1 ms).
pub const SLICE: Duration = Duration::from_micros(100);

/// Whether this process runs with [`SLICE`] (the kubelet must not inherit it).
static SHORT: AtomicBool = AtomicBool::new(false);

/// `struct sched_attr` of sched_setattr(2) (size 56: up to `sched_util_max`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// What [`request_short_slices`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slices {
    /// The calling thread (and the threads it creates) run with [`SLICE`].
    Short,
    /// Not SCHED_OTHER (an operator's choice): left alone.
    OtherPolicy,
}

fn attr(policy: u32, nice: i32, runtime: Duration) -> SchedAttr {
    SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy,
        nice,
        runtime: u64::try_from(runtime.as_nanos()).unwrap_or(u64::MAX),
        ..SchedAttr::default()
    }
}

fn current_nice() -> io::Result<i32> {
    // getpriority(2) returns the nice value; -1 is also an error's return.
    nix::errno::Errno::clear();
    // SAFETY: a plain system call without pointers.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    if nice == -1 && nix::errno::Errno::last_raw() != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(nice)
}

fn set(attr: &SchedAttr) -> io::Result<()> {
    // SAFETY: `attr` is a valid sched_attr of the size it declares.
    let rc = unsafe { apply_in_child(attr) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks for [`SLICE`] for the calling thread and the threads it creates.
pub fn request_short_slices() -> io::Result<Slices> {
    // SAFETY: a plain system call without pointers.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    if policy != libc::SCHED_OTHER {
        return Ok(Slices::OtherPolicy);
    }
    let nice = current_nice()?;
    set(&attr(libc::SCHED_OTHER as u32, nice, SLICE))?;
    SHORT.store(true, Ordering::SeqCst);
    Ok(Slices::Short)
}

/// For a child about to exec (the kubelet): the attributes that give it the
/// default slice back, with the policy and nice value it inherited. `None`
/// when this process never changed its slice. Computed before the fork; the
/// child applies it with one system call ([`apply_in_child`]).
pub fn child_reset() -> Option<SchedAttr> {
    if !SHORT.load(Ordering::SeqCst) {
        return None;
    }
    let nice = current_nice().ok()?;
    Some(attr(libc::SCHED_OTHER as u32, nice, Duration::ZERO))
}

/// Applies `attr` to the calling thread; async-signal-safe (one system
/// call), for a vfork child. Returns the system call's result.
///
/// # Safety
/// Only raw system calls: callable in a vfork child.
pub unsafe fn apply_in_child(attr: &SchedAttr) -> libc::c_long {
    libc::syscall(libc::SYS_sched_setattr, 0, attr as *const SchedAttr, 0u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sched_getattr(2) of the calling thread.
    fn current() -> SchedAttr {
        let mut a = SchedAttr::default();
        // SAFETY: `a` is writable and its size is passed.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_getattr,
                0,
                &mut a as *mut SchedAttr,
                std::mem::size_of::<SchedAttr>() as u32,
                0u32,
            )
        };
        assert_eq!(rc, 0, "sched_getattr: {}", io::Error::last_os_error());
        a
    }

    #[test]
    fn a_thread_gets_the_short_slice_and_its_child_the_default_back() {
        // On a thread of its own: the slice is per thread.
        std::thread::spawn(|| {
            let before = current();
            match request_short_slices().expect("sched_setattr") {
                Slices::OtherPolicy => return,
                Slices::Short => {}
            }
            let after = current();
            assert_eq!(after.policy, before.policy);
            assert_eq!(after.nice, before.nice, "the nice value is kept");
            // Kernels before 6.12 accept and ignore the runtime of a fair task.
            if after.runtime != before.runtime {
                assert_eq!(after.runtime, SLICE.as_nanos() as u64);
            }
            // A thread created now inherits it.
            let inherited = std::thread::spawn(current).join().expect("thread");
            assert_eq!(inherited.runtime, after.runtime);
            let reset = child_reset().expect("a reset for the kubelet");
            // SAFETY: a plain system call on a valid attr.
            assert_eq!(unsafe { apply_in_child(&reset) }, 0);
            let back = current();
            assert_eq!(back.policy, before.policy);
            assert_eq!(back.nice, before.nice);
            assert_eq!(back.runtime, before.runtime, "the default slice again");
        })
        .join()
        .expect("test thread");
    }
}
