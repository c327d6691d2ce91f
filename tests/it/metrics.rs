//! `--metrics-address` end to end: the real binary serves Prometheus text (0.0.4, or
//! OpenMetrics when asked for) over real TCP while real handoffs, restarts and takeovers
//! happen; the scraper (`support/scrape.rs`) parses the exposition strictly. Every wait
//! polls an observable fact with a deadline.

use crate::support;

use crate::support::scrape;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use scrape::{free_addr, request, scrape, scrape_openmetrics, Exposition};
use support::{wait_until, Proc, Scene};

const DEADLINE: Duration = Duration::from_secs(8);
/// The product retries a busy address every 5 s.
const REBIND_DEADLINE: Duration = Duration::from_secs(12);

fn supervisor(scene: &Scene, role: &[&str], addr: SocketAddr) -> Proc {
    let addr = addr.to_string();
    let mut args = role.to_vec();
    args.extend_from_slice(&["--stop-timeout", "2s", "--metrics-address", &addr]);
    scene.spawn(scene.pivot(&args, &[], &[]))
}

/// Scrapes until `accept` holds (the server may not listen yet, counters may lag the log).
fn scrape_until(addr: SocketAddr, what: &str, accept: impl Fn(&Exposition) -> bool) -> Exposition {
    wait_until(DEADLINE, what, || scrape(addr).ok().filter(|e| accept(e)))
}

/// The single running kubelet whose parent is `parent`.
fn kubelet_of(scene: &Scene, parent: &Proc, not: &[i32]) -> i32 {
    wait_until(
        DEADLINE,
        &format!("a kubelet of pid {}", parent.pid()),
        || {
            scene.running_kubelets().into_iter().find(|pid| {
                !not.contains(pid)
                    && scene
                        .start_of(*pid)
                        .is_some_and(|s| s.num("ppid") == i128::from(parent.pid()))
            })
        },
    )
}

const BOOT: &str = "role=\"bootstrap\",generation=\"0\"";
const V1: &str = "role=\"self-hosted\",generation=\"1\"";

#[test]
fn metrics_follow_restarts_a_handoff_and_a_takeover() {
    let scene = Scene::new();
    let (a, b) = (free_addr(), free_addr());
    let mut boot = supervisor(&scene, &["bootstrap"], a);
    let first = kubelet_of(&scene, &boot, &[]);

    let m = scrape_until(a, "the bootstrap to report a running kubelet", |m| {
        m.get("kubelet_pivot_kubelet_running") == Some(1.0)
    });
    assert_eq!(m.value(&format!("kubelet_pivot_holding{{{BOOT}}}")), 1.0);
    assert_eq!(
        m.value(&format!("kubelet_pivot_state{{{BOOT},state=\"holding\"}}")),
        1.0
    );
    assert_eq!(
        m.value(&format!("kubelet_pivot_state{{{BOOT},state=\"waiting\"}}")),
        0.0
    );
    assert_eq!(
        m.value(&format!("kubelet_pivot_lock_holder{{{BOOT}}}")),
        1.0
    );
    assert_eq!(m.value("kubelet_pivot_kubelet_starts_total"), 1.0);
    assert_eq!(m.value("kubelet_pivot_lock_acquisitions_total"), 1.0);
    assert_eq!(m.value("kubelet_pivot_bad_configs"), 0.0);
    assert_eq!(
        m.value("kubelet_pivot_config_info{origin=\"default\",uid=\"\",resource_version=\"\",status=\"True\"}"),
        1.0
    );
    // Local-only mode: no API exchange ever happened.
    assert_eq!(
        m.get("kubelet_pivot_last_sync_timestamp_seconds"),
        None,
        "{}",
        m.text
    );
    assert!(m
        .series_of("kubelet_pivot_handoffs_total")
        .iter()
        .all(|(_, v)| *v == 0.0));

    // SIGHUP restarts the kubelet: counted as such.
    boot.signal(Signal::SIGHUP);
    let second = kubelet_of(&scene, &boot, &[first]);
    let m = scrape_until(a, "the SIGHUP restart to be counted", |m| {
        m.get("kubelet_pivot_kubelet_restarts_total{reason=\"sighup\"}") == Some(1.0)
    });
    assert_eq!(m.value("kubelet_pivot_kubelet_starts_total"), 2.0);
    assert_eq!(
        m.value("kubelet_pivot_kubelet_restarts_total{reason=\"exited\"}"),
        0.0
    );

    // A self-hosted v1 takes over: a handoff to a higher generation.
    let mut v1 = supervisor(&scene, &["self-hosted", "--generation", "1"], b);
    kubelet_of(&scene, &v1, &[first, second]);
    let m = scrape_until(a, "the bootstrap to count the handoff and stand by", |m| {
        m.get("kubelet_pivot_handoffs_total{reason=\"higher_generation\"}") == Some(1.0)
            && m.get(&format!("kubelet_pivot_state{{{BOOT},state=\"waiting\"}}")) == Some(1.0)
    });
    assert_eq!(m.value(&format!("kubelet_pivot_holding{{{BOOT}}}")), 0.0);
    assert_eq!(m.value("kubelet_pivot_kubelet_running"), 0.0);
    let m = scrape_until(a, "the node's holder to be v1", |m| {
        m.get(&format!("kubelet_pivot_lock_holder{{{V1}}}")) == Some(1.0)
    });
    assert_eq!(
        m.get(&format!("kubelet_pivot_lock_holder{{{BOOT}}}")),
        None,
        "{}",
        m.text
    );
    let m = scrape_until(b, "v1 to hold the lock", |m| {
        m.get(&format!("kubelet_pivot_holding{{{V1}}}")) == Some(1.0)
    });
    assert_eq!(m.value("kubelet_pivot_lock_acquisitions_total"), 1.0);

    // v1 dies: the bootstrap takes back over.
    v1.signal(Signal::SIGKILL);
    v1.wait_exit(DEADLINE);
    kubelet_of(&scene, &boot, &[first, second]);
    scrape_until(a, "the bootstrap's second acquisition", |m| {
        m.get("kubelet_pivot_lock_acquisitions_total") == Some(2.0)
            && m.get(&format!("kubelet_pivot_holding{{{BOOT}}}")) == Some(1.0)
    });
    boot.signal(Signal::SIGTERM);
    assert!(boot.wait_exit(DEADLINE).success());
    scene.assert_no_overlap();
}

