// tests/install/test_install.sh compiles this with `-I <prefix>/include` as
// the only include path (no source tree, no LLVM, MPI or Python include
// directory) and checks that every header it reads is either installed
// under <prefix>/include/kiln/ or the C++/C standard library's.
#include <kiln/kiln.h>

// The version macros are the project's version (passed in by the script).
static_assert(KILN_VERSION_MAJOR == EXPECT_MAJOR && KILN_VERSION_MINOR == EXPECT_MINOR &&
              KILN_VERSION_PATCH == EXPECT_PATCH);
static_assert(KILN_VERSION == EXPECT_MAJOR * 10000 + EXPECT_MINOR * 100 + EXPECT_PATCH);

// The whole embedding API is declared (names docs/cpp_api.md documents).
[[maybe_unused]] static kiln::CompiledFunction (*compile_fn)(const kiln::Value&, kiln::Options) = &kiln::compile;
[[maybe_unused]] static kiln::ExplainReport (*explain_fn)(const kiln::Value&, const std::vector<kiln::Value>&,
                                                          kiln::Options) = &kiln::explain;
[[maybe_unused]] static kiln::Program (*assemble_fn)(std::string_view, std::string) = &kiln::assemble;
[[maybe_unused]] static void (*reset_fn)() = &kiln::reset;
[[maybe_unused]] static int (*rank_fn)() = &kiln::distributed::rank;
