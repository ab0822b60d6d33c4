# KILN_SANITIZE=ON: the whole tree (core libraries, tools, tests, kiln._C)
# built with AddressSanitizer + UndefinedBehaviorSanitizer, for `make
# sanitize` (build-asan/). The normal build/ tree never sets it.
#
# - Undefined behaviour aborts at the first report
#   (-fno-sanitize-recover=undefined), so a test cannot pass over one.
# - -O1 (after the build type's flags, so it wins), as ASan's documentation
#   advises: tests at a usable speed, stacks still readable with
#   -fno-omit-frame-pointer. Build it as Debug: RelWithDebInfo would define
#   NDEBUG and switch kiln's assertions off.
# - Only kiln's code is instrumented: libLLVM, MPI, OpenBLAS, CPython and
#   the kernels LLVM compiles at run time are not, so a bad access inside
#   them is found only where kiln's own code makes it.
# - Run-time options (where reports go, leak suppressions, preloading the
#   runtime into an uninstrumented python) are in tests/sanitize/: run.sh,
#   sanitized-python.in (python/CMakeLists.txt makes <build>/sanitized-python),
#   the .supp files (tests/CMakeLists.txt gives the MPI tests theirs).
option(KILN_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
if(KILN_SANITIZE)
  if(CMAKE_BUILD_TYPE MATCHES "Rel")
    message(FATAL_ERROR "KILN_SANITIZE: configure with -DCMAKE_BUILD_TYPE=Debug (${CMAKE_BUILD_TYPE} defines NDEBUG: kiln's assertions would be off)")
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # clang would need -shared-libasan and its own runtime's name below.
    message(FATAL_ERROR "KILN_SANITIZE is wired for GCC (found ${CMAKE_CXX_COMPILER_ID})")
  endif()
  # The runtimes an uninstrumented python must preload before it can load
  # the sanitized kiln._C (tests/sanitize/sanitized-python.in says why).
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE KILN_ASAN_RUNTIME OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so.6
                  OUTPUT_VARIABLE KILN_LIBSTDCXX_RUNTIME OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT EXISTS "${KILN_ASAN_RUNTIME}")
    message(FATAL_ERROR "KILN_SANITIZE: ${CMAKE_CXX_COMPILER} has no libasan.so (Debian: libasan8)")
  endif()
  set(KILN_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined)
  add_compile_options(${KILN_SANITIZE_FLAGS} -fno-omit-frame-pointer -O1 -g)
  add_link_options(${KILN_SANITIZE_FLAGS})
endif()
