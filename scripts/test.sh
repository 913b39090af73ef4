#!/usr/bin/env bash
# Runs every test of the project: the workspace's unit, integration and doc tests (the JDK's
# `jfr`, `java` and `javac`, Go's `go tool pprof` and PyPI's opentelemetry-proto are required: they judge
# what we write) and the loom models of the buffer protocols. The README and CI run exactly this. Besides those judges
# it needs only cargo (rustup's toolchain), bash 5.1+, python3 and coreutils.
#
# Same tests as `cargo test --workspace --no-fail-fast` followed by the loom models, arranged to
# finish sooner on a small machine:
#   - one `cargo test --no-run` builds every test binary;
#   - the test binaries run TEST_JOBS at a time (default: the number of CPUs), longest first
#     (durations of the previous run, in target/test-durations.txt): most of them wait on
#     flushes, child processes and JVMs, so one at a time left the CPUs idle half the run;
#   - the loom build (its own target dir: RUSTFLAGS differ) runs at the lowest priority from the
#     start, so it only takes CPU time the other work leaves idle.
# Every binary's full output is kept in target/test-logs/; a failing binary's output is printed.
# A failure anywhere (build, a test, the doc tests, the loom models) never stops the rest, and
# makes the script exit 1 at the end, after a summary. Exit 2: a judge (JDK tool, Go, opentelemetry-proto) is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

for tool in java javac jfr; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "error: '$tool' is missing; install a JDK 17+ (e.g. apt-get install -y openjdk-17-jdk-headless)" >&2
        exit 2
    fi
done
# `go tool pprof` judges `recorder dump --format pprof` (cli/tests).
if ! command -v go >/dev/null 2>&1; then
    echo "error: 'go' is missing; install Go (e.g. apt-get install -y golang-go): go tool pprof reads our pprof output" >&2
    exit 2
fi
# PyPI's opentelemetry-proto judges `recorder dump --format otlp` (cli/tests/cli_otlp.rs).
if ! python3 -c 'import opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2' >/dev/null 2>&1; then
    echo "error: python3 with opentelemetry-proto is missing (pip install opentelemetry-proto==1.45.2): it decodes our OTLP output" >&2
    exit 2
fi
if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
    echo "error: scripts/test.sh needs bash 5.1 or later (wait -n -p); this is $BASH_VERSION" >&2
    exit 2
fi

parallel=${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
logs=target/test-logs
durations=target/test-durations.txt
rm -rf "$logs"
mkdir -p "$logs"
started=$EPOCHREALTIME
failed=()

elapsed() { # seconds since $1, one decimal
    local now=$EPOCHREALTIME
    awk -v a="$1" -v b="$now" 'BEGIN { printf "%.1f", b - a }'
}
counts() { # the libtest summaries of a log, added up
    awk '/^test result:/ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^(passed|failed|ignored);?$/) n[$(i + 1)] += $i }
        END { printf "%d passed, %d failed, %d ignored", n["passed;"], n["failed;"], n["ignored;"] }' "$1"
}

# --- loom build, in the background at the lowest priority -----------------------------------
# loom models run the shipped buffer code under a permutation checker. RUSTFLAGS replace the
# `build.rustflags` of .cargo/config.toml, hence the separate target dir (the normal build cache
# stays valid). No debug info: nobody debugs these binaries, and it is a third of their build.
# At nice 19 this build only gets CPU time the rest leaves idle; whatever is left of it when the
# tests are done is finished at normal priority (a busy machine would starve it forever).
loom_env=(RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
    CARGO_TARGET_DIR=target/loom CARGO_PROFILE_RELEASE_DEBUG=false)
loom_command="RUSTFLAGS='--cfg loom' CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release"
loom_build_pid=
if compgen -G "loom-tests/tests/*.rs" >/dev/null; then
    set -m # its own process group, so that it can be stopped with its rustc processes
    env "${loom_env[@]}" nice -n 19 cargo test -p loom-tests --release --no-run >"$logs/loom-build.log" 2>&1 &
    loom_build_pid=$!
    set +m
fi

# --- build every test binary -----------------------------------------------------------------
echo "== building the tests (cargo test --workspace --no-run)"
if ! cargo test --workspace --no-fail-fast --no-run --message-format=json-render-diagnostics >"$logs/artifacts.json"; then
    failed+=("build: cargo test --workspace --no-run (the binaries that built still run)")
fi

# One job per test binary: "label<TAB>package<TAB>cargo target selector<TAB>dir<TAB>executable".
jobs=()
while IFS= read -r line; do
    field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" <<<"$line"; }
    manifest=$(field manifest_path)
    exe=$(field executable)
    src=$(field src_path)
    name=$(field name)
    dir=${manifest%/Cargo.toml}
    package=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$manifest" | head -1)
    case "$line" in
    *'"kind":["lib"]'* | *'"kind":["rlib"]'*) selector=--lib ;;
    *'"kind":["bin"]'*) selector="--bin $name" ;;
    *'"kind":["example"]'*) selector="--example $name" ;;
    *'"kind":["bench"]'*) selector="--bench $name" ;;
    *) selector="--test $name" ;;
    esac
    jobs+=("${src#"$root"/}"$'\t'"$package"$'\t'"$selector"$'\t'"$dir"$'\t'"$exe")
