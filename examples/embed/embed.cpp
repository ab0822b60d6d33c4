// embed.cpp: kiln from a C++ program, through the public header only.
//
// It assembles a small model written in KBC, builds the inputs by calling a
// KBC function, compiles `f(model, x)`, calls it twice (the first call
// traces, the second runs the cached entry), checks the results, and prints
// the result and the explain report. The exit status is 0 only if every
// check holds, so the tests run it (ctest: embed_example).
//
// The KBC below was written from this Python (docs/kbc.md is the format):
//
//   class Net(Module):
//       def __init__(self):
//           self.fc = Linear(4, 3)
//           self.act = ReLU()
//       def forward(self, x):
//           return self.act(self.fc(x))
//
//   def inputs():
//       manual_seed(7)
//       return (Net(), randn(2, 4))
//
//   def f(model, x):
//       return model(x) * 2
//
//   def by_hand(model, x):        # the same maths without the module calls
//       y = x @ model.fc.weight.transpose(0, 1) + model.fc.bias
//       return where(y > 0, y, 0.0) * 2
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

namespace {

const char* kModel = R"(
.class Net(Module)
.func __init__(self)
  LOAD_GLOBAL Linear
  LOAD_CONST 4
  LOAD_CONST 3
  CALL 2
  LOAD_FAST self
  STORE_ATTR fc
  LOAD_GLOBAL ReLU
  CALL 0
  LOAD_FAST self
  STORE_ATTR act
  LOAD_CONST None
  RETURN_VALUE
.end
.func forward(self, x)
  LOAD_FAST self
  LOAD_METHOD act
  LOAD_FAST self
  LOAD_METHOD fc
  LOAD_FAST x
  CALL_METHOD 1
  CALL_METHOD 1
  RETURN_VALUE
.end
.endclass

.func inputs()
  LOAD_GLOBAL manual_seed
  LOAD_CONST 7
  CALL 1
  POP_TOP
  LOAD_GLOBAL Net
  CALL 0
  LOAD_GLOBAL randn
  LOAD_CONST 2
  LOAD_CONST 4
  CALL 2
  BUILD_TUPLE 2
  RETURN_VALUE
.end

.func f(model, x)
  LOAD_FAST model
  LOAD_FAST x
  CALL 1
  LOAD_CONST 2
  BINARY_OP *
  RETURN_VALUE
.end

.func by_hand(model, x)
  .locals y
  LOAD_FAST x
  LOAD_FAST model
  LOAD_ATTR fc
  LOAD_ATTR weight
  LOAD_METHOD transpose
  LOAD_CONST 0
  LOAD_CONST 1
  CALL_METHOD 2
  BINARY_OP @
  LOAD_FAST model
  LOAD_ATTR fc
  LOAD_ATTR bias
  BINARY_OP +
  STORE_FAST y
  LOAD_GLOBAL where
  LOAD_FAST y
  LOAD_CONST 0
  COMPARE_OP >
  LOAD_FAST y
  LOAD_CONST 0.0
  CALL 3
  LOAD_CONST 2
  BINARY_OP *
  RETURN_VALUE
.end
)";

int failures = 0;

void check(bool ok, const std::string& what) {
  std::cout << (ok ? "ok:     " : "FAILED: ") << what << "\n";
  if (!ok) ++failures;
}

// The tensor's elements as doubles, whatever its strides.
std::vector<double> elements(const kiln::Tensor& t) {
  kiln::Tensor c = t.contiguous();
  std::vector<double> out;
  for (int64_t i = 0; i < c.numel(); ++i) out.push_back(double(c.data<float>()[i]));
  return out;
}

bool all_close(const kiln::Tensor& a, const kiln::Tensor& b, double tol) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  std::vector<double> x = elements(a), y = elements(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (std::fabs(x[i] - y[i]) > tol * (1 + std::fabs(y[i]))) return false;
  return true;
}

}  // namespace

int main() {
  try {
    kiln::Program program = kiln::assemble(kModel, "embed_model.kbc");

    // The inputs come from KBC too: inputs() returns (model, x). Compiling
    // it is fine even though it breaks the graph (manual_seed, module
    // creation): the breaks run on the VM.
    kiln::Value pair = kiln::compile(program.global("inputs"))({});
    std::vector<kiln::Value> args = kiln::runtime::to_vector(pair);
    check(args.size() == 2, "inputs() returned (model, x)");
    if (args.size() != 2) return 1;

    // Compile f; the first call traces and compiles, the second one hits
    // the cached entry (same model version, same tensor metadata).
    kiln::CompiledFunction f = kiln::compile(program.global("f"));
    kiln::Value first = f(args);
    kiln::Value second = f(args);
    const std::string shown = kiln::runtime::repr(first);
    check(first.is(kiln::runtime::Kind::Tensor), "f returned a tensor");
    check(kiln::runtime::repr(second) == shown, "the cached call gives the same result");

    // fullgraph=true: f must trace into a single graph, or this throws.
    kiln::Options strict;
    strict.fullgraph = true;
    kiln::Value third = kiln::compile(program.global("f"), strict)(args);
    check(kiln::runtime::repr(third) == shown, "fullgraph=true compiles f without a break");

    // An independent check: the same maths spelled out with tensor ops
    // (matmul, add, where) instead of the Linear and ReLU modules.
    kiln::Value reference = kiln::compile(program.global("by_hand"))(args);
    check(all_close(first.as_tensor(), reference.as_tensor(), 1e-5), "f agrees with the hand-written maths");

    // explain: compiles f afresh, calls it once and reports.
    kiln::ExplainReport report = kiln::explain(program.global("f"), args);
    check(report.error.empty(), "explain's call raised no error");
    check(kiln::runtime::repr(report.result) == shown, "explain's result is the compiled result");
    check(report.graph_count == 1, "f is one graph");
    check(report.graph_break_count == 0, "f has no graph break");

    std::cout << "\nf(model, x) =\n" << shown << "\n\n" << report.str();
  } catch (const std::exception& e) {
    std::cerr << "embed: error: " << e.what() << "\n";
    return 1;
  }
  std::cout << (failures == 0 ? "\nall checks hold\n" : "\nsome checks FAILED\n");
  return failures == 0 ? 0 : 1;
}
