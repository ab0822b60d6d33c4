#!/usr/bin/env bash
# The Python suite under every other CPython kiln._C was built for
# (<build>/python3XY/, KILN_EXTRA_PYTHONS: 3.10, 3.12, 3.13), one after the
# other, each version's output in <build>/python3XY/pytest.log. `make test`
# runs it beside the 3.11 suite (which leaves one of the two cores idle).
# torch's CPU wheel on this registry is for 3.11 only, so these runs have
# no torch: the zoo and the torch tests skip themselves (tests/python/conftest.py).
# The generated-program differential runs 1,000 seeds per version here
# (4,000 on 3.11; the 20,000-per-version runs are by hand: RESULTS.md), so
# that `make test` stays within its 30 minutes.
set -uo pipefail
export KILN_PROGEN_PROGRAMS=${KILN_PROGEN_PROGRAMS:-1000}
build=${1:-build}
repo=$(cd "$(dirname "$0")/.." && pwd)
status=0
ran=()
build=$(cd "$build" && pwd)  # absolute: each run starts in tests/python
for dir in "$build"/python3[0-9]*/; do
  dir=${dir%/}
  py="$dir/python"
  [ -x "$py" ] || continue
  ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if (cd "$repo/tests/python" && PYTHONPATH="$dir" "$py" -m pytest -q -p no:cacheprovider \
        >"$dir/pytest.log" 2>&1); then
    ran+=("$ver: $(tail -1 "$dir/pytest.log")")
  else
    ran+=("$ver: FAILED (see $dir/pytest.log)")
    tail -40 "$dir/pytest.log"
    status=1
  fi
  # The frontend's fuzz target (make fuzz runs it on 3.11), where kiln compiles.
  if PYTHONPATH="$dir" "$py" -c 'import kiln, sys; sys.exit(not kiln._compile.VERSION_SUPPORTED)'; then
    if PYTHONPATH="$dir" "$py" "$repo/tests/fuzz/fuzz_frontend.py" --seconds "${FUZZ_SECONDS:-10}" \
        --artifacts "$dir/fuzz-artifacts" >"$dir/fuzz.log" 2>&1; then
      ran+=("$ver fuzz_frontend: $(tail -1 "$dir/fuzz.log")")
    else
      ran+=("$ver fuzz_frontend: FAILED (see $dir/fuzz.log)")
      tail -40 "$dir/fuzz.log"
      status=1
    fi
  fi
done
if ((${#ran[@]} == 0)); then
  echo "run_versions: no other CPython was built for (scripts/pythons.sh found none)"
fi
for line in "${ran[@]}"; do echo "python $line"; done
exit $status
