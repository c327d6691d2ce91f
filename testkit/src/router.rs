//! Request handling: authentication, injected faults, authorization, then the verb a
//! request maps to (get, list, watch, create, update, patch, delete) on its target.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use serde_json::Value;

use crate::discovery::{discovery, version_info};
use crate::errors::ApiError;
use crate::inflight::{is_eviction, write_too_many};
use crate::list::ListOptions;
use crate::patch::patch_kind;
use crate::protocol::{media_type, parse_query, reason_phrase, write_json, HttpRequest};
use crate::resource::{parse_target, Target};
use crate::selectors::Selector;
use crate::server::Shared;
use crate::store::{FieldValidation, Opts, Outcome, State};
use crate::watch::{run_watch, watch_spec, WatchSpec};
use crate::{crd, nodeauth, protobuf, RequestRecord, ANONYMOUS_USER};

/// Accepted body content types for POST and PUT.
const BODY_TYPES: &str = "application/json, application/yaml, application/vnd.kubernetes.protobuf";

enum Routed {
    Json {
        code: u16,
        body: Value,
        headers: Vec<(String, String)>,
    },
    Text(u16, &'static str),
    Watch(WatchSpec),
}

impl Routed {
    fn error(err: ApiError) -> Routed {
        Routed::Json {
            code: err.code,
            body: err.status(),
            headers: err.headers(),
        }
    }

