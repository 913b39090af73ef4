#!/usr/bin/env bash
# Soak test (not run in CI): records a workload at 1 kHz sampling with 100 000 events per second
# for SOAK_SECONDS (default 600) while a consumer follows the repository the whole time, and
# reports RSS over time (flat after warm-up), the repository size against its retention limit,
# lost events/samples, and whether the consumer saw every event (or the recorder counted it lost).
#
#   SOAK_SECONDS=120 scripts/soak.sh
#
# Settings: SOAK_SECONDS, SOAK_RATE (events/s, default 100000), SOAK_MAX_MB (retention limit,
# default 64), SOAK_JDK=1 to also follow the repository with the JDK's EventStream
# (tests/java/LiveStream.java) and count what it receives.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${SOAK_SECONDS:-600}
RATE=${SOAK_RATE:-100000}
MAX_MB=${SOAK_MAX_MB:-64}
cargo build --release --example soak
BIN=target/release/examples/soak
BASE=$(mktemp -d /tmp/recorder-soak.XXXXXX)
trap 'rm -rf "$BASE"' EXIT
echo "soak: ${SECONDS_TO_RUN}s, ${RATE} events/s, retention ${MAX_MB} MB, repository base $BASE"

"$BIN" consume "$BASE" > "$BASE.consumer.log" 2>&1 &
CONSUMER=$!
JDK_PID=
if [[ "${SOAK_JDK:-0}" == 1 ]]; then
    java tests/java/LiveStream.java "$BASE" soak.Tick seq 2>&1 | grep -c '^EVENT' > "$BASE.jdk.count" &
    JDK_PID=$!
fi

"$BIN" record "$BASE" "$SECONDS_TO_RUN" "$RATE" "$MAX_MB" | tee "$BASE.record.log"
RECORD_STATUS=${PIPESTATUS[0]}

# The consumer ends by itself after the final chunk.
for _ in $(seq 1 600); do
    kill -0 "$CONSUMER" 2>/dev/null || break
    sleep 0.1
done
CONSUMER_STATUS=0
wait "$CONSUMER" || CONSUMER_STATUS=$?
echo "--- consumer ---"
cat "$BASE.consumer.log"
rm -f "$BASE.consumer.log" "$BASE.record.log"
if [[ -n "$JDK_PID" ]]; then
    wait "$JDK_PID" || true
    echo "JDK EventStream received $(cat "$BASE.jdk.count") soak.Tick events"
    rm -f "$BASE.jdk.count"
fi
echo "soak: recorder exit $RECORD_STATUS, consumer exit $CONSUMER_STATUS"
[[ $RECORD_STATUS == 0 && $CONSUMER_STATUS == 0 ]]
