//! The follower: keeps the published client in step with the kubeconfig
//! and the files it names.
//!
//! Watches (inotify) the directory of each file, or its nearest existing
//! ancestor while the directory does not exist (walking down as
//! directories appear), and the directory a symlink points into. Events
//! for the names of interest are debounced (`QUIET` without an event, at
//! most `MAX_DELAY` after the first), then everything is read again with
//! the checks of the first read ([`super::client::load_kubeconfig`]). New
//! content builds and publishes a new client; refused content keeps the
//! last good client and says why (once per distinct error). Without
//! inotify, everything is read every `POLL_INTERVAL`.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use inotify::{EventStream, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::client::{self, ClientError};
use super::{ApiStatus, Published, REJECTED_REREAD_INTERVAL};

/// A burst of events is read once this long after its last event...
const QUIET: Duration = Duration::from_millis(50);
/// ... but at most this long after its first.
const MAX_DELAY: Duration = Duration::from_millis(500);
/// Read interval when inotify cannot be used.
const POLL_INTERVAL: Duration = Duration::from_secs(10);

fn dir_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::DELETE
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

pub(super) struct Follower {
    path: PathBuf,
    /// The digest of the content the published client was built from.
    digest: Option<[u8; 32]>,
    /// The files the last good (or last read) kubeconfig names.
    named: Vec<PathBuf>,
    generation: u64,
    clients: watch::Sender<Option<Published>>,
    status: watch::Sender<ApiStatus>,
    rejected: Arc<Notify>,
    last_forced: Option<Instant>,
    /// The last error logged (each distinct one is logged once).
    last_error: Option<String>,
    /// Poll on purpose (`--watch-mode poll`).
    force_poll: bool,
    /// A refusal was logged since the last new credentials.
    rejection_said: bool,
}

/// Per watched directory, the names whose events matter.
type Interest = HashMap<WatchDescriptor, HashSet<OsString>>;

/// inotify, or nothing (polling).
struct Events {
    stream: EventStream<Vec<u8>>,
    watches: Watches,
    interest: Interest,
}

impl Follower {
    pub(super) fn new(
        path: PathBuf,
        initial: Option<([u8; 32], Vec<PathBuf>)>,
        clients: watch::Sender<Option<Published>>,
        status: watch::Sender<ApiStatus>,
        rejected: Arc<Notify>,
        force_poll: bool,
    ) -> Self {
        let (digest, named) = match initial {
            Some((d, n)) => (Some(d), n),
            None => (None, Vec::new()),
        };
        Follower {
            generation: u64::from(digest.is_some()),
            path,
            digest,
            named,
            clients,
            status,
            rejected,
            last_forced: None,
            last_error: None,
            force_poll,
            rejection_said: false,
        }
    }

