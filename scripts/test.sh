#!/usr/bin/env bash
# The whole test suite: unit tests, integration tests (real binary, real
# processes, flock, inotify, signals, namespaces when root, the test API
# server and kubectl) and the chaos test with CHAOS_ITERATIONS (default 300)
# beside busy and fork loops (PIVOT_TEST_LOAD loops of each kind; the chaos
# test defaults to one per core). `cargo test` also builds the stand-in
# kubelet (an example target) that the integration tests run.
#
# Every test binary runs even after a failure (--no-fail-fast). The last
# lines name the failing tests, if any, and sum up every binary's results.
set -uo pipefail
cd "$(dirname "$0")/.."
export CHAOS_ITERATIONS="${CHAOS_ITERATIONS:-300}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --locked --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# libtest prints "test NAME ... FAILED" per failing test; a binary that
# failed without a test line (a crash, a build error) shows up in cargo's
# "error: N targets failed" list, kept as well.
failed=$(grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | sort -u)
targets=$(sed -n '/^error: [0-9]* targets\? failed:/,/^$/p' "$log" | grep -E '^ +`' || true)
if [ -n "$failed" ] || [ -n "$targets" ]; then
    echo
    echo "failing tests:"
    [ -n "$failed" ] && printf '%s\n' "$failed" | sed 's/^/    /'
    [ -n "$targets" ] && printf '%s\n' "$targets"
fi
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
