#!/usr/bin/env bash
# Times `recorder summary` and `recorder print --json` against the JDK's `jfr` on the same
# JVM-made recording (>= 20 MB, profile settings, default chunk size) and prints the ratios.
#
# Usage: scripts/bench-cli.sh [RECORDING.jfr]
#   The speedup is wall time, best of the runs; CPU time (user + sys) is shown beside it.
#   Without an argument the recording is made once under target/bench-cli/ and reused.
#   Timing: hyperfine when installed, else best of 3 runs with `date +%s%N`; output to /dev/null.
# Environment: BENCH_EVENTS (events per worker thread, default 72000), BENCH_RUNS (default 3).
set -euo pipefail

cd "$(dirname "$0")/.."
for tool in java javac jfr cargo; do
    command -v "$tool" >/dev/null || { echo "bench-cli: '$tool' not found (a JDK 17+ is required)" >&2; exit 2; }
done

# Quiet unless the build fails (warnings of other crates would bury the table).
if ! build_log=$(cargo build --release --quiet --bin recorder 2>&1); then
    echo "$build_log" >&2
    exit 2
fi
REC_BIN="$PWD/target/release/recorder"
WORK="$PWD/target/bench-cli"
mkdir -p "$WORK"
RUNS="${BENCH_RUNS:-3}"

REC="${1:-$WORK/workload.jfr}"
MIN_BYTES=$((20 * 1024 * 1024))
if [[ $# -eq 0 ]] && { [[ ! -f "$REC" ]] || (( $(stat -c %s "$REC") < MIN_BYTES )); }; then
    echo "making the JVM recording (profile settings, default chunk size) ..." >&2
    javac -d "$WORK/classes" cli/tests/java/JfrWorkload.java
    rm -f "$REC"
    java -XX:StartFlightRecording=filename="$REC",settings=profile \
        -cp "$WORK/classes" JfrWorkload "${BENCH_EVENTS:-72000}" 3 2000 >/dev/null 2>&1
fi
SIZE=$(stat -c %s "$REC")
if (( SIZE < MIN_BYTES )); then
    echo "bench-cli: $REC is only $SIZE bytes; raise BENCH_EVENTS" >&2
    exit 2
fi

# best CMD...: "WALL_MS CPU_MS" of the run with the best wall time among $RUNS runs, output
# discarded. CPU time (user + sys, from /usr/bin/time when present, else -1) is printed too because
# wall times on a shared 2-core machine move with the load.
best() {
    local best="" best_cpu=-1 start end ms cpu
    for _ in $(seq "$RUNS"); do
        cpu=-1
        start=$(date +%s%N)
        if [[ -x /usr/bin/time ]]; then
            /usr/bin/time -f "%U %S" -o "$WORK/time.txt" "$@" >/dev/null
            end=$(date +%s%N)
            cpu=$(awk '{ printf "%d", ($1 + $2) * 1000 }' "$WORK/time.txt")
        else
            "$@" >/dev/null
            end=$(date +%s%N)
        fi
        ms=$(( (end - start) / 1000000 ))
        if [[ -z "$best" ]] || (( ms < best )); then best=$ms; best_cpu=$cpu; fi
    done
    echo "$best $best_cpu"
}

hyperfine_best() {
    local json="$WORK/hyperfine.json"
    hyperfine --warmup 1 --runs "$RUNS" --export-json "$json" --output=null "$1" >/dev/null
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print(round(min(r["times"])*1000), round((r["user"]+r["system"])*1000))' "$json"
}

measure() {
    if command -v hyperfine >/dev/null && command -v python3 >/dev/null; then
        hyperfine_best "$*"
    else
        best "$@"
    fi
}

echo "recording: $REC ($((SIZE / 1024 / 1024)) MiB, $("$REC_BIN" summary --json "$REC" | sed 's/.*"chunks": \([0-9]*\).*/\1/') chunks)"
echo "timing: $(command -v hyperfine >/dev/null && echo hyperfine || echo "best of $RUNS"), output to /dev/null, $(nproc) cores"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
read -r rs rs_cpu < <(measure "$REC_BIN" summary "$REC")
read -r js js_cpu < <(measure jfr summary "$REC")
read -r rp rp_cpu < <(measure "$REC_BIN" print --json "$REC")
read -r jp jp_cpu < <(measure jfr print --json "$REC")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b < 1) b = 1; printf "%.1f", a / b }'; }
printf '%-14s %10s %10s %8s %14s %14s %8s\n' "command" "jfr ms" "ours ms" "speedup" "jfr cpu ms" "ours cpu ms" "cpu x"
printf '%-14s %10d %10d %7sx %14d %14d %7sx\n' "summary" "$js" "$rs" "$(ratio "$js" "$rs")" "$js_cpu" "$rs_cpu" "$(ratio "$js_cpu" "$rs_cpu")"
printf '%-14s %10d %10d %7sx %14d %14d %7sx\n' "print --json" "$jp" "$rp" "$(ratio "$jp" "$rp")" "$jp_cpu" "$rp_cpu" "$(ratio "$jp_cpu" "$rp_cpu")"
if awk -v a="$jp" -v b="$rp" 'BEGIN { exit !(a / (b < 1 ? 1 : b) >= 20) }'; then
    echo "goal met: print --json is at least 20x faster than jfr print --json"
else
    echo "goal MISSED: print --json is less than 20x faster than jfr print --json"
fi
