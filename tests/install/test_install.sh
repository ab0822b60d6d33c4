#!/usr/bin/env bash
# An installed kiln, used the way a new user would (issue 16), from a build
# tree that is already built: this script never compiles kiln itself.
#
#   tests/install/test_install.sh [BUILD_DIR]     (default: build; `make test` runs it)
#
# In a temporary directory it
#   1. runs `cmake --install BUILD --prefix P` and checks what lands in P;
#   2. compiles a translation unit that includes <kiln/kiln.h> with
#      `-I P/include` only and checks every header read is P's or the C++/C
#      standard library's (no LLVM, MPI, Python, spdlog, source tree);
#   3. builds a copy of examples/embed as its own CMake project through
#      find_package(kiln) and runs both programs (multirank under mpirun too);
#   4. builds a one-file program through pkg-config (the complete example of
#      docs/cpp_api.md) and runs it;
#   5. builds the wheel from the same build tree (checking nothing is
#      compiled again), installs it into a fresh venv and runs a compiled
#      model from outside the source tree.
# PYTHON (default python3) is the Python that builds the wheel (it needs
# scikit-build-core and pybind11: --no-build-isolation) and makes the venv.
# KEEP=1 keeps the temporary directory. Exit status 0 only if all passes.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
PYTHON=${PYTHON:-python3}
CXX=${CXX:-c++}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-install-test.XXXXXX")
if [[ ${KEEP:-0} == 1 ]]; then echo "install test: keeping $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
P=$WORK/prefix
export KILN_CACHE_DIR=$WORK/kiln-cache  # compiled kernels: never the user's cache
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset PYTHONPATH

step() { echo; echo "== install test: $*"; }
fail() { echo "install test FAILED: $*" >&2; exit 1; }
# Fails if any file named by a NEEDED entry or link line mentions MPI.
no_mpi() { if grep -qi 'mpi' <<<"$2"; then fail "$1 mentions MPI: $2"; fi; }

VERSION=$(sed -n 's/^project(kiln VERSION \([0-9]*\.[0-9]*\.[0-9]*\).*/\1/p' "$SRC/CMakeLists.txt")
[[ -n $VERSION ]] || fail "no project(kiln VERSION x.y.z) in $SRC/CMakeLists.txt"
IFS=. read -r MAJOR MINOR PATCH <<<"$VERSION"

