// multirank.cpp: a multi-rank kiln program through the public header only.
//
//   mpirun -np 2 kiln_multirank_example OUT_DIR
//
// Every rank compiles the same KBC function on an input whose row count
// depends on the rank (4 + rank). With the compiler collective on, every
// rank must end with the same graph and guards (the row count dynamic on
// all of them): each rank writes its explain report's graphs and guards to
// OUT_DIR/rank<r>.txt, and the test compares the files. Results are checked
// on every rank against the closed form. Exit status 0 only if all holds.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

namespace {

// def f(x): return relu(x * 2.0) + 1.0   (x = ones(n, 3): every element is 3)
const char* kProgram = R"(
.func f(x)
    LOAD_GLOBAL relu
    LOAD_FAST x
    LOAD_CONST 2.0
    BINARY_OP *
    CALL 1
    LOAD_CONST 1.0
    BINARY_OP +
    RETURN_VALUE
.end

.func ones_of(n)
    LOAD_GLOBAL ones
    LOAD_FAST n
    LOAD_CONST 3
    CALL 2
    RETURN_VALUE
.end
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    kiln::distributed::init();
    const int rank = kiln::distributed::rank();
    kiln::Program p = kiln::assemble(kProgram, "multirank.kbc");
    kiln::Options options;
    options.enable_compiler_collectives = true;
    options.enable_guard_collectives = true;
    kiln::CompiledFunction ones_of = kiln::compile(p.global("ones_of"), [] {
      kiln::Options o;
      o.backend = "eager";  // builds inputs only; no collectives needed
      return o;
    }());
    kiln::Value x = ones_of({kiln::Value::integer(4 + rank)});
    kiln::ExplainReport report = kiln::explain(p.global("f"), {x}, options);
    if (!report.error.empty()) throw std::runtime_error(report.error);
    kiln::Tensor y = report.result.as_tensor();
    bool ok = y.sizes() == kiln::runtime::Shape{4 + rank, 3};
    for (int64_t i = 0; ok && i < y.numel(); ++i) ok = std::fabs(y.item_as_double({i / 3, i % 3}) - 3.0) < 1e-6;
    std::ofstream out(std::string(argv[1]) + "/rank" + std::to_string(rank) + ".txt");
    for (const auto& g : report.graphs) out << g << "\n";
    for (const auto& g : report.guards) out << g << "\n";
    std::printf("rank %d of %d: %s, %d graph(s)\n", rank, kiln::distributed::world_size(),
                ok ? "results correct" : "WRONG RESULTS", report.graph_count);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multirank: %s\n", e.what());
    return 1;
  }
}
