#!/usr/bin/env bash
# Overhead of `recorder record` on a C program built without frame pointers (-O2
# -fomit-frame-pointer, cli/tests/programs/calltree.c doing a fixed amount of work), at 100 Hz and
# 1 kHz, against the bare program and, where perf is usable, `perf record -g` (frame pointers)
# and `perf record --call-graph dwarf` at the same rates. Commands run in turn, round after
# round, so drift of a shared machine hits them alike.
#
# Usage: scripts/bench-record.sh [ITERATIONS] [ROUNDS]   (defaults 300 and 5)
# Prints, per command, the median over the rounds of the whole process's CPU time (user + sys,
# the program's and the recorder's or perf's together) and wall time, and the ratio to the bare
# program. CPU time is the figure to quote on a loaded machine; wall time there is noise.
# "record -- true" is the fixed cost of a recording (start, CFI tables of the loaded modules,
# symbolization and the files at the end): the rest of a row's cost over bare is per sample.
set -euo pipefail

cd "$(dirname "$0")/.."
ITER="${1:-300}"
ROUNDS="${2:-5}"
for tool in gcc cargo /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "bench-record: '$tool' not found" >&2; exit 2; }
done
if ! build_log=$(cargo build --release --quiet -p recorder-cli -p recorder-preload 2>&1); then
    echo "$build_log" >&2
    exit 2
fi
WORK="$PWD/target/bench-record"
rm -rf "$WORK"
mkdir -p "$WORK"
PROG="$WORK/calltree"
gcc -O2 -fomit-frame-pointer -pthread -o "$PROG" cli/tests/programs/calltree.c
REC="$PWD/target/release/recorder"

names=("bare" "record 1kHz -- true" "record 100Hz" "record 1kHz" "record 1kHz fp-only")
cmds=(
    "$PROG $ITER iterations"
    "$REC record --period 1ms --repository $WORK/repo -o $WORK/r.jfr -- /bin/true"
    "$REC record --period 10ms --repository $WORK/repo -o $WORK/r.jfr -- $PROG $ITER iterations"
    "$REC record --period 1ms --repository $WORK/repo -o $WORK/r.jfr -- $PROG $ITER iterations"
    "$REC record --period 1ms --unwinder fp --repository $WORK/repo -o $WORK/r.jfr -- $PROG $ITER iterations"
)
if command -v perf >/dev/null && perf record -q -o "$WORK/probe.data" -- true >/dev/null 2>&1; then
    names+=("perf -g 100Hz" "perf -g 1kHz" "perf dwarf 100Hz" "perf dwarf 1kHz")
    cmds+=(
        "perf record -q -g -F 100 -o $WORK/p.data -- $PROG $ITER iterations"
        "perf record -q -g -F 1000 -o $WORK/p.data -- $PROG $ITER iterations"
        "perf record -q --call-graph dwarf -F 100 -o $WORK/p.data -- $PROG $ITER iterations"
        "perf record -q --call-graph dwarf -F 1000 -o $WORK/p.data -- $PROG $ITER iterations"
    )
else
    echo "bench-record: perf is not usable here (perf_event_paranoid or not installed): recorder only" >&2
fi

declare -A cpu wall
for ((r = 0; r < ROUNDS + 1; r++)); do
    for i in "${!cmds[@]}"; do
        # shellcheck disable=SC2086 # the command strings are word-split on purpose
        /usr/bin/time -f "%U %S %e" -o "$WORK/time" ${cmds[$i]} >/dev/null 2>"$WORK/stderr" || {
            echo "bench-record: '${cmds[$i]}' failed:" >&2
            cat "$WORK/stderr" >&2
            exit 1
        }
        ((r == 0)) && continue # warm-up round
        read -r u s e <"$WORK/time"
        cpu[$i]+="$(echo "$u + $s" | bc) "
        wall[$i]+="$e "
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base_cpu=$(echo "${cpu[0]}" | median)
base_wall=$(echo "${wall[0]}" | median)
printf '%s iterations of calltree (-O2 -fomit-frame-pointer), median of %s rounds\n' "$ITER" "$ROUNDS"
printf '%-22s %10s %8s %10s %8s\n' "command" "cpu s" "x bare" "wall s" "x bare"
for i in "${!cmds[@]}"; do
    c=$(echo "${cpu[$i]}" | median)
    w=$(echo "${wall[$i]}" | median)
    printf '%-22s %10.3f %8.3f %10.3f %8.3f\n' "${names[$i]}" "$c" "$(echo "$c / $base_cpu" | bc -l)" "$w" \
        "$(echo "$w / $base_wall" | bc -l)"
done
