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

# shellcheck source=scripts/compare-commands.sh
source scripts/compare-commands.sh
compare_commands bench-record "$ROUNDS" "$WORK" "$ITER iterations of calltree (-O2 -fomit-frame-pointer)"
