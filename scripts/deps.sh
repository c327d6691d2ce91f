#!/usr/bin/env bash
# What the tests, the demo and CI need beyond the Rust toolchain, in one place
# (scripts/test.sh, scripts/demo.sh and .ci/run all call this script).
#
#   scripts/deps.sh [--check] [GROUP...]      GROUP: test (default), demo, ci
#
#   test  util-linux (flock, unshare, nsenter, setpriv), inotify-tools, python3,
#         systemd (systemd as PID 1 in a namespace, systemctl, journalctl,
#         systemd-analyze), coreutils (timeout), procps (/bin/kill, the
#         unit's ExecReload=), strace, kubectl (Debian: kubernetes-client),
#         git (the skew test's baseline build), binutils (objcopy, readelf:
#         install.sh strips the binary), promtool (Debian: prometheus; the
#         alert rules' checks and unit tests), zsh, fish and bash-completion
#         (the completion scripts driven in the real shells), man-db (man -l renders every
#         man page), and kubernetes-validate 1.37.0 (PyPI)
#   demo  python3 and kubectl
#   ci    test, plus the rustfmt and clippy components of rustup
#
# When everything is there it prints nothing and exits 0 (it only looks), so
# calling it before every run is cheap. Otherwise:
#   --check    names what is missing on stderr and exits 1;
#   as root    installs it: apt-get for the Debian packages, pip for
#              kubernetes-validate (with --break-system-packages where the
#              system Python is marked externally managed, as on Debian 12:
#              it goes to /usr/local), rustup for the components;
#   not root   names what is missing and the commands that install it, and
#              exits 1 (rustup components are installed: they need no root).
set -euo pipefail

readonly PROG=deps.sh
readonly VALIDATE_VERSION=1.37.0

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

check_only=0
groups=()
for arg in "$@"; do
    case $arg in
    --check) check_only=1 ;;
    -h | --help) usage; exit 0 ;;
    test | demo | ci) groups+=("$arg") ;;
    *) printf '%s: error: unknown argument %s (see --help)\n' "$PROG" "$arg" >&2; exit 2 ;;
    esac
done
[ "${#groups[@]}" -gt 0 ] || groups=(test)
want() {
    local g
    for g in "${groups[@]}"; do
        [ "$g" = "$1" ] && return 0
        [ "$1" = test ] && [ "$g" = ci ] && return 0
    done
    return 1
}

have() { command -v "$1" >/dev/null 2>&1; }

# Debian packages that are missing (each once), with the reason for the message.
packages=()
reasons=()
need_package() {
    local p
    for p in "${packages[@]}"; do
        [ "$p" = "$1" ] && return 0
    done
    packages+=("$1")
    reasons+=("$1 ($2)")
}

if want test || want demo; then
    have python3 || need_package python3 "python3"
    have kubectl || need_package kubernetes-client "kubectl"
fi
if want test; then
    for tool in flock unshare nsenter setpriv; do
        have "$tool" || need_package util-linux "$tool"
    done
    have inotifywait || need_package inotify-tools "inotifywait"
    # systemd 252 as PID 1 in a namespace (tests/it/systemd_unit.rs), systemd-analyze
    # verify of the installed unit (tests/it/install.rs).
    for tool in systemctl journalctl systemd-analyze; do
        have "$tool" || need_package systemd "$tool"
    done
    [ -x /lib/systemd/systemd ] || need_package systemd "/lib/systemd/systemd"
    have timeout || need_package coreutils "timeout"
    # The unit's ExecReload= (systemd-analyze verify checks that it exists).
    [ -x /bin/kill ] || need_package procps "/bin/kill"
    # strace holds a system call to widen a race window (tests/it/bad_day.rs t7d).
    have strace || need_package strace "strace"
    have git || need_package git "git"
    have objcopy || need_package binutils "objcopy"
    have readelf || need_package binutils "readelf"
    # promtool check rules / test rules of manifests/optional (tests/it/alerts.rs).
    have promtool || need_package prometheus "promtool"
    # The completion scripts, driven in the real shells (src/completion.rs), and
    # every man page rendered (src/manpage/tests.rs).
    have zsh || need_package zsh "zsh"
    have fish || need_package fish "fish"
    have man || need_package man-db "man"
    # kubectl's bash completion needs bash-completion's functions (tests/it/kubectl_completion.rs).
    [ -f /usr/share/bash-completion/bash_completion ] || need_package bash-completion "/usr/share/bash-completion/bash_completion"
fi

