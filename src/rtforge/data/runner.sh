# rtforge runner: one latency run on a board, independent of the SSH session
# that started it.  POSIX sh only (dash, busybox ash): a board needs no
# Python.  rtforge uploads this file with the probe into the run's directory
# and calls it as `sh runner.sh COMMAND DIR [ARGS]`; `busy` and `list` are
# also run from the text itself, before a run directory exists.
#
# Run directory DIR = BASE/runs/RUN_ID (BASE is /var/tmp/rtforge):
#   runner.sh rtprobe   this script and the probe binary
#   run.json            the run as the host described it (label, spec, ...)
#   probe.cmd           the probe's command line, quoted by the host (shlex)
#   loads/NN-NAME       one file per load process: its quoted command line
#   state               one line: WORD [detail], replaced atomically;
#                       starting -> running -> stopping -> one final word:
#                       done | interrupted SIG | killed WHY | failed WHY
#   runner.pid          "PID START_TICKS BOOT_ID" of the runner
#   probe.pid           "PID START_TICKS" of the probe
#   loads.pids          "PID START_TICKS NAME" per load (process group leader)
#   started             /proc/uptime when the probe started (for elapsed time)
#   events              notes for the result, e.g. a load that ended early
#   raw/                the probe's files, probe.out, loads.log
#   tmp/                scratch space of the loads, removed at the end
# BASE/active -> RUN_ID (symlink) marks the run that owns the board;
# BASE/lock serializes starts (flock).
#
# A process is named by its pid *and* its start time (and, for the runner,
# the boot id), so a pid reused after a crash or reboot is never mistaken for
# ours.  Loads run in their own sessions (setsid) so each is stopped as a
# process group; the probe ends cleanly on SIGINT/SIGTERM with its data.

set -u

SETTLE_TENTHS=10     # loads fork their workers before measuring starts (1 s)
STOP_TENTHS=50       # SIGTERM, then SIGKILL after 5 s
PROBE_STOP_TENTHS=150

# ST, PSTATE <- start time and state of pid $1; fails when there is none.
proc_start() {
    ST= PSTATE=
    read -r _s 2>/dev/null < "/proc/$1/stat" || return 1
    _s=${_s##*) }
    set -f
    set -- $_s
    set +f
    [ $# -ge 20 ] || return 1
    PSTATE=$1 ST=${20}
}

# Is pid $1 with start time $2 alive (a zombie is not)?
pid_is() {
    proc_start "$1" && [ "$ST" = "$2" ] && [ "$PSTATE" != Z ]
}

# Is the process in pid file $1 ("PID START [BOOT]") alive?
alive_file() {
    _p= _t= _b=
    read -r _p _t _b 2>/dev/null < "$1" || return 1
    if [ -n "$_b" ]; then
        read -r _boot < /proc/sys/kernel/random/boot_id
        [ "$_b" = "$_boot" ] || return 1
    fi
    pid_is "$_p" "$_t"
}

write_state() {
    printf '%s\n' "$*" > "$D/state.tmp" && mv -f "$D/state.tmp" "$D/state"
}

state_is_final() {
    _w=
    read -r _w _rest 2>/dev/null < "$D/state"
    case "$_w" in done|interrupted|killed|failed) return 0;; esac
    return 1
}

release_board() {
    [ "$(readlink "$BASE/active" 2>/dev/null)" = "$ID" ] && rm -f "$BASE/active"
    return 0
}

# Stop every load's process group: SIGTERM, up to 5 s, then SIGKILL.  Also
# used by `reap` (then the leaders are not our children; init reaps them).
stop_loads() {
    [ -s "$D/loads.pids" ] || return 0
    _leaders=
    while read -r _p _t _n; do
        if [ "${1:-}" = note ] && ! pid_is "$_p" "$_t"; then
            printf '%s load ended early\n' "$_n" >> "$D/events"
        fi
        # Only groups whose leader is still ours (or our zombie): a pid is
        # not reused while it is a zombie, so the group id is safe to use.
        proc_start "$_p" && [ "$ST" = "$_t" ] || continue
        kill -s TERM -- "-$_p" 2>/dev/null
        _leaders="$_leaders $_p:$_t"
    done < "$D/loads.pids"
    _i=0
    while [ "$_i" -lt "$STOP_TENTHS" ]; do
        _any=
        for _lt in $_leaders; do pid_is "${_lt%:*}" "${_lt#*:}" && _any=1; done
        [ -z "$_any" ] && break
        sleep 0.1
        _i=$((_i + 1))
    done
    for _lt in $_leaders; do
        kill -s KILL -- "-${_lt%:*}" 2>/dev/null   # stragglers, or a load that ignored SIGTERM
    done
    mv -f "$D/loads.pids" "$D/loads.stopped"
}

start_loads() {
    : > "$D/loads.pids"
    for _f in "$D"/loads/*; do
        [ -f "$_f" ] || continue
        _cmd=$(cat "$_f")
        # setsid: its own session and process group (a background child is
        # not a group leader, so setsid does not fork: $! is the leader).
        # stdout is discarded: the `zero` load writes zeros there.
        setsid sh -c "exec $_cmd" > /dev/null 2>> "$D/raw/loads.log" < /dev/null &
        _p=$!
        proc_start "$_p" && printf '%s %s %s\n' "$_p" "$ST" "${_f##*/}" >> "$D/loads.pids"
    done
    [ -s "$D/loads.pids" ] || return 0
    _i=0
    while [ "$_i" -lt "$SETTLE_TENTHS" ] && [ -z "$STOP" ]; do
        sleep 0.1
        _i=$((_i + 1))
    done
    while read -r _p _t _n; do
        if ! pid_is "$_p" "$_t"; then
            wait "$_p"
            FAILED="load ${_n#*-} exited at once with status $?"
            return 1
        fi
    done < "$D/loads.pids"
}