#[test]
fn metrics_endpoint_answers_get_and_head_on_metrics_only() {
    let scene = Scene::new();
    let addr = free_addr();
    // Written as operators write it (issue 34): localhost is the IPv4 loopback.
    let local = format!("localhost:{}", addr.port());
    let mut boot = scene.spawn(scene.pivot(
        &[
            "bootstrap",
            "--stop-timeout",
            "2s",
            "--metrics-address",
            &local,
        ],
        &[],
        &[],
    ));
    scrape_until(addr, "the metrics endpoint", |_| true);

    let (code, head, body) =
        request(addr, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("HEAD");
    assert_eq!(code, 200, "{head}");
    assert!(body.is_empty(), "HEAD returned a body: {body:?}");
    let (code, _, _) = request(addr, "GET /nope HTTP/1.1\r\n\r\n").expect("GET /nope");
    assert_eq!(code, 404);
    let (code, head, _) = request(addr, "POST /metrics HTTP/1.1\r\n\r\n").expect("POST");
    assert_eq!(code, 405);
    assert!(
        head.to_ascii_lowercase().contains("allow: get, head"),
        "{head}"
    );
    let (code, _, _) = request(addr, "hello\r\n\r\n").expect("garbage");
    assert_eq!(code, 400);
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let (code, _, _) = request(addr, &huge).expect("oversized request");
    assert_eq!(code, 431);
    // Prometheus asks for OpenMetrics first and gets it: the same series, counters typed
    // without `_total`, the identity as an info metric, `# EOF` at the end.
    let om = wait_until(
        DEADLINE,
        "an OpenMetrics scrape with the kubelet running",
        || {
            scrape_openmetrics(addr)
                .ok()
                .filter(|m| m.get("kubelet_pivot_kubelet_running") == Some(1.0))
        },
    );
    assert_eq!(om.value("kubelet_pivot_kubelet_starts_total"), 1.0);
    assert_eq!(om.value(&format!("kubelet_pivot_holding{{{BOOT}}}")), 1.0);
    assert!(om
        .text
        .contains("# TYPE kubelet_pivot_kubelet_starts counter\n"));
    assert!(om.text.contains("# TYPE kubelet_pivot info\n"));
    assert!(om
        .series_of("kubelet_pivot_info")
        .iter()
        .any(|(s, v)| s.starts_with(&format!("kubelet_pivot_info{{{BOOT},version=")) && *v == 1.0));
    // Still serving after all that.
    scrape(addr).expect("scrape after bad requests");
    boot.signal(Signal::SIGTERM);
    assert!(boot.wait_exit(DEADLINE).success());
}

/// Connections that send half a request and wait: more than the server serves at once.
fn slow_clients(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
                .expect("half a request");
            s
        })
        .collect()
}

