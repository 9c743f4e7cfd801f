#!/usr/bin/env bash
# Today's stack beside this machine's own: Python 3.13, torch 2.13.0 and megatron-core 0.19.2, as current training
# images carry them, in a Debian trixie root filesystem under .today/ (the host's Python is not touched).
#
#   tools/today_stack.sh build        build it (about 3 minutes and 6 GB the first time; nothing when it is there)
#   tools/today_stack.sh run CMD...   run CMD in it, in this checkout (make test-today runs the suite's megatron-core
#                                     tests this way)
#   tools/today_stack.sh clean        remove .today/
#
# Needs root (debootstrap, chroot, mounts). Every command runs in a mount namespace of its own: /proc, /dev, /sys,
# this checkout and ../shared are mounted for that command only and vanish with it, so nothing stays bound under
# .today/ (a `rm -rf` of a root filesystem with the host's /dev bound into it deletes the host's device files).
# TODAY_ROOT moves it; MEGATRON_CORE (default 0.19.2) and PYTHON (default python3.13) pick the stack.
set -euo pipefail

project=$(cd "$(dirname "$0")/.." && pwd)
root=${TODAY_ROOT:-$project/.today}
rootfs=$root/rootfs
megatron_core=${MEGATRON_CORE:-0.19.2}
python=${PYTHON:-python3.13}
torch_version=$(sed -n 's/^torch==//p' "$project/constraints.txt")
shared=$(dirname "$project")/shared

say() { echo "today_stack: $*" >&2; }

need_root() {
    [ "$(id -u)" = 0 ] || { say "needs root (debootstrap, chroot and mounts); run it as root or in a container"; exit 2; }
}

# CMD in the root filesystem, with this checkout at its own path (the suite's paths and caches read the same inside).
in_root() {
    need_root
    unshare --mount --propagation private -- bash -euo pipefail -c '
        rootfs=$1 project=$2 shared=$3; shift 3
        mount -t proc proc "$rootfs/proc"
        mount --rbind /dev "$rootfs/dev"
        mount --rbind /sys "$rootfs/sys"
        mkdir -p "$rootfs$project"
        mount --bind "$project" "$rootfs$project"
        if [ -d "$shared" ]; then mkdir -p "$rootfs$shared"; mount --bind -o ro "$shared" "$rootfs$shared"; fi
        exec chroot "$rootfs" /usr/bin/env -i HOME=/root PATH=/opt/venv/bin:/usr/bin:/bin LANG=C.UTF-8 \
            TERM="${TERM:-dumb}" PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-}" \
            bash -c "cd \"\$0\" && exec \"\$@\"" "$project" "$@"
    ' today "$rootfs" "$project" "$shared" "$@"
}

# The host's files the stack needs, copied again before each command (they may change): pip needs the resolver, the
# index settings and the CA bundle the index's TLS chain ends in; gloo needs this host's name to resolve
# (/etc/hosts), or its ranks wait for each other until they time out.
host_files() {
    cp /etc/resolv.conf /etc/hosts /etc/hostname "$rootfs/etc/"
    if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$rootfs/etc/"; fi
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
}

build() {
    need_root
    if [ -x "$rootfs/opt/venv/bin/python" ] && [ -f "$root/.built" ]; then
        say "already built: $(cat "$root/.built")"; return
    fi
    command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >&2
    local mirror
    mirror=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | awk '{print $2}')
    mirror=${mirror:-http://deb.debian.org/debian}
    if [ ! -x "$rootfs/usr/bin/$python" ]; then
        say "debootstrap trixie from $mirror into $rootfs"
        mkdir -p "$root"
        debootstrap --variant=minbase --include="$python,$python-venv,$python-dev,python3-dev,python3-pip,make,g++,git" \
            trixie "$rootfs" "$mirror" >&2
    fi
    host_files
    in_root "$python" -m venv /opt/venv
    # torch first and pinned (the index's build for this Python; the CUDA one runs on the CPU), then megatron-core,
    # then this checkout's dependencies under the same pins, so that none of them brings another torch or core.
    printf 'torch==%s\nmegatron-core==%s\n' "$torch_version" "$megatron_core" > "$rootfs/opt/constraints.txt"
    in_root /opt/venv/bin/pip install -q --upgrade pip
    in_root /opt/venv/bin/pip install -q -c /opt/constraints.txt torch megatron-core
    in_root /opt/venv/bin/pip install -q -c /opt/constraints.txt -e ".[test]"
    in_root /opt/venv/bin/python -c 'import sys, torch, megatron.core as m; print(
        f"Python {sys.version.split()[0]}, torch {torch.__version__}, megatron-core {m.__version__}")' > "$root/.built"
    say "built: $(cat "$root/.built")"
}

clean() {
    need_root
    # Only what build made, never another folder TODAY_ROOT may name; refused while anything is mounted beneath
    # it (from this namespace), and never across a mount point (one bound in another namespace included).
    [ -d "$root" ] || return 0
    if [ ! -f "$root/.built" ] && [ ! -f "$rootfs/etc/debian_version" ]; then
        say "$root holds no stack this tool built (no .built, no rootfs/etc/debian_version); not removing"; exit 1
    fi
    if findmnt -rn -o TARGET > "$root/.mounts" && grep -q "^$rootfs/" "$root/.mounts"; then
        say "something is still mounted under $rootfs; not removing"; exit 1
    fi
    rm -rf --one-file-system "$rootfs" "$root/.built" "$root/.mounts"
    rmdir "$root"
}

case "${1:-}" in
    build) build ;;
    run) shift; need_root; [ -f "$root/.built" ] || build; host_files; in_root "$@" ;;
    clean) clean ;;
    *) say "usage: tools/today_stack.sh build | run CMD... | clean (got '${1:-}')"; exit 2 ;;
esac
