# shellcheck shell=sh
# rtforge's shell helpers for folders and files on a target that other users
# may share (a lab's Pi, a kiosk login, a service account).  POSIX sh and
# the tools of coreutils or busybox.  Every script rtforge runs on a target
# that creates a folder, reads a file it did not write, or writes one,
# includes this text (device/transport/safesh.py) and goes through these
# functions, so the rules live in one place:
#
#   rtforge_owned [-m MODE] DIR...
#                          each DIR is a folder -- never a link -- owned by
#                          the user this runs as, writable by no one else,
#                          below folders owned by root or that user and
#                          writable by no one else unless sticky (/tmp);
#                          one that is missing is made, mode MODE (700).
#                          Else one line on stderr naming the folder and its
#                          owner, status 77 (OWNED_STATUS in safesh.py).
#   rtforge_cat FILE [MAX] a regular file (not a FIFO, a device or a folder:
#                          those block or never end), at most MAX bytes
#                          (default 1 MiB); below $RTFORGE_ROOT (a tree
#                          standing for a device) only when its real path
#                          stays inside that tree.  Status 66 otherwise.
#   rtforge_write FILE MODE  standard input into FILE: a new temporary file
#                          (mktemp: O_EXCL, so never through a link), synced,
#                          then renamed over FILE (a link there is replaced,
#                          not followed).
#   rtforge_inside PATH    whether PATH's real path stays below
#                          $RTFORGE_ROOT (always, when that is empty).
#   rtforge_plain DIR      DIR holds only folders and regular files (DIR/tmp,
#                          a run's scratch space, aside): a link or a FIFO in a
#                          folder rtforge writes would turn its writes and
#                          reads elsewhere.  Else one line, status 77.

# _OS_M _OS_U _OS_N <- mode (octal), owner uid and name of $1 (not followed)
_rtforge_stat() {
    _os=$(stat -c '%a %u %U' -- "$1" 2>/dev/null) || return 1
    set -f
    # shellcheck disable=SC2086  # split into stat's three fields
    set -- $_os
    set +f
    _OS_M=$1 _OS_U=$2 _OS_N=$3
}

rtforge_owned() {
    _oi=$(id -u) _om=700
    if [ "${1:-}" = -m ]; then _om=$2; shift 2; fi
    for _od in "$@"; do
        if [ ! -e "$_od" ] && [ ! -L "$_od" ]; then
            mkdir -m "$_om" -- "$_od" 2>/dev/null
        fi
        if [ -L "$_od" ] || [ ! -d "$_od" ]; then
            printf 'rtforge: %s is a symbolic link or not a folder, where rtforge keeps its own folder: remove it\n' \
                "$_od" >&2
            return 77
        fi
        _rtforge_stat "$_od" || { printf 'rtforge: cannot read the owner of %s\n' "$_od" >&2; return 77; }
        if [ "$_OS_U" != "$_oi" ]; then
            printf 'rtforge: %s belongs to %s (uid %s), not to %s: another user made it, so rtforge does not use it; remove it (rtforge makes its own)\n' \
                "$_od" "$_OS_N" "$_OS_U" "$(id -un)" >&2
            return 77
        fi
        if [ $((0$_OS_M & 022)) -ne 0 ]; then
            printf 'rtforge: %s can be written by other users (mode %s), so rtforge does not use it: chmod 700 %s\n' \
                "$_od" "$_OS_M" "$_od" >&2
            return 77
        fi
        # the folders above it, as they really are (links resolved)
        _op=$(cd -P -- "$_od/.." 2>/dev/null && pwd -P) || return 77
        while :; do
            _rtforge_stat "$_op" || { printf 'rtforge: cannot read the owner of %s\n' "$_op" >&2; return 77; }
            if [ "$_OS_U" != 0 ] && [ "$_OS_U" != "$_oi" ]; then
                printf 'rtforge: %s, above %s, belongs to %s (uid %s): another user could replace what rtforge keeps there, so rtforge does not use it\n' \
                    "$_op" "$_od" "$_OS_N" "$_OS_U" >&2
                return 77
            fi
            if [ $((0$_OS_M & 022)) -ne 0 ] && [ $((0$_OS_M & 01000)) -eq 0 ]; then
                printf 'rtforge: %s, above %s, can be written by other users (mode %s) and is not sticky, so rtforge does not use it\n' \
                    "$_op" "$_od" "$_OS_M" >&2
                return 77
            fi
            [ "$_op" = / ] && break
            _op=${_op%/*}
            [ -n "$_op" ] || _op=/
        done
    done
    return 0
}

rtforge_inside() {
    [ -n "${RTFORGE_ROOT:-}" ] || return 0
    _ir=$(readlink -f -- "$RTFORGE_ROOT") || return 1
    _ip=$(readlink -f -- "$1") || return 1
    case "$_ip" in "$_ir"|"$_ir"/*) return 0 ;; esac
    return 1
}

rtforge_cat() {
    [ -f "$1" ] || return 66
    rtforge_inside "$1" || return 66
    head -c "${2:-1048576}" -- "$1"
}

rtforge_write() {
    _wt=$(mktemp -- "$1.rtforge-XXXXXX") || return 1
    if cat > "$_wt" && chmod "$2" "$_wt" && sync "$_wt" && mv -f -- "$_wt" "$1"; then
        sync "$(dirname -- "$1")" 2>/dev/null
        return 0
    fi
    rm -f -- "$_wt"
    return 1
}

rtforge_plain() {
    _pb=$(find "$1" -path "$1/tmp" -prune -o ! -type f ! -type d -print 2>/dev/null | head -n 1)
    [ -z "$_pb" ] && return 0
    printf 'rtforge: %s is a link or a special file, which a folder of rtforge'"'"'s never holds: rtforge does not touch it\n' \
        "$_pb" >&2
    return 77
}
