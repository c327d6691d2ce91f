#!/usr/bin/env bash
# Installs kubelet-pivot on a host (or into a staging root): the binary, the
# systemd unit, the init config /etc/default/kubelet-pivot, and, when the
# binary can print them, its man pages and bash/zsh/fish completions.
# The binary is installed without its debug info and symbols (objcopy
# --strip-all, with a .gnu_debuglink to the split-off kubelet-pivot.debug, which --debug-symbols
# installs where gdb looks for it).
# `scripts/install.sh --help` for usage; docs/operator-guide.md ("Install on a node").
#
# The init config is a conffile, as dpkg treats one: a copy the operator
# changed is never overwritten without --force (which keeps a .bak),
# --uninstall keeps it, and a re-install keeps it. A debug build is installed
# only with --allow-debug; kubectl-pivot is a symlink to the binary.
# Re-running with the same inputs changes nothing. Every file is written to a
# temp file in its directory and renamed into place.
set -Eeuo pipefail
umask 022

readonly PROG=install.sh
readonly UNIT_NAME=kubelet-pivot.service
readonly KUBELET_UNIT=kubelet.service
# The prefix the stock unit's paths are written for.
readonly STOCK_PREFIX=/usr/local

EXIT_FAILURE=1
EXIT_USAGE=2
EXIT_CONFLICT=3

usage() {
    cat <<'EOF'
Usage: scripts/install.sh [OPTIONS]
       scripts/install.sh --uninstall [--prefix DIR] [--destdir DIR]

Installs kubelet-pivot:
  PREFIX/bin/kubelet-pivot                         the binary (0755), without its debug info
  PREFIX/bin/kubectl-pivot                         symlink to kubelet-pivot: the kubectl plugin
  PREFIX/bin/kubectl_complete-pivot                symlink to kubelet-pivot: `kubectl pivot <TAB>`
  UNITDIR/kubelet-pivot.service                    the systemd unit, paths rewritten for PREFIX
                                                   (UNITDIR: /usr/lib/systemd/system for --prefix /usr,
                                                   /etc/systemd/system otherwise)
  /etc/default/kubelet-pivot                       init config (0644), a conffile
  PREFIX/share/man/man1/kubelet-pivot*.1           man pages      } if the binary
  PREFIX/share/bash-completion/completions/...     completions    } prints them
  PREFIX/share/zsh/site-functions/_kubelet-pivot
  PREFIX/share/fish/vendor_completions.d/kubelet-pivot.fish
  PREFIX/share/doc/kubelet-pivot/README.md
  PREFIX/share/kubelet-pivot/install-manifest      what was installed, with sha256 sums
  /usr/lib/debug/PREFIX/bin/kubelet-pivot.debug    the binary's debug info (0644), with --debug-symbols,
  /usr/lib/debug/.build-id/NN/N*.debug             and a link to it by the binary's build ID
every path below DESTDIR when that is set.

