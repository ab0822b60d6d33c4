# KILN_FUZZ=ON: the libFuzzer targets of tests/fuzz/ in a tree of their own
# (build-fuzz/, `make fuzz`; `make test` runs each for a few seconds). The
# core libraries and the targets are built with clang's coverage
# instrumentation for libFuzzer plus AddressSanitizer and
# UndefinedBehaviorSanitizer; nothing else of the project is configured
# (no Python module, tools, Catch2 tests, benchmarks or MPI plugin), so the
# tree costs only what the targets need.
#
# - Undefined behaviour aborts at the first report
#   (-fno-sanitize-recover=undefined): libFuzzer then saves the input.
# - -O1 as cmake/sanitize.cmake does (ASan's advice); assertions stay on.
# - -gline-tables-only: symbolized reports at a fraction of -g's build cost.
# - Only kiln's code is instrumented: libLLVM, OpenBLAS and the kernels LLVM
#   compiles at run time are not.
option(KILN_FUZZ "Build the libFuzzer targets (tests/fuzz) with ASan+UBSan; needs clang" OFF)
# KILN_FUZZ_COVERAGE=ON (with KILN_FUZZ): the same targets with clang's
# source-based coverage instead of the sanitizers, to measure which lines a
# fuzz corpus reaches (tests/fuzz/coverage.sh, build-fuzz-cov/).
option(KILN_FUZZ_COVERAGE "Fuzz targets with source-based coverage instead of sanitizers" OFF)
if(KILN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KILN_FUZZ needs clang (libFuzzer); configure with -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_C_COMPILER=clang-19 (found ${CMAKE_CXX_COMPILER_ID})")
  endif()
  if(KILN_SANITIZE)
    message(FATAL_ERROR "KILN_FUZZ and KILN_SANITIZE are separate trees (build-fuzz/, build-asan/)")
  endif()
  # -fno-sanitize=function: UBSan's check of indirect calls reads a type hash
  # stored before the callee's first instruction; kernels LLVM compiles at
  # run time and OpenBLAS's dlsym'd functions have none, and a kernel at the
  # start of a page made the check itself fault (found by tests/fuzz).
  set(KILN_FUZZ_SANITIZERS -fsanitize=address,undefined -fno-sanitize=function -fno-sanitize-recover=undefined)
  if(KILN_FUZZ_COVERAGE)
    set(KILN_FUZZ_SANITIZERS -fprofile-instr-generate -fcoverage-mapping)
  endif()
  # -Wno-deprecated-declarations: libstdc++ 12's <algorithm> uses get_temporary_buffer, which
  # clang 19 flags inside the system header on every stable_sort.
  add_compile_options(${KILN_FUZZ_SANITIZERS} -fsanitize=fuzzer-no-link -fno-omit-frame-pointer -O1 -gline-tables-only
                      -Wno-deprecated-declarations)
  add_link_options(${KILN_FUZZ_SANITIZERS})
  # The object census (runtime/semantics/census.h): the leak check of the targets that
  # run programs, and of tests/fuzz/census_test.cpp. Every object carries
  # two links and a serial here; a normal build's objects do not.
  add_compile_definitions(KILN_OBJECT_CENSUS)
endif()
