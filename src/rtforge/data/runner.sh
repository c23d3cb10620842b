# shellcheck shell=sh
# rtforge runner: one run (a latency measurement or a benchmark) on a
# target, independent of the rtforge (and SSH session) that started it.
# POSIX sh only (dash, busybox ash): a board needs no Python.  rtforge
# copies it with the programs into the run's directory, where `start`
# launches it (`sh runner.sh run DIR`) once its bytes are checked against
# rtforge's own; every other command is rtforge's own copy of the text
# (`sh -c TEXT runner COMMAND DIR [ARGS]`), never a file found on the target.
# Run directory DIR = BASE/runs/RUN_ID (a board: BASE is /var/lib/rtforge,
# root's own; this machine: the run store, so DIR is the run's folder in it).
# Before it acts, a command checks that BASE, BASE/runs and DIR are folders
# of the user it runs as that no one else can write (rtforge_owned), and one
# that changes DIR that DIR holds no link or special file (rtforge_plain):
# a folder another user made or filled is refused, never used.
# The files of DIR, rtforge's and the runner's: docs/architecture.md, "A run's folder".
# BASE/active -> RUN_ID (symlink) marks the run that owns the target;
# a lock on the folder BASE itself (flock) serializes starts.
#
# A process is named by its pid *and* its start time (and, for the runner,
# the boot id, and in `reap`/`stop` its RTFORGE_RUN mark), so a pid reused
# after a crash or reboot, or one named by a planted pid file, is never taken for
# ours.  Loads and the engine run in their own sessions (setsid), so each is
# signalled as a process group; the engines end cleanly on SIGINT/SIGTERM
# with their data written.

set -u

# The constants below are rtforge's (measure/lifecycle.py renders them from
# its Python definitions, so they are defined once):
#   FINAL_STATES        the words that end a run
#   STOP_TENTHS         loads: SIGTERM, then SIGKILL after this long
#   ENGINE_STOP_TENTHS  the engine's grace after SIGTERM in `reap`
#   START_WAIT_TENTHS   how long `start` waits for the run to measure
#   OWNED_STATUS        the status of a folder or file refused (data/safe.sh)
@CONSTANTS@

# rtforge_owned, rtforge_cat, rtforge_write (data/safe.sh):
@SAFE@

# Is BASE (and BASE/runs, and DIR when it is given) ours alone?  $1: make
# BASE and BASE/runs when they are missing (`start`, a board's `busy make`
# before anything is uploaded there); without it a missing BASE means there
# is nothing to do (exit 0 with no output).
own_base() {
    if [ "${1:-}" != make ] && [ ! -e "$BASE" ] && [ ! -L "$BASE" ]; then exit 0; fi
    # BASE readable by all (tune's record is there, for doctor), the runs root's alone
    rtforge_owned -m 755 "$BASE" && rtforge_owned "$BASE/runs" || exit "$OWNED_STATUS"
    if [ -n "$D" ]; then
        [ -d "$D" ] || { echo "rtforge: no run folder $D" >&2; exit 1; }
        rtforge_owned "$D" || exit "$OWNED_STATUS"
    fi
}

