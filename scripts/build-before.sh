#!/usr/bin/env bash
# Builds the "before" build of the idle bench (benches/idle.rs): the release
# binary of the commit pinned in benches/before-commit (main before issue 23),
# exported with `git archive` and built with `cargo build --locked --release
# -p kubelet-pivot --bin kubelet-pivot` in the workspace's own target
# directory (CARGO_TARGET_DIR, else target/), so that the release
# dependencies `cargo bench` built are reused and only the kubelet-pivot
# crate is compiled; the workspace's own target/release/kubelet-pivot is put
# back afterwards. The binary is kept as TARGET/before/kubelet-pivot-COMMIT
# and its path printed on stdout (the last line); an existing one is reused
# (BEFORE_REBUILD=1 rebuilds it).
#
#   cargo build --release --examples
#   PIVOT_BEFORE_BIN=$(bash scripts/build-before.sh) cargo bench --bench idle
#
# The build itself: scripts/lib/build-pinned.sh (shared with
# scripts/build-baseline.sh).
set -euo pipefail
# shellcheck source=scripts/lib/build-pinned.sh
. "$(dirname "$0")/lib/build-pinned.sh"
build_pinned build-before before benches/before-commit release "${BEFORE_REBUILD:-}"
