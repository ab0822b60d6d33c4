#!/usr/bin/env bash
# The test half of `make sanitize`: every ctest test and the pytest suite on
# a KILN_SANITIZE=ON build tree (cmake/sanitize.cmake), already built.
#
#   tests/sanitize/run.sh [BUILD_DIR [JOBS]]      (default build-asan, nproc)
#
# A report must fail the run even where the test that provoked it passes:
# a test may expect a failing exit status (the CLI's bad-input cases exit
# 1, as a sanitizer does) or swallow stderr. So ASan and LSan write their
# reports to files, one per process that made one (log_path); UBSan, which
# ignores log_path when ASan is in the process too, aborts (SIGABRT, which
# no test expects) and its "runtime error:" lines are read from the full
# logs of ctest and pytest. Every report is printed and counted.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-build-asan}" && pwd)
jobs=${2:-$(nproc)}
reports=$build/sanitizer-reports
rm -rf "$reports" && mkdir -p "$reports"

# Leak detection is on for the C++ tests (LSan); lsan.supp lists the leaks
# that are not kiln's, each with its reason. check_initialization_order:
# kiln registers backends and ops from static initialisers.
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:check_initialization_order=1"
export LSAN_OPTIONS="suppressions=$src/tests/sanitize/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1"

# A sanitized Debug build's C++ frames are several times a Release build's,
# and the VM and the tracer refuse recursion by how much stack is left
# (interpreter/stack_guard.h), not by a count: the same deep-module tests
# would meet a RecursionError that a Release build never does. So the main
# thread gets a 64 MB stack here (the soft limit; threads kiln starts size
# their own).
ulimit -S -s 65536 2>/dev/null || echo "sanitize: could not raise the stack limit; deep-recursion tests may fail" >&2

status=0
# Whole outputs in LastTest.log, passed tests too (ctest keeps only 1 KB of
# a passed test's output by default): the UBSan count reads them.
(cd "$build" && ctest --output-on-failure -j "$jobs" --test-output-size-passed 67108864 --test-output-size-failed 67108864) || status=1

# pytest on the sanitized kiln._C in an uninstrumented python (ASan preloaded,
# no leak detection: see sanitized-python.in). First make sure that it is
# the sanitized kiln that gets imported, not an installed one.
if "$build/sanitized-python" -c "
import sys, kiln._C
sys.exit(0 if kiln._C.__file__.startswith('$build/python-sanitized/') else 'not the sanitized kiln: ' + kiln._C.__file__)"; then
  (cd "$src" && "$build/sanitized-python" -m pytest tests/python -q -p no:cacheprovider) 2>&1 |
    tee "$build/sanitize-pytest.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
  status=1
fi

files=$(find "$reports" -type f | wc -l)
for f in $(find "$reports" -type f | sort); do
  echo "==== $f"
  cat "$f"
done
logs=("$build/Testing/Temporary/LastTest.log" "$build/sanitize-pytest.log")
ub=$(cat "${logs[@]}" 2>/dev/null | grep -c "runtime error:")
[ "$ub" -eq 0 ] || grep -h -A20 "runtime error:" "${logs[@]}"
echo "sanitize: $files ASan/LSan report(s) in $reports, $ub UBSan report(s) in ctest's and pytest's logs"
[ "$files" -eq 0 ] && [ "$ub" -eq 0 ] || status=1
exit $status