    pub(super) async fn run(mut self) {
        let mut events = match Events::new() {
            Ok(_) if self.force_poll => None,
            Ok(e) => Some(e),
            Err(err) => {
                warn!(%err, kubeconfig = %self.path.display(), interval = %humantime::format_duration(POLL_INTERVAL), "inotify unavailable: reading the kubeconfig and its files by polling");
                None
            }
        };
        self.arm(&mut events).await;
        // What changed between the first read and the watches.
        self.reread().await;
        let mut poll = tokio::time::interval(POLL_INTERVAL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await;
        let mut burst_start: Option<Instant> = None;
        let mut due: Option<Instant> = None;
        let mut forced_due: Option<Instant> = None;
        loop {
            tokio::select! {
                relevant = next_event(&mut events) => {
                    if relevant {
                        let now = Instant::now();
                        let start = *burst_start.get_or_insert(now);
                        due = Some((now + QUIET).min(start + MAX_DELAY));
                    }
                }
                _ = poll.tick(), if events.is_none() => {
                    self.reread().await;
                }
                _ = sleep_opt(due) => {
                    due = None;
                    burst_start = None;
                    self.arm(&mut events).await;
                    self.reread().await;
                }
                () = self.rejected.notified(), if forced_due.is_none() => {
                    let now = Instant::now();
                    let at = self
                        .last_forced
                        .map_or(now, |t| (t + REJECTED_REREAD_INTERVAL).max(now));
                    forced_due = Some(at);
                }
                _ = sleep_opt(forced_due) => {
                    forced_due = None;
                    self.last_forced = Some(Instant::now());
                    // Said once until new credentials are in use: a node whose
                    // credentials stay refused reads them every 5 s, quietly.
                    if !self.rejection_said {
                        info!(kubeconfig = %self.path.display(), "the API server refused our credentials (401 or a failed TLS handshake): reading them again (at most every 5 s while refused)");
                        self.rejection_said = true;
                    }
                    self.reread().await;
                }
            }
        }
    }

    /// (Re)places the watches: every file of interest's directory, or its
    /// nearest existing ancestor; a symlink's target directory too. The path
    /// lookups run off the event loop.
    async fn arm(&mut self, events: &mut Option<Events>) {
        let Some(ev) = events.as_mut() else { return };
        let mut files = vec![self.path.clone()];
        files.extend(self.named.iter().cloned());
        let watches = ev.watches.clone();
        let old: Vec<WatchDescriptor> = ev.interest.keys().cloned().collect();
        let placed = tokio::task::spawn_blocking(move || place_watches(watches, &files, old)).await;
        match placed {
            Ok((interest, None)) => ev.interest = interest,
            Ok((_, Some((dir, err)))) => {
                warn!(%err, dir = %dir.display(), interval = %humantime::format_duration(POLL_INTERVAL), "cannot watch a directory of the kubeconfig's files: reading them by polling");
                *events = None;
            }
            Err(err) => {
                warn!(%err, interval = %humantime::format_duration(POLL_INTERVAL), "the watch task failed: reading the kubeconfig's files by polling");
                *events = None;
            }
        }
    }

    /// Reads everything again; publishes a new client for new content.
    async fn reread(&mut self) {
        let path = self.path.clone();
        let loaded = match tokio::task::spawn_blocking(move || client::load_kubeconfig(&path)).await
        {
            Ok(r) => r,
            Err(err) => Err(ClientError::Task(err.to_string())),
        };
        match loaded {
            Ok(loaded) if Some(loaded.digest) == self.digest => {
                self.named = loaded.named;
                self.set_status(ApiStatus::following(&self.path));
                self.last_error = None;
            }
            Ok(loaded) => {
                let digest = loaded.digest;
                let named = loaded.named.clone();
                match client::build(&self.path, loaded.kubeconfig).await {
                    Ok(client) => {
                        self.generation += 1;
                        self.rejection_said = false;
                        let first = self.digest.is_none();
                        self.digest = Some(digest);
                        self.named = named;
                        self.last_error = None;
                        if first {
                            info!(kubeconfig = %self.path.display(), "the kubeconfig appeared: following the node's assignment (the kubelet keeps running)");
                        } else {
                            info!(kubeconfig = %self.path.display(), generation = self.generation, "credentials changed: using the new ones for every new request");
                        }
                        self.clients.send_replace(Some(Published {
                            generation: self.generation,
                            client,
                        }));
                        self.set_status(ApiStatus::following(&self.path));
                    }
                    Err(err) => self.refused(&err),
                }
            }
            Err(err) if err.is_unwritten() && self.digest.is_none() => {
                self.set_status(ApiStatus::waiting(&self.path));
            }
            Err(err) => self.refused(&err),
        }
    }

    fn refused(&mut self, err: &ClientError) {
        let text = err.to_string();
        let kept = self.digest.is_some();
        if self.last_error.as_deref() != Some(text.as_str()) {
            if kept {
                warn!(error = %text, kubeconfig = %self.path.display(), "refusing the changed credentials; keeping the last good ones (read again when the files change)");
            } else {
                error!(error = %text, kubeconfig = %self.path.display(), "refusing the kubeconfig; the kubelet keeps running without following the node's assignment (read again when it changes)");
            }
            self.last_error = Some(text.clone());
        }
        self.set_status(ApiStatus::invalid(&self.path, &text, kept));
    }

    fn set_status(&self, status: ApiStatus) {
        self.status.send_if_modified(|cur| {
            if cur.same_as(&status) {
                false
            } else {
                *cur = status;
                true
            }
        });
    }
}

impl Events {
    fn new() -> std::io::Result<Events> {
        let inotify = Inotify::init()?;
        let watches = inotify.watches();
        let stream = inotify.into_event_stream(vec![0u8; 4096])?;
        Ok(Events {
            stream,
            watches,
            interest: HashMap::new(),
        })
    }
}

/// The next event: `true` when it concerns a name of interest (or the
/// watched directory itself, or the queue overflowed).
async fn next_event(events: &mut Option<Events>) -> bool {
    let Some(ev) = events.as_mut() else {
        return std::future::pending().await;
    };
    match ev.stream.next().await {
        Some(Ok(event)) => {
            if event.mask.contains(inotify::EventMask::IGNORED) {
                return false;
            }
            match (&event.name, ev.interest.get(&event.wd)) {
                (Some(name), Some(names)) => names.contains(name),
                (None, _) => true,
                (Some(_), None) => false,
            }
        }
        Some(Err(err)) => {
            warn!(%err, "inotify read failed: reading the kubeconfig and its files by polling");
            *events = None;
            true
        }
        None => {
            *events = None;
            true
        }
    }
}

/// Watches the directory of each of `files` (or its nearest existing
/// ancestor; a symlink's target directory too) and removes the watches of
/// `old` no longer needed. Returns the names of interest per watch, and the
/// first directory that could not be watched. Blocking.
fn place_watches(
    mut watches: Watches,
    files: &[PathBuf],
    old: Vec<WatchDescriptor>,
) -> (Interest, Option<(PathBuf, std::io::Error)>) {
    let mut interest = Interest::new();
    let mut failed = None;
    for file in files {
        let mut targets = vec![file.clone()];
        if let Ok(link) = std::fs::read_link(file) {
            let parent = file.parent().unwrap_or(Path::new("/"));
            targets.push(parent.join(link));
        }
        for (dir, name) in targets.iter().filter_map(|t| watch_point(t)) {
            match watches.add(&dir, dir_mask()) {
                Ok(wd) => {
                    interest.entry(wd).or_default().insert(name);
                }
                Err(err) => failed = Some((dir, err)),
            }
        }
    }
    for wd in old {
        if !interest.contains_key(&wd) {
            let _ = watches.remove(wd);
        }
    }
    (interest, failed)
}

/// Where to watch for `file`: its directory and name, or (while the
/// directory does not exist) the nearest existing ancestor and the name of
/// its child on the way to `file`.
fn watch_point(file: &Path) -> Option<(PathBuf, OsString)> {
    let mut child = file.to_path_buf();
    let mut dir = file.parent()?.to_path_buf();
    loop {
        if dir.is_dir() {
            return Some((dir, child.file_name()?.to_os_string()));
        }
        child = dir.clone();
        dir = dir.parent()?.to_path_buf();
    }
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_is_watched_from_its_nearest_ancestor() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("a/b/kubelet.conf");
        assert_eq!(
            watch_point(&file),
            Some((d.path().to_path_buf(), OsString::from("a")))
        );
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        assert_eq!(
            watch_point(&file),
            Some((d.path().join("a/b"), OsString::from("kubelet.conf")))
        );
    }
}
