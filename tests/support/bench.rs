//! For the benches (`benches/*.rs` include this module with `#[path]`): a bench reports a
//! failure on stderr and exits 2 instead of panicking.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};
use std::thread;

use inotify::{Inotify, WatchMask};

use super::{now_ns, stand_in_path};

/// Prints `<bench> bench: <msg>` and exits 2; `<bench>` is the bench target's name.
pub fn fail(msg: &str) -> ! {
    eprintln!("{} bench: {msg}", env!("CARGO_CRATE_NAME"));
    std::process::exit(2);
}

/// The stand-in kubelet next to the kubelet-pivot binary cargo built for this bench; fails if
/// it has not been built (`cargo bench` does not build examples).
pub fn stand_in() -> PathBuf {
    let bin = stand_in_path();
    if !bin.is_file() {
        fail(&format!(
            "stand-in kubelet not found at {}; `cargo bench` does not build examples: run \
             `cargo build --release --examples` first",
            bin.display()
        ));
    }
    bin
}

/// Watches `path` for `mask` with inotify on a thread named `name`, which first runs `setup`;
/// sends the time (ns since the epoch, taken as soon as the events are read) of every event
/// that `wanted` accepts, given the event's file name (for a watched directory).
pub fn inotify_times(
    name: &str,
    path: &Path,
    mask: WatchMask,
    setup: impl FnOnce() + Send + 'static,
    wanted: impl Fn(Option<&OsStr>) -> bool + Send + 'static,
) -> Receiver<u128> {
    let inotify = Inotify::init().unwrap_or_else(|err| fail(&format!("inotify_init: {err}")));
    inotify
        .watches()
        .add(path, mask)
        .unwrap_or_else(|err| fail(&format!("watch {}: {err}", path.display())));
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            setup();
            let mut inotify = inotify;
            let mut buffer = [0u8; 4096];
            loop {
                let Ok(events) = inotify.read_events_blocking(&mut buffer) else {
                    return;
                };
                let at = now_ns();
                for event in events {
                    if wanted(event.name) && tx.send(at).is_err() {
                        return;
                    }
                }
            }
        })
        .unwrap_or_else(|err| fail(&format!("start the watch thread: {err}")));
    rx
}

/// A summary of samples; the percentiles are nearest-rank.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

/// Summarises `samples`; panics if there are none.
pub fn stats(samples: &[f64]) -> Stats {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    assert!(n > 0, "no samples");
    // Nearest-rank percentiles.
    let rank = |p: f64| sorted[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    Stats {
        n,
        p50: rank(0.50),
        p99: rank(0.99),
        min: sorted[0],
        max: sorted[n - 1],
        mean: sorted.iter().sum::<f64>() / n as f64,
    }
}