on_signal() {
    [ -n "$STOP" ] && return 0
    STOP=$1
    write_state stopping "$1"
    [ -n "$PROBE" ] && kill -s "$1" "$PROBE" 2>/dev/null
    return 0
}

finish() {
    trap '' INT TERM
    stop_loads
    rm -rf "$D/tmp"
    state_is_final || write_state failed "${FAILED:-the runner ended unexpectedly}"
    release_board
}

cmd_run() {
    cd "$D" || exit 1
    STOP= PROBE= FAILED= RC=
    trap '' HUP
    trap 'on_signal INT' INT
    trap 'on_signal TERM' TERM
    trap finish EXIT
    proc_start $$
    read -r _boot < /proc/sys/kernel/random/boot_id
    printf '%s %s %s\n' $$ "$ST" "$_boot" > "$D/runner.pid.tmp" && mv -f "$D/runner.pid.tmp" "$D/runner.pid"
    mkdir -p "$D/raw" "$D/tmp"
    : >> "$D/events"
    if ! start_loads; then
        stop_loads
        write_state failed "$FAILED"
        exit 1
    fi
    if [ -z "$STOP" ]; then
        _cmd=$(cat "$D/probe.cmd")
        read -r _up _idle < /proc/uptime
        printf '%s\n' "$_up" > "$D/started"
        sh -c "exec $_cmd" > "$D/raw/probe.out" 2>&1 < /dev/null &
        PROBE=$!
        proc_start "$PROBE" && printf '%s %s\n' "$PROBE" "$ST" > "$D/probe.pid"
        [ -z "$STOP" ] && write_state running
        [ -n "$STOP" ] && kill -s "$STOP" "$PROBE" 2>/dev/null
        while :; do
            wait "$PROBE"
            RC=$?
            # >128 with the probe still there: a trap interrupted the wait
            [ "$RC" -gt 128 ] && [ -e "/proc/$PROBE" ] && continue
            break
        done
    fi
    stop_loads note
    if [ -n "$STOP" ]; then
        write_state interrupted "SIG$STOP"
    elif [ "$RC" = 0 ]; then
        write_state done
    elif [ "$RC" -gt 128 ]; then
        write_state killed "the probe was killed by signal $((RC - 128))"
    else
        write_state failed "the probe exited with status $RC"
    fi
    exit 0
}

# Take the board (or say who has it), launch the runner detached from this
# session, and wait until it measures or fails.
cmd_start() {
    launcher=${1:-auto}
    if [ "$launcher" = auto ]; then
        launcher=setsid
        [ -d /run/systemd/system ] && command -v systemd-run > /dev/null 2>&1 && launcher=systemd
    fi
    exec 9> "$BASE/lock"
    command -v flock > /dev/null 2>&1 && flock 9
    if ! ln -s "$ID" "$BASE/active" 2> /dev/null; then
        _other=$(readlink "$BASE/active")
        if [ "$_other" != "$ID" ] && alive_file "$BASE/runs/$_other/runner.pid"; then
            echo "busy $_other"
            exit 75
        fi
        # the previous owner died without letting go (SIGKILL, reboot)
        ln -sfn "$ID" "$BASE/active"
    fi
    write_state starting
    printf '%s\n' "$launcher" > "$D/launcher"
    if [ "$launcher" = systemd ]; then
        systemd-run --unit "rtforge-$ID" --collect --quiet -p TimeoutStopSec=30 \
            /bin/sh "$D/runner.sh" run "$D" 9>&- || { release_board; write_state failed "systemd-run failed"; }
    else
        setsid nohup /bin/sh "$D/runner.sh" run "$D" > "$D/runner.log" 2>&1 < /dev/null 9>&- &
    fi
    # Hold the lock until the runner has recorded itself (so the next start
    # can check it) and the loads have settled, or it failed.
    _i=0
    while [ "$_i" -lt 600 ]; do
        read -r _w _rest 2>/dev/null < "$D/state"
        case "$_w" in starting) ;; *) [ -s "$D/runner.pid" ] && break;; esac
        sleep 0.05
        _i=$((_i + 1))
    done
    read -r _line < "$D/state"
    echo "started $_line"
}

