#!/usr/bin/env bash
# `make demo`: until the tracer lands (issue 3), the demo runs a model
# written in KBC on the reference VM and shows its bytecode.
set -euo pipefail
BUILD=${1:-build}
KILN="$BUILD/kiln"
cd "$(dirname "$0")/.."

echo "== kiln demo: examples/mlp.kbc on the KBC VM =="
echo
echo "-- running main() --"
"$KILN" run examples/mlp.kbc
echo
echo "-- disassembly --"
"$KILN" dis examples/mlp.kbc
echo
echo "-- verifier --"
"$KILN" verify examples/mlp.kbc
