#!/usr/bin/env bash
# Protocol mutation runs of the loom models (loom-tests/README.md): for each mutation of
# src/sampler/buffer.rs, src/flush, src/tracing/live.rs or src/alloc/pool.rs (`--cfg recorder_mutation="NAME"`: one
# protocol step weakened on purpose), builds the models and checks that every model the README's table names for it FAILS, i.e. that
# the models catch a broken *shipped* protocol. Not part of scripts/test.sh: each mutation is a
# separate release build with its own `--cfg` (so of every dependency too), kept in
# target/loom-mutation/NAME (about 0.6 GB each) so that reruns only rebuild what changed.
#
#   bash scripts/loom-mutations.sh            # the table's expectations, all mutations
#   bash scripts/loom-mutations.sh pos_relaxed
#   bash scripts/loom-mutations.sh --all      # every model under every mutation (for the table)
set -uo pipefail
cd "$(dirname "$0")/.."

# mutation -> the models that must fail with it (file::test).
declare -A CATCH=(
    [pos_relaxed]="sampler_buffers::commit_vs_active_pass sampler_buffers::recycle_vs_reuse sampler_buffers::rotation_vs_active_pass_and_recorder sampler_buffers::thread_exit_vs_flusher sampler_fragments::fragments_vs_flusher_and_recorder chunk_segments::recorder_vs_flush_on_the_shipped_chunk_writer chunk_segments::recorder_vs_rotation_on_the_shipped_chunk_writer"
    [refill_cas_relaxed]="sampler_buffers::recycle_vs_reuse sampler_buffers::refill_publishes_the_recycled_buffer sampler_buffers::rotation_vs_active_pass_and_recorder sampler_fragments::fragments_vs_flusher_and_recorder chunk_segments::recorder_vs_rotation_on_the_shipped_chunk_writer"
    [drain_without_gating]="sampler_buffers::recycle_vs_reuse sampler_buffers::rotation_vs_active_pass_and_recorder sampler_fragments::fragments_vs_flusher_and_recorder"
    [retire_without_gate]="sampler_lifecycle::retire_on_behalf_vs_handler_two_records sampler_lifecycle::retire_on_behalf_vs_handler_one_record"
    [claim_relaxed]="sampler_lifecycle::stale_handler_vs_reap_and_claim"
    [push_relaxed]="sampler_buffers::no_lost_wakeup sampler_buffers::rotation_vs_active_pass_and_recorder sampler_buffers::recycle_vs_reuse sampler_buffers::two_producers_on_full_queue sampler_buffers::thread_exit_vs_flusher sampler_fragments::fragments_vs_flusher_and_recorder chunk_segments::recorder_vs_rotation_on_the_shipped_chunk_writer"
    [span_publish_relaxed]="span_table::publication_vs_lookup_and_record"
    [span_cache_unchecked]="span_table::a_stale_cache_entry_never_passes_for_the_span_that_reuses_its_id_and_slot"
    [pool_reserve_unused]="alloc_pool::a_full_base_overflows_into_the_reserve_and_every_record_is_drained"
    [pool_drain_base_only]="alloc_pool::a_full_base_overflows_into_the_reserve_and_every_record_is_drained"
    [settings_thread_unreferenced]="chunk_segments::rotation_vs_commits_on_the_shipped_chunk_writer chunk_segments::recorder_vs_flush_on_the_shipped_chunk_writer chunk_segments::recorder_vs_rotation_on_the_shipped_chunk_writer"
)
FILES="sampler_buffers sampler_fragments sampler_lifecycle chunk_segments sampler_chunks event_buffer span_table alloc_pool"
# Per model; a model that neither fails nor finishes in this time is reported as such.
PER_MODEL_TIMEOUT="${PER_MODEL_TIMEOUT:-600}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"

all=0
mutations=()
for a in "$@"; do
    case "$a" in
        --all) all=1 ;;
        *) mutations+=("$a") ;;
    esac
done
if [ ${#mutations[@]} -eq 0 ]; then
    mutations=(pos_relaxed refill_cas_relaxed drain_without_gating retire_without_gate claim_relaxed push_relaxed
        settings_thread_unreferenced span_publish_relaxed span_cache_unchecked pool_reserve_unused pool_drain_base_only)
fi

# Runs one model; prints "FAILS: <first panic>", "passes" or "timeout".
run_model() {
    local file=$1 test=$2 log
    log=$(timeout "$PER_MODEL_TIMEOUT" cargo test -q -p loom-tests --release --test "$file" -- --exact "$test" 2>&1)
    local rc=$?
    if [ $rc -eq 124 ]; then
        echo "timeout (${PER_MODEL_TIMEOUT}s)"
    elif [ $rc -eq 0 ]; then
        echo "passes"
    else
        echo "FAILS: $(grep -m1 -A1 'panicked at' <<<"$log" | tail -1 | cut -c1-150)"
    fi
}

status=0
for m in "${mutations[@]}"; do
    if [ -z "${CATCH[$m]+x}" ]; then
        echo "unknown mutation: $m" >&2
        exit 2
    fi
    echo "== mutation $m"
    export RUSTFLAGS="--cfg loom --cfg recorder_mutation=\"$m\""
    export CARGO_TARGET_DIR="target/loom-mutation/$m"
    if ! cargo test -q -p loom-tests --release --no-run 2>/dev/null; then
        echo "build failed" >&2
        exit 2
    fi
    if [ $all -eq 1 ]; then
        for file in $FILES; do
            for test in $(cargo test -q -p loom-tests --release --test "$file" -- --list 2>/dev/null | sed -n 's/: test$//p'); do
                printf '  %-70s %s\n' "$file::$test" "$(run_model "$file" "$test")"
            done
        done
    else
        for entry in ${CATCH[$m]}; do
            verdict=$(run_model "${entry%%::*}" "${entry##*::}")
            printf '  %-70s %s\n' "$entry" "$verdict"
            case "$verdict" in
                FAILS*) ;;
                *) status=1; echo "  ^ NOT CAUGHT: this model must fail under $m" ;;
            esac
        done
    fi
done
[ $status -eq 0 ] && echo "every mutation was caught by the models the table names"
exit $status
