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
#      then, from a copy of P without the MPI plugin and (where this machine
#      allows a mount namespace) with MPI's libraries made unloadable, runs
#      them as single ranks, and checks mpirun stops with a clear error;
#   4. builds a one-file program through pkg-config (the complete example of
#      docs/cpp_api.md) and runs it;
#   5. builds the wheel from the same build tree (checking nothing is
#      compiled again), installs it into a fresh venv and runs a compiled
#      model from outside the source tree, then kiln.distributed under
#      mpirun -np 2 (the MPI plugin beside kiln._C).
# libkiln.so and kiln._C never need MPI (no NEEDED entry, nothing ldd
# loads); only the plugin libkiln_mpi.so beside each links it.
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
# The libraries a binary loads (ldd), by name: paths left out, so a
# temporary directory's random name cannot match.
loads() { ldd "$1" | awk '{print $1}'; }
# The real files of what ldd resolves for $1, one per line, sorted.
load_files() { ldd "$1" | awk '$3 ~ /^\// {print $3}' | xargs -r realpath | sort -u; }

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
for f in bin/kiln lib/libkiln.so lib/libkiln_mpi.so lib/cmake/kiln/kilnConfig.cmake lib/cmake/kiln/kilnConfigVersion.cmake \
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
# MPI is the plugin's alone: libkiln (and the tool) neither need nor load it.
no_mpi "P/lib/libkiln.so's NEEDED" "$(readelf -d "$P/lib/libkiln.so" | grep NEEDED)"
no_mpi "what P/lib/libkiln.so loads (ldd)" "$(loads "$P/lib/libkiln.so")"
no_mpi "what P/bin/kiln loads (ldd)" "$(loads "$P/bin/kiln")"
plugin_needed=$(readelf -d "$P/lib/libkiln_mpi.so" | grep NEEDED)
grep -q 'libmpi' <<<"$plugin_needed" || fail "P/lib/libkiln_mpi.so does not link MPI: $plugin_needed"
echo "ok: bin/kiln, lib/libkiln.so (no MPI in NEEDED or ldd), lib/libkiln_mpi.so (links MPI), include/kiln/ ($(find "$P/include/kiln" -type f | wc -l) headers), lib/cmake/kiln/, lib/pkgconfig/kiln.pc"

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

step "3b. MPI only for multi-rank runs: P without its MPI plugin"
# A copy of P without the plugin; LD_LIBRARY_PATH puts its libkiln first
# (the examples' RUNPATH names P/lib, and LD_LIBRARY_PATH comes before a
# RUNPATH), and libkiln looks for the plugin beside itself.
PN=$WORK/prefix-no-plugin
cp -a "$P" "$PN" && rm "$PN/lib/libkiln_mpi.so"
loaded=$(LD_LIBRARY_PATH=$PN/lib ldd "$WORK/embed-build/kiln_embed_example")
grep -q "$PN/lib/libkiln.so" <<<"$loaded" || fail "LD_LIBRARY_PATH=$PN/lib: kiln_embed_example does not load the copy's libkiln: $loaded"
no_mpi "what kiln_embed_example loads (ldd)" "$(awk '{print $1}' <<<"$loaded")"
# MPI's libraries (those the plugin loads and libkiln does not) are made
# unloadable in a private mount namespace, each file bound over by
# /dev/null, where this machine allows one (root, unshare -m).
mpi_files=$(comm -23 <(load_files "$P/lib/libkiln_mpi.so") <(load_files "$P/lib/libkiln.so"))
grep -q 'libmpi' <<<"$mpi_files" || fail "ldd P/lib/libkiln_mpi.so does not resolve libmpi: $mpi_files"
cat >"$WORK/without_mpi.sh" <<'SH'
#!/usr/bin/env bash
# without_mpi.sh FILE... -- CMD...: runs CMD with each FILE bound over by /dev/null.
set -e
while [[ $1 != -- ]]; do mount --bind /dev/null "$1"; shift; done
shift
exec "$@"
SH
# mpi_free CMD...: CMD run as a single rank with no plugin, and without MPI's
# libraries where a mount namespace can be had.
if unshare -m --propagation private true 2>/dev/null; then
  # shellcheck disable=SC2086  # $mpi_files is a list of paths
  mpi_free() { LD_LIBRARY_PATH=$PN/lib unshare -m --propagation private bash "$WORK/without_mpi.sh" $mpi_files -- "$@"; }
  # The hiding works: P's own plugin (which links MPI) cannot load there.
  if mpi_free "$PYTHON" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$P/lib/libkiln_mpi.so" 2>"$WORK/hidden.err"; then
    fail "with MPI's libraries hidden, P/lib/libkiln_mpi.so still loads: the hiding does not work"
  fi
  hidden="MPI's libraries unloadable ($(wc -l <<<"$mpi_files") files: $(xargs -n1 basename <<<"$mpi_files" | tr '\n' ' '))"