done < <(grep '"reason":"compiler-artifact"' "$logs/artifacts.json" | grep '"executable":"' | grep '"profile":{[^}]*"test":true')
jobs+=("doc tests"$'\t'"workspace"$'\t'"--doc"$'\t'"$root"$'\t'"")

# Longest first by the previous run's durations; binaries without one (new, or a first run)
# first of all, in cargo's order.
declare -A previous=()
if [[ -f $durations ]]; then
    while IFS=$'\t' read -r seconds label; do previous[$label]=$seconds; done <"$durations"
fi
ordered=()
while IFS= read -r job; do ordered+=("${job#*$'\t'}"); done < <(
    i=0
    for job in "${jobs[@]}"; do
        label=${job%%$'\t'*}
        printf '%s\t%05d\t%s\n' "${previous[$label]:-999999}" "$i" "$job"
        i=$((i + 1))
    done | sort -t$'\t' -k1,1gr -k2,2n | cut -f2-
)

run_job() { # label package selector dir exe
    local label=$1 dir=$4 exe=$5
    if [[ $3 == --doc ]]; then
        cargo test --workspace --doc --no-fail-fast
    else
        # What cargo test does for a test binary: the package root as working directory.
        cd "$dir" && CARGO_MANIFEST_DIR=$dir "$exe"
    fi
}

echo "== running ${#ordered[@]} test binaries, $parallel at a time (full output: $logs/)"
declare -A running=() job_started=()
: >"$logs/durations.new"
finish_one() {
    local pid rc=0
    wait -n -p pid "${!running[@]}" || rc=$?
    local job=${running[$pid]}
    unset "running[$pid]"
    IFS=$'\t' read -r _ label package selector dir exe <<<"$job"
    local seconds log="$logs/$(tr '/ ' '__' <<<"$label").log"
    seconds=$(elapsed "${job_started[$pid]}")
    printf '%s\t%s\n' "$seconds" "$label" >>"$logs/durations.new"
    if ((rc == 0)); then
        printf 'ok     %6s s  %-40s %s\n' "$seconds" "$label" "$(counts "$log")"
    else
        printf '\n---- FAILED: %s (exit %s, %s s) ----\n' "$label" "$rc" "$seconds"
        cat "$log"
        printf -- '---- end of %s ----\n\n' "$label"
        if [[ $selector == --doc ]]; then
            failed+=("$label: cargo test --workspace --doc")
        else
            failed+=("$label: cargo test -p $package $selector")
        fi
    fi
}
n=0
for job in "${ordered[@]}"; do
    while ((${#running[@]} >= parallel)); do finish_one; done
    IFS=$'\t' read -r label package selector dir exe <<<"$job"
    log="$logs/$(tr '/ ' '__' <<<"$label").log"
    run_job "$label" "$package" "$selector" "$dir" "$exe" >"$log" 2>&1 &
    running[$!]="$n"$'\t'"$job"
    job_started[$!]=$EPOCHREALTIME
    n=$((n + 1))
done
while ((${#running[@]} > 0)); do finish_one; done
# This run's durations replace the previous ones; binaries that did not run keep theirs.
cat "$logs/durations.new" "$durations" 2>/dev/null | sort -t$'\t' -k2,2 -u -s >"$durations.tmp" &&
    mv "$durations.tmp" "$durations"

# --- loom models -----------------------------------------------------------------------------
if [[ -n $loom_build_pid ]]; then
    echo "== loom models ($loom_command)"
    # Cargo stops cleanly on SIGINT and keeps every crate it finished.
    kill -INT -- "-$loom_build_pid" 2>/dev/null
    wait "$loom_build_pid" 2>/dev/null
    loom_started=$EPOCHREALTIME
    if env "${loom_env[@]}" cargo test -p loom-tests --release >"$logs/loom.log" 2>&1; then
        printf 'ok     %6s s  %-40s %s\n' "$(elapsed "$loom_started")" "loom models (rest of build, run)" "$(counts "$logs/loom.log")"
    else
        printf '\n---- FAILED: loom models ----\n'
        cat "$logs/loom.log"
        failed+=("loom models: $loom_command")
    fi
fi

echo
if ((${#failed[@]} > 0)); then
    echo "== FAILED after $(elapsed "$started") s; rerun one with:"
    printf '   %s\n' "${failed[@]}"
    exit 1
fi
echo "== all tests passed in $(elapsed "$started") s"