Options:
  --prefix DIR     installation prefix (default /usr/local)
  --destdir DIR    staging root, prepended to every path (default: $DESTDIR, else none)
  --binary FILE    the kubelet-pivot binary (default: target/release/kubelet-pivot
                   of this checkout)
  --allow-debug    install a debug build (a binary in a cargo 'debug' directory, e.g.
                   target/debug/kubelet-pivot, the default when there is no release
                   build): unoptimised, for development only; refused (exit 2) without it
  --config FILE    init config to install (default: systemd/kubelet-pivot.default)
  --force          replace the init config even if it was changed locally (the
                   changed file is kept as /etc/default/kubelet-pivot.bak, or .bak.N)
  --keep-config    keep the init config changed locally even though the config to
                   install changed too (dpkg's --force-confold); later runs keep it
                   quietly until the config to install changes again
  --debug-symbols  also install the binary's debug info, split off the binary, as
                   /usr/lib/debug/PREFIX/bin/kubelet-pivot.debug and by build ID in
                   /usr/lib/debug/.build-id/ (gdb and Rust's backtraces find it
                   there; for a crash's backtrace with functions, files and lines)
  --enable         enable the unit (WantedBy= symlinks); without DESTDIR on a running
                   systemd also start it (systemctl enable --now). Never done otherwise.
  --uninstall      remove what was installed (a changed init config is kept)
  -h, --help       this text

The binary is installed stripped (objcopy --strip-all: no .debug_* sections,
no symbol table; a panic still names its file and line, but its backtrace
needs the debug file): objcopy and readelf (binutils; OBJCOPY and READELF name
others, e.g. a cross binutils) split the debug info and symbols off into
kubelet-pivot.debug, and the binary gets a .gnu_debuglink to it, which gdb
and Rust's own backtraces follow. A binary without debug info is installed
as it is. Without objcopy or readelf
the binary is installed as it is, debug info and all, with a warning
(--debug-symbols then fails with exit 2).

The init config is a conffile, as dpkg treats one: one changed locally is kept
as long as the config to install is the one installed last time; if both
changed, install.sh refuses (exit 3) unless --force or --keep-config. One that
no install on record wrote (kept by --uninstall, or written by other means) is
the operator's and is kept, with a note naming the config to compare it with. The unit is overwritten: customise it with
drop-ins (systemctl edit kubelet-pivot). Uninstall with the same --prefix and
--destdir as the install. Without DESTDIR and with systemd running,
`systemctl daemon-reload` follows a change of the unit (and uninstall disables
the unit, but never stops it); with DESTDIR, systemctl is never run.

A warning (exit status unchanged) says when the node's own kubelet.service is
enabled and not masked: the unit conflicts with it (docs/operator-guide.md,
"Moving a kubeadm node over").

Exit status: 0 done (also when nothing changed), 1 an install step failed,
2 bad usage, a missing input file (or tool), or a debug build without --allow-debug,
3 refused: the init config was changed locally and the new one differs too
(re-run with --keep-config to keep yours, or --force to replace it).
EOF
}

say() { printf '%s\n' "$*"; }
warn() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
    local code=$1
    shift
    warn "error: $*"
    exit "$code"
}
# shellcheck disable=SC2154 # rc is assigned inside the trap
trap 'rc=$?; warn "error: command failed (exit $rc) at line $LINENO: $BASH_COMMAND"; exit $EXIT_FAILURE' ERR

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(dirname "$script_dir")

prefix=/usr/local
destdir=${DESTDIR:-}
binary=
config=
force=0
keep_config=0
allow_debug=0
enable=0
uninstall=0
debug_symbols=0
OBJCOPY=${OBJCOPY:-objcopy}
READELF=${READELF:-readelf}

need_value() {
    if [ "$#" -lt 2 ] || [ -z "$2" ]; then
        die $EXIT_USAGE "$1 needs a value (see --help)"
    fi
}

while [ "$#" -gt 0 ]; do
    case $1 in
    --prefix) need_value "$@"; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --destdir) need_value "$@"; destdir=$2; shift 2 ;;
    --destdir=*) destdir=${1#*=}; shift ;;
    --binary) need_value "$@"; binary=$2; shift 2 ;;
    --binary=*) binary=${1#*=}; shift ;;
    --config) need_value "$@"; config=$2; shift 2 ;;
    --config=*) config=${1#*=}; shift ;;
    --force) force=1; shift ;;
    --keep-config) keep_config=1; shift ;;
    --allow-debug) allow_debug=1; shift ;;
    --enable) enable=1; shift ;;
    --debug-symbols) debug_symbols=1; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die $EXIT_USAGE "unknown argument '$1' (see --help)" ;;
    esac
done