    fn ok(body: Value) -> Routed {
        Routed::Json {
            code: 200,
            body,
            headers: Vec::new(),
        }
    }
}

/// Serves one request; `Ok(false)` closes the connection.
pub(crate) fn handle(
    shared: &Arc<Shared>,
    request: HttpRequest,
    writer: &mut impl Write,
) -> io::Result<bool> {
    let keep_alive = request.keep_alive();
    let query = parse_query(&request.query);
    let watch = query.get("watch").is_some_and(|v| v == "true" || v == "1");
    let mut record = RequestRecord {
        method: request.method.clone(),
        path: request.path.clone(),
        query: request.query.clone(),
        watch,
        content_type: request.header("content-type").map(str::to_string),
        user_agent: request.header("user-agent").map(str::to_string),
        body: String::from_utf8_lossy(&request.body).into_owned(),
        status: 0,
        items: None,
        injected: false,
        outage: false,
        evictions_in_flight: 0,
        received: Instant::now(),
        answered: Instant::now(),
    };
    {
        let mut state = shared.lock();
        if state.outage {
            // Taken, read, and dropped unanswered: the client sees the connection closed.
            record.outage = true;
            state.requests.push(record);
            shared.changed.notify_all();
            return Ok(false);
        }
    }
    let eviction = is_eviction(&request).then(|| shared.lock().evictions.enter());
    if let Some(admission) = eviction {
        record.evictions_in_flight = admission.in_flight;
        if admission.refused {
            // API priority and fairness refuses at once, before any other filter.
            record.status = 429;
            let mut state = shared.lock();
            state.evictions.leave();
            record.answered = Instant::now();
            state.requests.push(record);
            drop(state);
            shared.changed.notify_all();
            write_too_many(writer, keep_alive)?;
            return Ok(keep_alive);
        }
        if !admission.hold.is_zero() {
            thread::sleep(admission.hold);
        }
    }
    let delay = shared.lock().delay;
    if !delay.is_zero() {
        thread::sleep(delay);
    }
    let routed = {
        let mut state = shared.lock();
        let injected = state.injected;
        let routed = route(&mut state, &request, &query, watch);
        record.injected = state.injected != injected;
        if eviction.is_some() {
            state.evictions.leave();
        }
        record.answered = Instant::now();
        (routed, eviction.map(|_| state.eviction_answer_delay))
    };
    let (routed, answer_delay) = routed;
    if let Some(hold) = answer_delay.filter(|d| !d.is_zero()) {
        // The eviction is applied (its watch events are out); only the answer waits.
        shared.changed.notify_all();
        thread::sleep(hold);
    }
    match routed {
        Routed::Json {
            code,
            body,
            headers,
        } => {
            record.status = code;
            if request.method == "GET" && code == 200 {
                // A list (page): how many items it carried.
                record.items = body["items"].as_array().map(Vec::len);
            }
            shared.lock().requests.push(record);
            shared.changed.notify_all();
            write_json(writer, code, &headers, &body, keep_alive)?;
            Ok(keep_alive)
        }
        Routed::Text(code, text) => {
            record.status = code;
            shared.lock().requests.push(record);
            let head = format!(
                "HTTP/1.1 {code} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{text}",
                reason_phrase(code),
                text.len()
            );
            writer.write_all(head.as_bytes())?;
            writer.flush()?;
            Ok(keep_alive)
        }
        Routed::Watch(spec) => {
            run_watch(shared, spec, record, writer)?;
            Ok(false)
        }
    }
}

fn route(
    state: &mut State,
    request: &HttpRequest,
    query: &HashMap<String, String>,
    watch: bool,
) -> Routed {
    match route_inner(state, request, query, watch) {
        Ok(routed) => routed,
        Err(err) => Routed::error(err),
    }
}

/// Paths that `system:public-info-viewer` lets anyone (even anonymous) read.
const PUBLIC_PATHS: [&str; 4] = ["/version", "/healthz", "/livez", "/readyz"];

fn route_inner(
    state: &mut State,
    request: &HttpRequest,
    query: &HashMap<String, String>,
    watch: bool,
) -> Result<Routed, ApiError> {
    // Authentication: a wrong token is 401; no credentials is the insecure port's user
    // (client-go sends no credentials over plain HTTP) or, with `require_token`, anonymous;
    // a node token is the node's identity (system:node:NAME).
    let identity = nodeauth::authenticate(
        state,
        request.header("authorization"),
        request.client_cn.as_deref(),
    )?;
    let user = identity.user();
    let path = match request.path.trim_end_matches('/') {
        "" => "/",
        trimmed => trimmed,
    };
    let target = parse_target(path).or_else(|| crd::parse_target(state, path));
    let verb = target.as_ref().map(|t| verb_for(&request.method, t, watch));
    inject_fault(state, request, watch, target.as_ref(), verb.flatten())?;

    if PUBLIC_PATHS.contains(&path) {
        if request.method != "GET" {
            return Err(ApiError::method_not_allowed());
        }
        return Ok(match path {
            "/version" => Routed::ok(version_info()),
            _ => Routed::Text(200, "ok"),
        });
    }
    let Some(target) = target else {
        if user.is_none() {
            return Err(ApiError::forbidden_path(ANONYMOUS_USER, path));
        }
        if let Some(node) = identity.node() {
            // A resource this server does not serve: nothing lets a node at it.
            if let Some(attrs) = nodeauth::Attrs::from_path(&request.method, path, query, watch) {
                return Err(attrs.forbidden(&nodeauth::node_user(node), ""));
            }
        }
        if request.method != "GET" {
            return Err(ApiError::method_not_allowed());
        }
        let host = request.header("host").unwrap_or("127.0.0.1");
        return discovery(state, path, host)
            .map(Routed::ok)
            .ok_or_else(ApiError::no_such_path);
    };
    let verb = verb.flatten().ok_or_else(ApiError::method_not_allowed)?;
    let user = user.unwrap_or_else(|| ANONYMOUS_USER.to_string());
    if user == ANONYMOUS_USER || state.denies.iter().any(|deny| deny.matches(verb, &target)) {
        return Err(ApiError::forbidden(&user, verb, &target));
    }
    if let Some(node) = identity.node() {
        nodeauth::authorize(state, node, &nodeauth::Attrs::new(verb, &target, query))?;
    }
    let mut opts = write_options(query)?;
    opts.node = identity.node().map(str::to_string);
    match verb {
        "get" => state
            .get_served(&target)
            .map(Routed::ok)
            .ok_or_else(|| ApiError::not_found(&target, target.name())),
        "list" => {
            let selector = Selector::parse(query, target.resource)?;
            let options = ListOptions::parse(query)?;
            state.list(&target, &selector, &options).map(Routed::ok)
        }
        "watch" => watch_spec(target, query).map(Routed::Watch),
        "create" if target.is_eviction() => {
            let body = request_body(request, &target)?;
            respond(state.evict(&target, body, &opts))
        }
        "create" => {
            let body = request_body(request, &target)?;
            respond(state.create(&target, body, &opts))
        }
        "update" => {
            let body = request_body(request, &target)?;
            respond(state.update(&target, body, &opts))
        }
        "patch" => {
            let kind = patch_kind(request.header("content-type"))?;
            respond(state.patch(&target, kind, &request.body, &opts))
        }
        "delete" => {
            let options: Option<Value> = if request.body.is_empty() {
                None
            } else {
                Some(serde_json::from_slice(&request.body).map_err(|err| {
                    ApiError::bad_request(format!(
                        "couldn't get version/kind; json parse error: {err}"
                    ))
                })?)
            };
            respond(state.delete(&target, options.as_ref(), &opts))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// The RBAC verb of a request, `None` if the method is not served on that path.
fn verb_for(method: &str, target: &Target, watch: bool) -> Option<&'static str> {
    let object = target.name.is_some();
    if target.is_eviction() {
        // pods/eviction is create-only.
        return (method == "POST").then_some("create");
    }
    match (method, object) {
        ("GET", _) if watch => Some("watch"),
        ("GET", true) => Some("get"),
        ("GET", false) => Some("list"),
        ("POST", false) if target.subresource.is_none() => {
            // Creating needs a namespace for namespaced kinds.
            (!target.resource.namespaced() || target.namespace.is_some()).then_some("create")
        }
        ("PUT", true) => Some("update"),
        ("PATCH", true) => Some("patch"),
        ("DELETE", true) if target.subresource.is_none() => Some("delete"),
        _ => None,
    }
}

fn inject_fault(
    state: &mut State,
    request: &HttpRequest,
    watch: bool,
    target: Option<&Target>,
    verb: Option<&str>,
) -> Result<(), ApiError> {
    let position = state.faults.iter().position(|fault| {
        fault.remaining > 0
            && match &fault.path_prefix {
                None => !watch,
                Some(prefix) => {
                    request.path.starts_with(prefix.as_str())
                        && fault.method.as_ref().is_none_or(|m| *m == request.method)
                }
            }
    });
    let code = match position {
        Some(position) => {
            let code = state.faults[position].code;
            state.faults[position].remaining -= 1;
            if state.faults[position].remaining == 0 {
                state.faults.remove(position);
            }
            code
        }
        None => {
            let user_agent = request.header("user-agent");
            match state
                .random_faults
                .as_mut()
                .and_then(|d| d.draw(user_agent))
            {
                Some(code) => code,
                None => return Ok(()),
            }
        }
    };
    state.injected += 1;
    let user = nodeauth::authenticate(
        state,
        request.header("authorization"),
        request.client_cn.as_deref(),
    )
    .ok()
    .and_then(|identity| identity.user())
    .unwrap_or_else(|| ANONYMOUS_USER.to_string());
    Err(ApiError::injected(
        code,
        &user,
        verb.unwrap_or("get"),
        target,
    ))
}

fn write_options(query: &HashMap<String, String>) -> Result<Opts, ApiError> {
    let dry_run = match query.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
            )))
        }
    };
    let validation = match query.get("fieldValidation").map(String::as_str) {
        None | Some("") | Some("Warn") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
            )))
        }
    };
    Ok(Opts {
        dry_run,
        validation,
        node: None,
    })
}

