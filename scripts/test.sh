#!/usr/bin/env bash
# The whole test suite: unit tests, integration tests (real binary, real
# processes, flock, inotify, signals, namespaces when root) and the chaos
# test with CHAOS_ITERATIONS (default 300). `cargo test` also builds the
# stand-in kubelet (an example target) that the integration tests run.
set -euo pipefail
cd "$(dirname "$0")/.."
export CHAOS_ITERATIONS="${CHAOS_ITERATIONS:-300}"
cargo test --locked "$@"