# The prefix ends up in sed expressions and the manifest: keep it plain.
case $prefix in
/*[!A-Za-z0-9._/+-]*) die $EXIT_USAGE "--prefix '$prefix' has characters other than A-Za-z0-9._/+-" ;;
/?*) ;;
*) die $EXIT_USAGE "--prefix must be an absolute path other than /, got '$prefix'" ;;
esac
while [ "${prefix%/}" != "$prefix" ]; do prefix=${prefix%/}; done
[ -n "$prefix" ] || die $EXIT_USAGE "--prefix must be an absolute path other than /"
while [ "${destdir%/}" != "$destdir" ]; do destdir=${destdir%/}; done
if [ -n "$destdir" ]; then
    case $destdir in
    /*) ;;
    *) destdir=$(pwd)/$destdir ;;
    esac
fi
[ "$uninstall" = 0 ] || [ "$enable" = 0 ] || die $EXIT_USAGE "--enable and --uninstall exclude each other"
[ "$force" = 0 ] || [ "$keep_config" = 0 ] || die $EXIT_USAGE "--force and --keep-config exclude each other"

# Target paths, as seen on the installed system (without DESTDIR).
bin_path=$prefix/bin/kubelet-pivot
# The same binary as a kubectl plugin: `kubectl pivot rollout ...`.
plugin_path=$(dirname "$bin_path")/kubectl-pivot
# kubectl (1.26+) completes `kubectl pivot <TAB>` by running kubectl_complete-pivot.
plugin_complete_path=$(dirname "$bin_path")/kubectl_complete-pivot
if [ "$prefix" = /usr ]; then
    unit_dir=/usr/lib/systemd/system
else
    unit_dir=/etc/systemd/system
fi
unit_path=$unit_dir/$UNIT_NAME
config_path=/etc/default/kubelet-pivot
share_dir=$prefix/share
man_dir=$share_dir/man/man1
doc_path=$share_dir/doc/kubelet-pivot/README.md
bash_completion=$share_dir/bash-completion/completions/kubelet-pivot
zsh_completion=$share_dir/zsh/site-functions/_kubelet-pivot
fish_completion=$share_dir/fish/vendor_completions.d/kubelet-pivot.fish
state_dir=$share_dir/kubelet-pivot
manifest_path=$state_dir/install-manifest
# The GNU debuglink convention: gdb looks for the binary's .gnu_debuglink name
# in the binary's directory below its debug-file-directory, /usr/lib/debug.
debug_root=/usr/lib/debug
debug_path=$debug_root$bin_path.debug

# Live system: no DESTDIR and systemd is the running init (sd_booted()).
live_systemd=0
if [ -z "$destdir" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    live_systemd=1
fi

changed=0
unchanged=0
work=$(mktemp -d "${TMPDIR:-/tmp}/kubelet-pivot-install.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

sha256_of() { sha256sum <"$1" | cut -d' ' -f1; }

# The sha256 the manifest records for PATH (target path), empty if none.
recorded_sha() {
    [ -f "$destdir$manifest_path" ] || return 0
    awk -v p="$1" '$2 == p { print $1; exit }' "$destdir$manifest_path"
}

# install_file SRC TARGET MODE: writes SRC to DESTDIR/TARGET with MODE unless
# it is already there with that content and mode; atomic (temp file + rename).
install_file() {
    local src=$1 target=$2 mode=$3
    local dest=$destdir$target
    if [ -d "$dest" ] && [ ! -L "$dest" ]; then
        die $EXIT_FAILURE "$dest is a directory, refusing to replace it"
    fi
    if [ -f "$dest" ] && [ ! -L "$dest" ] && cmp -s "$src" "$dest"; then
        if [ "$(stat -c %a "$dest")" = "${mode#0}" ]; then
            say "unchanged  $target"
            unchanged=$((unchanged + 1))
        else
            chmod "$mode" "$dest"
            say "mode       $target ($mode)"
            changed=$((changed + 1))
        fi
        return 0
    fi
    mkdir -p "$(dirname "$dest")"
    local tmp
    tmp=$(mktemp "$(dirname "$dest")/.$(basename "$dest").XXXXXX")
    if ! { cp "$src" "$tmp" && chmod "$mode" "$tmp" && mv -f "$tmp" "$dest"; }; then
        rm -f "$tmp"
        die $EXIT_FAILURE "cannot write $dest"
    fi
    say "installed  $target"
    changed=$((changed + 1))
}

# install_link LINK_TARGET TARGET: makes DESTDIR/TARGET a symlink to LINK_TARGET
# unless it is one already; atomic (temp link + rename).
install_link() {
    local to=$1 target=$2
    local dest=$destdir$target
    if [ -L "$dest" ] && [ "$(readlink "$dest")" = "$to" ]; then
        say "unchanged  $target"
        unchanged=$((unchanged + 1))
        return 0
    fi
    if [ -d "$dest" ] && [ ! -L "$dest" ]; then
        die $EXIT_FAILURE "$dest is a directory, refusing to replace it"
    fi
    mkdir -p "$(dirname "$dest")"
    local tmp
    tmp=$(dirname "$dest")/.$(basename "$dest").$$
    if ! { ln -sfn "$to" "$tmp" && mv -Tf "$tmp" "$dest"; }; then
        rm -f "$tmp"
        die $EXIT_FAILURE "cannot write $dest"
    fi
    say "installed  $target -> $to"
    changed=$((changed + 1))
}

# remove_file TARGET: removes DESTDIR/TARGET if it is there.
remove_file() {
    local dest=$destdir$1
    if [ -e "$dest" ] || [ -L "$dest" ]; then
        rm -f "$dest"
        say "removed    $1"
        changed=$((changed + 1))
    fi
}

# The directories below /usr/lib/debug that an install of the debug file
# made, once empty (/usr/lib/debug itself stays).
remove_empty_debug_dirs() {
    local dir
    for dir in "$destdir$debug_root"/.build-id/* "$destdir$debug_root/.build-id" "$destdir$(dirname "$debug_path")"; do
        while [ "$dir" != "$destdir$debug_root" ] && [ "$dir" != "$destdir" ] && [ -d "$dir" ] && rmdir "$dir" 2>/dev/null; do
            dir=$(dirname "$dir")
        done
    done
}

# The WantedBy= targets of a unit file.
wanted_by() {
    sed -n 's/^WantedBy=//p' "$1" | tr ' ' '\n' | sed '/^$/d'
}

do_uninstall() {
    local manifest=$destdir$manifest_path
    local -a targets=()
    local config_sha=
    if [ -f "$manifest" ]; then
        local sha path
        while read -r sha path; do
            [ -n "$path" ] || continue
            if [ "$path" = "$config_path" ]; then
                config_sha=$sha
            else
                targets+=("$path")
            fi
        done <"$manifest"
    else
        say "no install manifest at $manifest: removing the default file set"
        targets=("$bin_path" "$plugin_path" "$plugin_complete_path" "$unit_path" "$doc_path" "$bash_completion" "$zsh_completion" "$fish_completion" "$debug_path")
        local link
        for link in "$destdir$debug_root"/.build-id/*/*.debug; do
            if [ -L "$link" ] && [ "$(readlink -f "$link")" = "$(readlink -f "$destdir$debug_path")" ]; then
                targets+=("${link#"$destdir"}")
            fi
        done
        local page
        for page in "$destdir$man_dir"/kubelet-pivot.1 "$destdir$man_dir"/kubelet-pivot-*.1; do
            if [ -e "$page" ]; then
                targets+=("${page#"$destdir"}")
            fi
        done
        local shipped=${config:-$repo_dir/systemd/kubelet-pivot.default}
        if [ -f "$shipped" ]; then
            config_sha=$(sha256_of "$shipped")
        fi
    fi

    # Disable first: the WantedBy= symlinks point at the unit file.
    if [ "$live_systemd" = 1 ]; then
        if systemctl is-enabled --quiet "$UNIT_NAME" 2>/dev/null; then
            systemctl disable "$UNIT_NAME"
            changed=$((changed + 1))
        fi
        if systemctl is-active --quiet "$UNIT_NAME" 2>/dev/null; then
            warn "$UNIT_NAME is still running: 'systemctl stop $UNIT_NAME' stops it (and the bootstrap kubelet)"
        fi
    elif [ -f "$destdir$unit_path" ]; then
        local target
        for target in $(wanted_by "$destdir$unit_path"); do
            remove_file "/etc/systemd/system/$target.wants/$UNIT_NAME"
        done
    fi

    local path
    for path in "${targets[@]}"; do
        remove_file "$path"
    done

    local conf=$destdir$config_path
    if [ -e "$conf" ]; then
        if [ -n "$config_sha" ] && [ -f "$conf" ] && [ "$(sha256_of "$conf")" = "$config_sha" ]; then
            remove_file "$config_path"
        else
            say "kept       $config_path (changed since it was installed; remove it by hand if it is no longer needed)"
        fi
    fi
    remove_file "$manifest_path"
    rmdir "$destdir$state_dir" 2>/dev/null || true
    rmdir "$destdir$(dirname "$doc_path")" 2>/dev/null || true
    remove_empty_debug_dirs

    if [ "$live_systemd" = 1 ] && [ "$changed" -gt 0 ]; then
        systemctl daemon-reload
    fi
    say "uninstalled: $changed removed"
}

