#!/usr/bin/env python3
"""A locked file moved over a holder's lock file, N times: how long until the holder logs its
reaction ("killing our kubelet at once") and until its kubelet is dead (a zombie counts).

usage: scripts/measure-replacement-reaction.py BIN STANDIN N
  BIN     kubelet-pivot (e.g. target/debug/kubelet-pivot)
  STANDIN the stand-in kubelet (target/debug/examples/stand_in_kubelet)
  OPEN_FIRST=1  open the lock file 3 times, 50 ms apart, before each mv (the holder then
                re-checks for a contender while the replacement comes)
Run it beside load: ../shared/tools/under-load -n 1 -- scripts/measure-replacement-reaction.py ...
Runs that took over 200 ms keep their directory (printed) for the holder's log."""
import os, sys, time, fcntl, subprocess, tempfile, shutil, signal, re, datetime
bin_, standin, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def state(pid):
    try:
        s = open(f"/proc/{pid}/stat").read()
        return s[s.rindex(")") + 2]
    except (FileNotFoundError, ProcessLookupError):
        return None
react, death = [], []
for i in range(n):
    d = tempfile.mkdtemp(prefix="mvr-")
    os.makedirs(d + "/lock")
    env = dict(os.environ, RUST_LOG="info", STANDIN_LOG=d + "/standin.log")
    env.pop("NOTIFY_SOCKET", None)
    out = open(d + "/out", "w")
    p = subprocess.Popen([bin_, "bootstrap", "--lock-file", d + "/lock/kubelet.lock",
                          "--dynamic-config-dir", d + "/dc", "--", standin],
                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                         start_new_session=True)
    kub = None; t0 = time.monotonic()
    while time.monotonic() - t0 < 10 and kub is None:
        m = re.search(r"started kubelet pid=(\d+)", open(d + "/out").read())
        if m: kub = int(m.group(1))
        else: time.sleep(0.01)
    time.sleep(0.2)
    if os.environ.get("OPEN_FIRST"):
        for _ in range(3):
            open(d + "/lock/kubelet.lock").close(); time.sleep(0.05)
    rep = d + "/lock/kubelet.replacement"
    f = open(rep, "w"); fcntl.flock(f, fcntl.LOCK_EX)
    wall = time.time(); mono = time.monotonic()
    os.rename(rep, d + "/lock/kubelet.lock")
    dead = None
    while time.monotonic() - mono < 5:
        if state(kub) in (None, "Z", "X"):
            dead = time.monotonic() - mono; break
        time.sleep(0.0005)
    time.sleep(0.3)
    log = open(d + "/out").read()
    m = re.search(r"^(\S+)Z .*killing our kubelet at once", log, re.M)
    m0 = re.search(r"^(\S+)Z .*deleted or replaced while we hold it", log, re.M)
    r0 = None
    if m0:
        r0 = datetime.datetime.fromisoformat(m0.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp() - wall
    r = None
    if m:
        ts = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
        r = ts - wall
    react.append(r); death.append(dead)
    print(f"{i}: first line {r0*1e3 if r0 is not None else -1:.1f} ms, reaction {r*1e3 if r is not None else None:.1f} ms, kubelet dead {dead*1e3 if dead else -1:.1f} ms", flush=True)
    os.killpg(p.pid, signal.SIGKILL); p.wait(); f.close()
    if dead is None or dead > 0.2:
        print(f"  slow: kept {d}", flush=True)
    else:
        shutil.rmtree(d, ignore_errors=True)
def pct(xs, q):
    xs = sorted(x for x in xs if x is not None); return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3 if xs else -1
print(f"reaction p50 {pct(react,.5):.1f} p99 {pct(react,.99):.1f} max {pct(react,1):.1f} ms; death p50 {pct(death,.5):.1f} p99 {pct(death,.99):.1f} max {pct(death,1):.1f} ms")
