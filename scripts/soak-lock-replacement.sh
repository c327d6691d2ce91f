#!/usr/bin/env bash
# Runs every lock-replacement test N times (default 200) under load: per core,
# a busy loop and a fork loop beside the tests (the shape of
# ../shared/tools/under-load, started here). Each test fails on any overlap
# (the stand-in's overlap probe and the background sampler), so a pass is a
# run with 0 overlaps. Prints one line per failure and a summary.
#
#   bash scripts/soak-lock-replacement.sh [N]
set -uo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
tests=(
    "bootstrap deleted_lock_file_is_recreated_and_relocked"
    "bootstrap waiter_on_a_deleted_lock_file_follows_the_recreated_one"
    "bad_day t1_mv_of_a_locked_file"
    "bad_day t2_rm_keeps_the_kubelet"
    "bad_day t8a_a_replaced_lock_file"
    "bootstrap a_polling_waiter_follows"
)
cargo test --locked --no-run --test it >/dev/null 2>&1 || {
    echo "soak: build failed" >&2
    exit 1
}
# The newest executable of the integration tests (not a .d file or an object).
bin() { ls -t target/debug/deps/ | grep -E "^it-[0-9a-f]{16}\$" | head -1 | sed 's|^|target/debug/deps/|'; }
loops=()
for _ in $(seq 1 "$(nproc)"); do
    sh -c 'while :; do :; done' & loops+=($!)
    sh -c 'while :; do /bin/true; done' & loops+=($!)
done
trap 'kill "${loops[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
log=$(mktemp)
declare -A pass fail
for i in $(seq 1 "$n"); do
    for t in "${tests[@]}"; do
        set -- $t
        if "$(bin)" "$1::$2" >"$log" 2>&1; then
            grep -q "1 passed" "$log" && pass[$2]=$(( ${pass[$2]:-0} + 1 )) || { fail[$2]=$(( ${fail[$2]:-0} + 1 )); echo "run $i: $2: no test ran"; }
        else
            fail[$2]=$(( ${fail[$2]:-0} + 1 ))
            echo "run $i: $2 FAILED: $(grep -m1 -A2 'panicked at' "$log" | tr '\n' ' ' | cut -c1-400)"
            cp "$log" "/tmp/soak-fail-$i-$2.log"
        fi
    done
done
rm -f "$log"
for t in "${tests[@]}"; do
    set -- $t
    echo "soak: $2: ${pass[$2]:-0} passed, ${fail[$2]:-0} failed of $n (under load: $(nproc) busy + $(nproc) fork loops)"
done