if [ "$uninstall" = 1 ]; then
    do_uninstall
    exit 0
fi

# ---- install: gather and check every input before writing anything ----

if [ -z "$binary" ]; then
    if [ -f "$repo_dir/target/release/kubelet-pivot" ]; then
        binary=$repo_dir/target/release/kubelet-pivot
    elif [ -f "$repo_dir/target/debug/kubelet-pivot" ] && [ "$allow_debug" = 1 ]; then
        binary=$repo_dir/target/debug/kubelet-pivot
    elif [ -f "$repo_dir/target/debug/kubelet-pivot" ]; then
        die $EXIT_USAGE "no release build at $repo_dir/target/release/kubelet-pivot, only a debug build ($repo_dir/target/debug/kubelet-pivot, unoptimised): run 'cargo build --release', or pass --allow-debug to install the debug build"
    else
        die $EXIT_USAGE "no binary at $repo_dir/target/release/kubelet-pivot: run 'cargo build --release' or pass --binary FILE"
    fi
fi
if [ ! -f "$binary" ] || [ ! -x "$binary" ]; then
    die $EXIT_USAGE "--binary $binary is not an executable file"
fi
# cargo writes the dev profile's builds to target/debug/ (target/TRIPLE/debug/
# when cross-compiling): an unoptimised binary, for development only.
if [ "$(basename "$(dirname "$(realpath "$binary")")")" = debug ] && [ "$allow_debug" = 0 ]; then
    die $EXIT_USAGE "$binary is a debug build (unoptimised, $(($(stat -c %s "$binary") / 1048576)) MiB): install a release build ('cargo build --release'), or pass --allow-debug to install it anyway"
