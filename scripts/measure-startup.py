#!/usr/bin/env python3
"""Start-up time of `kubelet-pivot bootstrap`: from its exec to the kubelet's.

    scripts/measure-startup.py [--runs N] LABEL=BINARY... [--stand-in PATH]

Each run starts `BINARY bootstrap -- STAND_IN` in a fresh temp directory (its
own lock file, config and state directories, no API server) through
`bash -c 'record $EPOCHREALTIME; exec BINARY ...'`, so the first timestamp is
taken just before the exec, with no fork in between. The stand-in kubelet
(examples/stand_in_kubelet/, STANDIN_LOG) writes `t=<unix_ns>` on its
`start` line: the time it was exec'd by kubelet-pivot. The figure is the
difference; then kubelet-pivot is stopped (SIGTERM) and waited for.

The binaries take turns run by run, so load from elsewhere falls on all of
them alike. Two modes per run: "warm" (the binary's pages in the page cache,
as for a restart) and "cold" (its pages dropped with posix_fadvise
DONTNEED first, as at boot; only that file's pages, nothing else's).
Prints p50, p90, p99 and max per binary and mode, in ms.
"""
import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def one_run(binary, stand_in):
    with tempfile.TemporaryDirectory(prefix="kubelet-pivot-startup.") as tmp:
        log = os.path.join(tmp, "kubelet.log")
        t0_file = os.path.join(tmp, "t0")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBELET_PIVOT_", "STANDIN_"))}
        env.pop("NOTIFY_SOCKET", None)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        env.update(STANDIN_LOG=log, RUST_LOG=env.get("RUST_LOG", "info"))
        cmd = [
            "bash", "-c", 'printf %s "$EPOCHREALTIME" >"$0"; exec "$@"', t0_file,
            binary, "bootstrap",
            "--lock-file", os.path.join(tmp, "lock", "kubelet.lock"),
            "--dynamic-config-dir", os.path.join(tmp, "config"),
            "--kubelet-root-dir", os.path.join(tmp, "kubelet"),
            "--node-name", "startup-bench",
            "--", stand_in,
        ]
        with open(os.path.join(tmp, "pivot.err"), "wb") as err:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        try:
            deadline = time.monotonic() + 20
            start = None
            while start is None:
                if proc.poll() is not None:
                    sys.exit("kubelet-pivot exited %s before the kubelet started:\n%s"
                             % (proc.returncode, open(os.path.join(tmp, "pivot.err")).read()))
                if time.monotonic() > deadline:
                    sys.exit("no kubelet start within 20 s")
                if os.path.exists(log):
                    for line in open(log):
                        if line.startswith("start "):
                            start = line
                            break
                if start is None:
                    time.sleep(0.002)
            t_kubelet = int(next(f[2:] for f in start.split() if f.startswith("t=")))
            s, _, us = open(t0_file).read().strip().partition(".")
            t_exec = int(s) * 10**9 + int(us.ljust(6, "0")) * 1000
            return (t_kubelet - t_exec) / 1e6
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def pct(sorted_ms, p):
    """Nearest-rank percentile (p99 of 25 runs is the largest)."""
    return sorted_ms[max(0, math.ceil(p / 100 * len(sorted_ms)) - 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+", metavar="LABEL=BINARY")
    ap.add_argument("--runs", type=int, default=25)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "..", "target"))
    ap.add_argument("--stand-in", default=os.path.join(target, "debug", "examples", "stand_in_kubelet"))
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in args.binaries]
    if not os.access(args.stand_in, os.X_OK):
        sys.exit("no stand-in kubelet at %s: cargo build --examples" % args.stand_in)
    results = {(label, mode): [] for label, _ in bins for mode in ("warm", "cold")}
    for label, path in bins:  # one untimed run each: the stand-in's pages too
        one_run(path, args.stand_in)
    for _ in range(args.runs):
        for label, path in bins:
            results[(label, "warm")].append(one_run(path, args.stand_in))
            drop_cache(path)
            results[(label, "cold")].append(one_run(path, args.stand_in))
    print("exec of kubelet-pivot bootstrap -> exec of the kubelet, ms (%d runs each; load average %s)"
          % (args.runs, open("/proc/loadavg").read().split()[0]))
    print("%-12s %-5s %10s %7s %7s %7s %7s %7s" % ("binary", "mode", "size MB", "p50", "p90", "p99", "max", "mean"))
    for label, path in bins:
        for mode in ("warm", "cold"):
            ms = sorted(results[(label, mode)])
            print("%-12s %-5s %10.1f %7.1f %7.1f %7.1f %7.1f %7.1f" % (
                label, mode, os.path.getsize(path) / 1e6, pct(ms, 50), pct(ms, 90), pct(ms, 99),
                ms[-1], statistics.mean(ms)))


if __name__ == "__main__":
    main()
