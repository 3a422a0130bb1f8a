#!/usr/bin/env bash
# Prints codeloop's performance figures (DESIGN.md §7): start-up, a headless two-turn tool round trip
# (wall time, peak RSS, time to first request, first request size), streamed deltas through the processor
# and store, SSE decoding, per-turn overhead as history grows, and session load at 10 000 parts.
# Usage: scripts/bench.sh [--quick]   (needs python3; builds release binaries first)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=${1:-}
measure="--warm-up-time 1 --measurement-time 5"
[ "$quick" = "--quick" ] && measure="--warm-up-time 1 --measurement-time 2"

echo "== building release binaries"
cargo build --release -q -p codeloop-cli -p codeloop-testkit

echo "== process figures (codeloop CLI against the fake provider on 127.0.0.1)"
python3 scripts/bench_cli.py target/release/codeloop target/release/codeloop-fake-provider

echo "== criterion benches"
cargo bench -q -p codeloop-core --bench processor -- $measure 2>/dev/null | grep -E 'time:|thrpt:|^processor' || true
cargo bench -q -p codeloop-core --bench turn -- $measure 2>/dev/null | grep -E 'time:|^turn' || true
cargo bench -q -p codeloop-provider --bench decode -- $measure 2>/dev/null | grep -E 'time:|thrpt:|^decode' || true
cargo bench -q -p codeloop-store --bench persist -- $measure 2>/dev/null | grep -E 'time:|thrpt:|^[a-z_]+/' || true
