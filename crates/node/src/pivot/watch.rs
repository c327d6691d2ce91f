//! Hints that something around the lock changed: inotify on the lock file,
//! its directory (the lock file replaced), the state directory (holder
//! record) and the claims directory; and that the config may have changed:
//! the checkpoint store's meta directory and the kubelet's `--config-dir`
//! tree.
//!
//! Nothing here ticks: with inotify, `next` returns only when an event
//! arrives. A queue overflow (IN_Q_OVERFLOW: events were lost) is one
//! [`Hint::Rescan`], on which the supervisor looks at everything once. A
//! directory that does not exist yet (the meta directory before the store's
//! first write, a `--config-dir` created after the start) is followed by
//! watching its nearest existing ancestor until it appears. When inotify is
//! unavailable (EMFILE/ENOSPC, the known start-up failure of the seed
//! design) this falls back to polling every 100 ms instead of refusing to
//! run: the only mode with a timer.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask, Watches};

use crate::pivot::state::StateDir;

/// Poll interval when inotify cannot be used.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Most directories of a `--config-dir` tree watched (the drop-in reader
/// looks at 1024 entries at most).
const MAX_TREE_DIRS: usize = 1024;

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
    /// Events may have been missed: look at everything once (the polling
    /// mode's tick, or an inotify queue overflow).
    Rescan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchMode {
    Inotify,
    Poll,
}

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Hint::LockOpened => "lock file opened",
            Hint::LockChanged => "lock file changed",
            Hint::ClaimsChanged => "claims changed",
            Hint::HolderChanged => "holder record changed",
            Hint::ConfigChanged => "config changed",
            Hint::Rescan => "rescan",
        })
    }
}

/// As `--watch-mode` spells it.
impl std::fmt::Display for WatchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WatchMode::Inotify => "inotify",
            WatchMode::Poll => "poll",
        })
    }
}

/// A directory followed by path: watched itself when it exists, else its
/// nearest existing ancestor is watched for the next component to appear.
/// With `depth > 0` its subdirectories (that many levels) are watched too.
struct DirWatch {
    target: PathBuf,
    mask: WatchMask,
    depth: usize,
    /// The target's own watch (and its subdirectories'), with their paths.
    tree: HashMap<WatchDescriptor, PathBuf>,
    /// The ancestor watched while the target is missing, and the name
    /// (the next component below it) whose appearance re-arms.
    ancestor: Option<(WatchDescriptor, OsString)>,
}

impl DirWatch {
    fn new(target: &Path, mask: WatchMask, depth: usize) -> DirWatch {
        DirWatch {
            target: target.to_path_buf(),
            mask,
            depth,
            tree: HashMap::new(),
            ancestor: None,
        }
    }

    /// (Re-)adds the watches: the target (and its tree), else the nearest
    /// existing ancestor. Watches of earlier arms are left: an inode's
    /// watch goes with the inode, and stale ones classify as nothing.
    fn arm(&mut self, watches: &mut Watches) -> std::io::Result<()> {
        self.tree.clear();
        self.ancestor = None;
        match watches.add(
            &self.target,
            self.mask | WatchMask::MASK_ADD | dir_self_mask(),
        ) {
            Ok(wd) => {
                self.tree.insert(wd, self.target.clone());
                if self.depth > 0 {
                    self.add_subdirs(watches, &self.target.clone(), 1);
                }
                Ok(())
            }
            Err(err) if is_missing(&err) => self.arm_ancestor(watches),
            Err(err) => Err(err),
        }
    }