# ST, PSTATE <- start time and state of pid $1; fails when there is none.
proc_start() {
    ST='' PSTATE=''
    read -r _s 2>/dev/null < "/proc/$1/stat" || return 1
    _s=${_s##*) }
    set -f
    # shellcheck disable=SC2086  # split into the stat fields, globbing off
    set -- $_s
    set +f
    [ $# -ge 20 ] || return 1
    PSTATE=$1 ST=${20}
}

# Is pid $1 with start time $2 alive (a zombie is not)?
pid_is() {
    proc_start "$1" && [ "$ST" = "$2" ] && [ "$PSTATE" != Z ]
}

# Does process $1 carry this run's mark (RTFORGE_RUN=$ID in its starting
# environment)?  Checked where MARKED=1: `reap`/`stop` act on pid files they did not write.
ours() {
    [ -z "${MARKED:-}" ] && return 0
    tr '\000' '\n' < "/proc/$1/environ" 2>/dev/null | grep -qx "RTFORGE_RUN=$ID"
}

# Is the process in pid file $1 ("PID START [BOOT]") alive?
alive_file() {
    _p='' _t='' _b=''
    read -r _p _t _b 2>/dev/null < "$1" || return 1
    if [ -n "$_b" ]; then
        read -r _boot < /proc/sys/kernel/random/boot_id
        [ "$_b" = "$_boot" ] || return 1
    fi
    pid_is "$_p" "$_t"
}

write_state() {
    printf '%s\n' "$*" > "$R/state.tmp" && mv -f "$R/state.tmp" "$R/state"
}

state_is_final() {
    _w=
    read -r _w _rest 2>/dev/null < "$R/state"
    case " $FINAL_STATES " in *" $_w "*) [ -n "$_w" ] && return 0;; esac
    return 1
}

release_board() {
    [ "$(readlink "$BASE/active" 2>/dev/null)" = "$ID" ] && rm -f "$BASE/active"
    return 0
}

# Start `sh -c "exec CMD" ($2)` in a session of its own (setsid does not fork
# for a background child: $! is the process) into pid file $1, output file $3.
start_group() {
    setsid sh -c "exec $2" > "$3" 2>&1 < /dev/null &
    _p=$!
    proc_start "$_p" && printf '%s %s\n' "$_p" "$ST" > "$1"
    LAST=$_p
}

# Is any process of group $1 alive (zombies aside)?  A load's workers may outlive
# its leader (stress-ng --vm freeing gigabytes); busybox's kill cannot tell.
group_alive() {
    _g=$1
    for _f in /proc/[0-9]*/stat; do
        read -r _s 2>/dev/null < "$_f" || continue
        _s=${_s##*) }
        set -f
        # shellcheck disable=SC2086  # split into the stat fields, globbing off
        set -- $_s
        set +f
        [ $# -ge 3 ] && [ "$3" = "$_g" ] && [ "$1" != Z ] && return 0
    done
    return 1
}

# Signal $1 to the process group recorded in pid file $2, if it is ours.
# (busybox complains about the "--" but signals the group all the same.)
signal_group() {
    _p='' _t=''
    read -r _p _t 2>/dev/null < "$2" || return 1
    proc_start "$_p" && [ "$ST" = "$_t" ] && ours "$_p" || return 1
    kill -s "$1" -- "-$_p" 2>/dev/null
    return 0
}

# End the group in pid file $1 with signal $2; SIGKILL after $3 tenths.
end_group() {
    [ -s "$1" ] || return 0
    read -r _gp _gt < "$1"
    signal_group "$2" "$1" || return 0
    _i=0
    while [ "$_i" -lt "$3" ] && pid_is "$_gp" "$_gt"; do
        sleep 0.1
        _i=$((_i + 1))
    done
    pid_is "$_gp" "$_gt" && kill -s KILL -- "-$_gp" 2>/dev/null
    return 0
}

# Stop every load's process group: SIGTERM, up to STOP_TENTHS, then SIGKILL.
# Also used by `reap` (then the leaders are not our children; init reaps them).
stop_loads() {
    [ -s "$R/loads.pids" ] || return 0
    _leaders=
    while read -r _p _t _n; do
        if [ "${1:-}" = note ] && ! pid_is "$_p" "$_t"; then
            printf '%s load ended early\n' "$_n" >> "$R/events"
        fi
        # Only groups whose leader is still ours (or our zombie): a pid is
        # not reused while it is a zombie, so the group id is safe to use.
        if ! { proc_start "$_p" && [ "$ST" = "$_t" ] && ours "$_p"; }; then continue; fi
        kill -s TERM -- "-$_p" 2>/dev/null
        _leaders="$_leaders $_p:$_t"
    done < "$R/loads.pids"
    for _sig in TERM KILL; do
        _i=0
        while [ "$_i" -lt "$STOP_TENTHS" ]; do
            _any=
            for _lt in $_leaders; do group_alive "${_lt%:*}" && _any=1; done
            [ -z "$_any" ] && break
            sleep 0.1
            _i=$((_i + 1))
        done
        [ -z "$_any" ] && break
        for _lt in $_leaders; do
            kill -s KILL -- "-${_lt%:*}" 2>/dev/null   # stragglers, or a load that ignored SIGTERM
        done
    done
    mv -f "$R/loads.pids" "$R/loads.stopped"
}

# Start the loads, then let them settle ($1 tenths) before measuring starts:
# workers forking and memory faulted in are not the load to measure under.
start_loads() {
    : > "$R/loads.pids"
    for _f in "$D"/loads/*; do
        [ -f "$_f" ] || continue
        _cmd=$(cat "$_f")
        # stdout is discarded: the `zero` load writes zeros there.
        setsid sh -c "exec $_cmd" > /dev/null 2>> "$D/raw/loads.log" < /dev/null &
        _p=$!
        proc_start "$_p" && printf '%s %s %s\n' "$_p" "$ST" "${_f##*/}" >> "$R/loads.pids"
    done
    [ -s "$R/loads.pids" ] || [ "$1" -gt 0 ] || return 0
    [ -z "$STOP" ] && write_state settling
    _i=0
    while [ "$_i" -lt "$1" ] && [ -z "$STOP" ]; do
        sleep 0.1
        _i=$((_i + 1))
    done
    while read -r _p _t _n; do
        if ! pid_is "$_p" "$_t"; then
            wait "$_p"
            FAILED="load ${_n#*-} exited at once with status $?"
            return 1
        fi
    done < "$R/loads.pids"
}

# A stop is SIGTERM to the runner, with the signal the engine should get in
# raw/runner/stop.sig (`stop` writes it): a background job of a
# non-interactive shell starts with SIGINT ignored, and an ignored signal
# cannot be trapped, so the runner itself never sees a SIGINT.
on_signal() {
    [ -n "$STOP" ] && return 0
    _sig=$1
    read -r _sig 2>/dev/null < "$R/stop.sig"
    case "$_sig" in INT|TERM|HUP) ;; *) _sig=$1 ;; esac
    STOP=$_sig
    write_state stopping "$_sig"
    [ -n "$ENGINE" ] && signal_group "$_sig" "$R/engine.pid"
    return 0
}

