#!/usr/bin/env bash
# Under mpirun, kiln refuses an MPI plugin it cannot use: every rank stops
# with an error that names the file and why (dlerror or the ABI), within a
# time limit, and no rank goes on as a single rank.
#
#   test_plugin_refused.sh MPIEXEC KILN_MPI_TESTS NOT_A_PLUGIN_SO WRONG_ABI_SO WORK_DIR
set -uo pipefail
MPIEXEC=$1 EXE=$2 NOT_PLUGIN=$3 WRONG_ABI=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK"
# Every rank runs to its end even after one exits non-zero (Open MPI would
# kill the rest): each must report the refusal itself, and a rank that went
# on alone would show. mpirun then exits 0 whatever the ranks did, so each
# rank's own exit status is printed by a wrapper.
export OMPI_MCA_orte_abort_on_non_zero_status=0
printf 'not a shared library\n' >"$WORK/libkiln_mpi.so"
failures=0

# expect NAME PLUGIN_PATH PATTERN...: both ranks exit non-zero, and each of
# the patterns appears once per rank (grep -F: the paths hold dots).
expect() {
  local name=$1 plugin=$2; shift 2
  local out rc
  out=$(KILN_MPI_PLUGIN=$plugin timeout 60 "$MPIEXEC" -np 2 --oversubscribe --bind-to none \
        sh -c '"$0" gather; echo "rank exited $?"' "$EXE" 2>&1)
  rc=$?
  local bad=""
  [[ $rc -eq 124 ]] && bad="timed out (a hang)"
  n=$(grep -c "^rank exited [1-9]" <<<"$out")
  [[ $n -eq 2 ]] || bad+="${bad:+; }$n rank(s) exited non-zero, not 2"
  for p in "$@" "init(): OMPI_COMM_WORLD_SIZE is set"; do
    n=$(grep -cF -- "$p" <<<"$out")
    [[ $n -eq 2 ]] || bad+="${bad:+; }'$p' in $n rank(s)' output, not 2"
  done
  if grep -q "gather: PASS" <<<"$out"; then bad+="${bad:+; }a rank passed"; fi
  if [[ -n $bad ]]; then
    echo "FAIL $name: $bad (exit $rc). Output:"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok   $name: every rank refused it: $(grep -m1 -o "loading.*\|'.*' is .*" <<<"$out" | head -c 300)"
  fi
}

expect "a missing plugin" "$WORK/missing/libkiln_mpi.so" \
  "loading the MPI plugin '$WORK/missing/libkiln_mpi.so' failed: " "cannot open shared object file"
expect "a file that is not a library" "$WORK/libkiln_mpi.so" \
  "loading the MPI plugin '$WORK/libkiln_mpi.so' failed: $WORK/libkiln_mpi.so: " 
expect "a library that is not a plugin" "$NOT_PLUGIN" \
  "'$NOT_PLUGIN' is not a kiln MPI plugin (dlsym kiln_mpi_plugin: " "undefined symbol: kiln_mpi_plugin"
expect "a plugin of another ABI" "$WRONG_ABI" \
  "the MPI plugin '$WRONG_ABI' is of ABI " "it comes from another kiln build"
echo "$((4 - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
