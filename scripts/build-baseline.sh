#!/usr/bin/env bash
# Builds the baseline of the skew test (tests/it/skew.rs): the commit named in
# compat/baseline, exported with `git archive` and built with
# `cargo build --locked -p kubelet-pivot --bin kubelet-pivot` in the
# workspace's own target directory, so that the dependencies the workspace
# has built already (same Cargo.lock, same profile) are reused and only the
# kubelet-pivot crate itself is compiled. The binary is kept as
# TARGET/baseline/kubelet-pivot-COMMIT and its path printed on stdout (the
# last line); an existing one is reused (BASELINE_REBUILD=1 rebuilds it).
#
# Needs the commit in this clone. A shallow clone without it gets one
# `git fetch --depth=1 origin COMMIT` (a single commit, not the history); if
# that fails too, the script says so and exits 1: the skew test must fail
# then, never skip. The build itself: scripts/lib/build-pinned.sh.
set -euo pipefail
# shellcheck source=scripts/lib/build-pinned.sh
. "$(dirname "$0")/lib/build-pinned.sh"
build_pinned build-baseline baseline compat/baseline debug "${BASELINE_REBUILD:-}"
