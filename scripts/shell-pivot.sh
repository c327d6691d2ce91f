#!/bin/sh
# shell-pivot.sh: the baseline that benches/handoff.rs compares kubelet-pivot with. It is the
# pivot a user would write from the background design (ARCHITECTURE.md, "Background") with util-linux `flock` and inotify-tools
# `inotifywait`:
#
#   shell-pivot.sh holder    LOCK -- KUBELET [ARGS...]
#       bootstrap: take LOCK, run KUBELET, and on any open of LOCK stop KUBELET and exit
#       (which releases LOCK); an init system would restart it to wait for the lock again.
#   shell-pivot.sh contender LOCK -- KUBELET [ARGS...]
#       self-hosted: open LOCK (the event the holder waits for), wait for it, exec KUBELET
#       (which keeps the lock for its life).
#
# SHELL_PIVOT_READY=FILE: the holder's inotifywait reports "Watches established." in FILE, so
# that a benchmark knows when the holder can see a contender.
#
# It keeps the background design's flaws on purpose (ARCHITECTURE.md, "Background", known flaws 1, 2 and 3): any open of
# the lock file makes the holder yield, and contenders race for flock. Do not run a node with it.
set -eu

usage() {
    echo "usage: $0 holder|contender LOCK -- KUBELET [ARGS...]" >&2
    exit 2
}

[ "$#" -ge 4 ] || usage
mode=$1
lock=$2
[ "$3" = "--" ] || usage
shift 3

case $mode in
holder)
    exec 9<>"$lock"
    flock 9
    "$@" &
    kubelet=$!
    inotifywait -e open "$lock" >/dev/null 2>"${SHELL_PIVOT_READY:-/dev/null}"
    kill -TERM "$kubelet"
    wait "$kubelet" || true
    # Exiting closes fd 9, the last descriptor of the lock: that releases it.
    exit 0
    ;;
contender)
    exec 9<>"$lock"
    flock 9
    exec "$@"
    ;;
*)
    usage
    ;;
esac
