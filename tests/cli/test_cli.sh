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

# Sets of strs in CPython's order without an embedder: kiln hashes a str
# with siphash13 and the zero key, which is CPython under PYTHONHASHSEED=0
# (runtime/base/hash.h), so `kiln run` prints what that CPython prints.
cat >"$tmp/sets.kbc" <<'KBC'
.func main()
  .locals s t
    LOAD_CONST "apple"
    LOAD_CONST "banana"
    LOAD_CONST "cherry"
    LOAD_CONST "date"
    LOAD_CONST "egg"
    LOAD_CONST "fig"
    BUILD_SET 6
    STORE_FAST s
    LOAD_FAST s
    LOAD_METHOD discard
    LOAD_CONST "cherry"
    CALL_METHOD 1
    POP_TOP
    LOAD_FAST s
    LOAD_METHOD add
    LOAD_CONST "grape"
    CALL_METHOD 1
    POP_TOP
    BUILD_SET 0
    LOAD_CONST frozenset({"x", "y", "z", "w", "caf\xe9", "€", "😀"})
    SET_UPDATE 1
    STORE_FAST t
    LOAD_FAST s
    LOAD_METHOD pop
    CALL_METHOD 0
    LOAD_FAST s
    LOAD_FAST t
    BINARY_OP |
    LOAD_FAST t
    BUILD_TUPLE 3
    RETURN_VALUE
.end
KBC
want=$(PYTHONHASHSEED=0 python3 -c '
s = set()
for w in ("apple", "banana", "cherry", "date", "egg", "fig"):
    s.add(w)
s.discard("cherry")
s.add("grape")
t = set()
t.update(frozenset(("x", "y", "z", "w", "caf\xe9", "€", "😀")))
print((s.pop(), s | t, t))')
for mode in "" "--compile"; do
  check "set order $mode" 0 "" "$KILN" run $mode "$tmp/sets.kbc"
  [ "$LAST_OUT" = "$want" ] || { echo "FAIL set order $mode: printed '$LAST_OUT', CPython (PYTHONHASHSEED=0) '$want'"; fails=$((fails + 1)); }
done

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
