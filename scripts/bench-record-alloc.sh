#!/usr/bin/env bash
# Overhead of `recorder record --alloc` on an allocation-heavy C program (cli/tests/programs/allocs.c
# "bench": ROUNDS x 1 Mi malloc/free pairs of 16..1039 bytes, -O2), against the bare program and
# `recorder record` without --alloc (the interposed malloc then only reads one flag). Commands run
# in turn, round after round, so drift of a shared machine hits them alike.
#
# Usage: scripts/bench-record-alloc.sh [MALLOC_ROUNDS] [ROUNDS]   (defaults 80 and 5)
# Prints, per command, the median over the rounds of the whole process's CPU time (user + sys, the
# program's and the recorder's together) and wall time, and the ratio to the bare program.
# "record -- true" is the fixed cost of a recording (start, CFI tables, symbols, the files at the end).
set -euo pipefail

cd "$(dirname "$0")/.."
WORKLOAD="${1:-80}"
ROUNDS="${2:-5}"
for tool in gcc cargo bc /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "bench-record-alloc: '$tool' not found" >&2; exit 2; }
done
if ! build_log=$(cargo build --release --quiet -p recorder-cli -p recorder-preload 2>&1); then
    echo "$build_log" >&2
    exit 2
fi
WORK="$PWD/target/bench-record-alloc"
rm -rf "$WORK"
mkdir -p "$WORK"
PROG="$WORK/allocs"
gcc -O2 -pthread -o "$PROG" cli/tests/programs/allocs.c
REC="$PWD/target/release/recorder"

names=("bare" "record -- true" "record" "record --alloc 512KiB" "record --alloc --alloc-live")
cmds=(
    "$PROG bench $WORKLOAD"
    "$REC record --repository $WORK/repo -o $WORK/r.jfr -- /bin/true"
    "$REC record --repository $WORK/repo -o $WORK/r.jfr -- $PROG bench $WORKLOAD"
    "$REC record --alloc 512KiB --repository $WORK/repo -o $WORK/r.jfr -- $PROG bench $WORKLOAD"
    "$REC record --alloc 512KiB --alloc-live --repository $WORK/repo -o $WORK/r.jfr -- $PROG bench $WORKLOAD"
)

# shellcheck source=scripts/compare-commands.sh
source scripts/compare-commands.sh
compare_commands bench-record-alloc "$ROUNDS" "$WORK" "$WORKLOAD Mi malloc/free pairs (allocs.c bench, -O2)"
