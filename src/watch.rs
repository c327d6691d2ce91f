//! Hints that something around the lock changed: inotify on the lock file,
//! its directory (holder record) and the claims directory. When inotify is
//! unavailable (EMFILE/ENOSPC, the known start-up failure of the seed
//! design) this falls back to polling every 100 ms instead of refusing to run.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask};

use crate::claims::claims_dir;
use crate::holder::holder_path;

/// Poll interval when inotify cannot be used.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Safety-net tick with inotify (covers a queue overflow).
pub const SAFETY_TICK: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// Somebody opened the lock file.
    LockOpened,
    /// The lock file's inode changed (attributes, link count, moved, deleted)
    /// or a new file appeared under its name.
    LockChanged,
    /// A claim appeared or disappeared.
    ClaimsChanged,
    /// The holder record was written or removed.
    HolderChanged,
    /// meta/assigned or meta/last-known-good of the checkpoint store changed.
    ConfigChanged,
    /// Nothing specific: time to look (polling mode or safety tick).
    Tick,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchMode {
    Inotify,
    Poll,
}

pub struct Watcher {
    lock_path: PathBuf,
    lock_name: OsString,
    holder_name: OsString,
    stream: Option<EventStream<Vec<u8>>>,
    lock_wd: Option<WatchDescriptor>,
    dir_wd: Option<WatchDescriptor>,
    claims_wd: Option<WatchDescriptor>,
    meta_dir: Option<PathBuf>,
    meta_wd: Option<WatchDescriptor>,
}

fn name_of(p: &Path) -> OsString {
    p.file_name().map(|n| n.to_owned()).unwrap_or_default()
}

impl Watcher {
    /// Sets up watches; on any inotify failure logs a warning and polls.
    /// `force_poll` selects polling on purpose (`--watch-mode poll`).
    /// `meta_dir` is the checkpoint store's meta directory (config changes).
    pub fn new(lock_path: &Path, meta_dir: Option<&Path>, force_poll: bool) -> Watcher {
        let mut w = Watcher {
            lock_path: lock_path.to_path_buf(),
            lock_name: name_of(lock_path),
            holder_name: name_of(&holder_path(lock_path)),
            stream: None,
            lock_wd: None,
            dir_wd: None,
            claims_wd: None,
            meta_dir: meta_dir.map(Path::to_path_buf),
            meta_wd: None,
        };
        if force_poll {
            tracing::info!(
                interval_ms = POLL_INTERVAL.as_millis() as u64,
                "watching the lock by polling (--watch-mode poll)"
            );
            return w;
        }
        if let Err(err) = w.setup() {
            tracing::warn!(%err, interval_ms = POLL_INTERVAL.as_millis() as u64,
                "inotify unavailable, polling claims and /proc/locks instead; raise fs.inotify.max_user_instances / max_user_watches to restore event-driven handoffs");
            w.stream = None;
        }
        w
    }

    pub fn mode(&self) -> WatchMode {
        if self.stream.is_some() {
            WatchMode::Inotify
        } else {
            WatchMode::Poll
        }
    }

    fn setup(&mut self) -> std::io::Result<()> {
        let inotify = Inotify::init()?;
        let dir = self
            .lock_path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let mut watches = inotify.watches();
        self.lock_wd = Some(watches.add(&self.lock_path, lock_mask())?);
        self.dir_wd = Some(watches.add(
            &dir,
            WatchMask::MOVED_TO | WatchMask::CREATE | WatchMask::DELETE | WatchMask::CLOSE_WRITE,
        )?);
        self.claims_wd = Some(watches.add(
            claims_dir(&self.lock_path),
            WatchMask::MOVED_TO | WatchMask::DELETE | WatchMask::MOVED_FROM,
        )?);
        if let Some(meta) = &self.meta_dir {
            self.meta_wd = Some(watches.add(
                meta,
                WatchMask::MOVED_TO | WatchMask::DELETE | WatchMask::CLOSE_WRITE,
            )?);
        }
        self.stream = Some(inotify.into_event_stream(vec![0u8; 4096])?);
        Ok(())
    }

    /// Watches the file now at the lock path (after it was replaced).
    pub fn rewatch_lock(&mut self) {
        if let Some(stream) = self.stream.as_mut() {
            let mut watches = stream.watches();
            if let Some(old) = self.lock_wd.take() {
                let _ = watches.remove(old);
            }
            match watches.add(&self.lock_path, lock_mask()) {
                Ok(wd) => self.lock_wd = Some(wd),
                Err(err) => {
                    tracing::warn!(%err, path = %self.lock_path.display(), "cannot watch the re-created lock file; relying on the safety tick")
                }
            }
        }
    }

    /// Waits for the next hint. Cancel-safe: all state changes happen after
    /// the awaited event arrived and before returning.
    pub async fn next(&mut self) -> Hint {
        let Some(stream) = self.stream.as_mut() else {
            tokio::time::sleep(POLL_INTERVAL).await;
            return Hint::Tick;
        };
        let event = match tokio::time::timeout(SAFETY_TICK, stream.next()).await {
            Err(_elapsed) => return Hint::Tick,
            Ok(None) => {
                tracing::warn!("inotify stream ended; polling from now on");
                self.stream = None;
                return Hint::Tick;
            }
            Ok(Some(Err(err))) => {
                tracing::warn!(%err, "inotify read failed; polling from now on");
                self.stream = None;
                return Hint::Tick;
            }
            Ok(Some(Ok(ev))) => ev,
        };
        if event.mask.contains(EventMask::Q_OVERFLOW) {
            return Hint::Tick;
        }
        let wd = Some(event.wd);
        if wd == self.lock_wd {
            if event.mask.contains(EventMask::OPEN) {
                return Hint::LockOpened;
            }
            return Hint::LockChanged;
        }
        if wd == self.claims_wd {
            return Hint::ClaimsChanged;
        }
        if wd == self.meta_wd {
            return Hint::ConfigChanged;
        }
        if wd == self.dir_wd {
            match event.name.as_deref() {
                Some(n) if n == self.holder_name.as_os_str() => return Hint::HolderChanged,
                Some(n) if n == self.lock_name.as_os_str() => return Hint::LockChanged,
                _ => {}
            }
        }
        // Unrelated file in the lock directory: let the caller look anyway
        // (cheap) rather than loop here, which keeps this future cancel-safe.
        Hint::Tick
    }
}

fn lock_mask() -> WatchMask {
    WatchMask::OPEN | WatchMask::ATTRIB | WatchMask::MOVE_SELF | WatchMask::DELETE_SELF
}
