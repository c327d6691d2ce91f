//! Watches: the per-resource history (the watch cache), what a watcher with selectors sees of
//! each change, bookmarks, `sendInitialEvents`, timeouts and 410 Expired.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::decode::with_type_meta;
use crate::errors::{ApiError, FieldError};
use crate::protocol::{finish_chunks, write_chunk, write_head, write_json};
use crate::resource::Target;
use crate::selectors::Selector;
use crate::server::Shared;
use crate::store::EventType;
use crate::RequestRecord;

/// How long a watch from a resourceVersion newer than the server's waits for it (then 504).
const FRESHNESS_WAIT: Duration = Duration::from_secs(3);

/// Longest a watch sleeps before re-checking its deadlines.
pub(crate) const WATCH_POLL: Duration = Duration::from_millis(200);

/// The annotation on the bookmark that ends the initial events of `sendInitialEvents=true`.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

#[derive(Clone, Debug)]
pub(crate) struct HistoryEvent {
    pub(crate) rv: u64,
    pub(crate) kind: EventType,
    pub(crate) object: Value,
    pub(crate) prev: Option<Value>,
}

/// A resource's watch cache: the last events, and what a watch can still resume from.
#[derive(Debug)]
pub(crate) struct History {
    pub(crate) events: VecDeque<HistoryEvent>,
    /// Every event after this resourceVersion is (or was, before an eviction) in `events`.
    pub(crate) floor: u64,
    pub(crate) evicted: bool,
}

impl History {
    pub(crate) fn new(floor: u64) -> History {
        History {
            events: VecDeque::new(),
            floor,
            evicted: false,
        }
    }

    /// `Some(oldest - 1)` if a watch from `rv` cannot be served (the watch cache's
    /// `resourceVersion < oldest-1` rule); that number is what the 410 message shows.
    pub(crate) fn too_old(&self, rv: u64) -> Option<u64> {
        let oldest = match (self.evicted, self.events.front()) {
            (true, Some(first)) => first.rv,
            _ => self.floor + 1,
        };
        (rv + 1 < oldest).then(|| oldest - 1)
    }

    pub(crate) fn trim(&mut self, limit: usize) {
        while self.events.len() > limit {
            if let Some(event) = self.events.pop_front() {
                self.floor = event.rv;
                self.evicted = true;
            }
        }
    }
}

pub(crate) struct WatchSpec {
    target: Target,
    selector: Selector,
    /// `None`: start with the current objects (resourceVersion unset, "" or "0").
    from: Option<u64>,
    bookmarks: bool,
    timeout: Option<Duration>,
    send_initial_events: bool,
}

pub(crate) fn watch_spec(
    mut target: Target,
    query: &HashMap<String, String>,
) -> Result<WatchSpec, ApiError> {
    let mut selector = Selector::parse(query, target.resource)?;
    if let Some(name) = target.name.take() {
        // The deprecated watch of a single object is a watch with a name selector.
        selector.fields.extend(Selector::for_name(&name).fields);
    }
    let from =
        match query.get("resourceVersion").map(String::as_str) {
            None | Some("") | Some("0") => None,
            Some(text) => Some(text.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {text:?}"))
            })?),
        };
    let flag = |key: &str| query.get(key).is_some_and(|v| v == "true" || v == "1");
    let bookmarks = flag("allowWatchBookmarks");
    let send_initial_events = flag("sendInitialEvents");
    if send_initial_events {
        let mut errors = Vec::new();
        if query.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
            errors.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !bookmarks {
            errors.push(FieldError::forbidden(
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks to true",
            ));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", &errors));
        }
    }
    let timeout = match query.get("timeoutSeconds") {
        None => None,
        Some(text) => Some(Duration::from_secs(text.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("invalid timeoutSeconds: {text:?}"))
        })?)),
    };
    Ok(WatchSpec {
        target,
        selector,
        from,
        bookmarks,
        timeout,
        send_initial_events,
    })
}

fn watch_event(kind: &str, object: Value) -> Value {
    json!({"type": kind, "object": object})
}

fn bookmark(target: &Target, rv: u64, initial_events_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_events_end {
        metadata["annotations"] = json!({INITIAL_EVENTS_END: "true"});
    }
    watch_event(
        "BOOKMARK",
        json!({
            "kind": target.resource.kind(),
            "apiVersion": target.group.api_version(),
            "metadata": metadata,
        }),
    )
}

/// The event a watcher with `spec`'s namespace and selectors sees for a stored change.
fn visible_event(event: &HistoryEvent, spec: &WatchSpec) -> Option<Value> {
    let resource = spec.target.resource;
    if let Some(ns) = &spec.target.namespace {
        if event.object["metadata"]["namespace"].as_str() != Some(ns.as_str()) {
            return None;
        }
    }
    let now = spec.selector.matches(&event.object, resource);
    let before = event
        .prev
        .as_ref()
        .is_some_and(|prev| spec.selector.matches(prev, resource));
    let served = |obj: Value| with_type_meta(obj, resource, spec.target.group);
    let (kind, object) = match event.kind {
        EventType::Added if now => ("ADDED", event.object.clone()),
        EventType::Deleted if now => ("DELETED", event.object.clone()),
        EventType::Modified if now && before => ("MODIFIED", event.object.clone()),
        EventType::Modified if now => ("ADDED", event.object.clone()),
        EventType::Modified if before => {
            // It stopped matching: a DELETED with the old content at the new resourceVersion.
            let mut old = event.prev.clone()?;
            old["metadata"]["resourceVersion"] = json!(event.rv.to_string());
            ("DELETED", old)
        }
        _ => return None,
    };
    Some(watch_event(kind, served(object)))
}

