#!/usr/bin/env bash
# The whole test suite: unit tests, integration tests (real binary, real
# processes, flock, inotify, signals, namespaces when root, the test API
# server and kubectl) and the chaos test with CHAOS_ITERATIONS (default 300).
# `cargo test` also builds the stand-in kubelet (an example target) that the
# integration tests run. The last line sums up every test binary's results.
set -uo pipefail
cd "$(dirname "$0")/.."
export CHAOS_ITERATIONS="${CHAOS_ITERATIONS:-300}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --locked "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