fn request_body(request: &HttpRequest, target: &Target) -> Result<Value, ApiError> {
    let parse_error = |err: String| {
        ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {err}"
        ))
    };
    let _ = target;
    match media_type(request.header("content-type")).as_str() {
        "" | "application/json" | "*/*" => {
            serde_json::from_slice(&request.body).map_err(|err| parse_error(err.to_string()))
        }
        "application/yaml" => serde_yaml_ng::from_slice(&request.body)
            .map_err(|err| ApiError::bad_request(format!("error converting YAML to JSON: {err}"))),
        "application/vnd.kubernetes.protobuf" => {
            let kind = if target.is_eviction() {
                "Eviction"
            } else {
                target.resource.kind()
            };
            protobuf::decode(&request.body, kind).map_err(|err| match err {
                protobuf::Error::UnsupportedKind(found) => ApiError::unsupported_media_type(&format!(
                    "{BODY_TYPES} (this fake server decodes protobuf for ConfigMap and Namespace only, besides PodDisruptionBudget and Eviction for kubectl create pdb and drain; not {found})"
                )),
                protobuf::Error::Malformed(why) => ApiError::bad_request(format!(
                    "{kind} in version \"v1\" cannot be handled as a {kind}: {why}"
                )),
            })
        }
        _ => Err(ApiError::unsupported_media_type(BODY_TYPES)),
    }
}

fn respond(result: Result<Outcome, ApiError>) -> Result<Routed, ApiError> {
    let outcome = result?;
    let headers = outcome
        .warnings
        .iter()
        .map(|warning| {
            let escaped = warning.replace('\\', "\\\\").replace('"', "\\\"");
            ("Warning".to_string(), format!("299 - \"{escaped}\""))
        })
        .collect();
    Ok(Routed::Json {
        code: outcome.code,
        body: outcome.body,
        headers,
    })
}
