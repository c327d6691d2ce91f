//! [`ApiServer`]'s control of the server for tests: fault injection, outages, delays, watch
//! streams and their history, stop and restart, access rules, and the requests it served.

use std::sync::Arc;
use std::time::Duration;

use crate::faults::{self, RandomFaults};
use crate::server::{bind_with_retry, Acceptor};
use crate::store::{Deny, Fault};
use crate::unpoisoned;
use crate::{ApiServer, RequestRecord};

impl ApiServer {
    /// Closes every open connection (watches and idle keep-alive ones alike), as an API
    /// server restart or a load balancer's idle timeout does: clients must connect (and, over
    /// HTTPS, shake hands) anew.
    pub fn drop_connections(&self) {
        self.shared.lock_conns().cut_all();
        self.shared.changed.notify_all();
    }

    /// The next `n` non-watch requests are answered with a Status of HTTP `code` (500
    /// InternalError, 429 TooManyRequests with `Retry-After: 1`, 503, 504, 409, 403, ...)
    /// instead of being served.
    pub fn fail_next(&self, n: usize, code: u16) {
        self.lock().faults.push_back(Fault {
            remaining: n,
            code,
            method: None,
            path_prefix: None,
        });
    }

    /// Like [`ApiServer::fail_next`], for requests with this method (`""` = any) whose path
    /// starts with `path_prefix`; these may be watch requests (the watch then fails before
    /// its stream starts).
    pub fn fail_next_matching(&self, n: usize, code: u16, method: &str, path_prefix: &str) {
        self.lock().faults.push_back(Fault {
            remaining: n,
            code,
            method: (!method.is_empty()).then(|| method.to_ascii_uppercase()),
            path_prefix: Some(path_prefix.to_string()),
        });
    }

    /// Drops the faults queued by [`ApiServer::fail_next`] and
    /// [`ApiServer::fail_next_matching`] that were not served yet.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// From now on, answers a random share of the requests whose User-Agent contains
    /// `faults.user_agent` (watches included) with one of `faults.codes`, reproducibly: the
    /// n-th such request's fate depends on the seed and n only (module `faults`). Queued
    /// faults ([`ApiServer::fail_next`]) go first. Replaces any earlier random faults.
    pub fn inject_random_faults(&self, faults: RandomFaults) {
        faults.check();
        self.lock().random_faults = Some(faults::Draws {
            spec: faults,
            drawn: 0,
        });
    }

    /// No more random faults.
    pub fn stop_random_faults(&self) {
        self.lock().random_faults = None;
    }

    /// The API server goes away until [`ApiServer::end_outage`]: every open connection
    /// (watches included) is cut, as when the server process dies, and every request
    /// after that is read, recorded ([`RequestRecord::outage`]) and its connection closed
    /// without an answer, which a client sees at once, as it sees a refused connection.
    /// Unlike [`ApiServer::stop`], the requests sent meanwhile can be counted.
    pub fn begin_outage(&self) {
        {
            let mut state = self.lock();
            state.outage = true;
            // Watch threads see the stop and end (their connections are cut below).
            state.stop_epoch += 1;
        }
        self.shared.changed.notify_all();
        self.shared.lock_conns().cut_all();
    }

    /// The API server is back (same objects, same resourceVersions, watch history kept).
    pub fn end_outage(&self) {
        self.lock().outage = false;
    }

    /// Holds each eviction request (`POST pods/NAME/eviction`) for `hold` before serving it,
    /// so that a client's concurrent evictions are seen in flight together
    /// ([`RequestRecord::evictions_in_flight`]).
    pub fn set_eviction_hold(&self, hold: Duration) {
        self.lock().evictions.set_hold(hold);
    }

    /// Refuses eviction requests beyond `limit` in flight at once as API priority and
    /// fairness refuses a flow whose queue is full: at once, 429 with `Retry-After: 1` and its
    /// text/plain body (no Status, no PodDisruptionBudget cause). `None` lifts the limit.
    /// Panics on `Some(0)`.
    pub fn limit_evictions_in_flight(&self, limit: Option<usize>) {
        self.lock().evictions.set_limit(limit);
    }

    /// Refuses the next `n` eviction requests as [`ApiServer::limit_evictions_in_flight`]
    /// refuses those beyond its limit (API priority and fairness's 429).
    pub fn throttle_next_evictions(&self, n: usize) {
        self.lock().evictions.throttle_next(n);
    }

    /// The most eviction requests the server had in flight at once (0 if none came).
    pub fn max_evictions_in_flight(&self) -> usize {
        self.lock()
            .requests
            .iter()
            .map(|r| r.evictions_in_flight)
            .max()
            .unwrap_or(0)
    }

    /// Holds the answer to each eviction for `delay` after the eviction is applied, so that a
    /// watch of the pods shows the pod deleted before the client hears the eviction's answer.
    pub fn set_eviction_answer_delay(&self, delay: Duration) {
        self.lock().eviction_answer_delay = delay;
    }

    /// Delays every response (including the start of watch streams) by `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    /// Ends every open watch stream now (cleanly, as a server-side timeout does) and closes
    /// its connection.
    pub fn drop_watches(&self) {
        self.lock().drop_epoch += 1;
        self.shared.changed.notify_all();
    }