pub(crate) fn run_watch(
    shared: &Arc<Shared>,
    spec: WatchSpec,
    mut record: RequestRecord,
    writer: &mut impl Write,
) -> io::Result<()> {
    let resource = spec.target.resource;
    let mut state = shared.lock();
    if let Some(rv) = spec.from {
        // A resourceVersion from the future: wait for it like the watch cache, then 504.
        let deadline = Instant::now() + FRESHNESS_WAIT;
        let stop_epoch = state.stop_epoch;
        while rv > state.rv && Instant::now() < deadline && state.stop_epoch == stop_epoch {
            state = shared
                .changed
                .wait_timeout(state, WATCH_POLL)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|poison| poison.into_inner().0);
        }
        if rv > state.rv {
            let err = ApiError::timeout(
                format!("Too large resource version: {rv}, current: {}", state.rv),
                1,
            );
            record.status = err.code;
            state.requests.push(record);
            drop(state);
            return write_json(writer, err.code, &err.headers(), &err.status(), false);
        }
    }
    let mut initial = Vec::new();
    let mut cursor = state.rv;
    let mut expired = false;
    match spec.from {
        Some(rv) if !spec.send_initial_events => {
            let too_old = state.histories.get(&resource).and_then(|h| h.too_old(rv));
            match too_old {
                Some(oldest) => {
                    let err =
                        ApiError::expired(format!("too old resource version: {rv} ({oldest})"));
                    initial.push(watch_event("ERROR", err.status()));
                    expired = true;
                }
                None => cursor = rv,
            }
        }
        _ => {
            for obj in state.objects(resource).values() {
                let in_namespace =
                    spec.target.namespace.as_ref().is_none_or(|ns| {
                        obj["metadata"]["namespace"].as_str() == Some(ns.as_str())
                    });
                if in_namespace && spec.selector.matches(obj, resource) {
                    let served = with_type_meta(obj.clone(), resource, spec.target.group);
                    initial.push(watch_event("ADDED", served));
                }
            }
            if spec.send_initial_events {
                initial.push(bookmark(&spec.target, state.rv, true));
            }
        }
    }
    record.status = 200;
    state.requests.push(record.clone());
    let watch_id = state.next_watch;
    state.next_watch += 1;
    if !expired {
        state.watches.insert(watch_id, record);
    }
    let epochs = (state.stop_epoch, state.drop_epoch, state.bookmark_epoch);
    drop(state);

    let result = stream_watch(shared, &spec, writer, initial, expired, cursor, epochs);
    shared.lock().watches.remove(&watch_id);
    result
}

fn stream_watch(
    shared: &Arc<Shared>,
    spec: &WatchSpec,
    writer: &mut impl Write,
    initial: Vec<Value>,
    expired: bool,
    mut cursor: u64,
    (stop_epoch, drop_epoch, mut bookmark_epoch): (u64, u64, u64),
) -> io::Result<()> {
    let resource = spec.target.resource;
    write_head(writer, 200, &[], "Transfer-Encoding: chunked\r\n", false)?;
    for event in &initial {
        write_chunk(writer, event)?;
    }
    if expired {
        return finish_chunks(writer);
    }
    let deadline = spec.timeout.map(|timeout| Instant::now() + timeout);
    let mut last_bookmark = Instant::now();
    loop {
        let mut batch = Vec::new();
        let mut end = false;
        {
            let mut state = shared.lock();
            loop {
                if state.stop_epoch != stop_epoch {
                    // The server is stopping and closes the connection under us.
                    return Ok(());
                }
                if state.drop_epoch != drop_epoch || deadline.is_some_and(|d| Instant::now() >= d) {
                    end = true;
                    break;
                }
                let Some(history) = state.histories.get(&resource) else {
                    end = true;
                    break;
                };
                if history.too_old(cursor).is_some() {
                    // Too slow to keep up with the history: the real server drops the watch.
                    end = true;
                    break;
                }
                let after = cursor;
                for event in history.events.iter().filter(|e| e.rv > after) {
                    if let Some(visible) = visible_event(event, spec) {
                        batch.push(visible);
                    }
                    cursor = event.rv;
                }
                let due = last_bookmark + state.bookmark_interval;
                if spec.bookmarks
                    && (state.bookmark_epoch != bookmark_epoch || Instant::now() >= due)
                {
                    bookmark_epoch = state.bookmark_epoch;
                    last_bookmark = Instant::now();
                    cursor = cursor.max(state.rv);
                    batch.push(bookmark(&spec.target, state.rv, false));
                }
                if !batch.is_empty() {
                    break;
                }
                let mut wait = WATCH_POLL;
                if spec.bookmarks {
                    wait = wait.min(due.saturating_duration_since(Instant::now()));
                }
                if let Some(deadline) = deadline {
                    wait = wait.min(deadline.saturating_duration_since(Instant::now()));
                }
                state = shared
                    .changed
                    .wait_timeout(state, wait.max(Duration::from_millis(1)))
                    .map(|(guard, _)| guard)
                    .unwrap_or_else(|poison| poison.into_inner().0);
            }
        }
        for event in &batch {
            write_chunk(writer, event)?;
        }
        if end {
            return finish_chunks(writer);
        }
    }
}