# 0. The build tree is complete (`make test` built it): nothing to compile.
# A dry run through a copy of build.ninja: with the real name, ninja's dry
# run stops at "Re-running CMake" (the CONFIGURE_DEPENDS glob check always
# looks dirty) and never shows what it would compile.
NINJA=$(sed -n 's/^CMAKE_MAKE_PROGRAM:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
[[ $NINJA == *ninja* ]] || fail "$BUILD is not a Ninja build tree"
manifest=.install-test-$$.ninja
cp "$BUILD/build.ninja" "$BUILD/$manifest"
pending=$("$NINJA" -C "$BUILD" -f "$manifest" -n kiln kiln_shared _C) || { rm -f "$BUILD/$manifest"; fail "ninja -n: $pending"; }
rm -f "$BUILD/$manifest"
if grep -qE '(Building|Linking) ' <<<"$pending"; then
  fail "the build tree $BUILD is not up to date (this test never builds kiln; run make build):
$pending"
fi

step "1. cmake --install into $P"
cmake --install "$BUILD" --prefix "$P" >"$WORK/install.log" || { cat "$WORK/install.log"; fail "cmake --install"; }
for f in bin/kiln lib/libkiln.so lib/cmake/kiln/kilnConfig.cmake lib/cmake/kiln/kilnConfigVersion.cmake \
         lib/cmake/kiln/kilnTargets.cmake lib/pkgconfig/kiln.pc include/kiln/kiln.h include/kiln/version.h; do
  [[ -e $P/$f ]] || fail "P/$f is not installed"
done
[[ -z $(find "$P" -name '_C*.so') ]] || fail "the Python module was installed into the prefix (pip installs it)"
# The tool runs from the prefix, outside the tree: the VM and the compiled run agree.
cat >"$WORK/add.kbc" <<'KBC'
.func main(a, b)
    LOAD_GLOBAL ones
    LOAD_FAST a
    CALL 1
    LOAD_FAST b
    BINARY_OP *
    RETURN_VALUE
.end
KBC
(cd "$WORK" && "$P/bin/kiln" run add.kbc 3 2.5 >vm.out && "$P/bin/kiln" run --compile --backend eager add.kbc 3 2.5 >compiled.out)
cmp -s "$WORK/vm.out" "$WORK/compiled.out" || fail "P/bin/kiln: run and run --compile differ"
grep -q '2.5' "$WORK/vm.out" || fail "P/bin/kiln run printed: $(cat "$WORK/vm.out")"
no_mpi "kiln::kiln's link interface" "$(grep -E 'INTERFACE_LINK|IMPORTED_LINK' "$P"/lib/cmake/kiln/kilnTargets*.cmake || true)"
echo "ok: bin/kiln, lib/libkiln.so, include/kiln/ ($(find "$P/include/kiln" -type f | wc -l) headers), lib/cmake/kiln/, lib/pkgconfig/kiln.pc"

step "2. <kiln/kiln.h> with -I P/include only"
mkdir -p "$WORK/headers" && cd "$WORK/headers"
"$CXX" -std=c++20 -Wall -Wextra -Werror -fsyntax-only -I "$P/include" \
  -DEXPECT_MAJOR="$MAJOR" -DEXPECT_MINOR="$MINOR" -DEXPECT_PATCH="$PATCH" \
  -MD -MF deps.d "$SRC/tests/install/headers_only.cpp" -o /dev/null
# Every header read is P's or the standard library's: the headers that a
# translation unit including every C++20 standard header reads (libstdc++,
# GCC's, the C library's). Nothing else from /usr/include (spdlog, xxhash.h,
# ...) and nothing from the source or build tree.
"$PYTHON" - "$P/include" "$CXX" deps.d <<'PY'
import os, subprocess, sys
prefix_inc, cxx, deps = os.path.realpath(sys.argv[1]), sys.argv[2], sys.argv[3]

def read_deps(path):
    text = open(path).read().replace("\\\n", " ")
    return [os.path.realpath(f) for f in text.split(":", 1)[1].split()][1:]  # [0] is the source

# <execution> is left out: libstdc++'s pulls in TBB's headers when present.
STD = """algorithm any array atomic barrier bit bitset charconv chrono codecvt compare complex concepts
condition_variable coroutine deque exception filesystem format forward_list fstream functional future
initializer_list iomanip ios iosfwd iostream istream iterator latch limits list locale map memory
memory_resource mutex new numbers numeric optional ostream queue random ranges ratio regex
scoped_allocator semaphore set shared_mutex source_location span sstream stack stdexcept stop_token
streambuf string string_view syncstream system_error thread tuple type_traits typeindex typeinfo
unordered_map unordered_set utility valarray variant vector version cassert cctype cerrno cfenv cfloat
cinttypes climits clocale cmath csetjmp csignal cstdarg cstddef cstdint cstdio cstdlib cstring ctime
cuchar cwchar cwctype""".split()
with open("std.cpp", "w") as f:
    f.writelines(f"#if __has_include(<{h}>)\n#include <{h}>\n#endif\n" for h in STD)
subprocess.run([cxx, "-std=c++20", "-M", "-MF", "std.d", "std.cpp"], check=True)
standard = set(read_deps("std.d"))

files = read_deps(deps)
ours = [f for f in files if f.startswith(prefix_inc + "/kiln/")]
bad = [f for f in files if f not in standard and f not in ours]
if bad:
    sys.exit("install test FAILED: <kiln/kiln.h> reads headers that are neither installed nor the standard "
             "library's:\n  " + "\n  ".join(bad))
print(f"ok: {len(files)} headers read: {len(ours)} from P/include/kiln, the rest the C++/C standard library's")
PY

step "3. examples/embed as its own CMake project, through find_package(kiln)"
cp -r "$SRC/examples/embed" "$WORK/embed-src"  # nothing can reach back into the tree
cmake -S "$WORK/embed-src" -B "$WORK/embed-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$P" -DCMAKE_CXX_COMPILER="$CXX" >"$WORK/embed-configure.log" \
  || { cat "$WORK/embed-configure.log"; fail "configuring examples/embed"; }
grep -q "kiln_DIR:PATH=$P/lib/cmake/kiln" "$WORK/embed-build/CMakeCache.txt" || fail "find_package(kiln) did not find P"
cmake --build "$WORK/embed-build" >"$WORK/embed-build.log" || { cat "$WORK/embed-build.log"; fail "building examples/embed"; }
if grep -q -e "$SRC" -e "$BUILD" "$WORK/embed-build/build.ninja"; then fail "examples/embed's build refers to the source or build tree"; fi
no_mpi "examples/embed's compile and link lines" "$(grep -E '^ *(FLAGS|INCLUDES|LINK_LIBRARIES|LINK_FLAGS) =' "$WORK/embed-build/build.ninja")"
needed=$(readelf -d "$WORK/embed-build/kiln_embed_example" | grep NEEDED)
grep -q "libkiln.so.$MAJOR.$MINOR" <<<"$needed" || fail "kiln_embed_example does not link libkiln: $needed"
no_mpi "kiln_embed_example's NEEDED" "$needed"
# (Outputs are captured before grep -q: with pipefail, a writer killed by
# SIGPIPE when grep -q stops reading early would fail the check.)
loaded=$(ldd "$WORK/embed-build/kiln_embed_example")
grep -q "$P/lib/libkiln.so" <<<"$loaded" || fail "kiln_embed_example does not load P/lib/libkiln.so: $loaded"
(cd "$WORK" && "$WORK/embed-build/kiln_embed_example" >embed.out) || { cat "$WORK/embed.out"; fail "kiln_embed_example"; }
grep -q "all checks hold" "$WORK/embed.out" || fail "kiln_embed_example: $(cat "$WORK/embed.out")"
mkdir -p "$WORK/mr1"
mr1=$("$WORK/embed-build/kiln_multirank_example" "$WORK/mr1") || fail "kiln_multirank_example, single rank: $mr1"
grep -q "rank 0 of 1: results correct" <<<"$mr1" || fail "kiln_multirank_example, single rank: $mr1"
if command -v mpirun >/dev/null; then
  mkdir -p "$WORK/mr2"
  timeout 120 mpirun -np 2 --oversubscribe --bind-to none "$WORK/embed-build/kiln_multirank_example" "$WORK/mr2" >"$WORK/mr2.out" \
    || { cat "$WORK/mr2.out"; fail "kiln_multirank_example under mpirun -np 2"; }
  cmp -s "$WORK/mr2/rank0.txt" "$WORK/mr2/rank1.txt" || fail "the two ranks compiled different graphs or guards"
  [[ $(grep -c "results correct" "$WORK/mr2.out") == 2 ]] || fail "mpirun -np 2: $(cat "$WORK/mr2.out")"
  echo "ok: kiln_embed_example; kiln_multirank_example alone and under mpirun -np 2 (identical graphs and guards)"
else
  echo "ok: kiln_embed_example; kiln_multirank_example alone (no mpirun here)"
fi

step "4. a one-file program through pkg-config"
command -v pkg-config >/dev/null || fail "pkg-config is not installed (Debian: pkgconf)"
export PKG_CONFIG_PATH=$P/lib/pkgconfig
[[ $(pkg-config --modversion kiln) == "$VERSION" ]] || fail "pkg-config --modversion kiln: $(pkg-config --modversion kiln)"
flags=$(pkg-config --cflags --libs kiln)
no_mpi "pkg-config --cflags --libs kiln" "$flags"
# The program is docs/cpp_api.md's complete example, as the page shows it.
mkdir -p "$WORK/pc" && cd "$WORK/pc"
awk '/<!-- example:begin -->/ {on = 1; next} on && /^```cpp/ {code = 1; next} code && /^```/ {exit} code {print}' \
  "$SRC/docs/cpp_api.md" >app.cpp
[[ -s app.cpp ]] || fail "no complete example between <!-- example:begin --> and <!-- example:end --> in docs/cpp_api.md"
# shellcheck disable=SC2086  # $flags is a list of flags
"$CXX" -std=c++20 -Wall -Wextra -Werror app.cpp $flags -Wl,-rpath,"$(pkg-config --variable=libdir kiln)" -o app
./app >app.out || { cat app.out; fail "docs/cpp_api.md's example, built through pkg-config"; }
grep -q "^kiln $VERSION\$" app.out || fail "docs/cpp_api.md's example printed: $(cat app.out)"
[[ $(grep -c "backend: matches" app.out) == 2 ]] || fail "docs/cpp_api.md's example printed: $(cat app.out)"
echo "ok: docs/cpp_api.md's example; pkg-config --cflags --libs kiln = $flags"

step "5. the wheel, from the same build tree, in a fresh venv"
cd "$SRC"
"$PYTHON" -m pip wheel -v --no-build-isolation --no-deps -C build-dir="$BUILD" -w "$WORK/wheel" . >"$WORK/wheel.log" 2>&1 \
  || { tail -40 "$WORK/wheel.log"; fail "pip wheel"; }
# Nothing compiled or linked again: ninja found the module up to date.
grep -q 'ninja: no work to do' "$WORK/wheel.log" \
  || { grep -E '(Building|Linking) ' "$WORK/wheel.log"; fail "building the wheel compiled kiln again (above)"; }
wheel=$(ls "$WORK"/wheel/kiln-"$VERSION"-*.whl) || fail "no kiln-$VERSION wheel in $WORK/wheel"
"$PYTHON" -m venv "$WORK/venv"  # no --system-site-packages: the wheel and what it declares, nothing else
"$WORK/venv/bin/python" -m pip install -q --no-compile "$wheel" >"$WORK/pip-install.log" 2>&1 \
  || { cat "$WORK/pip-install.log"; fail "pip install the wheel into the fresh venv"; }
mkdir -p "$WORK/run" && cp "$SRC/tests/install/wheel_model.py" "$WORK/run/" && cd "$WORK/run"
"$WORK/venv/bin/python" -I wheel_model.py || fail "the compiled model from the installed wheel"
echo "ok: $(basename "$wheel")"

echo
echo "install test: all passed"
