#!/usr/bin/env bash
# Line coverage that the fuzz corpora reach, per folder of the core.
#
#   tests/fuzz/coverage.sh COV_BUILD FUZZ_BUILD
#
# COV_BUILD is a KILN_FUZZ_COVERAGE tree (cmake/fuzz.cmake; `make
# fuzz-coverage` makes build-fuzz-cov/); every libFuzzer target there runs
# once over each input of its corpus (FUZZ_BUILD/fuzz-corpus/TARGET, what
# the fuzz runs kept, plus the checked-in seeds) with -runs=0, and
# llvm-cov reports the lines of interpreter/, variables/, output_graph/,
# codegen/ (and runtime/, collectives/) those runs executed, all targets
# together and per target.
set -euo pipefail
COV=${1:?usage: coverage.sh COV_BUILD FUZZ_BUILD}
FUZZ=${2:?usage: coverage.sh COV_BUILD FUZZ_BUILD}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="$COV/coverage"
rm -rf "$OUT"
mkdir -p "$OUT"
source "$ROOT/tests/fuzz/kbc_seeds.sh"
objects=()
for t in fuzz_kbc_text fuzz_vm fuzz_compile_eager fuzz_compile_llvm fuzz_collective_codec fuzz_compile_cache; do
  case $t in
    fuzz_collective_codec | fuzz_compile_cache) seeds=("$ROOT/tests/fuzz/seeds/$t") ;;
    *) seeds=("${kbc_seeds[@]}") ;;
  esac
  dirs=("${seeds[@]}")
  [ -d "$FUZZ/fuzz-corpus/$t" ] && dirs=("$FUZZ/fuzz-corpus/$t" "${dirs[@]}")
  KILN_CACHE_DIR=off KILN_FUZZ_KEEP_GOING=1 LLVM_PROFILE_FILE="$OUT/$t.profraw" \
    "$COV/tests/fuzz/$t" -runs=0 -timeout=60 -rss_limit_mb=4096 "${dirs[@]}" >"$OUT/$t.log" 2>&1 ||
    { echo "coverage: $t failed on its corpus (see $OUT/$t.log)"; exit 1; }
  broken=$(grep -c "kiln fuzz invariant broken" "$OUT/$t.log" || true)
  echo "coverage: $t replayed its corpus; inputs breaking an invariant: $broken"
  llvm-profdata-19 merge -sparse "$OUT/$t.profraw" -o "$OUT/$t.profdata"
  objects+=(-object "$COV/tests/fuzz/$t")
done
llvm-profdata-19 merge -sparse "$OUT"/*.profraw -o "$OUT/all.profdata"
# One object first, the rest with -object (llvm-cov's convention).
first=${objects[1]}
rest=("${objects[@]:2}")
summarize() {  # profdata label objects...
  local prof=$1 label=$2
  shift 2
  llvm-cov-19 export -summary-only -instr-profile "$prof" "$@" |
    python3 -c '
import json, sys, os
root, label = sys.argv[1], sys.argv[2]
folders = ["interpreter", "variables", "output_graph", "codegen", "runtime", "collectives"]
tot = {f: [0, 0] for f in folders}
for fdata in json.load(sys.stdin)["data"][0]["files"]:
    rel = os.path.relpath(fdata["filename"], root)
    top = rel.split(os.sep)[0]
    if top in tot:
        tot[top][0] += fdata["summary"]["lines"]["covered"]
        tot[top][1] += fdata["summary"]["lines"]["count"]
print(label + ": " + ", ".join(f"{f}/ {c}/{n} lines ({100 * c / max(n, 1):.1f}%)" for f, (c, n) in tot.items()))
' "$ROOT" "$label"
}
summarize "$OUT/all.profdata" "all targets" "$first" "${rest[@]}"
for t in fuzz_kbc_text fuzz_vm fuzz_compile_eager fuzz_compile_llvm fuzz_collective_codec fuzz_compile_cache; do
  summarize "$OUT/$t.profdata" "$t" "$COV/tests/fuzz/$t"
done
