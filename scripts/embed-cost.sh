#!/usr/bin/env bash
# What embedding the library costs: a cold `cargo build --release` of a minimal application that
# depends on `recorder` by path (its own target directory, the workspace's Cargo.lock and
# .cargo/config.toml, as a user who follows the README has). Prints the crates compiled, the wall
# time and the CPU time (user + system, of cargo and every compiler it ran: less sensitive to other
# load than wall time) for each recorder source tree given, one after the other, so that trees
# compare on the same machine in the same run.
#
# Usage: scripts/embed-cost.sh [RECORDER_DIR...]     (default: this checkout)
#   e.g. git archive OLD | tar -x -C /tmp/old && scripts/embed-cost.sh /tmp/old .
# Environment: EMBED_FEATURES (features of recorder to enable, e.g. zstd; default none).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -gt 0 ]] || set -- "$PWD"
[[ -x /usr/bin/time ]] || { echo "embed-cost: needs GNU time (/usr/bin/time; apt-get install time)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-40s %8s %10s %10s\n' "recorder tree" "crates" "wall (s)" "cpu (s)"
for tree in "$@"; do
    tree=$(cd "$tree" && pwd)
    app="$work/app-$(basename "$tree")-$RANDOM"
    mkdir -p "$app/src" "$app/.cargo"
    features=""
    [[ -n "${EMBED_FEATURES:-}" ]] && features=", features = [\"${EMBED_FEATURES//,/\", \"}\"]"
    cat >"$app/Cargo.toml" <<TOML
[package]
name = "embed-probe"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
recorder = { path = "$tree"$features }

[workspace]
TOML
    cat >"$app/src/main.rs" <<'RUST'
recorder::event! {
    #[event(name = "probe.Hello", label = "Hello")]
    pub struct Hello { pub n: u64 }
}

fn main() -> Result<(), recorder::Error> {
    use recorder::Event;
    let rec = recorder::Recorder::builder().start()?;
    Hello { n: 1 }.commit();
    rec.stop()?;
    Ok(())
}
RUST
    cp "$tree/Cargo.lock" "$app/Cargo.lock"
    [[ -f "$tree/.cargo/config.toml" ]] && cp "$tree/.cargo/config.toml" "$app/.cargo/config.toml"
    start=$(date +%s%N)
    if ! log=$(cd "$app" && CARGO_TARGET_DIR="$app/target" /usr/bin/time -f 'cpu-seconds %U %S' cargo build --release 2>&1); then
        echo "$log" >&2
        exit 2
    fi
    end=$(date +%s%N)
    crates=$(grep -c '^ *Compiling ' <<<"$log" || true)
    cpu=$(awk '/^cpu-seconds/ { print $2 + $3 }' <<<"$log")
    awk -v t="$tree" -v c="$crates" -v ns="$((end - start))" -v cpu="$cpu" \
        'BEGIN { printf "%-40s %8d %10.1f %10.1f\n", t, c, ns / 1e9, cpu }'
done
