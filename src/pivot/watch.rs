//! Hints that something around the lock changed: inotify on the lock file,
//! its directory (the lock file replaced), the state directory (holder
//! record) and the claims directory; and that the config may have changed:
//! the checkpoint store's meta directory and the kubelet's `--config-dir`.
//! When inotify is
//! unavailable (EMFILE/ENOSPC, the known start-up failure of the seed
//! design) this falls back to polling every 100 ms instead of refusing to run.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask};

use crate::pivot::state::StateDir;

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
    /// meta/assigned or meta/last-known-good of the checkpoint store
    /// changed, or a `--config-dir` drop-in was written, renamed or removed.
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
    state: StateDir,
    holder_name: OsString,
    stream: Option<EventStream<Vec<u8>>>,
    lock_wd: Option<WatchDescriptor>,
    dir_wd: Option<WatchDescriptor>,
    state_wd: Option<WatchDescriptor>,
    claims_wd: Option<WatchDescriptor>,
    meta_dir: Option<PathBuf>,
    meta_wd: Option<WatchDescriptor>,
    config_dir_wd: Option<WatchDescriptor>,
}

fn name_of(p: &Path) -> OsString {
    p.file_name().map(|n| n.to_owned()).unwrap_or_default()
}

impl Watcher {
    /// Sets up watches; on any inotify failure logs a warning and polls.
    /// `force_poll` selects polling on purpose (`--watch-mode poll`).
    /// `meta_dir` is the checkpoint store's meta directory (config changes).
    pub fn new(
        lock_path: &Path,
        state: &StateDir,
        meta_dir: Option<&Path>,
        force_poll: bool,
    ) -> Watcher {
        let mut w = Watcher {
            lock_path: lock_path.to_path_buf(),
            lock_name: name_of(lock_path),
            state: state.clone(),
            holder_name: name_of(&state.holder_path()),
            stream: None,
            lock_wd: None,
            dir_wd: None,
            state_wd: None,
            claims_wd: None,
            meta_dir: meta_dir.map(Path::to_path_buf),
            meta_wd: None,
            config_dir_wd: None,
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
        // The lock file may be gone for a moment (deleted, being replaced):
        // the directory watch still sees its name come back.
        match watches.add(&self.lock_path, lock_mask()) {
            Ok(wd) => self.lock_wd = Some(wd),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(path = %self.lock_path.display(), "lock file missing while setting up watches; the directory watch covers it")
            }
            Err(err) => return Err(err),
        }
        self.dir_wd = Some(watches.add(
            &dir,
            WatchMask::MOVED_TO | WatchMask::CREATE | WatchMask::DELETE,
        )?);
        self.state_wd =
            Some(watches.add(self.state.root(), WatchMask::MOVED_TO | WatchMask::DELETE)?);
        self.claims_wd = Some(watches.add(
            self.state.claims_dir(),
            WatchMask::MOVED_TO | WatchMask::DELETE | WatchMask::MOVED_FROM,
        )?);
        if let Some(meta) = &self.meta_dir {
            // Created by the first holder's first write: until then, config
            // changes are seen on the safety tick.
            match watches.add(
                meta,
                WatchMask::MOVED_TO | WatchMask::DELETE | WatchMask::CLOSE_WRITE,
            ) {
                Ok(wd) => self.meta_wd = Some(wd),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    tracing::debug!(dir = %meta.display(), "checkpoint meta directory not there yet; config changes are seen on the safety tick")
                }
                Err(err) => return Err(err),
            }
        }
        self.stream = Some(inotify.into_event_stream(vec![0u8; 4096])?);
        Ok(())
    }

    /// Watches the kubelet's `--config-dir`: a drop-in written (closed after
    /// writing), moved in or out, removed, or its mode changed is a
    /// [`Hint::ConfigChanged`]. Creations are not: a new file is read once
    /// it is written. Subdirectories are seen on the safety tick.
    pub fn watch_config_dir(&mut self, dir: &Path) {
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        let mask = WatchMask::CLOSE_WRITE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::DELETE
            | WatchMask::ATTRIB
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF;
        match stream.watches().add(dir, mask) {
            Ok(wd) => self.config_dir_wd = Some(wd),
            Err(err) => {
                tracing::warn!(%err, dir = %dir.display(), "cannot watch the --config-dir drop-in directory; drop-in changes are seen on the safety tick (within a second)")
            }
        }
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

    /// Waits for the next hint. Cancel-safe: an event is consumed only to be
    /// returned, or dropped as unrelated. Unrelated events (other files in a
    /// world-writable lock directory, which any user can create) are
    /// skipped here, so that nobody can make the supervisor work by creating
    /// files; the safety tick still comes once a second however many arrive.
    pub async fn next(&mut self) -> Hint {
        let tick_at = tokio::time::Instant::now() + SAFETY_TICK;
        loop {
            let Some(stream) = self.stream.as_mut() else {
                tokio::time::sleep(POLL_INTERVAL).await;
                return Hint::Tick;
            };
            let event = match tokio::time::timeout_at(tick_at, stream.next()).await {
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
            if let Some(hint) = self.classify(&event.wd, event.mask, event.name.as_deref()) {
                return hint;
            }
        }
    }

    fn classify(
        &self,
        wd: &WatchDescriptor,
        mask: EventMask,
        name: Option<&std::ffi::OsStr>,
    ) -> Option<Hint> {
        let wd = Some(wd);
        if wd == self.lock_wd.as_ref() {
            if mask.contains(EventMask::OPEN) {
                return Some(Hint::LockOpened);
            }
            return Some(Hint::LockChanged);
        }
        if wd == self.claims_wd.as_ref() {
            return Some(Hint::ClaimsChanged);
        }
        if wd == self.meta_wd.as_ref() || wd == self.config_dir_wd.as_ref() {
            return Some(Hint::ConfigChanged);
        }
        if wd == self.state_wd.as_ref() && name == Some(self.holder_name.as_os_str()) {
            return Some(Hint::HolderChanged);
        }
        if wd == self.dir_wd.as_ref() && name == Some(self.lock_name.as_os_str()) {
            return Some(Hint::LockChanged);
        }
        None
    }
}

fn lock_mask() -> WatchMask {
    WatchMask::OPEN | WatchMask::ATTRIB | WatchMask::MOVE_SELF | WatchMask::DELETE_SELF
}