# Ask rtla's loop to end (it sends rtla the SIGINT rtla cleans up on: a
# killed rtla would leave the timerlat tracer running) and wait for it.
end_trace() {
    [ -s "$R/trace.pid" ] || return 0
    : > "$R/trace.stop"
    read -r _tp _tt < "$R/trace.pid"
    _i=0
    while [ "$_i" -lt "$ENGINE_STOP_TENTHS" ] && pid_is "$_tp" "$_tt"; do
        sleep 0.1
        _i=$((_i + 1))
    done
    end_group "$R/trace.pid" INT "$ENGINE_STOP_TENTHS"
}

finish() {
    trap '' INT TERM
    end_trace
    end_group "$R/monitor.pid" INT "$ENGINE_STOP_TENTHS"
    stop_loads
    rm -rf "$D/tmp"
    state_is_final || write_state failed "${FAILED:-the runner ended unexpectedly}"
    release_board
}

cmd_run() {
    cd "$D" || exit 1
    export RTFORGE_RUN="$ID"   # the mark every process of this run inherits (see `ours`)
    STOP='' ENGINE='' FAILED='' RC=''
    trap '' HUP
    trap 'on_signal INT' INT
    trap 'on_signal TERM' TERM
    trap finish EXIT
    # Our start time as every other process reads it, from a subshell: under
    # qemu-user (the tests' emulated Pi 1) a process reading its own
    # /proc/PID/stat gets QEMU's emulation, whose start time is often a tick
    # or two off the kernel's, and `status` would then call us dead.
    ST=$(proc_start $$ && echo "$ST")
    read -r _boot < /proc/sys/kernel/random/boot_id
    printf '%s %s %s\n' $$ "$ST" "$_boot" > "$R/runner.pid.tmp" && mv -f "$R/runner.pid.tmp" "$R/runner.pid"
    mkdir -p "$D/tmp"
    : >> "$R/events"
    if ! start_loads "${1:-0}"; then
        stop_loads
        write_state failed "$FAILED"
        exit 1
    fi
    if [ -z "$STOP" ]; then
        { read -r _name; read -r _cmd; } < "$D/engine.cmd"
        if [ -f "$D/monitor.cmd" ]; then
            start_group "$R/monitor.pid" "$(cat "$D/monitor.cmd")" "$D/raw/monitor.out"
        fi
        if [ -f "$D/trace.cmd" ]; then  # run from $D: its path needs no quoting
            start_group "$R/trace.pid" "sh ./runner.sh trace ." "$D/raw/trace.out"
        fi
        read -r _up _idle < /proc/uptime
        printf '%s\n' "$_up" > "$R/started"
        times > "$R/times"
        start_group "$R/engine.pid" "$_cmd" "$D/raw/$_name.out"
        ENGINE=$LAST
        [ -z "$STOP" ] && write_state running
        [ -n "$STOP" ] && signal_group "$STOP" "$R/engine.pid"
        while :; do
            wait "$ENGINE"
            RC=$?
            # >128 with the engine still there: a trap interrupted the wait
            [ "$RC" -gt 128 ] && [ -e "/proc/$ENGINE" ] && continue
            break
        done
        times >> "$R/times"
    fi
    end_trace
    end_group "$R/monitor.pid" INT "$ENGINE_STOP_TENTHS"
    stop_loads note
    if [ -n "$STOP" ]; then
        write_state interrupted "SIG$STOP"
    elif [ "$RC" = 0 ]; then
        write_state "done"
    elif [ "$RC" -gt 128 ]; then
        write_state killed "the $_name was killed by signal $((RC - 128))"
    else
        write_state failed "the $_name exited with status $RC"
    fi
    exit 0
}

