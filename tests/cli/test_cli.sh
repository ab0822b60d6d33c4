#!/usr/bin/env bash
# The kiln CLI: exit codes and one-line errors. Usage: test_cli.sh KILN SRC_DIR
set -u
KILN=$1
SRC=$2
fails=0
pass=0
check() {  # check NAME EXPECTED_STATUS STDERR_PATTERN CMD...
  local name=$1 want=$2 pattern=$3
  shift 3
  local err out status
  err=$(mktemp)
  out=$("$@" 2>"$err")
  status=$?
  local lines
  lines=$(wc -l <"$err")
  if [ "$status" -ne "$want" ]; then
    echo "FAIL $name: exit $status, want $want"; fails=$((fails + 1))
  elif [ -n "$pattern" ] && ! grep -q -- "$pattern" "$err"; then
    echo "FAIL $name: stderr lacks '$pattern':"; cat "$err"; fails=$((fails + 1))
  elif [ "$want" -ne 0 ] && [ "$name" != "runtime error has a traceback" ] && [ "$lines" -ne 1 ]; then
    echo "FAIL $name: want a one-line error, got $lines lines:"; cat "$err"; fails=$((fails + 1))
  else
    pass=$((pass + 1))
  fi
  rm -f "$err"
  LAST_OUT=$out
}
tmp=$(mktemp -d)
printf '.func main(a, b=2)\n    LOAD_FAST a\n    LOAD_FAST b\n    BINARY_OP +\n    RETURN_VALUE\n.end\n' >"$tmp/add.kbc"
check "run with args" 0 "" "$KILN" run "$tmp/add.kbc" 40
[ "$LAST_OUT" = "42" ] || { echo "FAIL run with args: printed '$LAST_OUT'"; fails=$((fails + 1)); }
check "run float args" 0 "" "$KILN" run "$tmp/add.kbc" 1.5 2.5
[ "$LAST_OUT" = "4.0" ] || { echo "FAIL run float args: printed '$LAST_OUT'"; fails=$((fails + 1)); }
check "entry" 0 "" "$KILN" run "$tmp/add.kbc" --entry main 1 1
check "verify ok" 0 "" "$KILN" verify "$SRC/examples/mlp.kbc"
check "dis ok" 0 "" "$KILN" dis "$SRC/examples/mlp.kbc"
check "missing file" 1 "kiln:" "$KILN" run "$tmp/nope.kbc"
check "unknown entry" 1 "NameError" "$KILN" run "$tmp/add.kbc" --entry nope
printf '.func main()\n    LOAD_FASTT x\n.end\n' >"$tmp/bad.kbc"
check "unknown opcode" 1 "bad.kbc:2" "$KILN" verify "$tmp/bad.kbc"
check "bad input to run" 1 "unknown opcode" "$KILN" run "$tmp/bad.kbc"
printf '.func main()\n    LOAD_CONST 1\n    LOAD_CONST "a"\n    BINARY_OP +\n    RETURN_VALUE\n.end\n' >"$tmp/type.kbc"
check "runtime error has a traceback" 1 "Traceback (most recent call last)" "$KILN" run "$tmp/type.kbc"
check "no subcommand" 2 "" "$KILN"
check "bad option" 2 "" "$KILN" run --frobnicate

# The llvm backend's disk cache, across processes: a cold run compiles and
# writes an entry, a warm run loads it without compiling, a corrupted entry
# is rejected and recompiled (never loaded), and the directory is owner-only.
cache_run() {  # prints the cache outcome of the graph that has kernels
  KILN_CACHE_DIR="$tmp/cache" KILN_LOGS=output_code "$KILN" run --compile "$SRC/examples/demo_model.kbc" 2>&1 >/dev/null |
    grep -o "[0-9]* kernels, [0-9]* BLAS calls, [0-9]* eager steps ([a-z]*" | grep -v "^0 kernels" | grep -o "([a-z]*" | tr -d '(' | sort -u | tr '\n' ' '
}
expect_cache() {  # name, wanted outcome
  got=$(cache_run)
  if [ "$got" = "$2 " ]; then pass=$((pass + 1)); else echo "FAIL $1: cache outcome '$got', want '$2'"; fails=$((fails + 1)); fi
}
expect_cache "cold process compiles" compiled
expect_cache "warm process loads from disk" disk
mode=$(stat -c %a "$tmp/cache")
if [ "$mode" = "700" ]; then pass=$((pass + 1)); else echo "FAIL cache dir mode $mode, want 700"; fails=$((fails + 1)); fi
for f in "$tmp"/cache/*/*.kobj; do  # flip one payload byte in every entry
  size=$(stat -c %s "$f")
  printf '\xff' | dd of="$f" bs=1 seek=$((size - 9)) conv=notrunc status=none
done
expect_cache "corrupted entry is recompiled" compiled
expect_cache "and cached again" disk
rm -rf "$tmp"
echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
