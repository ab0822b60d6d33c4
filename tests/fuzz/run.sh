#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each, one after the other, from the
# checked-in corpus, and fails on the first crash, sanitizer report or
# broken invariant (the input is kept under BUILD/fuzz-artifacts/TARGET/).
#
#   tests/fuzz/run.sh BUILD SECONDS [TARGET...]     (make fuzz / make test)
#
# The libFuzzer targets are BUILD/tests/fuzz/fuzz_* (cmake/fuzz.cmake); the
# frontend target is tests/fuzz/fuzz_frontend.py on the Python package of the
# main build. New inputs a run finds go to BUILD/fuzz-corpus/TARGET (kept
# between runs, never checked in); a crash found becomes a regression program
# in tests/corpus (tests/fuzz/README.md). FUZZ_NICE (default 10) is the nice
# level, FUZZ_PYTHON the Python for the frontend target (default python3).
set -euo pipefail
BUILD=${1:?usage: run.sh BUILD SECONDS [TARGET...]}
SECONDS_EACH=${2:?usage: run.sh BUILD SECONDS [TARGET...]}
shift 2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ALL=(census_test fuzz_kbc_text fuzz_vm fuzz_compile_eager fuzz_compile_llvm fuzz_collective_codec fuzz_compile_cache fuzz_frontend)
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=("${ALL[@]}")
NICE=${FUZZ_NICE:-10}

# KBC text targets start from every program of the repository
# (kbc_seeds.sh); the binary ones from their own seeds (tests/fuzz/seeds/
# TARGET, written by the target itself: KILN_FUZZ_WRITE_SEEDS in its source).
source "$ROOT/tests/fuzz/kbc_seeds.sh"

status=0
for t in "${TARGETS[@]}"; do
  log="$BUILD/fuzz-logs/$t.log"
  mkdir -p "$BUILD/fuzz-logs" "$BUILD/fuzz-corpus/$t" "$BUILD/fuzz-artifacts/$t"
  start=$(date +%s)
  if [ "$t" = census_test ]; then
    # The census's tests and the corpus leak check (census_test.cpp): not
    # timed, the same work every run; CENSUS_LLVM=1 adds the llvm backend.
    exe="$BUILD/tests/fuzz/census_test"
    [ -x "$exe" ] || { echo "fuzz: $exe is missing (build $BUILD first)"; exit 2; }
    set +e
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} nice -n "$NICE" "$exe" "$ROOT" ${CENSUS_LLVM:+--llvm} >"$log" 2>&1
    rc=$?
    set -e
    summary=$(tail -n 1 "$log")
  elif [ "$t" = fuzz_frontend ]; then
    set +e
    nice -n "$NICE" "${FUZZ_PYTHON:-python3}" "$ROOT/tests/fuzz/fuzz_frontend.py" --seconds "$SECONDS_EACH" \
      --artifacts "$BUILD/fuzz-artifacts/$t" >"$log" 2>&1
    rc=$?
    set -e
    summary=$(tail -n 1 "$log")
  else
    exe="$BUILD/tests/fuzz/$t"
    [ -x "$exe" ] || { echo "fuzz: $exe is missing (build $BUILD first)"; exit 2; }
    # Targets that run programs check leaks with the object census
    # (runtime/semantics/census.h, fuzz_common.h check_leaks), not LeakSanitizer: a
    # program's own reference cycle (`self.me = self`) is never freed by
    # kiln's reference counting (no cycle collector), and LeakSanitizer
    # cannot tell it from kiln's own leaks; the census can (and frees the
    # cycles now and then). Every other target runs under LeakSanitizer.
    leaks=1
    case $t in
      fuzz_collective_codec | fuzz_compile_cache) seeds=("$ROOT/tests/fuzz/seeds/$t"); max_len=4096 ;;
      fuzz_kbc_text) seeds=("${kbc_seeds[@]}"); max_len=16384 ;;
      *) seeds=("${kbc_seeds[@]}"); max_len=16384; leaks=0 ;;
    esac
    set +e
    # -timeout: one input may take this long (the llvm target compiles);
    # the step budget stops programs long before (runtime/base/budget.h).
    # (LeakSanitizer's own check at exit too, not only libFuzzer's per input.)
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=$leaks:allocator_may_return_null=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
      nice -n "$NICE" "$exe" -max_total_time="$SECONDS_EACH" -timeout=60 -rss_limit_mb=3072 -max_len="$max_len" \
      -detect_leaks="$leaks" -print_final_stats=1 -artifact_prefix="$BUILD/fuzz-artifacts/$t/" \
      "$BUILD/fuzz-corpus/$t" "${seeds[@]}" >"$log" 2>&1
    rc=$?
    set -e
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || echo '?')
    summary="$runs executions, $cov coverage edges"
  fi
  took=$(($(date +%s) - start))
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $t FAILED after ${took}s (exit $rc); log: $log"
    grep -E 'ERROR|invariant|SUMMARY|Test unit written|artifact' "$log" | head -n 20 || true
    status=1
  else
    echo "fuzz: $t ok in ${took}s: $summary"
  fi
done
exit $status