fi
config=${config:-$repo_dir/systemd/kubelet-pivot.default}
[ -f "$config" ] || die $EXIT_USAGE "init config $config not found"
unit_src=$repo_dir/systemd/$UNIT_NAME
[ -f "$unit_src" ] || die $EXIT_USAGE "unit $unit_src not found"
readme_src=$repo_dir/README.md

# The unit, with the stock prefix's paths rewritten for ours.
grep -q "^ExecStart=$STOCK_PREFIX/bin/kubelet-pivot " "$unit_src" ||
    die $EXIT_USAGE "$unit_src: ExecStart= does not run $STOCK_PREFIX/bin/kubelet-pivot, cannot rewrite it for --prefix"
sed -e "s|$STOCK_PREFIX/bin/kubelet-pivot|$bin_path|g" \
    -e "s|$STOCK_PREFIX/share/doc/kubelet-pivot|$share_dir/doc/kubelet-pivot|g" \
    "$unit_src" >"$work/unit"

# The binary without its debug info ($work/kubelet-pivot) and the debug info
# ($work/kubelet-pivot.debug, the name the binary's .gnu_debuglink records,
# with its CRC). objcopy's output depends only on its input: a re-run with
# the same binary changes nothing.
installed_binary=$binary
debug_file=
if ! command -v "$OBJCOPY" >/dev/null || ! command -v "$READELF" >/dev/null; then
    [ "$debug_symbols" = 0 ] ||
        die $EXIT_USAGE "--debug-symbols needs $OBJCOPY and $READELF (Debian: apt-get install binutils) to split the debug info off $binary"
    warn "warning: $OBJCOPY or $READELF not found (Debian: apt-get install binutils): installing $binary as it is, with its debug info ($(($(stat -c %s "$binary") / 1048576)) MiB)"
elif ! sections=$("$READELF" -S -W "$binary" 2>/dev/null); then
    [ "$debug_symbols" = 0 ] || die $EXIT_USAGE "--debug-symbols: $READELF cannot read $binary as an ELF file"
    warn "warning: $READELF cannot read $binary as an ELF file: installing it as it is"
elif ! grep -qE '[[:space:]]\.z?debug_(info|line)[[:space:]]' <<<"$sections"; then
    [ "$debug_symbols" = 0 ] || warn "warning: $binary has no debug info: --debug-symbols installs nothing"
else
    debug_file=$work/kubelet-pivot.debug
    installed_binary=$work/kubelet-pivot
    if ! "$OBJCOPY" --only-keep-debug "$binary" "$debug_file" ||
        ! "$OBJCOPY" --strip-all --add-gnu-debuglink="$debug_file" "$binary" "$installed_binary"; then
        die $EXIT_FAILURE "$OBJCOPY cannot split the debug info off $binary (a binary for another architecture? set OBJCOPY and READELF to its binutils, e.g. OBJCOPY=aarch64-linux-gnu-objcopy)"
    fi
fi

