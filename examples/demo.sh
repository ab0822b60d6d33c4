#!/usr/bin/env bash
# `make demo`: kiln compiles a real model (examples/demo_model.kbc: three
# MLP blocks with LayerNorm, 150k parameters) and shows what it captured,
# where and why the graph broke, and its speed against eager; then kiln.nn
# models from Python, and library models (torchvision, transformers) beside
# torch eager and torch.compile.
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
echo "-- compiled (llvm backend): the same output up to float32 rounding --"
"$KILN" run --compile "$MODEL"
echo
echo "-- what the tracer captured (kiln run --explain) --"
"$KILN" run "$MODEL" --setup setup --entry step --explain
echo
echo "-- speed against eager --"
"$KILN" run "$MODEL" --setup setup --entry forward --time 200
echo "(compiled with the llvm backend: fused native kernels and BLAS; the"
echo " eager backend, the reference, runs the VM's own kernels:)"
"$KILN" run "$MODEL" --setup setup --entry forward --time 200 --backend eager
echo
echo "-- the kernels the llvm backend made (KILN_LOGS=output_code) --"
KILN_LOGS=output_code "$KILN" run --compile "$MODEL" 2>&1 | grep -E "llvm backend|^kernel_|^gemm|^eager|^arena" || true
echo
echo "== the same from Python: kiln.nn models compiled with kiln.compile (python3 -m kiln.demo) =="
python3 -m kiln.demo
echo
echo "== models as their libraries build them: torchvision ResNet-18 and transformers GPT-2, beside eager and torch.compile (examples/library_demo.py) =="
python3 examples/library_demo.py