# rtla timerlat stops at the first wake-up over its threshold and prints its
# analysis: start it again after each, up to trace.cmd's limit, until
# trace.stop appears (rtla runs in the background, so this loop sees the stop;
# rtla sets its own SIGINT handler).  One that ended without an analysis ends it.
cmd_trace() {
    cd "$D" || exit 1
    { read -r _limit; read -r _cmd; } < trace.cmd
    mkdir -p raw/trace
    _n=0
    while [ "$_n" -lt "$_limit" ] && [ ! -e "$R/trace.stop" ]; do
        _n=$((_n + 1))
        read -r _t0 _idle < /proc/uptime
        sh -c "exec $_cmd" > "raw/trace/$_n.out" 2>&1 < /dev/null &
        _rp=$!
        _sent=
        while [ -e "/proc/$_rp" ] && ! { proc_start "$_rp" && [ "$PSTATE" = Z ]; }; do
            if [ -e "$R/trace.stop" ] && [ -z "$_sent" ]; then
                kill -s INT "$_rp" 2>/dev/null
                _sent=1
            fi
            sleep 0.2
        done
        wait "$_rp"
        _rc=$?
        read -r _t1 _idle < /proc/uptime
        printf '%s %s %s %s\n' "$_n" "$_t0" "$_t1" "$_rc" >> raw/trace/index
        grep -q 'hit stop tracing' "raw/trace/$_n.out" || break
    done
    [ "$_n" -ge "$_limit" ] && echo "limit $_limit"
    return 0
}

# Take the target (or say who has it), launch the runner detached from this
# session, and wait until it measures or fails.  $1: launcher, $2: settle
# time of the loads in tenths of a second.
cmd_start() {
    launcher=${1:-auto}
    settle=${2:-0}
    if [ "$launcher" = auto ]; then
        launcher=setsid
        [ -d /run/systemd/system ] && command -v systemd-run > /dev/null 2>&1 && launcher=systemd
    fi
    exec 9< "$BASE"
    command -v flock > /dev/null 2>&1 && flock 9
    # the runner.sh the run will execute is byte for byte rtforge's (its sha256: $3)
    _sum=$(sha256sum < "$D/runner.sh")
    if [ "${_sum%% *}" != "${3:-}" ]; then
        echo "rtforge: $D/runner.sh is not the runner rtforge copied there" >&2
        exit "$OWNED_STATUS"
    fi
    if ! ln -s "$ID" "$BASE/active" 2> /dev/null; then
        _other=$(readlink "$BASE/active")
        if [ "$_other" != "$ID" ] && alive_file "$BASE/runs/$_other/raw/runner/runner.pid"; then
            echo "busy $_other"
            exit 75
        fi
        # the previous owner died without letting go (SIGKILL, reboot)
        ln -sfn "$ID" "$BASE/active"
    fi
    write_state starting
    printf '%s\n' "$launcher" > "$R/launcher"
    if [ "$launcher" = systemd ]; then
        systemd-run --unit "rtforge-$ID" --collect --quiet -p TimeoutStopSec=30 --setenv="RTFORGE_RUN=$ID" \
            /bin/sh "$D/runner.sh" run "$D" "$settle" 9<&- || { release_board; write_state failed "systemd-run failed"; }
    else
        # A new session has no controlling terminal whose hang-up could
        # reach it; nohup only where there is one (Debian's busybox has none).
        _nohup=
        command -v nohup > /dev/null 2>&1 && _nohup='nohup'
        RTFORGE_RUN=$ID setsid $_nohup /bin/sh "$D/runner.sh" run "$D" "$settle" > "$R/runner.log" 2>&1 < /dev/null 9<&- &
    fi
    # Hold the lock until the runner has recorded itself (so the next start
    # can check it) and the loads have settled, or it failed.
    _i=0
    _limit=$((START_WAIT_TENTHS * 2 + settle * 2))
    while [ "$_i" -lt "$_limit" ]; do
        read -r _w _rest 2>/dev/null < "$R/state"
        case "$_w" in starting|settling) ;; *) [ -s "$R/runner.pid" ] && break;; esac
        sleep 0.05
        _i=$((_i + 1))
    done
    read -r _line < "$R/state"
    echo "started $_line"
}