# Man pages and completions, if this binary prints them (a binary for another
# architecture cannot run here: then they are skipped).
have_docs=0
if "$binary" man --help >/dev/null 2>&1 && "$binary" completions --help >/dev/null 2>&1; then
    mkdir "$work/man"
    "$binary" man --out-dir "$work/man" >/dev/null
    for shell in bash zsh fish; do
        "$binary" completions "$shell" >"$work/$shell"
    done
    have_docs=1
else
    say "note: $binary does not run here or has no 'man'/'completions' commands: skipping man pages and completions"
fi

# The init config is a conffile (as dpkg treats /etc): with cur = the file
# there, new = the one to install, old = the one a previous install wrote:
#   no file or cur = new   -> install / leave it
#   cur = old              -> not changed locally: replace with new
#   no old (no install on record: after --uninstall, or a file written by
#   other means)           -> the operator's file: keep cur (--force replaces it)
#   new = old              -> changed locally, nothing new shipped: keep cur
#   otherwise              -> conflict: refuse; --keep-config keeps cur,
#                             --force backs cur up and replaces it
# Whatever is kept, the manifest records new as old (dpkg does the same): a
# later run keeps cur quietly until the config to install changes again.
conf_dest=$destdir$config_path
conf_action=install
conf_backup=
new_sha=$(sha256_of "$config")
if [ -e "$conf_dest" ] || [ -L "$conf_dest" ]; then
    [ -f "$conf_dest" ] || die $EXIT_FAILURE "$conf_dest exists and is not a regular file"
    cur_sha=$(sha256_of "$conf_dest")
    old_sha=$(recorded_sha "$config_path")
    if [ "$cur_sha" = "$new_sha" ] || [ "$cur_sha" = "$old_sha" ]; then
        conf_action=install
    elif [ "$force" = 1 ]; then
        conf_action=replace
    elif [ -z "$old_sha" ]; then
        conf_action=keep-yours
    elif [ "$new_sha" = "$old_sha" ]; then
        conf_action=keep
    elif [ "$keep_config" = 1 ]; then
        conf_action=keep-yours
    else
        die $EXIT_CONFLICT "refusing to overwrite $conf_dest: it was changed since it was installed, and the config to install ($config) changed too; compare them (diff -u $conf_dest $config), then re-run with --keep-config to keep yours, or with --force to replace it (yours is then kept as a .bak copy beside it)"
    fi
fi

# ---- write ----

install_file "$installed_binary" "$bin_path" 0755
bin_changed=$changed
install_file "$work/unit" "$unit_path" 0644
unit_changed=$((changed - bin_changed))

case $conf_action in
install) install_file "$config" "$config_path" 0644 ;;
keep)
    say "kept       $config_path (changed locally; the shipped config did not change; --force replaces it)"
    ;;
keep-yours)
    say "kept       $config_path (yours; it differs from $config: diff -u $conf_dest $config shows what that one has; --force replaces yours)"
    ;;
replace)
    conf_backup=$conf_dest.bak
    n=1
    while [ -e "$conf_backup" ] && ! cmp -s "$conf_backup" "$conf_dest"; do
        conf_backup=$conf_dest.bak.$n
        n=$((n + 1))
    done
    cp -p "$conf_dest" "$conf_backup"
    say "backup     ${conf_backup#"$destdir"} (your changed $config_path)"
    install_file "$config" "$config_path" 0644
    ;;
esac

manifest_entries=("$new_sha $config_path")
record() { manifest_entries+=("$(sha256_of "$destdir$1") $1"); }
record "$bin_path"
record "$unit_path"
# The plugin is a link to the binary beside it (kubelet-pivot answers as
# `kubectl pivot` when run by that name).
install_link "$(basename "$bin_path")" "$plugin_path"
record "$plugin_path"
install_link "$(basename "$bin_path")" "$plugin_complete_path"
record "$plugin_complete_path"

if [ "$debug_symbols" = 1 ] && [ -n "$debug_file" ]; then
    install_file "$debug_file" "$debug_path" 0644
    record "$debug_path"
    # gdb looks up DEBUGDIR/.build-id/NN/REST.debug first (the first two hex
    # digits of the build ID make the directory): relative, so it also holds
    # below DESTDIR.
    build_id=$("$READELF" -n "$binary" 2>/dev/null | awk '/Build ID:/ { print $3; exit }')
    if [ -n "$build_id" ]; then
        build_id_path=$debug_root/.build-id/${build_id:0:2}/${build_id:2}.debug
        install_link "../..${debug_path#"$debug_root"}" "$build_id_path"
        record "$build_id_path"
    fi
