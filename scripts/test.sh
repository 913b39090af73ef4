#!/usr/bin/env bash
# Runs every test of the project: the workspace's unit and integration tests (the JDK's `jfr`,
# `java` and `javac` are required: they judge what we write) and the loom models of the buffer
# protocols. The README and CI run exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

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

cargo test --workspace --no-fail-fast

# loom models run the shipped buffer code under a permutation checker; a separate target dir keeps
# the normal build cache when RUSTFLAGS change.
if compgen -G "loom-tests/tests/*.rs" >/dev/null; then
    RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" \
        CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release
fi
