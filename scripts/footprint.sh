#!/usr/bin/env bash
# What the recorder costs the program it records, in one run (the figures of the README's
# "Footprint" section):
# 1. rss: resident memory added by `recorder record` (default settings) to a small C program
#    (scripts/footprint/small.c: two functions, no allocation) and to a large C++ program
#    (scripts/footprint/large.sh: a binary of tens of MB, mostly debug info, whose samples land all
#    over it), each run for SECONDS at 100 Hz and at 1 kHz, against the same program bare. The
#    programs read /proc/self/status at the end of their main, while the recorder still runs.
#    Under each recorded run, the recorder's own account of its memory (the last
#    `recorder.Footprint`, as `recorder summary` prints it).
# 2. startup: a 50 ms program (cli/tests/programs/startup.c), bare and recorded in pairs, ROUNDS
#    pairs: the medians of wall and CPU time (whole process tree) and of the time to reach main.
# 3. spawn: spawn+join of an empty thread, recording against none (`examples/thread_start.rs`).
# 4. commit: event commit without and with a stack against the JVM's (`benches/commit.rs`).
# 5. lock: how long the chunk-writer lock is held per flush with 1,500 threads
#    (`examples/lock_hold.rs`).
#
# Usage: scripts/footprint.sh [SECONDS] [ROUNDS]   (defaults 60 and 21)
# FOOTPRINT_ONLY=rss,startup,spawn,commit,lock runs only the parts named; FOOTPRINT_LARGE_UNITS
# sets the large program's size (default 10 translation units of 400 functions; 0 skips it).
set -euo pipefail

cd "$(dirname "$0")/.."
SECONDS_RUN="${1:-60}"
ROUNDS="${2:-21}"
ONLY="${FOOTPRINT_ONLY:-rss,startup,spawn,commit,lock}"
UNITS="${FOOTPRINT_LARGE_UNITS:-10}"
wants() { [[ ",$ONLY," == *",$1,"* ]]; }
for tool in gcc g++ cargo /usr/bin/time bc; do
    command -v "$tool" >/dev/null || { echo "footprint: '$tool' not found" >&2; exit 2; }
done
if ! build_log=$(cargo build --release --quiet -p recorder-cli -p recorder-preload 2>&1); then
    echo "$build_log" >&2
    exit 2
fi
WORK="$PWD/target/footprint"
mkdir -p "$WORK"
REC="$PWD/target/release/recorder"
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# status_kb FILE FIELD: the kB figure of FIELD in the /proc/self/status lines a program printed.
status_kb() { awk -v f="$2:" '$1 == f {print $2}' "$1"; }

if wants rss; then
    gcc -O2 -g -o "$WORK/small" scripts/footprint/small.c
    progs=(small)
    if ((UNITS > 0)); then
        # Built once per size (a few minutes of compiling); kept across runs.
        if [[ ! -x "$WORK/large-$UNITS" || scripts/footprint/large.sh -nt "$WORK/large-$UNITS" ]]; then
            echo "footprint: building the large program ($UNITS units)..." >&2
            bash scripts/footprint/large.sh "$WORK/large-$UNITS" "$UNITS"
        fi
        progs+=("large-$UNITS")
    fi
    echo "== resident memory after ${SECONDS_RUN} s (kB; added = recorded - bare)"
    printf '%-10s %-6s %10s %10s %10s %10s %10s %10s\n' program mode VmRSS VmHWM RssAnon RssFile "added RSS" "added HWM"
    for prog in "${progs[@]}"; do
        size=$(stat -c %s "$WORK/$prog")
        for mode in bare 100Hz 1kHz; do
            case $mode in
                bare) cmd=("$WORK/$prog" "$SECONDS_RUN") ;;
                100Hz) cmd=("$REC" record --period 10ms --repository "$WORK/repo" -o "$WORK/r.jfr" -- "$WORK/$prog" "$SECONDS_RUN") ;;
                1kHz) cmd=("$REC" record --period 1ms --repository "$WORK/repo" -o "$WORK/r.jfr" -- "$WORK/$prog" "$SECONDS_RUN") ;;
            esac
            rm -rf "$WORK/repo"
            "${cmd[@]}" >"$WORK/status" 2>"$WORK/stderr" || {
                echo "footprint: '${cmd[*]}' failed:" >&2
                cat "$WORK/stderr" >&2
                exit 1
            }
            rss=$(status_kb "$WORK/status" VmRSS)
            hwm=$(status_kb "$WORK/status" VmHWM)
            [[ $mode == bare ]] && { bare_rss=$rss; bare_hwm=$hwm; }
            printf '%-10s %-6s %10s %10s %10s %10s %10s %10s\n' "$prog" "$mode" "$rss" "$hwm" \
                "$(status_kb "$WORK/status" RssAnon)" "$(status_kb "$WORK/status" RssFile)" \
                "$((rss - bare_rss))" "$((hwm - bare_hwm))"
            if [[ $mode != bare ]]; then
                "$REC" summary "$WORK/r.jfr" | grep -E '^ (Recorder memory|Named from symbols)' | sed 's/^ /    /' || true
            fi
        done
        echo "  ($prog: binary $((size / 1024 / 1024)) MB)"
    done
