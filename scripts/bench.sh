#!/usr/bin/env bash
# Prints codeloop's performance figures (DESIGN.md §7): start-up, a headless two-turn tool round trip
# (wall time, peak RSS, time to first request, first request size), streamed deltas through the processor
# and store, SSE decoding, per-turn overhead as history grows, session load at 10 000 parts, and (with PostgreSQL
# installed) several `serve` workers on one store: runs/s, failover after a kill, cost per step vs SQLite.
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

echo "== telemetry overhead (off, live collector, refused, silent collector)"
python3 scripts/bench_telemetry.py target/release/codeloop target/release/codeloop-fake-provider

echo "== one serve over many short runs (RSS, fds, threads, store bytes per session)"
if [ "$quick" = "--quick" ]; then python3 scripts/bench_soak.py target/release/codeloop target/release/codeloop-fake-provider 1000
else python3 scripts/bench_soak.py target/release/codeloop target/release/codeloop-fake-provider 3000; fi

if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null; then
  echo "== several serve workers on one PostgreSQL store (throughput, failover, cost per step vs SQLite)"
  if [ "$quick" = "--quick" ]; then python3 scripts/bench_workers.py --leases 5 --failover-trials 1 --step-runs 3
  else python3 scripts/bench_workers.py; fi
else
  echo "== several serve workers: skipped (no PostgreSQL binaries; apt-get install -y postgresql)"
fi

echo "== criterion benches"
cargo bench -q -p codeloop-core --bench processor -- $measure 2>/dev/null | grep -E 'time:|thrpt:|^processor' || true
cargo bench -q -p codeloop-core --bench turn -- $measure 2>/dev/null | grep -E 'time:|^turn' || true
cargo bench -q -p codeloop-core --bench carried -- $measure 2>/dev/null | grep -E 'time:|^carried' || true
cargo bench -q -p codeloop-provider --bench decode -- $measure 2>/dev/null | grep -E 'time:|thrpt:|^decode' || true
cargo bench -q -p codeloop-store --bench persist -- $measure 2>/dev/null | grep -E 'time:|thrpt:|^[a-z_]+/' || true

echo "== sandbox walls (per call, idle and loaded)"
scripts/bench_sandbox.sh "$quick"
