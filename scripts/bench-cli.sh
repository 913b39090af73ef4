#!/usr/bin/env bash
# Times `recorder summary` and `recorder print --json` against the JDK's `jfr` on the same
# JVM-made recording (>= 20 MB, profile settings, default chunk size) and prints the ratios.
#
# Usage: scripts/bench-cli.sh [RECORDING.jfr]
#   Without an argument the recording is made once under target/bench-cli/ and reused.
#   Timing: hyperfine when installed, else best of 3 runs with `date +%s%N`; output to /dev/null.
# Environment: BENCH_EVENTS (events per worker thread, default 72000), BENCH_RUNS (default 3).
set -euo pipefail

cd "$(dirname "$0")/.."
for tool in java javac jfr cargo; do
    command -v "$tool" >/dev/null || { echo "bench-cli: '$tool' not found (a JDK 17+ is required)" >&2; exit 2; }
done

cargo build --release --quiet --bin recorder
REC_BIN="$PWD/target/release/recorder"
WORK="$PWD/target/bench-cli"
mkdir -p "$WORK"
RUNS="${BENCH_RUNS:-3}"

REC="${1:-$WORK/workload.jfr}"
MIN_BYTES=$((20 * 1024 * 1024))
if [[ $# -eq 0 ]] && { [[ ! -f "$REC" ]] || (( $(stat -c %s "$REC") < MIN_BYTES )); }; then
    echo "making the JVM recording (profile settings, default chunk size) ..." >&2
    javac -d "$WORK/classes" tests/java/JfrWorkload.java
    rm -f "$REC"
    java -XX:StartFlightRecording=filename="$REC",settings=profile \
        -cp "$WORK/classes" JfrWorkload "${BENCH_EVENTS:-72000}" 3 2000 >/dev/null 2>&1
fi
SIZE=$(stat -c %s "$REC")
if (( SIZE < MIN_BYTES )); then
    echo "bench-cli: $REC is only $SIZE bytes; raise BENCH_EVENTS" >&2
    exit 2
fi

# best_ms CMD...: best wall time of $RUNS runs in milliseconds, output discarded.
best_ms() {
    local best="" start end ms
    for _ in $(seq "$RUNS"); do
        start=$(date +%s%N)
        "$@" >/dev/null
        end=$(date +%s%N)
        ms=$(( (end - start) / 1000000 ))
        if [[ -z "$best" ]] || (( ms < best )); then best=$ms; fi
    done
    echo "$best"
}

hyperfine_ms() {
    local json="$WORK/hyperfine.json"
    hyperfine --warmup 1 --runs "$RUNS" --export-json "$json" --output=null "$1" >/dev/null
    python3 -c 'import json,sys; print(round(min(json.load(open(sys.argv[1]))["results"][0]["times"])*1000))' "$json"
}

measure() {
    if command -v hyperfine >/dev/null && command -v python3 >/dev/null; then
        hyperfine_ms "$*"
    else
        best_ms "$@"
    fi
}

echo "recording: $REC ($((SIZE / 1024 / 1024)) MiB, $("$REC_BIN" summary --json "$REC" | sed 's/.*"chunks": \([0-9]*\).*/\1/') chunks)"
echo "timing: $(command -v hyperfine >/dev/null && echo hyperfine || echo "best of $RUNS"), output to /dev/null, $(nproc) cores"
rs=$(measure "$REC_BIN" summary "$REC")
js=$(measure jfr summary "$REC")
rp=$(measure "$REC_BIN" print --json "$REC")
jp=$(measure jfr print --json "$REC")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b < 1) b = 1; printf "%.1f", a / b }'; }
printf '%-28s %10s %10s %8s\n' "command" "jfr (ms)" "ours (ms)" "speedup"
printf '%-28s %10d %10d %7sx\n' "summary" "$js" "$rs" "$(ratio "$js" "$rs")"
printf '%-28s %10d %10d %7sx\n' "print --json" "$jp" "$rp" "$(ratio "$jp" "$rp")"
if awk -v a="$jp" -v b="$rp" 'BEGIN { exit !(a / (b < 1 ? 1 : b) >= 20) }'; then
    echo "goal met: print --json is at least 20x faster than jfr print --json"
else
    echo "goal MISSED: print --json is less than 20x faster than jfr print --json"
fi
