#!/usr/bin/env bash
# A local demo of kubelet-pivot's whole mission with the stand-in kubelet
# (examples/stand_in_kubelet/):
#   1. the pivot: bootstrap -> self-hosted takeover -> upgrade to a newer
#      generation -> fallback;
#   2. the config workflow with the real kubectl against the local test API
#      server (testkit's kubelet-pivot-test-apiserver): an immutable ConfigMap
#      assigned to the Node restarts the kubelet with it (KubeletConfigOK True),
#      a broken config is refused (False, last-known-good keeps running), a
#      crash-looping config is rolled back; `kubelet-pivot status` shows it.
# Needs no cluster and no root; everything lives in a temp directory, and every
# process is stopped and the directory removed on exit (also on Ctrl-C).
# KEEP=1 keeps the directory. It needs python3 and kubectl (Debian:
# kubernetes-client): scripts/deps.sh installs them when run as root, and
# otherwise names them and the command that installs them (then the demo does
# not start).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh demo || { echo "demo: python3 and kubectl are needed for both parts (see above)" >&2; exit 1; }

cargo build --quiet --bin kubelet-pivot --examples
cargo build --quiet -p testkit --bin kubelet-pivot-test-apiserver
# cargo's target directory: CARGO_TARGET_DIR (relative to here) if set.
TARGET=${CARGO_TARGET_DIR:-target}
case $TARGET in /*) ;; *) TARGET=$PWD/$TARGET ;; esac
PIVOT=$TARGET/debug/kubelet-pivot
KUBELET=$TARGET/debug/examples/stand_in_kubelet
APISERVER=$TARGET/debug/kubelet-pivot-test-apiserver

DIR=$(mktemp -d /tmp/kubelet-pivot-demo.XXXXXX)
LOCK=$DIR/lock/kubelet.lock
# kubelet-pivot creates only the default lock file's directory (a typo in
# --lock-file must not create a second lock): the node provides this one.
mkdir -m 0755 "$DIR/lock"
NODE=demo-node
KUBECONFIG_FILE=$DIR/kubeconfig
# The stand-in kubelet crashes 50 ms after start on a config that contains this.
CRASH_MARK=crashme.demo.example
export STANDIN_LOG=$DIR/kubelet.log STANDIN_OVERLAP_PROBE=$DIR/overlap.probe STANDIN_CRASH_ON_CONFIG=$CRASH_MARK
export KUBELET_PIVOT_LOCK_FILE=$LOCK KUBELET_PIVOT_DYNAMIC_CONFIG_DIR=$DIR/dynamic-config
export KUBELET_PIVOT_STOP_TIMEOUT=5s RUST_LOG=${RUST_LOG:-info}
export KUBELET_PIVOT_KUBECONFIG=$KUBECONFIG_FILE KUBELET_PIVOT_NODE_NAME=$NODE
PIDS=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 130 ] && [ "$rc" -ne 143 ] && [ -e "$DIR/bootstrap.err" ]; then
        echo "demo: failed (exit $rc); the bootstrap supervisor's log ends with:" >&2
        tail -n 20 "$DIR/bootstrap.err" >&2
        echo "demo: run with KEEP=1 to keep $DIR" >&2
    fi
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait "${PIDS[@]}" 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
holder() {
    "$PIVOT" status -o json | python3 -c '
import json,sys
h=json.load(sys.stdin)["lock"]["holder"]
print("holder: none" if not h else "holder: %s gen %d pid %d, kubelet pid %s%s" % (h["role"],h["generation"],h["pid"],h["kubeletPid"]," (stale)" if h["stale"] else ""))'
}
# Runs "$@" until it succeeds, every 0.1 s, for at most $WAIT_SECS (default 15) s.
wait_for() {
    local what=$1; shift
    local deadline=$((SECONDS + ${WAIT_SECS:-15}))
    until "$@" >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then echo "demo: timed out waiting for $what" >&2; return 1; fi
        sleep 0.1
    done
}
holder_matches() { holder | grep -q "$1"; }
# Waits until the holder line matches a pattern.
wait_holder() {
    if ! wait_for "holder matching '$1'" holder_matches "$1"; then holder; return 1; fi
    holder
}

# The node's API server: the local test API server, with the Node registered.
"$APISERVER" --node "$NODE" --kubeconfig "$KUBECONFIG_FILE" >"$DIR/apiserver.out" 2>&1 & PIDS+=($!)
wait_for "the test API server's kubeconfig" test -s "$KUBECONFIG_FILE"

say "PART 1: THE PIVOT. bootstrap (what systemd starts on the host) takes the lock and runs the host kubelet"
"$PIVOT" bootstrap -- "$KUBELET" 2>"$DIR/bootstrap.err" & PIDS+=($!)
wait_holder "bootstrap gen 0 pid [0-9]*, kubelet pid [0-9]"

say "an operator's cat of the lock file does NOT cause a handoff (verified contention)"
cat "$LOCK" >/dev/null; sleep 0.3; holder

say "the DaemonSet delivers self-hosted generation 1: the bootstrap yields to it"
"$PIVOT" self-hosted --generation 1 -- "$KUBELET" 2>"$DIR/gen1.err" & GEN1=$!; PIDS+=("$GEN1")
wait_holder "self-hosted gen 1 pid $GEN1, kubelet pid [0-9]"

say "upgrade: generation 2 arrives while generation 1 still runs: 2 wins"
"$PIVOT" self-hosted --generation 2 -- "$KUBELET" 2>"$DIR/gen2.err" & GEN2=$!; PIDS+=("$GEN2")
wait_holder "self-hosted gen 2 pid $GEN2, kubelet pid [0-9]"
"$PIVOT" status

say "generation 1's pod is deleted (SIGTERM): nothing changes, 2 keeps the lock"
kill -TERM "$GEN1"; wait "$GEN1" || true; holder

say "generation 2 is killed hard (kill -9): the bootstrap takes over again"
kill -KILL "$GEN2"; wait "$GEN2" 2>/dev/null || true
wait_holder "bootstrap gen 0 pid [0-9]*, kubelet pid [0-9]"

if [ -e "$STANDIN_OVERLAP_PROBE.overlap" ]; then echo "OVERLAP DETECTED"; exit 1; fi
say "never two kubelets at once (the overlap probe never fired)"

# kubectl against the test API server, its discovery cache in the temp dir.
k() { kubectl --kubeconfig "$KUBECONFIG_FILE" --cache-dir "$DIR/kubectl-cache" "$@"; }
# Shows a kubectl command, runs it and indents its output.
kc() { printf '  $ kubectl %s\n' "$*"; k "$@" 2>&1 | sed 's/^/    /'; }
condition() { k get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="KubeletConfigOK")].'"$1"'}'; }
condition_is() { [ "$(condition status)" = "$1" ] && condition "$2" | grep -q -- "$3"; }
show_condition() {
    kc get node "$NODE" -o jsonpath='{range .status.conditions[?(@.type=="KubeletConfigOK")]}KubeletConfigOK={.status} reason="{.reason}" message="{.message}"{"\n"}{end}'
}
kubelet_pid() { "$PIVOT" status -o json | python3 -c 'import json,sys; h=json.load(sys.stdin)["lock"]["holder"]; print(h["kubeletPid"] if h and h["kubeletPid"] else "")'; }
# The --config file of the running kubelet (from the stand-in's last start line of that pid).
kubelet_config() {
    local pid; pid=$(kubelet_pid)
    awk -v pid="pid=$pid" '$1 == "start" && $3 == pid { for (i = 4; i <= NF; i++) if ($i ~ /^config=/) f = substr($i, 8) } END { print f }' "$STANDIN_LOG"
}
kubelet_runs_with() { grep -q -- "$1" "$(kubelet_config)"; }
lkg_is() {
    "$PIVOT" status -o json | python3 -c 'import json,sys; c=json.load(sys.stdin)["config"]; sys.exit(0 if (c.get("lastKnownGood") or {}).get("uid") == sys.argv[1] else 1)' "$1"
}
# The effective config the kubelet got is JSON: show the fields the demo changes.
show_kubelet() {
    printf '  kubelet pid %s runs with: %s\n' "$(kubelet_pid)" "$(python3 -c '
import json,sys
c=json.load(open(sys.argv[1]))
print(" ".join("%s=%s" % (k, c[k]) for k in ("eventBurst","port","staticPodURL") if k in c))' "$(kubelet_config)")"
}
# Creates ConfigMap NAME in kubelet-config from FILE (key kubelet), makes it immutable; prints its UID.
publish() {
    kc create configmap "$1" -n kubelet-config --from-file=kubelet="$2" >&2
    kc patch configmap "$1" -n kubelet-config -p '{"immutable":true}' >&2
    k get configmap "$1" -n kubelet-config -o jsonpath='{.metadata.uid}'
}
assign() { kc annotate --overwrite node "$NODE" "kubelet-pivot.io/config-source=kubelet-config/$1"; }
kubelet_yaml() { printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n%s' "$1" >"$DIR/$2"; }

say "PART 2: THE CONFIG WORKFLOW with kubectl against the local test API server ($(head -1 "$DIR/apiserver.out" | awk '{print $2}'))"
kc get nodes
holder; show_kubelet

say "publish an immutable ConfigMap from a file and assign it to the node: the kubelet restarts with it"
kubelet_yaml 'eventBurst: 55
configTrialDuration: 2s
' good.yaml
GOOD=$(publish demo-good "$DIR/good.yaml")
BEFORE=$(kubelet_pid)
assign demo-good
wait_for "KubeletConfigOK True for demo-good" condition_is True message "$GOOD"
wait_for "a kubelet running demo-good" kubelet_runs_with '"eventBurst":55'
show_condition
show_kubelet
[ "$(kubelet_pid)" != "$BEFORE" ] || { echo "demo: the kubelet was not restarted" >&2; exit 1; }
wait_for "demo-good to survive its 2 s trial and become last-known-good" lkg_is "$GOOD"
echo "  demo-good survived its trial: it is the last-known-good config now"

say "assign a broken config (port: 70000): refused, KubeletConfigOK False, last-known-good keeps running"
kubelet_yaml 'eventBurst: 77
port: 70000
' broken.yaml
publish demo-broken "$DIR/broken.yaml" >/dev/null
BEFORE=$(kubelet_pid)
assign demo-broken
wait_for "KubeletConfigOK False for demo-broken" condition_is False message "last-known-good"
show_condition
show_kubelet
[ "$(kubelet_pid)" = "$BEFORE" ] || { echo "demo: the kubelet was restarted for a broken config" >&2; exit 1; }
echo "  same kubelet pid $BEFORE: the broken config never reached a kubelet"

say "assign a config that crash-loops the kubelet (crashLoopThreshold: 1): it is rolled back to last-known-good"
kubelet_yaml "eventBurst: 66
staticPodURL: http://$CRASH_MARK/
crashLoopThreshold: 1
configTrialDuration: 1m
" crash.yaml
publish demo-crash "$DIR/crash.yaml" >/dev/null
CRASHES=$(grep -c '^crash ' "$STANDIN_LOG" || true)
assign demo-crash
wait_for "KubeletConfigOK False after the crash loop" condition_is False reason "crash loop"
wait_for "a kubelet running last-known-good again" kubelet_runs_with '"eventBurst":55'
show_condition
echo "  the stand-in kubelet crashed $(( $(grep -c '^crash ' "$STANDIN_LOG") - CRASHES )) times on demo-crash"
show_kubelet

say "kubelet-pivot status shows it all: holder, active config, assigned, last-known-good, the error, the bad configs"
"$PIVOT" status | sed 's/^/  /'
kc get events --field-selector involvedObject.name="$NODE" --sort-by=.metadata.resourceVersion \
    -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message

say "kubelet lifecycle as logged by the stand-in kubelet (start/stop/crash per kubelet pid)"
awk '{print "  " $1, $3, $4}' "$STANDIN_LOG"
if [ -e "$STANDIN_OVERLAP_PROBE.overlap" ]; then echo "OVERLAP DETECTED"; exit 1; fi
say "never two kubelets at once, every config change followed and reported. Demo done."
