#!/usr/bin/env bash
# `make demo`: kiln compiles a real model (examples/demo_model.kbc: three
# MLP blocks with LayerNorm, 150k parameters) and shows what it captured,
# where and why the graph broke, and its speed against eager.
set -euo pipefail
BUILD=${1:-build}
KILN="$BUILD/kiln"
MODEL=examples/demo_model.kbc
cd "$(dirname "$0")/.."

echo "== kiln demo: $MODEL =="
echo
echo "-- on the reference VM (eager kernels, interpreted) --"
"$KILN" run "$MODEL"
echo
echo "-- compiled: the same output, exactly --"
"$KILN" run --compile "$MODEL"
echo
echo "-- what the tracer captured (kiln run --explain) --"
"$KILN" run "$MODEL" --setup setup --entry step --explain
echo
echo "-- speed against eager --"
"$KILN" run "$MODEL" --setup setup --entry forward --time 200
echo "(the eager backend runs the same kernels as eager mode, so compiling"
echo " only removes interpretation and dispatch here; fused native kernels"
echo " come with the LLVM backend)"