fi

if wants startup; then
    gcc -O2 -fomit-frame-pointer -o "$WORK/startup" cli/tests/programs/startup.c
    declare -A wall cpu premain
    # One pair per round, the order alternating, so drift of a shared machine hits both alike.
    for ((r = 0; r < ROUNDS + 1; r++)); do
        if ((r % 2)); then order=(rec bare); else order=(bare rec); fi
        for mode in "${order[@]}"; do
            if [[ $mode == bare ]]; then cmd=("$WORK/startup" 50); else
                cmd=("$REC" record --repository "$WORK/repo" -o "$WORK/r.jfr" -- "$WORK/startup" 50)
            fi
            rm -rf "$WORK/repo"
            launched=$(date +%s%N)
            /usr/bin/time -f "%U %S %e" -o "$WORK/time" "${cmd[@]}" >"$WORK/out" 2>"$WORK/stderr" || {
                echo "footprint: '${cmd[*]}' failed:" >&2
                cat "$WORK/stderr" >&2
                exit 1
            }
            ((r == 0)) && continue # warm-up pair
            read -r u s e <"$WORK/time"
            at=$(sed -n 's/^main_at_ns=//p' "$WORK/out")
            cpu[$mode]+="$(echo "$u + $s" | bc) "
            wall[$mode]+="$e "
            premain[$mode]+="$(((at - launched) / 1000)) "
        done
    done
    echo "== start-up of a 50 ms program, median of $ROUNDS pairs (record: default settings)"
    printf '%-8s %10s %10s %16s\n' "" "wall s" "cpu s" "to main µs"
    for mode in bare rec; do
        printf '%-8s %10.3f %10.3f %16d\n' "$mode" "$(echo "${wall[$mode]}" | median)" \
            "$(echo "${cpu[$mode]}" | median)" "$(echo "${premain[$mode]}" | median)"
    done
    printf '%-8s %10.3f %10.3f %16d\n' added \
        "$(echo "$(echo "${wall[rec]}" | median) - $(echo "${wall[bare]}" | median)" | bc -l)" \
        "$(echo "$(echo "${cpu[rec]}" | median) - $(echo "${cpu[bare]}" | median)" | bc -l)" \
        "$(($(echo "${premain[rec]}" | median) - $(echo "${premain[bare]}" | median)))"
fi

if wants spawn; then
    echo "== spawn+join of an empty thread (cargo run --release --example thread_start -- --only=cost)"
    cargo run --release --quiet --example thread_start -- --only=cost
fi

if wants commit; then
    echo "== event commit against the JVM's (cargo bench --bench commit)"
    cargo bench --quiet --bench commit 2>/dev/null |
        grep -E '^(commit_no_stack_ns|commit_stack_ns|jvm_commit_no_stack_ns|jvm_commit_stack_ns|ratio_no_stack|ratio_stack|floor_tick_ns|floor_clock_gettime_ns|clock_source|events_lost):'
fi

if wants lock; then
    echo "== chunk-writer lock held per flush, 1,500 threads (cargo run --release --features zstd --example lock_hold -- 1500 8)"
    cargo run --release --quiet --features zstd --example lock_hold -- 1500 8 | grep -E 'threads,|L per flush'
fi