# One poll: a few short lines and the series.jsonl bytes from offset $1.
# Builtins only, apart from tail (and head on the first poll).
cmd_status() {
    _st=missing
    read -r _st 2>/dev/null < "$D/state"
    _a=0
    alive_file "$D/runner.pid" && _a=1
    read -r _up _idle < /proc/uptime
    _started=
    read -r _started 2>/dev/null < "$D/started"
    printf 'state %s\nalive %s\nuptime %s\nstarted %s\n' "$_st" "$_a" "$_up" "$_started"
    if [ "${2:-0}" = 1 ]; then
        printf '@@head\n'
        head -c 2048 "$D/raw/probe.json" 2> /dev/null
        printf '\n'
    fi
    printf '@@series\n'
    [ -f "$D/raw/series.jsonl" ] && tail -c "+$((${1:-0} + 1))" "$D/raw/series.jsonl"
    return 0
}

cmd_stop() {
    if alive_file "$D/runner.pid"; then
        read -r _p _rest < "$D/runner.pid"
        kill -s "${1:-TERM}" "$_p" && echo signalled && return 0
    fi
    echo notrunning
}

# After the runner died (SIGKILL, OOM, reboot): end what it left behind --
# the probe cleanly (SIGINT keeps its data), the loads as groups -- and
# record why the run ended.
cmd_reap() {
    if alive_file "$D/runner.pid"; then
        echo running
        return 0
    fi
    if [ -s "$D/probe.pid" ] && alive_file "$D/probe.pid"; then
        read -r _p _t < "$D/probe.pid"
        kill -s INT "$_p" 2>/dev/null
        _i=0
        while [ "$_i" -lt "$PROBE_STOP_TENTHS" ] && pid_is "$_p" "$_t"; do
            sleep 0.1
            _i=$((_i + 1))
        done
        pid_is "$_p" "$_t" && kill -s KILL "$_p"
    fi
    stop_loads
    rm -rf "$D/tmp"
    if ! state_is_final; then
        _why="the runner on the board was killed"
        if read -r _p _t _b 2>/dev/null < "$D/runner.pid"; then
            read -r _boot < /proc/sys/kernel/random/boot_id
            [ "$_b" != "$_boot" ] && _why="the board rebooted during the run"
        fi
        write_state killed "$_why"
    fi
    release_board
    echo reaped
}

# Is the board measuring?  Prints the owning run's id, or nothing.
cmd_busy() {
    _other=$(readlink "$BASE/active" 2>/dev/null) || return 0
    alive_file "$BASE/runs/$_other/runner.pid" && echo "$_other"
    return 0
}

# One line per run directory: RUN_ID ALIVE STATE...
cmd_list() {
    for _d in "$BASE"/runs/*; do
        [ -f "$_d/runner.sh" ] || continue
        _st=missing
        read -r _st 2>/dev/null < "$_d/state"
        _a=0
        alive_file "$_d/runner.pid" && _a=1
        printf '%s %s %s\n' "${_d##*/}" "$_a" "$_st"
    done
    return 0
}

# sha256 of every file the host fetches, relative to DIR.
cmd_manifest() {
    cd "$D" || exit 1
    set --
    for _f in run.json state events launcher runner.log runner.pid probe.pid loads.stopped raw/*; do
        [ -f "$_f" ] && set -- "$@" "$_f"
    done
    sha256sum -- "$@"
}

cmd=${1:-}
case "$cmd" in
    busy|list) BASE=${2:?BASE}; ID=; D= ;;
    *) D=${2:?DIR}; ID=${D##*/}; BASE=${D%/runs/*} ;;
esac
[ $# -ge 2 ] && shift 2
case "$cmd" in
    start) cmd_start "$@" ;;
    run) cmd_run ;;
    status) cmd_status "$@" ;;
    stop) cmd_stop "$@" ;;
    reap) cmd_reap ;;
    busy) cmd_busy ;;
    list) cmd_list ;;
    manifest) cmd_manifest ;;
    *) echo "usage: sh runner.sh start|run|status|stop|reap|manifest DIR | busy|list BASE" >&2; exit 2 ;;
esac
