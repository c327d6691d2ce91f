//! Tests that need the machine to themselves, in a harness that runs every test file in one
//! process.
//!
//! The chaos run and the SIGTERM timing run start their own busy and fork loops
//! ([`super::load`]) and bound latencies measured under exactly that load; when each test file
//! was its own binary they ran with nothing else of the suite beside them. In the one harness
//! they still do: such a test holds [`alone()`] for its whole run, which waits until no
//! [`Scene`](super::Scene) is open in the process and keeps new scenes waiting until it is
//! dropped. Every scene holds a [`beside()`] guard for its life, so the node tests of other
//! files wait instead of running under a load they were not written for (and adding theirs to
//! the measured run's). Tests without a scene (the test API server alone, the manifests, the
//! CLI) are not held back.
//!
//! A waiting `alone()` keeps new scenes out (else a steady stream of node tests could keep it
//! waiting forever); a thread that already holds a guard gets more without waiting (a test
//! that opens a second scene while an `alone()` waits would otherwise wait for itself), and
//! the thread holding `alone()` opens its own scenes freely.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// Who holds what, process-wide.
struct State {
    /// Open [`Beside`] guards (of threads other than the one alone).
    beside: usize,
    /// An [`Alone`] guard is held.
    alone: bool,
    /// Threads waiting in [`alone()`].
    waiting: usize,
}

static STATE: Mutex<State> = Mutex::new(State {
    beside: 0,
    alone: false,
    waiting: 0,
});
static CHANGED: Condvar = Condvar::new();

thread_local! {
    /// Guards this thread holds: [`Beside`] ones counted, and whether it holds [`Alone`].
    static HELD: Cell<(usize, bool)> = const { Cell::new((0, false)) };
}

fn state() -> MutexGuard<'static, State> {
    // The lock is held only for the counters below, never across a panic.
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn wait_while(
    guard: MutexGuard<'static, State>,
    blocked: impl FnMut(&mut State) -> bool,
) -> MutexGuard<'static, State> {
    CHANGED
        .wait_while(guard, blocked)
        .unwrap_or_else(PoisonError::into_inner)
}

/// Held by a test that runs with no scene of another test open. Not `Send`: it is released by
/// the thread that took it.
#[must_use = "the test runs alone only while the guard is held"]
pub struct Alone {
    _thread_bound: PhantomData<*const ()>,
}

/// Waits until no scene of another test is open, then keeps new ones waiting until dropped.
pub fn alone() -> Alone {
    let (held, alone_here) = HELD.with(Cell::get);
    assert!(
        held == 0 && !alone_here,
        "support::alone() must come before the test's scenes (and only once)"
    );
    let mut state = state();
    state.waiting += 1;
    let mut state = wait_while(state, |s| s.alone || s.beside > 0);
    state.waiting -= 1;
    state.alone = true;
    drop(state);
    HELD.with(|h| h.set((0, true)));
    Alone {
        _thread_bound: PhantomData,
    }
}

impl Drop for Alone {
    fn drop(&mut self) {
        HELD.with(|h| h.set((h.get().0, false)));
        state().alone = false;
        CHANGED.notify_all();
    }
}

/// Held by every [`Scene`](super::Scene): the scene is open beside other tests' scenes, and
/// not while a test runs [`alone()`]. Not `Send`, as [`Alone`].
#[must_use = "the scene counts as open only while the guard is held"]
pub struct Beside {
    /// False for the alone thread's own scenes, which are not counted.
    counted: bool,
    _thread_bound: PhantomData<*const ()>,
}

/// Waits while a test runs [`alone()`] (or waits to), unless this thread already holds a
/// guard.
pub fn beside() -> Beside {
    let (held, alone_here) = HELD.with(Cell::get);
    if alone_here {
        return Beside {
            counted: false,
            _thread_bound: PhantomData,
        };
    }
    let mut state = state();
    if held == 0 {
        state = wait_while(state, |s| s.alone || s.waiting > 0);
    }
    state.beside += 1;
    drop(state);
    HELD.with(|h| h.set((held + 1, false)));
    Beside {
        counted: true,
        _thread_bound: PhantomData,
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        HELD.with(|h| {
            let (held, alone_here) = h.get();
            h.set((held.saturating_sub(1), alone_here));
        });
        state().beside -= 1;
        CHANGED.notify_all();
    }
}

/// [`alone()`] waits for open scenes and holds new ones back; [`beside()`] is re-entrant.
#[test]
fn alone_waits_for_scenes_and_holds_new_ones_back() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::thread;
    use std::time::Duration;

    let (opened, scene_open) = mpsc::channel();
    let (close, closing) = mpsc::channel::<()>();
    let scene = thread::spawn(move || {
        let _first = beside();
        let _second = beside();
        opened.send(()).expect("the test waits for it");
        closing.recv().expect("the test says when");
    });
    scene_open
        .recv()
        .expect("the scene thread opened its scenes");
    let ran_alone = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran_alone);
    let lone = thread::spawn(move || {
        let _alone = alone();
        let _own = beside();
        flag.store(true, Ordering::SeqCst);
        thread::sleep(Duration::from_millis(100));
        flag.store(false, Ordering::SeqCst);
    });
    thread::sleep(Duration::from_millis(100));
    assert!(
        !ran_alone.load(Ordering::SeqCst),
        "alone() did not wait for an open scene"
    );
    close.send(()).expect("the scene thread waits for it");
    scene.join().expect("the scene thread");
    let flag = Arc::clone(&ran_alone);
    let waited = thread::spawn(move || {
        let _scene = beside();
        assert!(
            !flag.load(Ordering::SeqCst),
            "a scene opened while a test ran alone"
        );
    });
    lone.join().expect("the alone thread");
    waited.join().expect("a scene opened after alone()");
}
