# shellcheck shell=bash
# Sourced by scripts/build-baseline.sh and scripts/build-before.sh: builds the
# kubelet-pivot binary of a commit pinned in a file, in the workspace's own
# target directory, so that the dependencies the workspace has built already
# (same Cargo.lock, same profile) are reused and only the kubelet-pivot crate
# itself is compiled.
#
#   build_pinned NAME DIR PIN_FILE PROFILE REBUILD
#
# NAME: the script's name in messages. DIR: the binary's directory in the
# target directory (TARGET/DIR/kubelet-pivot-COMMIT). PIN_FILE: the last line that is not a
# comment is a full 40-digit commit hash. PROFILE: debug or release. REBUILD:
# non-empty rebuilds a binary that exists already (else it is reused).
# Prints the binary's path on stdout (the last line); everything else goes to
# stderr. The commit is exported with `git archive` (a temporary source tree,
# not a worktree registered in the clone) and removed after the build.
#
# Needs the commit in this clone. A shallow clone without it gets one
# `git fetch --depth=1 origin COMMIT` (a single commit, not the history); if
# that fails too, it says so and exits 1.

build_pinned() {
    local name=$1 dir=$2 pin_file=$3 profile=$4 rebuild=$5
    local root
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    cd "$root" || exit 1

    die() {
        echo "$name: error: $*" >&2
        exit 1
    }

    local commit
    commit=$(grep -v '^[[:space:]]*#' "$pin_file" | tr -d '[:space:]' | tail -c 40)
    [[ "$commit" =~ ^[0-9a-f]{40}$ ]] \
        || die "$pin_file must end with a full 40-digit commit hash, found '$commit'"

    local profile_flag=()
    case "$profile" in
        debug) ;;
        release) profile_flag=(--release) ;;
        *) die "unknown profile '$profile' (debug or release)" ;;
    esac

    local target=${CARGO_TARGET_DIR:-$root/target}
    case "$target" in /*) ;; *) target=$root/$target ;; esac
    local out_dir=$target/$dir
    local bin=$out_dir/kubelet-pivot-$commit
    if [ -x "$bin" ] && [ -z "$rebuild" ]; then
        echo "$name: reusing $bin" >&2
        echo "$bin"
        return 0
    fi

    if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
        local shallow
        shallow=$(git rev-parse --is-shallow-repository 2>/dev/null || echo unknown)
        echo "$name: commit $commit is not in this clone (shallow: $shallow); fetching that one commit" >&2
        git fetch --quiet --depth=1 origin "$commit" >&2 \
            || die "cannot fetch commit $commit (shallow clone: $shallow). Clone with history \
(git clone without --depth), or fetch it: git fetch --depth=1 origin $commit"
        git cat-file -e "$commit^{commit}" 2>/dev/null \
            || die "commit $commit still missing after the fetch"
    fi

    mkdir -p "$out_dir"
    # A fixed source path: cargo's hashes of the pinned crate depend on it, so
    # a rebuild reuses what the last one compiled.
    local src=$out_dir/src-$commit
    rm -rf "$src"
    mkdir -p "$src"
    git archive "$commit" | tar -x -C "$src"

    # The pinned build links its binary to TARGET/PROFILE/kubelet-pivot, the
    # workspace's own: keep a hard link to ours and put it back afterwards
    # (cargo links it again on its next build anyway).
    _pinned_current=$target/$profile/kubelet-pivot
    _pinned_saved=$out_dir/.current-kubelet-pivot.$$
    _pinned_restore() {
        if [ -e "$_pinned_saved" ]; then
            ln -f "$_pinned_saved" "$_pinned_current"
            rm -f "$_pinned_saved"
        fi
    }
    trap _pinned_restore EXIT
    if [ -e "$_pinned_current" ]; then
        ln -f "$_pinned_current" "$_pinned_saved"
    fi

    local started
    started=$(date +%s)
    # CARGO_INCREMENTAL=0: built once, so no incremental cache (dependencies
    # are never incremental, so their reuse is unaffected). The commit is given
    # to a build.rs that would otherwise ask git (the export has no .git).
    CARGO_TARGET_DIR=$target CARGO_INCREMENTAL=0 KUBELET_PIVOT_GIT_COMMIT=$commit \
        cargo build --locked "${profile_flag[@]}" --manifest-path "$src/Cargo.toml" \
        -p kubelet-pivot --bin kubelet-pivot >&2
    cp "$_pinned_current" "$bin.tmp"
    mv "$bin.tmp" "$bin"
    _pinned_restore
    rm -rf "$src"
    echo "$name: built $commit ($profile) in $(( $(date +%s) - started )) s: $bin" >&2
    echo "$bin"
}