    fn arm_ancestor(&mut self, watches: &mut Watches) -> std::io::Result<()> {
        let mut below = self.target.clone();
        while let Some(parent) = below.parent().map(Path::to_path_buf) {
            let Some(name) = below.file_name().map(|n| n.to_owned()) else {
                break;
            };
            let dir = if parent.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                parent.clone()
            };
            let mask =
                WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::MASK_ADD | dir_self_mask();
            match watches.add(&dir, mask) {
                Ok(wd) => {
                    tracing::debug!(target = %self.target.display(), ancestor = %dir.display(), "directory not there yet; watching its nearest existing ancestor");
                    self.ancestor = Some((wd, name));
                    return Ok(());
                }
                Err(err) if is_missing(&err) => below = parent,
                Err(err) => return Err(err),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no existing ancestor of {}", self.target.display()),
        ))
    }

    fn add_subdirs(&mut self, watches: &mut Watches, dir: &Path, level: usize) {
        if level > self.depth {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if self.tree.len() >= MAX_TREE_DIRS {
                tracing::warn!(dir = %self.target.display(), limit = MAX_TREE_DIRS, "too many subdirectories to watch; changes deeper in the tree are seen on the next change above them");
                return;
            }
            // The entry's own type: a symlink is never followed.
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            match watches.add(&path, self.mask | WatchMask::MASK_ADD | dir_self_mask()) {
                Ok(wd) => {
                    self.tree.insert(wd, path.clone());
                    self.add_subdirs(watches, &path, level + 1);
                }
                Err(err) => {
                    tracing::debug!(%err, dir = %path.display(), "cannot watch a --config-dir subdirectory")
                }
            }
        }
    }

    /// What an event means for this directory: `Some(true)` it changed and
    /// the watches must be re-armed (a directory appeared, moved or went),
    /// `Some(false)` it changed, `None` not ours.
    fn classify(
        &self,
        wd: &WatchDescriptor,
        mask: EventMask,
        name: Option<&std::ffi::OsStr>,
    ) -> Option<bool> {
        if let Some(dir) = self.tree.get(wd) {
            // A new regular file is read once it is written (CLOSE_WRITE,
            // MOVED_TO): its creation alone would read it empty. Anything
            // else created (a symlink, a FIFO, a hard link to a written
            // file) has no later event, and is looked at now.
            if mask.contains(EventMask::CREATE) && !mask.contains(EventMask::ISDIR) {
                let written_later = name
                    .and_then(|n| std::fs::symlink_metadata(dir.join(n)).ok())
                    .is_some_and(|m| m.file_type().is_file() && m.nlink() == 1);
                return (!written_later).then_some(false);
            }
            let structural = mask
                .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED)
                || (mask.contains(EventMask::ISDIR)
                    && mask.intersects(EventMask::CREATE | EventMask::MOVED_TO));
            return Some(structural);
        }
        match &self.ancestor {
            Some((a, next)) if a == wd => {
                if mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
                    return Some(true);
                }
                (name == Some(next.as_os_str())).then_some(true)
            }
            _ => None,
        }
    }
}

fn dir_self_mask() -> WatchMask {
    WatchMask::DELETE_SELF | WatchMask::MOVE_SELF
}

