//! Starting the kubelet without copying the supervisor: `clone(CLONE_VM |
//! CLONE_VFORK)`, the way posix_spawn(3) starts a program, with the few
//! steps posix_spawn cannot do (PR_SET_PDEATHSIG, the inherited lock
//! descriptor) done in the child before execve.
//!
//! A fork copies the supervisor's page tables (a multi-threaded tokio
//! process); measured in the handoff bench, release → kubelet execve went
//! from p50 0.48 ms with fork to 0.36 ms, on the critical path of a
//! handoff. In the vfork child only async-signal-safe system calls run, on a
//! stack prepared by the parent, with every argument prepared by the parent:
//! nothing allocates, locks or returns into Rust code of the parent's.

#![allow(unsafe_code)]

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::sched::CloneFlags;
use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};

/// Signals whose disposition the supervisor changes (handlers or ignore):
/// reset to the default in the child before execve (an ignored signal
/// would stay ignored across exec; a handler must not run in the child).
const RESET_SIGNALS: [libc::c_int; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGCHLD,
    libc::SIGPIPE,
];
/// The child's stack: it only makes a dozen system calls.
const CHILD_STACK: usize = 64 * 1024;

/// Everything the child needs, built before the clone.
pub struct SpawnPlan {
    program: CString,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
    stdin: OwnedFd,
    inherit_fd: Option<RawFd>,
    parent: libc::pid_t,
    /// The default scheduler slice back for the kubelet (`latency`).
    sched_reset: Option<crate::latency::SchedAttr>,
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in an argument"))
}

impl SpawnPlan {
    /// `program args...` with the environment minus `drop_env`, stdin from
    /// /dev/null, and `inherit_fd` left open across exec.
    pub fn new(
        program: &Path,
        args: &[std::ffi::OsString],
        drop_env: &[&str],
        inherit_fd: Option<RawFd>,
    ) -> io::Result<SpawnPlan> {
        let program_c = cstring(program.as_os_str().as_bytes())?;
        let mut argv = vec![program_c.clone()];
        for a in args {
            argv.push(cstring(a.as_bytes())?);
        }
        let mut envp = Vec::new();
        for (k, v) in std::env::vars_os() {
            if drop_env.iter().any(|d| OsStr::new(d) == k) {
                continue;
            }
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            envp.push(cstring(&kv)?);
        }
        let ptrs = |v: &Vec<CString>| {
            let mut p: Vec<*const libc::c_char> = v.iter().map(|c| c.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        let stdin = OwnedFd::from(std::fs::OpenOptions::new().read(true).open("/dev/null")?);
        Ok(SpawnPlan {
            program: program_c,
            argv_ptrs: ptrs(&argv),
            _argv: argv,
            envp_ptrs: ptrs(&envp),
            _envp: envp,
            stdin,
            inherit_fd,
            parent: nix::unistd::getpid().as_raw(),
            sched_reset: crate::latency::child_reset(),
        })
    }
}

/// Starts the plan's program in its own process group with
/// PR_SET_PDEATHSIG=SIGKILL; returns its pid once execve succeeded (the
/// parent is suspended until then), or the error of the step that failed.
pub fn spawn(plan: &SpawnPlan) -> io::Result<i32> {
    let failed = AtomicI32::new(0);
    let mut stack = vec![0u8; CHILD_STACK];
    // All signals blocked from here to after the clone: no handler of ours
    // may run in the child, which shares our memory (it resets them to the
    // default before it unblocks). A signal sent to the supervisor meanwhile
    // is not lost: the kernel hands it to another thread that does not block
    // it (the handler runs there: early flag, and the wake-up byte for the
    // event loop's signal stream), or, if there is none, keeps it pending
    // for the process until the mask is restored below and the handler runs
    // here (tests/it/sigterm.rs sends SIGTERM inside this window).
    let mut old = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut old),
    )
    .map_err(io::Error::from)?;
    let child = Box::new(|| -> isize {
        // SAFETY: runs in the vfork child on its own stack; the parent is
        // suspended until execve or _exit. Only raw system calls on data
        // prepared by the parent; nothing allocates or unwinds.
        unsafe { child_body(plan, &failed, &old) }
    });
    // SAFETY: CLONE_VM|CLONE_VFORK: the child uses `stack` (alive until the
    // parent resumes, which is after the child's execve or exit) and the
    // closure above only.
    let res = unsafe {
        nix::sched::clone(
            child,
            &mut stack,
            CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
            Some(libc::SIGCHLD),
        )
    };
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    let pid = res.map_err(io::Error::from)?.as_raw();
    match failed.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            // The child exited with 127 before execve: reap it here.
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// The child: reset signals, own process group, PDEATHSIG, stdin, the
/// inherited descriptor, then execve. On failure the errno goes to
/// `failed` (shared memory) and the child exits 127.
unsafe fn child_body(plan: &SpawnPlan, failed: &AtomicI32, mask: &SigSet) -> isize {
    let fail = |failed: &AtomicI32| -> isize { fail_with(failed, last_errno()) };
    for sig in RESET_SIGNALS {
        if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
            return fail(failed);
        }
    }
    if libc::setpgid(0, 0) != 0 {
        return fail(failed);
    }
    // Best effort: a kubelet with the supervisor's short slice only
    // switches more often.
    if let Some(attr) = &plan.sched_reset {
        crate::latency::apply_in_child(attr);
    }
    if libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        0,
        0,
        0,
    ) != 0
    {
        return fail(failed);
    }
    // The parent may have died before prctl took effect (it cannot while
    // suspended by CLONE_VFORK, but a SIGKILL may have come first).
    if libc::getppid() != plan.parent {
        return fail_with(failed, libc::ESRCH);
    }
    if libc::dup2(plan.stdin.as_raw_fd(), 0) < 0 {
        return fail(failed);
    }
    if let Some(fd) = plan.inherit_fd {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
            return fail(failed);
        }
    }
    // The mask the parent had (the kubelet starts with it, as with fork).
    if libc::pthread_sigmask(libc::SIG_SETMASK, mask.as_ref(), std::ptr::null_mut()) != 0 {
        return fail(failed);
    }
    libc::execve(
        plan.program.as_ptr(),
        plan.argv_ptrs.as_ptr(),
        plan.envp_ptrs.as_ptr(),
    );
    fail(failed)
}

fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// Records `errno` for the parent and ends the child.
unsafe fn fail_with(failed: &AtomicI32, errno: i32) -> isize {
    failed.store(errno.max(1), Ordering::SeqCst);
    libc::_exit(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_a_program_in_its_own_group_and_reports_exec_errors() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = format!(
            "echo $$ $(ps -o pgid= -p $$) \"$KEEP\" \"$DROP\" > {}",
            out.display()
        );
        std::env::set_var("KP_SPAWN_TEST_KEEP", "kept");
        std::env::set_var("KP_SPAWN_TEST_DROP", "leaked");
        let plan = SpawnPlan::new(
            Path::new("/bin/sh"),
            &[
                "-c".into(),
                script
                    .replace("$KEEP", "$KP_SPAWN_TEST_KEEP")
                    .replace("$DROP", "$KP_SPAWN_TEST_DROP")
                    .into(),
            ],
            &["KP_SPAWN_TEST_DROP"],
            None,
        )
        .unwrap();
        let pid = spawn(&plan).unwrap();
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        assert_eq!(
            status,
            nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0)
        );
        let text = std::fs::read_to_string(&out).unwrap();
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(words[0], pid.to_string());
        assert_eq!(
            words[1],
            pid.to_string(),
            "not its own process group: {text}"
        );
        assert_eq!(words.get(2), Some(&"kept"));
        assert_eq!(
            words.get(3),
            None,
            "a dropped variable reached the child: {text}"
        );

        let missing = SpawnPlan::new(Path::new("/nonexistent/kubelet"), &[], &[], None).unwrap();
        let err = spawn(&missing).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }
}
