//! Footprint of a supervisor on a node: resident memory, threads and CPU of a holding
//! `kubelet-pivot bootstrap` (release build, stand-in kubelet), idle and under Prometheus
//! scrapes of `--metrics-address`, and the scrape latency.
//!
//!     cargo build --release --examples && cargo bench --bench footprint
//!
//! Environment: FOOTPRINT_SCRAPES=N (default 2000). The baseline in the same run is the stand-in
//! kubelet, a minimal Rust process (one signal thread, a few open files), so the memory figure
//! reads as "what supervising costs over the smallest process that could do it".

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::bench::{cpu_ticks, fail, stand_in, stats, status_field};
use support::scrape;
use support::{wait_until, Scene};

fn main() {
    let scrapes: usize = std::env::var("FOOTPRINT_SCRAPES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    stand_in();
    let scene = Scene::new();
    let addr = scrape::free_addr();
    let addr_arg = addr.to_string();
    let mut pivot = scene.spawn(scene.pivot(
        &["bootstrap", "--metrics-address", &addr_arg],
        &[],
        &[("RUST_LOG", "warn")],
    ));
    let kubelet = wait_until(Duration::from_secs(10), "the kubelet", || {
        scene.running_kubelets().first().copied()
    });
    wait_until(Duration::from_secs(10), "the metrics endpoint", || {
        scrape::scrape(addr).ok()
    });
    // Let start-up allocations settle before reading the idle figures.
    std::thread::sleep(Duration::from_secs(1));
    let pid = pivot.pid();
    let idle_rss = status_field(pid, "VmRSS");
    let idle_threads = status_field(pid, "Threads");
    let kubelet_rss = status_field(kubelet, "VmRSS");
    let idle_ticks = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(5));
    let idle_cpu_ticks = cpu_ticks(pid) - idle_ticks;

    let ticks_before = cpu_ticks(pid);
    let started = Instant::now();
    let mut samples = Vec::with_capacity(scrapes);
    for _ in 0..scrapes {
        let t = Instant::now();
        let m = scrape::scrape(addr).unwrap_or_else(|err| fail(&format!("scrape: {err}")));
        samples.push(t.elapsed().as_secs_f64() * 1e3);
        if m.get("kubelet_pivot_kubelet_running") != Some(1.0) {
            fail("the kubelet stopped during the scrapes");
        }
    }
    let wall = started.elapsed();
    let scrape_ticks = cpu_ticks(pid) - ticks_before;
    let busy_rss = status_field(pid, "VmRSS");
    let hwm = status_field(pid, "VmHWM");
    let busy_threads = status_field(pid, "Threads");
    let tick_ms = 1000.0
        / nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as f64;
    let s = stats(&samples);

    println!("footprint: holding kubelet-pivot bootstrap (release), stand-in kubelet");
    println!(
        "  RSS idle          {idle_rss} kB ({:.1}x the stand-in kubelet's {kubelet_rss} kB), {idle_threads} threads",
        idle_rss as f64 / kubelet_rss as f64
    );
    println!(
        "  CPU idle          {:.1} ms over 5 s",
        idle_cpu_ticks as f64 * tick_ms
    );
    println!(
        "  scrapes           {scrapes} in {:.2} s: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        wall.as_secs_f64(),
        s.p50,
        s.p99,
        s.max
    );
    println!(
        "  CPU per scrape    {:.3} ms (supervisor side)",
        scrape_ticks as f64 * tick_ms / scrapes as f64
    );
    println!("  RSS after scrapes {busy_rss} kB (peak {hwm} kB), {busy_threads} threads");
    pivot.signal(Signal::SIGTERM);
    if !pivot.wait_exit(Duration::from_secs(10)).success() {
        fail("kubelet-pivot did not exit cleanly");
    }
}