#[test]
fn slow_clients_neither_stall_the_supervisor_nor_keep_the_endpoint() {
    let scene = Scene::new();
    let addr = free_addr();
    let mut boot = supervisor(&scene, &["bootstrap"], addr);
    let first = kubelet_of(&scene, &boot, &[]);
    scrape_until(addr, "the metrics endpoint", |_| true);

    let started = Instant::now();
    let slow = slow_clients(addr, 20);
    // The supervisor's loop goes on: a SIGHUP restarts the kubelet.
    boot.signal(Signal::SIGHUP);
    kubelet_of(&scene, &boot, &[first]);
    // Each slow client is cut off (5 s), and scrapes are answered again.
    for mut s in slow {
        s.set_read_timeout(Some(REBIND_DEADLINE)).expect("timeout");
        let mut rest = Vec::new();
        let closed = s.read_to_end(&mut rest);
        assert!(
            started.elapsed() < REBIND_DEADLINE,
            "a slow client kept its connection: {closed:?}"
        );
    }
    scrape_until(addr, "the SIGHUP restart to be counted", |m| {
        m.get("kubelet_pivot_kubelet_restarts_total{reason=\"sighup\"}") == Some(1.0)
    });
    boot.signal(Signal::SIGTERM);
    assert!(boot.wait_exit(DEADLINE).success());
}

#[test]
fn busy_metrics_address_does_not_delay_the_kubelet_and_is_retried() {
    let scene = Scene::new();
    let squatter = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = squatter.local_addr().expect("addr");
    let mut boot = supervisor(&scene, &["bootstrap"], addr);
    kubelet_of(&scene, &boot, &[]);
    wait_until(DEADLINE, "a warning about the busy address", || {
        scene
            .output()
            .contains("metrics address is in use")
            .then_some(())
    });
    drop(squatter);
    let m = wait_until(
        REBIND_DEADLINE,
        "metrics served once the address is free",
        || scrape(addr).ok(),
    );
    assert_eq!(m.value(&format!("kubelet_pivot_holding{{{BOOT}}}")), 1.0);
    boot.signal(Signal::SIGTERM);
    assert!(boot.wait_exit(DEADLINE).success());
}

#[test]
fn unusable_metrics_address_fails_before_anything_starts() {
    let scene = Scene::new();
    // TEST-NET-1 is never a local address: bind fails with EADDRNOTAVAIL.
    let mut p = scene.spawn(scene.pivot(
        &["bootstrap", "--metrics-address", "192.0.2.1:9641"],
        &[],
        &[],
    ));
    let status = p.wait_exit(DEADLINE);
    assert_eq!(status.code(), Some(1), "{}", scene.output());
    let out = scene.output();
    assert!(
        out.contains("cannot serve metrics on --metrics-address 192.0.2.1:9641"),
        "{out}"
    );
    assert!(scene.starts().is_empty(), "a kubelet started: {out}");

    let mut p =
        scene.spawn(scene.pivot(&["bootstrap", "--metrics-address", "localhost"], &[], &[]));
    assert_eq!(p.wait_exit(DEADLINE).code(), Some(2), "{}", scene.output());
    assert!(
        scene.output().contains("--metrics-address"),
        "{}",
        scene.output()
    );
    assert!(scene.output().contains("has no port"), "{}", scene.output());
    let mut p = scene.spawn(scene.pivot(
        &["bootstrap", "--metrics-address", "metrics.invalid:9641"],
        &[],
        &[],
    ));
    assert_eq!(p.wait_exit(DEADLINE).code(), Some(2), "{}", scene.output());
    assert!(
        scene.output().contains("other host names are not resolved"),
        "{}",
        scene.output()
    );
    assert!(
        scene.starts().is_empty(),
        "a kubelet started: {}",
        scene.output()
    );
}