# One poll: a few short lines and the bytes of raw/$2 from offset $1 (the
# engine's progress).  Builtins only, apart from tail.
cmd_status() {
    _st=missing
    read -r _st 2>/dev/null < "$R/state"
    _a=0
    alive_file "$R/runner.pid" && _a=1
    read -r _up _idle < /proc/uptime
    _started=
    read -r _started 2>/dev/null < "$R/started"
    printf 'state %s\nalive %s\nuptime %s\nstarted %s\n' "$_st" "$_a" "$_up" "$_started"
    printf '@@progress\n'
    case "${2:-}" in
        ''|*/*|.*) ;;
        *) [ -f "$D/raw/$2" ] && tail -c "+$((${1:-0} + 1))" "$D/raw/$2" ;;
    esac
    return 0
}

cmd_stop() {
    MARKED=1
    if alive_file "$R/runner.pid" && ours "$_p"; then
        read -r _p _rest < "$R/runner.pid"
        printf '%s\n' "${1:-TERM}" > "$R/stop.sig.tmp" && mv -f "$R/stop.sig.tmp" "$R/stop.sig"
        kill -s TERM "$_p" && echo signalled && return 0
    fi
    echo notrunning
}

# After the runner died (SIGKILL, OOM, reboot): end what it left behind --
# the engine cleanly (SIGTERM keeps its data), the loads as groups -- and
# record why the run ended.
cmd_reap() {
    MARKED=1
    if alive_file "$R/runner.pid" && ours "$_p"; then
        echo running
        return 0
    fi
    end_group "$R/engine.pid" TERM "$ENGINE_STOP_TENTHS"
    end_trace
    end_group "$R/monitor.pid" TERM "$ENGINE_STOP_TENTHS"
    stop_loads
    rm -rf "$D/tmp"
    if ! state_is_final; then
        _why="the runner was killed"
        if read -r _p _t _b 2>/dev/null < "$R/runner.pid"; then
            read -r _boot < /proc/sys/kernel/random/boot_id
            [ "$_b" != "$_boot" ] && _why="the machine rebooted during the run"
        fi
        write_state killed "$_why"
    fi
    release_board
    echo reaped
}

# Is the target measuring?  Prints the owning run's id, or nothing.
cmd_busy() {
    _other=$(readlink "$BASE/active" 2>/dev/null) || return 0
    alive_file "$BASE/runs/$_other/raw/runner/runner.pid" && echo "$_other"
    return 0
}

# One line per run directory that holds a runner: RUN_ID ALIVE STATE...
cmd_list() {
    for _d in "$BASE"/runs/*; do
        [ -f "$_d/runner.sh" ] || continue
        _st=missing
        read -r _st 2>/dev/null < "$_d/raw/runner/state"
        _a=0
        alive_file "$_d/raw/runner/runner.pid" && _a=1
        printf '%s %s %s\n' "${_d##*/}" "$_a" "$_st"
    done
    return 0
}

# sha256 of every file under raw/ (what the host fetches), relative to DIR.
cmd_manifest() {
    cd "$D" || exit 1
    find raw -type f -exec sha256sum -- {} +
}

cmd=${1:-}
case "$cmd" in
    busy|list) BASE=${2:?BASE}; ID=; D=; R= ;;
    *) D=${2:?DIR}; ID=${D##*/}; BASE=${D%/runs/*}; R=$D/raw/runner ;;
esac
[ $# -ge 2 ] && shift 2
case "$cmd" in
    start) own_base make; rtforge_plain "$D" || exit "$OWNED_STATUS"; cmd_start "$@" ;;
    run) own_base; rtforge_plain "$D" || exit "$OWNED_STATUS"; cmd_run "$@" ;;
    trace) cmd_trace ;;
    status) cmd_status "$@" ;;
    stop) own_base; rtforge_plain "$D" || exit "$OWNED_STATUS"; cmd_stop "$@" ;;
    reap) own_base; rtforge_plain "$D" || exit "$OWNED_STATUS"; cmd_reap ;;
    busy) own_base "${1:-}"; cmd_busy ;;
    list) own_base; cmd_list ;;
    manifest) own_base; rtforge_plain "$D" || exit "$OWNED_STATUS"; cmd_manifest ;;
    *) echo "usage: sh runner.sh start|run|trace|status|stop|reap|manifest DIR | busy BASE [make] | list BASE" >&2
       exit 2 ;;
esac