    /// Sends a BOOKMARK now on every open watch that asked for bookmarks.
    pub fn send_bookmark(&self) {
        self.lock().bookmark_epoch += 1;
        self.shared.changed.notify_all();
    }

    /// How often watches that asked for bookmarks get one.
    pub fn set_bookmark_interval(&self, interval: Duration) {
        self.lock().bookmark_interval = interval;
        self.shared.changed.notify_all();
    }

    /// `true`: an old server that keeps (and validates) Node `spec.configSource` and
    /// `status.config`; `false` (the default): they are dropped as since v1.24.
    pub fn keep_config_source(&self, keep: bool) {
        self.lock().keep_config_source = keep;
    }

    /// Number of watch events kept per resource.
    pub fn set_history_limit(&self, limit: usize) {
        let mut state = self.lock();
        state.history_limit = limit.max(1);
        let limit = state.history_limit;
        for history in state.histories.values_mut() {
            history.trim(limit);
        }
    }

    /// Forgets all watch history (like an etcd compaction plus a watch cache re-list): a
    /// watch from any resourceVersion before now gets 410 Expired.
    pub fn compact_history(&self) {
        let mut state = self.lock();
        let rv = state.rv;
        for history in state.histories.values_mut() {
            history.events.clear();
            history.floor = rv;
            history.evicted = false;
        }
    }

    /// Shuts down: closes the listener and every connection; clients see connection refused.
    /// The stored objects are kept for [`ApiServer::restart_on_same_port`].
    pub fn stop(&self) {
        let acceptor = unpoisoned::lock(&self.acceptor).take();
        if let Some(acceptor) = acceptor {
            acceptor.stop(self.port);
        }
        self.lock().stop_epoch += 1;
        self.shared.changed.notify_all();
        let mut conns = self.shared.lock_conns();
        conns.epoch += 1;
        conns.cut_all();
    }

    /// Stops (if running) and listens again on the same port, with the same objects and
    /// resourceVersions (like an API server restart in front of the same etcd).
    pub fn restart_on_same_port(&self) {
        self.stop();
        self.listen_again();
    }

    /// Restarts like [`ApiServer::restart_on_same_port`], but the watch history is lost (a new
    /// watch cache in front of an etcd that moved on meanwhile): the resourceVersion advances
    /// and every watch from a resourceVersion before the restart gets 410 Expired, so clients
    /// must re-list. Objects, UIDs and their resourceVersions are kept.
    pub fn restart_losing_history(&self) {
        self.stop();
        {
            let mut state = self.lock();
            // Other writers (leases, other nodes) kept etcd's revision moving.
            state.rv += 1;
        }
        self.compact_history();
        self.listen_again();
    }

    /// Listens on the same port again (after [`ApiServer::stop`]).
    fn listen_again(&self) {
        let listener = bind_with_retry(self.port);
        let acceptor = Acceptor::spawn(listener, Arc::clone(&self.shared));
        *unpoisoned::lock(&self.acceptor) = Some(acceptor);
    }

    /// Whether the server is listening.
    pub fn is_running(&self) -> bool {
        unpoisoned::lock(&self.acceptor).is_some()
    }

    /// Every request served so far, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.lock().requests.clone()
    }

    /// The list requests answered 200 whose path starts with `path_prefix`, oldest first:
    /// each page of a paged list is one (see [`RequestRecord::items`], and its `limit` and
    /// `continue` through [`RequestRecord::query_param`]).
    pub fn list_requests(&self, path_prefix: &str) -> Vec<RequestRecord> {
        self.lock()
            .requests
            .iter()
            .filter(|record| record.is_list() && record.path.starts_with(path_prefix))
            .cloned()
            .collect()
    }

    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    /// Number of open watch streams whose path starts with `path_prefix`.
    pub fn open_watches(&self, path_prefix: &str) -> usize {
        self.lock()
            .watches
            .values()
            .filter(|record| record.path.starts_with(path_prefix))
            .count()
    }

    /// The requests of the open watch streams.
    pub fn open_watch_records(&self) -> Vec<RequestRecord> {
        self.lock().watches.values().cloned().collect()
    }

    /// Requests to any verb on `resource` (e.g. `configmaps`, `nodes/status`) are refused
    /// with the real RBAC 403 message; `verb` is `get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete` or `*`; `namespace` `None` means every namespace.
    pub fn deny(&self, verb: &str, resource: &str, namespace: Option<&str>) {
        self.lock().denies.push(Deny {
            verb: verb.to_string(),
            resource: resource.to_string(),
            namespace: namespace.map(str::to_string),
        });
    }

    /// Removes every [`ApiServer::deny`] rule.
    pub fn allow_all(&self) {
        self.lock().denies.clear();
    }

    /// `true`: a request without credentials is `system:anonymous` (may read /version and
    /// the health endpoints only; 403 elsewhere), as on a secure port. `false` (the default):
    /// it is served as `system:unsecured`, like kube-apiserver's old plain-HTTP port, because
    /// client-go (kubectl) never sends credentials over plain HTTP. A wrong token is 401 either
    /// way.
    pub fn require_token(&self, require: bool) {
        self.lock().require_token = require;
    }

    /// The user name that appears in 403 messages.
    pub fn set_user(&self, user: &str) {
        self.lock().user = user.to_string();
    }
}
