#!/usr/bin/env bash
# Builds the baseline of the skew test (tests/skew.rs): the commit named in
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
# then, never skip.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

die() {
    echo "build-baseline: error: $*" >&2
    exit 1
}

commit=$(grep -v '^[[:space:]]*#' compat/baseline | tr -d '[:space:]' | tail -c 40)
[[ "$commit" =~ ^[0-9a-f]{40}$ ]] \
    || die "compat/baseline must end with a full 40-digit commit hash, found '$commit'"

target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target=$root/$target ;; esac
out_dir=$target/baseline
bin=$out_dir/kubelet-pivot-$commit
if [ -x "$bin" ] && [ -z "${BASELINE_REBUILD:-}" ]; then
    echo "build-baseline: reusing $bin" >&2
    echo "$bin"
    exit 0
fi

if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
    shallow=$(git rev-parse --is-shallow-repository 2>/dev/null || echo unknown)
    echo "build-baseline: commit $commit is not in this clone (shallow: $shallow); fetching that one commit" >&2
    git fetch --quiet --depth=1 origin "$commit" >&2 \
        || die "cannot fetch baseline commit $commit (shallow clone: $shallow). Clone with history \
(git clone without --depth), or fetch it: git fetch --depth=1 origin $commit"
    git cat-file -e "$commit^{commit}" 2>/dev/null \
        || die "baseline commit $commit still missing after the fetch"
fi

mkdir -p "$out_dir"
# A fixed source path: cargo's hashes of the baseline crate depend on it, so a
# rebuild reuses what the last one compiled.
src=$out_dir/src-$commit
rm -rf "$src"
mkdir -p "$src"
git archive "$commit" | tar -x -C "$src"

# The baseline's build links its binary to TARGET/debug/kubelet-pivot, the
# workspace's own: keep a hard link to ours and put it back afterwards
# (cargo links it again on its next build anyway).
current=$target/debug/kubelet-pivot
saved=$out_dir/.current-kubelet-pivot.$$
restore() {
    if [ -e "$saved" ]; then
        ln -f "$saved" "$current"
        rm -f "$saved"
    fi
}
trap restore EXIT
if [ -e "$current" ]; then
    ln -f "$current" "$saved"
fi

started=$(date +%s)
# CARGO_INCREMENTAL=0: built once, so no incremental cache (dependencies are
# never incremental, so their reuse is unaffected). The commit is given to a
# build.rs that would otherwise ask git (the export has no .git).
CARGO_TARGET_DIR=$target CARGO_INCREMENTAL=0 KUBELET_PIVOT_GIT_COMMIT=$commit \
    cargo build --locked --manifest-path "$src/Cargo.toml" -p kubelet-pivot --bin kubelet-pivot >&2
cp "$current" "$bin.tmp"
mv "$bin.tmp" "$bin"
restore
rm -rf "$src"
echo "build-baseline: built $commit in $(( $(date +%s) - started )) s: $bin" >&2
echo "$bin"