else
  mpi_free() { LD_LIBRARY_PATH=$PN/lib "$@"; }
  hidden="MPI's libraries still on disk (no mount namespace here: unshare -m is refused)"
fi
(cd "$WORK" && mpi_free "$WORK/embed-build/kiln_embed_example" >embed-nompi.out 2>&1) \
  || { cat "$WORK/embed-nompi.out"; fail "kiln_embed_example without the plugin and MPI"; }
grep -q "all checks hold" "$WORK/embed-nompi.out" || fail "kiln_embed_example without MPI: $(cat "$WORK/embed-nompi.out")"
mkdir -p "$WORK/mr1n"
mr1n=$(mpi_free "$WORK/embed-build/kiln_multirank_example" "$WORK/mr1n" 2>&1) || fail "kiln_multirank_example without the plugin and MPI: $mr1n"
grep -q "rank 0 of 1: results correct" <<<"$mr1n" || fail "kiln_multirank_example without the plugin and MPI: $mr1n"
echo "ok: both programs run as a single rank without the plugin, $hidden"
if command -v mpirun >/dev/null; then
  # Under mpirun the missing plugin stops every rank with an error naming
  # the file it looked for; no rank hangs or goes on alone. Every rank runs
  # to its end (Open MPI would otherwise kill the rest at the first failure,
  # and then exits 0 whatever they did: a wrapper prints each rank's status).
  mkdir -p "$WORK/mr2n"
  rc=0
  LD_LIBRARY_PATH=$PN/lib OMPI_MCA_orte_abort_on_non_zero_status=0 timeout 120 \
    mpirun -x LD_LIBRARY_PATH -np 2 --oversubscribe --bind-to none \
    sh -c '"$0" "$1"; echo "rank exited $?"' "$WORK/embed-build/kiln_multirank_example" "$WORK/mr2n" \
    >"$WORK/mr2n.out" 2>&1 || rc=$?
  [[ $rc != 124 ]] || { cat "$WORK/mr2n.out"; fail "mpirun without the plugin hung"; }
  [[ $(grep -c "^rank exited [1-9]" "$WORK/mr2n.out") == 2 ]] || { cat "$WORK/mr2n.out"; fail "mpirun without the plugin: not both ranks failed"; }
  refused="loading the MPI plugin '$PN/lib/libkiln_mpi.so' failed: $PN/lib/libkiln_mpi.so: cannot open shared object file"
  [[ $(grep -cF "$refused" "$WORK/mr2n.out") == 2 ]] || { cat "$WORK/mr2n.out"; fail "mpirun without the plugin: not both ranks said: $refused"; }
  if grep -q "results correct" "$WORK/mr2n.out"; then cat "$WORK/mr2n.out"; fail "mpirun without the plugin: a rank ran on"; fi
  echo "ok: under mpirun -np 2 without the plugin both ranks stop: ...$refused"
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
# kiln._C does not link MPI; the plugin beside it does, and serves mpirun.
site=$("$WORK/venv/bin/python" -I -c 'import os, kiln; print(os.path.dirname(kiln.__file__))')
c_module=$(ls "$site"/_C*.so) || fail "no _C*.so in $site"
no_mpi "kiln._C's NEEDED" "$(readelf -d "$c_module" | grep NEEDED)"
no_mpi "what kiln._C loads (ldd)" "$(loads "$c_module")"
[[ -e $site/libkiln_mpi.so ]] || fail "the wheel has no kiln/libkiln_mpi.so beside kiln._C"
if command -v mpirun >/dev/null; then
  timeout 120 mpirun -np 2 --oversubscribe --bind-to none "$WORK/venv/bin/python" -I -c \
    'import kiln; r, n = kiln.distributed.init(); assert n == 2, n; print(f"rank {r} of {n}")' >"$WORK/py-mpi.out" 2>&1 \
    || { cat "$WORK/py-mpi.out"; fail "kiln.distributed.init() from the wheel under mpirun -np 2"; }
  [[ $(sort "$WORK/py-mpi.out" | tr '\n' ' ') == "rank 0 of 2 rank 1 of 2 " ]] || fail "kiln.distributed under mpirun -np 2: $(cat "$WORK/py-mpi.out")"
fi
echo "ok: $(basename "$wheel"); kiln._C without MPI, kiln/libkiln_mpi.so beside it"

echo
echo "install test: all passed"