fn is_missing(err: &std::io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR))
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
    meta: Option<DirWatch>,
    config_dir: Option<DirWatch>,
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
            meta: meta_dir.map(|m| {
                DirWatch::new(
                    m,
                    WatchMask::MOVED_TO | WatchMask::DELETE | WatchMask::CLOSE_WRITE,
                    0,
                )
            }),
            config_dir: None,
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
            WatchMask::MOVED_TO | WatchMask::CREATE | WatchMask::DELETE | WatchMask::MASK_ADD,
        )?);
        self.state_wd = Some(watches.add(
            self.state.root(),
            WatchMask::MOVED_TO | WatchMask::DELETE | WatchMask::MASK_ADD,
        )?);
        // A claim written in place (no rename) is seen when it is closed
        // after writing. Not CLOSE_NOWRITE: our own reads of the claims
        // would wake us in a loop.
        self.claims_wd = Some(watches.add(
            self.state.claims_dir(),
            WatchMask::MOVED_TO
                | WatchMask::DELETE
                | WatchMask::MOVED_FROM
                | WatchMask::CLOSE_WRITE
                | WatchMask::MASK_ADD,
        )?);
        if let Some(meta) = self.meta.as_mut() {
            // Created by the store's first write: until then its nearest
            // existing ancestor is watched.
            meta.arm(&mut watches)?;
        }
        self.stream = Some(inotify.into_event_stream(vec![0u8; 4096])?);
        Ok(())
    }

    /// Watches the kubelet's `--config-dir` tree (the drop-in reader walks
    /// subdirectories too): a drop-in written (closed after writing), moved
    /// in or out, removed, or its mode changed is a [`Hint::ConfigChanged`];
    /// so is a subdirectory created, moved or removed (its watches follow).
    /// Creations of files are not: a new file is read once it is written.
    /// A directory that does not exist yet is followed from its nearest
    /// existing ancestor. Subdirectories are followed `max_depth` deep (the
    /// drop-in reader's own limit).
    pub fn watch_config_dir(&mut self, dir: &Path, max_depth: usize) {
        let mask = WatchMask::CLOSE_WRITE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::DELETE
            | WatchMask::ATTRIB
            | WatchMask::CREATE;
        let mut tree = DirWatch::new(dir, mask, max_depth);
        if let Some(stream) = self.stream.as_mut() {
            if let Err(err) = tree.arm(&mut stream.watches()) {
                tracing::warn!(%err, dir = %dir.display(), "cannot watch the --config-dir drop-in directory; drop-in changes are applied on the next other config change or SIGHUP");
            }
        }
        self.config_dir = Some(tree);
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
                    tracing::warn!(%err, path = %self.lock_path.display(), "cannot watch the re-created lock file; its directory's watch still reports a replacement, but opens of it are not seen")
                }
            }
        }
    }

    /// Waits for the next hint: with inotify only when an event comes (no
    /// timer), when polling every [`POLL_INTERVAL`]. Cancel-safe: an event
    /// is consumed only to be returned, or dropped as unrelated. Unrelated
    /// events (other files in a world-writable lock directory, which any
    /// user can create) are skipped here, so that nobody can make the
    /// supervisor work by creating files.
    pub async fn next(&mut self) -> Hint {
        loop {
            let Some(stream) = self.stream.as_mut() else {
                tokio::time::sleep(POLL_INTERVAL).await;
                return Hint::Rescan;
            };
            let event = match stream.next().await {
                None => {
                    tracing::warn!("inotify stream ended; polling from now on");
                    self.stream = None;
                    return Hint::Rescan;
                }
                Some(Err(err)) => {
                    tracing::warn!(%err, "inotify read failed; polling from now on");
                    self.stream = None;
                    return Hint::Rescan;
                }
                Some(Ok(ev)) => ev,
            };
            if event.mask.contains(EventMask::Q_OVERFLOW) {
                tracing::warn!(
                    "inotify queue overflowed (events were lost); looking at everything once"
                );
                return Hint::Rescan;
            }
            if let Some(hint) = self.classify(&event.wd, event.mask, event.name.as_deref()) {
                return hint;
            }
        }
    }

    fn classify(
        &mut self,
        wd: &WatchDescriptor,
        mask: EventMask,
        name: Option<&std::ffi::OsStr>,
    ) -> Option<Hint> {
        // Config directories first: their ancestors may share a watch with
        // the lock's directory, and a re-arm must not be missed.
        let mut config = false;
        for dir in [self.meta.as_mut(), self.config_dir.as_mut()]
            .into_iter()
            .flatten()
        {
            match dir.classify(wd, mask, name) {
                Some(true) => {
                    config = true;
                    if let Some(stream) = self.stream.as_mut() {
                        if let Err(err) = dir.arm(&mut stream.watches()) {
                            tracing::warn!(%err, dir = %dir.target.display(), "cannot watch the directory again after it moved; its changes are applied on the next other config change or SIGHUP");
                        }
                    }
                }
                Some(false) => config = true,
                None => {}
            }
        }
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
        if wd == self.state_wd.as_ref() && name == Some(self.holder_name.as_os_str()) {
            return Some(Hint::HolderChanged);
        }
        if wd == self.dir_wd.as_ref() && name == Some(self.lock_name.as_os_str()) {
            return Some(Hint::LockChanged);
        }
        config.then_some(Hint::ConfigChanged)
    }
}

fn lock_mask() -> WatchMask {
    WatchMask::OPEN | WatchMask::ATTRIB | WatchMask::MOVE_SELF | WatchMask::DELETE_SELF
}
