#!/usr/bin/env bash
# What each wall of the sandbox adds to a call (DESIGN.md §7: ≤ 5 ms with every wall), idle and with
# both cores busy: the criterion bench `codeloop-sandbox/benches/overhead.rs` (spawn and wait for `true`
# directly, through the subreaper, walled without and with the pids cgroup, network closed, overlays and
# masks), printed as one median per line.
# Usage: scripts/bench_sandbox.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
measure="--warm-up-time 1 --measurement-time 5"
[ "${1:-}" = "--quick" ] && measure="--warm-up-time 1 --measurement-time 2"

run() {
  cargo bench -q -p codeloop-sandbox --bench overhead -- $measure 2>/dev/null \
    | awk '/^spawn_true\// { name = $1 }
           /time:/ { for (i = 1; i <= NF; i++) if ($i == "time:") printf "  %-44s %s %s\n", name, $(i + 3), $(i + 4) }'
}

cargo bench -q -p codeloop-sandbox --bench overhead --no-run 2>/dev/null
echo "== sandbox walls, idle (median per call)"
run
echo "== sandbox walls, both cores busy (median per call)"
loads=()
for _ in 1 2; do
  sh -c 'while :; do :; done' &
  loads+=($!)
done
trap 'kill "${loads[@]}" 2>/dev/null || true' EXIT
run
kill "${loads[@]}" 2>/dev/null || true
trap - EXIT

echo "== a bash call through codeloop, walled against mode off (release binaries)"
cargo build --release -q -p codeloop-cli -p codeloop-testkit
python3 scripts/bench_bash_calls.py target/release/codeloop target/release/codeloop-fake-provider
python3 scripts/bench_bash_calls.py target/release/codeloop target/release/codeloop-fake-provider --loaded