# kubernetes-validate (PyPI): API schemas for tests/it/manifests.rs.
validate_missing=0
if want test && ! kubernetes-validate --version 2>/dev/null | grep -qx "$VALIDATE_VERSION"; then
    validate_missing=1
    # pip itself, if the Python there has none (Debian's python3 does not).
    if ! { have python3 && python3 -m pip --version >/dev/null 2>&1; }; then
        need_package python3-pip "python3 -m pip, for kubernetes-validate"
    fi
fi

components=()
if want ci; then
    installed=$(rustup component list --installed 2>/dev/null || true)
    grep -q '^rustfmt' <<<"$installed" || components+=(rustfmt)
    grep -q '^clippy' <<<"$installed" || components+=(clippy)
fi

if [ "${#packages[@]}" -eq 0 ] && [ "$validate_missing" = 0 ] && [ "${#components[@]}" -eq 0 ]; then
    exit 0
fi

missing=("${reasons[@]}")
[ "$validate_missing" = 0 ] || missing+=("kubernetes-validate $VALIDATE_VERSION (PyPI)")
for c in "${components[@]}"; do missing+=("rustup component $c"); done

if [ "$check_only" = 1 ]; then
    printf '%s: missing: %s\n' "$PROG" "$(printf '%s, ' "${missing[@]}" | sed 's/, $//')" >&2
    printf '%s: install them with: sudo bash scripts/deps.sh %s\n' "$PROG" "${groups[*]}" >&2
    exit 1
fi

# rustup components are per user: no root needed.
if [ "${#components[@]}" -gt 0 ]; then
    echo "$PROG: installing rustup components ${components[*]}"
    rustup component add "${components[@]}"
fi
[ "${#packages[@]}" -gt 0 ] || [ "$validate_missing" = 1 ] || exit 0

# The pip command for kubernetes-validate, as a string for the messages.
pip_command() {
    local flags="--quiet --disable-pip-version-check"
    # PEP 668: Debian 12's system Python refuses pip installs without this flag.
    if python3 -c 'import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)' 2>/dev/null; then
        flags="$flags --break-system-packages"
    fi
    echo "python3 -m pip install $flags kubernetes-validate==$VALIDATE_VERSION"
}

if [ "$(id -u)" != 0 ]; then
    {
        printf '%s: missing: %s\n' "$PROG" "$(printf '%s, ' "${missing[@]}" | sed 's/, $//')"
        echo "$PROG: installing them needs root; either run"
        echo "    sudo bash scripts/deps.sh ${groups[*]}"
        echo "or, on Debian/Ubuntu:"
        if [ "${#packages[@]}" -gt 0 ]; then
            echo "    sudo apt-get update && sudo apt-get install -y ${packages[*]}"
        fi
        if [ "$validate_missing" = 1 ]; then
            if have python3; then
                echo "    sudo $(pip_command)"
                echo "    (or without root: $(pip_command | sed 's/ install / install --user /'), with ~/.local/bin on PATH)"
            else
                echo "    sudo python3 -m pip install kubernetes-validate==$VALIDATE_VERSION   (add --break-system-packages where pip says externally-managed-environment, as on Debian 12)"
            fi
        fi
        echo "(other systems: the same tools from their packages)"
    } >&2
    exit 1
fi

if [ "${#packages[@]}" -gt 0 ]; then
    have apt-get || {
        printf '%s: error: no apt-get here: install %s with your package manager\n' "$PROG" \
            "$(printf '%s, ' "${reasons[@]}" | sed 's/, $//')" >&2
        exit 1
    }
    echo "$PROG: installing ${packages[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq && apt-get install -y -qq "${packages[@]}" >/dev/null; }; then
        printf '%s: error: apt-get install %s failed (see above)\n' "$PROG" "${packages[*]}" >&2
        exit 1
    fi
fi
if [ "$validate_missing" = 1 ]; then
    echo "$PROG: installing kubernetes-validate $VALIDATE_VERSION (pip)"
    cmd=$(pip_command)
    # shellcheck disable=SC2086 # pip_command gives words, without spaces in them
    if ! PIP_ROOT_USER_ACTION=ignore $cmd; then
        printf '%s: error: %s failed (see above)\n' "$PROG" "$cmd" >&2
        exit 1
    fi
    if have pyenv; then pyenv rehash; fi
    hash -r
    if ! kubernetes-validate --version 2>/dev/null | grep -qx "$VALIDATE_VERSION"; then
        printf '%s: error: kubernetes-validate %s was installed but is not on PATH as that version (PATH=%s)\n' \
            "$PROG" "$VALIDATE_VERSION" "$PATH" >&2
        exit 1
    fi
fi