fi

if [ -f "$readme_src" ]; then
    install_file "$readme_src" "$doc_path" 0644
    record "$doc_path"
fi

if [ "$have_docs" = 1 ]; then
    for page in "$work/man"/*.1; do
        install_file "$page" "$man_dir/$(basename "$page")" 0644
        record "$man_dir/$(basename "$page")"
    done
    install_file "$work/bash" "$bash_completion" 0644
    install_file "$work/zsh" "$zsh_completion" 0644
    install_file "$work/fish" "$fish_completion" 0644
    record "$bash_completion"
    record "$zsh_completion"
    record "$fish_completion"
fi

# Files a previous install wrote that this one does not (e.g. a man page of a
# subcommand that is gone): remove them, the config excepted.
if [ -f "$destdir$manifest_path" ]; then
    while read -r _ path; do
        if [ -z "$path" ] || [ "$path" = "$config_path" ]; then
            continue
        fi
        keep=0
        for entry in "${manifest_entries[@]}"; do
            if [ "${entry#* }" = "$path" ]; then
                keep=1
                break
            fi
        done
        [ "$keep" = 1 ] || remove_file "$path"
    done <"$destdir$manifest_path"
fi

remove_empty_debug_dirs

printf '%s\n' "${manifest_entries[@]}" | sort -k2 | sed 's/ /  /' >"$work/manifest"
install_file "$work/manifest" "$manifest_path" 0644

if [ "$enable" = 1 ]; then
    if [ "$live_systemd" = 1 ]; then
        systemctl daemon-reload
        systemctl enable --now "$UNIT_NAME"
        say "enabled    $UNIT_NAME (and started)"
    else
        # What `systemctl enable` does for a unit with only WantedBy=, without
        # touching a running manager.
        for target in $(wanted_by "$work/unit"); do
            link=$destdir/etc/systemd/system/$target.wants/$UNIT_NAME
            if [ -L "$link" ] && [ "$(readlink "$link")" = "$unit_path" ]; then
                say "unchanged  ${link#"$destdir"} (enabled)"
                unchanged=$((unchanged + 1))
            else
                mkdir -p "$(dirname "$link")"
                ln -sfn "$unit_path" "$link"
                say "enabled    ${link#"$destdir"} -> $unit_path"
                changed=$((changed + 1))
            fi
        done
    fi
elif [ "$live_systemd" = 1 ] && [ "$unit_changed" -gt 0 ]; then
    systemctl daemon-reload
fi
if [ "$live_systemd" = 1 ] && [ $((bin_changed + unit_changed)) -gt 0 ] && systemctl is-active --quiet "$UNIT_NAME" 2>/dev/null; then
    say "note: $UNIT_NAME is running the previous binary; 'systemctl restart $UNIT_NAME' switches (it restarts the bootstrap kubelet if it holds the lock)"
fi

# The node's own kubelet unit (kubeadm's, a distribution's) must not start at
# boot beside this one: the unit's Conflicts= keeps the two kubelets apart, but
# whichever unit starts last stops the other. Warn while it is enabled and not
# masked (docs/operator-guide.md, "Moving a kubeadm node over").
kubelet_unit_enabled() {
    if [ "$live_systemd" = 1 ]; then
        [ "$(systemctl is-enabled "$KUBELET_UNIT" 2>/dev/null)" = enabled ]
        return
    fi
    local unit_dir=$destdir/etc/systemd/system link
    [ "$(readlink "$unit_dir/$KUBELET_UNIT" 2>/dev/null)" = /dev/null ] && return 1
    for link in "$unit_dir"/*.wants/"$KUBELET_UNIT" "$unit_dir"/*.requires/"$KUBELET_UNIT"; do
        [ -L "$link" ] && return 0
    done
    return 1
}
if kubelet_unit_enabled; then
    warn "warning: $KUBELET_UNIT is enabled: it would start the node's old kubelet at boot, and whichever of it and $UNIT_NAME starts last stops the other (Conflicts=). Move the node over: systemctl disable $KUBELET_UNIT && systemctl mask $KUBELET_UNIT (docs/operator-guide.md, \"Moving a kubeadm node over\")"
fi

say "done: $changed changed, $unchanged unchanged"
